r"""A compiled CPU loop for the token-swap scores, per frequency and whole-head (hot path).

The per-frequency token-swap scores of a layer touch ``heads × freqs × n²/2`` swaps. In
plain tensor code each swap costs some forty passes over memory; this loop (numba,
parallel over head-frequency pairs) keeps everything in registers and needs one
exponential (inlined, its power of two built from bits, so the loop vectorises: AVX2 does
four swaps at a time) and one square root per swap, and no branch in the loop: rows where
the cosine's clamp can act at all (a bound on the logits decides) run a second copy of the
pair loop that adds a second exponential and a division for the post-swap normaliser
(``benchmarks/bench_kernel.py`` times both). It computes what :func:`.exact.exact_swap_scores` computes with tensors (the
tests hold the two to 1e-12), in float64. The swapped logits ``(C_ij, C_ji)`` come from the
frequency's factors (:func:`token_swap_freq_scores`) or are read from a matrix, the
whole-head ``C`` restricted to the keys (:func:`token_swap_matrix_scores`); the pair loop
is shared (:func:`_pair_sums`, given the logits as a function):

* swapped masses, scaled by the larger: ``(A, B) = (e^{C_ij - M}, e^{C_ji - M})`` with
  ``M = max(C_ij, C_ji)``, one of them 1, the other ``e^{-|C_ij - C_ji|}``, and the clean
  masses ``(a_i, a_j)``;
* the post-swap normaliser in the same units, ``D = A + B + R e^{λ_t - M}``, ``R`` the
  clean mass outside ``{i, j}`` in units of ``e^{λ_t}`` as :class:`.exact.OutsideMass`
  takes it (``W1 - e1_i - e1_j``, ``W2 - e2_other`` or ``W3``: at least 1, so the factor
  matters only where ``λ_t > M`` and is capped below there), so that ``a' = (A, B) / D``;
* torch's clamped cosine ``(a'·a) / (max(|a'|, eps) max(|a|, eps))`` as
  ``pos = (A a_i + B a_j) / sqrt(max(A² + B², (eps D)²) · max(a_i² + a_j², eps²))``, ``sym``
  alike (only this cosine: ``cosine="scale_free"`` runs in the tensor code);
* weights ``exp((|a_i - a_j| - (max a - min a)) / tau)`` (the softmax over swaps, shifted
  by its largest logit), which factor into ``P[high] · Q[low]`` with
  ``P[k] = exp((a_k - max a) / tau)`` and ``Q[k] = exp((min a - a_k) / tau)`` per key, so no
  swap needs an exponential for its weight.
"""

from __future__ import annotations

import math

import numba
import numpy as np
from llvmlite import ir
from numba import types
from numba.extending import intrinsic

from ..errors import InvalidSelectionError

__all__ = ["token_swap_freq_scores", "token_swap_matrix_scores"]


# exp(-g) for g >= 0 without a library call, so that the compiler can vectorise the loop:
# g = k ln2 + ln2/2 + t with |t| <= ln2/2 (ln2 split in two for an exact reduction), then
# exp(-g) = 2^-k · 2^-½ · exp(-t) with a degree-14 Taylor polynomial for exp(-t), whose
# truncation error (0.347^15/15! ≈ 1e-19) is far below double rounding: within 2 ulps of
# libm (tested). The caller caps g: at 40 for a swapped mass (exp(-40) = 4e-18 moves a
# cosine by at most that much), at 700 for the normaliser's factor (beyond, eps·D
# overflows the clamp either way and the cosines are 0).
_TAYLOR = np.array([(-1.0) ** i / math.factorial(i) for i in range(15)])


_GAP_CAP, _NORMALISER_CAP = 40.0, 700.0


@intrinsic
def _pow2_neg(typingctx, k):
    """``2^-k`` for a float ``k`` holding an integer in 0..1022, built from its bits: a
    32-bit conversion and a shift, which AVX2 does four at a time (a table read, or numba's
    int64 conversion, is done one lane at a time and kept the loop 1.7x slower)."""
    def codegen(context, builder, signature, args):
        i64 = ir.IntType(64)
        k64 = builder.sext(builder.fptosi(args[0], ir.IntType(32)), i64)
        bits = builder.shl(builder.sub(ir.Constant(i64, 1023), k64), ir.Constant(i64, 52))
        return builder.bitcast(bits, ir.DoubleType())
    return types.float64(types.float64), codegen


