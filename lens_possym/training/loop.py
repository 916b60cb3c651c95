r"""One training loop for every synthetic task and trainable model: plain, fast, resumable.

:func:`train` runs AdamW on the cross-entropy of the **last position's** prediction (the
answer), with linear warm-up then cosine decay, gradient clipping, evaluation on the task's
fixed test set every ``eval_every`` steps (accuracy overall and by answer position), optional
early stop at a target accuracy, checkpoints and a ``metrics.json``
(:mod:`lens_possym.training.runs`). Data come from the task's seeded training split (test
sequences never appear), or, for a task with a fixed training set (``task.epoch_size`` not
``None``), from ``task.train_batch(step, batch_size, seed)``, which walks that set in
epochs; weights from the model's own seed; dropout from a stream of its own
(:class:`DropoutStream`, seeded from ``TrainConfig.seed`` and saved in every checkpoint);
the global RNG is never touched, so runs are reproducible and do not disturb callers.

The loop asks the task only for what :class:`~lens_possym.training.tasks.Task` lists and
the model only for what :class:`~lens_possym.training.models.TrainableModel` lists.

Resuming: ``train(..., resume=True)`` (or :func:`resume` on a run folder) continues from the
folder's latest checkpoint, restoring weights, optimiser, data stream, dropout stream and
the evaluations so far, so an interrupted and resumed run ends bit-identical to an
uninterrupted one (dropout on or off).

Everything runs on the model's device; ``device="auto"`` moves the model to a GPU when one
is present.

Example::

    task = IndexTask()
    model = ToyTransformer(toy_config_for(task)).set_frequencies([3])
    result = train(model, task, TrainConfig(steps=2000))
    result.test_accuracy, result.test_accuracy_by_position
"""

from __future__ import annotations

import math
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Callable, Sequence

import torch
from torch import Tensor

from .._checks import boundary
from .._inputs import resolve_device
from .._json import JsonConfig, check_field_types
from ..errors import TrainingError
from ..results_io import ResultIO
from .models import TrainableModel
from .runs import (
    Checkpoint,
    TrainingState,
    read_latest_checkpoint,
    save_checkpoint,
)
from .tasks import Task, TaskBatch

__all__ = [
    "TrainConfig",
    "EvalRecord",
    "TrainResult",
    "EvalResult",
    "train",
    "resume",
    "evaluate",
]

SCHEDULES = ("cosine", "linear")
#: which parameters AdamW decays: every one, or (as Hugging Face's Trainer, which paper C's
#: code trains with) only those of two or more dimensions: no biases, no LayerNorm gains
DECAY_SCOPES = ("all", "matrices")
#: added to ``TrainConfig.seed`` to seed the dropout stream, so that it and the data stream
#: (seeded with ``seed`` itself) are not the same sequence
DROPOUT_SEED_OFFSET = 0x5EED

