""":func:`swap_scores`: positional and symbolic scores of every head (and frequency) of a model.

One forward pass captures every chosen layer's queries and keys (:mod:`lens_possym.capture`);
then each layer is scored from its cross-logit factors in closed form (``method="exact"``),
or, as the reference, by re-running the block once per swap (``method="rerun"``). Scores are
computed per prompt and averaged over prompts (paper C's ``scores.mean(axis=0)``).
"""

from __future__ import annotations

from typing import Any, Literal, Sequence

import torch
from torch import Tensor
from tqdm.auto import tqdm

from .._inputs import ModelInput, as_heads, as_layers, as_positions, as_tokens
from ..capture import capture_attention_inputs
from ..decompose import decompose_inputs
from ..errors import InvalidSelectionError
from ..rope import rope_specs
from .crosslogits import cross_logit_factors
from .exact import MAX_ELEMENTS, SwapScores, exact_swap_scores
from .exclusion import exclusion_from_factors
from .rerun import rerun_swap_scores
from .results import PosSymScores
from .swaps import Cosine, SwapKind, check_cosine, swap_set

__all__ = ["swap_scores", "resolve_exclude_bos"]

Method = Literal["exact", "rerun"]


def resolve_exclude_bos(model: Any, tokens: Tensor, exclude_bos: bool | str) -> bool:
    """``"auto"``: exclude position 0 when every prompt starts with the tokenizer's BOS."""
    if exclude_bos == "auto":
        bos = getattr(getattr(model, "tokenizer", None), "bos_token_id", None)
        return bos is not None and bool((tokens[:, 0] == bos).all())
    if not isinstance(exclude_bos, bool):
        raise InvalidSelectionError(f"exclude_bos must be True, False or 'auto', not {exclude_bos!r}")
    return exclude_bos


