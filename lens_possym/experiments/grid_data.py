"""What an activation-patching grid (:mod:`.grid`) is asked and what it returns:
:class:`PatchGridConfig` (the experiment :func:`~.grid.patch_grid` runs) and
:class:`PatchingGrid` (the metric per patched cell and prompt, with standard errors,
bootstrap intervals and sign-flip p-values on top, :mod:`.uncertainty`, and
TransformerLens's ``PatchingResult`` view)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Sequence

import torch
from jaxtyping import Float
from torch import Tensor

from .._ids import check_ids_text
from .._json import JsonConfig, check_field_types, tensor_from_json, to_jsonable
from ..errors import InvalidSelectionError
from ..results_io import ResultIO, RunCost, number
from ..interventions.selection import freqs_label
from .uncertainty import (DEFAULT_CONFIDENCE, DEFAULT_RESAMPLES, Uncertainty,
                          bootstrap_interval, standard_error, uncertainty)

if TYPE_CHECKING:
    import pandas as pd
    from transformer_lens.patching import PatchingResult

__all__ = ["PATCH_SITES", "DIRECTIONS", "PatchGridConfig", "PatchingGrid"]

#: What :func:`patch_grid` can patch: head outputs, RoPE frequency pairs, layer components.
PATCH_SITES: tuple[str, ...] = ("heads", "frequencies", "resid_pre", "attn_out", "mlp_out")
DIRECTIONS: tuple[str, ...] = ("denoise", "noise")


def check_patches_per_pass(n: Any) -> None:
    """Refuse a ``patches_per_pass`` that is not a positive integer (``True`` included)."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise InvalidSelectionError(f"patches_per_pass must be a positive integer, got {n!r}")


@dataclass(frozen=True)
class PatchGridConfig(JsonConfig):
    """What :func:`patch_grid` patches (frozen, validated, stored in the result).

    Attributes:
        site: ``"heads"`` (``hook_z`` per query head), ``"frequencies"`` (one RoPE pair of
            one head's query or key), ``"resid_pre"``, ``"attn_out"``, ``"mlp_out"`` (a
            layer's residual input, attention output or MLP output).
        per_position: heads and components: one cell per position (``[layer, pos, head]``,
            ``[layer, pos]``) instead of all positions at once.
        direction: ``"denoise"`` (clean activations into the corrupted run) or ``"noise"``.
        layers, heads: which to patch (all by default; ``heads`` for heads and frequencies).
        freqs: frequency ids of ``"frequencies"`` (the id grammar; default all).
        side: ``"q"`` (query heads) or ``"k"`` (KV heads) for ``"frequencies"``.
        patches_per_pass, last_token_only: as in :func:`generic_patch_grid`.
        per_prompt_normalization: normalise the logit difference per prompt instead of by
            the means (:class:`~lens_possym.tasks.NormalizedLogitDiff`).
    """

    site: str = "heads"
    per_position: bool = False
    direction: str = "denoise"
    layers: tuple[int, ...] | None = None
    heads: tuple[int, ...] | None = None
    freqs: str | None = None
    side: str = "q"
    patches_per_pass: int = 16
    last_token_only: bool = True
    per_prompt_normalization: bool = False

    def __post_init__(self) -> None:
        if self.site not in PATCH_SITES:
            raise InvalidSelectionError(
                f"unknown patch site {self.site!r}; use one of {', '.join(PATCH_SITES)}")
        if self.direction not in DIRECTIONS:
            raise InvalidSelectionError(
                f"unknown direction {self.direction!r}; use 'denoise' (clean activations into "
                "the corrupted run) or 'noise' (corrupted into clean)")
        if self.side not in ("q", "k"):
            raise InvalidSelectionError(f"side must be 'q' or 'k', got {self.side!r}")
        for name in ("layers", "heads"):
            value = getattr(self, name)
            if value is not None:
                items = [value] if isinstance(value, int) else list(value)
                if not items or any(isinstance(v, bool) or not isinstance(v, int) for v in items):
                    raise InvalidSelectionError(f"{name} must be integers, got {value!r}")
                object.__setattr__(self, name, tuple(items))
        if self.freqs is not None:

            text = self.freqs if isinstance(self.freqs, str) else freqs_label(self.freqs)
            object.__setattr__(self, "freqs", check_ids_text(text, what="frequency id",
                                                             bands=True))
            if self.site != "frequencies":
                raise InvalidSelectionError("freqs applies to site='frequencies' only")
        if self.per_position and self.site == "frequencies":
            raise InvalidSelectionError(
                "per_position applies to heads and layer components, not to frequencies")
        if self.heads is not None and self.site not in ("heads", "frequencies"):
            raise InvalidSelectionError("heads applies to site='heads' or 'frequencies'")
        check_patches_per_pass(self.patches_per_pass)
        for name in ("per_position", "last_token_only", "per_prompt_normalization"):
            if not isinstance(getattr(self, name), bool):
                raise InvalidSelectionError(f"{name} must be True or False")
        # what the checks above leave open: a value of another type
        check_field_types(self)

    @property
    def activation_label(self) -> str:
        return {"heads": "head outputs (hook_z)", "frequencies": f"RoPE {self.side} pairs",
                "resid_pre": "residual stream (hook_resid_pre)",
                "attn_out": "attention outputs (hook_attn_out)",
                "mlp_out": "MLP outputs (hook_mlp_out)"}[self.site]


