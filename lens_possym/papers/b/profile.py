r"""Paper B's positional/symbolic profile of every head of a scheme encoder
(:func:`lens_possym.swap_scores`, at the site the scheme allows)."""

from __future__ import annotations

from typing import Any

from torch import Tensor

from ...scores import swap_scores
from .encoder import SchemeEncoder

__all__ = ["profile_site", "encoder_profile"]


def profile_site(model: SchemeEncoder) -> tuple[str, str]:
    """``(swap_site, method)`` at which :func:`encoder_profile` scores a model.

    Definition 2 swaps contents and keeps positions. Intended models whose position enters
    inside the head: rows of each layer's input, in closed form (``"layer"``, ``"exact"``;
    MLA re-run). Models with an input encoding, and faithful models (whose keys come from
    the layer-0 embeddings, so a row swap at a deeper layer would move queries only): the
    token embeddings, positions kept, re-run (``"content"``, ``"rerun"``).
    """
    cfg = model.cfg
    if cfg.faithful or cfg.input_encoding is not None:
        return "content", "rerun"
    return "layer", "rerun" if cfg.scheme == "mla" else "exact"


def encoder_profile(model: SchemeEncoder, tokens: Tensor) -> dict[str, Any]:
    """``s_POS`` and ``s_SYM`` ``[n_layers, n_heads]`` of every head for the query at the last
    position (block swaps, 8 blocks; :func:`lens_possym.swap_scores`), at
    :func:`profile_site`'s site."""

    site, method = profile_site(model)
    scores = swap_scores(model, tokens, swap="block", n_blocks=8, per_frequency=False,
                         exclusion=False, method=method, swap_site=site, exclude_bos=False)
    return {"pos": scores.pos.tolist(), "sym": scores.sym.tolist(), "site": site,
            "method": method}
