r"""Runs on disk: the checkpoint file, the run folder, ``metrics.json``.

A run folder (``TrainConfig.out_dir``) holds::

    checkpoint_000100.pt ...  every ``checkpoint_every`` steps
    model.pt                  the final model
    metrics.json              the run's :class:`~lens_possym.training.loop.TrainResult`

Every checkpoint is a ``torch.save`` dict (read with ``weights_only=True``) that names the
model (``model`` = its :data:`~lens_possym.training.models.MODELS` key, ``model_config``,
``state_dict``), the task (``task``, ``task_config``) and the step, and carries the
:class:`TrainingState` that lets :func:`~lens_possym.training.loop.train` go on from
it exactly as if it had never stopped: optimiser moments, the data stream's generator
state, the evaluations so far and the running training loss. ``model.pt`` is marked
``finished``. Checkpoints written before the training state existed still load as models
(:func:`load_checkpoint`); they cannot be resumed.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

import torch
from torch import Tensor

from .._checks import boundary
from .._inputs import resolve_device
from .._json import dumps, to_jsonable
from ..errors import TrainingError
from .models import MODELS, TrainableModel
from .tasks import Task, make_task
from .._files import save_atomically
from .._files import remove_stale
from .._files import write_text_atomically

__all__ = [
    "CHECKPOINT_FORMAT",
    "TrainingState",
    "Checkpoint",
    "save_checkpoint",
    "read_checkpoint",
    "load_checkpoint",
    "latest_checkpoint",
    "checkpoint_paths",
    "read_latest_checkpoint",
    "write_json",
]

CHECKPOINT_FORMAT = "lens-possym-toy/1"
#: TrainConfig fields that may differ between an interrupted run and its resumption: they
#: say where, on what and in what pieces the run happens, not what it computes
SETTINGS_THAT_MAY_DIFFER = ("out_dir", "device", "eval_batch")
_CHECKPOINT_NAME = re.compile(r"checkpoint_(\d+)\.pt")


@dataclass
class TrainingState:
    """Everything besides the weights that the loop needs to continue a run bit for bit.

    Attributes:
        train_config: the run's ``TrainConfig`` as a dict.
        optimizer: the AdamW ``state_dict``.
        data_stream: state of the training stream's ``torch.Generator`` (uint8 tensor).
        dropout_stream: the dropout stream's state (``DropoutStream.state``: ``{"cpu":
            uint8 tensor}``, plus ``"cuda"`` on a GPU); ``None`` in checkpoints written
            before it was saved.
        history: the evaluations so far (``EvalRecord`` dicts).
        running: training loss/correct/count summed since the last evaluation.
        reached_target_at: first step that reached ``target_accuracy`` (``None``: not yet).
        elapsed_s: wall time spent in the loop so far.
        finished: the run is over (written to ``model.pt``).
    """

    train_config: dict
    optimizer: dict
    data_stream: Tensor
    history: list[dict]
    running: dict[str, float] = field(default_factory=dict)
    dropout_stream: dict[str, Tensor] | None = None
    reached_target_at: int | None = None
    elapsed_s: float = 0.0
    finished: bool = False


@dataclass
class Checkpoint:
    """A checkpoint file as read: what it describes and, if it has one, its training state."""

    path: Path
    step: int
    model_kind: str
    model_config: dict
    state_dict: dict
    task: str
    task_config: dict
    state: TrainingState | None

    def model(self, device: str = "cpu") -> TrainableModel:
        """The model with the checkpoint's weights, in eval mode, on ``device``."""
        model = MODELS[self.model_kind].from_config(self.model_config)
        model.load_state_dict(self.state_dict)
        return model.to(resolve_device(device)).eval()

    def make_task(self) -> Task:
        return make_task(self.task, **self.task_config)

    def differs_from(self, model: TrainableModel, task: Task, config) -> list[str]:
        """What would make this checkpoint another run than ``(model, task, config)``:
        ``"task"``, ``"model"`` and the names of the ``TrainConfig`` fields that differ
        (:data:`SETTINGS_THAT_MAY_DIFFER` aside); ``["training state"]`` for a checkpoint
        written without one. Empty: the same run."""
        if self.state is None:
            return ["training state"]
        theirs = {k: v for k, v in self.state.train_config.items()
                  if k not in SETTINGS_THAT_MAY_DIFFER}
        ours = {k: v for k, v in asdict(config).items() if k not in SETTINGS_THAT_MAY_DIFFER}
        theirs["betas"] = tuple(theirs["betas"])
        # a setting added after the checkpoint was written took its default there
        defaults = {f.name: f.default for f in fields(config)}
        return [name for name, a, b in [
            ("task", (self.task, self.task_config), (task.name, task.config())),
            ("model", (self.model_kind, to_jsonable(self.model_config)),
             (model.kind, to_jsonable(model.cfg.to_dict()))),
        ] if a != b] + [name for name in ours
                        if ours[name] != theirs.get(name, defaults.get(name))]


