r"""Swap scores in closed form, for every swap at once, from the cross-logit factors.

Swapping the contents of positions :math:`i` and :math:`j` changes the query row's logits
at those two positions to :math:`C[i, j]` and :math:`C[j, i]` and leaves all others alone
(:mod:`.crosslogits`). The post-swap attention on the two groups follows in closed form:
with :math:`R` the clean unnormalised mass outside both groups (unchanged by the swap),

.. math::

    a'_g = e^{u_g} / Z', \qquad Z' = R + e^{u_1} + e^{u_2}, \qquad
    R = Z - e^{v_1} - e^{v_2},

(:math:`u, v` the swapped and clean log-masses of the groups, :mod:`.swaps`), evaluated in
log space. :math:`R` is never formed by that subtraction, which loses everything when the
two groups hold nearly all the mass (a one-hot head): :class:`OutsideMass` sums only
non-negative terms, or subtracts from a sum the largest term does not belong to. So the
scores of all :math:`n(n-1)/2` token swaps cost :math:`O(n^2)` arithmetic per head and
frequency and no forward pass; :mod:`.rerun` is the reference implementation this is
tested against.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from jaxtyping import Float, Int
from torch import Tensor

from .._checks import boundary
from ..errors import InvalidSelectionError
from ..results_io import ResultIO, head_frame
from .config import MAX_ELEMENTS
from .crosslogits import CrossLogitFactors, positions_range
from .swaps import (
    COSINE_EPS,
    Cosine,
    SwapSet,
    WeightedCosines,
    check_cosine,
    check_tau,
    clamped_cosines,
    swap_cosines,
)
from ._kernel import token_swap_freq_scores, token_swap_matrix_scores
from ._fused import fused_token_swap_freq_scores
from .stages import stage

__all__ = ["SwapScores", "OutsideMass", "exact_swap_scores"]



@dataclass(repr=False)
class SwapScores(ResultIO):
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

    FORMAT = "lens-possym/swap-scores@1"

    def summary(self) -> dict:
        """The prompts and heads scored and each score's mean over them."""
        return {"n_prompts": int(self.pos.shape[0]), "n_heads": int(self.pos.shape[1]),
                "n_freqs": None if self.pos_freq is None else int(self.pos_freq.shape[-1]),
                "mean_pos": float(self.pos.double().nanmean()),
                "mean_sym": float(self.sym.double().nanmean())}

    def _table(self):
        """Long format: ``prompt``, ``head``, ``frequency`` (per-frequency scores),
        ``score`` and ``value``."""
        names = ("pos", "sym", "pos_freq", "sym_freq")
        return head_frame({n: getattr(self, n) for n in names}, None,
                          dims=("prompt", "head", "frequency"))


def _log_mass(logits: Tensor) -> Tensor:
    """Log of a group's unnormalised mass from its logits ``[..., swap, block]``."""
    return logits[..., 0] if logits.shape[-1] == 1 else torch.logsumexp(logits, -1)


def _mean_mass(attention: Tensor) -> Tensor:
    return attention[..., 0] if attention.shape[-1] == 1 else attention.mean(-1)


def _clean(logits: Tensor, attention: Tensor, first: Tensor, second: Tensor
           ) -> tuple[Tensor, ...]:
    """Clean log-mass ``v`` and mass ``d`` (block means) of both groups, ``[..., swap]``."""
    return (_log_mass(logits[..., first]), _log_mass(logits[..., second]),
            _mean_mass(attention[..., first]), _mean_mass(attention[..., second]))


