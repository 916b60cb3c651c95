r"""Sweep: the effect of ablating each frequency band of each head on a metric.

For every chosen layer ``L``, query head ``h`` and band ``b`` (a set of frequency ids,
e.g. the fast / mid / slow thirds), :func:`band_sweep` ablates band ``b`` of head ``h``
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
from typing import Any, Mapping, Sequence

import torch
from jaxtyping import Float
from torch import Tensor

from .._ids import check_ids_text
from .._inputs import ModelInput, as_heads, as_layers, as_tokens
from .._json import JsonConfig, check_field_types, to_jsonable
from ..results_io import ResultIO, head_frame, number
from ..bands import BAND_NAMES, band_partition
from ..errors import InvalidSelectionError
from ..resolved import Resolved, resolve
from ..rope import RopeSpec
from ..typing import HookedModel
from ..interventions.frequency import FrequencyMeans, ablate_frequencies_hooks, means_for
from .metrics import Metric, as_metrics, evaluate_metrics_per_prompt
from ..interventions.modes import check_mode, resolve_side
from ..interventions.selection import freqs_label, parse_freqs
from ..interventions.spec import Intervention
from .uncertainty import Uncertainty, standard_error, uncertainty
from .._json import tensor_from_json

__all__ = ["BandSweepConfig", "BandSweep", "band_sweep", "resolve_bands", "last_token_kwargs"]


def _ids_setting(value: Any, what: str) -> tuple[int, ...] | str | None:
    """A layer or head list as stored in a config: text in the id grammar (checked now,
    resolved against the model when the sweep runs) or a tuple of ints."""
    if value is None or isinstance(value, str):
        return None if value is None else check_ids_text(value, what=what, bands=False)
    if isinstance(value, int) and not isinstance(value, bool):
        return (value,)
    if not isinstance(value, (list, tuple, range)):
        raise InvalidSelectionError(
            f"{what}s must be integers or text such as '0,5' or '0:6', got {value!r}")
    if any(isinstance(v, bool) or not isinstance(v, int) for v in value):
        raise InvalidSelectionError(f"{what}s must be integers, got {value!r}")
    return tuple(value)


@dataclass(frozen=True)
class BandSweepConfig(JsonConfig):
    """How :func:`band_sweep` ablates: frozen, validated, saved with the result.

    Attributes:
        bands: a number of contiguous bands (3: ``high``/``mid``/``low`` thirds), a
            list of frequency selections (``["0:8", "low"]``, ``[[0, 1], [2]]``), or
            ``{name: selection}``; stored as ``((name, selection in the grammar), ...)``.
        mode, side, per_position: as in :func:`ablate_frequencies_hooks`.
        layers, heads: what to sweep (all by default; ``heads`` applies to every layer).
        last_token_only: compute only the last position's logits (module docstring).
    """

    bands: Any = 3
    mode: str = "zero"
    side: str | None = None
    per_position: bool = False
    layers: tuple[int, ...] | str | None = None
    heads: tuple[int, ...] | str | None = None
    last_token_only: bool = True

    def __post_init__(self) -> None:
        check_mode(self.mode)
        resolve_side(self.mode, self.side)
        object.__setattr__(self, "bands", _normalise_bands(self.bands))
        object.__setattr__(self, "layers", _ids_setting(self.layers, "layer"))
        object.__setattr__(self, "heads", _ids_setting(self.heads, "head"))
        if self.per_position and self.mode != "mean":
            raise InvalidSelectionError("per_position applies to mode='mean' only")
        # what the checks above leave open: a value of another type
        check_field_types(self)


def _normalise_bands(bands: Any) -> int | tuple[tuple[str, str], ...]:
    """``bands`` as an int or ``((name, selection), ...)``; a selection given as a string
    names its band, others are ``"band i"``."""
    if isinstance(bands, int) and not isinstance(bands, bool):
        if bands < 1:
            raise InvalidSelectionError(f"bands must be at least 1, got {bands}")
        return bands
    if isinstance(bands, Mapping) and bands:
        return tuple((str(k), freqs_label(v)) for k, v in bands.items())
    if isinstance(bands, (list, tuple)) and bands:
        if all(isinstance(b, (list, tuple)) and len(b) == 2 and isinstance(b[0], str)
               for b in bands):  # ((name, selection), ...), as stored
            return tuple((name, freqs_label(ids)) for name, ids in bands)
        return tuple((b if isinstance(b, str) else f"band {i}", freqs_label(b))
                     for i, b in enumerate(bands))
    raise InvalidSelectionError(
        f"cannot read bands {bands!r}: pass a number of bands, a list of frequency "
        "selections, or {name: selection}"
    )


@dataclass(repr=False)
class BandSweep(ResultIO):
    """Result of :func:`band_sweep`.

    Attributes:
        values: ``{metric: [n_layers, n_heads, n_bands]}`` metric with that band of that
            head ablated; ``nan`` for layers and heads not swept.
        baseline: ``{metric: value}`` without any ablation.
        band_names: one name per band.
        bands: ``{layer: [freq ids of band b, ...]}``.
        layers, heads: what was swept (heads: ``{layer: [heads]}``).
        config: the sweep's settings (``band_sweep(model, input, metric, sweep.config)``
            runs it again); :meth:`intervention` is the spec of one cell.
        per_prompt: ``{metric: [n_layers, n_heads, n_bands, n_prompts]}`` and
        baseline_per_prompt: ``{metric: [n_prompts]}`` for the metrics that give one value
            per prompt (e.g. ``binding_metrics(task, per_prompt=True)``): each effect's
            standard error and bootstrap interval (:meth:`uncertainty`).
    """

    values: dict[str, Float[Tensor, "layer head_index band"]]
    baseline: dict[str, float]
    band_names: list[str]
    bands: dict[int, list[list[int]]]
    layers: list[int]
    heads: dict[int, list[int]] = field(default_factory=dict)
    config: BandSweepConfig = field(default_factory=BandSweepConfig)
    per_prompt: dict[str, Float[Tensor, "layer head_index band prompt"]] = field(
        default_factory=dict)
    baseline_per_prompt: dict[str, Float[Tensor, "prompt"]] = field(default_factory=dict)

    FORMAT = "lens-possym/band-sweep@1"

    @property
    def mode(self) -> str:
        return self.config.mode

    @property
    def metrics(self) -> list[str]:
        return list(self.values)

    def effect(self, metric: str | None = None) -> Float[Tensor, "layer head_index band"]:
        """``values − baseline`` for one metric (the first by default)."""
        name = metric or self.metrics[0]
        if name not in self.values:
            raise InvalidSelectionError(f"no metric {name!r}; this sweep has {self.metrics}")
        return self.values[name] - self.baseline[name]

    def uncertainty(self, metric: str | None = None, **kwargs: Any) -> Uncertainty:
        """Mean, standard error and bootstrap interval over prompts of each cell's effect
        (``with − without``, per prompt), ``[n_layers, n_heads, n_bands]``.

        Raises:
            InvalidSelectionError: the metric gave one value for all prompts.
        """
        name = metric or self.metrics[0]
        if name not in self.per_prompt:
            raise InvalidSelectionError(
                f"metric {name!r} has no per-prompt values (it returned a scalar); sweep with "
                "a metric returning one value per prompt, e.g. binding_metrics(task, "
                "per_prompt=True)")
        effect = self.per_prompt[name] - self.baseline_per_prompt[name]
        return uncertainty(effect, -1, **{"allow_nan": True, **kwargs})

    def effect_se(self, metric: str | None = None) -> Float[Tensor, "layer head_index band"]:
        """Standard error of each cell's effect (``nan`` without per-prompt values)."""
        name = metric or self.metrics[0]
        if name not in self.per_prompt:
            return torch.full_like(self.values[name], float("nan"))
        return standard_error(self.per_prompt[name] - self.baseline_per_prompt[name], -1,
                              undefined="nan")

    def top(self, k: int = 10, metric: str | None = None, *, raise_: bool = False
            ) -> list[tuple[int, int, str, float]]:
        """The ``k`` (layer, head, band) ablations that lower the metric most (``raise_``:
        that raise it most, as for a loss), with their effects (ablated − baseline)."""
        eff = self.effect(metric)
        sign = -1.0 if raise_ else 1.0
        flat = torch.nan_to_num(sign * eff, nan=float("inf")).flatten()
        order = torch.argsort(flat, stable=True)[:k]
        flat = sign * flat
        n_heads, n_bands = eff.shape[1], eff.shape[2]
        return [(int(i) // (n_heads * n_bands), (int(i) // n_bands) % n_heads,
                 self.band_names[int(i) % n_bands], float(flat[i])) for i in order
                if torch.isfinite(flat[i])]

    def intervention(self, layer: int, head: int, band: int | str) -> Intervention:
        """The ablation of one cell of the sweep, as a replayable :class:`Intervention`."""
        b = self.band_names.index(band) if isinstance(band, str) else band
        if layer not in self.bands or head not in self.heads.get(layer, []):
            raise InvalidSelectionError(f"head {layer}.{head} was not swept")
        return Intervention("ablate_frequencies", {(layer, head): self.bands[layer][b]},
                            mode=self.config.mode, side=self.config.side,
                            per_position=self.config.per_position)

    def to_dict(self) -> dict:
        """JSON data: settings, baseline, ``values`` and ``effect`` (tensors stay tensors;
        :func:`lens_possym._json.dumps` writes them)."""
        return {"mode": self.mode, "band_names": self.band_names, "layers": self.layers,
                "bands": to_jsonable(self.bands), "heads": to_jsonable(self.heads),
                "config": self.config.to_dict(), "baseline": self.baseline,
                "values": self.values, "effect": {k: self.effect(k) for k in self.values},
                **self._uncertainty_dict()}

    def _uncertainty_dict(self) -> dict:
        if not self.per_prompt:
            return {}
        out: dict[str, dict] = {"effect_se": {}, "effect_ci_low": {}, "effect_ci_high": {}}
        for name in self.per_prompt:
            unc = self.uncertainty(name)
            out["effect_se"][name], out["effect_ci_low"][name] = unc.se, unc.low
            out["effect_ci_high"][name] = unc.high
        return {**out, "per_prompt": self.per_prompt,
                "baseline_per_prompt": self.baseline_per_prompt}

    @classmethod
    def from_dict(cls, data: dict) -> "BandSweep":
        return cls(values=dict(data["values"]), baseline=dict(data["baseline"]),
                   band_names=list(data["band_names"]),
                   bands={int(k): v for k, v in data["bands"].items()},
                   layers=list(data["layers"]),
                   heads={int(k): v for k, v in data["heads"].items()},
                   config=BandSweepConfig.from_dict(data["config"]),
                   per_prompt={k: _as_tensor(v) for k, v in data.get("per_prompt", {}).items()},
                   baseline_per_prompt={k: _as_tensor(v) for k, v in
                                        data.get("baseline_per_prompt", {}).items()})

    def _table(self):
        """Long format: one row per (metric, layer, head, band): ``score`` is the metric,
        ``value`` its value with the band ablated, ``effect`` minus the baseline (and, for
        per-prompt metrics, its ``se`` and 95% bootstrap ``ci_low``/``ci_high``); a band
        spans several frequencies, so ``frequency``/``angle`` are left out for ``band``."""
        import pandas as pd

        frames = []
        for metric, values in self.values.items():
            frame = head_frame({metric: values}, None, dims=("layer", "head", "band"))
            frame["band"] = [self.band_names[b] for b in frame["band"]]
            frame["effect"] = frame["value"] - self.baseline[metric]
            if metric in self.per_prompt:
                unc = self.uncertainty(metric)
                at = (frame["layer"].to_numpy(), frame["head"].to_numpy(),
                      frame["band"].map(self.band_names.index).to_numpy())
                for key, tensor in (("se", unc.se), ("ci_low", unc.low),
                                    ("ci_high", unc.high)):
                    frame[key] = tensor.double().numpy()[at]
            frames.append(frame.drop(columns=["frequency", "angle"]))
        return pd.concat(frames, ignore_index=True)

    def summary(self, k: int = 3) -> dict[str, Any]:
        """The mode, the bands, the baselines and, per metric, the ``k`` (head, band)
        ablations that lower it most with their effects (ablated − baseline)."""
        return {"mode": self.mode, "band_names": list(self.band_names),
                "layers": list(self.layers), "baseline": dict(self.baseline),
                "largest_drops": {m: [{"head": f"{layer}.{head}", "band": band, "effect": value}
                                      for layer, head, band, value in self.top(k, m)]
                                  for m in self.metrics}}

    def _headline(self) -> list[str]:
        if not self.values:
            return []
        metric = self.metrics[0]
        top = self.top(1, metric)
        out = [f"baseline {metric}={number(self.baseline[metric])}"]
        if top:
            layer, head, band, value = top[0]
            out.append(f"largest drop {layer}.{head} {band} {value:+.3g}")
        return out