@numba.njit(inline="always")
def _exp_neg(g, taylor, cap):  # pragma: no cover
    g = min(g, cap)
    k = np.floor(g * 1.4426950408889634)                 # floor(g / ln 2), as a float
    t = (g - k * 0.6931471803691238) - k * 1.9082149292705877e-10 - 0.34657359027997264
    p = taylor[14]
    for i in range(13, -1, -1):
        p = p * t + taylor[i]
    return _pow2_neg(k) * 0.7071067811865476 * p


@numba.njit
def _exp_neg_array(g, cap=_GAP_CAP):  # pragma: no cover - for the tests
    out = np.empty_like(g)
    for i in range(g.shape[0]):
        out[i] = _exp_neg(g[i], _TAYLOR, cap)
    return out


# Reassociation lets the compiler vectorise the three running sums; "contract" fuses
# multiply-adds and "arcp" turns divisions into reciprocal multiplies. Results move by a
# few ulps (the tests hold this loop to the tensor code at 1e-12); no approximate math
# functions and no assumptions about NaN or infinity are allowed.
_FAST = {"contract", "arcp", "reassoc", "nsz"}


@numba.njit(inline="always")
def _factor_logits(src, a, b):  # pragma: no cover
    """``(c_ij, c_ji)`` of one frequency from its factors: ``src = (cos, sin, x, y, scale)``
    at the keys, ``c_ij = scale (cos_i x_j + sin_i y_j)`` (content ``j`` at position ``i``)."""
    ck, sk, xk, yk, scale = src
    return scale * (ck[a] * xk[b] + sk[a] * yk[b]), scale * (ck[b] * xk[a] + sk[b] * yk[a])


@numba.njit(inline="always")
def _matrix_logits(src, a, b):  # pragma: no cover
    """``(c_ij, c_ji)`` read from a matrix: ``src = (C, C^T, offset)``, the keys' block of
    ``C`` at ``C[offset:, offset:]`` (rows: position, columns: content) and its transpose
    ``[n_keys, n_keys]``, both contiguous along ``b``."""
    c, c_t, offset = src
    return c[offset + a, offset + b], c_t[a, b]


@numba.njit(inline="always", fastmath=_FAST, error_model="numpy")
def _pair_sums(normalise, logits, src, mass, e1k, e2k, p_high, q_low, lam1, lam2, lam3,
               w1, w2, w3, t1, t2, eps, eps2, taylor):  # pragma: no cover
    """``(z, pos_sum, sym_sum)`` over the swaps of one row (:func:`_kernel`'s pair loop);
    ``normalise``, a literal at each call, adds the post-swap normaliser; ``logits(src, a,
    b)`` gives the swapped logits ``(c_ij, c_ji)`` (:func:`_factor_logits` or
    :func:`_matrix_logits`: both branch-free, so the loop vectorises either way)."""
    n_keys = mass.shape[0]
    z = 0.0
    pos_sum = 0.0
    sym_sum = 0.0
    for a in range(n_keys):
        ai, pa, qa = mass[a], p_high[a], q_low[a]
        ai2 = ai * ai
        # mass outside {a, b} in units of e^lam (see OutsideMass): with a the top term,
        # W2 - e2_b; else W1 - e1_a - e1_b, or W2 - e2_a if b is the top term
        a_top = a == t1
        base = w2 if a_top else w1 - e1k[a]
        lam_a = lam2 if a_top else lam1
        partner = t2 if a_top else (t1 if a == t2 else -1)
        rest_top = w2 - e2k[a]
        for b in range(a + 1, n_keys):
            aj = mass[b]
            w = pa * q_low[b] if ai >= aj else p_high[b] * qa
            c_ij, c_ji = logits(src, a, b)      # content j at position i, i at position j
            gap = c_ji - c_ij
            small = _exp_neg(abs(gap), taylor, _GAP_CAP)
            mass_i = small if gap >= 0 else 1.0
            mass_j = 1.0 if gap >= 0 else small
            after = 0.0
            if normalise:
                rest = base - (e2k[b] if a_top else e1k[b])
                lam = lam_a
                rest = rest_top if b == t1 else rest
                lam = lam2 if b == t1 else lam
                rest = w3 if b == partner else rest
                lam = lam3 if b == partner else lam
                # e^{lam - M}, >= 1 where the clamp can act (below 1 it cannot: rest <= n)
                grow = 1.0 / _exp_neg(max(lam - max(c_ij, c_ji), 0.0), taylor,
                                      _NORMALISER_CAP)
                after = eps * (mass_i + mass_j + max(rest, 0.0) * grow)
            norms = (max(mass_i * mass_i + mass_j * mass_j, after * after)
                     * max(ai2 + aj * aj, eps2))
            weighted = w / math.sqrt(norms)
            z += w
            pos_sum += weighted * (mass_i * ai + mass_j * aj)
            sym_sum += weighted * (mass_i * aj + mass_j * ai)
    return z, pos_sum, sym_sum


