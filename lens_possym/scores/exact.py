r"""Swap scores in closed form, for every swap at once, from the cross-logit factors.

Swapping the contents of positions :math:`i` and :math:`j` changes the query row's logits
at those two positions to :math:`C[i, j]` and :math:`C[j, i]` and leaves all others alone
(:mod:`.crosslogits`), and the cosines need only those logits (:mod:`.swaps`). So the
scores of all :math:`n(n-1)/2` token swaps cost :math:`O(n^2)` arithmetic per head and
frequency and no forward pass; :mod:`.rerun` is the reference implementation this is
tested against.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from jaxtyping import Float
from torch import Tensor

from ..errors import InvalidSelectionError
from .crosslogits import CrossLogitFactors
from .swaps import SwapSet, WeightedCosines, swap_cosines

__all__ = ["SwapScores", "exact_swap_scores"]

#: Largest number of elements of one intermediate tensor (2**21 float64 = 16 MiB); the
#: work is cut into chunks of frequencies and of swaps to stay below it.
MAX_ELEMENTS = 1 << 21


@dataclass
class SwapScores:
    """Scores of one layer's query row, per prompt.

    Attributes:
        pos, sym: ``[batch, head_index]`` whole-head scores.
        pos_freq, sym_freq: ``[batch, head_index, freq]`` per-frequency scores (each
            frequency scored as a 2-D head), or ``None``.
    """

    pos: Float[Tensor, "batch head_index"]
    sym: Float[Tensor, "batch head_index"]
    pos_freq: Float[Tensor, "batch head_index freq"] | None = None
    sym_freq: Float[Tensor, "batch head_index freq"] | None = None


def _log_mass(logits: Tensor) -> Tensor:
    """Log of a group's unnormalised mass from its logits ``[..., swap, block]``."""
    return logits[..., 0] if logits.shape[-1] == 1 else torch.logsumexp(logits, -1)


def _mean_mass(attention: Tensor) -> Tensor:
    return attention[..., 0] if attention.shape[-1] == 1 else attention.mean(-1)


def _clean(logits: Tensor, attention: Tensor, swaps: SwapSet, sl: slice) -> tuple[Tensor, ...]:
    """Clean log-mass ``v`` and mass ``d`` (block means) of both groups, ``[..., swap]``."""
    first, second = swaps.first[sl], swaps.second[sl]
    return (_log_mass(logits[..., first]), _log_mass(logits[..., second]),
            _mean_mass(attention[..., first]), _mean_mass(attention[..., second]))


def _accumulate(acc: WeightedCosines, u1: Tensor, u2: Tensor, clean: tuple, tau: float) -> None:
    v1, v2, d1, d2 = clean
    pos, sym = swap_cosines(u1, u2, v1, v2)
    acc.add((d1 - d2).abs() / tau, pos, sym)


