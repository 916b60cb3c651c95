"""Paper A's figures: accuracy of the frequency sweeps against frequency id and by answer
position, the trained heads' scores against frequency id, and ``w_max`` (Theorem 7)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Sequence

import numpy as np
import torch

from ...plugins import angle_label, axes_or_new, to_numpy

if TYPE_CHECKING:
    from matplotlib.axes import Axes

__all__ = [
    "plot_accuracy_vs_freq",
    "plot_accuracy_by_position",
    "plot_w_max",
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
