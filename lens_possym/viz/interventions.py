"""Figures for interventions: band-sweep heatmaps and before/after comparisons."""

from __future__ import annotations

from typing import TYPE_CHECKING, Mapping, Sequence

import numpy as np
import torch

from ..interventions.selection import freqs_label
from ..experiments.sweep import BandSweep
from ._axes import to_numpy

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = ["plot_band_sweep", "plot_ablation_comparison"]


def plot_band_sweep(sweep: BandSweep, metric: str | None = None, *, effect: bool = True,
                    axes=None, vmax: float | None = None, cmap: str = "RdBu") -> "Figure":
    """One heatmap per band (layers × heads) of a :class:`BandSweep`.

    Args:
        metric: which metric (the sweep's first by default).
        effect: plot the effect ``ablated − baseline`` (red: the ablation lowered the
            metric, blue: raised it, centred at 0, as every effect figure), else the
            metric's value under ablation.
        axes: a sequence of ``n_bands`` axes to draw into (a new figure otherwise).
        vmax: colour limit (default: the largest |value| over all bands).

    Returns:
        The figure.
    """
    import matplotlib.pyplot as plt

    name = metric or sweep.metrics[0]
    data = (sweep.effect(name) if effect else sweep.values[name]).double()
    data = data[sweep.layers]
    n_layers, n_heads, n_bands = data.shape
    if axes is None:
        fig, axes = plt.subplots(1, n_bands, figsize=(2.0 + 1.1 * n_bands * max(2, n_heads) / 2,
                                                       max(2.4, 1.2 + 0.28 * n_layers)),
                                 constrained_layout=True, sharey=True, squeeze=False)
        axes = axes[0]
    fig = axes[0].figure
    finite = data[torch.isfinite(data)]
    limit = vmax if vmax is not None else (float(finite.abs().max()) if finite.numel() else 1.0)
    limit = limit or 1.0
    kwargs = dict(cmap=cmap, vmin=-limit, vmax=limit) if effect else dict(cmap="viridis")
    image = None
    for b, ax in enumerate(axes):
        image = ax.imshow(to_numpy(data[..., b]), aspect="auto", interpolation="nearest", **kwargs)
        ax.set_title(f"{sweep.band_names[b]} ids "
                     f"{freqs_label(sweep.bands[sweep.layers[0]][b])}", fontsize="small")
        ax.set_xlabel("head")
        ax.set_xticks(np.arange(n_heads))
        ax.set_yticks(np.arange(n_layers))
        ax.set_yticklabels([str(layer) for layer in sweep.layers], fontsize="x-small")
    axes[0].set_ylabel("layer")
    label = f"Δ {name} (ablated − baseline)" if effect else name
    fig.colorbar(image, ax=list(axes), label=label, shrink=0.9)
    fig.suptitle(f"{sweep.mode}-ablating one band of one head: {label} "
                 f"(baseline {sweep.baseline[name]:.3g})", fontsize="medium")
    return fig


def plot_ablation_comparison(results: Mapping[str, Mapping[str, float]],
                             metrics: Sequence[str] = ("accuracy", "logit_diff"), *,
                             errors: Mapping[str, Mapping[str, float]] | None = None, axes=None) -> "Figure":
    """Bar charts comparing conditions (e.g. baseline, low band, high band, random heads).

    Bars are grey for ``baseline`` (also drawn as a dashed line), blue for conditions whose
    name contains ``random``, red for the others.

    Args:
        results: ``{condition: {metric: value}}``, in the order to draw.
        errors: optional ``{condition: {metric: spread}}`` drawn as error bars.
    """
    import matplotlib.pyplot as plt

    if axes is None:
        width = max(4.2, 0.42 * len(results))
        fig, axes = plt.subplots(1, len(metrics), figsize=(width * len(metrics), 3.8),
                                 constrained_layout=True, squeeze=False)
        axes = axes[0]
    names = list(results)
    x = np.arange(len(names))

    def colour(name: str) -> str:
        if name.startswith("baseline"):
            return "0.6"
        return "C0" if "random" in name else "C3"

    for ax, metric in zip(axes, metrics):
        values = [results[n][metric] for n in names]
        ax.bar(x, values, color=[colour(n) for n in names])
        if errors:
            spread = np.array([errors.get(n, {}).get(metric, 0.0) for n in names])
            shown = spread > 0
            ax.errorbar(x[shown], np.array(values)[shown], yerr=spread[shown], fmt="none",
                        ecolor="k", capsize=3, lw=1)
        ax.set_xticks(x)
        ax.set_xticklabels(names, rotation=30, ha="right", fontsize="small")
        ax.set_title(metric.replace("_", " "), fontsize="medium")
        ax.axhline(0, color="k", lw=0.5)
        if "baseline" in results:
            ax.axhline(results["baseline"][metric], color="0.4", lw=0.8, ls="--")
    return axes[0].figure
