"""Self-contained HTML reports: one builder, one report per kind of result.

:class:`Report` builds a page (sections, explained key/value tables, tables, PNGs,
interactive plotly figures with their JavaScript inlined once, a glossary) and saves it as
one file that opens with no network. Every command that writes results writes its
``report.html`` with it:

* :func:`profile_report`: ``lens-possym profile`` (scores, explorer, frequency atlas);
  :func:`render_profile_report` renders it from saved results (the scores and their
  :class:`ProfileDetails`) with no model;
* :func:`ablation_report`, :func:`band_sweep_report`: ``lens-possym ablate``;
* :func:`train_report`: ``lens-possym train`` (a
  new kind of result, e.g. paper B and C experiments, adds one function that fills a
  :class:`Report`).
"""

from .._lazy import lazy_attributes

# imported on first use (lens_possym._lazy): a report imports matplotlib, plotly and the
# figures, which a command's --help need not pay
_EXPORTS = {
    "..viz.attention": ["attention_view_html"],
    "builder": ["Report", "format_value"],
    "glossary": ["TERMS", "describe"],
    "interventions": ["ablation_report", "band_sweep_report", "head_importance_report"],
    "profile": ["ProfileDetails", "profile_details", "profile_report", "render_profile_report",
        "save_profile_figures", "write_report"],
    "training": ["train_report"],
}
__getattr__, __dir__ = lazy_attributes(__name__, _EXPORTS)

__all__ = [name for names in _EXPORTS.values() for name in names]
