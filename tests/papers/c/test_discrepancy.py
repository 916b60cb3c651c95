"""Discrepancy (Def 3.1): T_Index's measured gaps match the closed form; Theorem 3.2's
Index bound holds for the minimum over inputs; Retrieval without RoPE keeps its gap."""

from __future__ import annotations

import math

import pytest
import torch

from lens_possym.errors import InvalidSelectionError
from lens_possym.papers.c.discrepancy import (
    head_discrepancy,
    index_bound,
    index_bound_table,
    index_discrepancy,
    index_gaps,
    retrieval_bound,
    top2_gap,
)
from lens_possym.papers.c.constructions import t_index_model, t_retrieval_model
from lens_possym.papers.c.tasks import LetterTask, NumberTask

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.mark.parametrize("length, theta", [(17, 0.8), (40, 0.8), (30, 0.3)])
def test_t_index_discrepancy_matches_its_closed_form(length, theta):
    task = NumberTask(max_hops=1, length=length)
    model, _ = t_index_model(task, theta, amplitude=1.0)
    batch = task.test_set(200)
    measured = head_discrepancy(model, batch.tokens)
    sigma = length - 1 - batch.answer_pos                     # the query's offset
    assert torch.allclose(measured.gaps, index_gaps(theta, length, sigma), atol=1e-6)
    offsets = sorted(set(sigma.tolist()))
    assert math.isclose(measured.max, index_discrepancy(theta, length, offsets), abs_tol=1e-6)


def test_closed_form_against_brute_force():
    theta, n = 0.8, 23
    for sigma in (1, 7, 22):
        target = n - 1 - sigma
        logits = [math.cos(((n - 1) - j - sigma) * theta) for j in range(n)]
        best = max(v for j, v in enumerate(logits) if j != target)
        assert math.isclose(float(index_gaps(theta, n, [sigma])[0]), 1 - best, abs_tol=1e-12)


def test_index_bound_holds_for_the_minimum_over_inputs():
    rows = index_bound_table(0.8, range(2, 400))
    assert all(r["min_holds"] for r in rows)
    assert all(r["delta_min"] <= r["delta_max"] for r in rows)
    assert index_bound(0.8, 3) == 1 - math.cos(0.8)
    assert math.isclose(index_bound(0.8, 100), 2 * math.pi ** 2 / 100 ** 2)


def test_retrieval_without_rope_keeps_its_gap_at_every_length():
    omega = 2 * math.pi / 8
    for length in (17, 60):
        task = LetterTask(max_hops=1, length=length)
        model, _ = t_retrieval_model(task, 0.0, amplitude=1.0)
        d = head_discrepancy(model, task.test_set(64).tokens)
        assert math.isclose(d.max, 1 - math.cos(omega), abs_tol=1e-5)
        assert math.isclose(retrieval_bound(0.0, 8, length), 1 - math.cos(omega))
    shrinking = [head_discrepancy(*_retrieval(length, 0.0027)).min for length in (17, 100)]
    assert shrinking[1] < shrinking[0]


def _retrieval(length, theta):
    task = LetterTask(max_hops=1, length=length)
    model, _ = t_retrieval_model(task, theta, amplitude=1.0)
    return model, task.test_set(64).tokens


def test_bad_inputs_are_refused():
    with pytest.raises(InvalidSelectionError, match="at least 2 keys"):
        top2_gap(torch.zeros(3, 1))
    with pytest.raises(InvalidSelectionError, match="offsets must lie"):
        index_gaps(0.8, 10, [10])
    with pytest.raises(InvalidSelectionError, match="reduce"):
        index_discrepancy(0.8, 10, reduce="mean")


def _brute_gaps(pattern_rows) -> list[float]:
    """Top-2 gap of each row by sorting, one row at a time (softmax is shift-invariant, so
    the gap of log-attention is the gap of the logits)."""
    out = []
    for row in pattern_rows.tolist():
        logs = sorted((math.log(a) for a in row if a > 0), reverse=True)
        out.append(logs[0] - logs[1])
    return out


def test_trained_discrepancy_max_and_min_against_brute_force(tiny_multihop_run):
    """Def 3.1's max and Lemma F.1's min of a trained GPT-J's heads, from lens-possym's
    decomposition, against a loop over the model's own attention patterns."""
    from lens_possym.papers.c.discrepancy import LayerGaps, layer_gaps

    _, model, task = tiny_multihop_run
    bridge = model.bridge(n_positions=40)
    gaps = layer_gaps(bridge, task, [17, 40], n_inputs=12, seed=3)
    assert gaps.max.shape == (2, 2, 1)
    for i, n in enumerate((17, 40)):
        tokens = task.at_length(n).test_set(12, seed=3).tokens
        _, cache = bridge.run_with_cache(tokens, names_filter=lambda name: "hook_pattern" in name)
        for layer in range(2):
            brute = _brute_gaps(cache[f"blocks.{layer}.attn.hook_pattern"][:, 0, -1].double())
            assert float(gaps.max[i, layer, 0]) == pytest.approx(max(brute), abs=2e-5)
            assert float(gaps.min[i, layer, 0]) == pytest.approx(min(brute), abs=2e-5)
            assert float(gaps.mean[i, layer, 0]) == pytest.approx(sum(brute) / 12, abs=2e-5)
    ratio = gaps.min_ratio(40, 17)
    assert torch.allclose(ratio, gaps.min[1] / gaps.min[0])
    with pytest.raises(InvalidSelectionError, match="no gaps at length 300"):
        gaps.min_ratio(300, 17)
    assert LayerGaps.from_dict(gaps.to_dict()).lengths == [17, 40]


def test_index_bound_over_the_task_offsets():
    """Over the offsets a 1-hop Number prompt uses (9..16) the max is the max over those
    offsets' closed-form gaps, never above the max over all offsets."""
    from lens_possym.papers.c.discrepancy import task_offsets

    offsets = task_offsets(8)
    assert offsets == list(range(9, 17))
    table = index_bound_table(0.8, range(17, 120), offsets)
    full = index_bound_table(0.8, range(17, 120))
    for row, whole in zip(table, full):
        n = row["n"]
        brute = max(1 - max(math.cos(t * 0.8) for t in range(-s, n - s) if t != 0)
                    for s in offsets)
        assert row["delta_max"] == pytest.approx(brute, abs=1e-12)
        assert row["delta_max"] <= whole["delta_max"] + 1e-12
        assert row["delta_min"] >= whole["delta_min"] - 1e-12
