"""What memory :func:`~lens_possym.scores.swap_scores` may hold for one layer, by its settings.

The exact method's memory above the loaded model has three parts:

* **bounded by the settings**: the whole-head cross-logit matrix, or its pieces
  (``ScoreConfig.max_matrix_elements``), and the intermediates of the swaps, the
  per-frequency loop and the exclusion, each cut into chunks of at most
  ``ScoreConfig.max_elements`` numbers, of which at most :data:`LIVE_INTERMEDIATES` are
  alive at once;
* **not bounded by the settings** (documented, :data:`FACTOR_TABLES`): the cross-logit
  factors themselves, ``x`` and ``y`` (``[batch, heads, pos, freq]`` each), their stacked
  copy for matrix products, and the decomposition check's terms: ``O(batch · heads · pos ·
  freq)``, 17 MB each for gemma-3-270m at n = 4096 (4 heads, 129 ids, float64);
* **the forward pass's own**: the capture runs the model up to the layer, with the
  model's own attention (``[batch, heads, pos, pos]`` scores and pattern per layer:
  256 MB each at n = 4096), freed before scoring starts.

:func:`memory_bound` adds up the first two; ``benchmarks/bench_memory.py`` measures the
peak against it (docs/scores.md, "Memory").
"""

from __future__ import annotations

from .config import ScoreConfig

__all__ = ["memory_bound", "LIVE_INTERMEDIATES", "FACTOR_TABLES"]

#: most intermediates of ``max_elements`` numbers alive at once (the per-frequency loop's
#: tables: logits, attention, two scaled exponentials, the factor rows and their chunks)
LIVE_INTERMEDIATES = 16
#: ``[batch, heads, pos, freq]`` tables held for the whole layer (x, y, their stack, the
#: decomposition check's terms)
FACTOR_TABLES = 6


def memory_bound(config: ScoreConfig, *, batch: int, heads: int, n_pos: int, n_freqs: int
                 ) -> dict[str, int]:
    """Bytes the exact method may hold for one layer above the model and the forward pass.

    Returns ``{"settings": ..., "factors": ..., "total": ...}``: what the settings bound
    (``max_matrix_elements`` + :data:`LIVE_INTERMEDIATES` × ``max_elements``, but never more
    than the whole matrix needs) and what they do not (:data:`FACTOR_TABLES` factor tables).
    """
    item = 8 if config.dtype == "float64" else 4
    matrix = min(config.max_matrix_elements, batch * heads * n_pos * n_pos)
    settings = item * (matrix + LIVE_INTERMEDIATES * config.max_elements)
    factors = item * FACTOR_TABLES * batch * heads * n_pos * n_freqs
    return {"settings": settings, "factors": factors, "total": settings + factors}