@numba.njit(inline="always", fastmath=_FAST, error_model="numpy")
def _row_scores(logits, src, reach, mass, e1k, e2k, log_units, sums, t1, t2, n_pos, inv_tau,
                eps, taylor):  # pragma: no cover
    """``(pos, sym)`` of one row from its clean quantities at the keys (``mass, e1k, e2k``
    ``[n_keys]``, ``log_units, sums`` ``[3]``, ``t1, t2``) and its swapped logits
    (``logits(src, a, b)``); ``reach`` bounds ``-M`` (the larger swapped logit) from above
    with some room for rounding, which decides whether the normaliser's pair loop runs."""
    top_mass, bottom = mass.max(), mass.min()
    # weight of a swap: exp((|a_i - a_j| - (top - bottom)) / tau) = P[high] * Q[low]
    p_high = np.exp((mass - top_mass) * inv_tau)
    q_low = np.exp((bottom - mass) * inv_tau)
    lam1, lam2, lam3 = log_units[0], log_units[1], log_units[2]
    w1, w2, w3 = sums[0], sums[1], sums[2]
    # The clamp on a' acts only if eps·D > |(A, B)| >= 1 (A + B <= 2), i.e. rest·e^{lam - M}
    # > 1/eps - 2, where rest·e^{lam} is clean mass outside the pair, at most n_pos·e^{lam1}
    # (each term at most the top one), and -M <= reach: rows with lam1 + reach (+1 of
    # room) below log((1/eps - 2)/n_pos) cannot reach it and skip the normaliser
    # (loop-invariant, so the loop is unswitched).
    needs_normaliser = lam1 + reach + 1.0 > math.log((1.0 / eps - 2.0) / n_pos)
    eps2 = eps * eps
    # two copies of the pair loop, each branch-free, so that both vectorise: with the
    # test inside the loop the compiler keeps it scalar (2-3x slower on AVX2)
    if needs_normaliser:
        z, pos_sum, sym_sum = _pair_sums(True, logits, src, mass, e1k, e2k, p_high, q_low,
                                         lam1, lam2, lam3, w1, w2, w3, t1, t2, eps, eps2, taylor)
    else:
        z, pos_sum, sym_sum = _pair_sums(False, logits, src, mass, e1k, e2k, p_high, q_low,
                                         lam1, lam2, lam3, w1, w2, w3, t1, t2, eps, eps2, taylor)
    return pos_sum / z, sym_sum / z


