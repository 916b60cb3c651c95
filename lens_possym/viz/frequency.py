"""Per-frequency figures: anything plotted against the RoPE frequency id."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Sequence

import numpy as np
import torch
from jaxtyping import Float
from torch import Tensor

from .._checks import boundary
from .._ids import head_name, read_ids
from ..decompose import FrequencyLogits, FrequencyNorms
from ..errors import InvalidSelectionError
from ._axes import angle_label, axes_or_new, to_numpy

if TYPE_CHECKING:
    from matplotlib.axes import Axes

__all__ = ["frequency_axis", "frequency_axes", "plot_frequency_profile", "plot_logit_norms", "plot_usage",
           "plot_usage_heatmap"]




def frequency_axis(ax, angles: Float[Tensor, "freq"], *, n_ticks: int = 5,
                   label: str = "θ (rad/token)", offset: float = 0.0) -> None:
    """Label ``ax``'s x axis by frequency id, with the angle θ (rad/token) on top
    (``offset`` points above the plot, for a second θ axis: :func:`frequency_axes`).

    Frequency id 0 is the fastest rotation; a θ = 0 tail, if any, is the last id.
    """
    angles = torch.as_tensor(angles, dtype=torch.float64)
    n = len(angles)
    ax.set_xlabel("frequency id (0 = fastest rotation)")
    ax.set_xlim(-0.5, n - 0.5)
    top = ax.secondary_xaxis("top")
    if offset:
        top.spines["top"].set_position(("outward", offset))
    ticks = np.unique(np.linspace(0, n - 1, n_ticks).round().astype(int))
    top.set_xticks(ticks)
    top.set_xticklabels([angle_label(float(angles[t])) for t in ticks])
    top.set_xlabel(label, fontsize="small")


def frequency_axes(ax, angles: Float[Tensor, "layer freq"], layers: Sequence[int], *,
                   n_ticks: int = 5) -> None:
    """Frequency ids below, and one θ axis on top **per RoPE base** among ``layers`` (their
    rows of ``angles``): Gemma 3's sliding layers (base 1e4) and full layers (base 1e6)
    rotate the same frequency id by different angles, so one θ axis cannot label both.
    Each axis names its layers; with one base it is :func:`frequency_axis`."""
    angles = torch.as_tensor(angles, dtype=torch.float64)
    groups: list[tuple[Tensor, list[int]]] = []
    for row, layer in zip(angles, layers):
        for group in groups:
            if group[0].shape == row.shape and torch.allclose(group[0], row, rtol=1e-6):
                group[1].append(layer)
                break
        else:
            groups.append((row, [layer]))
    if len(groups) == 1:
        frequency_axis(ax, groups[0][0], n_ticks=n_ticks)
        return
    for i, (row, members) in enumerate(groups):
        frequency_axis(ax, row, n_ticks=n_ticks, offset=38.0 * i,
                       label=f"θ (rad/token), layers {_layer_list(members)}")


def _layer_list(layers: list[int], most: int = 8) -> str:
    text = ",".join(str(layer) for layer in layers[:most])
    return text + (",…" if len(layers) > most else "")


def _curve(values: Any, angles: Tensor) -> Tensor:
    """``values`` as a float64 curve ``[freq]`` matching ``angles``, or a clear error."""
    try:
        curve = torch.as_tensor(values, dtype=torch.float64).cpu()
    except (TypeError, ValueError, RuntimeError):
        curve = None
    if curve is None or curve.ndim != 1 or angles.ndim != 1 or len(curve) != len(angles):
        count = len(angles) if angles.ndim == 1 else "?"
        raise InvalidSelectionError(
            f"values must be one number per frequency id ({count} of them, as angles), got "
            f"{values!r:.60}")
    return curve


@boundary
def plot_frequency_profile(values: Float[Tensor, "freq"] | Sequence[float],
                           angles: Float[Tensor, "freq"], *, ax=None, label: str | None = None,
                           ylabel: str = "", logy: bool = False, **line_kwargs) -> "Axes":
    """One curve of a per-frequency quantity against frequency id (angles on top)."""
    values = _curve(values, angles)
    ax = axes_or_new(ax, (7, 3.5))
    ax.plot(np.arange(len(values)), to_numpy(values), label=label, **line_kwargs)
    if logy:
        ax.set_yscale("log")
    ax.set_ylabel(ylabel)
    if not getattr(ax, "_lens_possym_freq_axis", False):
        frequency_axis(ax, angles)
        ax._lens_possym_freq_axis = True
    if label:
        ax.legend(fontsize="small")
    return ax


@boundary
def plot_logit_norms(fl: FrequencyLogits, *, heads: Sequence[int] | None = None, query: int = -1,
                     batch: int = 0, ax=None, share: bool = False, logy: bool = False) -> "Axes":
    """Norm over visible keys of each frequency's logit row (paper A, Figure 1D), per head.

    Args:
        fl: a decomposition (any query rows; ``query`` picks one).
        heads: which of ``fl.heads`` to draw (all by default).
        share: divide by the sum over frequencies.
    """
    batch = read_ids(batch, fl.terms.shape[0], what="batch row", from_end=True)[0]
    query = read_ids(query, fl.terms.shape[2], what="query row", from_end=True)[0]
    chosen = fl.heads if heads is None else read_ids(heads, max(fl.heads) + 1, what="head")
    missing = [h for h in chosen if h not in fl.heads]
    if missing or not chosen:
        raise InvalidSelectionError(
            f"heads {missing or chosen} are not in this decomposition; it holds {fl.heads}")
    ax = axes_or_new(ax, (7, 3.5))
    norms = fl.norms()[batch, :, query]  # [head, freq]
    for head in chosen:
        row = norms[fl.heads.index(head)]
        if share:
            row = row / row.sum()
        plot_frequency_profile(row, fl.angles, ax=ax, label=head_name(fl.layer, head), logy=logy,
                               ylabel="share of ‖λ‖" if share else "‖λ_f‖ over keys")
    ax.set_title(f"per-frequency logit norms, layer {fl.layer}, query position "
                 f"{int(fl.query_positions[query])}", fontsize="medium")
    return ax


@boundary
def plot_usage(norms: FrequencyNorms, layer: int, *, heads: Sequence[int] | None = None,
               which: str = "q", ax=None, logy: bool = False) -> "Axes":
    """Per-frequency query (``which="q"``) or key norms of some heads of one layer."""
    if layer not in norms.layers:
        raise InvalidSelectionError(
            f"layer {layer} is not in these norms; they hold layers {norms.layers}")
    if which not in ("q", "k"):
        raise InvalidSelectionError(f"which must be 'q' or 'k', got {which!r}")
    index = norms.layers.index(layer)
    data = norms.q if which == "q" else norms.k
    chosen = read_ids(heads, data.shape[1], what="head", where=f"layer {layer}")
    ax = axes_or_new(ax, (7, 3.5))
    for head in chosen:
        plot_frequency_profile(data[index, head], norms.angles[index], ax=ax,
                               label=head_name(layer, head), logy=logy,
                               ylabel=f"mean ‖{which}_f‖")
    ax.set_title(f"frequency usage ({which}), layer {layer}", fontsize="medium")
    return ax


def plot_usage_heatmap(norms: FrequencyNorms, *, which: str = "q", ax=None, normalize: bool = True,
                       layers: Sequence[int] | None = None) -> "Axes":
    """All heads × frequencies: rows ``layer.head``, columns frequency id, with one θ axis
    on top per RoPE base among the layers drawn (:func:`frequency_axes`).

    With ``normalize`` each row is divided by its sum, so rows compare by *where* a head puts
    its norm, not by how large it is. ``layers``: only these of ``norms.layers`` (e.g. the
    layers of one RoPE base); default all.
    """
    data = (norms.q if which == "q" else norms.k).double()
    angles, chosen = norms.angles, list(norms.layers)
    if layers is not None:
        missing = [layer for layer in layers if layer not in chosen]
        if missing:
            raise InvalidSelectionError(f"layers {missing} are not in these norms (they hold "
                                        f"layers {chosen})")
        index = [chosen.index(layer) for layer in layers]
        data, angles, chosen = data[index], angles[index], list(layers)
    n_layers, n_heads, n_freqs = data.shape
    rows = data.reshape(n_layers * n_heads, n_freqs)
    if normalize:
        rows = rows / rows.sum(-1, keepdim=True)
    ax = axes_or_new(ax, (8, max(3.0, 0.12 * len(rows))))
    image = ax.imshow(to_numpy(rows), aspect="auto", cmap="viridis", interpolation="nearest")
    ax.figure.colorbar(image, ax=ax, label="share of norm" if normalize else f"‖{which}_f‖")
    ticks = np.arange(0, n_layers * n_heads, n_heads)
    ax.set_yticks(ticks)
    ax.set_yticklabels([f"L{chosen[i // n_heads]}" for i in ticks], fontsize="x-small")
    ax.set_ylabel("layer (heads within)")
    frequency_axes(ax, angles, chosen)
    ax.set_title(f"frequency usage ({which}) of every head", fontsize="medium")
    return ax
