"""What every attention layer shares, whatever its positional scheme: which keys a query
sees (causal, and inside a sliding window) and which KV head a query head reads (grouped-
and multi-query attention). Written once here; RoPE specs (:mod:`lens_possym.rope`), the
schemes (:mod:`lens_possym.positions`) and the intervention engine all use these.
"""

from __future__ import annotations

from typing import Sequence

import torch
from jaxtyping import Bool, Int
from torch import Tensor

__all__ = ["visible_mask", "kv_heads"]


def visible_mask(query_positions: Int[Tensor, "query_pos"], key_positions: Int[Tensor, "key_pos"],
                 window: int | None = None) -> Bool[Tensor, "query_pos key_pos"]:
    """Keys ``m`` each query ``n`` may attend to: ``m <= n`` and, with a sliding window,
    ``n - m < window`` (on ``key_positions``' device)."""
    qp = query_positions.to(key_positions.device)[:, None]
    kp = key_positions[None, :]
    allowed = kp <= qp
    if window is not None:
        allowed &= (qp - kp) < window
    return allowed


def kv_heads(heads: Tensor | Sequence[int] | None, n_heads: int, n_kv_heads: int
             ) -> Int[Tensor, "head_index"]:
    """The KV head each query head of ``heads`` (all by default) reads, as a long tensor:
    query head ``h`` reads ``h // (n_heads // n_kv_heads)`` (Hugging Face's ``repeat_kv``
    order)."""
    heads_t = torch.arange(n_heads) if heads is None else torch.as_tensor(heads)
    return heads_t // (n_heads // n_kv_heads)