@numba.njit(parallel=True, cache=True, error_model="numpy", fastmath=_FAST)
def _kernel(cos, sin, x, y, att, e1, e2, keys, log_units, sums, top, runner_up,
            scale, inv_tau, eps, pos_out, sym_out):  # pragma: no cover
    taylor = _TAYLOR
    n_rows, n_freqs, n_pos = x.shape
    n_keys = keys.shape[0]
    for row_freq in numba.prange(n_rows * n_freqs):
        g = row_freq // n_freqs
        f = row_freq - g * n_freqs
        # this head-frequency's quantities at the keys, contiguous
        mass, ck, sk = np.empty(n_keys), np.empty(n_keys), np.empty(n_keys)
        xk, yk, e1k, e2k = np.empty(n_keys), np.empty(n_keys), np.empty(n_keys), np.empty(n_keys)
        for a in range(n_keys):
            k = keys[a]
            mass[a], ck[a], sk[a], xk[a], yk[a] = att[g, f, k], cos[f, k], sin[f, k], x[g, f, k], y[g, f, k]
            e1k[a], e2k[a] = e1[g, f, k], e2[g, f, k]
        # |c| <= |scale|·|(X_c, Y_c)| since cos² + sin² = 1 (to rounding: the 1.001)
        reach = 0.0
        for a in range(n_keys):
            reach = max(reach, math.sqrt(xk[a] * xk[a] + yk[a] * yk[a]))
        pos_out[g, f], sym_out[g, f] = _row_scores(
            _factor_logits, (ck, sk, xk, yk, scale), abs(scale) * reach * 1.001, mass, e1k,
            e2k, log_units[g, f], sums[g, f], top[g, f], runner_up[g, f], n_pos, inv_tau, eps,
            taylor)


@numba.njit(parallel=True, cache=True, error_model="numpy", fastmath=_FAST)
def _matrix_kernel(c, offset, c_t, att, e1, e2, keys, log_units, sums, top, runner_up, inv_tau,
                   eps, pos_out, sym_out):  # pragma: no cover
    taylor = _TAYLOR
    n_rows, n_pos = att.shape
    n_keys = keys.shape[0]
    for g in numba.prange(n_rows):
        mass, e1k, e2k = np.empty(n_keys), np.empty(n_keys), np.empty(n_keys)
        for a in range(n_keys):
            k = keys[a]
            mass[a], e1k[a], e2k[a] = att[g, k], e1[g, k], e2[g, k]
        # -M <= max |c| over the entries the loop reads, exactly: no factor for rounding
        reach = 0.0
        for a in range(n_keys):
            for b in range(n_keys):
                reach = max(reach, abs(c_t[g, a, b]))
        pos_out[g], sym_out[g] = _row_scores(
            _matrix_logits, (c[g], c_t[g], offset), reach, mass, e1k, e2k, log_units[g], sums[g],
            top[g], runner_up[g], n_pos, inv_tau, eps, taylor)


@numba.njit(parallel=True, cache=True)
def _transpose(c, offset, out):  # pragma: no cover
    """``out[g] = c[g, offset:offset + n, offset:offset + n].T`` (``n = out.shape[1]``) in
    32 × 32 tiles (a plain strided copy misses the cache on every read)."""
    n_rows, n = out.shape[0], out.shape[1]
    tile = 32
    n_tiles = (n + tile - 1) // tile
    for g_tile in numba.prange(n_rows * n_tiles):
        g = g_tile // n_tiles
        a0 = (g_tile - g * n_tiles) * tile
        for b0 in range(0, n, tile):
            for a in range(a0, min(a0 + tile, n)):
                for b in range(b0, min(b0 + tile, n)):
                    out[g, b, a] = c[g, offset + a, offset + b]


def _run(kernel, *args) -> None:
    """Run a loop on torch's thread count, and put torch's back.

    numba's OpenMP layer sets the process's OpenMP thread count to its own at each launch,
    which is also torch's: the loop runs on torch's thread count, and torch's is put back
    (else every forward pass after the first profile would silently run on all cores, and
    round differently from one that did not follow a profile)."""
    import torch

    threads = torch.get_num_threads()
    numba.set_num_threads(max(1, min(threads, numba.config.NUMBA_NUM_THREADS)))
    try:
        kernel(*args)
    finally:
        torch.set_num_threads(threads)


