"""Types checked where a public function is entered: :func:`boundary`.

A decorated function checks, before it runs, every argument whose annotation is one of a
few plain kinds (a tensor, an int, a real number, a bool, text, a path, a list of text or
of ints; each optionally ``| None``) and raises
:class:`~lens_possym.errors.InvalidSelectionError` naming the function, the argument, what
it must be and what it got: instead of a ``TypeError`` or ``AttributeError`` from deep
inside. Arguments with richer annotations (selections, prompts, unions) are left to the
function's own readers (:mod:`lens_possym._ids`, :mod:`lens_possym._inputs`).
"""

from __future__ import annotations

import functools
import inspect
import numbers
import os
import re
from typing import Any, Callable, TypeVar

import torch

from .errors import InvalidSelectionError

__all__ = ["boundary"]

F = TypeVar("F", bound=Callable[..., Any])

_TENSOR = re.compile(r"^(?:(?:Float|Int|Bool|Shaped|Num)\[(?:torch\.)?Tensor,.*\]|(?:torch\.)?Tensor)$")


def _is_int(v: Any) -> bool:
    return isinstance(v, numbers.Integral) and not isinstance(v, bool)


def _is_real(v: Any) -> bool:
    return isinstance(v, numbers.Real) and not isinstance(v, bool)


_KINDS: dict[str, tuple[str, Callable[[Any], bool]]] = {
    "tensor": ("a tensor", lambda v: isinstance(v, torch.Tensor)),
    "int": ("an integer", _is_int),
    "float": ("a number", _is_real),
    "bool": ("True or False", lambda v: isinstance(v, bool)),
    "str": ("text", lambda v: isinstance(v, str)),
    "path": ("a path (text or pathlib.Path)", lambda v: isinstance(v, (str, os.PathLike))),
    "strs": ("a list of text", lambda v: isinstance(v, (list, tuple))
             and all(isinstance(x, str) for x in v)),
    "ints": ("a list of integers", lambda v: not isinstance(v, (str, bytes, dict))
             and _iterable(v) and all(_is_int(x) for x in _items(v))),
}


def _iterable(v: Any) -> bool:
    if isinstance(v, torch.Tensor):
        return v.ndim == 1 and not v.is_floating_point() and v.dtype != torch.bool
    try:
        iter(v)
    except TypeError:
        return False
    return True


def _items(v: Any) -> list:
    return v.tolist() if isinstance(v, torch.Tensor) else list(v)


def _kind(annotation: Any) -> tuple[str, bool] | None:
    """``(kind, optional)`` for an annotation (a string under ``from __future__ import
    annotations``) of one of the plain kinds, else ``None``."""
    if annotation is inspect.Parameter.empty:
        return None
    text = annotation if isinstance(annotation, str) else getattr(annotation, "__name__", "")
    text = text.replace("'", "").replace('"', "").strip()
    parts = [p.strip() for p in re.split(r"\|(?![^\[]*\])", text)]
    optional = "None" in parts
    parts = [p for p in parts if p != "None"]
    if sorted(parts) in (["Path", "str"], ["Path", "str"]):
        return "path", optional
    if len(parts) != 1:
        return None
    part = parts[0]
    if _TENSOR.match(part):
        return "tensor", optional
    if part in ("int", "float", "bool", "str"):
        return part, optional
    if part in ("Sequence[str]", "list[str]"):
        return "strs", optional
    if part in ("Sequence[int]", "list[int]"):
        return "ints", optional
    return None


def _show(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        return f"a {value.dtype} tensor of shape {tuple(value.shape)}"
    text = repr(value)
    return f"{text if len(text) <= 40 else text[:37] + '...'} ({type(value).__name__})"


def boundary(fn: F) -> F:
    """Check ``fn``'s plainly annotated arguments on every call (module docstring)."""
    sig = inspect.signature(fn)
    checks = {}
    for name, p in sig.parameters.items():
        found = _kind(p.annotation)
        if found is not None:
            checks[name] = (found[0], found[1] or p.default is None)

    @functools.wraps(fn)
    def checked(*args: Any, **kwargs: Any) -> Any:
        try:
            bound = sig.bind(*args, **kwargs)
        except TypeError as exc:
            raise InvalidSelectionError(f"{fn.__name__}: {exc}") from None
        for name, value in bound.arguments.items():
            if name not in checks:
                continue
            kind, optional = checks[name]
            if value is None and optional:
                continue
            what, accepts = _KINDS[kind]
            if not accepts(value):
                raise InvalidSelectionError(
                    f"{fn.__name__}: {name} must be {what}"
                    + (" (or None)" if optional else "") + f", got {_show(value)}")
        return fn(*args, **kwargs)

    return checked  # type: ignore[return-value]
