r"""The positional-symbolic exclusion principle (paper A, Theorem 1), computed exactly.

Take the query at position :math:`n` and a set :math:`K` of :math:`N` key positions (those
before the query that the swap scores use). With the cross-logit matrix
:math:`L(x_n, n, x_c, p) = C[p, c]` (:mod:`.crosslogits`) and the logits
:math:`\lambda_j = C[j, j]`, paper A's deviation vectors over all permutations
:math:`\pi` of :math:`K` are

.. math::

    \delta^{pos}(\pi, j) = C[j, \pi(j)] - C[j, j], \qquad
    \delta^{sym}(\pi, j) = C[\pi(j), j] - C[j, j].

Exactly :math:`(N-1)!` permutations send :math:`j` to any given :math:`c \ne j`, so

.. math::

    \lVert\delta^{pos}\rVert^2 = (N-1)!\, S_{pos}, \quad
    S_{pos} = \sum_j \sum_{c} (C[j, c] - C[j, j])^2, \qquad
    \lVert\delta^{sym}\rVert^2 = (N-1)!\, S_{sym}, \quad
    S_{sym} = \sum_c \sum_{p} (C[p, c] - C[c, c])^2,

and Theorem 1, :math:`\mathrm{Var}(\lambda) \le (\lVert\delta^{pos}\rVert^2 +
\lVert\delta^{sym}\rVert^2) / (N!\, N)`, reads

.. math::

    \mathrm{Var}(\lambda) \le \frac{S_{pos} + S_{sym}}{N^2}.

(Proof in one line: :math:`\lambda_j - \lambda_c = (C[j,j] - C[j,c]) + (C[j,c] - C[c,c])`,
square, use :math:`(a+b)^2 \le 2a^2 + 2b^2` and
:math:`\mathrm{Var} = \frac{1}{2N^2}\sum_{j,c}(\lambda_j-\lambda_c)^2`.) A ratio
``Var / bound`` near 1 means the head is far from both behaviours relative to its spread;
a head that is nearly positional *and* nearly symbolic must have nearly constant logits.

Per frequency, :math:`C_f[p, c] = s(\cos_{pf} X_{cf} + \sin_{pf} Y_{cf})`, and both sums
reduce to :math:`O(N)` moment sums (centred, for accuracy), so the per-frequency bound of
a whole layer costs :math:`O(N \cdot \text{freq})`. :func:`exclusion_by_enumeration`
checks all of this by brute force: it re-runs the layer on every permutation of the key
rows (:math:`N \le 6`) and sums the squared deviations of the re-run logits.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import torch
from jaxtyping import Float, Int
from torch import Tensor

from .._checks import boundary
from .._inputs import as_layer
from ..capture import capture_with_layer_input, capture_with_rows
from ..decompose import apply_softcap, decompose_inputs
from ..errors import InvalidSelectionError
from ..resolved import Resolved, resolve
from ..typing import HookedModel
from .crosslogits import CrossLogitFactors

__all__ = ["Exclusion", "exclusion_from_matrix", "exclusion_from_factors",
           "exclusion_by_enumeration"]


@dataclass
class Exclusion:
    """Theorem 1's quantities for some heads (and frequencies), any leading shape.

    Attributes:
        var: ``Var(λ)`` over the ``n_keys`` logits (population variance).
        s_pos, s_sym: the sums :math:`S_{pos}`, :math:`S_{sym}` (module docstring).
        n_keys: ``N``, the number of keys permuted.
    """

    var: Tensor
    s_pos: Tensor
    s_sym: Tensor
    n_keys: int

    @property
    def bound(self) -> Tensor:
        """``(S_pos + S_sym) / N²``: Theorem 1's upper bound on ``Var(λ)``."""
        return (self.s_pos + self.s_sym) / self.n_keys**2

    @property
    def ratio(self) -> Tensor:
        """``Var / bound`` in ``[0, 1]`` (0 where the bound is 0, hence ``Var`` too)."""
        bound = self.bound
        return torch.where(bound > 0, self.var / bound.clamp(min=torch.finfo(bound.dtype).tiny),
                           torch.zeros_like(bound))

    @property
    def positional_share(self) -> Tensor:
        """``S_sym / (S_pos + S_sym)``: 1 for an exactly positional head (no positional
        deviation), 0 for an exactly symbolic one; a logit-level counterpart of the scores
        (``nan`` where both sums are 0)."""
        total = self.s_pos + self.s_sym
        return torch.where(total > 0, self.s_sym / total.clamp(min=torch.finfo(total.dtype).tiny),
                           torch.full_like(total, float("nan")))

    def norm_sq(self) -> tuple[Tensor, Tensor]:
        """``(‖δ_pos‖², ‖δ_sym‖²)`` themselves: ``(N-1)!`` times the sums (may overflow)."""
        factor = math.factorial(self.n_keys - 1)
        return self.s_pos * factor, self.s_sym * factor

    def log_norm(self) -> tuple[Tensor, Tensor]:
        """``(log ‖δ_pos‖, log ‖δ_sym‖)``, finite for any ``N``."""
        half_log_factorial = 0.5 * math.lgamma(self.n_keys)
        return 0.5 * self.s_pos.log() + half_log_factorial, 0.5 * self.s_sym.log() + half_log_factorial