def _as_tensor(value: Any) -> Tensor:

    return value if isinstance(value, Tensor) else tensor_from_json(value)


def resolve_bands(spec: RopeSpec, bands: int | Sequence[Any] | Mapping[str, Any]
                  ) -> tuple[list[str], list[list[int]]]:
    """Band names and frequency ids for one layer.

    ``bands`` is a number of contiguous bands (3 → ``high``/``mid``/``low`` thirds,
    fastest first), a list of frequency selections (any form of
    :func:`~lens_possym.interventions.parse_freqs`), or ``{name: selection}``.
    """
    bands = _normalise_bands(bands)
    if isinstance(bands, int):
        names = list(BAND_NAMES) if bands == 3 else [f"band {i}" for i in range(bands)]
        return names, band_partition(spec.n_freqs, bands)
    return [name for name, _ in bands], [list(parse_freqs(ids, spec)) for _, ids in bands]


def last_token_kwargs(model: HookedModel, last_token_only: bool) -> dict[str, Any]:
    """Forward kwargs that compute only the last position's logits (bridges), or none."""
    return {"logits_to_keep": 1} if (last_token_only and hasattr(model, "original_model")) else {}


def _head_lists(specs: Sequence[RopeSpec], layers: list[int],
                heads: Sequence[int] | str | None) -> dict[int, list[int]]:
    return {layer: as_heads(heads, specs[layer].n_heads, layer) for layer in layers}