class OutsideMass:
    r"""The clean mass outside both groups of each swap, :math:`\log \sum_{p \notin g_1 \cup g_2}
    e^{\lambda_p}`, accurate to a few ulps relative however little it is.

    Token swaps use the three largest logits :math:`\lambda_{t_1} \ge \lambda_{t_2} \ge
    \lambda_{t_3}` of the row. A pair without :math:`t_1` leaves ``W1 - e1_i - e1_j`` in units
    of :math:`e^{\lambda_{t_1}}` (``e1 = e^{λ - λ_t1}``, ``W1`` its sum; the remainder holds
    :math:`t_1`, at least ``W1 / n``); a pair with :math:`t_1` leaves ``W2 - e2_other`` in units
    of :math:`e^{\lambda_{t_2}}` (``W2`` the sum of ``e2`` without :math:`t_1`); the pair
    :math:`\{t_1, t_2\}` leaves ``W3``, the sum without both in units of
    :math:`e^{\lambda_{t_3}}`. Each remainder is at least 1 in its units, so nothing cancels
    and nothing underflows (a one-hot row's rest can be :math:`e^{-1000}` of its top): ``O(1)``
    a swap. Block swaps (few) take a ``logsumexp`` over the positions outside the two blocks.

    Args:
        logits: ``[..., pos]`` clean logit rows (``-inf`` where masked; at least one finite).
    """

    def __init__(self, logits: Float[Tensor, "... pos"]) -> None:
        self.logits = logits
        top = logits.topk(min(3, logits.shape[-1]), dim=-1)
        shift = torch.where(top.values.isfinite(), top.values, torch.zeros_like(top.values))
        self.log_units = [shift[..., k : k + 1] for k in range(top.values.shape[-1])]
        self.first, self.second = top.indices[..., 0:1], top.indices[..., 1:2]
        self.e1 = torch.exp(logits - self.log_units[0])
        self.e2 = torch.exp(logits - self.log_units[1])
        self.w1 = self.e1.sum(-1, keepdim=True)
        self.w2 = self.e2.scatter(-1, self.first, 0.0).sum(-1, keepdim=True)
        self.w3 = (torch.exp(logits - self.log_units[2]).scatter(-1, top.indices[..., :2], 0.0)
                   .sum(-1, keepdim=True)) if len(self.log_units) > 2 else torch.zeros_like(self.w1)

    def log_outside(self, first: Int[Tensor, "swap block"], second: Int[Tensor, "swap block"]
                    ) -> Float[Tensor, "... swap"]:
        if first.shape[-1] > 1:
            outside = torch.ones(first.shape[0], self.logits.shape[-1], dtype=torch.bool,
                                 device=first.device)
            outside.scatter_(1, first, False).scatter_(1, second, False)
            return self.logits[..., None, :].masked_fill(~outside, float("-inf")).logsumexp(-1)
        i, j = first[:, 0], second[:, 0]
        i_top, j_top = i == self.first, j == self.first
        pair = (i_top & (j == self.second)) | (j_top & (i == self.second))
        e1_i, e1_j = self.e1[..., i], self.e1[..., j]
        rest = torch.where(i_top, self.w2 - self.e2[..., j],
                           torch.where(j_top, self.w2 - self.e2[..., i], self.w1 - e1_i - e1_j))
        unit = torch.where(i_top | j_top, self.log_units[1], self.log_units[0])
        if len(self.log_units) > 2:
            rest = torch.where(pair, self.w3, rest)
            unit = torch.where(pair, self.log_units[2], unit)
        return rest.clamp_min_(0).log_().add_(unit)


def _accumulate(acc: WeightedCosines, u1: Tensor, u2: Tensor, log_outside: Tensor,
                clean: tuple, tau: float, block: int, cosine: Cosine) -> None:
    v1, v2, d1, d2 = clean
    if cosine == "clamped":
        log_z = torch.logaddexp(log_outside, torch.logaddexp(u1, u2))   # log Z' after the swap
        a1, a2 = torch.exp(u1 - log_z), torch.exp(u2 - log_z)       # post-swap group masses
        if block > 1:                                                # block means
            a1, a2 = a1 / block, a2 / block
        pos, sym = clamped_cosines(a1, a2, d1, d2)
    else:
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


