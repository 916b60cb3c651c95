"""Paper C's presets and training entry point: sizes, checkpoints, resumption, bad names."""

from __future__ import annotations

import pytest
import torch

from lens_possym.errors import TrainingError
from lens_possym.papers.c.gptj import GPTJTaskConfig
from lens_possym.papers.c.presets import MULTIHOP_PRESETS, build_run, train_multihop
from lens_possym.training.runs import latest_checkpoint, read_checkpoint


def test_paper_preset_has_the_paper_sizes():
    cfg = GPTJTaskConfig(d_vocab=128, **MULTIHOP_PRESETS["paper"].model)
    assert (cfg.n_layers, cfg.n_heads, cfg.d_model, cfg.rotary_dim, cfg.dropout) == (
        12, 1, 128, 128, 0.1)
    cpu = GPTJTaskConfig(d_vocab=136, **MULTIHOP_PRESETS["cpu"].model)
    assert cpu.d_model == 64 and cpu.rotary_dim == 64 and cpu.n_layers == 12
    model, task, config = build_run("letter", "tiny")
    assert task.d_vocab == 128 and task.n_ctx == 17 and config.checkpoint_every is None
    assert model.hf.config.n_positions == 128 and model.cfg.d_vocab == task.d_vocab


def test_training_writes_checkpoints_and_resumes(tiny_multihop_run):
    run_dir, model, task = tiny_multihop_run
    steps = sorted(p.name for p in run_dir.glob("checkpoint_*.pt"))
    assert steps == ["checkpoint_000020.pt", "checkpoint_000040.pt", "checkpoint_000060.pt"]
    ckpt = read_checkpoint(latest_checkpoint(run_dir))
    assert ckpt.model_kind == "gptj" and ckpt.task == "number" and ckpt.step == 60
    again, _, result = train_multihop("number", "tiny", out_dir=run_dir, device="cpu")
    assert result.steps_run == 60                      # finished run: nothing retrained
    # against the saved weights, by name: other tests boot a bridge on the shared `model`,
    # which wraps its modules in place (its state_dict's names and order change)
    saved = ckpt.state_dict
    loaded = again.state_dict()
    assert saved.keys() == loaded.keys()
    assert all(torch.equal(saved[name], loaded[name]) for name in saved)


@pytest.mark.parametrize("task, preset, match", [
    ("index", "cpu", "task must be one of"), ("number", "gpu", "unknown multihop preset")])
def test_bad_names_are_refused(task, preset, match):
    with pytest.raises(TrainingError, match=match):
        build_run(task, preset)
