r"""Patching heads and single RoPE frequencies from a source run into another run.

**Head patching** replaces query head ``h``'s rows of ``blocks.{L}.attn.hook_z``
(``[batch, pos, head_index, d_head]``, the head's ``pattern · v`` before the output
projection, TransformerLens's convention) with the source run's. Heads are query heads, so
GQA needs no special care.

**Frequency patching** replaces pair ``f`` of the un-rotated query of head ``h`` (side
``"q"``) or of its key (``"k"``) with the source run's, at ``spec.q_hook``/``spec.k_hook``.
Both runs rotate the pair at the same positions, so this equals patching the rotated pair:
the score term ``λ_f`` of the head then uses the source's query (or key) content for that
frequency and the run's own for every other. Key patches for part of a KV group use the
GQA-safe recomputation of :mod:`lens_possym.interventions.engine`.

A *source* is an activation cache from the source run (``model.run_with_cache``; any mapping
from hook names to tensors works) or the source input itself (prompts or tokens), which is
then run once. Source and run must have the same number of positions; the source batch is
either the run's or 1 (broadcast).

For :func:`transformer_lens.patching.generic_activation_patch`, :func:`frequency_patch_setter`
gives a ``patch_setter`` over indices ``[layer, head, freq]`` and
:func:`frequency_index_df` the index dataframe; head patching uses TransformerLens's own
``layer_head_vector_patch_setter`` on activation ``"z"``.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Callable, Iterator, Literal, Mapping, Sequence

import torch
from jaxtyping import Float
from torch import Tensor

from .._checks import boundary
from .._ids import read_ids
from .._inputs import as_positions, as_tokens
from ..errors import InvalidSelectionError, UnsupportedModelError
from ..resolved import Resolved, model_of, resolve
from ..rope import RopeSpec
from ..typing import FwdHooks, HookedModel, HookFn
from .edits import replace_edit
from .engine import PairEdit, bphd, compile_selection, edit_hook, z_hook_name
from .modes import check_side
from .selection import FreqsLike, HeadsLike, parse_freqs, parse_heads, parse_selection
from .._inputs import as_layers

if TYPE_CHECKING:
    import pandas as pd

__all__ = [
    "source_activations",
    "patch_heads_hook",
    "patch_heads_hooks",
    "patch_heads",
    "patch_frequencies_hook",
    "patch_frequencies_hooks",
    "patch_frequencies",
    "frequency_patch_setter",
    "frequency_index_df",
    "qk_activation_name",
]


def _is_cache(source: Any) -> bool:
    return isinstance(source, Mapping) or (
        hasattr(source, "keys") and hasattr(source, "__getitem__")
        and not isinstance(source, (Tensor, str, list, tuple))
    )


@boundary
def source_activations(model: HookedModel | Resolved, source: Any, names: Sequence[str]
                       ) -> dict[str, Tensor]:
    """The tensors ``names`` of the source run: read from a cache, or computed by one pass.

    Raises:
        InvalidSelectionError: a cache lacking one of ``names``.
    """
    model = model_of(model)
    names = list(dict.fromkeys(names))
    if _is_cache(source):
        out = {}
        for name in names:
            try:
                out[name] = source[name]
            except KeyError:
                raise InvalidSelectionError(
                    f"the source cache has no {name!r}; cache it (run_with_cache(..., "
                    f"names_filter=[{name!r}, ...])) or pass the source prompts instead"
                ) from None
        return out
    hook_dict = getattr(model, "hook_dict", None) or {}
    unknown = [n for n in names if hook_dict and n not in hook_dict]
    if unknown:
        raise InvalidSelectionError(
            f"no hook point {unknown[0]!r} on this model; names are like "
            "'blocks.0.attn.hook_q' (see model.hook_dict)")
    tokens = as_tokens(model, source)
    with torch.no_grad():
        _, cache = model.run_with_cache(tokens, names_filter=names, return_type=None)
    return {name: cache[name] for name in names}


def _check_source(source: Tensor, target: Tensor, what: str) -> None:
    if source.shape[1:] != target.shape[1:] or source.shape[0] not in (1, target.shape[0]):
        raise InvalidSelectionError(
            f"the source {what} has shape {tuple(source.shape)} but the run's is "
            f"{tuple(target.shape)}; patch between runs with the same positions, and a "
            "source batch equal to the run's or of 1"
        )


# ---- heads ---------------------------------------------------------------------------------


@boundary
def patch_heads_hook(source_z: Float[Tensor, "batch pos head_index d_head"],
                     heads: int | Sequence[int],
                     positions: int | Sequence[int] | Tensor | None = None) -> HookFn:
    """A hook for ``blocks.{L}.attn.hook_z`` that copies ``heads`` (query heads) from ``source_z``.

    Args:
        source_z: the source run's ``hook_z`` of the same layer.
        heads: query heads to patch.
        positions: positions to patch (all by default; negatives count from the end).
    """
    if not isinstance(heads, (int, str, list, tuple, range, Tensor)) or isinstance(heads, bool):
        raise InvalidSelectionError(f"heads must be head indices, got {heads!r}")
    head_list = read_ids(heads, 1 << 30, what="head")
    if not head_list:
        raise InvalidSelectionError("no heads to patch; pass e.g. [0, 3]")

    def hook(z: Tensor, hook: Any = None) -> Tensor:
        _check_source(source_z, z, "hook_z")
        bad = [h for h in head_list if not 0 <= h < z.shape[2]]
        if bad:
            raise InvalidSelectionError(
                f"head {bad} out of range: hook_z has {z.shape[2]} query heads"
            )
        pos = as_positions(positions, z.shape[1], "position").to(z.device)
        out = z.clone()
        src = source_z.to(device=z.device, dtype=z.dtype)
        for h in head_list:
            out[:, pos, h] = src[:, pos, h]
        return out

    return hook


def patch_heads_hooks(model: HookedModel | Resolved, source: Any, heads: HeadsLike,
                      positions: int | Sequence[int] | Tensor | None = None) -> FwdHooks:
    """Hooks patching query ``heads`` (e.g. ``"12.0,13.1"``) at ``hook_z`` from ``source``."""
    resolved = resolve(model)
    specs = resolved.specs
    by_layer: dict[int, list[int]] = {}
    for layer, head in parse_heads(heads, specs):
        by_layer.setdefault(layer, []).append(head)
    names = {layer: z_hook_name(specs[layer]) for layer in by_layer}
    acts = source_activations(resolved.model, source, list(names.values()))
    return [(names[layer], patch_heads_hook(acts[names[layer]], hs, positions))
            for layer, hs in by_layer.items()]


@contextmanager
def patch_heads(model: HookedModel, source: Any, heads: HeadsLike,
                positions: int | Sequence[int] | Tensor | None = None) -> Iterator[HookedModel]:
    """Context manager: inside the block, ``heads`` read their ``hook_z`` from ``source``.

    Example::

        _, clean = model.run_with_cache(clean_tokens)
        with lp.patch_heads(model, clean, "12.0,13.1"):
            patched_logits = model(corrupted_tokens)
    """
    with model.hooks(fwd_hooks=patch_heads_hooks(model, source, heads, positions)):
        yield model


# ---- frequencies -----------------------------------------------------------------------------


@boundary
def patch_frequencies_hook(spec: RopeSpec, source: Tensor, heads: int | Sequence[int],
                           freqs: FreqsLike, *, side: Literal["q", "k"] = "q") -> HookFn:
    """One hook copying pairs ``freqs`` of ``heads`` from ``source`` (low-level).

    Attach at ``spec.q_hook`` (``side="q"``, query heads) or ``spec.k_hook`` (``"k"``,
    **KV heads**: every query head of the group sees the patched key). ``source`` is the
    source run's tensor at the same hook, in the hook's layout.
    """
    check_side(side, ("q", "k"))
    ids = parse_freqs(freqs, spec)
    table = bphd(source, spec)
    edit = replace_edit(spec, ids, table, "source")
    head_list = read_ids(heads, spec.n_heads if side == "q" else spec.n_kv_heads,
                         what="query head" if side == "q" else "KV head",
                         where=f"layer {spec.layer}")
    return edit_hook(spec, side, {h: edit for h in head_list} if ids else {})


def patch_frequencies_hooks(model: HookedModel | Resolved, source: Any, selection: Any, *,
                            freqs: FreqsLike = None, side: Literal["q", "k", "qk"] = "q"
                            ) -> FwdHooks:
    """Hooks patching chosen frequencies of chosen heads from ``source``, GQA-safely.

    Args:
        selection: ``{head: freqs}`` or heads alone with ``freqs`` (as in
            :func:`~lens_possym.interventions.ablate_frequencies_hooks`).
        side: patch the query pairs (``"q"``), the key pairs (``"k"``) or both.
    """
    check_side(side)
    resolved = resolve(model)
    specs = resolved.specs
    chosen = parse_selection(selection, specs, freqs)
    names = []
    for layer in chosen:
        if "q" in side:
            names.append(specs[layer].q_hook)
        if "k" in side:
            names.append(specs[layer].k_hook)
    acts = source_activations(resolved.model, source, names)

    def from_source(spec: RopeSpec, ids: tuple[int, ...], which: str) -> PairEdit:
        hook = spec.q_hook if which == "q" else spec.k_hook
        return replace_edit(spec, ids, bphd(acts[hook], spec), "source")

    return compile_selection(specs, chosen, side, from_source)


@contextmanager
def patch_frequencies(model: HookedModel, source: Any, selection: Any, *,
                      freqs: FreqsLike = None, side: Literal["q", "k", "qk"] = "q"
                      ) -> Iterator[HookedModel]:
    """Context manager form of :func:`patch_frequencies_hooks`."""
    with model.hooks(fwd_hooks=patch_frequencies_hooks(model, source, selection, freqs=freqs,
                                                     side=side)):
        yield model


# ---- transformer_lens.patching -------------------------------------------------------------


def qk_activation_name(model: HookedModel | Resolved, side: Literal["q", "k"] = "q") -> str:
    """The ``activation_name`` under which every layer's q (or k) pairs can be patched.

    ``"q"``/``"k"`` where ``hook_q``/``hook_k`` are the un-rotated vectors lens-possym
    reads (no q/k-norm); ``"rot_q"``/``"rot_k"`` where there is a q/k-norm but the rotation
    hooks fire (Gemma 3): patching a rotated pair between runs at the same positions is
    the same as patching the un-rotated one.
    """
    check_side(side, ("q", "k"))
    specs = resolve(model).specs
    if all(getattr(s, f"{side}_hook").endswith(f".hook_{side}") for s in specs):
        return side
    if all(s.rot_hooks for s in specs):
        return f"rot_{side}"
    raise UnsupportedModelError(
        "this model has a q/k-norm and no rotation hooks, so no single TransformerLens "
        "activation name exposes its un-rotated pairs; use patch_frequencies_hooks instead"
    )


def frequency_patch_setter(model: HookedModel | Resolved
                           ) -> Callable[[Tensor, Sequence[int], Tensor], Tensor]:
    """A ``patch_setter`` for ``generic_activation_patch`` over ``index = [layer, head, freq]``.

    Use with ``activation_name=qk_activation_name(model, side)`` and
    ``index_df=frequency_index_df(model, ...)``; for keys the head index is a KV head
    (as TransformerLens counts heads for ``"k"``).
    """
    specs = resolve(model).specs

    def setter(corrupted: Tensor, index: Sequence[int], clean: Tensor) -> Tensor:
        if len(index) != 3:
            raise InvalidSelectionError(
                f"frequency_patch_setter expects index [layer, head, freq], got {list(index)}"
            )
        layer, head, freq = (int(i) for i in index)
        dims = specs[layer].dims_of(freq)
        corrupted[:, :, head, dims] = clean[:, :, head, dims].to(corrupted.dtype)
        return corrupted

    return setter


@boundary
def frequency_index_df(model: HookedModel | Resolved, layers: int | Sequence[int] | None = None,
                       heads: int | Sequence[int] | None = None,
                       freqs: FreqsLike = None, *, side: Literal["q", "k"] = "q") -> "pd.DataFrame":
    """A pandas dataframe of ``[layer, head_index, freq]`` rows for ``generic_activation_patch``."""
    import pandas as pd

    specs = resolve(model).specs
    rows = []
    for layer in as_layers(layers, len(specs)):
        spec = specs[layer]
        check_side(side, ("q", "k"))
        n = spec.n_heads if side == "q" else spec.n_kv_heads
        head_list = read_ids(heads, n, what="query head" if side == "q" else "KV head",
                             where=f"layer {layer}")
        for head in head_list:
            rows += [(layer, head, f) for f in parse_freqs(freqs, spec)]
    return pd.DataFrame(rows, columns=["layer", "head_index", "freq"])
