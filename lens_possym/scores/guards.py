"""Checks that keep swap scores from being silently wrong.

* :func:`check_finite`: a score that came out ``nan`` or ``inf`` for a head that was scored
  is an error (:class:`~lens_possym.errors.NonFiniteResultError`, naming the heads), unless
  ``ScoreConfig(nonfinite="keep")``. A positional share ``0/0`` is undefined by definition and is
  not checked.
* :func:`check_exact_under_hooks`: the closed form reads a layer's queries and keys once and
  moves key *contents* between positions itself; that is what the model computes only when
  every hook between the layer's input and its attention pattern either leaves q and k
  alone, or edits each row of q (any position) or of k (the same way at every position) by
  itself. Anything else (a hook that edits keys by position, mixes rows, or acts on the
  rotated q/k, the scores or the pattern) makes the exact method refuse with
  :class:`~lens_possym.errors.ExactUnderHooksError`, which says to use
  ``method="rerun"``. Hook functions declare what they do with :func:`declare_hook`
  (the toolkit's interventions do); an undeclared hook on those points is assumed to do
  anything. The hooks seen (:func:`check_exact_under_hooks`): TransformerLens hooks on
  the layer's q/k path and, where the swap is made before the layer (the ``"input"``
  site, an absolute-PE layer's ``"content"`` site), every hook from the embeddings up to
  it; the rotary tables at any layer or the model level (shared by every layer); PyTorch
  forward and forward-pre hooks on any submodule upstream of the attention, and global
  module hooks (:func:`module_hooks`, :func:`check_module_hooks`). The guard is not the
  decomposition check: ``check=False`` never skips it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Sequence

import torch
import torch.nn.modules.module as torch_module

from .._hooks import (HookEffect, attached_hooks, declare_hook, hook_effect, hook_points,
                      hooks_on, partial_key_edits)
from ..errors import ExactUnderHooksError, NonFiniteResultError
from ..typing import HookedModel
from .config import ScoreConfig
from .sources import effective_site

__all__ = ["check_finite", "declare_hook", "HookEffect", "hook_effect", "guard_hooks",
           "AttachedHooks", "check_exact_under_hooks", "check_decomposable_under_hooks",
           "attached_hooks", "partial_key_edits", "module_hooks", "check_module_hooks"]

# ---- non-finite results ---------------------------------------------------------------------

#: the per-prompt scores that are numbers whenever the head was scored (a positional share is 0/0,
#: undefined, for a head with constant logits and no deviation)
_MUST_BE_FINITE = ("pos", "sym", "pos_freq", "sym_freq", "exclusion_ratio",
                   "exclusion_ratio_freq")


def check_finite(results: Iterable[Any], nonfinite: str = "raise") -> None:
    """Raise :class:`NonFiniteResultError` if a scored head's score is ``nan``/``inf``.

    ``results``: :class:`~lens_possym.scores.layer.LayerScores` (per prompt, the scored
    heads only).
    """
    if nonfinite == "keep":
        return
    checked = [(r, name, getattr(r, name)) for r in results for name in _MUST_BE_FINITE
               if getattr(r, name, None) is not None]
    if not checked:
        return
    # one flag per tensor, read back once (a read per tensor makes a GPU wait each time)
    flags = torch.stack([(~value.isfinite()).any().to(checked[0][2].device)
                         for _, _, value in checked]).tolist()
    problems = []
    for (r, name, value), flagged in zip(checked, flags):
        if not flagged:
            continue
        bad = ~value.isfinite()
        by_head = bad.reshape(bad.shape[0], bad.shape[1], -1).any(-1).any(0)
        heads = [f"{r.layer}.{h}" for h, b in zip(r.heads, by_head.tolist()) if b]
        problems.append(f"{name} of heads {', '.join(heads[:6])}"
                        + (" ..." if len(heads) > 6 else ""))
    if problems:
        raise NonFiniteResultError(
            f"scores came out nan/inf ({'; '.join(problems[:4])}); the model's weights or "
            "activations may be non-finite (lp.load_model checks them; check=True checks the "
            "decomposition), or a setting is beyond float range. Pass nonfinite='keep' to "
            "get them anyway")


# ---- the hooks attached to a model, read once -----------------------------------------------


@dataclass(frozen=True)
class AttachedHooks:
    """Every hook attached to a model, read once for one scoring call's checks.

    Attributes:
        points: the model's TransformerLens hook points by name (``hook_dict``; each holds
            the hooks attached to it).
        modules: ``(module name, kind, hook fn)`` of the PyTorch hooks the hook points do
            not list (:func:`module_hooks`).
    """

    points: dict[str, Any]
    modules: list[tuple[str, str, Any]]

    @classmethod
    def of(cls, model: HookedModel) -> AttachedHooks:
        return cls(points=hook_points(model), modules=module_hooks(model))

    def on(self, names: Sequence[str]) -> list[tuple[str, Callable, bool]]:
        """``(name, hook fn, permanent)`` of the hooks on the hook points ``names``."""
        return hooks_on(self.points, names)


def guard_hooks(model: HookedModel, specs: Sequence[Any], layers: Sequence[int],
                config: ScoreConfig) -> None:
    """Refuse the closed forms (the exact method; the exclusion, closed form only) where
    hooks on ``model`` change what they would compute (the module docstring), and
    per-frequency scores by re-running where a hook acts after q and k are read. The hooks
    are read once. ``specs``: per layer, anything with ``q_hook``/``k_hook`` (a RopeSpec, a
    LayerScheme)."""
    hooks = AttachedHooks.of(model)
    if config.method == "exact":
        check_exact_under_hooks(hooks, specs, layers, site=config.swap_site)
    elif config.per_frequency:
        check_decomposable_under_hooks(hooks, layers)
    if config.exclusion:
        check_exact_under_hooks(hooks, specs, layers, site=config.swap_site,
                                purpose="the exclusion (Theorem 1's sums, in closed form)")


# ---- hooks between a layer's input and its attention ----------------------------------------

# hook points inside block L that the attention pattern does not depend on (the value
# path, the output, the MLP) and the layer's input itself (swaps exchange its rows, so a
# hook there is part of what is swapped)
_SAFE = re.compile(
    r"^blocks\.\d+\.(hook_resid_pre|hook_in|hook_resid_mid|hook_resid_post|hook_out|"
    r"hook_attn_out|hook_mlp_in|hook_mlp_out|hook_v_input|ln2\..*|mlp\..*|"
    r"attn\.(hook_v|hook_z|hook_result|hook_out|hook_hidden_states|hook_v_input|v\..*|"
    r"o\..*|v_norm\..*))$")


_BLOCK = re.compile(r"^blocks\.(\d+)\.")
# outside the blocks, what the content of a position is made of (content and input sites)
_EMBEDDING = re.compile(r"^(hook_embed|hook_pos_embed|embed\..*|pos_embed\..*|hook_tokens)$")
# the rotary tables: computed once for the whole model (``rotary_emb``) and shared by
# every layer (a hook on one layer's ``hook_cos`` that edits the tensor in place edits
# them all), so a hook on any of them can change what any scored layer reads
_ROTARY = re.compile(r"^(rotary_emb\..*|blocks\.\d+\.attn\.(hook_cos|hook_sin|rotary_emb\..*))$")
# the swap point of the content and input sites' layer: the swap happens before it
_LAYER_INPUT = re.compile(r"^blocks\.\d+\.(hook_resid_pre|hook_in)$")


def _upstream(scheme: Any, site: str) -> bool:
    """Whether the swap at ``site`` happens before the layer's input (the embeddings, or
    the token ids), so every hook from the embeddings up to the layer counts: the
    ``"input"`` site, and the ``"content"`` site of an absolute-PE layer (for an inside
    scheme the content site *is* the layer site: :func:`~.sources.effective_site`)."""
    return effective_site(scheme, site) != "layer"


def _layer_points(points: dict[str, Any], layer: int, site: str, scheme: Any = None
                  ) -> list[str]:
    prefix = f"blocks.{layer}."
    names = [n for n in points if n.startswith(prefix) and not _SAFE.match(n)]
    if _upstream(scheme, site):  # the swap is made before the layer: everything up to it counts
        names += [n for n in points if _EMBEDDING.match(n) or (
            (m := _BLOCK.match(n)) is not None and int(m.group(1)) < layer)
            or (n.startswith(prefix) and _LAYER_INPUT.match(n))]
    names += [n for n in points if _ROTARY.match(n) and n not in names]
    return names


# ---- PyTorch hooks (module hooks the TransformerLens hook points do not list) -------------

# parts of a block the attention pattern does not depend on: the value path, the output,
# the MLP and its norms (Hugging Face and bridge names of the tiny and real families)
_SAFE_PARTS = frozenset({
    "mlp", "o", "o_proj", "out_proj", "dense", "c_proj", "v", "v_proj", "ln2", "ln_2",
    "post_attention_layernorm", "pre_feedforward_layernorm", "post_feedforward_layernorm",
    "post_attention_dropout", "post_mlp_dropout", "resid_dropout"})


def module_hooks(model: Any) -> list[tuple[str, str, Any]]:
    """``(module name, kind, hook fn)`` of every PyTorch forward and forward-pre hook on
    ``model``'s submodules that is not a TransformerLens hook (those are listed by the hook
    points), and of the global module hooks (``torch.nn.modules.module``'s
    ``register_module_forward_hook`` and ``_pre_hook``), named ``"(global)"``."""
    out: list[tuple[str, str, Any]] = []
    for kind, table in (("global forward", "_global_forward_hooks"),
                        ("global forward-pre", "_global_forward_pre_hooks")):
        for fn in (getattr(torch_module, table, None) or {}).values():
            out.append(("(global)", kind, fn))
    named = getattr(model, "named_modules", None)
    if not callable(named):
        return out
    for name, module in named():
        lens = {getattr(getattr(h, "hook", None), "id", None)
                for h in getattr(module, "fwd_hooks", ()) or ()}
        for key, fn in (getattr(module, "_forward_hooks", None) or {}).items():
            if key not in lens and not _bridge_own(fn):
                out.append((name, "forward", fn))
        for fn in (getattr(module, "_forward_pre_hooks", None) or {}).values():
            if not _bridge_own(fn):
                out.append((name, "forward-pre", fn))
    return out


def _bridge_own(fn: Any) -> bool:
    """A hook the model's own machinery registers: TransformerLens's bridge (to feed its
    hook points, e.g. ``hook_resid_pre``'s capture before the first norm) or
    ``transformers`` (its output recorders): defined in those packages."""
    inner = getattr(fn, "func", fn)                  # functools.partial
    inner = getattr(inner, "__func__", inner)        # a bound method
    module = getattr(inner, "__module__", None) or ""
    return module.split(".")[0] in ("transformer_lens", "transformers")


def _module_upstream(name: str, kind: str, layer: int, upstream: bool) -> bool:
    """Whether a PyTorch hook on module ``name`` can change what ``layer``'s attention
    reads (``upstream``: the swap is made at the embeddings or the token ids)."""
    if name == "(global)":
        return True
    parts = name.split(".")
    if "rotary_emb" in parts or any("rotary" in p for p in parts):
        return True                                  # the tables every layer shares
    if name == "":
        return kind != "forward"                     # a pre-hook may edit the input ids
    m = _BLOCK.match(name + ".")
    if m is None:                                    # embeddings, final norm, unembedding
        return upstream and parts[0] in ("embed", "pos_embed", "hook_embed",
                                         "hook_pos_embed")
    block = int(m.group(1))
    if block != layer:
        return block < layer and upstream
    inner = [p for p in parts[2:] if p != "_original_component"]
    if not inner:                                    # the block itself: its output is safe
        return kind != "forward"
    return not (_SAFE_PARTS & set(inner))


def check_module_hooks(hooks: AttachedHooks, layer: int, upstream: bool, consequence: str
                       ) -> None:
    """Refuse where a PyTorch hook (on a submodule, or global) could change what
    ``layer``'s attention reads: such a hook is invisible to TransformerLens's hook points,
    so neither a closed form nor per-frequency terms carry it. Hooks declared
    ``"observe"`` (:func:`declare_hook`) are read through. ``upstream``: the swap is made
    at the embeddings or the token ids (every hook before the layer counts);
    ``consequence``: what goes wrong, the end of the message."""
    for name, kind, fn in hooks.modules:
        if hook_effect(fn) == "observe" or not _module_upstream(name, kind, layer, upstream):
            continue
        raise ExactUnderHooksError(
            f"layer {layer}: a PyTorch {kind} hook on {name or 'the model'} "
            f"({_fn_name(fn)}) {consequence}")


# after the un-rotated q and k: the rotation, the scores and the pattern
_AFTER_QK = re.compile(r"^blocks\.\d+\.attn\.(hook_rot_q|hook_rot_k|hook_cos|hook_sin|"
                       r"hook_attn_scores|hook_pattern|rotary_emb\..*)$")


def check_decomposable_under_hooks(hooks: AttachedHooks, layers: Sequence[int]) -> None:
    """Refuse per-frequency scores by re-running where a hook acts after the un-rotated q
    and k (on the rotation, the scores or the pattern): the per-frequency terms are read
    from q and k, and would not carry that hook's effect."""
    for layer in layers:
        names = [n for n in hooks.points
                 if (n.startswith(f"blocks.{layer}.") and _AFTER_QK.match(n)) or _ROTARY.match(n)]
        for name, fn, _ in hooks.on(names):
            if fn is not None and (hook_effect(fn) == "observe" or _bridge_own(fn)):
                continue
            raise ExactUnderHooksError(
                f"layer {layer}: a hook on {_named(hooks.points, name)} ({_fn_name(fn)}) acts "
                "after the queries and "
                "keys are read, so the per-frequency scores (terms of q and k) would not "
                "carry it; pass per_frequency=False (the whole-head scores re-run the hooked "
                "model), or remove the hook")
        check_module_hooks(
            hooks, layer, False, "is invisible to the hook points, so the per-frequency "
            "scores (terms of q and k) would not carry it; pass per_frequency=False (the "
            "whole-head scores re-run the hooked model), or remove the hook")


def check_exact_under_hooks(hooks: AttachedHooks, specs: Sequence[Any], layers: Sequence[int],
                            *, site: str = "layer", purpose: str = "the closed-form swap scores"
                            ) -> None:
    """Refuse a closed-form computation where the hooks attached to the model
    (``hooks``) change what it would compute (see the module docstring). Key edits for
    part of a KV group that are the same at every position are read by the capture itself.

    Args:
        specs: per layer, anything with ``q_hook``/``k_hook`` (a RopeSpec, a LayerScheme).
        site: the swap site (``"layer"``: rows of the layer input; otherwise hooks before
            the layer count too).
        purpose: what would be wrong, for the message.

    Raises:
        ExactUnderHooksError: naming the hook point and what the hook would do.
    """
    points = hooks.points
    for layer in layers:
        spec = specs[layer]
        scheme = getattr(spec, "scheme", None)
        q_point = points.get(getattr(spec, "q_hook", None) or "")
        k_point = points.get(getattr(spec, "k_hook", None) or "")
        check_module_hooks(
            hooks, layer, _upstream(scheme, site),
            f"can change what the layer's attention reads, so {purpose} cannot read what "
            "the hooked model computes; " + _FIX[purpose != _SCORES])
        for name, fn, _ in hooks.on(_layer_points(points, layer, site, scheme)):
            effect = hook_effect(fn) if fn is not None else None
            point = points.get(name)
            if effect == "observe" or (fn is not None and _bridge_own(fn)):
                continue  # a capture, or the bridge's own wiring (part of the model)
            if point is not None and point is q_point and effect in ("position_free", "rowwise"):
                continue  # the query row is never swapped: its post-hook value is captured
            if point is not None and point is k_point and effect == "position_free":
                continue  # captured post-hook: moving a key's row moves its edited value
            if point is not None and point in (q_point, k_point):
                name = spec.q_hook if point is q_point else spec.k_hook
            what = {"rowwise": "edits each row by its position",
                    "position_free": "edits rows"}.get(effect or "", "is not declared (it "
                                                       "may edit rows by position or mix them)")
            raise ExactUnderHooksError(
                f"layer {layer}: a hook on {_named(points, name)} ({_fn_name(fn)}) {what}, "
                f"so {purpose} "
                "cannot read what the hooked model computes; " + _FIX[purpose != _SCORES])
        extra = getattr(spec, "extra", None) or {}
        z_points = [n for n in (f"blocks.{layer}.attn.hook_z", extra.get("z_hook")) if n]
        for name, fn, _ in hooks.on(z_points):
            found = partial_key_edits(fn) if fn is not None else None
            if found is not None and found[2] != "position_free":
                raise ExactUnderHooksError(
                    f"layer {layer}: heads {sorted(found[1])} have their own keys edited by "
                    "position (a key edit for part of a KV group: mode='unrotate', "
                    f"per-position means, patching), so {purpose} cannot read them; "
                    + _FIX[purpose != _SCORES])


_SCORES = "the closed-form swap scores"
_FIX = ("score it with method='rerun' (which re-runs the hooked model per swap), or remove "
        "the hook (lens_possym.scores.declare_hook(fn, 'position_free') marks a hook that "
        "edits every row the same way)",
        "pass exclusion=False (Theorem 1's sums have only a closed form), or remove the hook")


def _named(hook_dict: Any, name: str) -> str:
    """``name`` and the other names of the same hook point (``embed.hook_out = hook_embed``)."""
    point = hook_dict.get(name)
    others = [n for n, p in hook_dict.items() if p is point and n != name][:3]
    return " = ".join([name] + others)


def _fn_name(fn: Any) -> str:
    if fn is None:
        return "a hook"
    name = getattr(fn, "__name__", None) or type(fn).__name__
    return name if len(name) <= 60 else name[:57] + "..."
