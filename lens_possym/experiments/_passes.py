"""Forward passes that skip work an intervention cannot change (bridges).

* :func:`blocks_from`: inside the block, a bridge's forward runs only blocks ``layer..``.
  TransformerLens 4.3's ``start_at_layer`` swaps the given residual in at block ``layer``
  but still runs blocks ``0..layer-1`` on it and discards their output; hiding those blocks
  from the Hugging Face model's layer loop for the duration of the call skips that work and
  changes nothing else (the blocks that run see the same inputs: bit for bit, tested on
  every tiny family). Per-layer settings a loop reads by index (``config.layer_types``) are
  shifted with the blocks; the patching grids also check the first pass that skips blocks
  against a whole one.
* :func:`prefix_cache`: the Hugging Face KV cache of the first positions of a run, so that a
  pass whose intervention leaves those positions alone computes only the later ones.
"""

from __future__ import annotations

import copy
from contextlib import contextmanager
from typing import Any, Iterator

import torch
from torch import Tensor

from ..typing import HookedModel

__all__ = ["layer_list", "blocks_from", "prefix_cache", "fresh_cache"]


def layer_list(model: HookedModel) -> tuple[torch.nn.Module, str] | None:
    """``(parent module, attribute)`` of the Hugging Face ``ModuleList`` whose items are the
    bridge's blocks, or ``None`` (not a bridge, or a layout this does not know)."""
    hf = getattr(model, "original_model", None)
    blocks = getattr(model, "blocks", None)
    if hf is None or not isinstance(blocks, torch.nn.ModuleList) or not len(blocks):
        return None
    for module in hf.modules():
        for name, child in module.named_children():
            if isinstance(child, torch.nn.ModuleList) and len(child) == len(blocks) and \
                    all(a is b for a, b in zip(child, blocks)):
                return module, name
    return None


@contextmanager
def blocks_from(model: HookedModel, layer: int) -> Iterator[bool]:
    """Inside the block, the model's forward runs blocks ``layer..`` only; yields whether
    it could (``False``: nothing changed, every block runs)."""
    found = layer_list(model) if layer > 0 else None
    if found is None:
        yield False
        return
    parent, name = found
    old = parent._modules[name]
    # a loop that reads per-layer settings by the layer's index (Gemma 3: config.layer_types[i])
    # sees them shifted the same way
    config = getattr(parent, "config", None)
    types = getattr(config, "layer_types", None)
    shift_types = isinstance(types, list) and len(types) == len(old)
    # and no KV cache is made from the shortened config (a cache passed in is used as is)
    use_cache = getattr(config, "use_cache", None)
    parent._modules[name] = torch.nn.ModuleList(list(old)[layer:])
    if shift_types:
        config.layer_types = types[layer:]
    if use_cache is not None:
        config.use_cache = False
    try:
        yield True
    finally:
        parent._modules[name] = old
        if shift_types:
            config.layer_types = types
        if use_cache is not None:
            config.use_cache = use_cache


def prefix_cache(model: HookedModel, tokens: Tensor) -> Any:
    """The Hugging Face KV cache after running ``tokens`` (the shared prefix of a batch)."""
    with torch.no_grad():
        _, cache = model(tokens, return_type="logits_and_cache", logits_to_keep=1)
    return cache


def fresh_cache(template: Any, copies: int = 1) -> Any:
    """A cache to extend, holding ``template``'s prefix ``copies`` times along the batch
    (copy-major, as the stacked batches of the patching grids). A pass appends its
    positions to the cache it is given (Hugging Face's layers concatenate into new
    tensors), so the template's own tensors are never changed."""
    layers = getattr(template, "layers", None)
    if not layers or not all(hasattr(layer, "keys") and hasattr(layer, "values")
                             for layer in layers):
        if copies != 1:
            return None
        return copy.deepcopy(template)
    fresh = copy.copy(template)
    fresh.layers = []
    for layer in layers:
        twin = copy.copy(layer)
        if getattr(layer, "is_initialized", True) and isinstance(layer.keys, Tensor):
            twin.keys = layer.keys.repeat(copies, *([1] * (layer.keys.ndim - 1)))
            twin.values = layer.values.repeat(copies, *([1] * (layer.values.ndim - 1)))
        fresh.layers.append(twin)
    return fresh