@boundary
def exclusion_from_matrix(matrix: Float[Tensor, "... n n"]) -> Exclusion:
    """Theorem 1's quantities from explicit cross logits (rows: position, cols: content).

    Each sum splits around the row (column) mean ``m``:
    ``Σ_c (C[j,c] − C[j,j])² = n·(Var_c C[j,·] + (m_j − C[j,j])²)``, so no ``n × n``
    temporary is made beyond the matrix itself.
    """
    n = matrix.shape[-1]
    diag = torch.diagonal(matrix, dim1=-2, dim2=-1)

    def spread(dim: int) -> Tensor:
        var, mean = torch.var_mean(matrix, dim=dim, unbiased=False)
        return n * (var + (mean - diag).pow(2)).sum(-1)

    return Exclusion(var=diag.var(-1, unbiased=False), s_pos=spread(-1), s_sym=spread(-2),
                     n_keys=n)


def _exclusion_in_row_chunks(factors: CrossLogitFactors, positions: Int[Tensor, "n"]
                             ) -> Exclusion:
    """:func:`exclusion_from_matrix` of ``C[positions, positions]`` without the matrix:
    rows in chunks of at most ``factors.max_matrix_elements`` entries; each row's spread is
    the row's own, each column's is merged over the chunks (Chan et al.: exact up to
    rounding)."""
    n = len(positions)
    b, h = factors.x.shape[:2]
    diag = factors.head_at(positions, positions)                       # [b, h, n]
    step = max(1, factors.max_matrix_elements // max(b * h * n, 1))
    s_pos = torch.zeros_like(diag[..., 0])
    col_n, col_mean, col_m2 = 0, torch.zeros_like(diag), torch.zeros_like(diag)
    for start in range(0, n, step):
        rows = positions[start : start + step]
        block = factors.head_at(rows[:, None].expand(-1, n), positions[None, :].expand(len(rows), -1))
        var, mean = torch.var_mean(block, dim=-1, unbiased=False)      # [b, h, r]
        s_pos += n * (var + (mean - diag[..., start : start + len(rows)]).pow(2)).sum(-1)
        c_var, c_mean = torch.var_mean(block, dim=-2, unbiased=False)  # [b, h, n]
        r = len(rows)
        total = col_n + r
        delta = c_mean - col_mean
        col_mean = col_mean + delta * (r / total)
        col_m2 = col_m2 + c_var * r + delta.pow(2) * (col_n * r / total)
        col_n = total
    s_sym = n * (col_m2 / n + (col_mean - diag).pow(2)).sum(-1)
    return Exclusion(var=diag.var(-1, unbiased=False), s_pos=s_pos, s_sym=s_sym, n_keys=n)


def _check_keys(positions: Tensor, query_position: int) -> None:
    if len(positions) < 2 or len(set(positions.tolist())) != len(positions):
        raise InvalidSelectionError("the exclusion needs at least two distinct key positions")
    if int(positions.max()) >= query_position or int(positions.min()) < 0:
        raise InvalidSelectionError(
            f"the exclusion keys must come before the query at position {query_position}, "
            f"got {positions.tolist()}"
        )


@boundary
def exclusion_from_factors(factors: CrossLogitFactors, positions: Int[Tensor, "n"] | range, *,
                           per_frequency: bool = True, max_elements: int | None = None,
                           trusted: bool = False) -> tuple[Exclusion, Exclusion | None]:
    """Theorem 1 for each head (``[batch, head_index]``) and frequency (``[..., freq]``).

    ``positions`` are the keys permuted (a tensor, or a ``range`` of them); they must all
    be visible to the query. ``max_elements`` bounds the per-frequency temporaries (``[batch, head, n, freq]``
    tables): frequencies are taken in chunks that fit (``None``: all at once).
    ``trusted``: the keys come from :func:`~lens_possym.scores.engine.exclusion_keys`
    (distinct, before the query, visible by construction), so they are not checked again:
    the checks read values back from the device (four host-device synchronisations).
    """
    span = None
    if not isinstance(positions, range) and not (
            isinstance(positions, Tensor) and positions.ndim == 1
            and not positions.dtype.is_floating_point and positions.dtype != torch.bool):
        raise InvalidSelectionError(
            f"exclusion_from_factors: positions must be a 1-D integer tensor or a range of key "
            f"positions, got {positions!r}")
    if isinstance(positions, range):       # a run of positions known on the host
        span = positions
        positions = torch.arange(span.start, span.stop, device=factors.x.device)
    if not trusted:
        _check_keys(positions, factors.query_position)
        if not bool(factors.visible[positions].all()):
            raise InvalidSelectionError("the exclusion keys must all be visible to the query")
    if factors.holds_full:
        head = exclusion_from_matrix(factors.head_matrix(positions, span=span))
    else:
        head = _exclusion_in_row_chunks(factors, positions)
    if not per_frequency:
        return head, None
    b, h, _, f = factors.x.shape
    n = len(positions)
    step = f if max_elements is None else max(1, min(f, max_elements // max(b * h * n, 1)))
    parts = [_freq_exclusion(factors, positions, slice(f0, min(f0 + step, f)))
             for f0 in range(0, f, step)]
    return head, Exclusion(var=torch.cat([p.var for p in parts], -1),
                           s_pos=torch.cat([p.s_pos for p in parts], -1),
                           s_sym=torch.cat([p.s_sym for p in parts], -1), n_keys=n)


def _freq_exclusion(factors: CrossLogitFactors, positions: Int[Tensor, "n"], freqs: slice
                    ) -> Exclusion:
    """The per-frequency sums of :func:`exclusion_from_factors` for the ids ``freqs``."""
    n = len(positions)
    s = factors.scale
    cos, sin = factors.cos[positions, freqs], factors.sin[positions, freqs]  # [n, f]
    x = factors.x[:, :, positions, freqs]                                   # [b, h, n, f]
    y = factors.y[:, :, positions, freqs]
    xc, yc = x - x.mean(-2, keepdim=True), y - y.mean(-2, keepdim=True)
    sxx, sxy, syy = (xc * xc).sum(-2), (xc * yc).sum(-2), (yc * yc).sum(-2)
    s_pos = (cos**2 * (sxx[..., None, :] + n * xc**2)
             + 2 * cos * sin * (sxy[..., None, :] + n * xc * yc)
             + sin**2 * (syy[..., None, :] + n * yc**2)).sum(-2) * s**2
    gc, gs = cos - cos.mean(0), sin - sin.mean(0)
    scc, scs, sss = (gc * gc).sum(0), (gc * gs).sum(0), (gs * gs).sum(0)
    s_sym = (x**2 * (scc + n * gc**2) + 2 * x * y * (scs + n * gc * gs)
             + y**2 * (sss + n * gs**2)).sum(-2) * s**2
    diag = (cos * x + sin * y) * s
    var = diag.var(-2, unbiased=False)
    return Exclusion(var=var, s_pos=s_pos, s_sym=s_sym, n_keys=n)


@boundary
def exclusion_by_enumeration(model: HookedModel | Resolved, tokens: Tensor, layer: int, heads: list[int],
                             positions: Int[Tensor, "n"], *, query_position: int = -1
                             ) -> tuple[Exclusion, Exclusion]:
    """Theorem 1 by brute force: re-run ``layer`` on every permutation of the key rows.

    For each permutation ``π`` of ``positions`` the rows of ``blocks.{layer}.hook_resid_pre``
    are permuted, the layer's queries and keys are recomputed by the model, and the logits
    of the query row are summed from their per-frequency terms (softcapped for the head).
    The squared deviations are summed over all permutations and keys, as in paper A's
    definition, and divided by ``(N-1)!`` so the result is comparable with
    :func:`exclusion_from_factors`. Only for ``N <= 6`` (720 re-runs).

    Returns:
        ``(head, per_frequency)`` :class:`Exclusion` for prompt ``tokens`` (``[1, pos]``).
    """
    resolved = resolve(model)
    layer = as_layer(layer, len(resolved.specs))
    n = len(positions)
    if n > 6:
        raise InvalidSelectionError(f"enumeration over {n}! permutations is too slow; use N <= 6")
    clean, residual = capture_with_layer_input(resolved, tokens, layer, query_position)
    _check_keys(positions, int(clean.query_positions[0]))
    n_pos = tokens.shape[1]
    perms = list(itertools.permutations(range(n)))
    rows = torch.arange(n_pos).repeat(len(perms), 1)                    # [perms, pos]
    index = torch.tensor(perms)
    rows[:, positions] = positions[index]        # position K[j] gets content K[π(j)]

    permuted = capture_with_rows(resolved, tokens, layer, query_position, residual, rows)

    def logits(inputs) -> tuple[Tensor, Tensor]:
        terms = decompose_inputs(inputs, heads, dtype=torch.float64).terms[:, :, 0]  # [b,h,p,f]
        return apply_softcap(terms.sum(-1), inputs.spec.softcap), terms.movedim(-1, 2)

    clean_head, clean_freq = logits(clean)                               # [1,h,p], [1,h,f,p]
    perm_head, perm_freq = logits(permuted)                              # [P,h,p], [P,h,f,p]
    inverse = torch.argsort(index, dim=1)
    # δ_pos(π, j): logit at K[j] when it holds K[π(j)], minus the clean logit at K[j].
    # δ_sym(π, j): content K[j] at K[π(j)], i.e. in the run of π⁻¹, minus the same.
    by_perm = {tuple(p): i for i, p in enumerate(perms)}
    inv_run = torch.tensor([by_perm[tuple(inv.tolist())] for inv in inverse])

    def sums(clean_l: Tensor, perm_l: Tensor) -> Exclusion:
        at_keys = perm_l[..., positions]                                 # [P, ..., n]
        base = clean_l[0][..., positions]                                # [..., n]
        s_pos = (at_keys - base).pow(2).sum(-1).sum(0)
        # in the run of π⁻¹, content K[j] stands at K[π(j)]
        moved = at_keys[inv_run]                                         # run of π⁻¹ per π
        gathered = torch.gather(moved, -1, index.view(len(perms), *([1] * (moved.ndim - 2)), n)
                                .expand_as(moved))
        s_sym = (gathered - base).pow(2).sum(-1).sum(0)
        factor = math.factorial(n - 1)
        return Exclusion(var=base.var(-1, unbiased=False), s_pos=s_pos / factor,
                         s_sym=s_sym / factor, n_keys=n)

    return sums(clean_head, perm_head), sums(clean_freq, perm_freq)
