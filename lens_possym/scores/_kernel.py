r"""A compiled CPU loop for the per-frequency token-swap scores (the hot path of a profile).

The per-frequency token-swap scores of a layer touch ``heads × freqs × n²/2`` swaps. In
plain tensor code each swap costs some forty passes over memory; this loop (numba,
parallel over head-frequency pairs) keeps everything in registers and needs one
exponential and one square root per swap. It computes what
:func:`.exact.exact_swap_scores` computes with tensors (the tests hold the two to 1e-12),
in float64:

* swapped masses, scaled by the larger: ``(A, B) = (e^{C_ij - M}, e^{C_ji - M})`` with
  ``M = max(C_ij, C_ji)``, one of them 1, the other ``e^{-|C_ij - C_ji|}``, and the clean
  masses ``(a_i, a_j)``: ``pos = (A a_i + B a_j) / (|(A, B)| |(a_i, a_j)|)``, ``sym`` alike;
* weights ``exp((|a_i - a_j| - (max a - min a)) / tau)`` (the softmax over swaps, shifted
  by its largest logit), which factor into ``P[high] · Q[low]`` with
  ``P[k] = exp((a_k - max a) / tau)`` and ``Q[k] = exp((min a - a_k) / tau)`` per key, so no
  swap needs an exponential for its weight; a swap whose weight underflows to exactly 0
  is skipped, which changes nothing.
"""

from __future__ import annotations

import math

import numba
import numpy as np

__all__ = ["token_swap_freq_scores"]


@numba.njit(parallel=True, cache=True, error_model="numpy")
def _kernel(cos, sin, x, y, att, keys, scale, inv_tau, pos_out, sym_out):  # pragma: no cover
    n_rows, n_freqs, _ = x.shape
    n_keys = keys.shape[0]
    for row_freq in numba.prange(n_rows * n_freqs):
        g = row_freq // n_freqs
        f = row_freq - g * n_freqs
        mass = np.empty(n_keys)
        for a in range(n_keys):
            mass[a] = att[g, f, keys[a]]
        top, bottom = mass.max(), mass.min()
        # weight of a swap: exp((|a_i - a_j| - (top - bottom)) / tau) = P[high] * Q[low]
        p_high = np.exp((mass - top) * inv_tau)
        q_low = np.exp((bottom - mass) * inv_tau)
        z = 0.0
        pos_sum = 0.0
        sym_sum = 0.0
        for a in range(n_keys):
            i = keys[a]
            ai, ci, si, xi, yi = mass[a], cos[f, i], sin[f, i], x[g, f, i], y[g, f, i]
            for b in range(a + 1, n_keys):
                aj = mass[b]
                w = p_high[a] * q_low[b] if ai >= aj else p_high[b] * q_low[a]
                if w == 0.0:  # underflowed: the swap carries no weight
                    continue
                j = keys[b]
                gap = scale * (cos[f, j] * xi + sin[f, j] * yi - ci * x[g, f, j] - si * y[g, f, j])
                small = math.exp(-abs(gap))                  # gap = C_ji - C_ij
                mass_i, mass_j = (small, 1.0) if gap >= 0 else (1.0, small)
                inv_norm = 1.0 / math.sqrt((mass_i * mass_i + mass_j * mass_j) * (ai * ai + aj * aj))
                z += w
                pos_sum += w * (mass_i * ai + mass_j * aj) * inv_norm
                sym_sum += w * (mass_i * aj + mass_j * ai) * inv_norm
        pos_out[g, f] = pos_sum / z
        sym_out[g, f] = sym_sum / z


def token_swap_freq_scores(cos: np.ndarray, sin: np.ndarray, x: np.ndarray, y: np.ndarray,
                           attention: np.ndarray, keys: np.ndarray, scale: float, tau: float
                           ) -> tuple[np.ndarray, np.ndarray]:
    """``(pos, sym)`` of shape ``[rows, freq]`` for all token swaps among ``keys``.

    Args:
        cos, sin: ``[freq, pos]`` rotation tables.
        x, y: ``[rows, freq, pos]`` content factors (rows = batch × heads).
        attention: ``[rows, freq, pos]`` clean per-frequency attention.
        keys: ``[n_keys]`` positions swapped pairwise (all visible to the query).
        scale, tau: the layer's scale and the weight temperature.
    """
    arrays = [np.ascontiguousarray(a, dtype=np.float64) for a in (cos, sin, x, y, attention)]
    pos = np.empty(x.shape[:2], dtype=np.float64)
    sym = np.empty_like(pos)
    _kernel(*arrays, np.ascontiguousarray(keys, dtype=np.int64), float(scale), 1.0 / tau, pos, sym)
    return pos, sym
