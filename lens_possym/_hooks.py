"""What a hook function declares it does, and which hooks are attached where.

The exact swap scores (:mod:`lens_possym.scores.guards`) and the capture
(:mod:`lens_possym.capture`) read these declarations to decide whether the closed form can
read what a hooked model computes. The toolkit's interventions declare their hooks.
"""

from __future__ import annotations

from typing import Any, Callable, Literal, Sequence

from torch import Tensor

from .errors import (InsufficientMemoryError, InvalidSelectionError, LensPossymError,
                     UnsupportedModelError)

__all__ = ["HookEffect", "declare_hook", "hook_effect", "declare_partial_keys",
           "partial_key_edits", "hook_points", "hooks_on", "attached_hooks", "forward_failed"]

#: What a hook function does to the tensor of its hook point:
#:
#: * ``"observe"``: returns it unchanged (a capture);
#: * ``"position_free"``: each output row is a function of the same row alone, the same
#:   function at every position (zero ablation, pooled means, gates, a constant added);
#: * ``"rowwise"``: each output row is a function of the same row and its position
#:   (per-position means, ``unrotate``, patching from a source run).
HookEffect = Literal["observe", "position_free", "rowwise"]
_ATTRIBUTE = "__lens_possym_effect__"
_PARTIAL = "__lens_possym_partial_keys__"


def declare_hook(fn: Callable, effect: HookEffect) -> Callable:
    """Mark hook function ``fn`` as doing ``effect`` (see :data:`HookEffect`); returns it.

    The exact swap scores trust the declaration: a hook declared ``"position_free"`` on
    ``hook_k`` is read through (the captured keys are the edited ones). Declare only what
    holds for every input.
    """
    if effect not in ("observe", "position_free", "rowwise"):
        raise InvalidSelectionError(
            f"unknown hook effect {effect!r}; use 'observe', 'position_free' or 'rowwise'")
    try:
        setattr(fn, _ATTRIBUTE, effect)
    except (AttributeError, TypeError):  # a builtin or a bound method: wrap it
        inner = fn

        def fn(tensor: Tensor, hook: Any = None) -> Tensor:  # noqa: F811
            return inner(tensor, hook=hook)

        setattr(fn, _ATTRIBUTE, effect)
    return fn


def hook_effect(fn: Callable) -> HookEffect | None:
    """What ``fn`` declared it does, or ``None`` (undeclared: anything)."""
    return getattr(fn, _ATTRIBUTE, None)


def partial_key_edits(fn: Callable) -> tuple[Any, dict[int, Any], HookEffect] | None:
    """``(spec, {query head: key edit}, effect)`` when ``fn`` is the ``hook_z`` half of a
    key edit for part of a KV group (:mod:`lens_possym.interventions.engine`), else None."""
    return getattr(fn, _PARTIAL, None)


def declare_partial_keys(fn: Callable, spec: Any, edits: dict[int, Any], effect: HookEffect
                         ) -> Callable:
    """Mark ``fn`` (the ``hook_z`` half of a key edit for part of a KV group) with the key
    edits it applies per query head, so captures can apply them too; returns it."""
    setattr(fn, _PARTIAL, (spec, dict(edits), effect))
    return fn


def hook_points(model: Any) -> dict[str, Any]:
    """``model``'s hook points by name (its ``hook_dict``; ``{}`` where it has none)."""
    hook_dict = getattr(model, "hook_dict", None)
    if isinstance(hook_dict, dict):
        return hook_dict
    try:
        return dict(hook_dict) if hook_dict is not None else {}
    except TypeError:
        return {}


def hooks_on(points: dict[str, Any], names: Sequence[str]) -> list[tuple[str, Callable, bool]]:
    """``(name, hook fn, permanent)`` of every forward hook attached to the hook points
    ``names`` of ``points`` (:func:`hook_points`; aliases of one point listed once, under
    the first name)."""
    seen: set[int] = set()
    out = []
    for name in names:
        point = points.get(name)
        if point is None or id(point) in seen:
            continue
        seen.add(id(point))
        for handle in getattr(point, "fwd_hooks", ()) or ():
            fn = getattr(handle, "user_hook", None)
            out.append((name, fn, bool(getattr(handle, "is_permanent", False))))
    return out


def attached_hooks(model: Any, names: Sequence[str]) -> list[tuple[str, Callable, bool]]:
    """:func:`hooks_on` the hook points of ``model``."""
    return hooks_on(hook_points(model), names)


def forward_failed(model: Any, exc: BaseException) -> LensPossymError:
    """The error for a forward pass of ``model`` that failed inside the model (or a hook
    attached to it): memory it could not have, or a model lens-possym cannot run."""
    text = " ".join(str(exc).split())
    if any(m in text.lower() for m in ("can't allocate memory", "out of memory",
                                       "cannot allocate memory")):
        return InsufficientMemoryError(
            f"the forward pass needs more memory than there is ({text[:160]}); use shorter "
            "or fewer prompts")
    name = type(getattr(model, "original_model", model)).__name__
    return UnsupportedModelError(
        f"the forward pass of {name} failed inside the model or a hook attached to it "
        f"({type(exc).__name__}: {text[:200]}); if no hook of yours is attached, this "
        "family does not run under TransformerLens's bridge (see `lens-possym models`)")
