r"""Discrepancy (paper C Def 3.1) of any attention head, its closed form for T_Index, and
Theorem 3.2's bounds checked numerically.

**Discrepancy.** For one head and one input ``σ̄`` of length ``n``, with ``λ_j`` the head's
attention logits (pre-softmax) at the last token, the gap is ``λ_(1) - λ_(2)``, the largest
minus the second largest. Def 3.1 takes the **maximum** over inputs of length ``n``;
Lemma F.1's proof needs the **minimum** (paper_c.md §6, §9): :class:`Discrepancy` keeps
the gap of every input and both. :func:`head_discrepancy` reads the logits of any model
lens-possym can decompose (a TransformerBridge, a toy model) through
:func:`lens_possym.frequency_logits`.

**T_Index in closed form** (unit amplitude). Positions ``0..n-1``, the query at ``n-1``
holding offset ``σ``; key ``j`` has logit ``cos(((n-1) - j - σ)θ)``, so with
``T(σ) = {-σ, …, n-1-σ} \ {0}``

.. math::  Δ_θ(σ; n) = 1 - \max_{t ∈ T(σ)} \cos(tθ),

and :func:`index_discrepancy` takes the max (Def 3.1) or min over a set of offsets: all
``1..n-1`` (every 1-hop input of length ``n``), or the task's (``window+1..2·window``: the
answer lies in the effective target window).

**Theorem 3.2.** ``Δ_Index(n) <= min{1 - cos θ, 2π²/n²}`` (:func:`index_bound`) and, with
``ω = 2π/|ALPH|`` and ``θ < ω/(2 n0)``, ``Δ_Retrieval(n) <= 1 - cos(ω - nθ)``
(:func:`retrieval_bound`). The ``2π²/n²`` term comes from pigeonhole over the offsets
``1..n`` (some ``t`` has ``|tθ mod 2π| <= 2π/n``): it holds when every offset up to ``n``
competes, i.e. for the *minimum* over inputs (a letter-like query sees all of them); for
the maximum the offset set can be split around the target (``σ ≈ n/2``) and only offsets
up to about ``n/2`` compete, so the max can exceed ``2π²/n²`` (:func:`index_bound_table`
reports both, over all offsets or over the offsets the task uses).

**Trained heads** (:func:`layer_gaps`): the top-2 gap of every layer's head over a set of
inputs at each length, kept as the max (Def 3.1), the min (Lemma F.1) and the mean
(:class:`LayerGaps`); :meth:`LayerGaps.min_ratio` is the shrinkage of the min from one
length to another (verdict rule 16, docs/paper_c_rules.md).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import torch
from jaxtyping import Float
from torch import Tensor

from ...errors import InvalidSelectionError
from ...decompose import frequency_logits
from ...results_io import ResultIO

__all__ = [
    "Discrepancy",
    "top2_gap",
    "last_token_logits",
    "head_discrepancy",
    "index_gaps",
    "index_discrepancy",
    "index_bound",
    "retrieval_bound",
    "index_bound_table",
    "task_offsets",
    "LayerGaps",
    "layer_gaps",
]


@dataclass(repr=False)
class Discrepancy(ResultIO):
    """Top-2 logit gaps of one head over a set of inputs of one length.

    Attributes:
        n: input length; ``gaps``: ``[n_inputs]`` per-input gap ``λ_(1) - λ_(2)``.
        scale: the gaps were divided by this (e.g. a construction's amplitude).
    """

    n: int
    gaps: Tensor
    scale: float = 1.0

    @property
    def max(self) -> float:
        """Def 3.1: the maximum over inputs."""
        return float(self.gaps.max())

    @property
    def min(self) -> float:
        """Lemma F.1's quantity: the minimum over inputs."""
        return float(self.gaps.min())

    @property
    def mean(self) -> float:
        return float(self.gaps.mean())

    FORMAT = "lens-possym/paper-c-discrepancy@1"

    def summary(self) -> dict:
        """The length, the gaps' max (Def 3.1), min and mean, how many, and the scale."""
        return {"n": self.n, "max": self.max, "min": self.min, "mean": self.mean,
                "n_inputs": len(self.gaps), "scale": self.scale}

    def to_dict(self) -> dict:
        return {**self.summary(), "gaps": self.gaps}

    def _table(self):
        """One row per input: ``input``, ``gap``."""
        import pandas as pd

        return pd.DataFrame({"input": range(len(self.gaps)),
                             "gap": self.gaps.double().cpu().numpy()})


def top2_gap(logits: Float[Tensor, "batch key"]) -> Float[Tensor, "batch"]:
    """``λ_(1) - λ_(2)`` of each row (``-inf`` entries, i.e. masked keys, ignored)."""
    if logits.ndim != 2 or logits.shape[-1] < 2:
        raise InvalidSelectionError(
            f"logits must be [batch, key] with at least 2 keys, got {tuple(logits.shape)}")
    top = logits.topk(2, dim=-1).values
    return top[:, 0] - top[:, 1]


def last_token_logits(model, tokens: Tensor, layer: int = 0, head: int = 0
                      ) -> Float[Tensor, "batch key"]:
    """Attention logits (pre-softmax, scaled) of ``layer.head`` at the last token,
    ``[batch, n]``, float64, from :func:`lens_possym.frequency_logits`."""

    result = frequency_logits(model, tokens, layer, heads=[head], query_positions=-1,
                              check=False, dtype=torch.float64)
    return result.logits()[:, 0, -1]


def head_discrepancy(model, tokens: Tensor, layer: int = 0, head: int = 0, *,
                     scale: float = 1.0) -> Discrepancy:
    """The discrepancy of ``layer.head`` over ``tokens`` ``[n_inputs, n]``, gaps divided by
    ``scale``."""
    gaps = top2_gap(last_token_logits(model, tokens, layer, head)) / scale
    return Discrepancy(int(tokens.shape[1]), gaps.cpu(), float(scale))


def index_gaps(theta: float, n: int, offsets: Sequence[int] | Tensor | None = None
               ) -> Float[Tensor, "offset"]:
    """``Δ_θ(σ; n)`` of T_Index (unit amplitude) for each offset (default ``1..n-1``)."""
    if n < 2:
        raise InvalidSelectionError(f"n must be >= 2, got {n}")
    sigma = torch.arange(1, n) if offsets is None else torch.as_tensor(offsets).long()
    if len(sigma) == 0 or (sigma < 1).any() or (sigma > n - 1).any():
        raise InvalidSelectionError(f"offsets must lie in 1..n-1 ({n - 1}) for length {n}")
    t = torch.arange(-(n - 1), n, dtype=torch.float64)               # every possible offset
    cos = torch.cos(t * theta)
    lo, hi = -sigma[:, None], (n - 1 - sigma)[:, None]
    allowed = (t[None, :] >= lo) & (t[None, :] <= hi) & (t[None, :] != 0)
    best = torch.where(allowed, cos[None, :], torch.tensor(-2.0, dtype=torch.float64)).max(1).values
    return 1.0 - best


def index_discrepancy(theta: float, n: int, offsets=None, *, reduce: str = "max") -> float:
    """``max`` (Def 3.1) or ``min`` over offsets of :func:`index_gaps`."""
    if reduce not in ("max", "min"):
        raise InvalidSelectionError(f"reduce must be 'max' or 'min', got {reduce!r}")
    gaps = index_gaps(theta, n, offsets)
    return float(gaps.max() if reduce == "max" else gaps.min())


def index_bound(theta: float, n: int) -> float:
    """Theorem 3.2: ``min{1 - cos θ, 2π²/n²}``."""
    return min(1 - math.cos(theta), 2 * math.pi ** 2 / n ** 2)


def retrieval_bound(theta: float, n_letters: int, n: int) -> float:
    """Theorem 3.2: ``1 - cos(ω - nθ)`` with ``ω = 2π/|ALPH|`` (stated for
    ``θ < ω/(2 n0)``)."""
    omega = 2 * math.pi / n_letters
    return 1 - math.cos(omega - n * theta)


def task_offsets(window: int = 8) -> list[int]:
    """The query offsets of 1-hop Number prompts: the answer lies in the effective target
    window, ``window + 1 .. 2·window`` before the query (9..16 for paper C)."""
    return list(range(window + 1, 2 * window + 1))


def index_bound_table(theta: float, lengths: Sequence[int],
                      offsets: Sequence[int] | None = None) -> list[dict]:
    """For each ``n``: ``Δ_max`` and ``Δ_min`` over the offsets (all ``1..n-1`` by
    default, or ``offsets``, e.g. :func:`task_offsets`), the bound, and whether each stays
    under it (to 1e-12)."""
    rows = []
    for n in lengths:
        gaps = index_gaps(theta, int(n), offsets)
        bound = index_bound(theta, int(n))
        rows.append({"n": int(n), "delta_max": float(gaps.max()), "delta_min": float(gaps.min()),
                     "bound": bound, "max_holds": bool(gaps.max() <= bound + 1e-12),
                     "min_holds": bool(gaps.min() <= bound + 1e-12)})
    return rows


@dataclass(repr=False)
class LayerGaps(ResultIO):
    """Top-2 attention-logit gaps of every head at several lengths.

    Attributes:
        task: the task's name; ``lengths``: ``[n_lengths]``; ``n_inputs``: inputs per length.
        max, min, mean: ``[n_lengths, n_layers, n_heads]`` over the inputs (Def 3.1's max,
            Lemma F.1's min).
    """

    task: str
    lengths: list[int]
    max: Tensor
    min: Tensor
    mean: Tensor
    n_inputs: int

    FORMAT = "lens-possym/paper-c-layer-gaps@1"

    def at(self, n: int) -> int:
        if n not in self.lengths:
            raise InvalidSelectionError(f"no gaps at length {n}; measured at {self.lengths}")
        return self.lengths.index(n)

    def min_ratio(self, long: int, short: int) -> Tensor:
        """``[n_layers, n_heads]``: ``min gap(long) / min gap(short)``."""
        return self.min[self.at(long)] / self.min[self.at(short)]

    def to_dict(self) -> dict:
        return {"task": self.task, "lengths": self.lengths, "max": self.max, "min": self.min,
                "mean": self.mean, "n_inputs": self.n_inputs}

    @classmethod
    def from_dict(cls, data: dict) -> "LayerGaps":
        t = {k: torch.as_tensor(data[k], dtype=torch.float64) for k in ("max", "min", "mean")}
        return cls(data["task"], [int(n) for n in data["lengths"]], n_inputs=int(data["n_inputs"]),
                   **t)

    def _table(self):
        import pandas as pd

        rows = []
        for score in ("max", "min", "mean"):
            t = getattr(self, score)
            for i, n in enumerate(self.lengths):
                for layer in range(t.shape[1]):
                    for head in range(t.shape[2]):
                        rows.append({"layer": layer, "head": head, "length": n, "score": score,
                                     "value": float(t[i, layer, head])})
        return pd.DataFrame.from_records(rows)

    def _headline(self) -> list[str]:
        return [f"task={self.task}", f"lengths={self.lengths}"]


def layer_gaps(model, task, lengths: Sequence[int], *, layers: Sequence[int] | None = None,
               n_inputs: int = 64, seed: int = 5) -> LayerGaps:
    """Top-2 gaps of every head of ``layers`` (all by default) on ``n_inputs`` test prompts
    of ``task.at_length(n)`` for each ``n`` (seed ``seed``), read at the last token.
    A GPT-J bridge must cover the longest length
    (:meth:`~lens_possym.papers.c.gptj.GPTJTaskModel.bridge` with ``n_positions``)."""
    if not lengths:
        raise InvalidSelectionError("give at least one length")
    n_layers, n_heads = int(model.cfg.n_layers), int(model.cfg.n_heads)
    layers = list(range(n_layers)) if layers is None else [int(x) for x in layers]
    shape = (len(lengths), n_layers, n_heads)
    out = {k: torch.full(shape, float("nan"), dtype=torch.float64) for k in ("max", "min", "mean")}
    for i, n in enumerate(lengths):
        tokens = task.at_length(int(n)).test_set(n_inputs, seed=seed).tokens
        for layer in layers:
            for head in range(n_heads):
                d = head_discrepancy(model, tokens, layer, head)
                out["max"][i, layer, head] = d.max
                out["min"][i, layer, head] = d.min
                out["mean"][i, layer, head] = d.mean
    return LayerGaps(task.name, [int(n) for n in lengths], n_inputs=n_inputs, **out)
