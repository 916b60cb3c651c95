r"""Training toy models on the canonical tasks: a plain, fast loop.

:func:`train` runs AdamW on the cross-entropy of the **last position's** prediction (the
answer), with linear warm-up then cosine decay, gradient clipping, evaluation on the task's
fixed test set every ``eval_every`` steps (accuracy overall and by answer position), optional
early stop at a target accuracy, checkpoints and a ``metrics.json``. Data come from the
task's seeded training stream (test sequences never appear); weights from the model's own
seed; the global RNG is never touched, so runs are reproducible and do not disturb callers.

Everything runs on the model's device; ``device="auto"`` moves the model to a GPU when one
is present.

Example::

    task = IndexTask()
    model = ToyTransformer(toy_config_for(task, freq_ids=[3]))
    result = train(model, task, TrainConfig(steps=2000))
    result.test_accuracy, result.test_accuracy_by_position
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import torch

from ._inputs import resolve_device
from .errors import TrainingError
from .tasks.canonical import CanonicalTask, TaskBatch, make_task
from .toy.model import ToyConfig, ToyTransformer

__all__ = [
    "TrainConfig",
    "EvalRecord",
    "TrainResult",
    "EvalResult",
    "train",
    "evaluate",
    "toy_config_for",
    "load_checkpoint",
    "resolve_device",
]


@dataclass
class TrainConfig:
    """Settings of :func:`train` (validated on creation).

    Attributes:
        steps: optimiser steps (upper bound when ``target_accuracy`` stops early).
        batch_size: prompts per step.
        lr, weight_decay, betas: AdamW.
        warmup_steps: linear warm-up, then cosine decay to ``lr·min_lr_ratio``.
        min_lr_ratio: final learning rate as a share of ``lr``.
        grad_clip: max gradient norm (``None``: no clipping).
        seed: seed of the training data stream (the model's weights use its own seed).
        eval_every: evaluate on the test set every this many steps (and at the end).
        eval_size: test-set size.
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
    warmup_steps: int = 100
    min_lr_ratio: float = 0.05
    grad_clip: float | None = 1.0
    seed: int = 0
    eval_every: int = 250
    eval_size: int = 2048
    target_accuracy: float | None = None
    checkpoint_every: int | None = None
    out_dir: str | None = None
    device: str = "auto"

    def __post_init__(self) -> None:
        for name in ("steps", "batch_size", "eval_every", "eval_size"):
            if int(getattr(self, name)) < 1:
                raise TrainingError(f"{name} must be >= 1, got {getattr(self, name)}")
        if not self.lr > 0:
            raise TrainingError(f"lr must be > 0, got {self.lr}")
        if self.weight_decay < 0 or self.warmup_steps < 0:
            raise TrainingError("weight_decay and warmup_steps must be >= 0")
        if not 0 <= self.min_lr_ratio <= 1:
            raise TrainingError(f"min_lr_ratio must be in [0, 1], got {self.min_lr_ratio}")
        self.betas = tuple(float(b) for b in self.betas)
        if len(self.betas) != 2 or not all(0 <= b < 1 for b in self.betas):
            raise TrainingError(f"betas must be two numbers in [0, 1), got {self.betas}")
        if self.grad_clip is not None and not self.grad_clip > 0:
            raise TrainingError(f"grad_clip must be None or > 0, got {self.grad_clip}")
        if self.target_accuracy is not None and not 0 < self.target_accuracy <= 1:
            raise TrainingError(f"target_accuracy must be in (0, 1], got {self.target_accuracy}")
        if self.checkpoint_every is not None:
            if self.checkpoint_every < 1:
                raise TrainingError("checkpoint_every must be None or >= 1")
            if self.out_dir is None:
                raise TrainingError("checkpoint_every needs out_dir (where to write them)")

    def lr_at(self, step: int) -> float:
        """Learning rate at ``step`` (0-based): warm-up, then cosine decay."""
        if step < self.warmup_steps:
            return self.lr * (step + 1) / self.warmup_steps
        span = max(1, self.steps - self.warmup_steps)
        progress = min(1.0, (step - self.warmup_steps) / span)
        cosine = 0.5 * (1 + math.cos(math.pi * progress))
        return self.lr * (self.min_lr_ratio + (1 - self.min_lr_ratio) * cosine)


@dataclass
class EvalResult:
    """Accuracy of a model on a batch: overall, by answer position, and the mean loss."""

    accuracy: float
    accuracy_by_position: list[float]
    loss: float
    answer_positions: list[int]


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


@dataclass
class TrainResult:
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
    extra: dict = field(default_factory=dict)

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

    def save(self, path: str | Path) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(_jsonable(self.to_dict()), indent=1))
        return path


