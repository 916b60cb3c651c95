r"""Swaps, and the weighted cosines that turn their effect on attention into two scores.

A *swap* exchanges the contents of two equally long groups of key positions, ``first`` and
``second`` (single tokens for token swaps, contiguous blocks for block swaps), leaving the
positions, and the query, where they are. With the clean attention :math:`a` of the query
row and the attention :math:`a'` after the swap, paper A (as implemented in paper C's code)
compares the 2-vectors of the mass on the two groups:

.. math::

    \mathrm{pos} = \cos\big((a'_1, a'_2), (a_1, a_2)\big), \qquad
    \mathrm{sym} = \cos\big((a'_1, a'_2), (a_2, a_1)\big),

(mass stayed with the positions: positional; it moved with the content: symbolic), weights
the swaps by :math:`w = \mathrm{softmax}(|a_1 - a_2| / \tau)` over all swaps, and sums:
:math:`s_{POS} = \sum w\,\mathrm{pos}`, :math:`s_{SYM} = \sum w\,\mathrm{sym}`.

**The cosine is torch's** (``cosine="clamped"``, the default). Paper C's code computes both
cosines with ``torch.nn.functional.cosine_similarity``, which clamps each norm at
:math:`\epsilon = 10^{-8}`: :math:`\cos_\epsilon(x, y) = \frac{x}{\max(\lVert x\rVert, \epsilon)}
\cdot \frac{y}{\max(\lVert y\rVert, \epsilon)}` (torch 2.x; :func:`clamped_cosines`).
The clamp decides the score of a **draining swap**, one after which the two groups hold
almost no attention (it moved to a third position): with :math:`\lVert a'\rVert < \epsilon`
both cosines shrink by :math:`\lVert a'\rVert / \epsilon`, so such a swap scores about
(0, 0): neither positional nor symbolic. At :math:`\tau = 10^{-4}` these swaps can carry the
whole weight (a one-hot head ties all the swaps of its one attended key), so the absolute
masses :math:`a'_1, a'_2`, normaliser included, are needed, not only their ratio.

**The scale-free variant** (``cosine="scale_free"``) leaves the norms unclamped: a cosine
does not change when a vector is rescaled, so the softmax normaliser of :math:`a'` cancels
and, with :math:`u_g` the log of the (unnormalised) swapped mass on group :math:`g` and
:math:`v_g` the clean one,

.. math::

    \frac{(e^{u_1}, e^{u_2})}{\lVert\cdot\rVert} = (c_u, s_u), \quad
    c_u = (1 + e^{2(u_2 - u_1)})^{-1/2}, \quad s_u = (1 + e^{2(u_1 - u_2)})^{-1/2},

so :math:`\mathrm{pos} = c_u c_v + s_u s_v` and :math:`\mathrm{sym} = c_u s_v + s_u c_v`
(:func:`swap_cosines`), stable for any logit gap. It agrees with the clamped cosine wherever
both norms exceed :math:`\epsilon`; on a draining swap it scores the direction of the
leftover mass, however small. For token swaps :math:`u_1 = C[i, j]`, :math:`u_2 = C[j, i]`,
:math:`v = (\lambda_i, \lambda_j)`; for block swaps the logs of block sums (``logsumexp``
over the block) of the same quantities.

Which swaps exist (:func:`swap_set`): all pairs ``0 <= i < j < n`` of key positions before
the query ``n`` (paper C), optionally without position 0 (BOS). On a layer with a sliding
window, only swaps whose two groups each hold a key the query can see are kept: a swap with
a hidden position always scores (pos, sym) = (1, 0), since no mass can follow content out
of the window, so it says nothing about the head (paper C's models have no windows). Blocks: the eligible positions split into ``n_blocks`` equal
contiguous blocks; when the count does not divide, the remainder is dropped from the
*start* (the keys farthest from the query), so every block is whole.
"""

from __future__ import annotations

import math

from typing import Literal

import torch
from jaxtyping import Bool, Float, Int
from torch import Tensor

from .._checks import boundary
from .._inputs import resolve_device
from ..errors import InvalidSelectionError

__all__ = [
    "SwapKind",
    "SwapSet",
    "swap_set",
    "Cosine",
    "COSINE_EPS",
    "check_cosine",
    "clamped_cosines",
    "swap_cosines",
    "WeightedCosines",
]

SwapKind = Literal["token", "block"]
#: ``"clamped"``: torch's ``cosine_similarity`` (paper C's scores); ``"scale_free"``: unclamped.
Cosine = Literal["clamped", "scale_free"]
#: ``torch.nn.functional.cosine_similarity``'s default ``eps``, which paper C's code uses.
COSINE_EPS = 1e-8


