r"""Batched activation-patching grids: every head, position, frequency or layer component.

:func:`generic_patch_grid` has the signature of
:func:`transformer_lens.patching.generic_activation_patch` (the run's tokens, the source
run's cache, a metric, a ``patch_setter``, an ``activation_name`` and the index axes or an
``index_df``), takes TransformerLens's own setters (``layer_head_vector_patch_setter``,
``layer_pos_patch_setter``, ...) and fills the same ``[n_layers, n_heads]`` /
``[n_layers, n_pos, n_heads]`` / ... grid, with two differences:

* **several patches per forward pass**: ``patches_per_pass`` cells are patched in one pass
  over the run's batch stacked that many times, copy ``c`` (rows ``c·B .. (c+1)·B``)
  carrying cell ``c``'s patch (TransformerLens runs one pass per cell);
* **exact savings** (bridges): a patch at layer ``L`` cannot change anything before ``L``,
  so every pass starts from the run's cached residual stream at the first layer its cells
  patch (``start_at_layer``), and only the last position's logits are computed
  (``logits_to_keep=1``; ``last_token_only=False`` when the metric reads other positions).

The metric returns one value per prompt (``[batch]``), and every value is kept: the result
is a :class:`PatchingGrid` of ``[*grid, n_prompts]`` values with means, standard errors,
bootstrap intervals and sign-flip p-values on top (:mod:`.uncertainty`; the same
arithmetic as TransformerLens's ``PatchingResult``, which :meth:`PatchingGrid.to_patching_result`
returns).

Named partials, as in ``transformer_lens.patching``: :func:`patch_head_out_all_pos`
(``[layer, head]``), :func:`patch_head_out_by_pos` (``[layer, pos, head]``),
:func:`patch_resid_pre`, :func:`patch_attn_out`, :func:`patch_mlp_out` (``[layer, pos]``)
and their ``_all_pos`` forms (``[layer]``), :func:`patch_frequencies_grid` (``[layer,
head, frequency]``). :func:`patch_grid` runs a whole experiment from
:class:`~lens_possym.tasks.CounterfactualPairs`: it caches the source run, builds the
normalised logit-difference metric and picks the partial.

Directions: ``"denoise"`` (the default, TransformerLens's) patches clean activations into
the corrupted run, so a cell near 1 restores the clean answer; ``"noise"`` patches
corrupted activations into the clean run, so a cell near 0 destroys it.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

import torch
from jaxtyping import Float, Int
from torch import Tensor

from .._inputs import as_tokens
from .._precision import model_tolerance
from .._json import JsonConfig, check_field_types, to_jsonable
from ..errors import InvalidSelectionError
from ..results_io import ResultIO, number
from ..typing import HookedModel
from ._passes import blocks_from, fresh_cache, layer_list, prefix_cache
from .uncertainty import (DEFAULT_CONFIDENCE, DEFAULT_RESAMPLES, Uncertainty,
                          bootstrap_interval, standard_error, uncertainty)
from ..resolved import Resolved, resolve
from .patching import frequency_index_df, frequency_patch_setter, qk_activation_name
from .._ids import check_ids_text
from .selection import freqs_label
from .._inputs import as_heads, as_layers
from .._json import tensor_from_json

if TYPE_CHECKING:
    import pandas as pd
    from transformer_lens.patching import PatchingResult

__all__ = [
    "PATCH_SITES",
    "DIRECTIONS",
    "PatchGridConfig",
    "PatchingGrid",
    "generic_patch_grid",
    "patch_grid",
    "patch_head_out_all_pos",
    "patch_head_out_by_pos",
    "patch_resid_pre",
    "patch_attn_out",
    "patch_mlp_out",
    "patch_resid_pre_all_pos",
    "patch_attn_out_all_pos",
    "patch_mlp_out_all_pos",
    "patch_frequencies_grid",
    "layer_vector_patch_setter",
]

#: What :func:`patch_grid` can patch: head outputs, RoPE frequency pairs, layer components.
PATCH_SITES: tuple[str, ...] = ("heads", "frequencies", "resid_pre", "attn_out", "mlp_out")
DIRECTIONS: tuple[str, ...] = ("denoise", "noise")

PatchSetter = Callable[[Tensor, Sequence[int], Tensor], Tensor]

# activations laid out [batch, pos, ...] (the prefix reuse needs the position on axis 1),
# and the index axes whose meaning it knows
_POSITIONAL = frozenset({"z", "q", "k", "v", "rot_q", "rot_k", "result", "resid_pre",
                         "resid_mid", "resid_post", "attn_out", "mlp_out"})
_AXES = frozenset({"layer", "head", "head_index", "pos", "freq"})


def spec_window(model: HookedModel | Resolved) -> list[int]:
    """Sliding windows of the model's layers (their HF caches keep only the window, which
    the prefix reuse does not handle); ``[]`` when none is known."""
    try:
        return [int(s.window) for s in resolve(model).specs if s.window]
    except Exception:  # noqa: BLE001 - a model lens-possym cannot read: no windows known
        return []


# ---- the engine ------------------------------------------------------------------------------


def _index_rows(resolved: Resolved, tokens: Tensor, activation_name: str,
                index_axis_names: Sequence[str] | None, index_df: Any
                ) -> tuple[list[tuple[int, ...]], list[str], tuple[int, ...]]:
    """The cells to patch, the axis names and the grid shape (TransformerLens's rules: the
    cartesian product of the named axes, or the rows of ``index_df``; layer first)."""
    if (index_axis_names is None) == (index_df is None):
        raise InvalidSelectionError("give index_axis_names or index_df (exactly one)")
    model = resolved.model
    n_heads = int(model.cfg.n_heads)
    kv = getattr(model.cfg, "n_key_value_heads", None)
    if activation_name in ("k", "v", "rot_k") and kv:
        n_heads = int(kv)
    n_pos = int(tokens.shape[1])
    ranges = {"layer": int(model.cfg.n_layers), "pos": n_pos, "head_index": n_heads,
              "head": n_heads, "src_pos": n_pos, "dest_pos": n_pos}
    if index_df is not None:
        names = [str(c) for c in index_df.columns]
        rows = [tuple(int(v) for v in row) for row in index_df.itertuples(index=False)]
        if not rows:
            raise InvalidSelectionError("index_df has no rows: nothing to patch")
        if not names or names[0] != "layer":
            raise InvalidSelectionError(f"index_df's first column must be 'layer', got {names}")
        if "freq" in names:
            ranges["freq"] = max(spec.n_freqs for spec in resolved.specs)
        # a dense grid: the model's full range of each known axis (cells not listed: nan)
        shape = tuple(max(ranges.get(name, 0), max(r[i] for r in rows) + 1)
                      for i, name in enumerate(names))
        return rows, names, shape
    import itertools

    unknown = [a for a in index_axis_names if a not in ranges]
    if unknown or not index_axis_names or index_axis_names[0] != "layer":
        raise InvalidSelectionError(
            f"index axes {list(index_axis_names)}: the first must be 'layer' and each one of "
            f"{', '.join(ranges)}")
    shape = tuple(ranges[a] for a in index_axis_names)
    rows = list(itertools.product(*[range(n) for n in shape]))
    return rows, list(index_axis_names), shape


def _per_prompt(value: Any, n: int, name: str) -> Tensor:
    value = torch.as_tensor(value)
    if value.ndim != 1 or value.shape[0] != n:
        raise InvalidSelectionError(
            f"the patching metric {name!r} must return one value per prompt ([{n}]), got "
            f"shape {tuple(value.shape)}; return e.g. the per-prompt logit difference instead "
            "of its mean")
    return value.detach().float().cpu()


def generic_patch_grid(model: HookedModel | Resolved, corrupted_tokens: Int[Tensor, "batch pos"],
                       clean_cache: Mapping[str, Tensor],
                       patching_metric: Callable[[Tensor], Tensor],
                       patch_setter: PatchSetter, activation_name: str,
                       index_axis_names: Sequence[str] | None = None, index_df: Any = None, *,
                       patches_per_pass: int = 16, last_token_only: bool = True,
                       source_baseline: Tensor | None = None, progress: bool = True,
                       info: Mapping[str, Any] | None = None,
                       config: "PatchGridConfig | None" = None,
                       reuse_prefix: bool = True) -> "PatchingGrid":
    """Patch each cell alone and measure ``patching_metric``: TransformerLens's
    ``generic_activation_patch``, batched (module docstring).

    Args:
        model: a TransformerLens model (bridges get the ``start_at_layer`` and last-token
            savings; others run the stacked tokens whole).
        corrupted_tokens: ``[batch, pos]`` the run patched into (the corrupted run when
            denoising, the clean run when noising).
        clean_cache: the source run's activations (any mapping from hook names to tensors;
            only the hooks of ``activation_name`` at the patched layers are read).
        patching_metric: ``logits -> [batch]`` one value per prompt.
        patch_setter: ``(activation, index, source_activation) -> activation``, as in
            ``transformer_lens.patching`` (it may edit ``activation`` in place: it is handed
            a slice of a copy). ``activation`` holds one copy of the batch.
        activation_name: TransformerLens's short name (``"z"``, ``"resid_pre"``, ``"q"``,
            ...), the hook at layer ``index[0]``.
        index_axis_names, index_df: the cells, exactly as TransformerLens takes them; the
            result is a dense grid either way (cells not in ``index_df`` are ``nan``).
        patches_per_pass: cells patched in one forward pass.
        last_token_only: compute only the last position's logits (bridges).
        source_baseline: ``[batch]`` the metric on the source run, if known (kept in the
            result, for reports).
        progress: show a tqdm progress bar (default; ``False`` hides it).
        reuse_prefix: on bridges, compute only the positions some patch changes (module
            docstring); ``False`` always runs every position.

    Returns:
        :class:`PatchingGrid` with ``values`` of shape ``[*grid, batch]``.
    """
    from tqdm.auto import tqdm
    from transformer_lens.utilities import get_act_name

    if isinstance(patches_per_pass, bool) or not isinstance(patches_per_pass, int) \
            or patches_per_pass < 1:
        raise InvalidSelectionError(
            f"patches_per_pass must be a positive integer, got {patches_per_pass!r}")
    resolved = resolve(model)
    model = resolved.model
    tokens = as_tokens(model, corrupted_tokens)
    rows, axis_names, shape = _index_rows(resolved, tokens, activation_name, index_axis_names,
                                          index_df)
    n_layers = int(model.cfg.n_layers)
    bad = sorted({r[0] for r in rows if not 0 <= r[0] < n_layers})
    if bad:
        raise InvalidSelectionError(f"layer {bad} out of range: the model has {n_layers} layers")
    names = {layer: get_act_name(activation_name, layer) for layer in {r[0] for r in rows}}
    missing = [n for n in names.values() if n not in clean_cache]
    if missing:
        raise InvalidSelectionError(
            f"the source cache lacks {', '.join(missing[:3])}{' ...' if len(missing) > 3 else ''};"
            " cache those hooks (run_with_cache(..., names_filter=...)) or use patch_grid")
    metric_name = getattr(patching_metric, "__name__", "") or "metric"
    metric_name = "metric" if metric_name.startswith("<") else metric_name
    batch, n_pos = tokens.shape
    bridge = hasattr(model, "original_model")
    keep = {"logits_to_keep": 1} if (bridge and last_token_only) else {}
    rows = sorted(rows, key=lambda r: r[0])  # passes start at their first layer
    values = torch.full(shape + (batch,), float("nan"))
    pos_axes = [i for i, a in enumerate(axis_names) if a == "pos"]
    start = time.perf_counter()
    n_passes, n_skipped, prefix = 0, 0, 0

    def check_source(name: str, source: Tensor, activation: Tensor) -> None:
        if source.shape[0] not in (1, batch) or source.shape[1:] != activation.shape[1:]:
            raise InvalidSelectionError(
                f"the source {name} has shape {tuple(source.shape)}, the run's is "
                f"{tuple(activation.shape[1:])} per prompt for {batch} prompts; patch between "
                "runs of the same shape")

    def hook_for(name: str, members: list[tuple[int, tuple[int, ...]]], source: Tensor,
                 skip: int):
        """Copy ``c`` of the stacked batch gets cell ``c``'s patch; with ``skip`` > 0 the
        pass holds positions ``skip..`` only (the source is cut, positions shifted)."""
        source = source[:, skip:] if skip else source
        shift = (lambda index: [v - skip if i in pos_axes else v for i, v in enumerate(index)]) \
            if skip else list

        def hook(activation: Tensor, hook: Any = None) -> Tensor:
            check_source(name, source, activation)
            out = activation.clone()
            src = source.to(device=out.device, dtype=out.dtype)
            for copy, index in members:
                view = out[copy * batch:(copy + 1) * batch]
                patched = patch_setter(view, shift(index), src)
                if patched is not view:
                    out[copy * batch:(copy + 1) * batch] = patched
            return out
        return hook

    def run_chunk(chunk: list[tuple[int, ...]], skip: int, caches: dict[int, Any],
                  skip_blocks: bool = True) -> Tensor:
        by_hook: dict[str, list[tuple[int, tuple[int, ...]]]] = {}
        for copy, index in enumerate(chunk):
            by_hook.setdefault(names[index[0]], []).append((copy, index))
        hooks = [(name, hook_for(name, members, clean_cache[name], skip))
                 for name, members in by_hook.items()]
        if not bridge:
            return model.run_with_hooks(tokens.repeat(len(chunk), 1), fwd_hooks=hooks)
        first = chunk[0][0]
        resid = starts[first][:, skip:]
        stacked = resid.repeat(len(chunk), *([1] * (resid.ndim - 1)))
        extra = dict(keep)
        if not skip:  # no KV cache built per pass (its layer layout follows the config)
            extra["use_cache"] = False
        if skip:
            if "template" not in caches:
                caches["template"] = prefix_cache(model, tokens[:, :skip])
            kv = fresh_cache(caches["template"], len(chunk))
            if kv is None:  # a cache this cannot tile: run the prefix at this batch
                kv = fresh_cache(prefix_cache(model, tokens[:, :skip].repeat(len(chunk), 1)))
            extra["past_key_values"] = kv
        with blocks_from(model, first if skip_blocks else 0):
            return model.run_with_hooks(stacked, start_at_layer=first, fwd_hooks=hooks, **extra)

    with torch.no_grad():
        starts: dict[int, Tensor] = {}
        if bridge:
            first_layers = sorted({r[0] for r in rows})
            wanted = [f"blocks.{layer}.hook_resid_pre" for layer in first_layers]
            logits, cache = model.run_with_cache(
                tokens, names_filter=wanted + sorted(set(names.values())), **keep)
            starts = {layer: cache[f"blocks.{layer}.hook_resid_pre"] for layer in first_layers}
        else:
            logits = model(tokens)
        baseline = _per_prompt(patching_metric(logits), batch, metric_name)
        active = rows
        if bridge:
            # what each patch changes: a cell that changes nothing has the unpatched run's
            # values (it is that run) and needs no pass; positions before the first one any
            # patch changes are the unpatched run's in every pass (attention is causal)
            active, first_changed = [], n_pos
            positional = activation_name in _POSITIONAL and not (set(axis_names) - _AXES)
            for index in rows:
                name = names[index[0]]
                run_act, src = cache[name], clean_cache[name]
                check_source(name, src, run_act)
                patched = patch_setter(run_act.clone(), list(index),
                                       src.to(device=run_act.device, dtype=run_act.dtype))
                changed = patched != run_act
                if not changed.any():
                    values[index] = baseline
                    n_skipped += 1
                    continue
                active.append(index)
                if positional and run_act.ndim >= 2 and run_act.shape[1] == n_pos:
                    where = changed.transpose(0, 1).reshape(n_pos, -1).any(-1).nonzero()
                    first_changed = min(first_changed, int(where[0]))
                else:
                    first_changed = 0
            if reuse_prefix and 0 < first_changed < n_pos and active and \
                    not any(spec_window(resolved)) and layer_list(model) is not None:
                prefix = first_changed
            del cache
        bar = tqdm(total=len(rows), desc=f"patching {activation_name}", disable=not progress)
        bar.update(len(rows) - len(active))
        caches: dict[int, Any] = {}
        skip_blocks, checked = bridge and layer_list(model) is not None, False
        try:
            for i in range(0, len(active), patches_per_pass):
                chunk = active[i:i + patches_per_pass]
                out = run_chunk(chunk, prefix, caches, skip_blocks)
                n_passes += 1
                if not checked and (prefix or (skip_blocks and chunk[0][0] > 0)):
                    # the savings, checked once against whole passes of two of the cells; a
                    # model whose layer loop or cache they do not suit (it reads its layers
                    # by index, a sliding-window cache) is run whole from here on
                    checked = True
                    few = chunk[:2]
                    whole = run_chunk(few, 0, caches, skip_blocks=False)
                    n_passes += 1
                    part = out[:len(few) * batch, -1].float()
                    scale = float(whole[:, -1].abs().max()) or 1.0
                    atol = model_tolerance(whole.dtype) * scale  # the model's rounding
                    if not torch.allclose(part, whole[:, -1].float(), rtol=0, atol=atol):
                        prefix, skip_blocks = 0, False
                        out = run_chunk(chunk, 0, caches, skip_blocks=False)
                        n_passes += 1
                for copy, index in enumerate(chunk):
                    rows_out = out[copy * batch:(copy + 1) * batch]
                    values[index] = _per_prompt(patching_metric(rows_out), batch, metric_name)
                bar.update(len(chunk))
        finally:
            bar.close()
    if not torch.isfinite(values[tuple(zip(*rows))]).all():
        raise InvalidSelectionError(
            "the patching metric gave nan or inf for some cells; check the metric (a "
            "normalised metric needs clean and corrupted runs that differ)")
    return PatchingGrid(
        values=values, axis_names=axis_names, baseline=baseline,
        source_baseline=None if source_baseline is None else torch.as_tensor(
            source_baseline).detach().float().cpu(),
        metric=metric_name, activation_name=activation_name,
        config=config, seconds=time.perf_counter() - start, n_passes=n_passes,
        info={**dict(info or {}), "cells_unchanged": n_skipped, "prefix_reused": prefix,
              "blocks_skipped": bool(bridge and skip_blocks)})


# ---- setters and named partials ---------------------------------------------------------------


def layer_vector_patch_setter(corrupted_activation: Tensor, index: Sequence[int],
                              clean_activation: Tensor) -> Tensor:
    """Patch every position of a ``[batch, pos, ...]`` activation; ``index = [layer]``."""
    if len(index) != 1:
        raise InvalidSelectionError(f"layer_vector_patch_setter expects [layer], got {list(index)}")
    corrupted_activation[...] = clean_activation
    return corrupted_activation


def _tl_setters():
    from transformer_lens import patching as tl

    return tl


def patch_head_out_all_pos(model, corrupted_tokens, clean_cache, patching_metric,
                           **kwargs) -> PatchingGrid:
    """Every query head's ``hook_z`` patched at all positions: ``[layer, head]``
    (``get_act_patch_attn_head_out_all_pos``, batched)."""
    return generic_patch_grid(model, corrupted_tokens, clean_cache, patching_metric,
                              _tl_setters().layer_head_vector_patch_setter, "z",
                              ("layer", "head"), **kwargs)


def patch_head_out_by_pos(model, corrupted_tokens, clean_cache, patching_metric,
                          **kwargs) -> PatchingGrid:
    """Every query head's ``hook_z`` patched at one position at a time: ``[layer, pos, head]``
    (``get_act_patch_attn_head_out_by_pos``, batched)."""
    return generic_patch_grid(model, corrupted_tokens, clean_cache, patching_metric,
                              _tl_setters().layer_pos_head_vector_patch_setter, "z",
                              ("layer", "pos", "head"), **kwargs)


def _component(name: str, per_position: bool):
    def run(model, corrupted_tokens, clean_cache, patching_metric, **kwargs) -> PatchingGrid:
        if per_position:
            return generic_patch_grid(model, corrupted_tokens, clean_cache, patching_metric,
                                      _tl_setters().layer_pos_patch_setter, name,
                                      ("layer", "pos"), **kwargs)
        return generic_patch_grid(model, corrupted_tokens, clean_cache, patching_metric,
                                  layer_vector_patch_setter, name, ("layer",), **kwargs)

    run.__name__ = f"patch_{name}" + ("" if per_position else "_all_pos")
    run.__doc__ = (f"``blocks.{{L}}.hook_{name}`` patched "
                   + ("at one position at a time: ``[layer, pos]`` (TransformerLens's "
                      f"``get_act_patch_{name}``, batched)." if per_position else
                      "at every position: ``[layer]``."))
    return run


patch_resid_pre = _component("resid_pre", True)
patch_attn_out = _component("attn_out", True)
patch_mlp_out = _component("mlp_out", True)
patch_resid_pre_all_pos = _component("resid_pre", False)
patch_attn_out_all_pos = _component("attn_out", False)
patch_mlp_out_all_pos = _component("mlp_out", False)


def patch_frequencies_grid(model, corrupted_tokens, clean_cache, patching_metric, *,
                           layers=None, heads=None, freqs=None, side: str = "q",
                           **kwargs) -> PatchingGrid:
    """Pair ``f`` of head ``h``'s un-rotated query (or key: KV heads, ``side="k"``) patched
    alone, for every chosen layer, head and frequency id: ``[layer, head, frequency]``."""
    resolved = resolve(model)
    index_df = frequency_index_df(resolved, layers, heads, freqs, side=side)
    return generic_patch_grid(resolved, corrupted_tokens, clean_cache, patching_metric,
                              frequency_patch_setter(resolved),
                              qk_activation_name(resolved, side), index_df=index_df, **kwargs)


# ---- the whole experiment -----------------------------------------------------------------


@dataclass(frozen=True)
class PatchGridConfig(JsonConfig):
    """What :func:`patch_grid` patches (frozen, validated, stored in the result).

    Attributes:
        site: ``"heads"`` (``hook_z`` per query head), ``"frequencies"`` (one RoPE pair of
            one head's query or key), ``"resid_pre"``, ``"attn_out"``, ``"mlp_out"`` (a
            layer's residual input, attention output or MLP output).
        per_position: heads and components: one cell per position (``[layer, pos, head]``,
            ``[layer, pos]``) instead of all positions at once.
        direction: ``"denoise"`` (clean activations into the corrupted run) or ``"noise"``.
        layers, heads: which to patch (all by default; ``heads`` for heads and frequencies).
        freqs: frequency ids of ``"frequencies"`` (the id grammar; default all).
        side: ``"q"`` (query heads) or ``"k"`` (KV heads) for ``"frequencies"``.
        patches_per_pass, last_token_only: as in :func:`generic_patch_grid`.
        per_prompt_normalization: normalise the logit difference per prompt instead of by
            the means (:class:`~lens_possym.tasks.NormalizedLogitDiff`).
    """

    site: str = "heads"
    per_position: bool = False
    direction: str = "denoise"
    layers: tuple[int, ...] | None = None
    heads: tuple[int, ...] | None = None
    freqs: str | None = None
    side: str = "q"
    patches_per_pass: int = 16
    last_token_only: bool = True
    per_prompt_normalization: bool = False

    def __post_init__(self) -> None:
        if self.site not in PATCH_SITES:
            raise InvalidSelectionError(
                f"unknown patch site {self.site!r}; use one of {', '.join(PATCH_SITES)}")
        if self.direction not in DIRECTIONS:
            raise InvalidSelectionError(
                f"unknown direction {self.direction!r}; use 'denoise' (clean activations into "
                "the corrupted run) or 'noise' (corrupted into clean)")
        if self.side not in ("q", "k"):
            raise InvalidSelectionError(f"side must be 'q' or 'k', got {self.side!r}")
        for name in ("layers", "heads"):
            value = getattr(self, name)
            if value is not None:
                items = [value] if isinstance(value, int) else list(value)
                if not items or any(isinstance(v, bool) or not isinstance(v, int) for v in items):
                    raise InvalidSelectionError(f"{name} must be integers, got {value!r}")
                object.__setattr__(self, name, tuple(items))
        if self.freqs is not None:

            text = self.freqs if isinstance(self.freqs, str) else freqs_label(self.freqs)
            object.__setattr__(self, "freqs", check_ids_text(text, what="frequency id",
                                                             bands=True))
            if self.site != "frequencies":
                raise InvalidSelectionError("freqs applies to site='frequencies' only")
        if self.per_position and self.site == "frequencies":
            raise InvalidSelectionError(
                "per_position applies to heads and layer components, not to frequencies")
        if self.heads is not None and self.site not in ("heads", "frequencies"):
            raise InvalidSelectionError("heads applies to site='heads' or 'frequencies'")
        n = self.patches_per_pass
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise InvalidSelectionError(f"patches_per_pass must be a positive integer, got {n!r}")
        for name in ("per_position", "last_token_only", "per_prompt_normalization"):
            if not isinstance(getattr(self, name), bool):
                raise InvalidSelectionError(f"{name} must be True or False")
        # what the checks above leave open: a value of another type
        check_field_types(self)

    @property
    def activation_label(self) -> str:
        return {"heads": "head outputs (hook_z)", "frequencies": f"RoPE {self.side} pairs",
                "resid_pre": "residual stream (hook_resid_pre)",
                "attn_out": "attention outputs (hook_attn_out)",
                "mlp_out": "MLP outputs (hook_mlp_out)"}[self.site]


def _heads_index_df(model: HookedModel, layers, heads, n_pos: int | None):
    import pandas as pd


    n_layers, n_heads = int(model.cfg.n_layers), int(model.cfg.n_heads)
    rows = []
    for layer in as_layers(list(layers) if layers else None, n_layers):
        for head in as_heads(list(heads) if heads else None, n_heads, layer):
            if n_pos is None:
                rows.append((layer, head))
            else:
                rows += [(layer, pos, head) for pos in range(n_pos)]
    columns = ["layer", "head"] if n_pos is None else ["layer", "pos", "head"]
    return pd.DataFrame(rows, columns=columns)


def patch_grid(model: HookedModel | Resolved, pairs: Any, config: PatchGridConfig | None = None, *,
               metric: Callable[[Tensor], Tensor] | None = None, progress: bool = True,
               **settings: Any) -> "PatchingGrid":
    """A whole patching experiment on counterfactual pairs.

    Args:
        model: a TransformerLens model.
        pairs: :class:`~lens_possym.tasks.CounterfactualPairs` (e.g.
            ``lp.tasks.binding_pairs(model, corruption="swap_query")``).
        config: a :class:`PatchGridConfig`; ``settings`` are its fields
            (``site="heads"``, ``per_position=True``, ``direction="noise"``, ...) and
            override it.
        metric: ``logits -> [batch]`` (default: ``pairs.metric(model)``, the logit
            difference normalised to 0 on the corrupted and 1 on the clean run).
        progress: show a tqdm progress bar (default; ``False`` hides it).

    Returns:
        :class:`PatchingGrid`: ``[n_layers, n_heads]`` for heads, ``[n_layers, n_pos,
        n_heads]`` per position, ``[n_layers, n_heads, n_freqs]`` for frequencies,
        ``[n_layers]`` / ``[n_layers, n_pos]`` for components; each with a prompt axis last.
    """
    from transformer_lens.utilities import get_act_name

    config = PatchGridConfig.coerce(config, **settings)
    resolved = resolve(model)
    model = resolved.model
    if metric is None:
        metric = pairs.metric(model, per_prompt=config.per_prompt_normalization)
    clean, corrupted = pairs.clean_tokens, pairs.corrupted_tokens
    run, source = (corrupted, clean) if config.direction == "denoise" else (clean, corrupted)
    n_layers = int(model.cfg.n_layers)

    layers = as_layers(list(config.layers) if config.layers else None, n_layers)
    kwargs: dict[str, Any] = {"patches_per_pass": config.patches_per_pass,
                              "last_token_only": config.last_token_only, "progress": progress,
                              "config": config, "info": {"pairs": pairs.describe()}}
    if config.site == "frequencies":
        name = qk_activation_name(resolved, config.side)
    else:
        name = {"heads": "z"}.get(config.site, config.site)
    hooks = [get_act_name(name, layer) for layer in layers]
    with torch.no_grad():
        source_logits, cache = model.run_with_cache(source, names_filter=hooks)
    kwargs["source_baseline"] = _per_prompt(metric(source_logits), source.shape[0], "metric")
    del source_logits
    tl = _tl_setters()
    n_pos = int(run.shape[1])
    if config.site == "heads":
        index_df = _heads_index_df(model, layers, config.heads,
                                   n_pos if config.per_position else None)
        setter = (tl.layer_pos_head_vector_patch_setter if config.per_position
                  else tl.layer_head_vector_patch_setter)
        return generic_patch_grid(resolved, run, cache, metric, setter, "z", index_df=index_df,
                                  **kwargs)
    if config.site == "frequencies":
        return patch_frequencies_grid(resolved, run, cache, metric, layers=layers,
                                      heads=list(config.heads) if config.heads else None,
                                      freqs=config.freqs, side=config.side, **kwargs)
    import pandas as pd

    if config.per_position:
        index_df = pd.DataFrame([(layer, pos) for layer in layers for pos in range(n_pos)],
                                columns=["layer", "pos"])
        return generic_patch_grid(resolved, run, cache, metric, tl.layer_pos_patch_setter,
                                  config.site, index_df=index_df, **kwargs)
    index_df = pd.DataFrame([(layer,) for layer in layers], columns=["layer"])
    return generic_patch_grid(resolved, run, cache, metric, layer_vector_patch_setter,
                              config.site, index_df=index_df, **kwargs)


# ---- the result ------------------------------------------------------------------------------


def _tensor(value: Any) -> Tensor | None:
    if value is None:
        return None

    return value if isinstance(value, Tensor) else tensor_from_json(value)


@dataclass(repr=False)
class PatchingGrid(ResultIO):
    """Result of :func:`generic_patch_grid` / :func:`patch_grid`.

    Attributes:
        values: ``[*grid, n_prompts]`` the metric with each cell patched, per prompt
            (``nan`` for cells not patched).
        axis_names: the grid's axes (``["layer", "head"]``, ``["layer", "pos", "head"]``,
            ``["layer", "head", "freq"]``, ...).
        baseline: ``[n_prompts]`` the metric on the unpatched run (the corrupted run when
            denoising).
        source_baseline: ``[n_prompts]`` the metric on the source run, when known.
        metric: the metric's name.
        activation_name: what was patched (TransformerLens's short name).
        config: the :class:`PatchGridConfig` of :func:`patch_grid` (``None`` for a direct
            :func:`generic_patch_grid` call).
        seconds, n_passes: time and forward passes the grid took.
        info: what the prompts were (task, corruption, example pair), model, ...
    """

    values: Float[Tensor, "... prompt"]
    axis_names: list[str]
    baseline: Float[Tensor, "prompt"]
    source_baseline: Float[Tensor, "prompt"] | None = None
    metric: str = "metric"
    activation_name: str = ""
    config: PatchGridConfig | None = None
    seconds: float = float("nan")
    n_passes: int = 0
    info: dict = field(default_factory=dict)

    FORMAT = "lens-possym/patching-grid@1"

    # ---- numbers ------------------------------------------------------------------------

    @property
    def n_prompts(self) -> int:
        return int(self.values.shape[-1])

    @property
    def shape(self) -> tuple[int, ...]:
        """The grid's shape (without the prompt axis)."""
        return tuple(self.values.shape[:-1])

    def mean(self) -> Tensor:
        """Mean over prompts per cell: the grid TransformerLens returns."""
        return self.values.mean(-1)

    def stderr(self) -> Tensor:
        """Standard error of each cell's mean over prompts (``nan`` for one prompt)."""
        return standard_error(self.values, -1)

    def effect(self) -> Tensor:
        """``values − baseline`` per prompt: what each patch changes in the run."""
        return self.values - self.baseline

    def bootstrap_ci(self, *, confidence: float = DEFAULT_CONFIDENCE,
                     n_resamples: int = DEFAULT_RESAMPLES, seed: int = 0,
                     of_effect: bool = False) -> tuple[Tensor, Tensor]:
        """Percentile bootstrap interval of each cell's mean (of the effect with
        ``of_effect``), as TransformerLens's ``PatchingResult.bootstrap_ci``."""
        data = self.effect() if of_effect else self.values
        return bootstrap_interval(data, -1, confidence=confidence, n_resamples=n_resamples,
                                  seed=seed)

    def uncertainty(self, *, of_effect: bool = False, **kwargs: Any) -> Uncertainty:
        """Mean, standard error and bootstrap interval per cell (:mod:`.uncertainty`)."""
        return uncertainty(self.effect() if of_effect else self.values, -1, **kwargs)

    def permutation_pvalue(self, *, n_permutations: int = 1000, seed: int = 0,
                           alternative: str = "two-sided") -> Tensor:
        """Sign-flip permutation p-value that a cell's mean effect is zero
        (TransformerLens's test: exact for 12 prompts or fewer)."""
        from transformer_lens.utilities.statistics import (derive_generator,
                                                           sign_flip_permutation_pvalue)

        return sign_flip_permutation_pvalue(
            self.effect().double(), dim=-1, n_permutations=n_permutations,
            generator=derive_generator(seed, "permutation"), alternative=alternative)

    def top(self, k: int = 10) -> list[tuple[tuple[int, ...], float, float]]:
        """The ``k`` cells whose patch moves the metric most: ``(index, effect, effect
        standard error)``, by ``|effect|`` (the effect is ``values − baseline`` per prompt,
        averaged; its standard error is that of the paired differences)."""
        effect = self.effect()
        mean, se = effect.mean(-1), standard_error(effect, -1)
        flat = torch.nan_to_num(mean.abs().flatten(), nan=-float("inf"))
        order = flat.argsort(descending=True)[:k]
        out = []
        for i in order.tolist():
            if not math.isfinite(float(flat[i])):
                continue
            index = tuple(int(x) for x in torch.unravel_index(torch.tensor(i), self.shape))
            out.append((index, float(mean[index]), float(se[index])))
        return out

    def label(self, index: Sequence[int]) -> str:
        """``"12.3"`` for a head, ``"12.3 pos 5"``, ``"12.3 f7"``, ``"layer 12"``, ..."""
        parts = dict(zip(self.axis_names, index))
        head = parts.get("head", parts.get("head_index"))
        text = f"{parts['layer']}.{head}" if head is not None else f"layer {parts['layer']}"
        if "pos" in parts:
            text += f" pos {parts['pos']}"
        if "freq" in parts:
            text += f" f{parts['freq']}"
        return text

    def summary(self, k: int = 5) -> dict[str, Any]:
        """The headline numbers: the baselines, the number of cells and prompts, and the
        ``k`` cells that move the metric most (their label, value, effect and its standard
        error); ``describe`` prints them as a table."""
        mean = self.mean()
        return {"metric": self.metric, "baseline": float(self.baseline.mean()),
                "source_baseline": None if self.source_baseline is None
                else float(self.source_baseline.mean()),
                "n_prompts": self.n_prompts, "n_cells": int(mean.isfinite().sum()),
                "top": [{"cell": self.label(index), "value": float(mean[index]),
                         "effect": effect, "se": se} for index, effect, se in self.top(k)]}

    def describe(self, k: int = 5) -> str:
        """A few lines: baselines, and the cells that move the metric most (their value, and
        the effect ± its standard error)."""
        lines = [f"{self.metric}: unpatched run {self.baseline.mean():.3f}"
                 + ("" if self.source_baseline is None
                    else f", source run {self.source_baseline.mean():.3f}")
                 + f"; {self.n_prompts} prompts, {int(self.mean().isfinite().sum())} cells",
                 f"  {'cell':>14}  {'value':>7}  {'effect ± SE':>17}"]
        mean = self.mean()
        for index, effect, se in self.top(k):
            lines.append(f"  {self.label(index):>14}  {float(mean[index]):>7.3f}  "
                         f"{effect:>+8.3f} ± {se:<6.3f}")
        return "\n".join(lines)

    def to_patching_result(self) -> "PatchingResult":
        """The same values as TransformerLens's ``PatchingResult`` (per prompt, with the
        baseline; flat ``index_df`` over the patched cells)."""
        import pandas as pd
        from transformer_lens.patching import PatchingResult

        finite = self.mean().isfinite()
        cells = finite.nonzero()
        index_df = pd.DataFrame(cells.numpy(), columns=self.axis_names)
        return PatchingResult(values=self.values[finite], axis_names=[], index_df=index_df,
                              metric_names=[self.metric], reduced=False,
                              baseline=self.baseline.clone())

    # ---- files and tables -------------------------------------------------------------------

    def to_dict(self) -> dict:
        """JSON data: the per-prompt values; per cell their mean, standard error and 95%
        bootstrap interval, and the same for the effect (``values − baseline`` per prompt,
        a paired difference); the baselines and the settings."""
        unc, eff = self.uncertainty(), self.uncertainty(of_effect=True)
        return {"axis_names": self.axis_names, "metric": self.metric,
                "activation_name": self.activation_name,
                "config": None if self.config is None else self.config.to_dict(),
                "n_prompts": self.n_prompts, "baseline": self.baseline,
                "source_baseline": self.source_baseline, "mean": unc.mean, "se": unc.se,
                "ci_low": unc.low, "ci_high": unc.high, "effect": eff.mean,
                "effect_se": eff.se, "effect_ci_low": eff.low, "effect_ci_high": eff.high,
                "confidence": unc.confidence, "values": self.values, "seconds": self.seconds, "n_passes": self.n_passes,
                "info": to_jsonable(self.info)}

    @classmethod
    def from_dict(cls, data: dict) -> "PatchingGrid":
        seconds = data.get("seconds")
        return cls(values=_tensor(data["values"]).float(), axis_names=list(data["axis_names"]),
                   baseline=_tensor(data["baseline"]).float(),
                   source_baseline=None if data.get("source_baseline") is None
                   else _tensor(data["source_baseline"]).float(),
                   metric=data.get("metric", "metric"),
                   activation_name=data.get("activation_name", ""),
                   config=None if data.get("config") is None
                   else PatchGridConfig.from_dict(data["config"]),
                   seconds=float("nan") if seconds is None else float(seconds),
                   n_passes=int(data.get("n_passes", 0)), info=dict(data.get("info", {})))

    def to_dataframe(self, per_prompt: bool = False) -> "pd.DataFrame":
        """Long format: one row per cell, or with ``per_prompt`` one row per cell and prompt.

        Per cell: ``value`` (the metric with the cell patched, mean over prompts) and its
        ``value_se``; ``effect`` (``value − baseline``, paired per prompt) with its ``se``
        and 95% bootstrap ``ci_low``/``ci_high`` (the uncertainty of the patch's effect, as
        in every result's table), ``n_prompts``.
        """
        import numpy as np
        import pandas as pd

        names = ["head" if a == "head_index" else ("frequency" if a == "freq" else a)
                 for a in self.axis_names]
        if per_prompt:
            values = self.values.double().numpy()
            index = np.nonzero(np.isfinite(values))
            frame = pd.DataFrame({n: i for n, i in zip(names + ["prompt"], index)})
            frame["score"] = self.metric
            frame["value"] = values[index]
            frame["effect"] = frame["value"] - self.baseline.double().numpy()[index[-1]]
            return frame
        mean = self.mean().double().numpy()
        index = np.nonzero(np.isfinite(mean))
        frame = pd.DataFrame({n: i for n, i in zip(names, index)})
        frame["score"] = self.metric
        frame["value"] = mean[index]
        frame["value_se"] = self.stderr().double().numpy()[index]
        eff = self.uncertainty(of_effect=True)
        frame["effect"] = eff.mean.double().numpy()[index]
        for key, tensor in (("se", eff.se), ("ci_low", eff.low), ("ci_high", eff.high)):
            frame[key] = tensor.double().numpy()[index]
        frame["n_prompts"] = self.n_prompts
        return frame

    def _table(self):
        return self.to_dataframe()

    def _headline(self) -> list[str]:
        out = [f"grid={list(self.shape)} {self.axis_names}", f"n_prompts={self.n_prompts}",
               f"baseline={number(float(self.baseline.mean()))}"]
        top = self.top(1)
        if top:
            index, effect, se = top[0]
            out.append(f"top {self.label(index)} effect {effect:+.3g}±{se:.2g}")
        return out