def _jsonable(obj: Any) -> Any:
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    return obj


def toy_config_for(task: CanonicalTask, *, n_freqs: int = 16, rope_base: float = 10000.0,
                   nope_dims: int = 2, angles: Sequence[float] | None = None,
                   **overrides: Any) -> ToyConfig:
    """A :class:`ToyConfig` sized for ``task``: one layer, one head, one-hot embeddings.

    The head has ``n_freqs`` rotated pairs on the standard schedule (``base^(-2k/R)``,
    ids ``0..n_freqs-1``, fastest first) plus ``nope_dims`` non-rotated dims that form the
    last id, ``n_freqs``, with angle 0 (``nope_dims=0`` drops it). ``d_head`` is at least
    the number of answer tokens, so the value/output path can copy every answer.
    ``angles`` replaces the schedule by an explicit list. Other fields via ``overrides``.
    """
    if angles is not None:
        n_freqs = len(angles)
    if nope_dims < 0:
        raise TrainingError(f"nope_dims must be >= 0, got {nope_dims}")
    rotary_dim = 2 * n_freqs
    d_head = max(rotary_dim + nope_dims, len(task.answer_tokens))
    settings: dict[str, Any] = dict(d_vocab=task.d_vocab, n_ctx=task.n_ctx, d_head=d_head,
                                    rotary_dim=rotary_dim, rope_base=rope_base,
                                    angles=tuple(angles) if angles is not None else None)
    settings.update(overrides)
    return ToyConfig(**settings)


