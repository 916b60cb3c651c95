"""Learning dynamics: the purity classifier on synthetic score trajectories; scores of a
run's checkpoints (exact against re-run), entropy, accuracy per hop, path scores."""

from __future__ import annotations

import math

import pytest
import torch

from lens_possym.errors import InvalidSelectionError, TrainingError
from lens_possym.papers.c.dynamics import (
    ScoreTrajectory,
    attention_entropy,
    checkpoint_paths,
    path_scores,
    purity,
    score_run,
)

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _trajectories():
    """Five heads over six checkpoints: (pos, sym) per head."""
    steps = [0, 100, 200, 300, 400, 500]
    heads = {
        0: [(0.9, 0.9)] * 2 + [(0.96, 0.03)] * 4,                       # positional at 200
        1: [(0.9, 0.9)] * 4 + [(0.02, 0.97)] * 2,                       # symbolic at 400
        2: [(0.9, 0.9)] * 6,                                            # never pure
        3: [(0.5, 0.5), (0.95, 0.08), (0.6, 0.6), (0.6, 0.6), (0.6, 0.6), (0.6, 0.6)],
        4: [(0.9, 0.9)] * 3 + [(0.07, 0.93)] * 3,                       # symbolic at γ=0.1 only
    }
    pos = torch.tensor([[[heads[h][t][0]] for h in range(5)] for t in range(6)])
    sym = torch.tensor([[[heads[h][t][1]] for h in range(5)] for t in range(6)])
    return pos, sym, steps


def test_purity_classifier_on_synthetic_trajectories():
    pos, sym, steps = _trajectories()
    p = purity(pos, sym, steps, gamma=0.1)
    assert p.first_step == {(0, 0): 200, (1, 0): 400, (3, 0): 100, (4, 0): 300}
    assert p.kind == {(0, 0): "positional", (1, 0): "symbolic", (3, 0): "positional",
                      (4, 0): "symbolic"}
    assert p.cumulative("positional") == [0, 1, 2, 2, 2, 2]        # head 3 stays counted
    assert p.cumulative("symbolic") == [0, 0, 0, 1, 2, 2]
    assert p.final_counts() == {"positional": 1, "symbolic": 2}
    assert p.layers_of("symbolic") == [1, 4]
    assert p.settled_step == {(0, 0): 200, (1, 0): 400, (4, 0): 300}      # head 3 was transient
    assert p.layers_of("positional", settled=True) == [0]
    strict = purity(pos, sym, steps, gamma=0.05)
    assert strict.first_step == {(0, 0): 200, (1, 0): 400}


@pytest.mark.parametrize("gamma", [0.0, 0.5])
def test_purity_rejects_bad_gamma(gamma):
    pos, sym, steps = _trajectories()
    with pytest.raises(InvalidSelectionError, match="gamma"):
        purity(pos, sym, steps, gamma=gamma)
    with pytest.raises(InvalidSelectionError, match="n_ckpt"):
        purity(pos, sym, steps[:-1])


def test_score_run_reads_every_checkpoint_exact_equals_rerun(tiny_multihop_run):
    run_dir, model, task = tiny_multihop_run
    assert [s for s, _ in checkpoint_paths(run_dir)] == [20, 40, 60]
    exact = score_run(run_dir, n_prompts=12, eval_size=64)
    assert exact.steps == [20, 40, 60] and exact.pos.shape == (3, 2, 1)
    assert ((exact.pos >= 0) & (exact.pos <= 1 + 1e-6)).all()
    assert ((exact.entropy > 0) & (exact.entropy <= 1 + 1e-6)).all()
    assert len(exact.accuracy_by_hops[0]) == task.max_hops
    rerun = score_run(run_dir, n_prompts=12, eval_size=64, method="rerun", steps=[60])
    assert torch.allclose(exact.pos[-1], rerun.pos[0], atol=1e-5)
    assert torch.allclose(exact.sym[-1], rerun.sym[0], atol=1e-5)
    back = ScoreTrajectory.from_dict(exact.to_dict())
    assert torch.equal(back.pos, exact.pos) and back.steps == exact.steps
    mm = exact.entropy_minmax()
    assert float(mm.min()) == 0.0 and math.isclose(float(mm.max()), 1.0)
    with pytest.raises(InvalidSelectionError, match="no checkpoint for steps"):
        score_run(run_dir, steps=[30])


def test_score_run_can_measure_on_the_training_test_set(tiny_multihop_run):
    """With the training loop's own test set the accuracy at each checkpoint is the run's
    history (the verdict rules read both)."""
    from lens_possym.training.loop import TrainResult

    run_dir, _, _ = tiny_multihop_run
    history = {h.step: h.test_accuracy for h in TrainResult.load(run_dir / "metrics.json").history}
    traj = score_run(run_dir, n_prompts=8, eval_size=128, training_eval=True)
    assert traj.accuracy == pytest.approx([history[s] for s in traj.steps], abs=1e-6)
    assert traj.meta["training_eval"] is True


def test_entropy_is_one_for_uniform_attention(tiny_multihop_run):
    _, model, task = tiny_multihop_run
    fresh = type(model)(model.cfg)
    with torch.no_grad():
        for block in fresh.hf.transformer.h:
            block.attn.q_proj.weight.zero_()                  # all logits 0: uniform
    tokens = task.sample(4).tokens
    assert torch.allclose(attention_entropy(fresh.bridge(), tokens), torch.ones(2, 1), atol=1e-5)


def test_path_scores_group_queries_by_stop(tiny_multihop_run):
    _, model, task = tiny_multihop_run
    batch = task.test_set(24)
    pos, sym, count = path_scores(model.bridge(), task, batch)
    hops, _ = task.hop_path(batch.tokens)
    assert count.tolist() == [int((hops > k).sum()) for k in range(task.max_hops)]
    assert pos.shape == (task.max_hops, 2, 1) and torch.isfinite(sym).all()


def test_a_run_without_checkpoints_is_reported(tmp_path):
    with pytest.raises(TrainingError, match="no checkpoints"):
        checkpoint_paths(tmp_path)
