"""Figures for per-head ablation importance: a layers × heads heatmap, top head marked."""

from __future__ import annotations

from typing import TYPE_CHECKING

import math
import textwrap

import numpy as np

from ..experiments.importance import HeadImportance
from ._axes import axes_or_new, to_numpy

if TYPE_CHECKING:
    from matplotlib.axes import Axes

__all__ = ["plot_head_importance"]


def plot_head_importance(result: HeadImportance, *, relative: bool = False, ax=None,
                         title: str | None = None, annotate: bool = True,
                         cmap: str = "RdBu") -> "Axes":
    """Heatmap of the effect ``Δ`` = ablated − baseline (or ``Δ / |baseline|``) per layer
    and query head.

    Red = the ablation lowered the metric, blue = it raised it, centred at 0: the colours of
    every effect figure (:func:`~lens_possym.viz.plot_band_sweep` too). For accuracy and
    logit difference red marks the heads that help; for the loss, blue does. The most
    important head is outlined, and the title carries the baseline, the top head's effect
    and its share of the summed drops (see
    :class:`~lens_possym.interventions.HeadImportance`).

    Args:
        relative: plot the effect as a fraction of the baseline.
        ax: axes to draw into (a new figure otherwise).
        annotate: write each cell's value (when there are at most 24 heads per layer).

    Returns:
        The ``Axes``.
    """
    from matplotlib.patches import Rectangle

    data = to_numpy(result.relative if relative else result.effect).astype(float)
    n_layers, n_heads = data.shape
    ax = axes_or_new(ax, (1.6 + 0.55 * n_heads, 1.2 + 0.3 * n_layers))
    finite = data[np.isfinite(data)]
    limit = float(np.abs(finite).max()) if finite.size else 1.0
    image = ax.imshow(np.ma.masked_invalid(data), aspect="auto", interpolation="nearest",
                      cmap=cmap, vmin=-(limit or 1.0), vmax=limit or 1.0)
    ax.set_xlabel("head")
    ax.set_ylabel("layer")
    ax.set_xticks(np.arange(n_heads))
    ax.set_yticks(np.arange(n_layers))
    ax.tick_params(labelsize="x-small")
    if annotate and n_heads <= 24:
        for layer in range(n_layers):
            for head in range(n_heads):
                value = data[layer, head]
                if math.isfinite(value):
                    ax.text(head, layer, f"{value:.2f}", ha="center", va="center",
                            fontsize="xx-small",
                            color="white" if abs(value) > 0.6 * limit else "black")
    layer, head = result.top_head
    ax.add_patch(Rectangle((head - 0.5, layer - 0.5), 1, 1, fill=False, edgecolor="k", lw=2))
    metric = result.config.metric.replace("_", " ")
    label = f"{'relative ' if relative else ''}Δ {metric} (ablated − baseline)"
    ax.figure.colorbar(image, ax=ax, label=label, shrink=0.9)
    share = result.top_share
    lines = [title] if title else []
    lines.append(f"{result.config.mode}-ablating one head: {metric} baseline {result.baseline:.3g}")
    lines.append(f"top {layer}.{head}: Δ {result.top_effect:+.3g} "
                 f"(costs {100 * result.top_relative:.0f}% of baseline), share of summed drop "
                 f"{share:.2f}" if math.isfinite(share)
                 else "no head's ablation hurts")
    # wrapped to the figure's width: a narrow heatmap (4 heads) cut the title off
    width = max(24, int(ax.figure.get_figwidth() * 72 / (8.5 * 0.6)))
    ax.set_title("\n".join(textwrap.fill(line, width) for line in lines), fontsize="small")
    return ax
