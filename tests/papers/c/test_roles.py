"""Head roles: read from attention, confirmed by ablation and patching, on heads whose role
is known by construction (T_Index, T_Retrieval) and on a trained GPT-J."""

from __future__ import annotations

import pytest
import torch

from lens_possym.errors import InvalidSelectionError
from lens_possym.papers.c.constructions import (
    t_index_chain_model,
    t_index_model,
    t_retrieval_chain_model,
    t_retrieval_model,
)
from lens_possym.papers.c.roles import (
    ROLES,
    attention_roles,
    causal_roles,
    corrupt_answers,
    label_roles,
    schedule_share,
)
from lens_possym.papers.c.tasks import LetterTask, NumberTask

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.mark.parametrize("task, build, role", [
    (NumberTask(max_hops=1), lambda t: t_index_model(t, 0.8), "Index"),
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
    assert roles.hop.shape == (2, 1) and roles.hop_by_stop.shape == (2, 1, 4, 4)
    assert all(label in ROLES for row in roles.labels for label in row)
    assert ((roles.hop >= 0) & (roles.hop <= 1 + 1e-5)).all()
    assert ((roles.reflexive >= 0) & (roles.reflexive <= 1 + 1e-5)).all()
    # hop and answer mass from one stop are parts of one distribution
    both = roles.hop_by_stop + roles.answer_by_stop
    last = torch.arange(4)
    assert (both[:, :, last, :].nan_to_num(0) <= 2 + 1e-5).all()
    assert torch.isnan(roles.hop_by_stop[:, :, 0, 1:]).all()
    causal = causal_roles(bridge, task, batch)
    assert causal.restore.shape == (4, 2, 4)
    assert torch.isnan(causal.restore[0, :, 1:]).all()                  # k >= h is undefined
    assert not torch.isnan(causal.restore[3]).any()


def test_the_ablation_is_each_head_mean_ablated_alone(tiny_multihop_run):
    """causal_roles' ablated accuracies (through the core's head_importance) equal the
    written-out loop: one head mean-ablated per position over the same prompts."""
    from lens_possym.interventions import ablate_heads

    _, model, task = tiny_multihop_run
    batch = task.test_set(48)
    bridge = model.bridge()
    hops, _ = task.hop_path(batch.tokens)
    expected = torch.zeros(2, 1, task.max_hops)
    for layer in range(2):
        with ablate_heads(bridge, f"{layer}.0", mode="mean", reference=batch.tokens,
                          per_position=True):
            ok = (bridge(batch.tokens)[:, -1].argmax(-1) == batch.answers).float()
        expected[layer, 0] = torch.tensor([
            float(ok[hops == h].mean()) if (hops == h).any() else float("nan")
            for h in range(1, task.max_hops + 1)])
    got = causal_roles(bridge, task, batch).ablated_accuracy_by_hops
    assert torch.equal(got.nan_to_num(-1), expected.nan_to_num(-1))


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


def _pattern_hook(layer: int, path, hops, *, last_row: str):
    """A hand-built head for ``blocks.{layer}``: every query attends to itself, except the
    last token, which attends to ``p_1`` (``last_row="hop"``: the last hop of the chain),
    to the answer position ``p_h`` (``"answer"``) or to itself (``"self"``)."""
    rows = torch.arange(len(hops))

    def hook(pattern, hook):
        n = pattern.shape[-1]
        new = torch.zeros_like(pattern)
        new[:, :, torch.arange(n), torch.arange(n)] = 1.0
        new[:, :, -1, :] = 0.0
        target = {"hop": path[:, 1], "answer": path[rows, hops], "self": path[:, 0]}[last_row]
        new[rows, :, -1, target] = 1.0
        return new

    return (f"blocks.{layer}.attn.hook_pattern", hook)


def test_an_index_head_on_the_last_hop_is_labelled_index():
    """Layer 3 of a 4-layer T_Index chain, rewritten to hop only from the query (the last
    hop of 4-hop prompts, as Number's L3): labelled Index on the schedule ℓ = h-1-k,
    though its hop share averaged over all stops is far below the threshold."""
    task = NumberTask()
    model, _ = t_index_chain_model(task, 0.8)
    batch = task.test_set(96)
    hops, path = task.hop_path(batch.tokens)
    roles = attention_roles(model, task, batch,
                            fwd_hooks=[_pattern_hook(3, path, hops, last_row="hop")])
    assert [row[0] for row in roles.labels] == ["Index"] * 4
    assert float(roles.hop[3, 0]) == pytest.approx(1.0)
    assert float(roles.hop_by_stop[3, 0, 3, 0]) == pytest.approx(1.0)        # h = 4, k = 0
    stops = roles.hop_by_stop[3, 0]
    assert float(stops[torch.isfinite(stops)].mean()) < 0.5                   # the old mean
    # layers past max_hops have no schedule: their hop share is nan
    wide, _ = t_index_chain_model(task, 0.8, n_layers=6)
    assert torch.isnan(attention_roles(wide, task, batch).hop[4:]).all()


@pytest.mark.parametrize("last_row, label", [("answer", "other"), ("self", "Reflexive")])
def test_a_head_reading_the_answer_position_is_not_reflexive(last_row, label):
    """Layer 5 of a 6-layer Retrieval chain rewritten so the query reads the answer
    position directly (Letter's direct answer reads in L4-L8): not Reflexive; the same head
    reading itself is."""
    task = LetterTask()
    model, _ = t_retrieval_chain_model(task, 0.0, n_layers=6)
    batch = task.test_set(96)
    hops, path = task.hop_path(batch.tokens)
    roles = attention_roles(model, task, batch,
                            fwd_hooks=[_pattern_hook(5, path, hops, last_row=last_row)])
    assert roles.labels[5] == [label]
    expected = 0.0 if last_row == "answer" else 1.0
    assert float(roles.reflexive[5, 0]) == pytest.approx(expected, abs=1e-6)
    assert float(roles.stop_mass[5, 0, 3, 4]) == pytest.approx(1.0 - expected, abs=1e-6)
    assert [row[0] for row in roles.labels[:4]] == ["Retrieval"] * 4       # the chain itself


def test_schedule_share_and_labels_by_hand():
    H = 4
    hop_by_stop = torch.full((6, 1, H, H), float("nan"))
    for h in range(1, H + 1):
        for k in range(h):
            hop_by_stop[:, 0, h - 1, k] = 0.1
    hop_by_stop[2, 0, 2, 0] = 1.0          # layer 2: h = 3, k = 0 on schedule
    hop_by_stop[2, 0, 3, 1] = 0.6          # layer 2: h = 4, k = 1 on schedule
    share = schedule_share(hop_by_stop)
    expected_l2 = (1.0 + 0.6) / 2
    assert float(share[2, 0]) == pytest.approx(expected_l2)
    assert float(share[0, 0]) == pytest.approx(0.1) and torch.isnan(share[4:]).all()
    reflexive = torch.tensor([[0.0], [0.9], [0.0], [0.2], [0.7], [0.1]])
    pos = torch.tensor([[0.9]] * 6)
    sym = torch.tensor([[0.1]] * 6)
    sym[2, 0] = 0.95
    labels = label_roles(share, reflexive, pos, sym)
    assert [r[0] for r in labels] == ["other", "Reflexive", "Retrieval", "other", "Reflexive",
                                      "other"]
