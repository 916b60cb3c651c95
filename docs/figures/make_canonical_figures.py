"""Rebuild the figures of docs/canonical_tasks.md from `lens-possym sweep` output folders.

    python docs/figures/make_canonical_figures.py RUNS_DIR

RUNS_DIR holds the folders written by the commands listed in docs/canonical_tasks.md
(index/, retrieval/, pi_single/, pi_pairs/, each with a sweep.json).
"""

from __future__ import annotations

import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from lens_possym.papers import a as paper_a  # noqa: E402
from lens_possym.papers.a.sweeps import FrequencySweep  # noqa: E402

HERE = Path(__file__).parent


def main(runs: Path) -> None:
    load = {name: FrequencySweep.load(runs / name / "sweep.json")
            for name in ("index", "retrieval", "pi_single", "pi_pairs")}
    fig, axes = plt.subplots(1, 2, figsize=(13, 4), constrained_layout=True)
    paper_a.plot_accuracy_vs_freq(load["index"], ax=axes[0], label="Index (positional)",
                              color="tab:red")
    paper_a.plot_accuracy_vs_freq(load["retrieval"], ax=axes[0], label="Retrieval (symbolic)",
                              color="tab:green")
    axes[0].set_title("one 2-D head on one frequency id (2 seeds)", fontsize="medium")
    paper_a.plot_accuracy_vs_freq(load["pi_single"], ax=axes[1], label="single id k",
                              color="tab:gray")
    paper_a.plot_accuracy_vs_freq(load["pi_pairs"], ax=axes[1], label="ids {16 (θ=0), k}",
                              color="tab:blue")
    axes[1].set_xlabel("frequency id k")
    axes[1].set_title("Partial Induction, 16 pairs (2 seeds)", fontsize="medium")
    fig.savefig(HERE / "toy_accuracy_vs_freq.png", dpi=110)
    plt.close(fig)

    fig, axes = plt.subplots(1, 2, figsize=(13, 4), constrained_layout=True)
    paper_a.plot_accuracy_by_position(load["index"], ids=[2, 3, 4, 6, 8, 12], ax=axes[0])
    paper_a.plot_accuracy_by_position(load["retrieval"], ids=[0, 1, 2, 3, 16], ax=axes[1])
    fig.savefig(HERE / "toy_accuracy_by_position.png", dpi=110)
    plt.close(fig)

    fig, axes = plt.subplots(1, 2, figsize=(13, 3.6), constrained_layout=True)
    paper_a.plot_scores_vs_freq(load["index"], ax=axes[0])
    axes[0].set_title("Index: scores of the trained heads", fontsize="medium")
    paper_a.plot_scores_vs_freq(load["retrieval"], ax=axes[1])
    axes[1].set_title("Retrieval: scores of the trained heads", fontsize="medium")
    fig.savefig(HERE / "toy_scores_vs_freq.png", dpi=110)
    plt.close(fig)
    print("wrote", *(p.name for p in sorted(HERE.glob("toy_*.png"))))


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "runs"))