def token_swap_freq_scores(cos: np.ndarray, sin: np.ndarray, x: np.ndarray, y: np.ndarray,
                           attention: np.ndarray, keys: np.ndarray, scale: float, tau: float, *,
                           e1: np.ndarray, e2: np.ndarray, log_units: np.ndarray,
                           sums: np.ndarray, top: np.ndarray, runner_up: np.ndarray,
                           eps: float) -> tuple[np.ndarray, np.ndarray]:
    """``(pos, sym)`` of shape ``[rows, freq]`` for all token swaps among ``keys``.

    Args:
        cos, sin: ``[freq, pos]`` rotation tables.
        x, y: ``[rows, freq, pos]`` content factors (rows = batch × heads).
        attention: ``[rows, freq, pos]`` clean per-frequency attention.
        keys: ``[n_keys]`` positions swapped pairwise (all visible to the query).
        scale, tau: the layer's scale and the weight temperature.
        e1, e2, log_units, sums: :class:`.exact.OutsideMass`'s terms ``[rows, freq, pos]``,
            its three logit units and its sums ``W1, W2, W3`` (``[rows, freq, 3]`` each).
        top, runner_up: ``[rows, freq]`` index into ``keys`` of the row's largest and second
            largest logit, ``-1`` where that position is not a key.
        eps: torch's clamp on the cosine's norms (the clamped cosine only: the scale-free
            one runs in the tensor code).
    """
    floats = [np.ascontiguousarray(a, dtype=np.float64) for a in (cos, sin, x, y, attention, e1, e2)]
    rows = [np.ascontiguousarray(a, dtype=np.float64) for a in (log_units, sums)]
    index = [np.ascontiguousarray(a, dtype=np.int64) for a in (top, runner_up)]
    pos = np.empty(x.shape[:2], dtype=np.float64)
    sym = np.empty_like(pos)
    _run(_kernel, *floats, np.ascontiguousarray(keys, dtype=np.int64), *rows, *index,
         float(scale), 1.0 / tau, float(eps), pos, sym)
    return pos, sym


def token_swap_matrix_scores(logits: np.ndarray, attention: np.ndarray, keys: np.ndarray,
                             tau: float, *, offset: int = 0, e1: np.ndarray, e2: np.ndarray,
                             log_units: np.ndarray, sums: np.ndarray, top: np.ndarray,
                             runner_up: np.ndarray, eps: float
                             ) -> tuple[np.ndarray, np.ndarray]:
    """``(pos, sym)`` of shape ``[rows]`` for all token swaps among ``keys``, the swapped
    logits read from a matrix (the whole-head scores: what :func:`token_swap_freq_scores`
    computes per frequency, with ``c_ij = logits[row, offset + a, offset + b]``).

    Args:
        logits: ``[rows, m, m]`` holding the cross-logit matrix restricted to the keys,
            ``C[keys[a], keys[b]]`` (row: position, column: content; finite), at
            ``[:, offset:offset + n_keys, offset:offset + n_keys]``: the whole matrix when
            the keys are a range starting at ``offset`` (read in place), or the block.
        attention, e1, e2: ``[rows, pos]`` clean attention and :class:`.exact.OutsideMass`'s
            terms; ``log_units, sums``: ``[rows, 3]``; ``top, runner_up``: ``[rows]`` index
            into ``keys`` (``-1``: not a key); the rest as :func:`token_swap_freq_scores`.

    The pair loop reads ``C[a, b]`` and ``C[b, a]`` along ``b``: ``logits`` in place (a
    float64 copy if it is not float64 and contiguous) and a float64 copy of the block's
    transpose ``[rows, n_keys, n_keys]``.
    """
    c = np.ascontiguousarray(logits, dtype=np.float64)
    n_keys = len(keys)
    if not 0 <= offset <= c.shape[1] - n_keys or c.shape[1] != c.shape[2]:
        raise InvalidSelectionError(f"no [{n_keys}, {n_keys}] block of keys at offset {offset} "
                                    f"of a matrix of shape {c.shape}; pass the keys' block "
                                    "with offset=0")
    c_t = np.empty((c.shape[0], n_keys, n_keys))
    _run(_transpose, c, int(offset), c_t)
    floats = [np.ascontiguousarray(a, dtype=np.float64) for a in (attention, e1, e2)]
    rows = [np.ascontiguousarray(a, dtype=np.float64) for a in (log_units, sums)]
    index = [np.ascontiguousarray(a, dtype=np.int64) for a in (top, runner_up)]
    pos = np.empty(c.shape[0], dtype=np.float64)
    sym = np.empty_like(pos)
    _run(_matrix_kernel, c, int(offset), c_t, *floats, np.ascontiguousarray(keys, dtype=np.int64), *rows,
         *index, 1.0 / tau, float(eps), pos, sym)
    return pos, sym