@dataclass(frozen=True)
class TrainConfig(JsonConfig):
    """Settings of :func:`train` (validated on creation).

    Attributes:
        steps: optimiser steps (upper bound when ``target_accuracy`` stops early).
        batch_size: prompts per step.
        lr, weight_decay, betas: AdamW.
        decay: which parameters ``weight_decay`` applies to: ``"all"``, or
            ``"matrices"`` (parameters of two or more dimensions: no biases and no
            LayerNorm gains, the Hugging Face Trainer's rule).
        warmup_steps: linear warm-up over this many steps, then ``schedule`` down to
            ``lr·min_lr_ratio`` at ``steps``.
        schedule: the decay after warm-up: ``"cosine"`` (half a cosine) or ``"linear"``
            (a straight line, as Hugging Face's ``lr_scheduler_type="linear"`` that paper
            C's code uses, whose end is 0: pair it with ``min_lr_ratio=0``).
        min_lr_ratio: final learning rate as a share of ``lr``.
        grad_clip: max gradient norm (``None``: no clipping).
        seed: seed of the training data stream and of the dropout stream (the model's
            weights use its own seed).
        eval_every: evaluate on the test set every this many steps (and at the end).
        eval_size: test-set size.
        eval_batch: sentences per forward pass of an evaluation (``None``: up to 4,096
            at once). A speed setting: the logits are gathered and scored as one block, so
            the accuracy and loss are those of ``None`` bit for bit wherever the model gives
            each row the same logits whatever the batch (paper B's encoder on a CPU, where
            batches of 64 evaluate about 1.5x faster than one of 1,024:
            ``benchmarks/bench_paper_b_speed.py`` checks the equality).
        target_accuracy: stop at the first evaluation whose test accuracy reaches this.
        checkpoint_every: save a checkpoint every this many steps (needs ``out_dir``);
            the final model is always saved when ``out_dir`` is set.
        out_dir: where ``metrics.json`` and checkpoints go (``None``: nothing written).
        device: ``"auto"``, ``"cpu"``, ``"cuda"``...
    """

    steps: int = 2000
    batch_size: int = 128
    lr: float = 3e-2
    weight_decay: float = 1e-3
    betas: tuple[float, float] = (0.9, 0.98)
    decay: str = "all"
    warmup_steps: int = 100
    schedule: str = "cosine"
    min_lr_ratio: float = 0.05
    grad_clip: float | None = 1.0
    seed: int = 0
    eval_every: int = 250
    eval_size: int = 2048
    eval_batch: int | None = None
    target_accuracy: float | None = None
    checkpoint_every: int | None = None
    out_dir: str | None = None
    device: str = "auto"

    def __post_init__(self) -> None:
        check_field_types(self, error=TrainingError)
        for name in ("steps", "batch_size", "eval_every", "eval_size"):
            if int(getattr(self, name)) < 1:
                raise TrainingError(f"{name} must be >= 1, got {getattr(self, name)}")
        if not self.lr > 0:
            raise TrainingError(f"lr must be > 0, got {self.lr}")
        if self.weight_decay < 0 or self.warmup_steps < 0:
            raise TrainingError("weight_decay and warmup_steps must be >= 0")
        if self.decay not in DECAY_SCOPES:
            raise TrainingError(f"decay must be one of {DECAY_SCOPES}, got {self.decay!r}")
        if self.schedule not in SCHEDULES:
            raise TrainingError(f"schedule must be one of {SCHEDULES}, got {self.schedule!r}")
        if not 0 <= self.min_lr_ratio <= 1:
            raise TrainingError(f"min_lr_ratio must be in [0, 1], got {self.min_lr_ratio}")
        object.__setattr__(self, "betas", tuple(float(b) for b in self.betas))
        if len(self.betas) != 2 or not all(0 <= b < 1 for b in self.betas):
            raise TrainingError(f"betas must be two numbers in [0, 1), got {self.betas}")
        if self.grad_clip is not None and not self.grad_clip > 0:
            raise TrainingError(f"grad_clip must be None or > 0, got {self.grad_clip}")
        if self.eval_batch is not None and self.eval_batch < 1:
            raise TrainingError(f"eval_batch must be None or >= 1, got {self.eval_batch}")
        if self.target_accuracy is not None and not 0 < self.target_accuracy <= 1:
            raise TrainingError(f"target_accuracy must be in (0, 1], got {self.target_accuracy}")
        if self.checkpoint_every is not None:
            if self.checkpoint_every < 1:
                raise TrainingError("checkpoint_every must be None or >= 1")
            if self.out_dir is None:
                raise TrainingError("checkpoint_every needs out_dir (where to write them)")

    def lr_at(self, step: int) -> float:
        """Learning rate at ``step`` (0-based): linear warm-up, then ``schedule``'s decay."""
        if step < self.warmup_steps:
            return self.lr * (step + 1) / self.warmup_steps
        span = max(1, self.steps - self.warmup_steps)
        progress = min(1.0, (step - self.warmup_steps) / span)
        if self.schedule == "linear":
            remaining = 1.0 - progress
        else:
            remaining = 0.5 * (1 + math.cos(math.pi * progress))
        return self.lr * (self.min_lr_ratio + (1 - self.min_lr_ratio) * remaining)


