"""Helpers every figure module shares: the axes to draw into, and tensors made plottable."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np
    from matplotlib.axes import Axes

__all__ = ["axes_or_new", "to_numpy", "angle_label"]


def axes_or_new(ax, figsize: tuple[float, float]) -> "Axes":
    """``ax`` itself, or the axes of a new ``figsize`` figure (constrained layout)."""
    if ax is not None:
        return ax
    import matplotlib.pyplot as plt

    _, ax = plt.subplots(figsize=figsize, constrained_layout=True)
    return ax


def to_numpy(values) -> np.ndarray:
    """A tensor (on any device, with or without grad) or array-like as a NumPy array.

    Results can live on a GPU (frequency logits and norms stay on the model's device);
    matplotlib needs host memory.
    """
    import numpy as np

    if hasattr(values, "detach"):
        return values.detach().cpu().numpy()
    return np.asarray(values)


def angle_label(theta: float) -> str:
    """A short tick label for an angle θ in rad/token: ``"0"``, ``"0.38"``, ``"1.2e-4"``."""
    if theta == 0:
        return "0"
    if theta >= 0.01:
        return f"{theta:.2g}"
    mantissa, exponent = f"{theta:.1e}".split("e")  # rounding settles the exponent
    return f"{mantissa}e{int(exponent)}"
