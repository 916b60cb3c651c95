r"""The per-frequency token-swap scores as one fused GPU kernel (``torch.compile``).

The tensor code of :func:`.exact.exact_swap_scores` runs the per-frequency scores as about
twenty elementwise kernels over ``rows × freqs × swaps`` values, each a pass over memory:
on an H100 that made a whole-model profile 44x a forward pass at n = 2048
(``docs/performance.md``). This module writes the same arithmetic as the CPU loop of
:mod:`._kernel` (its docstring has the formulas: swapped masses scaled by the larger, the
post-swap normaliser from :class:`.exact.OutsideMass`'s terms, torch's clamped cosine,
weights ``P[high] · Q[low]`` with no exponential per swap) as one function of a chunk of
swaps, which ``torch.compile`` (Inductor) turns into a single kernel that reads each key's
values, computes every swap in registers and reduces over the chunk: memory traffic per
swap is a few gathered numbers instead of ~40 passes.

* ``compiled=True`` (the default on CUDA): the compiled kernel; chunks of at most
  ``max_elements`` swaps × rows × freqs keep memory bounded for long contexts.
* ``compiled=False``: the same function run eagerly (any device): what the tests hold to
  the CPU loop at 1e-12 where no GPU exists; the compiled kernel is held to the CPU loop by
  the GPU tests (skipped without CUDA) and by ``benchmarks/bench_device.py``.

The sums over swaps are plain sums of non-negative weights (the softmax shift is known
ahead: ``max a - min a``), so chunks add up with no rescaling.
"""

from __future__ import annotations

import functools
import warnings

import torch
from torch import Tensor

__all__ = ["fused_token_swap_freq_scores"]

_GAP_CAP, _NORMALISER_CAP = 40.0, 700.0


def _chunk_sums(i: Tensor, j: Tensor, mass: Tensor, cos: Tensor, sin: Tensor, x: Tensor,
                y: Tensor, e1: Tensor, e2: Tensor, p_high: Tensor, q_low: Tensor,
                units: Tensor, sums: Tensor, top: Tensor, runner_up: Tensor, scale: float,
                eps: float) -> tuple[Tensor, Tensor, Tensor]:
    """``(Σ w, Σ w·pos, Σ w·sym)`` ``[rows, freq]`` over the swaps ``(keys[i], keys[j])``.

    ``mass, x, y, e1, e2, p_high, q_low``: ``[rows, freq, key]``; ``cos, sin``:
    ``[freq, key]``; ``units, sums``: ``[rows, freq, 3]``; ``top, runner_up``: ``[rows,
    freq, 1]`` key indices (``-1``: not a key); ``i, j``: ``[swap]`` key indices, i < j.
    """
    ai, aj = mass[..., i], mass[..., j]                                  # [r, f, s]
    w = torch.where(ai >= aj, p_high[..., i] * q_low[..., j], p_high[..., j] * q_low[..., i])
    c_ij = scale * (cos[:, i] * x[..., j] + sin[:, i] * y[..., j])      # content j at i
    c_ji = scale * (cos[:, j] * x[..., i] + sin[:, j] * y[..., i])      # content i at j
    gap = c_ji - c_ij
    small = torch.exp(-gap.abs().clamp(max=_GAP_CAP))
    up = gap >= 0
    mass_i = torch.where(up, small, torch.ones_like(small))
    mass_j = torch.where(up, torch.ones_like(small), small)
    i_top, j_top = i == top, j == top
    pair = (i_top & (j == runner_up)) | ((i == runner_up) & j_top)
    lam1, lam2, lam3 = units[..., 0:1], units[..., 1:2], units[..., 2:3]
    w1, w2, w3 = sums[..., 0:1], sums[..., 1:2], sums[..., 2:3]
    rest = torch.where(i_top, w2 - e2[..., j],
                       torch.where(j_top, w2 - e2[..., i], w1 - e1[..., i] - e1[..., j]))
    lam = torch.where(i_top | j_top, lam2, lam1)
    rest = torch.where(pair, w3, rest)
    lam = torch.where(pair, lam3, lam)
    grow = torch.exp((lam - torch.maximum(c_ij, c_ji)).clamp(min=0, max=_NORMALISER_CAP))
    after = eps * (mass_i + mass_j + rest.clamp(min=0) * grow)
    norms = (torch.maximum(mass_i * mass_i + mass_j * mass_j, after * after)
             * (ai * ai + aj * aj).clamp(min=eps * eps))
    weighted = w * torch.rsqrt(norms)
    return (w.sum(-1), (weighted * (mass_i * ai + mass_j * aj)).sum(-1),
            (weighted * (mass_i * aj + mass_j * ai)).sum(-1))


@functools.lru_cache(maxsize=None)
def _compiled():
    return torch.compile(_chunk_sums, dynamic=True, fullgraph=True)


def fused_token_swap_freq_scores(cos: Tensor, sin: Tensor, x: Tensor, y: Tensor,
                                 attention: Tensor, keys: Tensor, scale: float, tau: float, *,
                                 e1: Tensor, e2: Tensor, log_units: Tensor, sums: Tensor,
                                 top: Tensor, runner_up: Tensor, eps: float,
                                 max_elements: int = 1 << 24, compiled: bool | None = None
                                 ) -> tuple[Tensor, Tensor]:
    """``(pos, sym)`` ``[rows, freq]`` for all token swaps among ``keys``: the arguments of
    :func:`._kernel.token_swap_freq_scores`, as tensors on any device (float64).

    Args:
        cos, sin: ``[freq, pos]``; x, y, attention, e1, e2: ``[rows, freq, pos]``;
        log_units, sums: ``[rows, freq, 3]``; top, runner_up: ``[rows, freq]`` key indices.
        max_elements: most ``rows × freq × swaps`` values of one chunk.
        compiled: run the ``torch.compile`` kernel (default: on CUDA) or eagerly.
    """
    if compiled is None:
        compiled = x.device.type == "cuda"
    fn = _compiled() if compiled else _chunk_sums
    keys = keys.to(x.device)
    mass = attention[..., keys]
    xk, yk, e1k, e2k = x[..., keys], y[..., keys], e1[..., keys], e2[..., keys]
    ck, sk = cos[:, keys], sin[:, keys]
    top_mass = mass.amax(-1, keepdim=True)
    bottom = mass.amin(-1, keepdim=True)
    p_high = torch.exp((mass - top_mass) / tau)
    q_low = torch.exp((bottom - mass) / tau)
    n = len(keys)
    i, j = torch.triu_indices(n, n, offset=1, device=x.device)
    rows, freqs = x.shape[:2]
    step = max(1, max_elements // max(rows * freqs, 1))
    z = pos = sym = None
    t, r = top[..., None], runner_up[..., None]
    for start in range(0, len(i), step):
        chunk = (i[start : start + step], j[start : start + step], mass, ck, sk, xk, yk, e1k,
                 e2k, p_high, q_low, log_units, sums, t, r, float(scale), float(eps))
        try:
            zz, pp, ss = fn(*chunk)
        except Exception as exc:  # noqa: BLE001 - a compiler that cannot build the kernel
            if fn is _chunk_sums:
                raise
            warnings.warn(f"torch.compile could not build the fused swap-score kernel "
                          f"({type(exc).__name__}: {exc}); running it uncompiled", stacklevel=2)
            fn = _chunk_sums
            zz, pp, ss = fn(*chunk)
        z, pos, sym = (zz, pp, ss) if z is None else (z + zz, pos + pp, sym + ss)
    return pos / z, sym / z
