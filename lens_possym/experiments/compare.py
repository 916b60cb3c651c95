r"""A head set against random head sets of equal count: the control every ablation needs.

"Removing band ``b`` of heads ``H`` hurts the task" means little without the same removal
on other heads. :func:`compare_with_random_heads` ablates each band (in each mode) of all
of ``H`` at once, and the same on ``n_random`` random head sets of ``|H|`` heads, and reports
the metrics with the random sets' mean and standard deviation.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import torch

from .._checks import boundary
from .._inputs import ModelInput, as_tokens
from .._json import JsonConfig, check_field_types, to_jsonable
from ..errors import InvalidSelectionError
from ..results_io import ResultIO
from ..resolved import Resolved, resolve
from ..typing import HookedModel
from ..interventions.frequency import FrequencyMeans, ablate_frequencies_hooks, means_for
from .metrics import Metric, as_metrics, evaluate_metrics
from ..interventions.modes import check_mode
from ..interventions.selection import freqs_label, heads_label, parse_heads
from ..interventions.spec import Intervention
from .sweep import last_token_kwargs

__all__ = ["HeadSetConfig", "HeadSetComparison", "compare_with_random_heads"]


@dataclass(frozen=True)
class HeadSetConfig(JsonConfig):
    """How :func:`compare_with_random_heads` ablates: frozen, validated, saved with the result.

    Attributes:
        bands: frequency selections applied to every head (``"low"``, ``"0:16"``, ...).
        modes: ablation modes to compare (``"zero"``, ``"mean"``, ``"unrotate"``).
        n_random: number of random head sets of ``len(heads)`` heads (0: none).
        seed: seed of the random draws (Python's ``random.Random``; no global RNG).
        pool: heads to draw from, in the grammar (all heads by default, the chosen ones
            included).
        per_position: per-position reference means for ``mode="mean"``.
        last_token_only: compute only the last position's logits (bridges).
    """

    bands: tuple[str, ...] = ("low", "high")
    modes: tuple[str, ...] = ("zero", "mean")
    n_random: int = 5
    seed: int = 0
    pool: str | None = None
    per_position: bool = False
    last_token_only: bool = True

    def __post_init__(self) -> None:
        bands = [self.bands] if isinstance(self.bands, str) else list(self.bands)
        modes = [self.modes] if isinstance(self.modes, str) else list(self.modes)
        if not bands or not modes:
            raise InvalidSelectionError("pass at least one band and one mode")
        object.__setattr__(self, "bands", tuple(freqs_label(b) for b in bands))
        object.__setattr__(self, "modes", tuple(check_mode(m) for m in modes))
        if self.pool is not None:
            object.__setattr__(self, "pool", heads_label(self.pool))
        n = self.n_random
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise InvalidSelectionError(f"n_random must be a count >= 0, got {self.n_random!r}")
        # what the checks above leave open: a value of another type
        check_field_types(self)


@dataclass(repr=False)
class HeadSetComparison(ResultIO):
    """Result of :func:`compare_with_random_heads`.

    Attributes:
        baseline: ``{metric: value}`` without ablation.
        chosen: ``{(band, mode): {metric: value}}`` with the band of every chosen head ablated.
        random: ``{(band, mode): [{metric: value} per random set]}``.
        heads: the chosen heads; random_heads: the random sets (same for every band and mode).
        config: the settings (``compare_with_random_heads(..., config=result.config)``
            draws the same sets again); :meth:`intervention` is the spec of one condition.
    """

    baseline: dict[str, float]
    chosen: dict[tuple[str, str], dict[str, float]]
    random: dict[tuple[str, str], list[dict[str, float]]]
    heads: list[tuple[int, int]]
    random_heads: list[list[tuple[int, int]]]
    config: "HeadSetConfig" = field(default_factory=lambda: HeadSetConfig())

    FORMAT = "lens-possym/head-set-comparison@1"

    @property
    def bands(self) -> list[str]:
        return list(self.config.bands)

    @property
    def modes(self) -> list[str]:
        return list(self.config.modes)

    @property
    def metrics(self) -> list[str]:
        return list(self.baseline)

    def random_mean(self, band: str, mode: str, metric: str) -> float:
        return float(torch.tensor([r[metric] for r in self.random[(band, mode)]]).mean())

    def random_std(self, band: str, mode: str, metric: str) -> float:
        values = torch.tensor([r[metric] for r in self.random[(band, mode)]])
        return float(values.std()) if len(values) > 1 else 0.0

    def rows(self) -> list[dict[str, Any]]:
        """One row per condition: ``{"condition", metric: value, metric + "_sd": ...}``."""
        rows = [{"condition": "baseline", **self.baseline}]
        for mode in self.modes:
            for band in self.bands:
                rows.append({"condition": f"chosen · {band} · {mode}", **self.chosen[(band, mode)]})
                if self.random_heads:
                    row = {"condition": f"random · {band} · {mode}"}
                    for m in self.metrics:
                        row[m] = self.random_mean(band, mode, m)
                        row[f"{m}_sd"] = self.random_std(band, mode, m)
                    rows.append(row)
        return rows

    def table(self, metrics: Sequence[str] | None = None) -> str:
        """A plain-text table (random sets: mean ± sd)."""
        metrics = list(metrics or self.metrics)
        width = 20
        lines = [f"{'condition':<26}" + "".join(f"{m:>{width}}" for m in metrics)]
        for row in self.rows():
            cells = []
            for m in metrics:
                sd = row.get(f"{m}_sd")
                cells.append(f"{row[m]:.3f}" + (f" ± {sd:.3f}" if sd is not None else "        "))
            lines.append(f"{row['condition']:<26}" + "".join(f"{c:>{width}}" for c in cells))
        return "\n".join(lines)

    def intervention(self, band: str, mode: str, draw: int | None = None) -> Intervention:
        """The ablation of one condition: the chosen heads (``draw=None``) or random set
        ``draw``, band ``band``, mode ``mode``, as a replayable :class:`Intervention`."""
        if band not in self.config.bands or mode not in self.config.modes:
            raise InvalidSelectionError(
                f"no condition ({band!r}, {mode!r}); bands {self.bands}, modes {self.modes}")
        heads = self.heads if draw is None else self.random_heads[draw]
        return Intervention("ablate_frequencies", {h: band for h in heads}, mode=mode,
                            per_position=self.config.per_position and mode == "mean")

    def to_dict(self) -> dict:
        """JSON data; ``chosen``/``random`` as ``[band, mode, values]`` lists (JSON has no
        tuple keys), ``rows`` as :meth:`rows` gives them."""
        return to_jsonable({"baseline": self.baseline, "heads": self.heads,
                            "random_heads": self.random_heads, "bands": self.bands,
                            "modes": self.modes, "config": self.config.to_dict(),
                            "chosen": [[b, m, v] for (b, m), v in self.chosen.items()],
                            "random": [[b, m, v] for (b, m), v in self.random.items()],
                            "rows": self.rows()})

    @classmethod
    def from_dict(cls, data: dict) -> "HeadSetComparison":
        def pairs(items):
            return [tuple(h) for h in items]

        return cls(baseline=dict(data["baseline"]),
                   chosen={(b, m): dict(v) for b, m, v in data["chosen"]},
                   random={(b, m): [dict(x) for x in v] for b, m, v in data["random"]},
                   heads=pairs(data["heads"]),
                   random_heads=[pairs(s) for s in data["random_heads"]],
                   config=HeadSetConfig.from_dict(data["config"]))

    def _table(self):
        """Long format: one row per (condition, metric): ``heads`` is ``"chosen"``,
        ``"random"`` (one row per draw, ``draw`` its index) or ``"baseline"``; ``band``,
        ``mode``; ``score`` the metric and ``value`` its value."""
        import pandas as pd

        rows = [{"heads": "baseline", "draw": None, "band": None, "mode": None, "score": m,
                 "value": v} for m, v in self.baseline.items()]
        for (band, mode), values in self.chosen.items():
            rows += [{"heads": "chosen", "draw": None, "band": band, "mode": mode, "score": m,
                      "value": v} for m, v in values.items()]
        for (band, mode), draws in self.random.items():
            rows += [{"heads": "random", "draw": i, "band": band, "mode": mode, "score": m,
                      "value": v} for i, values in enumerate(draws) for m, v in values.items()]
        frame = pd.DataFrame.from_records(rows)
        frame["draw"] = frame["draw"].astype("Int64")
        return frame

    def summary(self) -> dict[str, Any]:
        """The heads, the number of random sets, and every condition's row (:meth:`rows`:
        the chosen heads' metrics, the random sets' mean and sd)."""
        return to_jsonable({"heads": [f"{layer}.{head}" for layer, head in self.heads],
                            "n_random": len(self.random_heads), "rows": self.rows()})

    def describe(self) -> str:
        """The heads, then :meth:`table` (every condition; random sets as mean ± sd)."""
        heads = ", ".join(f"{layer}.{head}" for layer, head in self.heads)
        return f"heads {heads}; {len(self.random_heads)} random sets\n{self.table()}"

    def _headline(self) -> list[str]:
        return [f"n_heads={len(self.heads)}", f"n_random={len(self.random_heads)}",
                f"conditions={len(self.chosen)}"]


@boundary
def compare_with_random_heads(
    model: HookedModel | Resolved,
    input: ModelInput,
    metric: Metric | Mapping[str, Metric],
    heads: Any,
    config: HeadSetConfig | None = None,
    *,
    reference: Any = None,
    means: FrequencyMeans | None = None,
    progress: bool = True,
    **settings: Any,
) -> HeadSetComparison:
    """Ablate each band of all ``heads`` at once, and the same for random head sets.

    Args:
        input: prompts or tokens ``[batch, pos]``.
        metric: ``logits -> scalar`` or ``{name: ...}`` (e.g. :func:`binding_metrics`).
        heads: the head set (any form of :func:`parse_heads`).
        config: a :class:`HeadSetConfig`; ``**settings`` are its fields (``bands``,
            ``modes``, ``n_random``, ``seed``, ``pool``, ``per_position``,
            ``last_token_only``) and override it.
        reference, means: reference prompts (or precomputed means) for ``mode="mean"``;
            by default the means are taken over ``input`` itself, so the defaults (modes
            ``zero`` and ``mean``) need nothing more.
        progress: show a tqdm progress bar.

    Cost: ``1 + len(bands) · len(modes) · (1 + n_random)`` forward passes.
    """
    from tqdm.auto import tqdm

    config = HeadSetConfig.coerce(config, **settings)
    metrics = as_metrics(metric)
    resolved = resolve(model)
    model, specs = resolved.model, resolved.specs
    chosen = parse_heads(heads, specs)
    candidates = parse_heads(config.pool, specs)
    if config.n_random and len(candidates) < len(chosen):
        raise InvalidSelectionError(
            f"cannot draw {len(chosen)} random heads from a pool of {len(candidates)}"
        )
    rng = random.Random(config.seed)
    draws = [sorted(rng.sample(candidates, len(chosen))) for _ in range(config.n_random)]
    tokens = as_tokens(model, input)
    layers = sorted({layer for layer, _ in chosen} | {layer for d in draws for layer, _ in d})
    means = means_for(config.modes, resolved, layers, means=means,
                      reference=tokens if reference is None else reference,
                      per_position=config.per_position)
    kwargs = last_token_kwargs(model, config.last_token_only)

    def run(head_set, band, mode):
        hooks = [] if head_set is None else ablate_frequencies_hooks(
            resolved, {h: band for h in head_set}, mode, means=means)
        with torch.no_grad():
            logits = model.run_with_hooks(tokens, fwd_hooks=hooks, **kwargs)
        return evaluate_metrics(metrics, logits)

    n_runs = 1 + len(config.bands) * len(config.modes) * (1 + config.n_random)
    bar = tqdm(total=n_runs, desc="ablating head sets", disable=not progress)
    try:
        baseline = run(None, None, None)
        bar.update(1)
        chosen_results, random_results = {}, {}
        for mode in config.modes:
            for band in config.bands:
                chosen_results[(band, mode)] = run(chosen, band, mode)
                bar.update(1)
                random_results[(band, mode)] = []
                for draw in draws:
                    random_results[(band, mode)].append(run(draw, band, mode))
                    bar.update(1)
    finally:
        bar.close()
    return HeadSetComparison(baseline=baseline, chosen=chosen_results, random=random_results,
                             heads=chosen, random_heads=draws, config=config)
