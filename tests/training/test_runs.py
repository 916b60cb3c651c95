"""Run folders: checkpoints carry the training state, and an interrupted run resumed from
its latest checkpoint ends exactly where the uninterrupted run ends."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import asdict, dataclass

import pytest
import torch

from lens_possym.errors import TrainingError
from lens_possym import training
from lens_possym.training.toy import ToyTransformer, toy_config_for
from lens_possym.training.runs import (
    latest_checkpoint,
    load_checkpoint,
    read_checkpoint,
    save_checkpoint,
)
from lens_possym.papers.a.sweeps import frequency_sweep
from lens_possym.papers.a.tasks import IndexTask
from lens_possym.training.loop import TrainConfig, resume, train

TASK = IndexTask(n_symbols=5, length=5, seed=4)

pytestmark = pytest.mark.usefixtures("one_torch_thread")


class _Interrupted(Exception):
    pass


def _interrupt_at(stop: int):
    def fn(step, model):
        if step == stop:
            raise _Interrupted
    return fn


def _config(out_dir, **kw) -> TrainConfig:
    # checkpoints fall between evaluations (15 vs 10), so a resumed run must also restore
    # the training loss summed since the last evaluation
    settings = dict(steps=60, batch_size=32, eval_every=10, eval_size=128, checkpoint_every=15,
                    out_dir=str(out_dir), device="cpu")
    return TrainConfig(**(settings | kw))


def _model(seed=0) -> ToyTransformer:
    return ToyTransformer(toy_config_for(TASK, n_freqs=3, seed=seed)).set_frequencies([0, 3])


def _without_times(history) -> list[dict]:
    return [{k: v for k, v in asdict(h).items() if k != "elapsed_s"} for h in history]


@pytest.mark.parametrize("stop", [20, 50])   # latest checkpoints 15 and 45
def test_interrupted_and_resumed_equals_uninterrupted(tmp_path, stop):
    whole = _model()
    expected = train(whole, TASK, _config(tmp_path / "whole"), callbacks=[lambda s, m: None])

    cut = tmp_path / "cut"
    with pytest.raises(_Interrupted):
        train(_model(), TASK, _config(cut), callbacks=[_interrupt_at(stop)])
    assert not (cut / "model.pt").exists()
    assert read_checkpoint(latest_checkpoint(cut)).step == stop - 5

    model, task, result = resume(cut)
    assert task.config() == TASK.config()
    assert result.steps_run == expected.steps_run == 60
    assert _without_times(result.history) == _without_times(expected.history)
    for name, value in whole.state_dict().items():
        assert torch.equal(model.state_dict()[name], value), name
    a, b = read_checkpoint(cut / "model.pt"), read_checkpoint(tmp_path / "whole" / "model.pt")
    assert torch.equal(a.state.data_stream, b.state.data_stream)
    moments = [(s["exp_avg"], s["exp_avg_sq"]) for s in a.state.optimizer["state"].values()]
    for (m, v), (m2, v2) in zip(moments, [(s["exp_avg"], s["exp_avg_sq"])
                                          for s in b.state.optimizer["state"].values()]):
        assert torch.equal(m, m2) and torch.equal(v, v2)
    metrics = json.loads((cut / "metrics.json").read_text())
    assert metrics["steps_run"] == 60 and len(metrics["history"]) == len(expected.history)


def test_resuming_a_finished_run_trains_no_further(tmp_path):
    model = _model()
    first = train(model, TASK, _config(tmp_path, steps=30))
    calls = []
    again, _, second = resume(tmp_path, callbacks=[lambda s, m: calls.append(s)])
    assert calls == []                                              # no evaluation, no step
    assert second.steps_run == first.steps_run
    assert _without_times(second.history) == _without_times(first.history)
    for name, value in model.state_dict().items():
        assert torch.equal(again.state_dict()[name], value)
    adam = read_checkpoint(tmp_path / "model.pt").state.optimizer["state"]
    assert {int(s["step"]) for s in adam.values()} == {30}


def test_resume_with_other_settings_is_refused(tmp_path):
    with pytest.raises(_Interrupted):
        train(_model(), TASK, _config(tmp_path), callbacks=[_interrupt_at(20)])
    with pytest.raises(TrainingError, match="lr differ"):
        train(_model(), TASK, _config(tmp_path, lr=0.1), resume=True)
    with pytest.raises(TrainingError, match="model differ"):
        train(_model(seed=1), TASK, _config(tmp_path), resume=True)
    with pytest.raises(TrainingError, match="task differ"):
        train(_model(), IndexTask(n_symbols=5, length=5, seed=5), _config(tmp_path),
              resume=True)
    # where and on what it runs may change
    train(_model(), TASK, _config(tmp_path, device="auto"), resume=True)


def test_resume_needs_a_run_folder_with_a_resumable_checkpoint(tmp_path):
    with pytest.raises(TrainingError, match="no checkpoint"):
        resume(tmp_path)
    with pytest.raises(TrainingError, match="needs config.out_dir"):
        train(_model(), TASK, TrainConfig(steps=1), resume=True)
    save_checkpoint(_model(), TASK, tmp_path / "model.pt", step=3)      # weights only
    model, task, info = load_checkpoint(tmp_path / "model.pt")
    assert info == {"step": 3, "resumable": False} and task.config() == TASK.config()
    with pytest.raises(TrainingError, match="without its training state"):
        resume(tmp_path)
    with pytest.raises(TrainingError, match="without its training state"):
        train(_model(), TASK, _config(tmp_path), resume=True)


def test_resume_without_a_checkpoint_starts_afresh(tmp_path):
    fresh = train(_model(), TASK, _config(tmp_path / "a", steps=20))
    resumed = train(_model(), TASK, _config(tmp_path / "b", steps=20), resume=True)
    assert _without_times(resumed.history) == _without_times(fresh.history)


def test_train_refuses_what_is_not_a_task():
    with pytest.raises(TrainingError, match="expects a Task"):
        train(_model(), "index", TrainConfig(steps=1))


def test_latest_checkpoint_orders_by_step(tmp_path):
    assert latest_checkpoint(tmp_path) is None
    for step in (9, 10, 1_000_000):
        (tmp_path / f"checkpoint_{step:06d}.pt").write_bytes(b"")
    (tmp_path / "checkpoint_notes.pt").write_bytes(b"")
    assert latest_checkpoint(tmp_path).name == "checkpoint_1000000.pt"
    (tmp_path / "model.pt").write_bytes(b"")
    assert latest_checkpoint(tmp_path).name == "model.pt"


def test_a_resumed_sweep_reads_finished_runs_back(tmp_path):
    config = TrainConfig(steps=20, eval_every=10, eval_size=64, batch_size=32)
    kw = dict(seeds=(0,), train_config=config, model_kwargs={"n_freqs": 3}, scores=False,
              out_dir=tmp_path)
    first = frequency_sweep(TASK, [1, 3], **kw)
    evaluations = []
    again = frequency_sweep(TASK, [1, 3], resume=True, **kw,
                  callbacks_for=lambda ids, seed: [lambda s, m: evaluations.append(s)])
    assert evaluations == []                                        # nothing trained again
    assert torch.equal(first.accuracy(), again.accuracy())
    assert [r.accuracy_history for r in again.runs] == [r.accuracy_history for r in first.runs]
    with pytest.raises(TrainingError, match="needs out_dir"):
        frequency_sweep(TASK, [1], seeds=(0,), train_config=config, resume=True)


# ---- a model the loop has never heard of ---------------------------------------------------


@dataclass
class _BagConfig:
    d_vocab: int
    n_ctx: int
    seed: int = 0

    def to_dict(self) -> dict:
        return asdict(self)


class _Bag(torch.nn.Module):
    """Bag of positioned tokens -> logits: not a ToyTransformer, only a TrainableModel."""

    kind = "test-bag"

    def __init__(self, cfg: _BagConfig):
        super().__init__()
        self.cfg = cfg
        gen = torch.Generator().manual_seed(cfg.seed)
        self.table = torch.nn.Parameter(
            torch.randn(cfg.n_ctx, cfg.d_vocab, cfg.d_vocab, generator=gen) * 0.1)

    @classmethod
    def from_config(cls, data: dict) -> "_Bag":
        return cls(_BagConfig(**data))

    def forward(self, tokens):
        n = tokens.shape[1]
        picked = self.table[torch.arange(n), tokens]                  # [batch, pos, d_vocab]
        return picked.cumsum(dim=1)


@pytest.fixture
def bag_registered():
    training.register_model(_Bag)
    yield
    training.MODELS.unregister(_Bag.kind)


@pytest.mark.usefixtures("bag_registered")
def test_any_registered_trainable_model_trains_checkpoints_and_resumes(tmp_path):
    cfg = _BagConfig(TASK.d_vocab, TASK.n_ctx)
    expected = train(_Bag(cfg), TASK, _config(tmp_path / "whole", steps=30),
                     callbacks=[lambda s, m: None])
    with pytest.raises(_Interrupted):
        train(_Bag(cfg), TASK, _config(tmp_path / "cut", steps=30),
              callbacks=[_interrupt_at(20)])
    model, _, result = resume(tmp_path / "cut")
    assert isinstance(model, _Bag)
    assert _without_times(result.history) == _without_times(expected.history)
    assert result.history[-1].test_loss < result.history[0].test_loss   # it learnt


def test_a_checkpoint_torn_mid_write_leaves_the_previous_one_latest(tmp_path, monkeypatch):
    model = ToyTransformer(toy_config_for(TASK))
    save_checkpoint(model, TASK, tmp_path / "checkpoint_000010.pt", step=10)
    real_save = torch.save

    def torn(obj, path):          # half a file, then the process "dies"
        real_save(obj, path)
        with open(path, "r+b") as fh:
            fh.truncate(fh.seek(0, 2) // 2)
        raise KeyboardInterrupt

    monkeypatch.setattr(torch, "save", torn)
    with pytest.raises(KeyboardInterrupt):
        save_checkpoint(model, TASK, tmp_path / "checkpoint_000020.pt", step=20)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint_000010.pt"]
    assert read_checkpoint(latest_checkpoint(tmp_path)).step == 10


def test_an_unreadable_latest_checkpoint_falls_back_to_the_one_before(tmp_path):
    """A checkpoint damaged after it was written (a disk fault, a copy cut short): resume
    goes back to the last good one, says which file was bad, and ends exactly where the
    uninterrupted run ends; temporary files of a killed writer are removed."""
    whole = _model()
    expected = train(whole, TASK, _config(tmp_path / "whole"), callbacks=[lambda s, m: None])
    cut = tmp_path / "cut"
    with pytest.raises(_Interrupted):
        train(_model(), TASK, _config(cut), callbacks=[_interrupt_at(50)])
    latest = cut / "checkpoint_000045.pt"
    data = latest.read_bytes()
    latest.write_bytes(data[: len(data) // 3])                  # torn
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True).stdout.strip()
    leftovers = [cut / f"checkpoint_000060.pt.tmp-{dead}-0",
                 cut / f"checkpoint_000060.pt.partial-{dead}"]
    for path in leftovers:
        path.write_bytes(b"half")
    with pytest.warns(UserWarning, match="checkpoint_000045.pt is not a readable.*resuming "
                                         "from checkpoint_000030.pt"):
        model, _, result = resume(cut)
    assert _without_times(result.history) == _without_times(expected.history)
    for name, value in whole.state_dict().items():
        assert torch.equal(model.state_dict()[name], value), name
    assert not any(p.exists() for p in leftovers)
    assert not [p for p in cut.iterdir() if ".tmp" in p.name or ".partial-" in p.name]


def test_every_checkpoint_unreadable_is_one_clear_error(tmp_path):
    save_checkpoint(_model(), TASK, tmp_path / "checkpoint_000010.pt", step=10)
    (tmp_path / "checkpoint_000010.pt").write_bytes(b"")
    with pytest.raises(TrainingError, match="no checkpoint in .* can be read.*delete them"):
        resume(tmp_path)
