"""NoPE: no positional encoding at all (position enters only through the causal mask)."""

from __future__ import annotations

from dataclasses import dataclass

from .base import PositionalScheme

__all__ = ["NoPE"]


@dataclass(frozen=True)
class NoPE(PositionalScheme):
    r"""A head whose logits depend on content only: :math:`C[p, c] = s\,q_n\cdot k_c`.

    Every swap moves the attention with the content, so such a head scores
    :math:`s_{SYM} = 1` (up to swaps whose two attention masses are equal).
    """

    scale: float = 1.0
    window: int | None = None
    name: str = "nope"
    site: str = "inside"
