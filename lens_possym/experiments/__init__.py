"""Experiments and statistics built on the hook primitives of :mod:`lens_possym.interventions`.

* :func:`band_sweep` (every frequency band of every head, :mod:`.sweep`) and
  :func:`compare_with_random_heads` (:mod:`.compare`), configured by frozen
  :class:`BandSweepConfig` / :class:`HeadSetConfig` objects stored in their results;
* patching grids: :func:`patch_grid` and the batched :func:`generic_patch_grid` with its
  named partials (:mod:`.grid`; :class:`PatchGridConfig`, :class:`PatchingGrid` in
  :mod:`.grid_data`; passes that skip what a patch cannot change in :mod:`._passes`);
* per-head importance: :func:`head_importance` (:mod:`.importance`);
* metrics on a task's prompts (:mod:`.metrics`) and every effect's standard error and
  bootstrap interval over prompts (:mod:`.uncertainty`).

Each runs the model under the primitives' hooks (which it attaches and always removes).
Their names are served from :mod:`lens_possym.interventions` as well. See
``docs/interventions.md``, ``docs/patching.md`` and ``docs/head_importance.md``.
"""

from .._lazy import lazy_attributes

# imported on first use (lens_possym._lazy)
_EXPORTS = {
    "metrics": ["Metric", "binding_metrics"],
    "sweep": ["BandSweepConfig", "BandSweep", "band_sweep", "resolve_bands"],
    "compare": ["HeadSetConfig", "HeadSetComparison", "compare_with_random_heads"],
    "importance": ["ImportanceConfig", "ImportanceBatch", "HeadImportance", "head_importance"],
    "grid_data": ["PATCH_SITES", "PatchGridConfig", "PatchingGrid"],
    "grid": ["generic_patch_grid", "patch_grid", "patch_head_out_all_pos",
             "patch_head_out_by_pos", "patch_resid_pre", "patch_attn_out", "patch_mlp_out",
             "patch_resid_pre_all_pos", "patch_attn_out_all_pos", "patch_mlp_out_all_pos",
             "patch_frequencies_grid"],
    "uncertainty": ["Uncertainty", "standard_error", "bootstrap_interval", "uncertainty"],
}
__getattr__, __dir__ = lazy_attributes(__name__, _EXPORTS)

__all__ = [name for names in _EXPORTS.values() for name in names]
