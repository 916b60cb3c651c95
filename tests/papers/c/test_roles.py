"""Head roles: read from attention, confirmed by ablation and patching, on heads whose role
is known by construction (T_Index, T_Retrieval) and on a trained GPT-J."""

from __future__ import annotations

import pytest
import torch

from lens_possym.errors import InvalidSelectionError
from lens_possym.papers.c.constructions import t_index_model, t_retrieval_model
from lens_possym.papers.c.roles import ROLES, attention_roles, causal_roles, corrupt_answers
from lens_possym.papers.c.tasks import LetterTask, NumberTask

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.mark.parametrize("task, build, role", [
    (NumberTask(max_hops=1), lambda t: t_index_model(t, 0.8), "Selective Index"),
    (LetterTask(max_hops=1), lambda t: t_retrieval_model(t, 0.0), "Retrieval"),
], ids=["t_index", "t_retrieval"])
def test_constructions_get_their_role_and_it_is_causal(task, build, role):
    model, _ = build(task)
    batch = task.test_set(48)
    roles = attention_roles(model, task, batch)
    assert roles.labels == [[role]] and float(roles.hop[0, 0]) > 0.99
    causal = causal_roles(model, task, batch)
    assert causal.clean_accuracy_by_hops == [1.0]
    assert float(causal.ablated_accuracy_by_hops[0, 0, 0]) < 0.2      # the head is needed
    assert causal.corrupted_accuracy == 0.0
    assert float(causal.restore[0, 0, 0]) == 1.0                        # and sufficient
    assert causal.chain_restore()[0] == 1.0


def test_roles_of_a_trained_model_are_well_formed(tiny_multihop_run):
    _, model, task = tiny_multihop_run
    batch = task.test_set(32)
    bridge = model.bridge()
    roles = attention_roles(bridge, task, batch)
    assert roles.hop.shape == (2, 1)
    assert all(label in ROLES for row in roles.labels for label in row)
    assert ((roles.hop >= 0) & (roles.hop + roles.self_share <= 1 + 1e-5)).all()
    causal = causal_roles(bridge, task, batch)
    assert causal.restore.shape == (4, 2, 4)
    assert torch.isnan(causal.restore[0, :, 1:]).all()                  # k >= h is undefined
    assert not torch.isnan(causal.restore[3]).any()


@pytest.mark.parametrize("task", [NumberTask(), LetterTask()], ids=lambda t: t.name)
def test_corruption_changes_only_the_answer_value(task):
    batch = task.test_set(64)
    bad = corrupt_answers(task, batch)
    differs = bad.tokens != batch.tokens
    assert differs.sum(1).tolist() == [1] * 64
    assert (differs.float().argmax(1) == batch.answer_pos).all()
    hops, path = task.hop_path(bad.tokens)
    assert torch.equal(path, task.hop_path(batch.tokens)[1])            # same path
    assert torch.equal(task.solve(bad.tokens)[0], bad.answers)
    assert (bad.answers != batch.answers).all()


def test_bad_threshold_is_refused():
    task = NumberTask(max_hops=1)
    model, _ = t_index_model(task, 0.8)
    with pytest.raises(InvalidSelectionError, match="threshold"):
        attention_roles(model, task, task.test_set(8), threshold=0.0)
