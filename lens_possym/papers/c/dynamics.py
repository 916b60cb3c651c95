r"""Learning dynamics of a multi-hop run (paper C Sec 3.1, Figs 2, 6, 7): every head's
positional and symbolic scores at every checkpoint, accuracy per hop count, attention
entropy, and the purity of heads over training.

:func:`score_run` reads the checkpoints of a run folder, wraps each model in a
TransformerBridge (:meth:`~lens_possym.papers.c.gptj.GPTJTaskModel.bridge`) and
computes, on one fixed set of test prompts:

* ``pos``/``sym`` ``[n_ckpt, n_layers, n_heads]``: :func:`lens_possym.swap_scores` at the
  last token (paper C's query), token swaps over all pairs before it, ``tau = 1e-4``
  (paper C's default), the exact closed form unless ``method="rerun"``;
* ``entropy`` ``[n_ckpt, n_layers, n_heads]``: entropy of the last token's attention,
  ``H = -Σ_j a_j log a_j`` divided by ``log n`` (the paper then min-max normalises it per
  layer over training: :meth:`ScoreTrajectory.entropy_minmax`);
* ``accuracy``/``accuracy_by_hops`` on the task's test set.

:func:`path_scores` scores the heads with the query at each stop of the hop path instead
(``p_k``, ``k = 0..max_hops-1``, prompts grouped by that position), as the paper's code
does with ``query_type="hops"``.

**Purity** (paper footnote 3, App E): a head is *pure positional* at a checkpoint when
``s_POS >= 1 - γ`` and ``s_SYM <= γ``, *pure symbolic* when the reverse holds; the paper
uses γ ∈ {0.1, 0.05} without defining it (paper_c.md §1 gives this reading).
:func:`purity` returns each head's first pure step and kind and the cumulative counts of
pure heads (a head, once pure, stays counted, as in the paper's Fig 2C).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Literal, Sequence

import torch
from jaxtyping import Float
from torch import Tensor

from ...plugins import tensor_from_json
from ...errors import InvalidSelectionError, TrainingError
from ...results_io import ResultIO, head_frame, lists_to_tensors
from ...training.runs import checkpoint_paths, read_checkpoint
from ...training.tasks import TaskBatch
from .tasks import MultiHopTask
from ...capture import capture_attention_inputs
from ...scores import swap_scores
from ...training.loop import evaluate

__all__ = [
    "checkpoint_paths",
    "ScoreTrajectory",
    "score_run",
    "score_model",
    "attention_entropy",
    "path_scores",
    "Purity",
    "purity",
]

Kind = Literal["positional", "symbolic"]


@torch.no_grad()
def attention_entropy(bridge, tokens: Tensor) -> Float[Tensor, "layer head_index"]:
    """Entropy of the last token's attention per head, divided by ``log n`` (mean over
    prompts): 1 for uniform attention, 0 for attention on one key."""

    captured = capture_attention_inputs(bridge, tokens, query_positions=-1, model_scores=True)
    out = []
    for layer in sorted(captured):
        a = captured[layer].model_pattern[:, :, -1].double()          # [batch, head, key]
        h = -(a * a.clamp_min(1e-300).log()).sum(-1) / math.log(a.shape[-1])
        out.append(h.mean(0))
    return torch.stack(out).float()


def score_model(bridge, tokens: Tensor, *, method: str = "exact", layers=None
                ) -> tuple[Tensor, Tensor]:
    """``(pos, sym)`` ``[n_layers, n_heads]`` at the last token (token swaps, tau 1e-4)."""

    result = swap_scores(bridge, tokens, method=method, exclude_bos=False, per_frequency=False,
                         exclusion=False, check=False, layers=layers)
    return result.pos.float(), result.sym.float()


@dataclass(repr=False)
class ScoreTrajectory(ResultIO):
    """Scores, entropy and accuracy of every head at every checkpoint of one run.

    Attributes:
        task: the task's name; ``steps`` ``[n_ckpt]``.
        pos, sym, entropy: ``[n_ckpt, n_layers, n_heads]``.
        accuracy: ``[n_ckpt]`` test accuracy; ``accuracy_by_hops`` ``[n_ckpt, max_hops]``.
        n_prompts: prompts scored; ``method``: ``"exact"`` or ``"rerun"``.
        score_seconds: wall time of the scores alone, summed over checkpoints.
    """

    task: str
    steps: list[int]
    pos: Tensor
    sym: Tensor
    entropy: Tensor
    accuracy: list[float]
    accuracy_by_hops: list[list[float]]
    n_prompts: int
    method: str
    score_seconds: float = 0.0
    meta: dict = field(default_factory=dict)

    @property
    def n_layers(self) -> int:
        return self.pos.shape[1]

    def entropy_minmax(self) -> Tensor:
        """Entropy min-max normalised per head over training (the paper's curves)."""
        lo = self.entropy.min(0, keepdim=True).values
        hi = self.entropy.max(0, keepdim=True).values
        return (self.entropy - lo) / (hi - lo).clamp_min(1e-12)

    def to_dict(self) -> dict:
        return {"task": self.task, "steps": self.steps, "pos": self.pos.tolist(),
                "sym": self.sym.tolist(), "entropy": self.entropy.tolist(),
                "accuracy": self.accuracy, "accuracy_by_hops": self.accuracy_by_hops,
                "n_prompts": self.n_prompts, "method": self.method,
                "score_seconds": self.score_seconds, "meta": self.meta}

    FORMAT = "lens-possym/paper-c-score-trajectory@1"

    @classmethod
    def from_dict(cls, data: dict) -> "ScoreTrajectory":
        return super().from_dict(lists_to_tensors(data, ("pos", "sym", "entropy")))

    def summary(self) -> dict:
        return {"task": self.task, "n_checkpoints": len(self.steps),
                "last_step": self.steps[-1] if self.steps else None,
                "final_accuracy": self.accuracy[-1] if self.accuracy else None,
                "n_prompts": self.n_prompts, "method": self.method,
                "score_seconds": self.score_seconds}

    def _table(self):
        """One row per checkpoint, layer and head: ``step``, ``layer``, ``head``, ``score``
        (``pos``, ``sym``, ``entropy``) and ``value``."""
        frames = [head_frame({name: getattr(self, name)[i] for name in ("pos", "sym", "entropy")},
                             None, step=step).drop(columns=["frequency", "angle"])
                  for i, step in enumerate(self.steps)]
        import pandas as pd

        return pd.concat(frames, ignore_index=True)


def _prompts(task: MultiHopTask, n_prompts: int, seed: int) -> TaskBatch:
    return task.test_set(n_prompts, seed=seed)


def score_run(run_dir: str | Path, *, n_prompts: int = 100, method: str = "exact",
              steps: Sequence[int] | None = None, eval_size: int = 1024, seed: int = 1,
              training_eval: bool = False,
              log: Callable[[str], None] | None = None) -> ScoreTrajectory:
    """Score every checkpoint of a multi-hop run (module docstring).

    Args:
        run_dir: a run folder written by :func:`~lens_possym.training.loop.train`.
        n_prompts: test prompts scored at every checkpoint (the same ones throughout).
        method: ``"exact"`` (closed form) or ``"rerun"`` (re-run each block per swap).
        steps: only these checkpoint steps (all by default).
        eval_size: test prompts for the accuracy per hop count.
        seed: seed of the scored prompts and of the accuracy set (``seed + 1``).
        training_eval: measure accuracy on the test set the training loop evaluates on
            instead (``task.test_set(eval_size)``, the task's own seed; with the run's
            ``eval_size`` the overall accuracy is the run's history).
    """

    found = checkpoint_paths(run_dir)
    if steps is not None:
        wanted = {int(s) for s in steps}
        found = [(s, p) for s, p in found if s in wanted]
        missing = wanted - {s for s, _ in found}
        if missing:
            raise InvalidSelectionError(
                f"no checkpoint for steps {sorted(missing)} in {run_dir}; it has "
                f"{[s for s, _ in checkpoint_paths(run_dir)]}")
    first = read_checkpoint(found[0][1])
    task = first.make_task()
    if not isinstance(task, MultiHopTask):
        raise InvalidSelectionError(f"{run_dir} is a {task.name!r} run; score_run reads "
                                    "multi-hop (number/letter) runs")
    prompts = _prompts(task, n_prompts, seed)
    accuracy_set = (task.test_set(eval_size) if training_eval
                    else task.test_set(eval_size, seed=seed + 1))
    pos, sym, ent, acc, by_hops, steps_done, seconds = [], [], [], [], [], [], 0.0
    for step, path in found:
        model = read_checkpoint(path).model()
        model.eval()
        with torch.no_grad():
            pred = model(accuracy_set.tokens)[:, -1].argmax(-1)
        bridge = model.bridge()
        start = time.perf_counter()
        p, s = score_model(bridge, prompts.tokens, method=method)
        seconds += time.perf_counter() - start
        pos.append(p)
        sym.append(s)
        ent.append(attention_entropy(bridge, prompts.tokens))
        acc.append(float((pred == accuracy_set.answers).float().mean()))
        by_hops.append(task.accuracy_by_hops(pred, accuracy_set))
        steps_done.append(step)
        if log:
            log(f"step {step:>6}: acc {acc[-1]:.3f} by hops "
                f"{[round(a, 3) for a in by_hops[-1]]}")
    return ScoreTrajectory(task=task.name, steps=steps_done, pos=torch.stack(pos),
                           sym=torch.stack(sym), entropy=torch.stack(ent), accuracy=acc,
                           accuracy_by_hops=by_hops, n_prompts=n_prompts, method=method,
                           score_seconds=seconds, meta={"run_dir": str(run_dir), "seed": seed,
                                                        "training_eval": training_eval,
                                                        "eval_size": eval_size})


def path_scores(bridge, task: MultiHopTask, batch: TaskBatch, *, method: str = "exact"
                ) -> tuple[Tensor, Tensor, Tensor]:
    """Scores with the query at each stop of the hop path.

    For ``k = 0..max_hops-1`` the query is ``p_k`` (``p_0`` the last token) of every prompt
    that has more than ``k`` hops; prompts are grouped by that position (one
    :func:`~lens_possym.swap_scores` call per position, keys before it) and the scores
    averaged with the group sizes as weights.

    Returns:
        ``(pos, sym, count)``: ``[max_hops, n_layers, n_heads]`` scores and ``[max_hops]``
        prompts per stop.
    """

    hops, path = task.hop_path(batch.tokens)
    pos_out, sym_out, counts = [], [], []
    for k in range(task.max_hops):
        rows = hops > k
        if not rows.any():
            raise InvalidSelectionError(f"no prompt has more than {k} hops; sample more prompts")
        where = path[rows, k]
        tokens = batch.tokens[rows]
        total_p = total_s = 0.0
        for q in where.unique().tolist():
            sel = where == q
            result = swap_scores(bridge, tokens[sel][:, : q + 1], method=method,
                                 exclude_bos=False, per_frequency=False, exclusion=False,
                                 check=False)
            total_p = total_p + result.pos.float() * int(sel.sum())
            total_s = total_s + result.sym.float() * int(sel.sum())
        n = int(rows.sum())
        pos_out.append(total_p / n)
        sym_out.append(total_s / n)
        counts.append(n)
    return torch.stack(pos_out), torch.stack(sym_out), torch.tensor(counts)


@dataclass(repr=False)
class Purity(ResultIO):
    """Purity of every head over training for one γ.

    Attributes:
        gamma: the threshold.
        steps: ``[n_ckpt]``.
        state: ``[n_ckpt, n_layers, n_heads]``: 1 pure positional, -1 pure symbolic, 0 neither.
        first_step: ``{(layer, head): step}`` first checkpoint at which each head was pure.
        kind: ``{(layer, head): "positional" | "symbolic"}`` its kind then.
        settled_step, settled_kind: the same for heads that stay pure, of one kind, from
            some checkpoint to the last ("converged", the paper's footnote 3); a head that
            was pure only for a while (e.g. early in training) is in ``first_step`` only.
    """

    gamma: float
    steps: list[int]
    state: Tensor
    first_step: dict[tuple[int, int], int]
    kind: dict[tuple[int, int], Kind]
    settled_step: dict[tuple[int, int], int] = field(default_factory=dict)
    settled_kind: dict[tuple[int, int], Kind] = field(default_factory=dict)

    def cumulative(self, kind: Kind) -> list[int]:
        """Number of heads pure of ``kind`` at or before each step (paper Fig 2C)."""
        return [sum(1 for h, s in self.first_step.items() if s <= step and self.kind[h] == kind)
                for step in self.steps]

    def final_counts(self) -> dict[str, int]:
        """Heads pure of each kind at the last checkpoint (not cumulative)."""
        last = self.state[-1]
        return {"positional": int((last == 1).sum()), "symbolic": int((last == -1).sum())}

    def layers_of(self, kind: Kind, *, settled: bool = False) -> list[int]:
        """Layers with a head pure of ``kind`` at some checkpoint (``settled``: to the end)."""
        kinds = self.settled_kind if settled else self.kind
        return sorted(layer for (layer, _), k in kinds.items() if k == kind)

    def to_dict(self) -> dict:
        name = lambda key: f"{key[0]}.{key[1]}"  # noqa: E731
        return {"gamma": self.gamma, "steps": self.steps, "state": self.state.tolist(),
                "first_step": {name(h): s for h, s in self.first_step.items()},
                "kind": {name(h): k for h, k in self.kind.items()},
                "settled_step": {name(h): s for h, s in self.settled_step.items()},
                "settled_kind": {name(h): k for h, k in self.settled_kind.items()}}

    FORMAT = "lens-possym/paper-c-purity@1"

    @classmethod
    def from_dict(cls, data: dict) -> "Purity":
        def heads(mapping: dict) -> dict:
            return {tuple(int(x) for x in key.split(".")): value
                    for key, value in mapping.items()}

        return cls(gamma=float(data["gamma"]), steps=[int(s) for s in data["steps"]],
                   state=tensor_from_json(data["state"]).long(), first_step=heads(data["first_step"]),
                   kind=heads(data["kind"]), settled_step=heads(data.get("settled_step", {})),
                   settled_kind=heads(data.get("settled_kind", {})))

    def summary(self) -> dict:
        return {"gamma": self.gamma, "n_checkpoints": len(self.steps),
                **{f"final_{k}": v for k, v in self.final_counts().items()},
                "settled_positional": len(self.layers_of("positional", settled=True)),
                "settled_symbolic": len(self.layers_of("symbolic", settled=True))}

    def _table(self):
        """One row per head that was pure at some checkpoint: ``layer``, ``head``,
        ``kind``, ``first_step``, ``settled_step`` (``<NA>``: it did not stay pure)."""
        import pandas as pd

        rows = [{"layer": layer, "head": head, "kind": self.kind[(layer, head)],
                 "first_step": step, "settled_step": self.settled_step.get((layer, head))}
                for (layer, head), step in sorted(self.first_step.items())]
        frame = pd.DataFrame.from_records(
            rows, columns=["layer", "head", "kind", "first_step", "settled_step"])
        frame["settled_step"] = frame["settled_step"].astype("Int64")
        return frame


def purity(pos: Float[Tensor, "ckpt layer head"], sym: Float[Tensor, "ckpt layer head"],
           steps: Sequence[int], gamma: float = 0.1) -> Purity:
    """Classify every head at every checkpoint (module docstring)."""
    if not 0 < gamma < 0.5:
        raise InvalidSelectionError(f"gamma must be in (0, 0.5), got {gamma}")
    if pos.shape != sym.shape or pos.ndim != 3 or pos.shape[0] != len(steps):
        raise InvalidSelectionError(
            f"pos and sym must be [n_ckpt, n_layers, n_heads] with n_ckpt = len(steps) "
            f"({len(steps)}); got {tuple(pos.shape)} and {tuple(sym.shape)}")
    positional = (pos >= 1 - gamma) & (sym <= gamma)
    symbolic = (sym >= 1 - gamma) & (pos <= gamma)
    state = positional.long() - symbolic.long()
    first, kind, settled, settled_kind = {}, {}, {}, {}
    name = {1: "positional", -1: "symbolic"}
    for layer in range(pos.shape[1]):
        for head in range(pos.shape[2]):
            col = state[:, layer, head]
            hit = (col != 0).nonzero()
            if len(hit):
                i = int(hit[0])
                first[(layer, head)] = int(steps[i])
                kind[(layer, head)] = name[int(col[i])]
            last = int(col[-1])
            if last != 0:
                i = len(col) - 1
                while i > 0 and int(col[i - 1]) == last:
                    i -= 1
                settled[(layer, head)] = int(steps[i])
                settled_kind[(layer, head)] = name[last]
    return Purity(float(gamma), [int(s) for s in steps], state, first, kind, settled,
                  settled_kind)