def swap_scores(
    model: Any,
    input: ModelInput,
    *,
    layers: int | Sequence[int] | None = None,
    heads: int | Sequence[int] | None = None,
    swap: SwapKind = "token",
    n_blocks: int = 8,
    method: Method = "exact",
    per_frequency: bool = True,
    tau: float = 1e-4,
    cosine: Cosine = "clamped",
    exclude_bos: bool | Literal["auto"] = "auto",
    query_position: int = -1,
    exclusion: bool = True,
    check: bool = True,
    dtype: torch.dtype = torch.float64,
    batch_size: int = 64,
    max_elements: int = MAX_ELEMENTS,
    progress: bool = False,
) -> PosSymScores:
    """Place every head of ``model`` on the positional-symbolic plane (paper A).

    For the query at ``query_position`` (the last token by default), each swap exchanges the
    contents of two key positions (``swap="token"``: paper C's single-token swaps over all
    pairs before the query) or of two of ``n_blocks`` contiguous blocks (``swap="block"``:
    paper A's relaxation), and compares the attention on the two groups before and after:

    * ``s_POS``: the mass stayed with the positions (cosine with the clean masses);
    * ``s_SYM``: the mass moved with the content (cosine with the swapped clean masses);

    each a sum over swaps weighted by ``softmax(|a_1 - a_2| / tau)``. Each frequency id can
    also be scored as a 2-D head of its own.

    Args:
        model: a bridge (:func:`lens_possym.load_model`, :func:`~lens_possym.from_hf`, ...)
            or any model defining ``lens_possym_rope_specs()``.
        input: a prompt, prompts of equal token length, or tokens ``[batch, pos]``.
        layers, heads: which to score (all by default); others are ``nan`` in the result.
        swap: ``"token"`` or ``"block"``.
        n_blocks: number of blocks for block swaps.
        method: ``"exact"`` (closed form, all swaps at once) or ``"rerun"`` (swap the layer
            input and re-run the block per swap: the reference, ~100-1000x slower). The
            closed form relies on the layer's queries and keys being row-wise functions of
            its input, which holds for every model but not under hooks that edit q or k
            *by position* (e.g. ``unrotate`` frequency ablation, which bakes each key's
            position into it): score such runs with ``"rerun"``.
        per_frequency: also score each frequency id (``pos_freq``, ``sym_freq``).
        tau: temperature of the swap weights (paper C: 1e-4, nearly "the swap that moves
            the most mass").
        cosine: ``"clamped"`` (paper C's torch cosine) or ``"scale_free"``; they differ
            only on swaps that drain both groups (see the scores docs, section 2).
        exclude_bos: leave position 0 out of the swaps (and the exclusion keys); ``"auto"``
            excludes it when every prompt starts with the tokenizer's BOS token, whose
            attention-sink mass would otherwise decide the weights.
        query_position: the query row (negative counts from the end).
        exclusion: also compute Theorem 1's ``Var / bound`` ratio and the balance
            ``S_sym / (S_pos + S_sym)`` per head and frequency.
        check: verify, per layer, that the per-frequency terms add up to the model's own
            scores on this pass (:meth:`~lens_possym.decompose.FrequencyLogits.check`), so
            scores are never computed from a geometry the model does not use.
        dtype: computation dtype of the exact method (float64: agrees with the re-run to
            rounding of the model's own arithmetic).
        batch_size: swaps per re-run batch (``method="rerun"``).
        max_elements: memory bound of the exact method's intermediates.
        progress: show a progress bar over layers.

    Returns:
        :class:`~lens_possym.scores.results.PosSymScores`.

    Raises:
        InvalidSelectionError: bad layers/heads/positions, an empty or too-long prompt,
            too few keys for the swaps, an unknown swap kind or method.
        NotRopeModelError: the model has no rotary embedding.
        DecompositionMismatchError: the geometry read does not reproduce the model's scores.
    """
    if method not in ("exact", "rerun"):
        raise InvalidSelectionError(f"unknown method {method!r}; use 'exact' or 'rerun'")
    if swap not in ("token", "block"):
        raise InvalidSelectionError(f"unknown swap kind {swap!r}; use 'token' or 'block'")
    check_cosine(cosine)
    if not tau > 0:
        raise InvalidSelectionError(f"tau must be positive, got {tau}")
    specs = rope_specs(model)
    chosen = as_layers(layers, len(specs))
    tokens = as_tokens(model, input)
    n_prompts, n_pos = tokens.shape
    qpos = int(as_positions(query_position, n_pos)[0])
    drop_bos = resolve_exclude_bos(model, tokens, exclude_bos)

    captured = capture_attention_inputs(model, tokens, chosen, query_positions=qpos)
    n_layers = len(specs)
    n_heads = max(spec.n_heads for spec in specs)
    n_freqs = max(spec.n_freqs for spec in specs)
    nan = float("nan")
    pos_prompts = torch.full((n_prompts, n_layers, n_heads), nan, dtype=torch.float64)
    sym_prompts = pos_prompts.clone()
    freq_shape = (n_prompts, n_layers, n_heads, n_freqs)
    pos_freq = torch.full(freq_shape, nan, dtype=torch.float64) if per_frequency else None
    sym_freq = pos_freq.clone() if per_frequency else None
    ratio = pos_prompts.clone() if exclusion else None
    ratio_freq = torch.full(freq_shape, nan, dtype=torch.float64) if exclusion and per_frequency else None
    balance = pos_prompts.clone() if exclusion else None
    balance_freq = ratio_freq.clone() if ratio_freq is not None else None
    angles = torch.full((n_layers, n_freqs), nan, dtype=torch.float64)

    for layer in tqdm(chosen, desc="scoring layers", disable=not progress, leave=False):
        inputs = captured[layer]
        spec = inputs.spec
        head_list = as_heads(heads, spec.n_heads, layer)
        if check:
            decompose_inputs(inputs, head_list).check()
        factors = cross_logit_factors(inputs, head_list, dtype=dtype)
        swaps = swap_set(swap, qpos, factors.visible, exclude_bos=drop_bos, n_blocks=n_blocks)
        if method == "exact":
            result = exact_swap_scores(factors, swaps, tau=tau, per_frequency=per_frequency,
                                       cosine=cosine, max_elements=max_elements)
        else:
            result = _rerun(model, tokens, layer, head_list, swaps, tau, per_frequency, batch_size,
                            cosine)
        f = spec.n_freqs
        pos_prompts[:, layer, head_list] = result.pos.cpu().double()
        sym_prompts[:, layer, head_list] = result.sym.cpu().double()
        angles[layer, :f] = spec.angles
        if per_frequency:
            pos_freq[:, layer, head_list, :f] = result.pos_freq.cpu().double()
            sym_freq[:, layer, head_list, :f] = result.sym_freq.cpu().double()
        if exclusion:
            keys = torch.arange(int(drop_bos), qpos, device=factors.visible.device)
            keys = keys[factors.visible[keys]]
            if len(keys) >= 2:
                head_ex, freq_ex = exclusion_from_factors(factors, keys, per_frequency=per_frequency)
                ratio[:, layer, head_list] = head_ex.ratio.cpu().double()
                balance[:, layer, head_list] = head_ex.balance.cpu().double()
                if per_frequency:
                    ratio_freq[:, layer, head_list, :f] = freq_ex.ratio.cpu().double()
                    balance_freq[:, layer, head_list, :f] = freq_ex.balance.cpu().double()

    def mean(t: Tensor | None) -> Tensor | None:
        return None if t is None else t.mean(0)

    def nanmean(t: Tensor | None) -> Tensor | None:  # an undefined balance is left out
        return None if t is None else t.nanmean(0)

    settings = {
        "swap": swap, "n_blocks": n_blocks if swap == "block" else None, "method": method,
        "tau": tau, "cosine": cosine, "exclude_bos": drop_bos, "query_position": qpos, "n_prompts": n_prompts,
        "n_tokens": n_pos, "per_frequency": per_frequency, "dtype": str(dtype).replace("torch.", ""),
    }
    return PosSymScores(
        pos=pos_prompts.mean(0), sym=sym_prompts.mean(0), angles=angles, layers=chosen,
        pos_freq=mean(pos_freq), sym_freq=mean(sym_freq), exclusion_ratio=mean(ratio),
        exclusion_ratio_freq=mean(ratio_freq), balance=nanmean(balance),
        balance_freq=nanmean(balance_freq), pos_prompts=pos_prompts, sym_prompts=sym_prompts,
        settings=settings, model_name=str(getattr(getattr(model, "cfg", None), "model_name", "")),
    )


def _rerun(model: Any, tokens: Tensor, layer: int, heads: list[int], swaps, tau: float,
           per_frequency: bool, batch_size: int, cosine: Cosine) -> SwapScores:
    rows = [rerun_swap_scores(model, tokens[b : b + 1], layer, heads, swaps, tau=tau,
                              per_frequency=per_frequency, cosine=cosine, batch_size=batch_size)
            for b in range(tokens.shape[0])]
    cat = lambda name: None if getattr(rows[0], name) is None else torch.cat(  # noqa: E731
        [getattr(r, name) for r in rows])
    return SwapScores(cat("pos"), cat("sym"), cat("pos_freq"), cat("sym_freq"))
