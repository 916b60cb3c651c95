r"""Analyses of a trained head during and after training: its positional/symbolic scores
(:func:`head_scores`) and its query and key on one frequency's rotation plane over
training (:class:`QKTrajectory`, paper A Figure 3B).

Both are read through the hook names every lens-possym model shares, so they apply to any
trained model that describes its RoPE geometry (``lens_possym_rope_specs()``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
from jaxtyping import Float
from torch import Tensor

from ..execution import resolve_executor
from ..results_io import ResultIO
from ..scores.profile import swap_scores
from ..typing import HookedModel
from .runs import checkpoint_paths, read_checkpoint
from .tasks import TaskBatch

__all__ = ["HeadScores", "head_scores", "QKTrajectory", "checkpoint_scores", "CheckpointScores"]


@dataclass(repr=False)
class HeadScores(ResultIO):
    """Positional and symbolic scores of one head (mean over prompts).

    ``pos_freq``/``sym_freq`` are the ``[n_freqs]`` per-frequency scores (each frequency
    scored as a 2-D head). ``method`` says how they were computed.
    """

    pos: float
    sym: float
    pos_freq: list[float] | None = None
    sym_freq: list[float] | None = None
    method: str = ""

    FORMAT = "lens-possym/head-scores@1"

    def _table(self):
        """``score`` (``pos``, ``sym``) and ``value``, with ``frequency`` for the
        per-frequency scores."""
        import pandas as pd

        rows = [{"frequency": pd.NA, "score": name, "value": getattr(self, name)}
                for name in ("pos", "sym")]
        for name in ("pos_freq", "sym_freq"):
            rows += [{"frequency": f, "score": name, "value": v}
                     for f, v in enumerate(getattr(self, name) or [])]
        frame = pd.DataFrame.from_records(rows)
        frame["frequency"] = frame["frequency"].astype("Int64")
        return frame


def head_scores(model: HookedModel, tokens: Tensor, *, layer: int = 0, head: int = 0,
                tau: float = 1e-4) -> HeadScores:
    """Token-swap positional/symbolic scores of one head at the last position.

    A thin wrapper of :func:`lens_possym.swap_scores` (exact closed form, token swaps,
    no BOS: the toy tasks have none) that returns plain numbers for one head, with its
    per-frequency scores.
    """
    result = swap_scores(model, tokens.to(model.device), layers=[layer], heads=[head], tau=tau,
                         exclude_bos=False)
    pos_freq, sym_freq = result.pos_freq, result.sym_freq          # [n_layers, n_heads, ...]
    return HeadScores(
        pos=float(result.pos[layer, head]), sym=float(result.sym[layer, head]),
        pos_freq=None if pos_freq is None else pos_freq[layer, head].tolist(),
        sym_freq=None if sym_freq is None else sym_freq[layer, head].tolist(),
        method="lens_possym.swap_scores (token swaps, exact)",
    )


@dataclass(repr=False)
class CheckpointScores(ResultIO):
    """One checkpoint's head scores (:func:`checkpoint_scores`)."""

    path: str
    step: int
    scores: HeadScores

    FORMAT = "lens-possym/checkpoint-scores@1"

    @classmethod
    def from_dict(cls, data: dict) -> "CheckpointScores":
        return cls(path=data["path"], step=int(data["step"]),
                   scores=HeadScores.from_dict(data["scores"]))

    def summary(self) -> dict:
        return {"path": self.path, "step": self.step, "pos": self.scores.pos,
                "sym": self.scores.sym}

    def _table(self):
        """The head's table (:class:`HeadScores`) with the checkpoint's ``step``."""
        frame = self.scores.to_dataframe()
        frame.insert(0, "step", self.step)
        return frame


