"""The one helper every figure module shares: draw into the caller's axes or a new figure."""

from __future__ import annotations

__all__ = ["axes_or_new"]


def axes_or_new(ax, figsize: tuple[float, float]):
    """``ax`` itself, or the axes of a new ``figsize`` figure (constrained layout)."""
    if ax is not None:
        return ax
    import matplotlib.pyplot as plt

    _, ax = plt.subplots(figsize=figsize, constrained_layout=True)
    return ax
