"""Sweeps over frequency sets: bookkeeping, runs equal single trainings, files, figures."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
import torch

from lens_possym.errors import TrainingError
from lens_possym.training.toy import ToyTransformer, toy_config_for
from lens_possym.papers.a.sweeps import FrequencySweep, frequency_sweep, pairs_with, single_ids
from lens_possym.papers.a.tasks import IndexTask
from lens_possym.training.loop import TrainConfig

TINY = IndexTask(n_symbols=5, length=5, seed=2)
QUICK = TrainConfig(steps=40, eval_every=20, eval_size=128)
MODEL = {"n_freqs": 4}


pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def tiny_sweep():
    return frequency_sweep(TINY, [0, 3, (4, 0)], seeds=(0, 1), train_config=QUICK,
                           model_kwargs=MODEL, score_prompts=8)


def test_sweep_shapes_and_bookkeeping(tiny_sweep):
    r = tiny_sweep
    assert r.freq_sets == [(0,), (3,), (4, 0)] and r.seeds == [0, 1]
    assert r.accuracy().shape == (3, 2)
    assert r.accuracy_by_position().shape == (3, 2, 5)
    pos, sym = r.scores()
    assert pos.shape == sym.shape == (3, 2) and torch.isfinite(pos).all()
    assert r.angles[4] == 0.0 and r.angles[0] == pytest.approx(1.0)
    run = r.runs[-1]
    assert run.freq_ids == [4, 0] and run.angles == [0.0, pytest.approx(1.0)]
    assert run.accuracy_history[-1][0] == 40
    shape = r.edge_minus_middle()
    by_pos = r.accuracy_by_position()
    assert shape.shape == (3, 2)
    expected = (by_pos[..., [0, 4]].mean(-1) - by_pos[..., 1:4].mean(-1))  # 5 positions: k = 1
    assert torch.allclose(shape, expected)
    table = r.table()
    assert table.count("\n") == 4 and "| 4+0 | 0, 1 |" in table and "s_POS" in table


def test_each_run_is_gated_and_seeded_like_a_single_training(tiny_sweep):
    """A sweep run equals training the same model by hand."""
    from lens_possym.training.loop import train

    model = ToyTransformer(toy_config_for(TINY, seed=1, **MODEL)).set_frequencies([3])
    result = train(model, TINY, replace(QUICK, seed=1))
    run = [x for x in tiny_sweep.runs if x.freq_ids == [3] and x.seed == 1][0]
    assert run.test_accuracy == result.test_accuracy
    assert run.accuracy_by_position == result.test_accuracy_by_position


def test_sweep_writes_and_reloads(tmp_path, tiny_sweep):
    r = frequency_sweep(TINY, [1], train_config=QUICK, model_kwargs=MODEL, scores=False,
                        out_dir=tmp_path)
    assert (tmp_path / "sweep.json").is_file() and (tmp_path / "table.md").is_file()
    assert (tmp_path / "runs" / "1_seed0" / "model.pt").is_file()
    back = FrequencySweep.load(tmp_path / "sweep.json")
    assert back.table() == r.table()
    assert torch.equal(back.accuracy(), r.accuracy())
    path = tiny_sweep.save(tmp_path / "x.json")
    again = FrequencySweep.load(path)
    assert torch.allclose(again.accuracy_by_position(), tiny_sweep.accuracy_by_position(),
                          equal_nan=True)


def test_sweep_figures(tmp_path, tiny_sweep):
    from lens_possym.papers.a.figures import save_sweep_figures

    paths = save_sweep_figures(tiny_sweep, tmp_path)
    assert [p.name for p in paths] == ["accuracy_vs_freq.png", "accuracy_by_position.png",
                                       "scores_vs_freq.png"]
    assert all(p.stat().st_size > 1000 for p in paths)


def test_frequency_set_helpers_and_errors():
    assert single_ids([3, 1]) == [(3,), (1,)]
    assert pairs_with(16, [0, 16, 4]) == [(16, 0), (16, 4)]
    with pytest.raises(TrainingError, match="out of range"):
        frequency_sweep(TINY, [9], train_config=QUICK, model_kwargs=MODEL)
    with pytest.raises(TrainingError, match="seeds is empty"):
        frequency_sweep(TINY, [0], seeds=(), train_config=QUICK, model_kwargs=MODEL)
