"""Interventions as TransformerLens hook functions: take frequencies away, patch, permute.

Every factory returns hook functions ``fn(tensor, hook) -> tensor`` (or lists of
``(hook name, fn)``) that drop into ``model.hooks(fwd_hooks=...)``, ``run_with_hooks`` and
``transformer_lens.patching``; the context managers attach them for the duration of a
``with`` block and always remove them. See ``docs/interventions.md``.

* frequency ablation (``zero``, ``mean``, ``unrotate``) and gates: :mod:`.frequency`;
* head and per-frequency patching: :mod:`.patching`;
* key-content permutations (the scores' swaps): :mod:`.permute`;
* band sweeps over every head: :mod:`.sweep`; a head set against random ones: :mod:`.compare`.
"""

from ._select import BAND_NAMES, band_partition, parse_freqs, parse_heads, parse_selection
from .frequency import (
    MODES,
    FrequencyGate,
    FrequencyGates,
    FrequencyMeans,
    ablate_frequencies,
    ablate_frequencies_hook,
    frequency_ablation_hooks,
    frequency_means,
)
from .patching import (
    frequency_index_df,
    frequency_patch_hooks,
    frequency_patch_setter,
    head_patch_hooks,
    patch_frequencies,
    patch_frequencies_hook,
    patch_heads,
    patch_heads_hook,
    qk_activation_name,
    source_activations,
)
from .permute import content_permutation_hooks, permute_content, permute_rows_hook, swap_permutation
from .sweep import BandSweep, band_sweep, binding_metrics, resolve_bands
from .compare import HeadSetComparison, compare_with_random_heads
from .heads import HeadMeans, ablate_heads, ablate_heads_hook, ablate_heads_hooks, head_means
from .importance import HeadImportance, ImportanceBatch, ImportanceConfig, head_importance

__all__ = [
    # selection
    "parse_heads",
    "parse_freqs",
    "parse_selection",
    "band_partition",
    "BAND_NAMES",
    # frequency ablation and gates
    "MODES",
    "ablate_frequencies_hook",
    "frequency_ablation_hooks",
    "ablate_frequencies",
    "FrequencyMeans",
    "frequency_means",
    "FrequencyGate",
    "FrequencyGates",
    # patching
    "source_activations",
    "patch_heads_hook",
    "head_patch_hooks",
    "patch_heads",
    "patch_frequencies_hook",
    "frequency_patch_hooks",
    "patch_frequencies",
    "frequency_patch_setter",
    "frequency_index_df",
    "qk_activation_name",
    # permutations
    "swap_permutation",
    "permute_rows_hook",
    "content_permutation_hooks",
    "permute_content",
    # sweeps
    "BandSweep",
    "band_sweep",
    "binding_metrics",
    "resolve_bands",
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
]
