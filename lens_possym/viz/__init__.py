"""Figures (matplotlib) and attention views (circuitsvis), grouped by what they show.

Every function takes an optional ``ax`` to draw into and returns the ``Axes`` (or
``Figure``) it drew, so figures compose in notebooks and can be saved by the caller.
"""

from .frequency import (
    frequency_axis,
    plot_frequency_profile,
    plot_logit_norms,
    plot_usage,
    plot_usage_heatmap,
)
from .interventions import plot_ablation_comparison, plot_band_sweep
from .scores import (
    pick_example_heads,
    plot_frequency_plane,
    plot_frequency_scores,
    plot_plane,
    plot_score_heatmaps,
    plot_swap_attention,
)
from .schemes import plot_toeplitz_terms
from .synthetic import (
    plot_accuracy_by_position,
    plot_accuracy_vs_freq,
    plot_qk_trajectory,
    plot_scores_vs_freq,
    plot_training_curves,
    plot_w_max,
    save_sweep_figures,
)

__all__ = [
    "plot_toeplitz_terms",
    "frequency_axis",
    "plot_frequency_profile",
    "plot_logit_norms",
    "plot_usage",
    "plot_usage_heatmap",
    "plot_plane",
    "plot_score_heatmaps",
    "plot_frequency_scores",
    "plot_frequency_plane",
    "plot_swap_attention",
    "pick_example_heads",
    "plot_band_sweep",
    "plot_ablation_comparison",
    # synthetic experiments: canonical tasks, toy models, training
    "plot_accuracy_vs_freq",
    "plot_accuracy_by_position",
    "plot_w_max",
    "plot_training_curves",
    "plot_qk_trajectory",
    "plot_scores_vs_freq",
    "save_sweep_figures",
]
