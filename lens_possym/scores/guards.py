"""Checks that keep swap scores from being silently wrong.

* :func:`check_finite`: a score that came out ``nan`` or ``inf`` for a head that was scored
  is an error (:class:`~lens_possym.errors.NonFiniteResultError`, naming the heads), unless
  ``ScoreConfig(nonfinite="keep")``. A balance ``0/0`` is undefined by definition and is
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
  anything.
"""

from __future__ import annotations

import re
from typing import Any, Iterable, Sequence

from .._hooks import HookEffect, attached_hooks, declare_hook, hook_effect, partial_key_edits
from ..errors import ExactUnderHooksError, NonFiniteResultError

__all__ = ["check_finite", "declare_hook", "HookEffect", "hook_effect",
           "check_exact_under_hooks", "check_decomposable_under_hooks", "attached_hooks",
           "partial_key_edits"]

# ---- non-finite results ---------------------------------------------------------------------

#: the per-prompt scores that are numbers whenever the head was scored (a balance is 0/0,
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
    problems = []
    for r in results:
        for name in _MUST_BE_FINITE:
            value = getattr(r, name, None)
            if value is None:
                continue
            bad = ~value.isfinite()
            if bool(bad.any()):
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


def _layer_points(model: Any, layer: int, site: str) -> list[str]:
    hook_dict = getattr(model, "hook_dict", None) or {}
    prefix = f"blocks.{layer}."
    names = [n for n in hook_dict if n.startswith(prefix) and not _SAFE.match(n)]
    if site != "layer":  # the swap is made before the layer: everything up to it counts
        names += [n for n in hook_dict if _EMBEDDING.match(n) or (
            (m := _BLOCK.match(n)) is not None and int(m.group(1)) < layer)]
    return names


# after the un-rotated q and k: the rotation, the scores and the pattern
_AFTER_QK = re.compile(r"^blocks\.\d+\.attn\.(hook_rot_q|hook_rot_k|hook_cos|hook_sin|"
                       r"hook_attn_scores|hook_pattern|rotary_emb\..*)$")


def check_decomposable_under_hooks(model: Any, layers: Sequence[int]) -> None:
    """Refuse per-frequency scores by re-running where a hook acts after the un-rotated q
    and k (on the rotation, the scores or the pattern): the per-frequency terms are read
    from q and k, and would not carry that hook's effect."""
    hook_dict = getattr(model, "hook_dict", None) or {}
    for layer in layers:
        names = [n for n in hook_dict if n.startswith(f"blocks.{layer}.") and _AFTER_QK.match(n)]
        for name, fn, _ in attached_hooks(model, names):
            if fn is not None and hook_effect(fn) == "observe":
                continue
            raise ExactUnderHooksError(
                f"layer {layer}: a hook on {name} ({_fn_name(fn)}) acts after the queries and "
                "keys are read, so the per-frequency scores (terms of q and k) would not "
                "carry it; pass per_frequency=False (the whole-head scores re-run the hooked "
                "model), or remove the hook")


def check_exact_under_hooks(model: Any, specs: Sequence[Any], layers: Sequence[int], *,
                            site: str = "layer", purpose: str = "the closed-form swap scores"
                            ) -> None:
    """Refuse a closed-form computation where the hooks attached to ``model`` change what
    it would compute (see the module docstring). Key edits for part of a KV group that
    are the same at every position are read by the capture itself.

    Args:
        specs: per layer, anything with ``q_hook``/``k_hook`` (a RopeSpec, a LayerScheme).
        site: the swap site (``"layer"``: rows of the layer input; otherwise hooks before
            the layer count too).
        purpose: what would be wrong, for the message.

    Raises:
        ExactUnderHooksError: naming the hook point and what the hook would do.
    """
    hook_dict = getattr(model, "hook_dict", None) or {}
    for layer in layers:
        spec = specs[layer]
        q_point = hook_dict.get(getattr(spec, "q_hook", None) or "")
        k_point = hook_dict.get(getattr(spec, "k_hook", None) or "")
        for name, fn, _ in attached_hooks(model, _layer_points(model, layer, site)):
            effect = hook_effect(fn) if fn is not None else None
            point = hook_dict.get(name)
            if effect == "observe":
                continue
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
                f"layer {layer}: a hook on {name} ({_fn_name(fn)}) {what}, so {purpose} "
                "cannot read what the hooked model computes; " + _FIX[purpose != _SCORES])
        extra = getattr(spec, "extra", None) or {}
        z_points = [n for n in (f"blocks.{layer}.attn.hook_z", extra.get("z_hook")) if n]
        for name, fn, _ in attached_hooks(model, z_points):
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


def _fn_name(fn: Any) -> str:
    if fn is None:
        return "a hook"
    name = getattr(fn, "__name__", None) or type(fn).__name__
    return name if len(name) <= 60 else name[:57] + "..."
