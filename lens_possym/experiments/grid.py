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

import time
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

import torch
from jaxtyping import Int
from torch import Tensor

from .._inputs import as_tokens
from .._precision import model_tolerance
from ..errors import InvalidSelectionError
from ..typing import HookedModel
from ._passes import blocks_from, fresh_cache, layer_list, prefix_cache
from .grid_data import (DIRECTIONS, PATCH_SITES, PatchGridConfig, PatchingGrid,
                        check_patches_per_pass)
from ..resolved import Resolved, resolve
from ..interventions.patching import frequency_index_df, frequency_patch_setter, qk_activation_name
from .._inputs import as_heads, as_layers

if TYPE_CHECKING:
    import pandas as pd

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


PatchSetter = Callable[[Tensor, Sequence[int], Tensor], Tensor]

# activations laid out [batch, pos, ...] (the prefix reuse needs the position on axis 1),
# and the index axes whose meaning it knows
_POSITIONAL = frozenset({"z", "q", "k", "v", "rot_q", "rot_k", "result", "resid_pre",
                         "resid_mid", "resid_post", "attn_out", "mlp_out"})
_AXES = frozenset({"layer", "head", "head_index", "pos", "freq"})


def spec_window(resolved: Resolved) -> list[int]:
    """Sliding windows of the model's layers (their HF caches keep only the window, which
    the prefix reuse does not handle); ``[]`` when none is known."""
    try:
        return [int(s.window) for s in resolved.specs if s.window]
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

    check_patches_per_pass(patches_per_pass)
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
