r"""The cross-logit matrix of one query row: what the head would give any content at any position.

For a layer, query head :math:`h` and the query at position :math:`n`, let
:math:`\hat q = R(n)\,q_n` be the rotated query and :math:`\tilde k_c` the *un-rotated* key
computed from row :math:`c` of the layer input. The cross-logit matrix is

.. math::

    C[p, c] = s \cdot \langle \hat q,\; R(p)\,\tilde k_c \rangle ,

the logit the head gives the content of row :math:`c` if it stood at position :math:`p`
(its diagonal is the clean logit row). Per frequency :math:`f`, with the model's own
rotation tables :math:`(\cos_{pf}, \sin_{pf})` and the pairs
:math:`\hat q_f = (\hat q_a, \hat q_b)`, :math:`\tilde k_{c,f} = (k_a, k_b)`:

.. math::

    C_f[p, c] = s\,\big(\cos_{pf}\, X_{cf} + \sin_{pf}\, Y_{cf}\big), \qquad
    X_{cf} = \hat q_a k_a + \hat q_b k_b, \quad Y_{cf} = \hat q_b k_a - \hat q_a k_b ,

a rank-2 outer product per frequency. A partial-rotary tail is one more "frequency" with
:math:`\cos = 1, \sin = 0, X_c = \langle \hat q_{tail}, k_{c,tail}\rangle, Y = 0`, so
:math:`C = \mathrm{softcap}(\sum_f C_f)` over all ids, exactly as the model adds its terms.

Because q, k and v are row-wise functions of the layer input, swapping rows :math:`i` and
:math:`j` of that input changes the last-row logits at :math:`i` and :math:`j` to
:math:`C[i, j]` and :math:`C[j, i]` and nothing else: every swap score follows from these
factors without re-running the model (see :mod:`lens_possym.scores.exact`).

:class:`CrossLogitFactors` stores only the ``O(pos · freq)`` factors and evaluates entries on
demand, so a per-frequency analysis never holds a ``pos × pos × freq`` tensor unless asked.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

import torch
from einops import einsum
from jaxtyping import Bool, Float, Int
from torch import Tensor

from .._checks import boundary
from .._ids import as_int
from .._inputs import as_heads
from ..capture import AttentionInputs
from ..errors import InvalidSelectionError
from ..decompose import apply_softcap
from ..rope import RopeSpec
from ..rope.geometry import cross_factors

__all__ = ["CrossLogitFactors", "cross_logit_factors"]


@dataclass
class CrossLogitFactors:
    """Factors of the cross-logit matrices of one layer's query row, for chosen heads.

    Attributes:
        cos, sin: ``[pos, freq]`` rotation tables at every key position (the model's own,
            in the computation dtype; the tail column is 1 and 0).
        x, y: ``[batch, head_index, pos, freq]`` content factors of each key row.
        scale: the layer's factor on ``q·k`` (already applied by the methods).
        softcap: the layer's cap on the *summed* logits, or ``None``.
        visible: ``[pos]`` positions the query row may attend to (causal, window).
        visible_span: the same as a ``range`` known on the host, or ``None`` (not known
            there): :meth:`head_full` then computes only those rows, the others being
            ``-inf`` whatever their column (a window's layer computes a quarter of ``C``
            at n = 2,048 in gemma 3), without reading ``visible`` back from a device.
        heads: the query heads along ``head_index``.
        query_position: the query's position ``n``.
        spec: the layer's geometry.
        max_matrix_elements: the most elements of a whole-head ``[batch, head_index, pos,
            pos]`` matrix to hold (``None``: no bound). Above it, :meth:`head_at` and
            :meth:`head_diagonal` compute their entries from the factors, in pieces of at
            most ``max_matrix_elements`` intermediates, and the full matrix is never made
            (long contexts: at n = 8192 it is 2 GiB per head in float64).
    """

    #: A piece of :meth:`head_at` is computed as whole rows (or columns) of ``C`` by one
    #: matrix product when those hold at most this many entries per entry asked: a BLAS
    #: product makes an entry ~45x faster than the gathers of the entry-by-entry path
    #: (n = 8192, 128 frequencies, one thread), so a few spare entries still win.
    BLOCK_OVERCOMPUTE = 8

    cos: Float[Tensor, "pos freq"]
    sin: Float[Tensor, "pos freq"]
    x: Float[Tensor, "batch head_index pos freq"]
    y: Float[Tensor, "batch head_index pos freq"]
    scale: float
    softcap: float | None
    visible: Bool[Tensor, "pos"]
    heads: list[int]
    query_position: int
    spec: RopeSpec
    max_matrix_elements: int | None = None
    visible_span: range | None = None
    _full: Tensor | None = field(default=None, init=False, repr=False)

    @property
    def holds_full(self) -> bool:
        """Whether the whole-head matrix fits ``max_matrix_elements`` (then it is made once
        and kept)."""
        b, h, p, _ = self.x.shape
        return self.max_matrix_elements is None or b * h * p * p <= self.max_matrix_elements

    @property
    def n_freqs(self) -> int:
        return self.x.shape[-1]

    @property
    def n_pos(self) -> int:
        return self.x.shape[-2]

    def freq_at(self, rows: Int[Tensor, "*idx"], cols: Int[Tensor, "*idx"],
                freqs: slice = slice(None)) -> Float[Tensor, "batch head_index freq *idx"]:
        r"""Per-frequency entries :math:`C_f[\mathrm{rows}, \mathrm{cols}]` (no softcap).

        Entries whose row (position) is not visible to the query are ``-inf``: content
        moved there is masked, like any key at that position.
        """
        cos = self.cos[:, freqs][rows]            # [*idx, f]
        sin = self.sin[:, freqs][rows]
        x = self.x[..., freqs][:, :, cols]        # [b, h, *idx, f]
        y = self.y[..., freqs][:, :, cols]
        values = (cos * x + sin * y) * self.scale
        values = values.masked_fill(~self.visible[rows][..., None], float("-inf"))
        return values.movedim(-1, 2)

    def head_at(self, rows: Int[Tensor, "*idx"], cols: Int[Tensor, "*idx"]
                ) -> Float[Tensor, "batch head_index *idx"]:
        """Whole-head entries ``C[rows, cols]``: sum over frequencies, then the softcap."""
        if self.holds_full:
            return self.head_full()[:, :, rows, cols]
        b, h, _, f = self.x.shape
        shape = rows.shape
        rows, cols = rows.reshape(-1), cols.reshape(-1)
        step = max(1, self.max_matrix_elements // max(b * h * f, 1))
        pieces = [self._entries(rows[s : s + step], cols[s : s + step])
                  for s in range(0, len(rows), step)]
        return torch.cat(pieces, -1).reshape(b, h, *shape)

    def _entries(self, rows: Int[Tensor, "idx"], cols: Int[Tensor, "idx"]
                 ) -> Float[Tensor, "batch head_index idx"]:
        """One piece of :meth:`head_at` when the full matrix is not held.

        Token swaps come in order (a few rows ``i``, every column ``j > i``, and the
        transpose), and the exclusion reads whole rows: such a piece touches few distinct
        rows or columns, and is those rows (columns) of ``C``, one matrix product with the
        same operands as :meth:`head_full`, gathered. Scattered entries are computed one
        by one from the factors.
        """
        b, h, p, f = self.x.shape
        unique_rows, row_of = rows.unique(return_inverse=True)
        unique_cols, col_of = cols.unique(return_inverse=True)
        few = min(len(unique_rows), len(unique_cols))
        if (few * p <= self.BLOCK_OVERCOMPUTE * len(rows)
                and b * h * few * p <= self.max_matrix_elements):
            tables, factors = self._stacked
            if len(unique_rows) <= len(unique_cols):
                values = (tables[unique_rows] @ factors)[:, :, row_of, cols]   # rows of C
            else:
                values = (tables @ factors[..., unique_cols])[:, :, rows, col_of]  # columns
        else:
            values = einsum(self.cos[rows], self.x[:, :, cols], "idx freq, batch head_index "
                            "idx freq -> batch head_index idx")
            values += einsum(self.sin[rows], self.y[:, :, cols], "idx freq, batch head_index "
                             "idx freq -> batch head_index idx")
        values = apply_softcap(values.mul_(self.scale), self.softcap)
        return values.masked_fill_(~self.visible[rows], float("-inf"))

    @cached_property
    def _stacked(self) -> tuple[Float[Tensor, "pos two_freq"],
                                Float[Tensor, "batch head_index two_freq pos"]]:
        """``C / scale = tables @ factors`` before the cap and the mask: the operands of
        every whole-row product, stacked once."""
        return (torch.cat([self.cos, self.sin], dim=-1),
                torch.cat([self.x, self.y], dim=-1).transpose(-1, -2))

    def head_full(self) -> Float[Tensor, "batch head_index pos pos"]:
        """The whole ``C`` (rows: position, cols: content) as two matrix products.

        Computed once and kept: ``[batch, head_index, pos, pos]`` is small next to the
        per-frequency work, and every whole-head quantity reads it.
        """
        if not self.holds_full:
            b, h, p, _ = self.x.shape
            raise InvalidSelectionError(
                f"the whole-head matrix [{b}, {h}, {p}, {p}] has more than max_matrix_elements "
                f"= {self.max_matrix_elements} elements; read it with head_at or head_diagonal "
                "(computed in pieces), or raise max_matrix_elements")
        if self._full is None:
            tables, factors = self._stacked                                   # [p, 2f], [b, h, 2f, p]
            rows = self.visible_span
            if rows is None or len(rows) == self.n_pos:
                full = (tables @ factors).mul_(self.scale)                    # one allocation
                full = apply_softcap(full, self.softcap)
                self._full = full.masked_fill_(~self.visible[:, None], float("-inf"))
            else:   # a window: only its rows are finite (5 layers of 6 in gemma 3 at 2,048)
                b, h, _, p = factors.shape
                self._full = factors.new_full((b, h, p, p), float("-inf"))
                rows = slice(rows.start, rows.stop)
                block = (tables[rows] @ factors).mul_(self.scale)
                self._full[:, :, rows] = apply_softcap(block, self.softcap)
        return self._full

    def frequency_full(self) -> Float[Tensor, "batch head_index freq pos pos"]:
        """Every per-frequency matrix ``C_f`` (rows: position, cols: content; no softcap):
        what a matrix-based layer supplies as its frequency terms (the protocol of
        :mod:`lens_possym.scores.sources`). ``pos × pos × freq`` entries: the closed form
        never needs them (it reads the factors), a comparison can."""
        return self.freq_matrix(torch.arange(self.n_pos, device=self.x.device))

    def freq_matrix(self, positions: Int[Tensor, "n"], freqs: slice = slice(None)
                    ) -> Float[Tensor, "batch head_index freq n n"]:
        """``C_f`` restricted to ``positions × positions`` (rows: position, cols: content)."""
        rows = positions[:, None].expand(-1, len(positions))
        return self.freq_at(rows, rows.T, freqs)

    def head_matrix(self, positions: Int[Tensor, "n"], *, span: range | None = None
                    ) -> Float[Tensor, "batch head_index n n"]:
        """``C`` restricted to ``positions × positions`` (a view when they are a range).
        ``span``: the ``range`` the positions are, when the caller knows it on the host
        (finding it out reads the positions back from the device)."""
        span = span if span is not None else positions_range(positions)
        if span is not None:
            return self.head_full()[..., span.start : span.stop, span.start : span.stop]
        rows = positions[:, None].expand(-1, len(positions))
        return self.head_at(rows, rows.T)

    def freq_diagonal(self, freqs: slice = slice(None)) -> Float[Tensor, "batch head_index freq pos"]:
        """The clean per-frequency logit rows ``C_f[p, p]`` (``-inf`` where masked)."""
        index = torch.arange(self.n_pos, device=self.x.device)
        return self.freq_at(index, index, freqs)

    def attention_after_swap(self, first: Int[Tensor, "block"], second: Int[Tensor, "block"]
                             ) -> tuple[Float[Tensor, "batch head_index pos"],
                                        Float[Tensor, "batch head_index pos"]]:
        """The query row's attention before and after swapping the contents of two groups.

        After the swap, the logit at ``first[t]`` is ``C[first[t], second[t]]`` and at
        ``second[t]`` it is ``C[second[t], first[t]]``; every other logit is unchanged.
        """
        logits = self.head_diagonal()
        swapped = logits.clone()
        swapped[..., first] = self.head_at(first, second)
        swapped[..., second] = self.head_at(second, first)
        return torch.softmax(logits, -1), torch.softmax(swapped, -1)

    def head_diagonal(self) -> Float[Tensor, "batch head_index pos"]:
        """The clean logit row ``C[p, p]`` (``-inf`` where masked): the model's scores."""
        if not self.holds_full:
            values = (einsum(self.cos, self.x, "pos freq, batch head_index pos freq -> batch "
                             "head_index pos")
                      + einsum(self.sin, self.y, "pos freq, batch head_index pos freq -> batch "
                               "head_index pos"))
            values = apply_softcap(values * self.scale, self.softcap)
            return values.masked_fill(~self.visible, float("-inf"))
        index = torch.arange(self.n_pos, device=self.x.device)
        return self.head_at(index, index)


