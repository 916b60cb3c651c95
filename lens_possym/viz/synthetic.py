"""Figures of synthetic experiments (:mod:`lens_possym.synthetic`): accuracy against
frequency, by answer position, w_max, training curves and q/k trajectories on a rotation
plane."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Sequence

import numpy as np
import torch

from ._axes import angle_label, axes_or_new, to_numpy

if TYPE_CHECKING:
    from matplotlib.axes import Axes

__all__ = [
    "plot_accuracy_vs_freq",
    "plot_accuracy_by_position",
    "plot_w_max",
    "plot_training_curves",
    "plot_qk_trajectory",
    "plot_scores_vs_freq",
    "save_sweep_figures",
]


def _axes(ax, figsize=(6.5, 3.5)):
    return axes_or_new(ax, figsize)


def _varying_id(sweep) -> list[int]:
    """The id that changes across the sweep's sets (the last one of each set)."""
    return [s[-1] for s in sweep.freq_sets]


def _x_axis(ax, sweep, xs: list[int]) -> None:
    sets = sweep.freq_sets
    fixed = sorted({f for s in sets for f in s[:-1]})
    label = "frequency id (0 = fastest rotation)"
    if fixed:
        label = f"second frequency id (with id{'s' if len(fixed) > 1 else ''} " \
                f"{', '.join(map(str, fixed))})"
    ax.set_xlabel(label)
    ax.set_xticks(xs)
    top = ax.secondary_xaxis("top")
    chosen = xs if len(xs) <= 9 else xs[:: max(1, len(xs) // 6)]
    top.set_xticks(chosen)
    top.set_xticklabels([angle_label(sweep.angles[x]) for x in chosen], fontsize="small")
    top.set_xlabel("θ (rad/token)")


def plot_accuracy_vs_freq(sweep, *, ax=None, label: str | None = None, chance: float | None = None,
                          **line_kwargs) -> "Axes":
    """Test accuracy against frequency id (angle on top): mean line, one dot per seed."""
    ax = _axes(ax)
    xs = _varying_id(sweep)
    acc = to_numpy(sweep.accuracy())
    order = np.argsort(xs)
    xs_sorted = np.array(xs)[order]
    ax.plot(xs_sorted, np.nanmean(acc, axis=1)[order], marker="o",
            label=label or sweep.task, **line_kwargs)
    if acc.shape[1] > 1:
        for col in range(acc.shape[1]):
            ax.scatter(xs_sorted, acc[order, col], s=10, alpha=0.5, color="gray")
    if chance is not None:
        ax.axhline(chance, color="gray", lw=0.8, ls=":")
    ax.set_ylim(-0.02, 1.02)
    ax.set_ylabel("test accuracy")
    if not getattr(ax, "_lens_possym_task_axis", False):
        _x_axis(ax, sweep, sorted(xs))
        ax._lens_possym_task_axis = True
    ax.legend(fontsize="small")
    return ax


def plot_accuracy_by_position(sweep, *, ids: Sequence[int] | None = None, ax=None) -> "Axes":
    """Accuracy by answer position, one curve per frequency set (mean over seeds).

    ``ids`` picks sets by their varying id (all by default).
    """
    import matplotlib.pyplot as plt

    ax = _axes(ax)
    by_pos = to_numpy(sweep.accuracy_by_position())  # [set, seed, pos]
    xs = _varying_id(sweep)
    chosen = [i for i, x in enumerate(xs) if ids is None or x in ids]
    colors = plt.cm.viridis(np.linspace(0, 1, max(len(chosen), 2)))
    for color, i in zip(colors, chosen):
        s = sweep.freq_sets[i]
        theta = ", ".join(angle_label(sweep.angles[f]) for f in s)
        ax.plot(sweep.answer_positions, np.nanmean(by_pos[i], axis=0), marker=".", color=color,
                label=f"id {'+'.join(map(str, s))} (θ={theta})")
    ax.set_xlabel("answer position")
    ax.set_ylabel("test accuracy")
    ax.set_ylim(-0.02, 1.02)
    ax.set_title(f"{sweep.task}: accuracy by answer position", fontsize="medium")
    ax.legend(fontsize="x-small", ncol=1 if len(chosen) <= 9 else 2, loc="center left",
              bbox_to_anchor=(1.01, 0.5))
    return ax


def plot_w_max(w_max, positions: Sequence[int] | None = None, *, ax=None, label: str | None = None,
               **line_kwargs) -> "Axes":
    """``w_max(j)`` along the answer position (Theorem 7)."""
    ax = _axes(ax)
    w = to_numpy(torch.as_tensor(w_max, dtype=torch.float64))
    xs = np.arange(len(w)) if positions is None else np.asarray(positions)
    ax.plot(xs, w, marker="o", label=label, **line_kwargs)
    ax.set_xlabel("answer position j")
    ax.set_ylabel("w_max(j)")
    if label:
        ax.legend(fontsize="small")
    return ax


def plot_training_curves(results, *, ax=None, labels: Sequence[str] | None = None) -> "Axes":
    """Test accuracy against step for one or more :class:`~lens_possym.synthetic.training.TrainResult`."""
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


def plot_scores_vs_freq(sweep, *, ax=None) -> "Axes":
    """Positional and symbolic scores of the trained heads against frequency id."""
    ax = _axes(ax)
    xs = np.array(_varying_id(sweep))
    order = np.argsort(xs)
    pos, sym = (to_numpy(t) for t in sweep.scores())
    ax.plot(xs[order], np.nanmean(pos, axis=1)[order], marker="o", color="tab:red", label="s_POS")
    ax.plot(xs[order], np.nanmean(sym, axis=1)[order], marker="s", color="tab:green",
            label="s_SYM")
    ax.set_ylabel("score of the trained head")
    if not getattr(ax, "_lens_possym_task_axis", False):
        _x_axis(ax, sweep, sorted(xs.tolist()))
        ax._lens_possym_task_axis = True
    ax.legend(fontsize="small")
    return ax


def save_sweep_figures(sweep, out_dir: str | Path) -> list[Path]:
    """Write ``accuracy_vs_freq.png``, ``accuracy_by_position.png`` (and
    ``scores_vs_freq.png`` when scores exist) to ``out_dir``; return the paths."""
    import matplotlib.pyplot as plt

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = []

    def save(name: str, plot, figsize: tuple[float, float], title: str | None = None) -> None:
        fig, ax = plt.subplots(figsize=figsize, constrained_layout=True)
        plot(sweep, ax=ax)
        if title is not None:
            ax.set_title(f"{sweep.task}: {title}", fontsize="medium")
        paths.append(out / name)
        fig.savefig(paths[-1], dpi=120)
        plt.close(fig)

    save("accuracy_vs_freq.png", plot_accuracy_vs_freq, (6.5, 3.8), "test accuracy by frequency")
    save("accuracy_by_position.png", plot_accuracy_by_position, (9, 4))
    pos, _ = sweep.scores()
    if bool(torch.isfinite(pos).any()):
        save("scores_vs_freq.png", plot_scores_vs_freq, (6.5, 3.8), "scores of the trained heads")
    return paths
