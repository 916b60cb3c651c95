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


class _Stop(Exception):
    pass


def _dropout_run(out_dir, callbacks=()):
    """A small GPT-J with dropout on every site the paper preset has it, trained 12 steps
    with checkpoints every 6 (the evaluations, every 4, fall between them)."""
    from lens_possym.papers.c.gptj import GPTJTaskModel
    from lens_possym.training.loop import TrainConfig, train
    from lens_possym.training.tasks import make_task

    task = make_task("number", seed=0)
    model = GPTJTaskModel(GPTJTaskConfig(d_vocab=task.d_vocab, n_layers=2, d_model=16, d_mlp=32,
                                         dropout=0.3, embedding_dropout=0.0, activation="gelu"))
    config = TrainConfig(steps=12, batch_size=16, lr=3e-3, warmup_steps=2, eval_every=4,
                         eval_size=64, checkpoint_every=6, decay="matrices",
                         out_dir=str(out_dir), device="cpu")
    return model, train(model, task, config, callbacks=list(callbacks))


def test_a_resumed_run_with_dropout_equals_an_uninterrupted_one_bit_for_bit(tmp_path):
    """GPT-J's dropout draws from the global RNG: the loop gives it a stream of its own,
    seeded from the run's seed and saved in every checkpoint, and leaves the caller's RNG
    as it was."""
    from lens_possym.training.loop import resume

    rng_before = torch.get_rng_state()
    whole, expected = _dropout_run(tmp_path / "whole", callbacks=[lambda s, m: None])
    assert torch.equal(torch.get_rng_state(), rng_before)      # the caller's RNG untouched

    def stop_at_8(step, model):
        if step == 8:
            raise _Stop
    with pytest.raises(_Stop):
        _dropout_run(tmp_path / "cut", callbacks=[stop_at_8])
    assert read_checkpoint(latest_checkpoint(tmp_path / "cut")).step == 6
    model, _, result = resume(tmp_path / "cut")

    drop = lambda history: [{k: v for k, v in vars(h).items() if k != "elapsed_s"}
                            for h in history]
    assert drop(result.history) == drop(expected.history)
    saved = read_checkpoint(tmp_path / "whole" / "model.pt").state_dict
    again = read_checkpoint(tmp_path / "cut" / "model.pt").state_dict
    assert saved.keys() == again.keys()
    assert all(torch.equal(saved[name], again[name]) for name in saved)

    # the checkpoint carries the dropout stream (the CPU generator's state here)
    stream = read_checkpoint(tmp_path / "whole" / "model.pt").state.dropout_stream
    assert set(stream) == {"cpu"} and stream["cpu"].dtype == torch.uint8


def test_the_paper_preset_decays_weight_matrices_only_as_the_trainer_does():
    """Hugging Face's Trainer (paper C's code) decays no bias and no LayerNorm gain; the
    `paper` preset's `decay="matrices"` puts exactly those in the undecayed group."""
    from lens_possym.training.loop import TrainConfig, _param_groups

    model, _, config = build_run("letter", "paper")
    assert config.decay == "matrices" and model.hf.config.activation_function == "gelu"
    assert model.hf.config.embd_pdrop == 0.0 and model.hf.config.resid_pdrop == 0.1
    decayed, undecayed = _param_groups(model, config)
    names = {id(p): n for n, p in model.named_parameters()}
    assert undecayed["weight_decay"] == 0.0 and decayed["weight_decay"] == 1e-4
    assert {names[id(p)] for p in undecayed["params"]} == {
        n for n, _ in model.named_parameters() if n.endswith("bias") or ".ln_" in n}
    assert len(_param_groups(model, TrainConfig(decay="all"))) == 1
    with pytest.raises(TrainingError, match="decay must be one of"):
        TrainConfig(decay="biases")
