"""Swap scores the slow, literal way: swap rows of the layer input and re-run the block.

The one re-run reference of the score engine (:mod:`.engine`), in two readers of the
re-run: :func:`rerun_swap_scores` for RoPE layers at the ``"layer"`` site (with each
frequency's scores, decomposed from the re-run's own queries and keys, and the scale-free
cosine), and :func:`rerun_site_scores` for any scheme and swap site (whole heads, from the
pattern). Both swap in batches (:func:`_swap_batches`); the engine runs them one prompt
at a time.

This is paper C's procedure (its ``get_attention_weights.py``), kept as the reference the
closed form of :mod:`.exact` is tested and benchmarked against. For each swap the rows of
``blocks.{L}.hook_resid_pre`` are permuted (positions stay: RoPE is applied at the original
positions), block ``L`` is run again, and the query row of its attention pattern is read.
Swaps are batched: one hook returns ``batch_size`` permuted copies of the residual, so the
layers before ``L`` run once per batch of swaps, and the pass stops after block ``L``.

Per-frequency scores re-run the same way and decompose the re-run's own queries and keys
(:func:`lens_possym.decompose.decompose_inputs`): each frequency's logit row, masked and
softmaxed on its own, is that frequency's 2-D head.

``cosine="clamped"`` (the default) compares attention with torch's ``cosine_similarity``, as
paper C's ``lib/metrics.py`` does. ``cosine="scale_free"`` compares the re-run's *logits*
instead (the log of each group's mass, normaliser dropped), so that a swap draining both
groups below what the float attention can hold still has a direction, as in :mod:`.exact`.
"""

from __future__ import annotations

import torch
from jaxtyping import Float
from torch import Tensor

from typing import Any, Iterator

from .._checks import boundary
from .._inputs import as_layer
from ..capture import (AttentionInputs, capture_with_layer_input, capture_with_rows,
                       run_capturing)
from ..decompose import decompose_inputs
from ..errors import InvalidSelectionError
from ..resolved import Resolved, model_of, resolve
from ..typing import HookedModel
from .exact import SwapScores
from .matrix import add_swap_masses
from .swaps import (Cosine, SwapSet, WeightedCosines, check_cosine, check_tau, clamped_cosines,
                     swap_cosines)

__all__ = ["rerun_swap_scores", "rerun_site_scores"]


def _query_logits(inputs: AttentionInputs, heads: list[int], *, head: bool, freq: bool
                  ) -> tuple[Float[Tensor, "batch head pos"] | None,
                             Float[Tensor, "batch head freq pos"] | None]:
    """The query row's logits, from one decomposition of the run's own queries and keys:
    the whole head's (softcapped, ``-inf`` where masked; with ``head``) and each
    frequency's, masked (``-inf``): its own 2-D head (with ``freq``); ``None`` where not
    asked for."""
    if not (head or freq):
        return None, None
    fl = decompose_inputs(inputs, heads, dtype=torch.float64)
    whole = fl.logits()[:, :, 0] if head else None
    if not freq:
        return whole, None
    terms = fl.terms[:, :, 0].movedim(-1, 2)                       # [b, h, f, p]
    visible = fl.mask[0].to(terms.device)
    return whole, terms.masked_fill(~visible, float("-inf"))


def _group_mass(attention: Tensor, swaps: SwapSet, sl: slice) -> tuple[Tensor, Tensor]:
    first, second = swaps.pairs(sl)
    return attention[..., first].mean(-1), attention[..., second].mean(-1)


def _swap_batches(swaps: SwapSet, n_pos: int, batch_size: int
                  ) -> Iterator[tuple[slice, Tensor]]:
    """The swaps in batches of ``batch_size``: each batch's slice and its permutations of
    the ``n_pos`` rows (``[swaps, pos]``), one re-run per batch."""
    for start in range(0, swaps.n_swaps, batch_size):
        sl = slice(start, min(start + batch_size, swaps.n_swaps))
        yield sl, torch.stack([swaps.permutation(s, n_pos) for s in range(sl.start, sl.stop)])


