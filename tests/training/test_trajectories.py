"""Analyses of trained toy heads: head_scores is swap_scores for one head; q/k trajectories."""

from __future__ import annotations

import json

import pytest
import torch

from lens_possym.training.toy import ToyTransformer, toy_config_for
from lens_possym.papers.a.tasks import IndexTask
from lens_possym.training.loop import TrainConfig
from lens_possym.training.trajectories import QKTrajectory, head_scores

TINY = IndexTask(n_symbols=5, length=5, seed=2)


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _random_head(task, ids, seed=0, init_std=None):
    cfg = toy_config_for(task, n_freqs=4, seed=seed, init_std=init_std)
    return ToyTransformer(cfg).set_frequencies(ids)


def test_head_scores_is_swap_scores_for_one_head():
    import lens_possym as lp

    task = IndexTask(n_symbols=5, length=5, seed=2)
    cfg = toy_config_for(task, n_freqs=4, n_layers=2, n_heads=2, init_std=1.0)
    model = ToyTransformer(cfg)
    tokens = task.test_set(8).tokens
    full = lp.swap_scores(model, tokens, exclude_bos=False)
    one = head_scores(model, tokens, layer=1, head=0)
    assert one.pos == pytest.approx(float(full.pos[1, 0]), abs=1e-9)
    assert one.sym == pytest.approx(float(full.sym[1, 0]), abs=1e-9)
    assert one.pos_freq == pytest.approx(full.pos_freq[1, 0].tolist(), abs=1e-9)
    assert len(one.sym_freq) == cfg.n_freqs and "swap_scores" in one.method


def test_qk_trajectory_records_the_plane_of_one_frequency():
    from lens_possym.training.loop import train

    probe = TINY.test_set(6)
    model = _random_head(TINY, [1])
    traj = QKTrajectory(probe, freq=1)
    train(model, TINY, TrainConfig(steps=20, eval_every=10, eval_size=32), callbacks=[traj])
    assert traj.steps == [0, 10, 20]
    assert traj.q.shape == (3, 6, 2) and traj.k.shape == (3, 6, 6, 2)
    # one-hot inputs: the query is the W_Q row of the last token on the pair's dims
    dims = [1, 5]                                            # pair 1 of 4, "half" layout
    expected = model.blocks[0].attn.W_Q[0][probe.tokens[:, -1]][:, dims]
    assert torch.allclose(traj.q[-1], expected.detach(), atol=1e-6)
    assert json.dumps(traj.to_dict())
