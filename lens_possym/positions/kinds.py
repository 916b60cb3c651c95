"""The words a positional scheme is described in (no torch here: the command line's
choices read them): where position enters a head (:data:`Site`) and where a swap
exchanges contents (:data:`SwapSite`)."""

from __future__ import annotations

from typing import Literal

__all__ = ["Site", "SwapSite", "SWAP_SITES"]

#: Where position enters a head: inside it (RoPE, additive biases, MLA's RoPE part) or at
#: the input (absolute encodings added to the embeddings).
Site = Literal["inside", "input"]
#: Where a swap exchanges contents: the rows of the layer input (``"layer"``), the content
#: part of an absolute-PE model's first-layer input (``"content"``: token embeddings, the
#: position embeddings kept), or the token ids of the whole input, re-run (``"input"``).
SwapSite = Literal["layer", "content", "input"]
SWAP_SITES = ("layer", "content", "input")
