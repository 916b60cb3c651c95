"""Figures (matplotlib), interactive figures (plotly) and attention views (circuitsvis).

Every matplotlib function takes an optional ``ax`` to draw into and returns the ``Axes``
(or ``Figure``) it drew, so figures compose in notebooks and can be saved by the caller.
The plotly functions (``*_figure``, :mod:`lens_possym.viz.interactive`) return a
``plotly.graph_objects.Figure``; :func:`attention_view_html` returns a circuitsvis view
with its JavaScript inlined.
"""

from .._lazy import lazy_attributes

# imported on first use (lens_possym._lazy): importing a figure's module imports matplotlib,
# plotly or circuitsvis, which a command's --help or a report of saved results need not pay
_EXPORTS = {
    "atlas": ["ATLAS_VIEWS", "atlas_values", "logit_share", "plot_frequency_atlas"],
    "attention": ["attention_view_html"],
    "circuits": ["plot_circuit"],
    "frequency": ["frequency_axis", "frequency_axes", "plot_frequency_profile", "plot_logit_norms", "plot_usage",
        "plot_usage_heatmap"],
    "interactive": ["atlas_figure", "frequency_profile_figure", "heatmaps_figure", "plane_figure",
        "swap_attention_figure"],
    "interventions": ["plot_ablation_comparison", "plot_band_sweep"],
    "patching": ["plot_effects", "plot_patching_grid", "plot_patching_top"],
    "scores": ["pick_example_heads", "plot_frequency_plane", "plot_frequency_scores", "plot_plane",
        "plot_score_heatmaps", "plot_swap_attention", "top_swap_attention"],
    "schemes": ["plot_toeplitz_terms"],
    "training": ["plot_qk_trajectory", "plot_training_curves"],
}
__getattr__, __dir__ = lazy_attributes(__name__, _EXPORTS)

__all__ = [name for names in _EXPORTS.values() for name in names]