def _tensor(value: Any) -> Tensor | None:
    if value is None:
        return None

    return value if isinstance(value, Tensor) else tensor_from_json(value)


@dataclass(repr=False)
class PatchingGrid(RunCost, ResultIO):
    """Result of :func:`generic_patch_grid` / :func:`patch_grid`.

    Attributes:
        values: ``[*grid, n_prompts]`` the metric with each cell patched, per prompt
            (``nan`` for cells not patched).
        axis_names: the grid's axes (``["layer", "head"]``, ``["layer", "pos", "head"]``,
            ``["layer", "head", "freq"]``, ...).
        baseline: ``[n_prompts]`` the metric on the unpatched run (the corrupted run when
            denoising).
        source_baseline: ``[n_prompts]`` the metric on the source run, when known.
        metric: the metric's name.
        activation_name: what was patched (TransformerLens's short name).
        config: the :class:`PatchGridConfig` of :func:`patch_grid` (``None`` for a direct
            :func:`generic_patch_grid` call).
        seconds, n_passes: time and forward passes the grid took.
        info: what the prompts were (task, corruption, example pair), model, ...
    """

    values: Float[Tensor, "... prompt"]
    axis_names: list[str]
    baseline: Float[Tensor, "prompt"]
    source_baseline: Float[Tensor, "prompt"] | None = None
    metric: str = "metric"
    activation_name: str = ""
    config: PatchGridConfig | None = None

    FORMAT = "lens-possym/patching-grid@1"

    # ---- numbers ------------------------------------------------------------------------

    @property
    def n_prompts(self) -> int:
        return int(self.values.shape[-1])

    @property
    def shape(self) -> tuple[int, ...]:
        """The grid's shape (without the prompt axis)."""
        return tuple(self.values.shape[:-1])

    def mean(self) -> Tensor:
        """Mean over prompts per cell: the grid TransformerLens returns."""
        return self.values.mean(-1)

    def stderr(self) -> Tensor:
        """Standard error of each cell's mean over prompts (``nan`` for one prompt)."""
        return standard_error(self.values, -1, undefined="nan")

    def effect(self) -> Tensor:
        """``values − baseline`` per prompt: what each patch changes in the run."""
        return self.values - self.baseline

    def bootstrap_ci(self, *, confidence: float = DEFAULT_CONFIDENCE,
                     n_resamples: int = DEFAULT_RESAMPLES, seed: int = 0,
                     of_effect: bool = False) -> tuple[Tensor, Tensor]:
        """Percentile bootstrap interval of each cell's mean (of the effect with
        ``of_effect``), as TransformerLens's ``PatchingResult.bootstrap_ci``."""
        data = self.effect() if of_effect else self.values
        return bootstrap_interval(data, -1, confidence=confidence, n_resamples=n_resamples,
                                  seed=seed)

    def uncertainty(self, *, of_effect: bool = False, **kwargs: Any) -> Uncertainty:
        """Mean, standard error and bootstrap interval per cell (:mod:`.uncertainty`)."""
        return uncertainty(self.effect() if of_effect else self.values, -1,
                           **{"allow_nan": True, **kwargs})

    def permutation_pvalue(self, *, n_permutations: int = 1000, seed: int = 0,
                           alternative: str = "two-sided") -> Tensor:
        """Sign-flip permutation p-value that a cell's mean effect is zero
        (TransformerLens's test: exact for 12 prompts or fewer)."""
        from transformer_lens.utilities.statistics import (derive_generator,
                                                           sign_flip_permutation_pvalue)

        return sign_flip_permutation_pvalue(
            self.effect().double(), dim=-1, n_permutations=n_permutations,
            generator=derive_generator(seed, "permutation"), alternative=alternative)

    def top(self, k: int = 10) -> list[tuple[tuple[int, ...], float, float]]:
        """The ``k`` cells whose patch moves the metric most: ``(index, effect, effect
        standard error)``, by ``|effect|`` (the effect is ``values − baseline`` per prompt,
        averaged; its standard error is that of the paired differences)."""
        effect = self.effect()
        mean, se = effect.mean(-1), standard_error(effect, -1, undefined="nan")
        flat = torch.nan_to_num(mean.abs().flatten(), nan=-float("inf"))
        order = flat.argsort(descending=True)[:k]
        out = []
        for i in order.tolist():
            if not math.isfinite(float(flat[i])):
                continue
            index = tuple(int(x) for x in torch.unravel_index(torch.tensor(i), self.shape))
            out.append((index, float(mean[index]), float(se[index])))
        return out

    def label(self, index: Sequence[int]) -> str:
        """``"12.3"`` for a head, ``"12.3 pos 5"``, ``"12.3 f7"``, ``"layer 12"``, ..."""
        parts = dict(zip(self.axis_names, index))
        head = parts.get("head", parts.get("head_index"))
        text = f"{parts['layer']}.{head}" if head is not None else f"layer {parts['layer']}"
        if "pos" in parts:
            text += f" pos {parts['pos']}"
        if "freq" in parts:
            text += f" f{parts['freq']}"
        return text

    def summary(self, k: int = 5) -> dict[str, Any]:
        """The headline numbers: the baselines, the number of cells and prompts, and the
        ``k`` cells that move the metric most (their label, value, effect and its standard
        error); ``describe`` prints them as a table."""
        mean = self.mean()
        return {"metric": self.metric, "baseline": float(self.baseline.mean()),
                "source_baseline": None if self.source_baseline is None
                else float(self.source_baseline.mean()),
                "n_prompts": self.n_prompts, "n_cells": int(mean.isfinite().sum()),
                "top": [{"cell": self.label(index), "value": float(mean[index]),
                         "effect": effect, "se": se} for index, effect, se in self.top(k)]}

    def describe(self, k: int = 5) -> str:
        """A few lines: baselines, and the cells that move the metric most (their value, and
        the effect ± its standard error)."""
        lines = [f"{self.metric}: unpatched run {self.baseline.mean():.3f}"
                 + ("" if self.source_baseline is None
                    else f", source run {self.source_baseline.mean():.3f}")
                 + f"; {self.n_prompts} prompts, {int(self.mean().isfinite().sum())} cells",
                 f"  {'cell':>14}  {'value':>7}  {'effect ± SE':>17}"]
        mean = self.mean()
        for index, effect, se in self.top(k):
            lines.append(f"  {self.label(index):>14}  {float(mean[index]):>7.3f}  "
                         f"{effect:>+8.3f} ± {se:<6.3f}")
        return "\n".join(lines)

    def to_patching_result(self) -> "PatchingResult":
        """The same values as TransformerLens's ``PatchingResult`` (per prompt, with the
        baseline; flat ``index_df`` over the patched cells)."""
        import pandas as pd
        from transformer_lens.patching import PatchingResult

        finite = self.mean().isfinite()
        cells = finite.nonzero()
        index_df = pd.DataFrame(cells.numpy(), columns=self.axis_names)
        return PatchingResult(values=self.values[finite], axis_names=[], index_df=index_df,
                              metric_names=[self.metric], reduced=False,
                              baseline=self.baseline.clone())

    # ---- files and tables -------------------------------------------------------------------

    def to_dict(self) -> dict:
        """JSON data: the per-prompt values; per cell their mean, standard error and 95%
        bootstrap interval, and the same for the effect (``values − baseline`` per prompt,
        a paired difference); the baselines and the settings."""
        unc, eff = self.uncertainty(), self.uncertainty(of_effect=True)
        return {"axis_names": self.axis_names, "metric": self.metric,
                "activation_name": self.activation_name,
                "config": None if self.config is None else self.config.to_dict(),
                "n_prompts": self.n_prompts, "baseline": self.baseline,
                "source_baseline": self.source_baseline, "mean": unc.mean, "se": unc.se,
                "ci_low": unc.low, "ci_high": unc.high, "effect": eff.mean,
                "effect_se": eff.se, "effect_ci_low": eff.low, "effect_ci_high": eff.high,
                "confidence": unc.confidence, "values": self.values,
                **self.cost_dict(), "info": to_jsonable(self.info)}

    @classmethod
    def from_dict(cls, data: dict) -> "PatchingGrid":
        return cls(values=_tensor(data["values"]).float(), axis_names=list(data["axis_names"]),
                   baseline=_tensor(data["baseline"]).float(),
                   source_baseline=None if data.get("source_baseline") is None
                   else _tensor(data["source_baseline"]).float(),
                   metric=data.get("metric", "metric"),
                   activation_name=data.get("activation_name", ""),
                   config=None if data.get("config") is None
                   else PatchGridConfig.from_dict(data["config"]),
                   **cls.read_cost(data))

    def to_dataframe(self, per_prompt: bool = False) -> "pd.DataFrame":
        """Long format: one row per cell, or with ``per_prompt`` one row per cell and prompt.

        Per cell: ``value`` (the metric with the cell patched, mean over prompts) and its
        ``value_se``; ``effect`` (``value − baseline``, paired per prompt) with its ``se``
        and 95% bootstrap ``ci_low``/``ci_high`` (the uncertainty of the patch's effect, as
        in every result's table), ``n_prompts``.
        """
        import numpy as np
        import pandas as pd

        names = ["head" if a == "head_index" else ("frequency" if a == "freq" else a)
                 for a in self.axis_names]
        if per_prompt:
            values = self.values.double().numpy()
            index = np.nonzero(np.isfinite(values))
            frame = pd.DataFrame({n: i for n, i in zip(names + ["prompt"], index)})
            frame["score"] = self.metric
            frame["value"] = values[index]
            frame["effect"] = frame["value"] - self.baseline.double().numpy()[index[-1]]
            return frame
        mean = self.mean().double().numpy()
        index = np.nonzero(np.isfinite(mean))
        frame = pd.DataFrame({n: i for n, i in zip(names, index)})
        frame["score"] = self.metric
        frame["value"] = mean[index]
        frame["value_se"] = self.stderr().double().numpy()[index]
        eff = self.uncertainty(of_effect=True)
        frame["effect"] = eff.mean.double().numpy()[index]
        for key, tensor in (("se", eff.se), ("ci_low", eff.low), ("ci_high", eff.high)):
            frame[key] = tensor.double().numpy()[index]
        frame["n_prompts"] = self.n_prompts
        return frame

    def _table(self):
        return self.to_dataframe()

    def _headline(self) -> list[str]:
        out = [f"grid={list(self.shape)} {self.axis_names}", f"n_prompts={self.n_prompts}",
               f"baseline={number(float(self.baseline.mean()))}"]
        top = self.top(1)
        if top:
            index, effect, se = top[0]
            out.append(f"top {self.label(index)} effect {effect:+.3g}±{se:.2g}")
        return out
