"""Figures of positional schemes: Toeplitz term magnitudes per layer and head (paper B)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

import numpy as np

from ..toeplitz import TermMagnitudes
from ._axes import to_numpy

if TYPE_CHECKING:
    from matplotlib.axes import Axes

__all__ = ["plot_toeplitz_terms"]


def plot_toeplitz_terms(magnitudes: TermMagnitudes, *, axes=None, cmap: str = "magma") -> "Sequence[Axes]":
    """One heatmap per term (``cc``, ``cp``, ``pc``, ``pp``, ``bias``, or ``content`` and
    ``bias``, or one per RoPE frequency): mean ``|term|`` over visible (query, key) entries,
    layers down, heads across, on one colour scale so the terms compare.

    ``magnitudes``: from :func:`lens_possym.toeplitz.toeplitz_magnitudes`. Returns the
    axes (a new figure's when ``axes`` is ``None``); layers without a split stay blank.
    """
    import matplotlib.pyplot as plt

    values = to_numpy(magnitudes.values)
    n_terms = len(magnitudes.names)
    if axes is None:
        _, axes = plt.subplots(1, n_terms, figsize=(2.2 * n_terms + 1, 2.8),
                               constrained_layout=True, squeeze=False)
        axes = axes[0]
    finite = values[np.isfinite(values)]
    vmax = float(finite.max()) if finite.size else 1.0
    image = None
    for t, (ax, name) in enumerate(zip(axes, magnitudes.names)):
        image = ax.imshow(values[:, :, t], cmap=cmap, vmin=0, vmax=vmax, aspect="auto")
        ax.set_title(name, fontsize="medium")
        ax.set_xlabel("head")
        ax.set_ylabel("layer" if t == 0 else "")
    if image is not None:
        plt.colorbar(image, ax=list(axes), label="mean |term|", shrink=0.8)
    return axes
