"""Figures (matplotlib) and attention views (circuitsvis), grouped by what they show.

Every function takes an optional ``ax`` to draw into and returns the ``Axes`` (or
``Figure``) it drew, so figures compose in notebooks and can be saved by the caller.
"""

from .interventions import plot_ablation_comparison, plot_band_sweep
from .frequency import (
    frequency_axis,
    plot_frequency_profile,
    plot_logit_norms,
    plot_usage,
    plot_usage_heatmap,
)

__all__ = [
    "frequency_axis",
    "plot_frequency_profile",
    "plot_logit_norms",
    "plot_usage",
    "plot_usage_heatmap",
    "plot_band_sweep",
    "plot_ablation_comparison",
]
