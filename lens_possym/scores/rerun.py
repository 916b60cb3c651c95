"""Swap scores the slow, literal way: swap rows of the layer input and re-run the block.

This is paper C's procedure (its ``get_attention_weights.py``), kept as the reference the
closed form of :mod:`.exact` is tested and benchmarked against. For each swap the rows of
``blocks.{L}.hook_resid_pre`` are permuted (positions stay: RoPE is applied at the original
positions), block ``L`` is run again, and the query row of its attention pattern is read.
Swaps are batched: one hook returns ``batch_size`` permuted copies of the residual, so the
layers before ``L`` run once per batch of swaps, and the pass stops after block ``L``.

Per-frequency scores re-run the same way and decompose the re-run's own queries and keys
(:func:`lens_possym.decompose.decompose_inputs`): each frequency's logit row, masked and
softmaxed on its own, is that frequency's 2-D head.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from jaxtyping import Float
from torch import Tensor

from ..capture import AttentionInputs, capture_attention_inputs
from ..decompose import decompose_inputs
from ..errors import InvalidSelectionError
from .exact import SwapScores
from .swaps import SwapSet, WeightedCosines

__all__ = ["rerun_swap_scores", "capture_with_layer_input", "capture_with_rows"]


def _freq_attention(inputs: AttentionInputs, heads: list[int]) -> Float[Tensor, "batch head freq pos"]:
    """Each frequency's logits of the query row, masked and softmaxed as its own head."""
    fl = decompose_inputs(inputs, heads, dtype=torch.float64)
    terms = fl.terms[:, :, 0].movedim(-1, 2)                       # [b, h, f, p]
    visible = fl.mask[0].to(terms.device)
    return torch.softmax(terms.masked_fill(~visible, float("-inf")), dim=-1)


def _group_mass(attention: Tensor, swaps: SwapSet, sl: slice) -> tuple[Tensor, Tensor]:
    return attention[..., swaps.first[sl]].mean(-1), attention[..., swaps.second[sl]].mean(-1)


def capture_with_layer_input(model: Any, tokens: Tensor, layer: int, query_position: int
                             ) -> tuple[AttentionInputs, Tensor]:
    """The layer's captured inputs on ``tokens`` (``[1, pos]``) and its input residual."""
    store: dict[str, Tensor] = {}

    def keep(tensor: Tensor, hook) -> Tensor:
        store["resid"] = tensor.detach().clone()
        return tensor

    inputs = capture_attention_inputs(model, tokens, layer, query_positions=query_position,
                                      fwd_hooks=[(f"blocks.{layer}.hook_resid_pre", keep)])
    return inputs[layer], store["resid"]


def capture_with_rows(model: Any, tokens: Tensor, layer: int, query_position: int,
                      residual: Tensor, rows: Tensor) -> AttentionInputs:
    """Re-run ``layer`` with its input rows reordered: copy ``b``'s position ``p`` holds
    row ``rows[b, p]`` of ``residual`` (``[1, pos, d_model]``); positions are unchanged."""

    def replace(tensor: Tensor, hook) -> Tensor:
        return residual[0, rows.to(tensor.device)]                 # [copies, pos, d_model]

    return capture_attention_inputs(model, tokens, layer, query_positions=query_position,
                                    fwd_hooks=[(f"blocks.{layer}.hook_resid_pre", replace)])[layer]


def rerun_swap_scores(model: Any, tokens: Tensor, layer: int, heads: list[int], swaps: SwapSet,
                      *, tau: float = 1e-4, per_frequency: bool = True,
                      batch_size: int = 64) -> SwapScores:
    """Swap scores of one prompt ``tokens`` (``[1, pos]``) by re-running block ``layer``.

    Same arguments and result as :func:`~lens_possym.scores.exact.exact_swap_scores`
    (batch of one). Cost: one forward pass of block ``layer`` per swap.
    """
    if tokens.shape[0] != 1:
        raise InvalidSelectionError(
            "rerun_swap_scores takes one prompt at a time; pass tokens[i:i+1]")
    qpos = swaps.query_position
    clean, residual = capture_with_layer_input(model, tokens, layer, qpos)
    a = clean.model_pattern[:, heads, 0].double()                  # [1, h, p]
    a_freq = _freq_attention(clean, heads) if per_frequency else None
    n_pos = tokens.shape[1]

    acc, acc_f = WeightedCosines(), WeightedCosines()
    for start in range(0, swaps.n_swaps, batch_size):
        sl = slice(start, min(start + batch_size, swaps.n_swaps))
        perms = torch.stack([swaps.permutation(s, n_pos) for s in range(sl.start, sl.stop)])
        swapped = capture_with_rows(model, tokens, layer, qpos, residual, perms)
        a_new = swapped.model_pattern[:, heads, 0].double()        # [swaps, h, p]
        _add(acc, a_new.transpose(0, 1)[None], a, swaps, sl, tau)  # [1, h, swaps, p]
        if per_frequency:
            a_new_f = _freq_attention(swapped, heads)              # [swaps, h, f, p]
            _add(acc_f, a_new_f.permute(1, 2, 0, 3)[None], a_freq, swaps, sl, tau)
    pos, sym = acc.result()
    if not per_frequency:
        return SwapScores(pos, sym)
    pos_f, sym_f = acc_f.result()
    return SwapScores(pos, sym, pos_f, sym_f)


def _add(acc: WeightedCosines, a_new: Tensor, a_clean: Tensor, swaps: SwapSet, sl: slice,
         tau: float) -> None:
    """Cosines of ``(a'_1, a'_2)`` against ``(a_1, a_2)`` and ``(a_2, a_1)``, as paper C does.

    ``a_new``: ``[..., swaps, pos]``, row ``s`` the attention after swap ``sl.start + s``;
    ``a_clean``: ``[..., pos]``.
    """
    def mass(groups: Tensor) -> Tensor:
        index = groups.to(a_new.device).expand(*a_new.shape[:-1], groups.shape[-1])
        return torch.gather(a_new, -1, index).mean(-1)

    new1, new2 = mass(swaps.first[sl]), mass(swaps.second[sl])
    d1, d2 = _group_mass(a_clean, swaps, sl)
    after = torch.stack([new1, new2], -1)
    pos = F.cosine_similarity(after, torch.stack([d1, d2], -1), dim=-1)
    sym = F.cosine_similarity(after, torch.stack([d2, d1], -1), dim=-1)
    acc.add((d1 - d2).abs() / tau, pos, sym)
