r"""A compiled CPU loop for the per-frequency token-swap scores (the hot path of a profile).

The per-frequency token-swap scores of a layer touch ``heads × freqs × n²/2`` swaps. In
plain tensor code each swap costs some forty passes over memory; this loop (numba,
parallel over head-frequency pairs) keeps everything in registers and needs one
exponential (inlined, so the loop vectorises) and one square root per swap, and no branch. It computes what
:func:`.exact.exact_swap_scores` computes with tensors (the tests hold the two to 1e-12),
in float64:

* swapped masses, scaled by the larger: ``(A, B) = (e^{C_ij - M}, e^{C_ji - M})`` with
  ``M = max(C_ij, C_ji)``, one of them 1, the other ``e^{-|C_ij - C_ji|}``, and the clean
  masses ``(a_i, a_j)``: ``pos = (A a_i + B a_j) / (|(A, B)| |(a_i, a_j)|)``, ``sym`` alike;
* weights ``exp((|a_i - a_j| - (max a - min a)) / tau)`` (the softmax over swaps, shifted
  by its largest logit), which factor into ``P[high] · Q[low]`` with
  ``P[k] = exp((a_k - max a) / tau)`` and ``Q[k] = exp((min a - a_k) / tau)`` per key, so no
  swap needs an exponential for its weight.
"""

from __future__ import annotations

import math

import numba
import numpy as np

__all__ = ["token_swap_freq_scores"]


# exp(-g) for g >= 0 without a library call, so that the compiler can vectorise the loop:
# g = k ln2 + ln2/2 + t with |t| <= ln2/2 (ln2 split in two for an exact reduction), then
# exp(-g) = 2^-k · 2^-½ · exp(-t) with a degree-14 Taylor polynomial for exp(-t), whose
# truncation error (0.347^15/15! ≈ 1e-19) is far below double rounding: within 2 ulps of
# libm (tested). g is capped at 40: exp(-40) = 4e-18 is the smallest swapped mass kept,
# which moves a cosine by at most that much.
_POW2 = np.array([2.0 ** -k for k in range(60)])
_TAYLOR = np.array([(-1.0) ** i / math.factorial(i) for i in range(15)])


@numba.njit(inline="always")
def _exp_neg(g, pow2, taylor):  # pragma: no cover
    g = min(g, 40.0)
    k = int(g * 1.4426950408889634)                      # floor(g / ln 2)
    t = (g - k * 0.6931471803691238) - k * 1.9082149292705877e-10 - 0.34657359027997264
    p = taylor[14]
    for i in range(13, -1, -1):
        p = p * t + taylor[i]
    return pow2[k] * 0.7071067811865476 * p


@numba.njit
def _exp_neg_array(g):  # pragma: no cover - for the tests
    out = np.empty_like(g)
    for i in range(g.shape[0]):
        out[i] = _exp_neg(g[i], _POW2, _TAYLOR)
    return out


# Reassociation lets the compiler vectorise the three running sums; "contract" fuses
# multiply-adds and "arcp" turns divisions into reciprocal multiplies. Results move by a
# few ulps (the tests hold this loop to the tensor code at 1e-12); no approximate math
# functions and no assumptions about NaN or infinity are allowed.
_FAST = {"contract", "arcp", "reassoc", "nsz"}


@numba.njit(parallel=True, cache=True, error_model="numpy", fastmath=_FAST)
def _kernel(cos, sin, x, y, att, keys, scale, inv_tau, pos_out, sym_out):  # pragma: no cover
    pow2, taylor = _POW2, _TAYLOR
    n_rows, n_freqs, _ = x.shape
    n_keys = keys.shape[0]
    for row_freq in numba.prange(n_rows * n_freqs):
        g = row_freq // n_freqs
        f = row_freq - g * n_freqs
        # this head-frequency's quantities at the keys, contiguous
        mass, ck, sk = np.empty(n_keys), np.empty(n_keys), np.empty(n_keys)
        xk, yk = np.empty(n_keys), np.empty(n_keys)
        for a in range(n_keys):
            k = keys[a]
            mass[a], ck[a], sk[a], xk[a], yk[a] = att[g, f, k], cos[f, k], sin[f, k], x[g, f, k], y[g, f, k]
        top, bottom = mass.max(), mass.min()
        # weight of a swap: exp((|a_i - a_j| - (top - bottom)) / tau) = P[high] * Q[low]
        p_high = np.exp((mass - top) * inv_tau)
        q_low = np.exp((bottom - mass) * inv_tau)
        z = 0.0
        pos_sum = 0.0
        sym_sum = 0.0
        for a in range(n_keys):
            ai, ci, si, xi, yi, pa, qa = mass[a], ck[a], sk[a], xk[a], yk[a], p_high[a], q_low[a]
            ai2 = ai * ai
            for b in range(a + 1, n_keys):
                aj = mass[b]
                w = pa * q_low[b] if ai >= aj else p_high[b] * qa
                # C_ji - C_ij: content i at position j minus content j at position i
                gap = scale * (ck[b] * xi + sk[b] * yi - ci * xk[b] - si * yk[b])
                small = _exp_neg(abs(gap), pow2, taylor)
                mass_i = small if gap >= 0 else 1.0
                mass_j = 1.0 if gap >= 0 else small
                # (both clean masses can only be 0 where the weight is 0 too)
                norms = max((mass_i * mass_i + mass_j * mass_j) * (ai2 + aj * aj), 1e-300)
                weighted = w / math.sqrt(norms)
                z += w
                pos_sum += weighted * (mass_i * ai + mass_j * aj)
                sym_sum += weighted * (mass_i * aj + mass_j * ai)
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
