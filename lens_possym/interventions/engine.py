r"""Compile per-head edits of un-rotated queries and keys into TransformerLens hooks.

Every frequency-level intervention in this package is an *edit* of some 2-D pairs of the
un-rotated query or key of some heads: zero them, replace them (by a mean or by a source
run), rotate them back (``unrotate``), or scale them (gates). Edits act at the hooks where
lens-possym reads q and k (``spec.q_hook``/``spec.k_hook``: after any q/k-norm, before
RoPE), so the model's own RoPE runs afterwards and the same code works on families whose
rotation hooks never fire (GPT-NeoX, GPT-J).

**Grouped-query attention.** Query hooks have one row per query head, key hooks one per
KV head, shared by the ``g = n_heads / n_kv_heads`` query heads of its group. A query-side
edit is private to its head. A key-side edit is compiled per KV group:

* every query head of the group asks for the same key edit → it is applied to the shared
  key at ``spec.k_hook`` (exact, and exactly what each head asked for);
* only some heads of the group ask for it (or they ask for different ones) → the shared
  key is left alone and the attention of *those heads only* is recomputed with their own
  edited keys: q, k and v are read at their hooks on the same pass, the head's scores,
  softcap, causal/window mask, softmax and ``pattern · v`` are computed with the layer's
  geometry, and the result replaces those heads' rows of ``hook_z``. The other heads of
  the group are never touched (bit for bit). As a self-check, the same recomputation with
  the *unedited* keys must reproduce the model's own ``hook_z`` rows for those heads, or
  :class:`~lens_possym.errors.DecompositionMismatchError` is raised.

Positions are taken as ``0..pos-1`` of the tensor a hook receives (a full forward pass,
not incremental decoding with a KV cache).
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any, Callable, Hashable, Mapping, Protocol, Sequence

import torch
from einops import einsum
from jaxtyping import Float, Int
from torch import Tensor

from .._attention import visible_mask
from .._hooks import declare_hook, declare_partial_keys, hook_effect
from .._precision import compute_dtype, is_half, model_tolerance
from ..decompose import apply_softcap
from ..errors import DecompositionMismatchError, InvalidSelectionError
from ..rope import RopeSpec, heads_view, rotate
from ..typing import FwdHooks, HookFn

__all__ = ["PairEdit", "bphd", "edit_hook", "compile_layer", "compile_selection",
           "attend", "z_hook_name", "v_hook_name"]


class PairEdit(Protocol):
    """Edit of one head's un-rotated rows: ``(x [batch, pos, d_head], head, positions)``.

    ``head`` indexes the side's own heads: the query head for query edits, the KV head for
    key edits (so tables such as means and sources are looked up per KV head).
    """

    def __call__(self, x: Float[Tensor, "batch pos d_head"], head: int,
                 positions: Int[Tensor, "pos"]) -> Float[Tensor, "batch pos d_head"]: ...


def bphd(tensor: Tensor, spec: RopeSpec | None) -> Tensor:
    """A ``[batch, pos, head, d_head]`` view of a tensor from ``spec.q_hook``/``spec.k_hook``
    (any of the layouts of :func:`lens_possym.rope.heads_view`); ``spec=None``: already so."""
    return tensor if spec is None else heads_view(tensor, spec)


def z_hook_name(spec: RopeSpec) -> str:
    return spec.extra.get("z_hook", f"blocks.{spec.layer}.attn.hook_z")


def v_hook_name(spec: RopeSpec) -> str:
    return spec.extra.get("v_hook", f"blocks.{spec.layer}.attn.hook_v")


def _check_heads(view: Tensor, expected: int, spec: RopeSpec, side: str) -> None:
    if view.ndim != 4 or view.shape[2] != expected or view.shape[3] != spec.d_head:
        raise InvalidSelectionError(
            f"layer {spec.layer}: the {side} hook received a tensor of shape "
            f"{tuple(view.shape)} (as [batch, pos, head, d_head]), but the layer has "
            f"{expected} {side} heads of width {spec.d_head}; attach this hook at "
            f"{spec.q_hook if side == 'query' else spec.k_hook}"
        )


def edit_hook(spec: RopeSpec, side: str, edits: dict[int, PairEdit]) -> HookFn:
    """A hook for ``spec.q_hook`` (``side="q"``) or ``spec.k_hook`` (``"k"``) applying ``edits``.

    ``edits`` maps a head of that side (query heads for ``"q"``, KV heads for ``"k"``) to
    its edit. Rows of other heads are returned unchanged (the tensor is cloned, never
    edited in place).
    """
    expected = spec.n_heads if side == "q" else spec.n_kv_heads
    what = "query" if side == "q" else "key"
    for head in edits:
        if not 0 <= head < expected:
            raise InvalidSelectionError(
                f"{what} head {head} out of range: layer {spec.layer} has {expected} {what} heads"
            )

    def hook(tensor: Tensor, hook: Any = None) -> Tensor:
        source = bphd(tensor, spec)
        _check_heads(source, expected, spec, what)
        out = tensor.clone()
        view = bphd(out, spec)
        positions = torch.arange(view.shape[1], device=tensor.device)
        for head, edit in edits.items():
            view[:, :, head] = edit(source[:, :, head], head, positions)
        return out

    return declare_hook(hook, strongest_effect(edits.values()))


_EFFECT_ORDER = ("observe", "position_free", "rowwise")


def strongest_effect(edits) -> str | None:
    """The declared effect of applying all ``edits`` (``None`` if one is undeclared)."""
    effects = [hook_effect(e) for e in edits]
    if any(e not in _EFFECT_ORDER for e in effects):
        return None
    return max(effects, key=_EFFECT_ORDER.index, default="observe")


def attend(spec: RopeSpec, q: Float[Tensor, "batch pos head_index d_head"],
           k: Float[Tensor, "batch pos head_index d_head"],
           v: Float[Tensor, "batch pos head_index d_head"]
           ) -> Float[Tensor, "batch pos head_index d_head"]:
    """One layer's attention for some heads, from un-rotated q and k (keys per query head).

    RoPE with the model's tables (in the model's dtype), ``scale · q·k``, softcap, causal
    and sliding-window mask, softmax in float32, ``pattern · v``: the order Hugging Face
    uses, and in the dtypes it uses. A half-precision model (bfloat16, float16) computes
    the scores and ``pattern · v`` in its own dtype with the softmax in float32 (Hugging
    Face's eager attention), so they are done so here too: the recomputation then agrees
    with the model's ``hook_z`` to its rounding (on gemma-3-270m in bfloat16, layer 5:
    float32 arithmetic here was 0.19 off the model's bfloat16 rows, over the tolerance
    of a few bfloat16 units). Wider dtypes compute in at least float32. Returns ``z`` in
    ``v``'s dtype.
    """
    positions = torch.arange(q.shape[1], device=q.device)
    spec = spec.at_length(q.shape[1])  # LongRoPE / dynamic NTK: this input's angles
    dtype = q.dtype if is_half(q.dtype) else compute_dtype(q.dtype)
    qr = rotate(q, positions, spec).to(dtype)
    kr = rotate(k, positions, spec).to(dtype)
    scores = einsum(qr, kr, "batch query_pos head_index d_head, batch key_pos head_index d_head"
                    " -> batch head_index query_pos key_pos") * spec.scale
    scores = apply_softcap(scores, spec.softcap)
    allowed = visible_mask(positions, positions, spec.window or None)
    scores = scores.masked_fill(~allowed, float("-inf"))
    pattern = torch.softmax(scores, dim=-1, dtype=compute_dtype(dtype)).to(dtype)
    z = einsum(pattern, v.to(dtype), "batch head_index query_pos key_pos, "
               "batch key_pos head_index d_head -> batch query_pos head_index d_head")
    return z.to(v.dtype)


def _recompute_hooks(spec: RopeSpec, k_edits: dict[int, PairEdit]) -> tuple[list, list, list, list]:
    """Hooks that recompute the query heads in ``k_edits`` with their own edited keys.

    Returns ``(q_capture, k_capture, v_capture, z_replace)`` hook lists, to be placed
    after the query edits, before the key edits, anywhere, and at ``hook_z``.
    """
    store: dict[str, Tensor] = {}
    heads = sorted(k_edits)

    def keep(name: str, layout: RopeSpec | None):
        def hook(tensor: Tensor, hook: Any = None) -> Tensor:
            store[name] = bphd(tensor, layout)
            return tensor
        return declare_hook(hook, "observe")

    def replace_z(z: Tensor, hook: Any = None) -> Tensor:
        missing = [n for n in ("q", "k", "v") if n not in store]
        if missing:
            raise InvalidSelectionError(
                f"layer {spec.layer}: the {'/'.join(missing)} hook(s) did not fire before "
                "hook_z, so the heads cannot be recomputed with their own keys"
            )
        q, k, v = store.pop("q"), store.pop("k"), store.pop("v")
        positions = torch.arange(q.shape[1], device=q.device)
        kv = spec.kv_index(heads).to(k.device)
        q_h = q[:, :, heads]
        k_plain = k[:, :, kv]
        k_edit = torch.stack(
            [k_edits[h](k[:, :, spec.kv_head(h)], spec.kv_head(h), positions) for h in heads],
            dim=2,
        )
        v_h = v[:, :, kv]
        both = attend(spec, torch.cat([q_h, q_h], 0), torch.cat([k_plain, k_edit], 0),
                      torch.cat([v_h, v_h], 0))
        check, new = both[: q.shape[0]], both[q.shape[0]:]
        model_rows = z[:, :, heads]
        err = float((check.detach().float() - model_rows.detach().float()).abs().max()) if check.numel() else 0.0
        tol = model_tolerance(z.dtype) * max(1.0, float(model_rows.detach().abs().max()))
        if not err <= tol:
            raise DecompositionMismatchError(
                f"layer {spec.layer}: recomputing heads {heads} from their queries and keys "
                f"differs from the model's hook_z by {err:.3g} (tolerance {tol:.3g}), so a "
                "key edit for part of a KV group cannot be applied exactly here. Another hook "
                "may be editing q/k/v after lens-possym's, or this attention variant is not "
                f"supported ({spec.describe()}); edit whole KV groups instead"
            )
        out = z.clone()
        out[:, :, heads] = new.to(z.dtype)
        return out

    # captures read the edited keys of these heads from here (lens_possym.capture)
    declare_partial_keys(replace_z, spec, k_edits, strongest_effect(k_edits.values()))
    return ([(spec.q_hook, keep("q", spec))],
            [(spec.k_hook, keep("k", spec))],
            [(v_hook_name(spec), keep("v", None))],
            [(z_hook_name(spec), replace_z)])


def compile_layer(spec: RopeSpec, q_edits: dict[int, PairEdit],
                  k_edits: dict[int, tuple[Hashable, PairEdit]]) -> FwdHooks:
    """Hooks that apply per-query-head edits of q and k at one layer, GQA-safely.

    Args:
        q_edits: ``{query head: edit}``.
        k_edits: ``{query head: (key, edit)}``; ``key`` identifies the edit, so that a
            KV group whose query heads all carry equal keys is edited once at
            ``spec.k_hook``; otherwise the heads asking are recomputed (module docstring).

    Returns:
        ``[(hook name, hook fn), ...]`` in the order they must be registered.
    """
    by_group: dict[int, dict[int, Hashable]] = defaultdict(dict)
    for head, (key, _) in k_edits.items():
        by_group[spec.kv_head(head)][head] = key
    kv_edits: dict[int, PairEdit] = {}
    partial: dict[int, PairEdit] = {}
    for group, members in by_group.items():
        if len(members) == spec.group_size and len(set(members.values())) == 1:
            kv_edits[group] = k_edits[next(iter(members))][1]
        else:
            partial.update({head: k_edits[head][1] for head in members})

    hooks: FwdHooks = []
    if q_edits:
        hooks.append((spec.q_hook, edit_hook(spec, "q", q_edits)))
    if partial:
        q_cap, k_cap, v_cap, z_rep = _recompute_hooks(spec, partial)
        hooks += q_cap + k_cap + v_cap
    if kv_edits:
        hooks.append((spec.k_hook, edit_hook(spec, "k", kv_edits)))
    if partial:
        hooks += z_rep
    return hooks


def compile_selection(specs: Sequence[RopeSpec], chosen: Mapping[int, Mapping[int, Sequence[int]]],
                      side: str, make_edit: Callable[[RopeSpec, tuple[int, ...], str], PairEdit]
                      ) -> FwdHooks:
    """Hooks for a whole selection ``{layer: {query head: frequency ids}}``.

    ``make_edit(spec, ids, "q" | "k")`` gives the edit of one head's queries or keys; it
    is asked for the sides named in ``side`` (``"q"``, ``"k"`` or ``"qk"``). Heads with no
    ids get no edit, so an empty selection gives no hooks at all. The keys' edits are
    identified by their ids, which lets :func:`compile_layer` edit a KV group once when all
    its query heads ask for the same ids (see the module docstring).
    """
    hooks: FwdHooks = []
    for layer, heads in chosen.items():
        spec = specs[layer]
        q_edits: dict[int, PairEdit] = {}
        k_edits: dict[int, tuple[Hashable, PairEdit]] = {}
        for head, ids in heads.items():
            if not ids:
                continue
            if "q" in side:
                q_edits[head] = make_edit(spec, tuple(ids), "q")
            if "k" in side:
                k_edits[head] = (tuple(ids), make_edit(spec, tuple(ids), "k"))
        hooks += compile_layer(spec, q_edits, k_edits)
    return hooks
