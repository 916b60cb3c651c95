"""Keys picked per query head for the non-RoPE schemes (multi-query and grouped-query
attention), the counterpart of :meth:`~lens_possym.rope.RopeSpec.kv_index`. Their tensors
are read by :func:`lens_possym.capture.run_capturing`: one pass, hooks always removed."""

from __future__ import annotations

from typing import Sequence

from torch import Tensor

from .._attention import kv_heads

__all__ = ["keys_for_heads"]


def keys_for_heads(k: Tensor, heads: Sequence[int], n_heads: int) -> Tensor:
    """Keys ``[batch, pos, kv_head, d_head]`` picked for query ``heads`` (multi-query and
    grouped-query attention: query head ``h`` reads KV head ``h // (n_heads // n_kv)``)."""
    return k[:, :, kv_heads(heads, n_heads, k.shape[2])]