def _freq_scores_kernel(factors: CrossLogitFactors, keys: Tensor, tau: float,
                        backend: str = "numba", max_elements: int = MAX_ELEMENTS
                        ) -> tuple[Tensor, Tensor]:
    """Per-frequency token-swap scores by one of the fused loops: ``"numba"`` (the CPU
    loop of :mod:`._kernel`), ``"compiled"`` (:mod:`._fused` under ``torch.compile``, for
    GPUs) or ``"eager"`` (the same function uncompiled, on any device).

    Frequencies are independent: they are scored in chunks whose ``[batch, head, pos,
    freq]`` tables hold at most ``max_elements`` numbers each, so the ~12 tables the loop
    reads stay within the memory bound (docs/scores.md, memory)."""
    b, h, p, f = factors.x.shape
    step = max(1, min(f, max_elements // max(b * h * p, 1)))
    pieces = [_freq_chunk_kernel(factors, keys, tau, backend, max_elements,
                                 slice(f0, min(f0 + step, f))) for f0 in range(0, f, step)]
    return torch.cat([a for a, _ in pieces], -1), torch.cat([s for _, s in pieces], -1)


def _clean_rows(logits: Tensor, keys: Tensor) -> tuple[Tensor, dict]:
    """What the loops read of the clean rows ``logits`` ``[b, h, f, p]``: the attention
    ``[b*h, f, p]`` and, as keyword arguments, :class:`OutsideMass`'s terms (``e1, e2``
    ``[b*h, f, p]``, ``log_units, sums`` ``[b*h, f, 3]``, ``top, runner_up`` ``[b*h, f]``
    index into ``keys``, ``-1`` where not a key) and the cosine's ``eps``, in float64."""
    attention = torch.softmax(logits, dim=-1)
    outside = OutsideMass(logits)
    b, h, f, p = logits.shape
    key_of = torch.full((p,), -1, dtype=torch.long, device=keys.device)
    key_of[keys] = torch.arange(len(keys), device=keys.device)

    def per_row(t: Tensor) -> Tensor:                              # [b, h, f, 1] -> [b*h, f]
        return t.reshape(b * h, f).double()

    units = outside.log_units + [outside.log_units[-1]] * (3 - len(outside.log_units))
    kwargs = dict(e1=outside.e1.reshape(b * h, f, p).double(),
                  e2=outside.e2.reshape(b * h, f, p).double(),
                  log_units=torch.stack([per_row(u) for u in units], -1),
                  sums=torch.stack([per_row(w) for w in (outside.w1, outside.w2, outside.w3)], -1),
                  top=per_row(key_of[outside.first]).long(),
                  runner_up=per_row(key_of[outside.second]).long(), eps=COSINE_EPS)
    return attention.reshape(b * h, f, p).double(), kwargs


def _numpy(value):
    return value.cpu().numpy() if isinstance(value, Tensor) else value


def _freq_chunk_kernel(factors: CrossLogitFactors, keys: Tensor, tau: float, backend: str,
                       max_elements: int, freqs: slice) -> tuple[Tensor, Tensor]:
    """:func:`_freq_scores_kernel` for the frequency ids ``freqs``."""
    logits = factors.freq_diagonal(freqs)                          # [b, h, f, p]
    b, h, f, p = logits.shape
    attention, kwargs = _clean_rows(logits, keys)

    def rows(t: Tensor) -> Tensor:                                 # [b, h, p, f] -> [b*h, f, p]
        return t.transpose(-1, -2).reshape(b * h, f, p).double()

    args = (factors.cos[:, freqs].T.double(), factors.sin[:, freqs].T.double(),
            rows(factors.x[..., freqs]), rows(factors.y[..., freqs]), attention)
    if backend == "numba":
        pos, sym = token_swap_freq_scores(*map(_numpy, args), _numpy(keys), factors.scale, tau,
                                          **{k: _numpy(v) for k, v in kwargs.items()})
        pos, sym = torch.from_numpy(pos), torch.from_numpy(sym)
    else:

        pos, sym = fused_token_swap_freq_scores(*args, keys, factors.scale, tau, **kwargs,
                                                max_elements=max_elements,
                                                compiled=backend == "compiled")
    out = lambda a: a.reshape(b, h, f).to(factors.x.dtype)  # noqa: E731
    return out(pos), out(sym)


def _head_scores_kernel(factors: CrossLogitFactors, keys: Tensor, logits: Tensor, tau: float
                        ) -> tuple[Tensor, Tensor]:
    """Whole-head token-swap scores by the CPU loop of :mod:`._kernel`, the swapped logits
    read from the held whole-head matrix restricted to the keys (``C[keys_a, keys_b]``);
    ``logits``: the clean rows :meth:`~.CrossLogitFactors.head_diagonal` ``[b, h, p]``.

    Memory: a float64 copy of the keys' block of ``C`` transposed, and of the block itself
    when the keys are not a range (a range is read in place), each at most the held
    matrix's size."""
    b, h, p = logits.shape
    attention, kwargs = _clean_rows(logits[:, :, None], keys)
    span = positions_range(keys)
    if span is not None:                                           # read in place
        matrix, start = factors.head_full().double().reshape(b * h, p, p), span.start
    else:
        matrix, start = factors.head_matrix(keys).double().reshape(b * h, len(keys), len(keys)), 0
    kwargs = {k: _numpy(v[:, 0] if isinstance(v, Tensor) else v) for k, v in kwargs.items()}
    pos, sym = token_swap_matrix_scores(_numpy(matrix), _numpy(attention[:, 0]), _numpy(keys),
                                        tau, offset=start, **kwargs)
    out = lambda a: torch.from_numpy(a).reshape(b, h).to(factors.x.dtype)  # noqa: E731
    return out(pos), out(sym)


def _scores(acc: WeightedCosines, swaps: SwapSet, logits: Tensor, entries, tau: float,
            max_elements: int, width: int, cosine: Cosine) -> tuple[Tensor, Tensor]:
    """Accumulate every swap's cosines for clean ``logits`` ``[..., pos]``; ``entries(rows,
    cols)`` gives the matching cross-logit entries ``[..., *idx]``."""
    attention = torch.softmax(logits, dim=-1)
    outside = OutsideMass(logits) if cosine == "clamped" else None
    per_swap = width * swaps.block_size                            # entries of one swap
    if outside is not None and swaps.block_size > 1:
        per_swap = width * logits.shape[-1]                        # its masked logit rows
    for sl in _swap_chunks(swaps.n_swaps, per_swap, max_elements):
        first, second = swaps.pairs(sl)
        u1, u2 = _log_mass(entries(first, second)), _log_mass(entries(second, first))
        log_out = None if outside is None else outside.log_outside(first, second)
        _accumulate(acc, u1, u2, log_out, _clean(logits, attention, first, second), tau,
                    swaps.block_size, cosine)
    return acc.result()


@boundary
def exact_swap_scores(factors: CrossLogitFactors, swaps: SwapSet, *, tau: float = 1e-4,
                      per_frequency: bool = True, cosine: Cosine = "clamped",
                      max_elements: int = MAX_ELEMENTS, kernel: bool | None = None,
                      fused: bool | None = None) -> SwapScores:
    """Token- or block-swap scores of every head (and frequency) of one query row.

    Args:
        factors: from :func:`~lens_possym.scores.crosslogits.cross_logit_factors`.
        swaps: from :func:`~lens_possym.scores.swaps.swap_set`.
        tau: temperature of the swap weights ``softmax(|a_1 - a_2| / tau)``.
        per_frequency: also score each frequency id as its own 2-D head (no softcap: the
            cap acts on the sum, see the scores docs).
        cosine: ``"clamped"`` (torch's ``cosine_similarity``, norms clamped at 1e-8, as
            paper C's code computes it) or ``"scale_free"`` (unclamped; differs only on
            swaps that drain the two groups below 1e-8, see :mod:`.swaps`).
        max_elements: memory bound on intermediates (see :data:`MAX_ELEMENTS`).
        kernel: use the compiled CPU loop of :mod:`._kernel` for the token swaps: the
            per-frequency ones, and the whole-head ones when ``factors`` hold the whole
            matrix (:attr:`~.CrossLogitFactors.holds_full`; the loop reads their swapped
            logits from it). ``None``: whenever the factors are on the CPU, the swaps are
            all the pairs of a key set and the cosine is clamped; ``False`` forces the
            tensor code, which runs on any device and is what the loop is tested against.
            Block swaps, ``cosine="scale_free"`` and whole-head scores on a GPU or of
            factors that do not hold the whole matrix always run in the tensor code.
        fused: for the per-frequency swaps on a GPU, the fused kernel of :mod:`._fused`
            (``torch.compile``; ``None``: on CUDA); ``True`` on the CPU runs that kernel's
            function eagerly (what the tests hold to the CPU loop) and the whole-head
            swaps in the tensor code (the GPU's path); ``False``: the tensor code on GPUs.
    """
    check_cosine(cosine)
    check_tau(tau)
    batch, heads = factors.x.shape[:2]
    backend = _kernel_backend(factors, swaps, cosine, kernel, fused)
    with stage("swaps"):
        logits = factors.head_diagonal()                           # [b, h, p]
        if backend == "numba" and factors.holds_full:
            pos, sym = _head_scores_kernel(factors, _token_keys(swaps).cpu(), logits, tau)
        else:
            pos, sym = _scores(WeightedCosines(), swaps, logits, factors.head_at, tau,
                               max_elements, batch * heads, cosine)
    if not per_frequency:
        return SwapScores(pos, sym)
    with stage("freq"):
        pos_f, sym_f = _freq_scores(factors, swaps, tau, cosine, max_elements, backend)
    return SwapScores(pos, sym, pos_f, sym_f)


def _kernel_backend(factors: CrossLogitFactors, swaps: SwapSet, cosine: Cosine,
                    kernel: bool | None, fused: bool | None) -> str | None:
    """Which loop scores the token swaps (:func:`exact_swap_scores`'s ``kernel`` and
    ``fused``): ``"numba"`` (the CPU loop; also the whole-head scores, when the whole
    matrix is held), ``"compiled"`` or ``"eager"`` (the fused function, per frequency
    only), or ``None`` (the tensor code)."""
    keys = _token_keys(swaps)
    on_cpu = factors.x.device.type == "cpu"
    if kernel is None:
        kernel = keys is not None and cosine == "clamped" and (on_cpu or fused is not False)
    if not kernel:
        return None
    if cosine != "clamped":
        raise InvalidSelectionError("the compiled loop computes the clamped cosine; pass "
                                    "kernel=None (or False) for cosine='scale_free'")
    if keys is None:
        raise InvalidSelectionError(
            "the compiled loop handles token swaps over all pairs of a key set")
    if not on_cpu and fused is False:
        raise InvalidSelectionError(f"the compiled CPU loop runs on the CPU, the factors are "
                                    f"on {factors.x.device}; pass fused=None for the fused GPU "
                                    f"kernel or kernel=False for the tensor code there")
    if on_cpu and not fused:
        return "numba"
    return "compiled" if factors.x.device.type == "cuda" else "eager"


def _freq_scores(factors: CrossLogitFactors, swaps: SwapSet, tau: float, cosine: Cosine,
                 max_elements: int, backend: str | None) -> tuple[Tensor, Tensor]:
    """The per-frequency part of :func:`exact_swap_scores` (its arguments; ``backend``
    from :func:`_kernel_backend`)."""
    batch, heads = factors.x.shape[:2]
    if backend is not None:
        keys = _token_keys(swaps)
        return _freq_scores_kernel(factors, keys.cpu() if backend == "numba" else keys, tau,
                                   backend, max_elements=max_elements)

    n_freqs = factors.n_freqs
    per_freq_swap = batch * heads * swaps.block_size
    freq_step = max(1, min(n_freqs, max_elements // max(per_freq_swap * swaps.n_swaps, 1)))
    pos_f, sym_f = [], []
    for f0 in range(0, n_freqs, freq_step):
        fs = slice(f0, min(f0 + freq_step, n_freqs))
        p, s = _scores(WeightedCosines(), swaps, factors.freq_diagonal(fs),
                       lambda r, c: factors.freq_at(r, c, fs), tau, max_elements,
                       batch * heads * (fs.stop - fs.start), cosine)
        pos_f.append(p)
        sym_f.append(s)
    return torch.cat(pos_f, -1), torch.cat(sym_f, -1)
