"""Positional and symbolic scores of attention heads (paper A), per head and per frequency.

* :func:`swap_scores` scores every head of a model: ``PosSymScores`` with ``pos``/``sym``
  ``[n_layers, n_heads]`` and ``pos_freq``/``sym_freq`` ``[n_layers, n_heads, n_freqs]``,
  computed as a frozen :class:`ScoreConfig` says (stored in the result);
* :mod:`.crosslogits`: the cross-logit matrix ``C[p, c]`` everything is computed from;
* :mod:`.swaps`: which swaps, and the weighted cosines (torch's clamped cosine, as paper C,
  or scale-free); :mod:`.exact` (closed form) and
  :mod:`.rerun` (re-run the block per swap: the reference);
* :mod:`.exclusion`: Theorem 1's deviations, variance and bound, exactly.
"""

from .config import ScoreConfig
from .dataset import DatasetProfile, Moments, dataset_profile, read_prompts
from .crosslogits import CrossLogitFactors, cross_logit_factors
from .exact import SwapScores, exact_swap_scores
from .guards import declare_hook
from .exclusion import Exclusion, exclusion_by_enumeration, exclusion_from_factors, exclusion_from_matrix
from .profile import LayerScores, swap_scores
from .rerun import rerun_swap_scores
from .results import PosSymScores, pearson_r
from .swaps import Cosine, SwapSet, clamped_cosines, swap_cosines, swap_set

__all__ = [
    "declare_hook",
    "swap_scores",
    "ScoreConfig",
    "PosSymScores",
    "LayerScores",
    "pearson_r",
    "CrossLogitFactors",
    "cross_logit_factors",
    "SwapSet",
    "swap_set",
    "swap_cosines",
    "clamped_cosines",
    "Cosine",
    "SwapScores",
    "exact_swap_scores",
    "rerun_swap_scores",
    "Exclusion",
    "exclusion_from_matrix",
    "exclusion_from_factors",
    "exclusion_by_enumeration",
    "dataset_profile",
    "DatasetProfile",
    "Moments",
    "read_prompts",
]
