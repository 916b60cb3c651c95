r"""Key-content permutations at a layer, with positions kept: the swaps the scores use.

The positional/symbolic scores move *content* between positions while RoPE keeps the
original positions: swap rows ``i`` and ``j`` of the layer input, re-run the layer at the
original positions, and see whether the attention stays with the position or follows the
content. These hooks make that move available for any experiment.

A permutation ``perm`` (``[pos]``, or ``[batch, pos]`` for one per prompt) says that after
it, position ``p`` holds the content that stood at ``perm[p]`` (like ``tokens[:, perm]``).

``what="resid"`` (the scores' procedure)
    permute the rows of ``blocks.{L}.hook_resid_pre``: the layer's queries, keys and values
    are all recomputed from the moved rows, at the original positions. Later layers see
    the permuted residual stream too (read the layer's own hooks for the block alone).
``what="kv"``
    permute the rows of the layer's un-rotated keys (``spec.k_hook``) and values
    (``hook_v``) only: queries keep their content, keys and values move to new positions
    (and are rotated there). For a ``perm`` that fixes a query position, that query's
    attention is the same as with ``"resid"``.
``what="k"``
    keys only: which position is *attended* moves with the content, what is *read* does
    not.

Key and value hooks are KV-head wide, so ``"kv"`` and ``"k"`` permute all heads of the
layer at once (a permutation is a layer-wide change; there is no per-head form).
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Iterator, Literal, Sequence

import torch
from jaxtyping import Int
from torch import Tensor

from .._checks import boundary
from .._inputs import as_layer
from ..errors import InvalidSelectionError
from ..resolved import Resolved, resolve
from ..typing import FwdHooks, HookedModel, HookFn
from .engine import v_hook_name

__all__ = ["swap_permutation", "permute_content_hook", "permute_content_hooks", "permute_content"]

What = Literal["resid", "kv", "k"]


@boundary
def swap_permutation(n_pos: int, i: int, j: int) -> Int[Tensor, "pos"]:
    """The permutation of ``0..n_pos-1`` that exchanges positions ``i`` and ``j``."""
    if not (0 <= i < n_pos and 0 <= j < n_pos):
        raise InvalidSelectionError(
            f"cannot swap positions {i} and {j} of an input of {n_pos} tokens (0..{n_pos - 1})"
        )
    perm = torch.arange(n_pos)
    perm[i], perm[j] = j, i
    return perm


def _check_perm(perm: Tensor, batch: int, n_pos: int) -> Tensor:
    if perm.is_floating_point() or perm.ndim not in (1, 2) or perm.shape[-1] != n_pos or (
        perm.ndim == 2 and perm.shape[0] not in (1, batch)
    ):
        raise InvalidSelectionError(
            f"a permutation must be integer [pos] or [batch, pos] with pos = {n_pos} and batch "
            f"= {batch}, got {tuple(perm.shape)} {perm.dtype}"
        )
    rows = perm.reshape(-1, n_pos)
    if not torch.equal(rows.sort(dim=-1).values, torch.arange(n_pos, device=perm.device).expand_as(rows)):
        raise InvalidSelectionError(
            f"{perm.tolist()} is not a permutation of the positions 0..{n_pos - 1}"
        )
    return perm


def permute_content_hook(perm: Int[Tensor, "pos"] | Int[Tensor, "batch pos"] | Sequence[int],
                      *, pos_dim: int = 1) -> HookFn:
    """A hook that permutes a tensor along its position axis: row ``p`` ← row ``perm[p]``.

    ``pos_dim`` is 1 for ``[batch, pos, ...]`` tensors (residual stream, ``hook_q``/``hook_k``/
    ``hook_v``) and 2 for ``[batch, head, pos, d_head]`` ones (``hook_k_normed``).
    """
    perm_t = torch.as_tensor(perm)

    def hook(tensor: Tensor, hook: Any = None) -> Tensor:
        p = _check_perm(perm_t.to(tensor.device), tensor.shape[0], tensor.shape[pos_dim])
        if p.ndim == 1:
            return tensor.index_select(pos_dim, p)
        p = p.expand(tensor.shape[0], -1)
        shape = [tensor.shape[0]] + [1] * (tensor.ndim - 1)
        shape[pos_dim] = p.shape[1]
        index = p.reshape(shape).expand(*tensor.shape[:pos_dim], p.shape[1], *tensor.shape[pos_dim + 1:])
        return tensor.gather(pos_dim, index)

    return hook


def permute_content_hooks(model: HookedModel | Resolved, layer: int,
                          perm: Int[Tensor, "pos"] | Int[Tensor, "batch pos"] | Sequence[int],
                          what: What = "resid") -> FwdHooks:
    """Hooks that move content between positions at ``layer`` (see the module docstring)."""
    specs = resolve(model).specs
    spec = specs[as_layer(layer, len(specs))]
    if what == "resid":
        return [(f"blocks.{spec.layer}.hook_resid_pre", permute_content_hook(perm))]
    if what not in ("kv", "k"):
        raise InvalidSelectionError(
            f"unknown permutation target {what!r}; choose one of resid, kv, k"
        )
    k_dim = 2 if spec.qk_layout == "bhpd" else 1
    hooks = [(spec.k_hook, permute_content_hook(perm, pos_dim=k_dim))]
    if what == "kv":
        hooks.append((v_hook_name(spec), permute_content_hook(perm)))
    return hooks


@contextmanager
def permute_content(model: HookedModel, layer: int,
                    perm: Int[Tensor, "pos"] | Int[Tensor, "batch pos"] | Sequence[int],
                    what: What = "resid") -> Iterator[HookedModel]:
    """Context manager form of :func:`permute_content_hooks`.

    Example (the scores' swap of positions 3 and 7 at layer 12)::

        with lp.permute_content(model, 12, lp.interventions.swap_permutation(n, 3, 7)):
            _, cache = model.run_with_cache(tokens, names_filter="blocks.12.attn.hook_pattern")
    """
    with model.hooks(fwd_hooks=permute_content_hooks(model, layer, perm, what)):
        yield model