@torch.no_grad()
def evaluate(model: ToyTransformer, task: CanonicalTask, batch: TaskBatch | None = None, *,
             chunk: int = 4096) -> EvalResult:
    """Accuracy of ``model`` on ``batch`` (the task's test set by default).

    The prediction is the argmax over the whole vocabulary at the last position.
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
            logits = model(part.tokens)[:, -1]
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


Callback = Callable[[int, ToyTransformer], None]


def train(model: ToyTransformer, task: CanonicalTask, config: TrainConfig | None = None, *,
          callbacks: Sequence[Callback] = (), log: Callable[[str], None] | None = None
          ) -> TrainResult:
    """Train ``model`` on ``task`` (in place) and return its metrics.

    Args:
        model: a :class:`ToyTransformer` whose vocabulary and context fit the task.
        task: a canonical task.
        config: :class:`TrainConfig` (defaults if ``None``).
        callbacks: functions ``fn(step, model)`` called at every evaluation (after the
            metrics are computed, model in eval mode, no grad), e.g. to record q/k
            trajectories.
        log: a function taking one line of text per evaluation (e.g. ``print``).

    Returns:
        :class:`TrainResult`; also written to ``out_dir/metrics.json`` when set.
    """
    config = config or TrainConfig()
    if not isinstance(model, ToyTransformer):
        raise TrainingError(f"train expects a ToyTransformer, got {type(model).__name__}")
    if model.cfg.d_vocab < task.d_vocab or model.cfg.n_ctx < task.n_ctx:
        raise TrainingError(
            f"the model (d_vocab {model.cfg.d_vocab}, n_ctx {model.cfg.n_ctx}) is too small for "
            f"{task.describe()}; build it with toy_config_for(task)")
    device = resolve_device(config.device)
    model.to(device)
    out_dir = Path(config.out_dir) if config.out_dir else None
    test = task.test_set(config.eval_size).to(device)
    stream = task.train_batches(config.batch_size, seed=config.seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=config.lr, betas=config.betas,
                                  weight_decay=config.weight_decay)
    history: list[EvalRecord] = []
    reached = None
    run_loss = run_correct = run_count = 0.0
    start = time.perf_counter()
    step = 0

    def evaluate_now(step: int) -> EvalRecord:
        nonlocal run_loss, run_correct, run_count
        result = evaluate(model, task, test)
        record = EvalRecord(
            step=step,
            train_loss=run_loss / max(run_count, 1),
            train_accuracy=run_correct / max(run_count, 1),
            test_loss=result.loss,
            test_accuracy=result.accuracy,
            test_accuracy_by_position=result.accuracy_by_position,
            lr=config.lr_at(max(step - 1, 0)),
            elapsed_s=time.perf_counter() - start,
        )
        run_loss = run_correct = run_count = 0.0
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

    model.train()
    if callbacks:
        evaluate_now(0)
    while step < config.steps:
        for group in optimizer.param_groups:
            group["lr"] = config.lr_at(step)
        batch = next(stream).to(device)
        logits = model(batch.tokens)[:, -1]
        loss = torch.nn.functional.cross_entropy(logits, batch.answers)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if config.grad_clip is not None:
            torch.nn.utils.clip_grad_norm_(model.parameters(), config.grad_clip)
        optimizer.step()
        step += 1
        run_loss += float(loss.detach()) * len(batch)
        run_correct += float((logits.argmax(-1) == batch.answers).sum())
        run_count += len(batch)
        last = step == config.steps
        if step % config.eval_every == 0 or last:
            record = evaluate_now(step)
            if (config.target_accuracy is not None and reached is None
                    and record.test_accuracy >= config.target_accuracy):
                reached = step
                break
        if out_dir and config.checkpoint_every and step % config.checkpoint_every == 0:
            save_checkpoint(model, task, out_dir / f"checkpoint_{step:06d}.pt", step=step)
    model.eval()
    result = TrainResult(
        task=task.name, task_config=task.config(), model_config=model.cfg.to_dict(),
        train_config=asdict(config), history=history, steps_run=step,
        train_time_s=time.perf_counter() - start, answer_positions=task.answer_positions,
        reached_target_at=reached,
    )
    if out_dir:
        save_checkpoint(model, task, out_dir / "model.pt", step=step)
        result.save(out_dir / "metrics.json")
    return result


def save_checkpoint(model: ToyTransformer, task: CanonicalTask, path: str | Path, *,
                    step: int) -> Path:
    """Write model weights, gate, configs and step to ``path`` (a ``torch.save`` file)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({
        "format": "lens-possym-toy/1",
        "step": step,
        "model_config": model.cfg.to_dict(),
        "state_dict": {k: v.detach().cpu() for k, v in model.state_dict().items()},
        "task": task.name,
        "task_config": task.config(),
    }, path)
    return path


def load_checkpoint(path: str | Path, *, device: str = "cpu"
                    ) -> tuple[ToyTransformer, CanonicalTask, dict]:
    """Read a checkpoint written by :func:`train`: ``(model, task, info)``."""
    path = Path(path)
    if not path.is_file():
        raise TrainingError(f"no checkpoint at {path}")
    try:
        data = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 - any unreadable file is the same problem
        raise TrainingError(f"{path} is not a readable lens-possym checkpoint ({exc})") from exc
    if not isinstance(data, dict) or data.get("format") != "lens-possym-toy/1":
        raise TrainingError(f"{path} is not a lens-possym toy checkpoint")
    model = ToyTransformer(ToyConfig.from_dict(data["model_config"]))
    model.load_state_dict(data["state_dict"])
    model.to(resolve_device(device)).eval()
    task = make_task(data["task"], **data["task_config"])
    return model, task, {"step": data["step"]}
