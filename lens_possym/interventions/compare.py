r"""A head set against random head sets of equal count: the control every ablation needs.

"Removing band ``b`` of heads ``H`` hurts the task" means little without the same removal
on other heads. :func:`compare_with_random_heads` ablates each band (in each mode) of all
of ``H`` at once, and the same on ``n_random`` random head sets of ``|H|`` heads, and reports
the metrics with the random sets' mean and standard deviation.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

import torch
from torch import Tensor

from .._inputs import ModelInput, as_tokens
from ..errors import InvalidSelectionError
from ..rope import rope_specs
from ._select import HeadsLike, parse_heads
from .frequency import FrequencyMeans, _check_mode, frequency_ablation_hooks, frequency_means
from .sweep import _evaluate

__all__ = ["HeadSetComparison", "compare_with_random_heads"]

Metric = Callable[[Tensor], Any]


@dataclass
class HeadSetComparison:
    """Result of :func:`compare_with_random_heads`.

    Attributes:
        baseline: ``{metric: value}`` without ablation.
        chosen: ``{(band, mode): {metric: value}}`` with the band of every chosen head ablated.
        random: ``{(band, mode): [{metric: value} per random set]}``.
        heads: the chosen heads; random_heads: the random sets (same for every band and mode).
    """

    baseline: dict[str, float]
    chosen: dict[tuple[str, str], dict[str, float]]
    random: dict[tuple[str, str], list[dict[str, float]]]
    heads: list[tuple[int, int]]
    random_heads: list[list[tuple[int, int]]]
    bands: list[str] = field(default_factory=list)
    modes: list[str] = field(default_factory=list)

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

    def to_dict(self) -> dict:
        return {"baseline": self.baseline, "heads": [list(h) for h in self.heads],
                "random_heads": [[list(h) for h in s] for s in self.random_heads],
                "bands": self.bands, "modes": self.modes, "rows": self.rows()}


def compare_with_random_heads(
    model: Any,
    input: ModelInput,
    metric: Metric | Mapping[str, Metric],
    heads: HeadsLike,
    *,
    bands: Sequence[str] = ("low", "high"),
    modes: Sequence[str] = ("zero", "mean"),
    n_random: int = 5,
    seed: int = 0,
    pool: HeadsLike = None,
    reference: Any = None,
    means: FrequencyMeans | None = None,
    last_token_only: bool = True,
    progress: bool = True,
) -> HeadSetComparison:
    """Ablate each band of all ``heads`` at once, and the same for random head sets.

    Args:
        input: prompts or tokens ``[batch, pos]``.
        metric: ``logits -> scalar`` or ``{name: ...}`` (e.g. :func:`binding_metrics`).
        heads: the head set (any form of :func:`parse_heads`).
        bands: frequency selections applied to every head (``"low"``, ``"0:16"``, ...).
        modes: ablation modes to compare (``"zero"``, ``"mean"``, ``"unrotate"``).
        n_random: number of random head sets of ``len(heads)`` heads (0: none).
        seed: seed of the random draws (Python's ``random.Random``).
        pool: heads to draw from (all heads by default, the chosen ones included).
        reference, means: reference prompts (or precomputed means) for ``mode="mean"``.
        last_token_only: compute only the last position's logits (bridges).

    Cost: ``1 + len(bands) · len(modes) · (1 + n_random)`` forward passes.
    """
    from tqdm.auto import tqdm

    metrics = dict(metric) if isinstance(metric, Mapping) else {"metric": metric}
    for mode in modes:
        _check_mode(mode)
    specs = rope_specs(model)
    chosen = parse_heads(heads, specs)
    candidates = parse_heads(pool, specs)
    if n_random and len(candidates) < len(chosen):
        raise InvalidSelectionError(
            f"cannot draw {len(chosen)} random heads from a pool of {len(candidates)}"
        )
    rng = random.Random(seed)
    draws = [sorted(rng.sample(candidates, len(chosen))) for _ in range(n_random)]
    tokens = as_tokens(model, input)
    if "mean" in modes and means is None:
        if reference is None:
            raise InvalidSelectionError("mode='mean' needs reference=<prompts or tokens>")
        layers = sorted({layer for layer, _ in chosen} | {layer for d in draws for layer, _ in d})
        means = frequency_means(model, reference, layers)
    kwargs = {"logits_to_keep": 1} if (last_token_only and hasattr(model, "original_model")) else {}

    def run(head_set, band, mode):
        hooks = [] if head_set is None else frequency_ablation_hooks(
            model, {h: band for h in head_set}, mode, means=means)
        with torch.no_grad():
            return _evaluate(metrics, model.run_with_hooks(tokens, fwd_hooks=hooks, **kwargs))

    bar = tqdm(total=1 + len(bands) * len(modes) * (1 + n_random), desc="ablating head sets",
               disable=not progress)
    try:
        baseline = run(None, None, None)
        bar.update(1)
        chosen_results, random_results = {}, {}
        for mode in modes:
            for band in bands:
                chosen_results[(band, mode)] = run(chosen, band, mode)
                bar.update(1)
                random_results[(band, mode)] = []
                for draw in draws:
                    random_results[(band, mode)].append(run(draw, band, mode))
                    bar.update(1)
    finally:
        bar.close()
    return HeadSetComparison(baseline=baseline, chosen=chosen_results, random=random_results,
                             heads=chosen, random_heads=draws, bands=list(bands),
                             modes=list(modes))