def band_sweep(model: HookedModel | Resolved, input: ModelInput, metric: Metric | Mapping[str, Metric],
               config: BandSweepConfig | None = None, *, reference: Any = None,
               means: FrequencyMeans | None = None, progress: bool = True, **settings: Any
               ) -> BandSweep:
    """Effect on ``metric`` of ablating each band of each head, one at a time.

    Args:
        input: prompts or tokens ``[batch, pos]`` (keep the batch small: one forward pass
            per layer, head and band).
        metric: ``logits -> scalar`` or ``{name: logits -> scalar}`` (e.g.
            :func:`binding_metrics`).
        config: a :class:`BandSweepConfig` (e.g. a saved sweep's ``config``);
            ``**settings`` are its fields (``bands=3, mode="zero", layers=..., heads=...,
            side=..., per_position=..., last_token_only=...``) and override it.
        reference, means: the reference prompts (or precomputed means) of ``mode="mean"``;
            by default the means are taken over ``input`` itself.
        progress: show a tqdm progress bar (default; ``False`` hides it).

    Returns:
        :class:`BandSweep` with ``[n_layers, n_heads, n_bands]`` values per metric.
    """
    from tqdm.auto import tqdm

    config = BandSweepConfig.coerce(config, **settings)
    metrics = as_metrics(metric)
    resolved = resolve(model)
    model, specs = resolved.model, resolved.specs
    chosen = as_layers(config.layers, len(specs))
    tokens = as_tokens(model, input)
    band_ids: dict[int, list[list[int]]] = {}
    band_names: list[str] = []
    for layer in chosen:
        names, band_ids[layer] = resolve_bands(specs[layer], config.bands)
        if band_names and names != band_names:
            raise InvalidSelectionError("every layer needs the same bands")
        band_names = names
    head_lists = _head_lists(specs, chosen, config.heads)
    means = means_for([config.mode], resolved, chosen, means=means,
                      reference=tokens if reference is None else reference,
                      per_position=config.per_position)

    bridge = hasattr(model, "original_model")
    kwargs = last_token_kwargs(model, config.last_token_only)
    values = {name: torch.full((len(specs), max(s.n_heads for s in specs), len(band_names)),
                               float("nan")) for name in metrics}
    with torch.no_grad():
        if bridge:
            names = [f"blocks.{layer}.hook_resid_pre" for layer in chosen]
            logits, cache = model.run_with_cache(tokens, names_filter=names, **kwargs)
            starts = {layer: cache[f"blocks.{layer}.hook_resid_pre"] for layer in chosen}
        else:
            logits = model(tokens)
        baseline, base_prompts = evaluate_metrics_per_prompt(metrics, logits)
        n_prompts = tokens.shape[0]
        per_prompt = {name: torch.full(values[name].shape + (n_prompts,), float("nan"),
                                       dtype=torch.float64)
                      for name, v in base_prompts.items() if v is not None}
        total = sum(len(head_lists[layer]) * len(band_names) for layer in chosen)
        bar = tqdm(total=total, desc=f"{config.mode}-ablating bands", disable=not progress)
        try:
            for layer in chosen:
                for head in head_lists[layer]:
                    for b, ids in enumerate(band_ids[layer]):
                        hooks = ablate_frequencies_hooks(resolved, {(layer, head): ids},
                                                         config.mode, side=config.side,
                                                         means=means)
                        if bridge:
                            out = model.run_with_hooks(starts[layer], start_at_layer=layer,
                                                       fwd_hooks=hooks, **kwargs)
                        else:
                            out = model.run_with_hooks(tokens, fwd_hooks=hooks)
                        cell, prompts = evaluate_metrics_per_prompt(metrics, out)
                        for name, value in cell.items():
                            values[name][layer, head, b] = value
                            if name in per_prompt:
                                per_prompt[name][layer, head, b] = prompts[name]
                        bar.update(1)
        finally:
            bar.close()
    return BandSweep(values=values, baseline=baseline, band_names=band_names, bands=band_ids,
                     layers=chosen, heads=head_lists, config=config, per_prompt=per_prompt,
                     baseline_per_prompt={k: v for k, v in base_prompts.items()
                                          if v is not None})