def positions_range(positions: Int[Tensor, "n"]) -> range | None:
    """``positions`` as a ``range`` when they are consecutive (a block of ``C`` is then a
    view, read in place), else ``None``. Reads the positions back from their device."""
    start, n = int(positions[0]), len(positions)
    if torch.equal(positions, torch.arange(start, start + n, device=positions.device)):
        return range(start, start + n)
    return None


@boundary
def cross_logit_factors(inputs: AttentionInputs, heads: list[int], *, query_row: int = 0,
                        dtype: torch.dtype = torch.float64,
                        max_matrix_elements: int | None = None) -> CrossLogitFactors:
    """The factors of ``C`` for the query row ``query_row`` of captured inputs.

    The query is rotated with the model's own table at its position and in the model's
    dtype (so the diagonal reproduces the model's scores to rounding); everything after
    that is computed in ``dtype``.
    """
    spec = inputs.spec
    heads = as_heads(heads, spec.n_heads, spec.layer)
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise InvalidSelectionError(f"dtype must be a floating torch.dtype (torch.float64), "
                                    f"got {dtype!r}")
    query_row = as_int(query_row, "query_row")
    if not -len(inputs.query_positions) <= query_row < len(inputs.query_positions):
        raise InvalidSelectionError(
            f"query_row {query_row} out of range: the capture holds "
            f"{len(inputs.query_positions)} query rows")
    query_row %= len(inputs.query_positions)
    device = inputs.k.device
    qpos = inputs.query_positions[query_row : query_row + 1].to(device)
    q = inputs.q[:, query_row][:, heads]                                  # [b, h, d]
    k = inputs.k_for_heads(heads)                                         # [b, p, h, d]
    cos, sin, x, y = cross_factors(q, k, spec, qpos, dtype)
    visible = inputs.mask()[query_row].to(device)
    qpos_host, window = inputs.query_position(query_row), spec.window or None
    span = range(0 if window is None else max(0, qpos_host - window + 1),
                 min(qpos_host + 1, inputs.k.shape[1]))     # key positions are arange(n)
    return CrossLogitFactors(
        cos=cos, sin=sin, x=x, y=y, scale=float(spec.scale), softcap=spec.softcap,
        visible=visible, heads=list(heads), query_position=inputs.query_position(query_row),
        spec=spec,
        max_matrix_elements=max_matrix_elements, visible_span=span,
    )
