"""The frequency atlas: every head's per-frequency numbers for the whole model in one view.

Rows are heads (``layer:head``, layer by layer), columns frequency ids (0 = fastest
rotation) with the angle θ on a second axis: paper A's central picture, which frequencies
make each head positional or symbolic, across the model at once. The per-frequency
quantities come as ``[n_layers, n_heads, n_freqs]`` tensors (:func:`atlas_values` names the
ones a profile has).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import torch
from jaxtyping import Float
from torch import Tensor

from .._checks import boundary
from ..errors import InvalidSelectionError
from ..scores.results import PosSymScores
from ._axes import angle_label, axes_or_new, to_numpy

if TYPE_CHECKING:
    from matplotlib.axes import Axes

__all__ = ["plot_frequency_atlas", "atlas_values", "logit_share", "ATLAS_VIEWS"]

#: what the atlas can show: name -> (title, colour map, colour range)
ATLAS_VIEWS = {
    "sym": ("s_SYM per frequency", "magma", (0.0, 1.0)),
    "pos": ("s_POS per frequency", "magma", (0.0, 1.0)),
    "sym-pos": ("s_SYM − s_POS per frequency", "RdBu_r", (-1.0, 1.0)),
    "share": ("share of the logit row's norm", "viridis", (0.0, None)),
}


def logit_share(norms: Float[Tensor, "layer head_index freq"]
                ) -> Float[Tensor, "layer head_index freq"]:
    """Each frequency's share of a head's per-frequency logit norms (rows sum to 1)."""
    return norms / norms.nansum(-1, keepdim=True)


@boundary
def atlas_values(scores: PosSymScores, view: str,
                 share: Float[Tensor, "layer head_index freq"] | None = None
                 ) -> Float[Tensor, "layer head_index freq"]:
    """The ``[n_layers, n_heads, n_freqs]`` tensor an atlas ``view`` shows (:data:`ATLAS_VIEWS`).

    ``share`` is the logit share (:func:`logit_share` of
    :meth:`FrequencyLogits.norms <lens_possym.decompose.FrequencyLogits.norms>`), needed
    for ``view="share"`` only.
    """
    if not isinstance(view, str) or view not in ATLAS_VIEWS:
        raise InvalidSelectionError(
            f"atlas view {view!r} unknown; choose one of {', '.join(ATLAS_VIEWS)}")
    if view == "share":
        if share is None:
            raise InvalidSelectionError("view='share' needs the logit share (pass share=...)")
        return share
    if scores.pos_freq is None or scores.sym_freq is None:
        raise InvalidSelectionError("these scores have no per-frequency part (per_frequency="
                                    "False); compute them with per_frequency=True")
    return {"sym": scores.sym_freq, "pos": scores.pos_freq,
            "sym-pos": scores.sym_freq - scores.pos_freq}[view]


@boundary
def plot_frequency_atlas(scores: PosSymScores, view: str = "sym", *,
                         share: Float[Tensor, "layer head_index freq"] | None = None,
                         ax=None, n_ticks: int = 6) -> "Axes":
    """Heads × frequency ids heatmap of one per-frequency quantity, for the whole model.

    Args:
        scores: a profile with per-frequency scores.
        view: ``"sym"``, ``"pos"``, ``"sym-pos"`` or ``"share"`` (see :data:`ATLAS_VIEWS`).
        share: the logit share per head and frequency (``view="share"``).
        n_ticks: angle labels on the top axis.

    Rows are the scored heads, layer by layer (``layer:head`` on the left, a line between
    layers); unscored layers are left out.
    """
    values = atlas_values(scores, view, share)
    title, cmap, (vmin, vmax) = ATLAS_VIEWS[view]
    rows = [layer for layer in range(scores.n_layers) if scores.pos[layer].isfinite().any()]
    grid = values[rows].reshape(len(rows) * scores.n_heads, -1)
    n_freqs = grid.shape[-1]
    ax = axes_or_new(ax, (min(14, 3 + 0.06 * n_freqs), max(3.0, 1.0 + 0.09 * len(grid))))
    image = ax.imshow(to_numpy(grid), aspect="auto", interpolation="nearest", cmap=cmap,
                      vmin=vmin, vmax=vmax)
    ax.figure.colorbar(image, ax=ax, shrink=0.8, label=title)
    step = max(1, len(rows) // 12)  # a label every few layers keeps the rows readable
    ax.set_yticks([i * scores.n_heads for i in range(0, len(rows), step)])
    ax.set_yticklabels([f"L{rows[i]}" for i in range(0, len(rows), step)], fontsize="small")
    for i in range(1, len(rows)):
        ax.axhline(i * scores.n_heads - 0.5, color="white", lw=0.4)
    ax.set_ylabel(f"layer (rows: its {scores.n_heads} heads)")
    ax.set_xlabel("frequency id (0 = fastest rotation)")
    angles = scores.angles[rows[0]] if rows else torch.zeros(n_freqs)
    top = ax.secondary_xaxis("top")
    ticks = np.unique(np.linspace(0, n_freqs - 1, n_ticks).round().astype(int))
    top.set_xticks(ticks)
    top.set_xticklabels([angle_label(float(angles[t])) for t in ticks])
    top.set_xlabel("θ (rad/token)")
    ax.set_title(f"frequency atlas: {title}", fontsize="medium")
    return ax
