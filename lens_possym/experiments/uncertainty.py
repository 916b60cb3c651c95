r"""Uncertainty over prompts: standard errors and bootstrap intervals of per-prompt effects.

Every intervention result that averages a metric over prompts (patching grids, head
importance, band sweeps, ``lens-possym ablate``) keeps the per-prompt values, so each
effect comes with

* its **standard error** ``s / √n`` (unbiased ``s``; ``nan`` for ``n < 2``), and
* a **percentile bootstrap interval** of the mean: the prompts are resampled with
  replacement ``n_resamples`` times (the same draws for every cell of a grid, so cells
  stay comparable), and the ``(1 − confidence)/2`` and ``(1 + confidence)/2`` quantiles of
  the resampled means are the bounds.

The arithmetic is TransformerLens's own (``transformer_lens.utilities.statistics``: the
functions behind ``transformer_lens.patching.PatchingResult.stderr`` and
``.bootstrap_ci``, seeded the same way with ``derive_generator(seed, "bootstrap",
"mean")``), so a grid's interval here equals the one a ``PatchingResult`` of the same
per-prompt values gives. What is added: ``nan`` instead of an error for fewer than two
prompts, and a :class:`Uncertainty` summary that results write into their JSON and
DataFrames.

Effects of an intervention are **paired**: the same prompt is measured with and without
it, so the per-prompt effect is ``with − without`` and its spread (not the spread of the
two runs separately) is what the interval describes. A percentile bootstrap cannot show
uncertainty the sample does not contain: a constant resamples to itself (the interval is
a point), and intervals over 4-8 prompts are wide and skewed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from .._checks import boundary
from ..errors import InvalidSelectionError, NonFiniteResultError
from ..results_io import ResultIO

__all__ = ["Uncertainty", "standard_error", "bootstrap_interval", "uncertainty",
           "DEFAULT_CONFIDENCE", "DEFAULT_RESAMPLES"]

DEFAULT_CONFIDENCE = 0.95
DEFAULT_RESAMPLES = 1000


def _check(values: Tensor, confidence: float | None = None,
           n_resamples: int | None = None, dim: int | None = None) -> Tensor:
    if not isinstance(values, Tensor) or values.ndim == 0:
        raise InvalidSelectionError(
            "per-prompt values must be a tensor with a prompt axis, got "
            f"{type(values).__name__ if not isinstance(values, Tensor) else 'a scalar'}")
    if dim is not None and not -values.ndim <= dim < values.ndim:
        raise InvalidSelectionError(
            f"dim {dim} out of range for values of shape {tuple(values.shape)}")
    if confidence is not None and not 0.0 < confidence < 1.0:
        raise InvalidSelectionError(f"confidence must be in (0, 1), got {confidence}")
    if n_resamples is not None and (isinstance(n_resamples, bool) or
                                    not isinstance(n_resamples, int) or n_resamples < 1):
        raise InvalidSelectionError(f"n_resamples must be a positive integer, got {n_resamples!r}")
    return values if values.is_floating_point() else values.double()


@boundary
def standard_error(values: Tensor, dim: int = -1, *, undefined: str = "raise") -> Tensor:
    """Standard error of the mean along ``dim`` (the prompt axis): ``std / √n``, unbiased.

    Fewer than two prompts give no spread to estimate: a
    :class:`~lens_possym.errors.NonFiniteResultError`, or ``nan`` with
    ``undefined="nan"`` (what :func:`uncertainty` records, and its label leaves out).
    """
    if undefined not in ("raise", "nan"):
        raise InvalidSelectionError(f"undefined must be 'raise' or 'nan', got {undefined!r}")
    values = _check(values, dim=dim)
    n = values.shape[dim]
    if n < 2 and undefined == "raise":
        raise NonFiniteResultError(
            f"the standard error of {n} value(s) along dim {dim} is undefined (it needs at "
            "least two prompts); pass undefined='nan' to get nan instead")
    if n < 2:
        return torch.full_like(values.select(dim, 0) if n else values.sum(dim),
                               float("nan"))
    from transformer_lens.utilities.statistics import standard_error as tl_standard_error

    return tl_standard_error(values, dim=dim)


@boundary
def bootstrap_interval(values: Tensor, dim: int = -1, *, confidence: float = DEFAULT_CONFIDENCE,
                       n_resamples: int = DEFAULT_RESAMPLES, seed: int = 0
                       ) -> tuple[Tensor, Tensor]:
    """Percentile bootstrap interval ``(low, high)`` of the mean along ``dim``.

    Every cell is resampled with the same draws (seeded by ``seed``, as TransformerLens's
    ``PatchingResult.bootstrap_ci``). A constant gives a point; a cell holding ``nan``
    gives ``nan``.
    """
    values = _check(values, confidence, n_resamples, dim=dim)
    if values.shape[dim] == 0:
        raise InvalidSelectionError("cannot bootstrap over zero prompts")
    from transformer_lens.utilities.statistics import bootstrap_ci, derive_generator

    return bootstrap_ci(values, dim=dim, statistic="mean", confidence=confidence,
                        n_resamples=n_resamples,
                        generator=derive_generator(seed, "bootstrap", "mean"))


@dataclass(frozen=True, repr=False)
class Uncertainty(ResultIO):
    """Mean over prompts, its standard error and a bootstrap interval, per cell.

    Attributes:
        mean, se, low, high: tensors of the cells' shape (the prompt axis removed).
        n_prompts: prompts behind each value.
        confidence, n_resamples, seed: how the interval was drawn.
    """

    mean: Tensor
    se: Tensor
    low: Tensor
    high: Tensor
    n_prompts: int
    confidence: float = DEFAULT_CONFIDENCE
    n_resamples: int = DEFAULT_RESAMPLES
    seed: int = 0

    FORMAT = "lens-possym/uncertainty@1"

    def summary(self) -> dict[str, Any]:
        """The cells and prompts, how the interval was drawn, and the median standard
        error over the cells."""
        return {"n_cells": self.mean.numel(), "n_prompts": self.n_prompts,
                "confidence": self.confidence, "n_resamples": self.n_resamples,
                "seed": self.seed, "median_se": float(self.se.double().nanmedian())}

    def to_dict(self) -> dict[str, Any]:
        """JSON data (tensors stay tensors; :func:`lens_possym._json.dumps` writes them)."""
        return {"mean": self.mean, "se": self.se, "ci_low": self.low, "ci_high": self.high,
                "n_prompts": self.n_prompts, "confidence": self.confidence,
                "n_resamples": self.n_resamples, "seed": self.seed}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Uncertainty":
        return cls(mean=data["mean"], se=data["se"], low=data["ci_low"], high=data["ci_high"],
                   n_prompts=int(data["n_prompts"]), confidence=float(data["confidence"]),
                   n_resamples=int(data["n_resamples"]), seed=int(data["seed"]))

    def _table(self):
        """One row per cell: its index (``axis_0``, ``axis_1``, ...), ``mean``, ``se``,
        ``ci_low``, ``ci_high``."""
        import numpy as np
        import pandas as pd

        mean = self.mean.detach().double().cpu().numpy().reshape(self.mean.shape)
        index = np.indices(mean.shape).reshape(mean.ndim, -1) if mean.ndim else np.zeros((0, 1), int)
        frame = pd.DataFrame({f"axis_{i}": idx for i, idx in enumerate(index)})
        for name, t in (("mean", self.mean), ("se", self.se), ("ci_low", self.low),
                        ("ci_high", self.high)):
            frame[name] = t.detach().double().cpu().numpy().reshape(-1)
        return frame

    def item(self) -> dict[str, float]:
        """A one-cell uncertainty as floats: ``{mean, se, ci_low, ci_high}``."""
        if self.mean.numel() != 1:
            raise InvalidSelectionError(
                f"item() needs one cell, this has shape {tuple(self.mean.shape)}")
        return {"mean": float(self.mean), "se": float(self.se), "ci_low": float(self.low),
                "ci_high": float(self.high)}

    def label(self, index: Any = ()) -> str:
        """``"0.512 ± 0.031 [0.45, 0.57]"`` for one cell (``index`` into the cells)."""
        pick = lambda t: float(t[index]) if index != () else float(t)  # noqa: E731
        mean, se, low, high = (pick(t) for t in (self.mean, self.se, self.low, self.high))
        se_text = "" if math.isnan(se) else f" ± {se:.3g}"
        return f"{mean:.3g}{se_text} [{low:.3g}, {high:.3g}]"


@boundary
def uncertainty(values: Tensor, dim: int = -1, *, confidence: float = DEFAULT_CONFIDENCE,
                n_resamples: int = DEFAULT_RESAMPLES, seed: int = 0,
                allow_nan: bool = False) -> Uncertainty:
    """Mean, standard error and bootstrap interval of ``values`` along ``dim`` (prompts).

    One prompt gives a standard error of ``nan`` (no spread; the label leaves it out).

    Raises:
        NonFiniteResultError: a value is ``nan`` (every number of its cell would be
            ``nan``); ``allow_nan=True`` gives ``nan`` for those cells instead.
    """
    values = _check(values, confidence, n_resamples, dim=dim)
    if not allow_nan and bool(values.isnan().any()):
        raise NonFiniteResultError(
            f"uncertainty: {int(values.isnan().sum())} of {values.numel()} values are nan; "
            "drop the prompts that gave them (or pass allow_nan=True for nan cells)")
    low, high = bootstrap_interval(values, dim, confidence=confidence, n_resamples=n_resamples,
                                   seed=seed)
    return Uncertainty(mean=values.mean(dim), se=standard_error(values, dim, undefined="nan"),
                       low=low,
                       high=high, n_prompts=values.shape[dim], confidence=confidence,
                       n_resamples=n_resamples, seed=seed)