@dataclass(repr=False)
class EvalResult(ResultIO):
    """Accuracy of a model on a batch: overall, by answer position, and the mean loss."""

    accuracy: float
    accuracy_by_position: list[float]
    loss: float
    answer_positions: list[int]

    FORMAT = "lens-possym/eval@1"

    def _table(self):
        """One row per answer position: ``answer_pos``, ``accuracy``."""
        import pandas as pd

        return pd.DataFrame({"answer_pos": self.answer_positions,
                             "accuracy": self.accuracy_by_position})

    def _headline(self) -> list[str]:
        return [f"accuracy={self.accuracy:.3g}", f"loss={self.loss:.3g}"]


@dataclass
class EvalRecord:
    """One evaluation during training."""

    step: int
    train_loss: float
    train_accuracy: float
    test_loss: float
    test_accuracy: float
    test_accuracy_by_position: list[float]
    lr: float
    elapsed_s: float


@dataclass(repr=False)
class TrainResult(ResultIO):
    """What :func:`train` returns (and writes to ``metrics.json``).

    Attributes:
        history: one :class:`EvalRecord` per evaluation.
        steps_run: optimiser steps taken.
        reached_target_at: first step whose evaluation reached ``target_accuracy``.
        train_time_s: wall time of the loop, evaluations included.
        answer_positions: the positions of ``test_accuracy_by_position``.
    """

    task: str
    task_config: dict
    model_config: dict
    train_config: dict
    history: list[EvalRecord]
    steps_run: int
    train_time_s: float
    answer_positions: list[int]
    reached_target_at: int | None = None

    @property
    def final(self) -> EvalRecord:
        return self.history[-1]

    @property
    def test_accuracy(self) -> float:
        return self.final.test_accuracy

    @property
    def test_accuracy_by_position(self) -> list[float]:
        return self.final.test_accuracy_by_position

    def to_dict(self) -> dict:
        out = asdict(self)
        out["test_accuracy"] = self.test_accuracy
        out["test_accuracy_by_position"] = self.test_accuracy_by_position
        return out

    # ``save``/``load`` (``metrics.json``), ``to_dataframe`` and the repr: ResultIO
    FORMAT = "lens-possym/train@1"
    UNTAGGED_OK = True  # metrics.json files written before the tag

    @classmethod
    def from_dict(cls, data: dict) -> "TrainResult":
        names = {f.name for f in fields(cls)}
        data = {k: v for k, v in data.items() if k in names}
        history = []
        for record in data.pop("history"):
            record = dict(record)
            record["test_accuracy_by_position"] = [
                float("nan") if a is None else a for a in record["test_accuracy_by_position"]]
            history.append(EvalRecord(**{k: float("nan") if v is None else v
                                         for k, v in record.items()}))
        return cls(history=history, **data)

    def _table(self):
        """Long format: one row per evaluation and number: ``step``, ``score``
        (``train_loss``, ``test_accuracy``, ..., or ``accuracy_at`` with ``answer_pos``)
        and ``value``."""
        import pandas as pd

        rows = []
        for record in self.history:
            for name in ("train_loss", "train_accuracy", "test_loss", "test_accuracy", "lr"):
                rows.append({"step": record.step, "score": name,
                             "value": getattr(record, name)})
            for p, value in zip(self.answer_positions, record.test_accuracy_by_position):
                rows.append({"step": record.step, "score": "accuracy_at", "answer_pos": p,
                             "value": value})
        frame = pd.DataFrame.from_records(rows)
        if "answer_pos" in frame:
            frame["answer_pos"] = frame["answer_pos"].astype("Int64")
        return frame

    def summary(self) -> dict:
        """The task, the steps run, the final test accuracy and loss, when the target was
        reached and the wall time."""
        final = self.final if self.history else None
        return {"task": self.task, "steps_run": self.steps_run,
                "test_accuracy": None if final is None else final.test_accuracy,
                "test_loss": None if final is None else final.test_loss,
                "reached_target_at": self.reached_target_at, "train_time_s": self.train_time_s}

    def _headline(self) -> list[str]:
        return [f"test_accuracy={self.test_accuracy:.3g}" if self.history else "no evaluations"]