@boundary
def rerun_swap_scores(model: HookedModel | Resolved, tokens: Tensor, layer: int,
                      heads: list[int], swaps: SwapSet, *, tau: float = 1e-4,
                      per_frequency: bool = True, cosine: Cosine = "clamped",
                      batch_size: int = 64) -> SwapScores:
    """Swap scores of one prompt ``tokens`` (``[1, pos]``) by re-running block ``layer``
    of a RoPE model (rows of its input swapped; the scores of each frequency from the
    re-run's own queries and keys).

    Same arguments and result as :func:`~lens_possym.scores.exact.exact_swap_scores`
    (batch of one). Cost: one forward pass of block ``layer`` per swap.
    """
    check_cosine(cosine)
    check_tau(tau)
    resolved = resolve(model)
    layer = as_layer(layer, len(resolved.specs))
    if tokens.shape[0] != 1:
        raise InvalidSelectionError(
            "rerun_swap_scores takes one prompt at a time; pass tokens[i:i+1]")
    scale_free = cosine == "scale_free"
    qpos = swaps.query_position
    clean, residual = capture_with_layer_input(resolved, tokens, layer, qpos)
    a = clean.model_pattern[:, heads, 0].double()                  # [1, h, p]
    lam, lam_freq = _query_logits(clean, heads, head=scale_free, freq=per_frequency)
    a_freq = torch.softmax(lam_freq, -1) if per_frequency else None

    acc, acc_f = WeightedCosines(), WeightedCosines()
    for sl, perms in _swap_batches(swaps, tokens.shape[1], batch_size):
        swapped = capture_with_rows(resolved, tokens, layer, qpos, residual, perms)
        after, after_f = _query_logits(swapped, heads, head=scale_free, freq=per_frequency)
        if not scale_free:
            after = swapped.model_pattern[:, heads, 0].double()    # [swaps, h, p]
        _add(acc, after.transpose(0, 1)[None], a, lam, swaps, sl, tau)  # [1, h, swaps, p]
        if per_frequency:                                          # [swaps, h, f, p]
            after_f = after_f if scale_free else torch.softmax(after_f, -1)
            _add(acc_f, after_f.permute(1, 2, 0, 3)[None], a_freq,
                 lam_freq if scale_free else None, swaps, sl, tau)
    pos, sym = acc.result()
    if not per_frequency:
        return SwapScores(pos, sym)
    pos_f, sym_f = acc_f.result()
    return SwapScores(pos, sym, pos_f, sym_f)


def rerun_site_scores(model: HookedModel | Resolved, tokens: Tensor, ls: Any,
                      heads: list[int], swaps: SwapSet, site: str, *, tau: float = 1e-4,
                      batch_size: int = 64) -> tuple[Tensor, Tensor]:
    """``(s_POS, s_SYM)`` (``[1, head_index]``) of one prompt of a model of any scheme by
    re-running every swap at ``site``: rows of ``blocks.{L}.hook_resid_pre`` (``"layer"``),
    rows of ``hook_embed`` (``"content"``) or token ids (``"input"``). ``ls``: the layer's
    :class:`~lens_possym.positions.LayerScheme` (or anything with ``layer`` and
    ``pattern_hook``)."""
    model = model_of(model)
    if tokens.shape[0] != 1:
        raise InvalidSelectionError("rerun_site_scores takes one prompt at a time")
    pattern = ls.pattern_hook
    point = {"layer": f"blocks.{ls.layer}.hook_resid_pre", "content": "hook_embed"}.get(site)
    names = [pattern] + ([point] if point else [])
    clean_run = run_capturing(model, tokens, names)
    clean = clean_run[pattern][:, heads, swaps.query_position].double()   # [1, h, p]
    acc = WeightedCosines()
    for sl, perms in _swap_batches(swaps, tokens.shape[1], batch_size):
        if point is None:
            got = run_capturing(model, tokens[0, perms.to(tokens.device)], [pattern])
        else:
            rows = clean_run[point][0, perms.to(tokens.device)]

            def replace(tensor: Tensor, hook) -> Tensor:
                return rows

            got = run_capturing(model, tokens.expand(len(perms), -1), [pattern],
                                fwd_hooks=[(point, replace)])
        after = got[pattern][:, heads, swaps.query_position].double().transpose(0, 1)[None]
        add_swap_masses(acc, after, clean, *swaps.pairs(sl), tau)          # [1, h, s, p]
    return acc.result()


def _add(acc: WeightedCosines, after: Tensor, a_clean: Tensor, logits_clean: Tensor | None,
         swaps: SwapSet, sl: slice, tau: float) -> None:
    """Cosines of each swap's groups, after against before, weighted by the clean masses.

    ``after``: ``[..., swaps, pos]``, row ``s`` the attention after swap ``sl.start + s``
    (clamped cosine, as paper C), or its logits (scale-free, when ``logits_clean``, the
    clean logits ``[..., pos]``, is given); ``a_clean``: the clean attention ``[..., pos]``.
    """
    def gathered(groups: Tensor) -> Tensor:
        index = groups.to(after.device).expand(*after.shape[:-1], groups.shape[-1])
        return torch.gather(after, -1, index)

    first, second = swaps.pairs(sl)
    d1, d2 = _group_mass(a_clean, swaps, sl)
    if logits_clean is None:
        pos, sym = clamped_cosines(gathered(first).mean(-1), gathered(second).mean(-1), d1, d2)
    else:
        pos, sym = swap_cosines(gathered(first).logsumexp(-1), gathered(second).logsumexp(-1),
                                logits_clean[..., first].logsumexp(-1),
                                logits_clean[..., second].logsumexp(-1))
    acc.add((d1 - d2).abs() / tau, pos, sym)