def _swap_chunks(n_swaps: int, per_swap: int, budget: int) -> list[slice]:
    step = max(1, budget // max(per_swap, 1))
    return [slice(s, min(s + step, n_swaps)) for s in range(0, n_swaps, step)]


def _token_keys(swaps: SwapSet) -> Tensor | None:
    """The positions token swaps pair up, if the swaps are *all* pairs of them, else None."""
    keys = swaps.keys
    if swaps.kind != "token" or keys is None or len(keys) * (len(keys) - 1) // 2 != swaps.n_swaps:
        return None
    return keys


def _freq_scores_kernel(factors: CrossLogitFactors, keys: Tensor, tau: float
                        ) -> tuple[Tensor, Tensor]:
    from ._kernel import token_swap_freq_scores

    logits = factors.freq_diagonal()                               # [b, h, f, p]
    attention = torch.softmax(logits, dim=-1)
    b, h, f, p = logits.shape

    def rows(t: Tensor) -> Tensor:                                 # [b, h, p, f] -> [b*h, f, p]
        return t.transpose(-1, -2).reshape(b * h, f, p).double().numpy()

    pos, sym = token_swap_freq_scores(
        factors.cos.T.double().numpy(), factors.sin.T.double().numpy(), rows(factors.x),
        rows(factors.y), attention.reshape(b * h, f, p).double().numpy(), keys.numpy(),
        factors.scale, tau,
    )
    out = lambda a: torch.from_numpy(a).view(b, h, f).to(factors.x.dtype)  # noqa: E731
    return out(pos), out(sym)


def exact_swap_scores(factors: CrossLogitFactors, swaps: SwapSet, *, tau: float = 1e-4,
                      per_frequency: bool = True, max_elements: int = MAX_ELEMENTS,
                      kernel: bool | None = None) -> SwapScores:
    """Token- or block-swap scores of every head (and frequency) of one query row.

    Args:
        factors: from :func:`~lens_possym.scores.crosslogits.cross_logit_factors`.
        swaps: from :func:`~lens_possym.scores.swaps.swap_set`.
        tau: temperature of the swap weights ``softmax(|a_1 - a_2| / tau)``.
        per_frequency: also score each frequency id as its own 2-D head (no softcap: the
            cap acts on the sum, see the scores docs).
        max_elements: memory bound on intermediates (see :data:`MAX_ELEMENTS`).
        kernel: use the compiled CPU loop of :mod:`._kernel` for the per-frequency token
            swaps (``None``: whenever the factors are on the CPU and the swaps are all the
            pairs of a key set); ``False`` forces the tensor code, which runs on any
            device and is what the loop is tested against.
    """
    batch, heads = factors.x.shape[:2]
    block = swaps.block_size

    full = factors.head_full()                                     # [b, h, p, p]
    logits = torch.diagonal(full, dim1=-2, dim2=-1)                # [b, h, p]
    attention = torch.softmax(logits, dim=-1)
    acc = WeightedCosines()
    for sl in _swap_chunks(swaps.n_swaps, batch * heads * block, max_elements):
        first, second = swaps.first[sl], swaps.second[sl]
        u1 = _log_mass(full[:, :, first, second])
        u2 = _log_mass(full[:, :, second, first])
        _accumulate(acc, u1, u2, _clean(logits, attention, swaps, sl), tau)
    pos, sym = acc.result()
    if not per_frequency:
        return SwapScores(pos, sym)

    keys = _token_keys(swaps)
    if kernel is None:
        kernel = keys is not None and factors.x.device.type == "cpu"
    if kernel:
        if keys is None:
            raise InvalidSelectionError(
                "the compiled loop handles token swaps over all pairs of a key set")
        if factors.x.device.type != "cpu":
            raise InvalidSelectionError(f"the compiled loop runs on the CPU, the factors are on "
                             f"{factors.x.device}; pass kernel=None (or False) to use the "
                             f"tensor code there")
        return SwapScores(pos, sym, *_freq_scores_kernel(factors, keys.cpu(), tau))

    n_freqs = factors.n_freqs
    per_freq_swap = batch * heads * block
    freq_step = max(1, min(n_freqs, max_elements // max(per_freq_swap * swaps.n_swaps, 1)))
    pos_f, sym_f = [], []
    for f0 in range(0, n_freqs, freq_step):
        fs = slice(f0, min(f0 + freq_step, n_freqs))
        logits_f = factors.freq_diagonal(fs)                       # [b, h, f, p]
        attention_f = torch.softmax(logits_f, dim=-1)
        acc = WeightedCosines()
        width = per_freq_swap * (fs.stop - fs.start)
        for sl in _swap_chunks(swaps.n_swaps, width, max_elements):
            first, second = swaps.first[sl], swaps.second[sl]
            u1 = _log_mass(factors.freq_at(first, second, fs))
            u2 = _log_mass(factors.freq_at(second, first, fs))
            _accumulate(acc, u1, u2, _clean(logits_f, attention_f, swaps, sl), tau)
        p, s = acc.result()
        pos_f.append(p)
        sym_f.append(s)
    return SwapScores(pos, sym, torch.cat(pos_f, -1), torch.cat(sym_f, -1))
