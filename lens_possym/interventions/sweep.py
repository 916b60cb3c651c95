r"""Sweep: the effect of ablating each frequency band of each head on a metric.

For every chosen layer ``L``, query head ``h`` and band ``b`` (a set of frequency ids,
e.g. the fast / middle / slow thirds), :func:`band_sweep` ablates band ``b`` of head ``h``
alone and evaluates the metric on the model's output: one forward pass per
``(L, h, b)``, so ``n_layers · n_heads · n_bands`` passes (216 for gemma-3-270m with
thirds).

Two things keep that affordable, both exact:

* an ablation at layer ``L`` cannot change anything before ``L``, so the clean residual
  stream entering each layer is cached once and each pass starts there
  (``run_with_hooks(..., start_at_layer=L)``; bridges only, verified to reproduce the full
  pass bit for bit);
* metrics of the next token only need the last position's logits, so bridges are asked for
  those alone (``logits_to_keep=1``; ``last_token_only=False`` turns this off for metrics
  that read every position).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

import torch
from jaxtyping import Float
from torch import Tensor

from .._inputs import ModelInput, as_layers, as_tokens
from ..errors import InvalidSelectionError
from ..rope import rope_specs
from ._select import BAND_NAMES, band_partition, parse_freqs
from .frequency import (
    AblationMode,
    FrequencyMeans,
    _check_mode,
    _resolve_side,
    frequency_ablation_hooks,
    frequency_means,
)

__all__ = ["BandSweep", "band_sweep", "binding_metrics", "resolve_bands"]

Metric = Callable[[Tensor], Any]


@dataclass
class BandSweep:
    """Result of :func:`band_sweep`.

    Attributes:
        values: ``{metric: [n_layers, n_heads, n_bands]}`` metric with that band of that
            head ablated; ``nan`` for layers and heads not swept.
        baseline: ``{metric: value}`` without any ablation.
        band_names: one name per band.
        bands: ``{layer: [freq ids of band b, ...]}``.
        mode: the ablation mode.
        layers, heads: what was swept (heads: ``{layer: [heads]}``).
    """

    values: dict[str, Float[Tensor, "layer head_index band"]]
    baseline: dict[str, float]
    band_names: list[str]
    bands: dict[int, list[list[int]]]
    mode: str
    layers: list[int]
    heads: dict[int, list[int]] = field(default_factory=dict)

    @property
    def metrics(self) -> list[str]:
        return list(self.values)

    def effect(self, metric: str | None = None) -> Float[Tensor, "layer head_index band"]:
        """``values − baseline`` for one metric (the first by default)."""
        name = metric or self.metrics[0]
        if name not in self.values:
            raise InvalidSelectionError(f"no metric {name!r}; this sweep has {self.metrics}")
        return self.values[name] - self.baseline[name]

    def top(self, k: int = 10, metric: str | None = None) -> list[tuple[int, int, str, float]]:
        """The ``k`` (layer, head, band) ablations that lower the metric most."""
        eff = self.effect(metric)
        flat = torch.nan_to_num(eff, nan=float("inf")).flatten()
        order = torch.argsort(flat)[:k]
        n_heads, n_bands = eff.shape[1], eff.shape[2]
        return [(int(i) // (n_heads * n_bands), (int(i) // n_bands) % n_heads,
                 self.band_names[int(i) % n_bands], float(flat[i])) for i in order
                if torch.isfinite(flat[i])]

    def to_dict(self) -> dict:
        return {
            "mode": self.mode, "band_names": self.band_names, "layers": self.layers,
            "bands": {str(k): v for k, v in self.bands.items()},
            "heads": {str(k): v for k, v in self.heads.items()},
            "baseline": self.baseline,
            "values": {k: v.tolist() for k, v in self.values.items()},
            "effect": {k: self.effect(k).tolist() for k in self.values},
        }


def binding_metrics(task: Any) -> dict[str, Metric]:
    """``logit_diff``, ``accuracy`` and ``candidate_accuracy`` of a binding task, as metrics.

    Each maps logits ``[batch, pos, d_vocab]`` (only the last position is read) to a
    scalar, averaged over the task's prompts (see :func:`lens_possym.tasks.evaluate_binding`).
    """
    from ..tasks.binding import binding_logit_diff

    def last(logits: Tensor) -> Tensor:
        return (logits[:, -1] if logits.ndim == 3 else logits).float()

    def logit_diff(logits: Tensor) -> Tensor:
        return binding_logit_diff(task, last(logits)).mean()

    def accuracy(logits: Tensor) -> Tensor:
        return (last(logits).argmax(-1) == task.answers.to(logits.device)).float().mean()

    def candidate_accuracy(logits: Tensor) -> Tensor:
        row = last(logits)
        mask = task.candidate_mask(row.shape[-1]).to(row.device)
        top = row.masked_fill(~mask, float("-inf")).argmax(-1)
        return (top == task.answers.to(row.device)).float().mean()

    return {"logit_diff": logit_diff, "accuracy": accuracy, "candidate_accuracy": candidate_accuracy}


def resolve_bands(spec: Any, bands: int | Sequence[Any] | Mapping[str, Any]
                  ) -> tuple[list[str], list[list[int]]]:
    """Band names and frequency ids for one layer.

    ``bands`` is a number of contiguous bands (3 → ``high``/``mid``/``low`` thirds,
    fastest first), a list of frequency selections (any form of
    :func:`~lens_possym.interventions.parse_freqs`), or ``{name: selection}``.
    """
    if isinstance(bands, int) and not isinstance(bands, bool):
        ids = band_partition(spec.n_freqs, bands)
        names = list(BAND_NAMES) if bands == 3 else [f"band {i}" for i in range(bands)]
        return names, ids
    if isinstance(bands, Mapping):
        names = [str(k) for k in bands]
        return names, [list(parse_freqs(v, spec)) for v in bands.values()]
    if isinstance(bands, (list, tuple)) and bands:
        return [str(b) if isinstance(b, str) else f"band {i}" for i, b in enumerate(bands)], [
            list(parse_freqs(b, spec)) for b in bands]
    raise InvalidSelectionError(
        f"cannot read bands {bands!r}: pass a number of bands, a list of frequency "
        "selections, or {name: selection}"
    )


def _evaluate(metrics: Mapping[str, Metric], logits: Tensor) -> dict[str, float]:
    out = {}
    for name, fn in metrics.items():
        value = torch.as_tensor(fn(logits))
        if value.numel() != 1:
            raise InvalidSelectionError(
                f"metric {name!r} must return a scalar, got shape {tuple(value.shape)}"
            )
        out[name] = float(value)
    return out


def band_sweep(
    model: Any,
    input: ModelInput,
    metric: Metric | Mapping[str, Metric],
    *,
    bands: int | Sequence[Any] | Mapping[str, Any] = 3,
    mode: AblationMode = "zero",
    layers: int | Sequence[int] | None = None,
    heads: int | Sequence[int] | None = None,
    side: str | None = None,
    reference: Any = None,
    per_position: bool = False,
    means: FrequencyMeans | None = None,
    last_token_only: bool = True,
    progress: bool = True,
) -> BandSweep:
    """Effect on ``metric`` of ablating each band of each head, one at a time.

    Args:
        input: prompts or tokens ``[batch, pos]`` (keep the batch small: one forward pass
            per layer, head and band).
        metric: ``logits -> scalar`` or ``{name: logits -> scalar}`` (e.g.
            :func:`binding_metrics`).
        bands: see :func:`resolve_bands` (default: thirds ``high``/``mid``/``low``).
        mode, side, reference, per_position, means: as in
            :func:`~lens_possym.interventions.frequency_ablation_hooks`.
        layers, heads: restrict the sweep (all by default; ``heads`` applies to every layer).
        last_token_only: compute only the last position's logits (module docstring).
        progress: show a tqdm progress bar.

    Returns:
        :class:`BandSweep` with ``[n_layers, n_heads, n_bands]`` values per metric.
    """
    from tqdm.auto import tqdm

    _check_mode(mode)
    _resolve_side(mode, side)
    metrics = dict(metric) if isinstance(metric, Mapping) else {"metric": metric}
    if not metrics:
        raise InvalidSelectionError("pass at least one metric")
    specs = rope_specs(model)
    chosen = as_layers(layers, len(specs))
    tokens = as_tokens(model, input)
    band_names: list[str] = []
    band_ids: dict[int, list[list[int]]] = {}
    head_lists: dict[int, list[int]] = {}
    for layer in chosen:
        names, ids = resolve_bands(specs[layer], bands)
        if band_names and names != band_names:
            raise InvalidSelectionError("every layer needs the same bands")
        band_names, band_ids[layer] = names, ids
        n = specs[layer].n_heads
        hl = list(range(n)) if heads is None else ([heads] if isinstance(heads, int) else list(heads))
        bad = [h for h in hl if not 0 <= h < n]
        if bad:
            raise InvalidSelectionError(f"head {bad} out of range: layer {layer} has {n} query heads")
        head_lists[layer] = hl
    if mode == "mean" and means is None:
        if reference is None:
            raise InvalidSelectionError("mode='mean' needs reference=<prompts or tokens>")
        means = frequency_means(model, reference, chosen, per_position=per_position)

    bridge = hasattr(model, "original_model")
    kwargs = {"logits_to_keep": 1} if (bridge and last_token_only) else {}
    n_layers = len(specs)
    max_heads = max(s.n_heads for s in specs)
    values = {name: torch.full((n_layers, max_heads, len(band_names)), float("nan"))
              for name in metrics}
    with torch.no_grad():
        if bridge:
            names = [f"blocks.{layer}.hook_resid_pre" for layer in chosen]
            logits, cache = model.run_with_cache(tokens, names_filter=names, **kwargs)
            starts = {layer: cache[f"blocks.{layer}.hook_resid_pre"] for layer in chosen}
        else:
            logits = model(tokens)
        baseline = _evaluate(metrics, logits)
        total = sum(len(head_lists[layer]) * len(band_names) for layer in chosen)
        bar = tqdm(total=total, desc=f"{mode}-ablating bands", disable=not progress)
        try:
            for layer in chosen:
                for head in head_lists[layer]:
                    for b, ids in enumerate(band_ids[layer]):
                        hooks = frequency_ablation_hooks(model, {(layer, head): ids}, mode,
                                                         side=side, means=means)
                        if bridge:
                            out = model.run_with_hooks(starts[layer], start_at_layer=layer,
                                                       fwd_hooks=hooks, **kwargs)
                        else:
                            out = model.run_with_hooks(tokens, fwd_hooks=hooks)
                        for name, value in _evaluate(metrics, out).items():
                            values[name][layer, head, b] = value
                        bar.update(1)
        finally:
            bar.close()
    return BandSweep(values=values, baseline=baseline, band_names=band_names, bands=band_ids,
                     mode=mode, layers=chosen, heads=head_lists)