@torch.no_grad()
def evaluate(model: TrainableModel, task: Task, batch: TaskBatch | None = None, *,
             chunk: int = 4096, forward_batch: int | None = None) -> EvalResult:
    """Accuracy of ``model`` on ``batch`` (the task's test set by default).

    The prediction is the argmax over the whole vocabulary at the last position. The loss
    is summed per block of ``chunk`` sentences; ``forward_batch`` runs each block's forward
    in pieces of that many sentences (``None``: the block at once), whose last-position
    logits are joined before scoring (``TrainConfig.eval_batch``).
    """
    if batch is None:
        batch = task.test_set()
    device = next(model.parameters()).device
    batch = batch.to(device)
    was_training = model.training
    model.eval()
    try:
        losses, preds = [], []
        for start in range(0, len(batch), chunk):
            part = batch[start: start + chunk]
            if forward_batch is None:
                logits = model(part.tokens)[:, -1]
            else:
                logits = torch.cat([model(part.tokens[i: i + forward_batch])[:, -1]
                                    for i in range(0, len(part), forward_batch)])
            losses.append(torch.nn.functional.cross_entropy(logits, part.answers, reduction="sum"))
            preds.append(logits.argmax(dim=-1))
    finally:
        model.train(was_training)
    pred = torch.cat(preds)
    by_pos = task.accuracy_by_position(pred, batch)
    return EvalResult(
        accuracy=float((pred == batch.answers).float().mean()),
        accuracy_by_position=by_pos.tolist(),
        loss=float(torch.stack(losses).sum() / len(batch)),
        answer_positions=task.answer_positions,
    )


Callback = Callable[[int, TrainableModel], None]


class DropoutStream:
    """The random numbers a model's dropout draws during training, kept apart from the
    global RNG and saved with every checkpoint.

    Hugging Face modules (GPT-J's dropout) draw from the global generator of the device
    they run on. Inside :meth:`active` that generator is forked
    (:func:`torch.random.fork_rng`), set to this stream's state, and the state it reaches is
    kept when the block ends; the caller's global RNG is restored untouched. So dropout is
    seeded by the run's seed, a resumed run draws exactly the masks the uninterrupted one
    would have, and training never moves the caller's RNG. A model with its own seeded
    generator (paper B's encoder) or without dropout draws nothing here.

    ``state`` is ``{"cpu": uint8 tensor}`` plus ``"cuda"`` when the model runs on a GPU.
    """

    def __init__(self, seed: int, device: torch.device) -> None:
        self.device = device
        with self._forked():
            torch.manual_seed(seed + DROPOUT_SEED_OFFSET)
            self.state = self._read()

    def _cuda_index(self) -> list[int]:
        if self.device.type != "cuda":
            return []
        return [self.device.index if self.device.index is not None
                else torch.cuda.current_device()]

    def _forked(self):
        return torch.random.fork_rng(devices=self._cuda_index())

    def _read(self) -> dict[str, Tensor]:
        state = {"cpu": torch.get_rng_state()}
        for index in self._cuda_index():
            state["cuda"] = torch.cuda.get_rng_state(index)
        return state

    @contextmanager
    def active(self):
        """Run the block's random draws (dropout masks) from this stream."""
        with self._forked():
            torch.set_rng_state(self.state["cpu"])
            for index in self._cuda_index():
                if "cuda" in self.state:
                    torch.cuda.set_rng_state(self.state["cuda"], index)
            yield
            self.state = self._read()

    def load(self, state: dict[str, Tensor] | None) -> None:
        """Continue from a checkpoint's state (``None``: a checkpoint written before the
        stream was saved; the seeded start is kept, so that run is not bit-identical)."""
        if state is not None:
            self.state = {k: v.clone() for k, v in state.items()}


