"""Figures of training runs (:mod:`lens_possym.training`): test accuracy over training and
a head's query/key trajectory on one frequency's rotation plane. (Paper A's sweep figures
are in :mod:`lens_possym.papers.a.figures`.)"""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

import numpy as np

from ._axes import axes_or_new, to_numpy

if TYPE_CHECKING:
    from matplotlib.axes import Axes

__all__ = [
    "plot_training_curves",
    "plot_qk_trajectory",
]


def _axes(ax, figsize=(6.5, 3.5)):
    return axes_or_new(ax, figsize)


def plot_training_curves(results, *, ax=None, labels: Sequence[str] | None = None) -> "Axes":
    """Test accuracy against step for one or more :class:`~lens_possym.training.loop.TrainResult`."""
    ax = _axes(ax)
    results = results if isinstance(results, (list, tuple)) else [results]
    for n, result in enumerate(results):
        steps = [h.step for h in result.history]
        acc = [h.test_accuracy for h in result.history]
        ax.plot(steps, acc, label=labels[n] if labels else None)
    ax.set_xlabel("step")
    ax.set_ylabel("test accuracy")
    ax.set_ylim(-0.02, 1.02)
    if labels:
        ax.legend(fontsize="small")
    return ax


def plot_qk_trajectory(traj, *, ax=None, color_by: Sequence[int] | None = None,
                       max_keys: int = 64) -> "Axes":
    """Queries (blue shades) and keys (orange) on a frequency's plane over training.

    Each query's path is drawn from its first to its last recorded step, ending in a dot;
    keys are drawn the same way (up to ``max_keys`` of them). ``color_by`` (one integer per
    probe prompt, e.g. the answer position) shades the queries.
    """
    import matplotlib.pyplot as plt

    ax = _axes(ax, figsize=(4.5, 4.5))
    q = to_numpy(traj.q)        # [eval, batch, 2]
    k = to_numpy(traj.k)        # [eval, batch, pos, 2]
    keys = k[:, :, :-1].reshape(k.shape[0], -1, 2)[:, :max_keys]
    for n in range(keys.shape[1]):
        ax.plot(keys[:, n, 0], keys[:, n, 1], color="tab:orange", alpha=0.25, lw=0.8)
    ax.scatter(keys[-1, :, 0], keys[-1, :, 1], color="tab:orange", s=10, label="keys")
    values = np.asarray(color_by if color_by is not None else np.zeros(q.shape[1]), dtype=float)
    span = values.max() - values.min() if values.size else 0.0
    shades = plt.cm.Blues(0.35 + 0.65 * (values - values.min()) / (span if span else 1.0))
    for n in range(q.shape[1]):
        ax.plot(q[:, n, 0], q[:, n, 1], color=shades[n], alpha=0.6, lw=0.8)
    ax.scatter(q[-1, :, 0], q[-1, :, 1], c=shades, s=14, label="queries")
    ax.axhline(0, color="gray", lw=0.5)
    ax.axvline(0, color="gray", lw=0.5)
    ax.set_aspect("equal", adjustable="datalim")
    ax.set_title(f"q/k on the plane of frequency id {traj.freq}, steps "
                 f"{traj.steps[0]}–{traj.steps[-1]}", fontsize="medium")
    ax.legend(fontsize="small")
    return ax
