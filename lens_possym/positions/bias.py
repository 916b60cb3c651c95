r"""Additive position biases inside the head: ALiBi, T5's bucketed bias, per-offset tables.

The logit of query :math:`n` on key :math:`m` is :math:`s\,q_n\cdot k_m + b_h(n - m)`:
a content term plus a Toeplitz matrix (constant along diagonals) per head. So

.. math:: C[p, c] = s\,q_n\cdot k_c + b_h(n - p).

* **ALiBi** (Press et al.): :math:`b_h(\delta) = -m_h |\delta|` with slopes
  :math:`m_h = 2^{-8(h+1)/H}` for :math:`H` a power of two (:func:`alibi_slopes` also does
  the other case as Bloom does). Causal models only see :math:`\delta \ge 0`, so the model
  may add :math:`m_h\cdot(\text{key position})` instead (Bloom, Falcon) or
  :math:`m_h\,(m - (N-1))` (MPT): these differ from :math:`-m_h(n-m)` by a constant per
  query row, which the softmax ignores; :attr:`AdditiveBias.reference` says which the model
  adds, so the terms add up to the model's own scores.
* **T5**: :math:`b_h(\delta) = T[h, \mathrm{bucket}(\delta)]` with log-spaced buckets
  (:func:`t5_bucket`, Hugging Face's ``_relative_position_bucket``).
* **Table**: an unbucketed learned :math:`b_h(\delta)`, one entry per offset.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

import torch
from jaxtyping import Float, Int
from torch import Tensor

from .._checks import boundary
from ..errors import InvalidSelectionError
from .base import PositionalScheme

__all__ = ["AdditiveBias", "alibi_slopes", "t5_bucket"]

Reference = Literal["query", "zero", "last"]


def alibi_slopes(n_heads: int) -> Float[Tensor, "head_index"]:
    """ALiBi slopes: ``2^{-8(h+1)/H}``; for ``H`` not a power of two, the closest lower power's
    slopes followed by every other slope of twice that (Press et al.; Bloom's code)."""
    if n_heads < 1:
        raise InvalidSelectionError(f"ALiBi needs at least one head, got {n_heads}")
    closest = 2 ** math.floor(math.log2(n_heads))
    base = 2.0 ** (-(2.0 ** -(math.log2(closest) - 3)))
    slopes = [base ** (i + 1) for i in range(closest)]
    if closest != n_heads:
        extra = 2.0 ** (-(2.0 ** -(math.log2(2 * closest) - 3)))
        slopes += [extra ** (2 * i + 1) for i in range(n_heads - closest)]
    return torch.tensor(slopes, dtype=torch.float64)


@boundary
def t5_bucket(delta: Int[Tensor, "*idx"], *, bidirectional: bool, num_buckets: int = 32,
              max_distance: int = 128) -> Int[Tensor, "*idx"]:
    """T5's bucket of the offset ``delta = m - n`` (key minus query), as Hugging Face has it.

    Raises:
        InvalidSelectionError: fewer than 2 buckets per direction (``num_buckets`` below 2,
            or below 4 when ``bidirectional``), or ``max_distance`` below the exact
            buckets (half the buckets of a direction).
    """
    low = 4 if bidirectional else 2
    per_side = num_buckets // 2 if bidirectional else num_buckets
    if isinstance(num_buckets, bool) or not isinstance(num_buckets, int) or num_buckets < low:
        raise InvalidSelectionError(
            f"t5_bucket: num_buckets must be an integer >= {low}"
            f"{' (bidirectional: half each way)' if bidirectional else ''}, got {num_buckets!r}")
    if isinstance(max_distance, bool) or not isinstance(max_distance, int) \
            or max_distance < per_side // 2:
        raise InvalidSelectionError(
            f"t5_bucket: max_distance must be an integer at least the exact buckets "
            f"({per_side // 2}), got {max_distance!r}")
    buckets = torch.zeros_like(delta)
    if bidirectional:
        num_buckets //= 2
        buckets = buckets + (delta > 0).long() * num_buckets
        distance = delta.abs()
    else:
        distance = -torch.clamp(delta, max=0)
    max_exact = num_buckets // 2
    small = distance < max_exact
    large = max_exact + (
        torch.log(distance.float().clamp(min=1) / max_exact) / math.log(max_distance / max_exact)
        * (num_buckets - max_exact)).long()
    large = torch.clamp(large, max=num_buckets - 1)
    return buckets + torch.where(small, distance, large)


@dataclass(frozen=True, eq=False)
class AdditiveBias(PositionalScheme):
    r"""A head-wise additive bias :math:`b_h(n - m)` inside the head.

    Build one with :meth:`alibi`, :meth:`t5` or :meth:`table`.

    Attributes:
        kind: ``"alibi"``, ``"t5"`` or ``"table"``.
        slopes: ``[head_index]`` ALiBi slopes (``kind="alibi"``).
        symmetric: ALiBi penalises ``|n - m|`` both ways (encoders) rather than only
            the past.
        reference: what the model subtracts from the key position (ALiBi): ``"query"``
            (:math:`-m_h(n-m)`), ``"zero"`` (:math:`m_h m`, Bloom) or ``"last"``
            (:math:`m_h(m - N + 1)`, MPT); all give the same attention.
        values: ``[head_index, bucket]`` T5 table or ``[head_index, offset]`` per-offset
            table (offset ``n - m``, ``0..`` for causal heads).
        bidirectional, num_buckets, max_distance: T5's bucketing.
    """

    kind: Literal["alibi", "t5", "table"] = "alibi"
    slopes: Tensor | None = None
    symmetric: bool = False
    reference: Reference = "query"
    values: Tensor | None = None
    bidirectional: bool = False
    num_buckets: int = 32
    max_distance: int = 128
    scale: float = 1.0
    window: int | None = None
    site: str = "inside"
    name: str = field(default="alibi")

    @classmethod
    def alibi(cls, slopes: Tensor, *, symmetric: bool = False, reference: Reference = "query",
              scale: float = 1.0) -> "AdditiveBias":
        return cls(kind="alibi", slopes=torch.as_tensor(slopes, dtype=torch.float64),
                   symmetric=symmetric, reference=reference, scale=scale, name="alibi")

    @classmethod
    def t5(cls, values: Tensor, *, bidirectional: bool = False, num_buckets: int | None = None,
           max_distance: int = 128, scale: float = 1.0) -> "AdditiveBias":
        values = torch.as_tensor(values, dtype=torch.float64)
        return cls(kind="t5", values=values, bidirectional=bidirectional,
                   num_buckets=num_buckets or values.shape[-1], max_distance=max_distance,
                   scale=scale, name="t5")

    @classmethod
    def table(cls, values: Tensor, *, scale: float = 1.0) -> "AdditiveBias":
        return cls(kind="table", values=torch.as_tensor(values, dtype=torch.float64),
                   scale=scale, name="offset-table")

    @property
    def n_heads(self) -> int:
        return len(self.slopes) if self.kind == "alibi" else self.values.shape[0]

    def offset_bias(self, delta: Int[Tensor, "*idx"]) -> Float[Tensor, "head_index *idx"]:
        """:math:`b_h(\\delta)` for offsets ``delta = n - m`` (query minus key)."""
        if self.kind == "alibi":
            distance = delta.abs() if self.symmetric else delta
            return -self.slopes.view(-1, *[1] * delta.dim()) * distance.double()
        if self.kind == "t5":
            bucket = t5_bucket(-delta, bidirectional=self.bidirectional,
                               num_buckets=self.num_buckets, max_distance=self.max_distance)
            return self.values[:, bucket]
        if (delta < 0).any() or int(delta.max()) >= self.values.shape[-1]:
            raise InvalidSelectionError(
                f"the offset table covers offsets 0..{self.values.shape[-1] - 1}; offsets "
                f"{int(delta.min())}..{int(delta.max())} were asked for (use a shorter input)")
        return self.values[:, delta]

    def bias(self, query_positions: Tensor, key_positions: Tensor
             ) -> Float[Tensor, "head_index query_pos key_pos"]:
        delta = query_positions[:, None] - key_positions[None, :]
        out = self.offset_bias(delta)
        if self.kind == "alibi" and self.reference != "query":
            # Bloom/Falcon add slope·m, MPT slope·(m − N + 1): the same up to a row constant
            shift = query_positions if self.reference == "zero" else \
                query_positions - int(key_positions.max())
            out = out + self.slopes[:, None, None] * shift[None, :, None].double()
        return out
