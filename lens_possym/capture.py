"""Capture the un-rotated queries and keys of chosen layers in one forward pass.

Every analysis in lens-possym starts from the same few tensors per layer: the query rows
it looks from, all keys, and (to check itself) the model's own score rows. The hook
functions here keep only those, and the forward pass stops as soon as the last of them is
captured (no later layer, no unembedding),
so memory is O(batch · pos · heads · d_head) per layer and never O(pos²) unless all query
positions are requested.

Queries and keys are read *before* RoPE (after any q/k norm), from the hooks named in each
layer's :class:`~lens_possym.rope.RopeSpec`, and rotated by lens-possym itself. That is
what makes the same code work on families whose ``hook_rot_q``/``hook_rot_k`` never fire
(GPT-NeoX, GPT-J, Phi-3) and lets an analysis place a key's content at any position.

The geometry attached to each capture is the one the model uses *on this input*
(:meth:`~lens_possym.rope.RopeSpec.at_length`): LongRoPE and dynamic-NTK angles depend on
the number of tokens. Where the model rounds q and k before rotating them (Cohere, GLM:
float32), the captured rotated dims carry the same rounding.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Collection, Mapping, Sequence

import torch
from jaxtyping import Float, Int
from torch import Tensor

from ._inputs import ModelInput, as_layers, as_positions, as_tokens, is_activation_cache
from ._hooks import forward_failed
from .errors import InvalidSelectionError, LensPossymError, UnsupportedModelError
from .resolved import Resolved, resolve
from .rope import RopeSpec, heads_view, rotate, visible_keys
from .typing import HookedModel, HookFn
from ._hooks import attached_hooks, partial_key_edits

__all__ = ["AttentionInputs", "capture_attention_inputs", "cache_hook_names", "run_capturing",
           "capture_with_layer_input", "capture_with_rows"]


class _Captured(Exception):
    """Raised by the last capturing hook to end the forward pass early."""


def run_capturing(model: HookedModel, tokens: Int[Tensor, "batch pos"],
                  names: Sequence[str] | Mapping[str, Callable[[Tensor], Tensor]],
                  fwd_hooks: Sequence[tuple[str, HookFn]] = (), *,
                  stop_after: Collection[str] | None = None) -> dict[str, Tensor]:
    """Run ``model`` on ``tokens`` with ``fwd_hooks`` and keep the tensors of ``names``.

    ``names`` may map each hook name to what to keep of its tensor (e.g. some rows); what is
    kept is a detached copy, stored under the name it was asked by (on a bridge
    ``hook.name`` is the canonical name, not the ``blocks.L.attn.hook_q`` alias). The pass
    stops as soon as every name of ``stop_after`` (all of ``names`` by default) is kept: the
    rest of it is of no use, and ``fwd_hooks`` on later hook points do not run.
    ``fwd_hooks`` run before the capturing hook of the same hook point. ``run_with_hooks``
    removes the hooks when it returns or raises.

    Raises:
        UnsupportedModelError: a hook of ``stop_after`` did not fire.
    """
    takes = dict(names) if isinstance(names, Mapping) else dict.fromkeys(names, _whole)
    last = set(takes) if stop_after is None else set(stop_after)
    store: dict[str, Tensor] = {}

    def keep(name: str, take: Callable[[Tensor], Tensor]) -> HookFn:
        def hook(tensor: Tensor, hook) -> Tensor:
            store[name] = take(tensor).detach().clone()
            if last <= store.keys():
                raise _Captured
            return tensor
        return hook

    hooks = list(fwd_hooks) + [(name, keep(name, take)) for name, take in takes.items()]
    with torch.no_grad():
        try:
            model.run_with_hooks(tokens, fwd_hooks=hooks, return_type=None)
        except _Captured:
            pass
        except (RuntimeError, ValueError, IndexError, TypeError) as exc:
            if isinstance(exc, LensPossymError):
                raise
            raise forward_failed(model, exc) from exc
        else:
            missing = sorted(last - store.keys())
            raise UnsupportedModelError(f"the hooks {missing} did not fire during the forward pass")
    return store


def _whole(tensor: Tensor) -> Tensor:
    return tensor


@dataclass
class AttentionInputs:
    """What one layer's attention saw on an input, before RoPE.

    Attributes:
        spec: the layer's geometry on this input (angles at this input's length).
        q: un-rotated queries at ``query_positions``, ``[batch, query_pos, head_index, d_head]``.
        k: un-rotated keys at every position, ``[batch, key_pos, kv_head, d_head]`` (KV heads:
            use ``spec.kv_index()`` to expand to query heads).
        query_positions: ``[query_pos]`` absolute positions of the rows in ``q``.
        key_positions: ``[key_pos]`` absolute positions of the keys (``arange(n)``).
        model_scores: the model's own pre-softmax score rows ``[batch, head_index,
            query_pos, key_pos]`` (after softcap, masked entries at the dtype minimum), or
            ``None`` where the family has no pre-softmax hook or they were not requested.
        model_pattern: the model's attention pattern rows, same shape, or ``None``.
    """

    spec: RopeSpec
    q: Float[Tensor, "batch query_pos head_index d_head"]
    k: Float[Tensor, "batch key_pos kv_head d_head"]
    query_positions: Int[Tensor, "query_pos"]
    key_positions: Int[Tensor, "key_pos"]
    model_scores: Float[Tensor, "batch head_index query_pos key_pos"] | None = None
    model_pattern: Float[Tensor, "batch head_index query_pos key_pos"] | None = None
    key_edits: dict[int, Callable] | None = None
    #: ``query_positions`` as Python ints, known on the host (reading them from a GPU
    #: tensor would make the device wait); ``None``: read from the tensor
    query_list: tuple[int, ...] | None = None

    def query_position(self, row: int) -> int:
        """The position of query row ``row`` (read on the host when it is known there)."""
        if self.query_list is not None:
            return self.query_list[row]
        return int(self.query_positions[row])

    @property
    def layer(self) -> int:
        return self.spec.layer

    def mask(self) -> torch.BoolTensor:
        """``[query_pos, key_pos]``: keys each query row may attend to (causal and window)."""
        return visible_keys(self.spec, self.query_positions, self.key_positions)

    def k_for_heads(self, heads: Sequence[int] | None = None
                    ) -> Float[Tensor, "batch key_pos head_index d_head"]:
        """Keys expanded to the query heads ``heads`` through the GQA map.

        Query heads with their own key edit (``key_edits``: an intervention that edits the
        keys of part of a KV group, which the model applies by recomputing those heads)
        get their edited keys: what the hooked model attends with.
        """
        keys = self.k[:, :, self.spec.kv_index(heads).to(self.k.device)]
        if not self.key_edits:
            return keys
        chosen = list(range(self.spec.n_heads)) if heads is None else list(heads)
        edited = [i for i, h in enumerate(chosen) if h in self.key_edits]
        if edited:
            keys = keys.clone()
            positions = self.key_positions.to(keys.device)
            for i in edited:
                h = chosen[i]
                keys[:, :, i] = self.key_edits[h](self.k[:, :, self.spec.kv_head(h)],
                                                  self.spec.kv_head(h), positions)
        return keys


def capture_attention_inputs(
    model: HookedModel | Resolved,
    input: ModelInput,
    layers: int | Sequence[int] | None = None,
    *,
    query_positions: int | Sequence[int] | Tensor | None = -1,
    model_scores: bool = True,
    fwd_hooks: Sequence[tuple[str, HookFn]] = (),
) -> dict[int, AttentionInputs]:
    """Run ``model`` once on ``input`` and keep, per layer, what attention analyses need.

    Args:
        model: a bridge from :func:`lens_possym.load_model` (or any model whose
            ``rope_specs`` can be read), or a :class:`~lens_possym.resolved.Resolved` one
            (a caller that resolved it passes that: the geometry is not read again).
        input: a prompt, a list of prompts of equal token length, tokens ``[batch, pos]``,
            or a ``transformer_lens.ActivationCache`` (``model.run_with_cache(tokens)``; any
            mapping of hook names to tensors) of the run to analyse: then nothing is run, and
            the cache must hold each chosen layer's ``spec.q_hook`` and ``spec.k_hook``
            (``blocks.{L}.attn.hook_q``/``hook_k``, or ``hook_q_normed``/``hook_k_normed``
            where the model has q/k norms: see :func:`cache_hook_names`); with
            ``model_scores``, ``hook_attn_scores``/``hook_pattern`` are read when present.
        layers: layer index or indices (all by default).
        query_positions: rows to keep the queries of; ``-1`` (the last token) by default,
            ``None`` for all.
        model_scores: also keep the model's own score and pattern rows, to check against.
        fwd_hooks: more ``(name, fn)`` hooks to run during the pass (an intervention to
            capture under). They run before the capturing hooks of the same hook point.
            One may return a tensor with a larger batch (e.g. ``B`` edited copies of
            ``blocks.L.hook_resid_pre``): the captures then have that batch.

    Returns:
        ``{layer: AttentionInputs}``. The pass stops right after the last tensor it needs
        (so ``fwd_hooks`` on later hook points do not run). Hooks are removed when the pass
        ends, also on error.
    """
    resolved = resolve(model)
    model = resolved.model
    if is_activation_cache(input):
        if fwd_hooks:
            raise InvalidSelectionError(
                "fwd_hooks cannot act on an activation cache (nothing is run); pass the tokens "
                "instead, or cache a run made under those hooks")
        specs = resolved.specs
        chosen = as_layers(layers, len(specs))
        return _inputs_from_cache(input, [specs[layer] for layer in chosen], query_positions,
                                  model_scores)
    tokens = as_tokens(model, input)
    n_pos = tokens.shape[1]
    # This input's angles, taken right before the pass (the specs may have been read
    # earlier): dynamic NTK's depend on the rotary module's state, which passes change.
    specs = [spec.at_length(n_pos) for spec in resolved.specs]
    chosen = as_layers(layers, len(specs))
    qpos_host = as_positions(query_positions, n_pos)
    qpos = qpos_host.to(tokens.device)
    last = specs[max(chosen)]
    wanted_last = {last.q_hook, last.k_hook}
    if model_scores:
        wanted_last |= {last.pattern_hook} | ({last.scores_hook} if last.scores_hook else set())

    def query_rows(spec: RopeSpec):
        return lambda t: spec.round_rotary(heads_view(t, spec)[:, qpos])

    def all_rows(spec: RopeSpec):
        return lambda t: spec.round_rotary(heads_view(t, spec))

    takes = {}
    for layer in chosen:
        spec = specs[layer]
        takes[spec.q_hook] = query_rows(spec)
        takes[spec.k_hook] = all_rows(spec)
        if model_scores:
            for name in filter(None, (spec.scores_hook, spec.pattern_hook)):
                takes[name] = lambda t: t[:, :, qpos]
    store = run_capturing(model, tokens, takes, fwd_hooks, stop_after=wanted_last)

    key_positions = torch.arange(n_pos, device=tokens.device)
    out = {}
    for layer in chosen:
        spec = specs[layer]
        out[layer] = AttentionInputs(
            spec=spec,
            q=store[spec.q_hook],
            k=store[spec.k_hook],
            query_positions=qpos,
            key_positions=key_positions,
            model_scores=store.get(spec.scores_hook) if spec.scores_hook else None,
            model_pattern=store.get(spec.pattern_hook),
            query_list=tuple(qpos_host.tolist()),
        )
        _read_partial_key_edits(model, out[layer])
    return out


def capture_with_layer_input(resolved: Resolved, tokens: Int[Tensor, "1 pos"], layer: int,
                             query_position: int
                             ) -> tuple[AttentionInputs, Float[Tensor, "1 pos d_model"]]:
    """The layer's captured inputs on ``tokens`` (``[1, pos]``) and its input residual
    (``blocks.{layer}.hook_resid_pre``): what a re-run with the rows reordered starts from
    (:func:`capture_with_rows`)."""
    store: dict[str, Tensor] = {}

    def keep(tensor: Tensor, hook) -> Tensor:
        store["resid"] = tensor.detach().clone()
        return tensor

    inputs = capture_attention_inputs(resolved, tokens, layer, query_positions=query_position,
                                      fwd_hooks=[(f"blocks.{layer}.hook_resid_pre", keep)])
    return inputs[layer], store["resid"]


def capture_with_rows(resolved: Resolved, tokens: Int[Tensor, "1 pos"], layer: int,
                      query_position: int, residual: Float[Tensor, "1 pos d_model"],
                      rows: Int[Tensor, "copies pos"]) -> AttentionInputs:
    """Re-run ``layer`` with its input rows reordered: copy ``b``'s position ``p`` holds
    row ``rows[b, p]`` of ``residual`` (``[1, pos, d_model]``); positions are unchanged."""

    def replace(tensor: Tensor, hook) -> Tensor:
        return residual[0, rows.to(tensor.device)]                 # [copies, pos, d_model]

    return capture_attention_inputs(resolved, tokens, layer, query_positions=query_position,
                                    fwd_hooks=[(f"blocks.{layer}.hook_resid_pre", replace)])[layer]


def _read_partial_key_edits(model: HookedModel, inputs: AttentionInputs) -> None:
    """Give ``inputs`` the key edits the model applies to part of a KV group at its layer.

    Such an edit (:mod:`lens_possym.interventions.engine`) leaves the shared key, the
    model's scores and its pattern alone and recomputes the edited heads' output at
    ``hook_z``; what those heads attend with is the edited keys. The capture reads them
    from the ``hook_z`` hook's declaration, and replaces those heads' score and pattern
    rows by the ones the edited keys give, so that every analysis of the capture (and
    the re-run swap scores, which read the pattern) sees what the hooked model computes.
    """

    spec = inputs.spec
    names = [f"blocks.{spec.layer}.attn.hook_z"] + (
        [spec.extra["z_hook"]] if spec.extra.get("z_hook") else [])
    edits: dict[int, Callable] = {}
    for _, fn, _ in attached_hooks(model, names):
        found = partial_key_edits(fn) if fn is not None else None
        if found is not None:
            edits.update(found[1])
    if not edits:
        return
    inputs.key_edits = edits
    heads = sorted(edits)
    if inputs.model_scores is None and inputs.model_pattern is None:
        return
    logits = _recomputed_logits(inputs, heads)                  # [b, h, q, k] float32+
    if inputs.model_scores is not None:
        scores = inputs.model_scores.clone()
        low = torch.finfo(scores.dtype).min
        scores[:, heads] = logits.masked_fill(logits == float("-inf"), low).to(scores.dtype)
        inputs.model_scores = scores
    if inputs.model_pattern is not None:
        pattern = inputs.model_pattern.clone()
        pattern[:, heads] = torch.softmax(logits, -1).to(pattern.dtype)
        inputs.model_pattern = pattern


def _recomputed_logits(inputs: AttentionInputs, heads: list[int]) -> Tensor:
    """The query rows' logits of ``heads`` from the captured q and the (edited) keys, as
    the intervention engine computes them (RoPE in the model's dtype, float32 scores)."""

    spec = inputs.spec
    dtype = torch.promote_types(inputs.q.dtype, torch.float32)
    q = rotate(inputs.q[:, :, heads], inputs.query_positions, spec).to(dtype)
    k = rotate(inputs.k_for_heads(heads), inputs.key_positions, spec).to(dtype)
    logits = torch.einsum("bqhd,bkhd->bhqk", q, k) * spec.scale
    if spec.softcap:
        logits = spec.softcap * torch.tanh(logits / spec.softcap)
    return logits.masked_fill(~inputs.mask().to(logits.device), float("-inf"))


def cache_hook_names(model: HookedModel | Resolved, layers: int | Sequence[int] | None = None, *,
                     model_scores: bool = True) -> list[str]:
    """The hook names an activation cache needs for :func:`capture_attention_inputs`.

    Use as ``model.run_with_cache(tokens, names_filter=cache_hook_names(model))`` to cache
    only what the analyses read.
    """
    specs = resolve(model).specs
    names = []
    for layer in as_layers(layers, len(specs)):
        spec = specs[layer]
        names += [spec.q_hook, spec.k_hook]
        if model_scores:
            names += [n for n in (spec.scores_hook, spec.pattern_hook) if n]
    return names


def _inputs_from_cache(cache: Any, specs: Sequence[RopeSpec],
                       query_positions: int | Sequence[int] | Tensor | None,
                       model_scores: bool) -> dict[int, AttentionInputs]:
    """:class:`AttentionInputs` read from an activation cache (see capture_attention_inputs)."""
    def get(name: str) -> Tensor | None:
        try:
            return cache[name]
        except KeyError:
            return None

    missing = [n for spec in specs for n in (spec.q_hook, spec.k_hook) if get(n) is None]
    if missing:
        raise InvalidSelectionError(
            f"the activation cache lacks {', '.join(missing)}: the un-rotated queries and keys "
            "are read from there. Cache them: model.run_with_cache(tokens, names_filter="
            "lens_possym.capture.cache_hook_names(model)), or pass the tokens instead")
    out = {}
    for spec in specs:
        q, k = heads_view(get(spec.q_hook), spec), heads_view(get(spec.k_hook), spec)
        spec = spec.at_length(k.shape[1])  # this input's angles (LongRoPE, dynamic NTK)
        qpos_host = as_positions(query_positions, q.shape[1])
        qpos = qpos_host.to(q.device)
        scores = get(spec.scores_hook) if model_scores and spec.scores_hook else None
        pattern = get(spec.pattern_hook) if model_scores else None
        out[spec.layer] = AttentionInputs(
            spec=spec, q=q[:, qpos].detach(), k=k.detach(), query_positions=qpos,
            key_positions=torch.arange(k.shape[1], device=q.device),
            model_scores=None if scores is None else scores[:, :, qpos].detach(),
            model_pattern=None if pattern is None else pattern[:, :, qpos].detach(),
            query_list=tuple(qpos_host.tolist()),
        )
    return out