def _param_groups(model: TrainableModel, config: TrainConfig) -> list[dict]:
    """AdamW's parameter groups: ``weight_decay`` on every parameter, or (``decay =
    "matrices"``) only on those of two or more dimensions."""
    params = [p for p in model.parameters() if p.requires_grad]
    if config.decay == "all":
        return [{"params": params, "weight_decay": config.weight_decay}]
    return [{"params": [p for p in params if p.dim() >= 2], "weight_decay": config.weight_decay},
            {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]


def train(model: TrainableModel, task: Task, config: TrainConfig | None = None, *,
          callbacks: Sequence[Callback] = (), log: Callable[[str], None] | None = None,
          resume: bool = False) -> TrainResult:
    """Train ``model`` on ``task`` (in place) and return its metrics.

    Args:
        model: a :class:`~lens_possym.training.models.TrainableModel` (e.g. a
            ``ToyTransformer``) whose vocabulary and context fit the task.
        task: a :class:`~lens_possym.training.tasks.Task`.
        config: :class:`TrainConfig` (defaults if ``None``).
        callbacks: functions ``fn(step, model)`` called at every evaluation (after the
            metrics are computed, model in eval mode, no grad), e.g. to record q/k
            trajectories; with callbacks the untrained model is evaluated at step 0 too.
        log: a function taking one line of text per evaluation (e.g. ``print``).
        resume: continue from ``config.out_dir``'s latest checkpoint when it has one
            (:func:`~lens_possym.training.runs.latest_checkpoint`): the model's weights,
            optimiser, data stream and history are restored and the run goes on to
            ``config.steps``; a finished run is returned as it is. The checkpoint must have
            been written with the same task, model configuration and training settings
            (``out_dir`` and ``device`` aside). Callbacks see only the steps run now.

    Returns:
        :class:`TrainResult`; also written to ``out_dir/metrics.json`` when set.
    """
    config = config or TrainConfig()
    _check_fit(model, task)
    if resume and config.out_dir is None:
        raise TrainingError("resume=True needs config.out_dir (the run folder to resume from)")
    device = resolve_device(config.device)
    model.to(device)
    out_dir = Path(config.out_dir) if config.out_dir else None
    test = task.test_set(config.eval_size).to(device)
    stream = torch.Generator().manual_seed(config.seed)    # the training split's data stream
    dropout = DropoutStream(config.seed, torch.device(device))
    optimizer = torch.optim.AdamW(_param_groups(model, config), lr=config.lr,
                                  betas=config.betas, weight_decay=config.weight_decay)
    history: list[EvalRecord] = []
    running = {"loss": 0.0, "correct": 0.0, "count": 0.0}
    reached, step, elapsed_before, finished = None, 0, 0.0, False
    ckpt = read_latest_checkpoint(out_dir) if resume else None
    if ckpt is not None:
        _check_resumable(ckpt, model, task, config)
        state = ckpt.state
        model.load_state_dict(ckpt.state_dict)
        model.to(device)
        optimizer.load_state_dict(state.optimizer)
        stream.set_state(state.data_stream)
        dropout.load(state.dropout_stream)
        history = [EvalRecord(**h) for h in state.history]
        running.update(state.running)
        reached, step = state.reached_target_at, ckpt.step
        elapsed_before, finished = state.elapsed_s, state.finished
    start = time.perf_counter()

    def elapsed() -> float:
        return elapsed_before + time.perf_counter() - start

    def training_state(done: bool) -> TrainingState:
        return TrainingState(
            train_config=asdict(config), optimizer=optimizer.state_dict(),
            data_stream=stream.get_state(), dropout_stream=dropout.state,
            history=[asdict(h) for h in history],
            running=dict(running), reached_target_at=reached, elapsed_s=elapsed(),
            finished=done)

    def evaluate_now(step: int) -> EvalRecord:
        result = evaluate(model, task, test, forward_batch=config.eval_batch)
        count = max(running["count"], 1)
        record = EvalRecord(
            step=step,
            train_loss=running["loss"] / count,
            train_accuracy=running["correct"] / count,
            test_loss=result.loss,
            test_accuracy=result.accuracy,
            test_accuracy_by_position=result.accuracy_by_position,
            lr=config.lr_at(max(step - 1, 0)),
            elapsed_s=elapsed(),
        )
        running.update(loss=0.0, correct=0.0, count=0.0)
        history.append(record)
        if log:
            log(f"step {step:>6}  loss {record.train_loss:.4f}  train acc "
                f"{record.train_accuracy:.3f}  test acc {record.test_accuracy:.4f}")
        if callbacks:
            model.eval()
            with torch.no_grad():
                for fn in callbacks:
                    fn(step, model)
            model.train()
        return record

    epoch_size = getattr(task, "epoch_size", None)
    model.train()
    if callbacks and step == 0:
        evaluate_now(0)
    while step < config.steps and not finished:
        for group in optimizer.param_groups:
            group["lr"] = config.lr_at(step)
        if epoch_size:   # a fixed training set walked in epochs (paper B's official regime)
            batch = task.train_batch(step, config.batch_size, config.seed).to(device)
        else:
            batch = task.sample(config.batch_size, split="train", generator=stream).to(device)
        with dropout.active():
            logits = model(batch.tokens)[:, -1]
        loss = torch.nn.functional.cross_entropy(logits, batch.answers)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if config.grad_clip is not None:
            torch.nn.utils.clip_grad_norm_(model.parameters(), config.grad_clip)
        optimizer.step()
        step += 1
        running["loss"] += float(loss.detach()) * len(batch)
        running["correct"] += float((logits.argmax(-1) == batch.answers).sum())
        running["count"] += len(batch)
        last = step == config.steps
        if step % config.eval_every == 0 or last:
            record = evaluate_now(step)
            if (config.target_accuracy is not None and reached is None
                    and record.test_accuracy >= config.target_accuracy):
                reached = step
                break
        if out_dir and config.checkpoint_every and step % config.checkpoint_every == 0:
            save_checkpoint(model, task, out_dir / f"checkpoint_{step:06d}.pt", step=step,
                            state=training_state(done=False))
    model.eval()
    result = TrainResult(
        task=task.name, task_config=task.config(), model_config=model.cfg.to_dict(),
        train_config=asdict(config), history=history, steps_run=step,
        train_time_s=elapsed(), answer_positions=task.answer_positions,
        reached_target_at=reached,
    )
    if out_dir:
        save_checkpoint(model, task, out_dir / "model.pt", step=step,
                        state=training_state(done=True))
        result.save(out_dir / "metrics.json")
    return result


@boundary
def resume(run_dir: str | Path, *, device: str | None = None,
           callbacks: Sequence[Callback] = (), log: Callable[[str], None] | None = None
           ) -> tuple[TrainableModel, Task, TrainResult]:
    """Continue the run in ``run_dir`` from its latest checkpoint: ``(model, task, result)``.

    The model, task and training settings are read from the checkpoint (``device``
    overrides where it runs); see :func:`train`'s ``resume``.
    """
    ckpt = read_latest_checkpoint(run_dir)
    if ckpt is None:
        raise TrainingError(f"no checkpoint in {run_dir} to resume from (checkpoints are "
                            "written every TrainConfig.checkpoint_every steps)")
    if ckpt.state is None:
        raise TrainingError(f"{ckpt.path} was written without its training state and cannot be "
                            "resumed; train the run again")
    settings = dict(ckpt.state.train_config, out_dir=str(run_dir))
    if device is not None:
        settings["device"] = device
    config = TrainConfig(**settings)
    model, task = ckpt.model(), ckpt.make_task()
    return model, task, train(model, task, config, callbacks=callbacks, log=log, resume=True)


def _check_fit(model: TrainableModel, task: Task) -> None:
    if not isinstance(task, Task):
        raise TrainingError(f"train expects a Task such as IndexTask, got {type(task).__name__}"
                            "; build one with make_task(name)")
    if not isinstance(model, TrainableModel):
        raise TrainingError(f"train expects a TrainableModel such as ToyTransformer, got "
                            f"{type(model).__name__}")
    if model.cfg.d_vocab < task.d_vocab or model.cfg.n_ctx < task.n_ctx:
        raise TrainingError(
            f"the model (d_vocab {model.cfg.d_vocab}, n_ctx {model.cfg.n_ctx}) is too small for "
            f"{task.describe()}; build it with toy_config_for(task)")


def _check_resumable(ckpt: Checkpoint, model: TrainableModel, task: Task,
                     config: TrainConfig) -> None:
    """Refuse to continue a run with settings other than those it was written with."""
    if ckpt.state is None:
        raise TrainingError(f"{ckpt.path} was written without its training state and cannot "
                            "be resumed; train into a new out_dir")
    differ = ckpt.differs_from(model, task, config)
    if differ:
        raise TrainingError(
            f"{ckpt.path} was written by a different run ({', '.join(differ)} differ); "
            "resume with the settings it was written with, or train into a new out_dir")