class SwapSet:
    """The swaps of one query row.

    Attributes:
        kind: ``"token"`` or ``"block"``.
        first, second: ``[n_swaps, block_size]`` positions; swap ``s`` exchanges the
            content at ``first[s, t]`` with the content at ``second[s, t]`` for every ``t``.
        query_position: the query's position (never swapped).
        keys: for token swaps made by :func:`swap_set`, the positions they pair up (the
            swaps are then all pairs of them, in ``triu_indices`` order), else ``None``.

    Token swaps made by :func:`swap_set` are stored as their ``keys`` only: ``n(n-1)/2``
    pairs of positions are 2 × 8 bytes each (270 MB at n = 4096), so the code that scores
    them reads them in chunks (:meth:`pairs`); ``first``/``second`` are made (once) only
    when read whole.
    """

    def __init__(self, kind: SwapKind, first: Tensor | None = None, second: Tensor | None = None,
                 query_position: int = 0, keys: Tensor | None = None) -> None:
        if (first is None) != (second is None) or (first is None and keys is None):
            raise InvalidSelectionError("a SwapSet needs first and second, or the keys of "
                                        "token swaps")
        self.kind, self.query_position, self.keys = kind, query_position, keys
        self._first, self._second = first, second

    def __repr__(self) -> str:
        return (f"SwapSet(kind={self.kind!r}, n_swaps={self.n_swaps}, "
                f"block_size={self.block_size}, query_position={self.query_position})")

    @property
    def lazy(self) -> bool:
        """Whether the pairs are computed from ``keys`` on demand."""
        return self._first is None

    @property
    def n_swaps(self) -> int:
        if self.lazy:
            m = len(self.keys)
            return m * (m - 1) // 2
        return self._first.shape[0]

    @property
    def block_size(self) -> int:
        return 1 if self.lazy else self._first.shape[1]

    def pairs(self, sl: slice) -> tuple[Int[Tensor, "swap block"], Int[Tensor, "swap block"]]:
        """``(first[sl], second[sl])`` without making the whole lists (token swaps: the
        pair of swap ``s`` follows from ``s`` by the row starts of ``triu_indices``)."""
        if not self.lazy:
            return self._first[sl], self._second[sl]
        start, stop, _ = sl.indices(self.n_swaps)
        keys = self.keys
        m = len(keys)
        rows = torch.arange(m, device=keys.device)
        row_start = rows * m - rows * (rows + 1) // 2          # swaps before row i
        s = torch.arange(start, max(start, stop), device=keys.device)
        i = torch.searchsorted(row_start, s, right=True) - 1
        j = s - row_start[i] + i + 1
        return keys[i][:, None], keys[j][:, None]

    @property
    def first(self) -> Int[Tensor, "n_swaps block"]:
        if self._first is None:
            self._first, self._second = self.pairs(slice(None))
        return self._first

    @property
    def second(self) -> Int[Tensor, "n_swaps block"]:
        self.first  # noqa: B018 - makes both
        return self._second

    def permutation(self, index: int, n_pos: int) -> Int[Tensor, "pos"]:
        """Row order of the layer input after swap ``index``: row ``p`` takes row ``perm[p]``."""
        perm = torch.arange(n_pos)
        first, second = self.pairs(slice(index, index + 1))
        first, second = first[0].cpu(), second[0].cpu()
        perm[first], perm[second] = second, first
        return perm


def _eligible(query_position: int, exclude_bos: bool) -> Tensor:
    # a query at (or before) the first swappable position has no keys to swap: empty
    return torch.arange(int(exclude_bos), max(query_position, int(exclude_bos)))


@boundary
def swap_set(kind: SwapKind, query_position: int, visible: Bool[Tensor, "pos"], *,
             exclude_bos: bool = False, n_blocks: int = 8,
             device: torch.device | str | None = None) -> SwapSet:
    """The swaps for a query at ``query_position`` whose visible keys are ``visible``,
    on ``device`` (``visible``'s by default; a ``visible`` on the CPU and the scores'
    device here make the swaps without reading the device back).

    Raises:
        InvalidSelectionError: fewer than two eligible keys (token swaps) or fewer eligible
            keys than ``n_blocks`` (block swaps), or an unknown ``kind``.
    """
    if visible.ndim != 1 or visible.dtype != torch.bool or not 0 <= query_position < len(visible):
        raise InvalidSelectionError(
            f"swap_set: visible must be a 1-D bool tensor with one entry per position up to "
            f"the query's (query_position {query_position}), got a {visible.dtype} tensor of "
            f"shape {tuple(visible.shape)}")
    positions = _eligible(query_position, exclude_bos)
    n = len(positions)
    where = "after excluding BOS " if exclude_bos else ""
    device = visible.device if device is None else resolve_device(device)
    visible = visible.cpu()
    if kind == "token":
        if n < 2:
            raise InvalidSelectionError(
                f"token swaps need at least two keys before the query; the query at position "
                f"{query_position} has {n} {where}(use a longer prompt)"
            )
        keys = positions[visible[positions]]  # pairs of visible keys: see the module docstring
        if len(keys) < 2:
            raise InvalidSelectionError(
                f"no token swap has visible keys on both sides for the query at position "
                f"{query_position} (its window hides the rest); use another layer"
            )
        return SwapSet(kind=kind, query_position=query_position, keys=keys.to(device))
    elif kind == "block":
        if n_blocks < 2:
            raise InvalidSelectionError(f"block swaps need n_blocks >= 2, got {n_blocks}")
        if n < n_blocks:
            raise InvalidSelectionError(
                f"too few keys for {n_blocks} blocks: the query at position {query_position} "
                f"has {n} keys before it {where}; use fewer blocks or a longer prompt"
            )
        size = n // n_blocks
        blocks = positions[n - size * n_blocks:].view(n_blocks, size)
        a, b = torch.triu_indices(n_blocks, n_blocks, offset=1)
        first, second = blocks[a], blocks[b]
    else:
        raise InvalidSelectionError(f"unknown swap kind {kind!r}; use 'token' or 'block'")
    keep = visible[first].any(-1) & visible[second].any(-1)
    if not keep.any():
        raise InvalidSelectionError(
            f"no {kind} swap has visible keys on both sides for the query at position "
            f"{query_position} (its window hides the rest); use fewer blocks or another layer"
        )
    return SwapSet(kind=kind, first=first[keep].to(device), second=second[keep].to(device),
                   query_position=query_position)


