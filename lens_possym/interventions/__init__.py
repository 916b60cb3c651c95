"""Interventions as TransformerLens hook functions: take frequencies away, patch, permute.

Every intervention ``OP`` has three entry points, named one way:

* ``OP_hook(...)``: one hook function ``fn(tensor, hook)`` for one hook point;
* ``OP_hooks(model, ...)``: ``[(hook name, fn)]`` for ``model.hooks(fwd_hooks=...)``,
  ``run_with_hooks`` and ``transformer_lens.patching``;
* ``OP(model, ...)``: a context manager that attaches them for a ``with`` block and always
  removes them.

The operations: ``ablate_frequencies`` (zero, mean, unrotate; :mod:`.frequency`, with
:class:`FrequencyGate` for soft masks), ``patch_heads`` and ``patch_frequencies``
(:mod:`.patching`), ``permute_content`` (:mod:`.permute`). An :class:`Intervention` is
any of them as data (:mod:`.spec`: printable, JSON round trip, replayable); head ablations
are :mod:`.heads`. Targets are written in one grammar (:mod:`.selection`).

This package holds the hook primitives. The experiments and statistics built on them
(band sweeps, random-head comparisons, patching grids, head importance, metrics,
uncertainty) are :mod:`lens_possym.experiments`; their names are served here too (as
``docs/interventions.md``, ``docs/patching.md`` and ``docs/head_importance.md`` import
them), imported on first use from there.
"""

from .._lazy import lazy_attributes

# imported on first use (lens_possym._lazy), so importing a light submodule of this
# package (a command line's choices) imports nothing heavy
_EXPORTS = {
    # the hook primitives (this package)
    "selection": ["parse_heads", "parse_freqs", "parse_selection", "band_partition",
                  "BAND_NAMES"],
    "modes": ["MODES", "AblationMode", "Side"],
    "frequency": ["ablate_frequencies_hook", "ablate_frequencies_hooks", "ablate_frequencies",
                  "FrequencyMeans", "frequency_means", "FrequencyGate", "FrequencyGates"],
    "patching": ["source_activations", "patch_heads_hook", "patch_heads_hooks", "patch_heads",
                 "patch_frequencies_hook", "patch_frequencies_hooks", "patch_frequencies",
                 "frequency_patch_setter", "frequency_index_df", "qk_activation_name"],
    "permute": ["swap_permutation", "permute_content_hook", "permute_content_hooks",
                "permute_content"],
    "spec": ["Intervention", "InterventionSpec"],
    "heads": ["ablate_heads_hook", "ablate_heads_hooks", "ablate_heads", "HeadMeans",
              "head_means"],
    # the experiments built on them (lens_possym.experiments), served here as the docs
    # import them; lens_possym.experiments is where they live
    "..experiments": ["Metric", "binding_metrics", "BandSweepConfig", "BandSweep", "band_sweep",
                      "resolve_bands", "HeadSetConfig", "HeadSetComparison",
                      "compare_with_random_heads", "ImportanceConfig", "ImportanceBatch",
                      "HeadImportance", "head_importance", "PATCH_SITES", "PatchGridConfig",
                      "PatchingGrid", "generic_patch_grid", "patch_grid",
                      "patch_head_out_all_pos", "patch_head_out_by_pos", "patch_resid_pre",
                      "patch_attn_out", "patch_mlp_out", "patch_resid_pre_all_pos",
                      "patch_attn_out_all_pos", "patch_mlp_out_all_pos",
                      "patch_frequencies_grid", "Uncertainty", "standard_error",
                      "bootstrap_interval", "uncertainty"],
}
__getattr__, __dir__ = lazy_attributes(__name__, _EXPORTS)

__all__ = [name for names in _EXPORTS.values() for name in names]
