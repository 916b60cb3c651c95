"""Positional and symbolic scores of attention heads (paper A), per head and per frequency.

* :func:`swap_scores` scores every head of a model: ``PosSymScores`` with ``pos``/``sym``
  ``[n_layers, n_heads]`` and ``pos_freq``/``sym_freq`` ``[n_layers, n_heads, n_freqs]``,
  computed as a frozen :class:`ScoreConfig` says (stored in the result);
* :mod:`.crosslogits`: the cross-logit matrix ``C[p, c]`` everything is computed from;
* :mod:`.engine`: the one score engine every entry point runs: per layer, its
  cross-logits through one protocol (:mod:`.sources`: RoPE's factors, any other scheme's
  matrix, :mod:`.matrix`), then the closed form or the re-run, then the exclusion;
  :mod:`.layer` assembles the layers' scores into the result;
* :mod:`.swaps`: which swaps, and the weighted cosines (torch's clamped cosine, as paper C,
  or scale-free); :mod:`.exact` (closed form from RoPE's factors, its per-frequency
  kernel) and :mod:`.rerun` (re-run the block per swap: the reference);
* :mod:`.exclusion`: Theorem 1's deviations, variance and bound, exactly.
"""

from .._lazy import lazy_attributes

# imported on first use (lens_possym._lazy), so importing a light submodule of this
# package (a command line's choices) imports nothing heavy
_EXPORTS = {
    "config": ["ScoreConfig"],
    "dataset": ["DatasetProfile", "Moments", "dataset_profile", "read_prompts"],
    "crosslogits": ["CrossLogitFactors", "cross_logit_factors"],
    "exact": ["SwapScores", "exact_swap_scores"],
    "guards": ["declare_hook"],
    "exclusion": ["Exclusion", "exclusion_by_enumeration", "exclusion_from_factors",
        "exclusion_from_matrix"],
    "layer": ["LayerScores"],
    "matrix": ["CrossLogitMatrix"],
    "profile": ["swap_scores"],
    "rerun": ["rerun_swap_scores"],
    "results": ["PosSymScores", "pearson_r"],
    "swaps": ["Cosine", "SwapSet", "clamped_cosines", "swap_cosines", "swap_set"],
}
__getattr__, __dir__ = lazy_attributes(__name__, _EXPORTS)

__all__ = [name for names in _EXPORTS.values() for name in names]
