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
any of them as data (:mod:`.spec`: printable, JSON round trip, replayable). Sweeps:
:func:`band_sweep` (every band of every head, :mod:`.sweep`) and
:func:`compare_with_random_heads` (:mod:`.compare`), configured by frozen
:class:`BandSweepConfig`/:class:`HeadSetConfig` objects stored in their results. Targets
are written in one grammar (:mod:`.selection`). Patching grids: :func:`patch_grid` and
the batched :func:`generic_patch_grid` with its named partials (:mod:`.grid`), every
effect with standard errors and bootstrap intervals over prompts (:mod:`.uncertainty`).
See ``docs/interventions.md`` and ``docs/patching.md``.
"""

from .._lazy import lazy_attributes

# imported on first use (lens_possym._lazy), so importing a light submodule of this
# package (a command line's choices) imports nothing heavy
_EXPORTS = {
    "compare": ["HeadSetComparison", "HeadSetConfig", "compare_with_random_heads"],
    "frequency": ["FrequencyGate", "FrequencyGates", "FrequencyMeans", "ablate_frequencies",
        "ablate_frequencies_hook", "ablate_frequencies_hooks", "frequency_means"],
    "metrics": ["Metric", "binding_metrics"],
    "modes": ["MODES", "AblationMode", "Side"],
    "patching": ["frequency_index_df", "frequency_patch_setter", "patch_frequencies",
        "patch_frequencies_hook", "patch_frequencies_hooks", "patch_heads", "patch_heads_hook",
        "patch_heads_hooks", "qk_activation_name", "source_activations"],
    "permute": ["permute_content", "permute_content_hook", "permute_content_hooks",
        "swap_permutation"],
    "selection": ["BAND_NAMES", "band_partition", "parse_freqs", "parse_heads", "parse_selection"],
    "spec": ["Intervention", "InterventionSpec"],
    "sweep": ["BandSweep", "BandSweepConfig", "band_sweep", "resolve_bands"],
    "heads": ["HeadMeans", "ablate_heads", "ablate_heads_hook", "ablate_heads_hooks",
        "head_means"],
    "importance": ["HeadImportance", "ImportanceBatch", "ImportanceConfig", "head_importance"],
    "grid": ["PATCH_SITES", "PatchGridConfig", "PatchingGrid", "generic_patch_grid",
        "patch_attn_out", "patch_attn_out_all_pos", "patch_frequencies_grid", "patch_grid",
        "patch_head_out_all_pos", "patch_head_out_by_pos", "patch_mlp_out",
        "patch_mlp_out_all_pos", "patch_resid_pre", "patch_resid_pre_all_pos"],
    "uncertainty": ["Uncertainty", "bootstrap_interval", "standard_error", "uncertainty"],
}
__getattr__, __dir__ = lazy_attributes(__name__, _EXPORTS)

__all__ = [
    # selection grammar
    "parse_heads",
    "parse_freqs",
    "parse_selection",
    "band_partition",
    "BAND_NAMES",
    # ablation modes
    "MODES",
    "AblationMode",
    "Side",
    # ablate_frequencies, and gates
    "ablate_frequencies_hook",
    "ablate_frequencies_hooks",
    "ablate_frequencies",
    "FrequencyMeans",
    "frequency_means",
    "FrequencyGate",
    "FrequencyGates",
    # patch_heads, patch_frequencies
    "source_activations",
    "patch_heads_hook",
    "patch_heads_hooks",
    "patch_heads",
    "patch_frequencies_hook",
    "patch_frequencies_hooks",
    "patch_frequencies",
    "frequency_patch_setter",
    "frequency_index_df",
    "qk_activation_name",
    # permute_content
    "swap_permutation",
    "permute_content_hook",
    "permute_content_hooks",
    "permute_content",
    # interventions as data
    "Intervention",
    "InterventionSpec",
    # sweeps
    "Metric",
    "binding_metrics",
    "BandSweepConfig",
    "BandSweep",
    "band_sweep",
    "resolve_bands",
    "HeadSetConfig",
    "HeadSetComparison",
    "compare_with_random_heads",
    # head ablation and per-head importance
    "ablate_heads_hook",
    "ablate_heads_hooks",
    "ablate_heads",
    "HeadMeans",
    "head_means",
    "ImportanceConfig",
    "ImportanceBatch",
    "HeadImportance",
    "head_importance",
    # patching grids (batched generic_activation_patch) and uncertainty over prompts
    "PATCH_SITES",
    "PatchGridConfig",
    "PatchingGrid",
    "generic_patch_grid",
    "patch_grid",
    "patch_head_out_all_pos",
    "patch_head_out_by_pos",
    "patch_resid_pre",
    "patch_attn_out",
    "patch_mlp_out",
    "patch_resid_pre_all_pos",
    "patch_attn_out_all_pos",
    "patch_mlp_out_all_pos",
    "patch_frequencies_grid",
    "Uncertainty",
    "standard_error",
    "bootstrap_interval",
    "uncertainty",
]