def save_checkpoint(model: TrainableModel, task: Task, path: str | Path, *, step: int,
                    state: TrainingState | None = None) -> Path:
    """Write model (kind, config, weights and buffers), task, step and, when given, the
    training state to ``path``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    data = {
        "format": CHECKPOINT_FORMAT,
        "step": step,
        "model": model.kind,
        "model_config": model.cfg.to_dict(),
        "state_dict": {k: v.detach().cpu() for k, v in model.state_dict().items()},
        "task": task.name,
        "task_config": task.config(),
    }
    if state is not None:
        data["training_state"] = asdict(state)
    # written beside its final name, synced and renamed: a kill mid-write leaves the
    # previous checkpoint as the latest, never a torn file under a checkpoint's name; a
    # full disk is an OutputError naming the file

    return save_atomically(data, path)


@boundary
def read_checkpoint(path: str | Path) -> Checkpoint:
    """Read and check a checkpoint file written by :func:`save_checkpoint`."""
    path = Path(path)
    if not path.is_file():
        raise TrainingError(f"no checkpoint at {path}")
    try:
        data = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 - any unreadable file is the same problem
        raise TrainingError(f"{path} is not a readable lens-possym checkpoint ({exc})") from exc
    if not isinstance(data, dict) or data.get("format") != CHECKPOINT_FORMAT:
        raise TrainingError(f"{path} is not a lens-possym toy checkpoint")
    kind = data.get("model", "toy")  # checkpoints of 0.1.0 knew only the toy model
    if kind not in MODELS:
        raise TrainingError(f"{path} holds a {kind!r} model, which this version does not know "
                            f"(known: {sorted(MODELS)})")
    raw = data.get("training_state")
    return Checkpoint(
        path=path, step=int(data["step"]), model_kind=kind, model_config=data["model_config"],
        state_dict=data["state_dict"], task=data["task"], task_config=data["task_config"],
        state=TrainingState(**raw) if raw is not None else None,
    )


@boundary
def load_checkpoint(path: str | Path, *, device: str = "cpu"
                    ) -> tuple[TrainableModel, Task, dict]:
    """Read a checkpoint written by :func:`~lens_possym.training.loop.train`:
    ``(model, task, info)`` with ``info = {"step": ..., "resumable": ...}``."""
    ckpt = read_checkpoint(path)
    return ckpt.model(device), ckpt.make_task(), {"step": ckpt.step,
                                                  "resumable": ckpt.state is not None}


def _numbered(run_dir: Path) -> list[tuple[int, Path]]:
    """``[(step, path)]`` of the ``checkpoint_*.pt`` files, sorted by step."""
    return sorted((int(m.group(1)), p) for p in run_dir.glob("checkpoint_*.pt")
                  if (m := _CHECKPOINT_NAME.fullmatch(p.name)))


@boundary
def latest_checkpoint(run_dir: str | Path) -> Path | None:
    """The checkpoint a run folder would resume from: ``model.pt`` when the run finished,
    else the ``checkpoint_*.pt`` with the highest step; ``None`` when there is none."""
    run_dir = Path(run_dir)
    if (run_dir / "model.pt").is_file():
        return run_dir / "model.pt"
    found = _numbered(run_dir)
    return found[-1][1] if found else None


@boundary
def checkpoint_paths(run_dir: str | Path) -> list[tuple[int, Path]]:
    """``[(step, path)]`` of every checkpoint of a run folder, sorted by step: the
    ``checkpoint_*.pt`` files, plus ``model.pt`` when its step is not among them.

    Raises:
        TrainingError: the folder holds no checkpoint.
    """
    run_dir = Path(run_dir)
    found = _numbered(run_dir)
    final = run_dir / "model.pt"
    if final.is_file():
        step = read_checkpoint(final).step
        if step not in {s for s, _ in found}:
            found.append((step, final))
    if not found:
        raise TrainingError(f"no checkpoints in {run_dir}; train with checkpoint_every and "
                            "out_dir set to keep them")
    return sorted(found)


def read_latest_checkpoint(run_dir: str | Path) -> Checkpoint | None:
    """The newest checkpoint of ``run_dir`` that reads (``model.pt`` first, then
    ``checkpoint_*.pt`` by step, newest first); ``None`` when there is none.

    Checkpoints are written atomically, so a torn one should not exist; if the newest is
    unreadable anyway (a disk fault, a copy cut short) the run goes back to the one before
    it, with a warning naming the bad file, instead of refusing to resume. Temporary files
    of writes that were killed are removed.

    Raises:
        TrainingError: every checkpoint there is unreadable.
    """
    import warnings


    run_dir = Path(run_dir)
    numbered = _numbered(run_dir)
    ours = {"model.pt", "metrics.json"} | {p.name for _, p in numbered}
    ours |= {m.group(1) for p in run_dir.glob("checkpoint_*.pt.*")
             if (m := re.match(r"(checkpoint_\d+\.pt)\.(?:tmp-|partial-)", p.name))}
    remove_stale(run_dir, names=ours)
    candidates = ([run_dir / "model.pt"] if (run_dir / "model.pt").is_file() else []) + [
        p for _, p in reversed(numbered)]
    problems = []
    for path in candidates:
        try:
            ckpt = read_checkpoint(path)
        except TrainingError as exc:
            problems.append(str(exc))
            continue
        if problems:
            warnings.warn(f"{'; '.join(problems)}; resuming from {path.name} instead",
                          stacklevel=2)
        return ckpt
    if problems:
        raise TrainingError(f"no checkpoint in {run_dir} can be read ({'; '.join(problems)}); "
                            "delete them to train the run from the start")
    return None


def write_json(obj: dict, path: str | Path) -> Path:
    """Write ``obj`` as JSON (non-finite floats as ``null``), creating the folder."""

    return write_text_atomically(Path(path), dumps(obj, indent=1))