@dataclass
class _ScoreCheckpoint:
    """Score one checkpoint file (picklable: it may run in a Ray worker)."""

    probe: Tensor | int
    layer: int
    head: int
    tau: float

    def __call__(self, path: str) -> CheckpointScores:
        ckpt = read_checkpoint(path)
        model = ckpt.model("cpu")
        probe = (ckpt.make_task().test_set(self.probe).tokens if isinstance(self.probe, int)
                 else self.probe)
        return CheckpointScores(str(path), ckpt.step, head_scores(
            model, probe, layer=self.layer, head=self.head, tau=self.tau))


def checkpoint_scores(run_dir, probe: Tensor | int = 64, *, layer: int = 0, head: int = 0,
                      tau: float = 1e-4, executor=None) -> list[CheckpointScores]:
    """The head's scores at every checkpoint of a run folder, in step order (paper C scores
    every checkpoint of every run).

    Args:
        run_dir: a run folder of :func:`~lens_possym.training.loop.train` (its
            ``checkpoint_*.pt`` and, when finished, ``model.pt``), or a list of them (one
            task per checkpoint of every folder).
        probe: tokens ``[batch, pos]`` to score on, or a number of test prompts of the
            checkpoint's own task.
        layer, head, tau: as :func:`head_scores`.
        executor: where checkpoints are scored (in process by default; a
            :class:`~lens_possym.execution.RayExecutor` scores them in parallel).

    Raises:
        TrainingError: a folder without checkpoints, or an unreadable one.
    """
    folders = [run_dir] if isinstance(run_dir, (str, Path)) else list(run_dir)
    paths = [str(path) for folder in folders for _, path in checkpoint_paths(folder)]
    task = _ScoreCheckpoint(probe if isinstance(probe, int) else probe.cpu(), layer, head, tau)
    return resolve_executor(executor).map(task, paths)


class QKTrajectory:
    """A training callback recording one head's q and k on one frequency's 2-D plane.

    At every evaluation it runs ``probe`` and keeps the pair of dims of frequency ``freq``
    of the query at the last position and of every key, un-rotated (``rotated=False``,
    the content the head writes on that plane) or as attention sees them after RoPE.

    Attributes (after training): ``steps`` ``[n_evals]``; ``q`` ``[n_evals, batch, 2]``;
    ``k`` ``[n_evals, batch, pos, 2]``.

    Example::

        traj = QKTrajectory(task.test_set(64), freq=3)
        train(model, task, config, callbacks=[traj])
    """

    def __init__(self, probe: TaskBatch, freq: int, *, layer: int = 0, head: int = 0,
                 rotated: bool = False):
        self.probe, self.freq, self.layer, self.head = probe, int(freq), int(layer), int(head)
        self.rotated = bool(rotated)
        self.steps: list[int] = []
        self._q: list[Tensor] = []
        self._k: list[Tensor] = []

    def __call__(self, step: int, model: HookedModel) -> None:
        spec = model.lens_possym_rope_specs()[self.layer]
        dims = spec.dims_of(self.freq)[:2]
        kind = "rot_" if self.rotated else ""
        names = [f"blocks.{self.layer}.attn.hook_{kind}q", f"blocks.{self.layer}.attn.hook_{kind}k"]
        store: dict[str, Tensor] = {}

        def keep(t, hook):
            store[hook.name] = t[:, :, self.head][..., dims].detach().cpu()
            return t

        stop = self.layer + 1 if self.layer + 1 < model.cfg.n_layers else None
        model.run_with_hooks(self.probe.tokens.to(model.device),
                             fwd_hooks=[(name, keep) for name in names], return_type=None,
                             stop_at_layer=stop)
        self.steps.append(int(step))
        self._q.append(store[names[0]][:, -1])
        self._k.append(store[names[1]])

    @property
    def q(self) -> Float[Tensor, "eval batch 2"]:
        return torch.stack(self._q)

    @property
    def k(self) -> Float[Tensor, "eval batch pos 2"]:
        return torch.stack(self._k)

    def to_dict(self) -> dict:
        return {"steps": self.steps, "freq": self.freq, "layer": self.layer, "head": self.head,
                "rotated": self.rotated, "q": self.q.tolist(), "k": self.k.tolist()}