def check_cosine(cosine: str) -> None:
    """Raise :class:`InvalidSelectionError` unless ``cosine`` is a :data:`Cosine`."""
    if cosine not in ("clamped", "scale_free"):
        raise InvalidSelectionError(f"unknown cosine {cosine!r}; use 'clamped' (paper C's "
                                    f"torch cosine, the default) or 'scale_free'")


def check_tau(tau: float) -> None:
    """Raise :class:`InvalidSelectionError` unless ``tau`` is a positive finite float64."""
    if isinstance(tau, bool) or not isinstance(tau, (int, float)) or not (
            math.isfinite(tau) and tau >= torch.finfo(torch.float64).tiny):
        raise InvalidSelectionError(
            f"tau must be a positive finite number of at least "
            f"{torch.finfo(torch.float64).tiny:.3g} (paper C: 1e-4), got {tau!r}")


@boundary
def clamped_cosines(after_first: Tensor, after_second: Tensor, clean_first: Tensor,
                    clean_second: Tensor, eps: float = COSINE_EPS) -> tuple[Tensor, Tensor]:
    """``(pos, sym)`` as paper C computes them, from the attention masses of the two groups.

    ``pos = cosine_similarity((a'_1, a'_2), (a_1, a_2))``, ``sym`` against ``(a_2, a_1)``:
    torch's formula written out for 2-vectors (each vector divided by its norm clamped at
    ``eps``, then the dot product; the tests hold it to torch's function), so that no
    ``[..., 2]`` stacks are made. All arguments broadcast.
    """
    after = torch.hypot(after_first, after_second).clamp_min(eps)
    clean = torch.hypot(clean_first, clean_second).clamp_min(eps)
    x1, x2 = after_first / after, after_second / after
    y1, y2 = clean_first / clean, clean_second / clean
    return x1 * y1 + x2 * y2, x1 * y2 + x2 * y1


@boundary
def swap_cosines(u_first: Tensor, u_second: Tensor, v_first: Tensor, v_second: Tensor
                 ) -> tuple[Tensor, Tensor]:
    """Scale-free ``(pos, sym)`` from swapped (``u``) and clean (``v``) log-masses of two groups.

    See the module docstring; all arguments broadcast together.
    """
    cu, su = _unit(u_second - u_first)
    cv, sv = _unit(v_second - v_first)
    return cu * cv + su * sv, cu * sv + su * cv


def _unit(gap: Tensor) -> tuple[Tensor, Tensor]:
    """The unit vector of ``(1, e^gap)``: ``((1 + e^{2 gap})^-½, (1 + e^{-2 gap})^-½)``."""
    return torch.rsqrt(1 + torch.exp(2 * gap)), torch.rsqrt(1 + torch.exp(-2 * gap))


class WeightedCosines:
    """Running ``Σ softmax(logw)·pos`` and ``Σ softmax(logw)·sym`` over chunks of swaps.

    The softmax runs over the last axis across every chunk added (an online softmax: the
    sums are rescaled when a larger weight logit appears), so memory does not grow with the
    number of swaps.
    """

    def __init__(self) -> None:
        self._max: Tensor | None = None
        self._z = self._pos = self._sym = None

    def add(self, logw: Float[Tensor, "... swap"], pos: Float[Tensor, "... swap"],
            sym: Float[Tensor, "... swap"]) -> None:
        chunk_max = logw.amax(-1)
        new_max = chunk_max if self._max is None else torch.maximum(self._max, chunk_max)
        w = torch.exp(logw - new_max[..., None])
        z, p, s = w.sum(-1), (w * pos).sum(-1), (w * sym).sum(-1)
        if self._max is not None:
            shrink = torch.exp(self._max - new_max)
            z, p, s = z + self._z * shrink, p + self._pos * shrink, s + self._sym * shrink
        self._max, self._z, self._pos, self._sym = new_max, z, p, s

    def result(self) -> tuple[Tensor, Tensor]:
        """``(s_POS, s_SYM)``."""
        if self._max is None:
            raise InvalidSelectionError(
                "no swaps were added; add at least one swap before asking for the result")
        return self._pos / self._z, self._sym / self._z
