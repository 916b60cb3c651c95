"""Attention views (circuitsvis), rendered as HTML with their JavaScript inlined.

circuitsvis objects probe the network when a notebook displays them; ``local_src`` is the
same view with its JavaScript inlined, so nothing is fetched when the page opens.
"""

from __future__ import annotations

import torch

from .._ids import head_name
from ..typing import HookedModel

__all__ = ["attention_view_html"]


def attention_view_html(model: HookedModel, tokens: torch.Tensor,
                        heads: list[tuple[int, int]]) -> str:
    """circuitsvis ``attention_heads`` of some ``(layer, head)`` on the first prompt, inline.

    ``tokens`` is ``[batch, pos]``; the view shows each head's ``[query_pos, key_pos]``
    pattern on ``tokens[0]``, labelled ``L.H`` (:func:`lens_possym._ids.head_name`).
    """
    import circuitsvis.attention as cv_attention

    first = tokens[:1]
    layers = sorted({layer for layer, _ in heads})
    names = [f"blocks.{layer}.attn.hook_pattern" for layer in layers]
    with torch.no_grad():
        _, cache = model.run_with_cache(first, names_filter=names)
    patterns = torch.stack([cache[f"blocks.{layer}.attn.hook_pattern"][0, head]
                            for layer, head in heads]).float().cpu()
    words = [str(t) for t in model.to_str_tokens(first[0])]
    rendered = cv_attention.attention_heads(
        patterns, words, attention_head_names=[head_name(layer, head) for layer, head in heads])
    return rendered.local_src
