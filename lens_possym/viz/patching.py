"""Figures for patching grids and for any per-prompt effect with its interval.

* :func:`plot_patching_grid`: the grid's mean over prompts as a heatmap (layers × heads;
  a 3-D grid as rows ``layer.head`` × positions or frequencies; a per-layer grid as bars
  with error bars);
* :func:`plot_effects`: horizontal bars with error bars (a bootstrap interval or ± a
  standard error), for the top cells of any result (patching, head ablation, band sweeps,
  ``lens-possym ablate``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

import numpy as np

from .._checks import boundary
from ..errors import InvalidSelectionError
from ._axes import axes_or_new, to_numpy

if TYPE_CHECKING:
    from matplotlib.axes import Axes

__all__ = ["plot_patching_grid", "plot_effects", "plot_patching_top"]


def _rows(grid) -> tuple[np.ndarray, list[str], str, str]:
    """The grid as a 2-D array, with row labels and axis titles."""
    mean = to_numpy(grid.mean()).astype(float)
    names = list(grid.axis_names)
    if mean.ndim == 2:
        return mean, [str(i) for i in range(mean.shape[0])], names[1].replace("_index", ""), "layer"
    if mean.ndim == 3:
        if names[1] == "pos":  # [layer, pos, head] -> rows layer.head, columns positions
            mean = mean.transpose(0, 2, 1)
            col = "position"
        else:
            col = "frequency id" if names[2] == "freq" else names[2]
        n_layers, n_rows = mean.shape[:2]
        keep = [(layer, h) for layer in range(n_layers) for h in range(n_rows)
                if np.isfinite(mean[layer, h]).any()]
        data = np.stack([mean[layer, h] for layer, h in keep]) if keep else mean.reshape(-1, mean.shape[2])
        return data, [f"{layer}.{h}" for layer, h in keep], col, "layer.head"
    raise InvalidSelectionError(f"cannot draw a {mean.ndim}-D grid as a heatmap")


def plot_patching_grid(grid, *, ax=None, title: str | None = None, cmap: str = "RdBu",
                       annotate: bool = True) -> "Axes":
    """The mean over prompts of each cell of a :class:`~lens_possym.interventions.PatchingGrid`.

    Colours are centred on the unpatched run's mean (white = the patch changed nothing;
    red = the patch lowered the metric, blue = raised it, as in every effect figure).
    A grid of layers alone is drawn as bars with 95% bootstrap intervals.

    Returns:
        The ``Axes``.
    """
    baseline = float(grid.baseline.mean())
    metric = grid.metric.replace("_", " ")
    if len(grid.shape) == 1:
        unc = grid.uncertainty()
        labels = [f"layer {i}" for i in range(grid.shape[0])]
        ax = plot_effects(labels, unc.mean, unc.low, unc.high, ax=ax, baseline=baseline,
                          xlabel=metric, sort=False)
        ax.set_title(title or f"patching {grid.activation_name}", fontsize="small")
        return ax
    data, row_labels, xlabel, ylabel = _rows(grid)
    n_rows, n_cols = data.shape
    ax = axes_or_new(ax, (2.2 + min(0.5 * n_cols, 14), 1.4 + min(0.26 * n_rows, 18)))
    finite = data[np.isfinite(data)]
    limit = float(np.abs(finite - baseline).max()) if finite.size else 1.0
    limit = limit or 1.0
    image = ax.imshow(np.ma.masked_invalid(data), aspect="auto", interpolation="nearest",
                      cmap=cmap, vmin=baseline - limit, vmax=baseline + limit)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    cstep = max(1, n_cols // 32)
    ax.set_xticks(np.arange(0, n_cols, cstep))
    step = max(1, n_rows // 40)
    ax.set_yticks(np.arange(0, n_rows, step))
    ax.set_yticklabels(row_labels[::step])
    ax.tick_params(labelsize="x-small")
    if annotate and n_cols <= 16 and n_rows <= 40:
        for r in range(n_rows):
            for c in range(n_cols):
                value = data[r, c]
                if np.isfinite(value):
                    ax.text(c, r, f"{value:.2f}", ha="center", va="center", fontsize="xx-small",
                            color="white" if abs(value - baseline) > 0.6 * limit else "black")
    ax.figure.colorbar(image, ax=ax, label=metric, shrink=0.9)
    lines = [title] if title else []
    lines.append(f"patching {grid.activation_name}: {metric}, unpatched {baseline:.3g}"
                 + ("" if grid.source_baseline is None
                    else f", source {float(grid.source_baseline.mean()):.3g}")
                 + f" ({grid.n_prompts} prompts)")
    ax.set_title("\n".join(lines), fontsize="small")
    return ax


@boundary
def plot_effects(labels: Sequence[str], mean, low=None, high=None, *, se=None, ax=None,
                 baseline: float | None = None, xlabel: str = "effect", title: str | None = None,
                 sort: bool = True, color: str = "C0", down_color: str = "C3") -> "Axes":
    """Horizontal bars of ``mean`` per label, with error bars from ``low``/``high`` (an
    interval) or ``± se``; ``baseline`` draws a reference line, and bars below it (the
    metric went down) are drawn in ``down_color`` (red), the others in ``color``.

    Returns:
        The ``Axes``.
    """
    from matplotlib.colors import is_color_like

    n = len(labels)
    mean = _numbers(mean, n, "mean")
    if not is_color_like(color) or not is_color_like(down_color):
        raise InvalidSelectionError(f"color and down_color must be matplotlib colours ('C0', "
                                    f"'red'), got {color!r}, {down_color!r}")
    if low is not None and high is not None:
        lo, hi = _numbers(low, n, "low"), _numbers(high, n, "high")
        err = np.stack([mean - lo, hi - mean])
    elif se is not None:
        s = _numbers(se, n, "se")
        err = np.stack([s, s])
    else:
        err = None
    order = np.arange(n)
    if sort:
        ref = 0.0 if baseline is None else baseline
        order = np.argsort(-np.abs(np.nan_to_num(mean - ref, nan=-np.inf)))
    ax = axes_or_new(ax, (5.0, 0.9 + 0.26 * n))
    y = np.arange(n)
    colors = color
    if baseline is not None:  # red: the metric went down (the sign of every effect)
        colors = [down_color if m < baseline else color for m in mean[order]]
    ax.barh(y, mean[order], xerr=None if err is None else np.nan_to_num(err[:, order]),
            color=colors, alpha=0.8, capsize=2, error_kw={"lw": 0.8})
    ax.set_yticks(y)
    ax.set_yticklabels([labels[i] for i in order], fontsize="x-small")
    ax.invert_yaxis()
    if baseline is not None:
        ax.axvline(baseline, color="k", lw=0.8, ls="--")
    ax.set_xlabel(xlabel)
    if title:
        ax.set_title(title, fontsize="small")
    return ax


def _numbers(values, n: int, what: str) -> np.ndarray:
    """``values`` as ``n`` floats (one per label), or a clear error."""
    try:
        out = np.asarray(to_numpy(values), dtype=float).reshape(-1)
    except (TypeError, ValueError):
        out = None
    if out is None or out.shape[0] != n:
        raise InvalidSelectionError(f"{what} must be {n} numbers (one per label), got "
                                    f"{values!r:.60}")
    return out


def plot_patching_top(grid, k: int = 15, *, ax=None, title: str | None = None) -> "Axes":
    """The ``k`` cells whose patch moves the metric most: the effect (patched − unpatched,
    per prompt, averaged) with its 95% bootstrap interval."""
    unc = grid.uncertainty(of_effect=True)
    top = grid.top(k)
    labels = [grid.label(index) for index, _, _ in top]
    pick = lambda t: np.array([float(t[index]) for index, _, _ in top])  # noqa: E731
    ax = plot_effects(labels, pick(unc.mean), pick(unc.low), pick(unc.high), ax=ax,
                      baseline=0.0, sort=False,
                      xlabel=f"effect on {grid.metric.replace('_', ' ')} (patched − unpatched)")
    ax.set_title(title or f"largest effects, 95% bootstrap intervals over {grid.n_prompts} "
                 "prompts", fontsize="small")
    return ax
