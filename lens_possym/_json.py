"""JSON round trips: one encoder for results and configs, and a base for frozen configs.

JSON has no ``nan``: :func:`to_jsonable` writes non-finite floats as ``null`` (files are
written with ``allow_nan=False``, so they stay strict JSON), tensors as nested lists,
tuples as lists and mapping keys as strings; :func:`tensor_from_json` reads such a list
back into a float64 tensor with ``null`` as ``nan``.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import numbers
import types
import typing
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeVar, Union

from .errors import InvalidSelectionError, LensPossymError
from ._files import write_text_atomically

if TYPE_CHECKING:
    from torch import Tensor

__all__ = ["to_jsonable", "tensor_from_json", "dumps", "JsonConfig", "check_field_types"]


def to_jsonable(obj: Any) -> Any:
    """``obj`` as plain JSON data (``nan``/``inf`` → ``None``, tensors → lists)."""
    if hasattr(obj, "is_floating_point") and hasattr(obj, "detach"):     # a torch.Tensor
        return to_jsonable(obj.detach().double().cpu().tolist() if obj.is_floating_point()
                           else obj.detach().cpu().tolist())
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_jsonable(v) for v in obj]
    if dataclasses.is_dataclass(obj) and hasattr(obj, "to_dict"):
        return to_jsonable(obj.to_dict())
    return obj


def dumps(obj: Any, **kwargs: Any) -> str:
    """``json.dumps(to_jsonable(obj), allow_nan=False, **kwargs)``."""
    return json.dumps(to_jsonable(obj), allow_nan=False, **kwargs)


def tensor_from_json(data: Any) -> Tensor:
    """A float64 tensor from nested lists written by :func:`to_jsonable` (``None`` → ``nan``)."""
    def clean(x: Any) -> Any:
        return [clean(v) for v in x] if isinstance(x, list) else (math.nan if x is None else x)

    import torch   # here, not at the top: configs import this module, and a command's
                   # --help must not pay for torch

    return torch.tensor(clean(data), dtype=torch.float64)


C = TypeVar("C", bound="JsonConfig")


def check_field_types(config: Any, skip: tuple[str, ...] = (),
                      error: type[LensPossymError] = InvalidSelectionError) -> None:
    """Refuse a field whose value is not of its annotated type (``int``, ``float``, ``str``,
    ``bool``, ``None``, the type of ``Literal`` choices, tuples, dicts and unions of them)
    before a config's own checks compare or convert it: ``TrainConfig(steps="10")`` is an
    :class:`~lens_possym.errors.InvalidSelectionError` naming the field, not a
    ``TypeError`` from inside (``error``: the config's own error class, a
    :class:`~lens_possym.errors.LensPossymError`). A list stands for a tuple (JSON has no
    tuples)."""
    hints = _hints(type(config))
    for f in dataclasses.fields(config):
        hint = hints.get(f.name)
        if not f.init or f.name in skip or hint is None:
            continue
        value = getattr(config, f.name)
        if not _fits(value, hint):
            raise _wrong_type(error, f"{type(config).__name__}: {f.name} must be "
                              f"{_type_text(hint)}, got {value!r}")


@functools.lru_cache(maxsize=None)
def _hints(cls: type) -> dict[str, Any]:
    """The class's resolved annotations (read once: configs are built in loops)."""
    return typing.get_type_hints(cls)


def _wrong_type(error: type[LensPossymError], message: str) -> LensPossymError:
    return error(message)


def _fits(value: Any, hint: Any) -> bool:
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is Any:
        return True
    if origin in (Union, types.UnionType):
        return any(_fits(value, a) for a in args)
    if hint is type(None):
        return value is None
    if origin is Literal:   # the type only: the config's own check names the choices
        return any(type(value) is type(a) for a in args)
    if hint is bool:
        return isinstance(value, bool)
    if hint is int:
        return isinstance(value, numbers.Integral) and not isinstance(value, bool)
    if hint is float:
        return isinstance(value, numbers.Real) and not isinstance(value, bool)
    if origin is tuple or hint is tuple:
        if not isinstance(value, (tuple, list)):
            return False
        if len(args) == 2 and args[1] is Ellipsis:
            return all(_fits(v, args[0]) for v in value)
        return not args or (len(args) == len(value) and all(map(_fits, value, args)))
    if origin is dict or hint is dict:
        return isinstance(value, dict)
    if origin is list or hint is list:
        return isinstance(value, (list, tuple))
    return isinstance(value, hint) if isinstance(hint, type) else True


def _type_text(hint: Any) -> str:
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (Union, types.UnionType):
        return " or ".join(_type_text(a) for a in args)
    if origin is Literal:
        return "one of " + ", ".join(map(repr, args))
    if hint is type(None):
        return "None"
    if origin is tuple:
        return "a list of " + (_type_text(args[0]) if args and args[-1] is Ellipsis
                               else f"{len(args)} values")
    return {int: "an integer", float: "a number", bool: "True or False", str: "a string",
            dict: "a dict"}.get(origin or hint, getattr(hint, "__name__", str(hint)))


class JsonConfig:
    """Mixin for frozen, validated config dataclasses: ``replace``, dict and JSON round trips.

    Subclasses are ``@dataclass(frozen=True)`` with JSON-friendly fields (str, int, float,
    bool, None, tuples) and validate in ``__post_init__``.
    """

    @classmethod
    def coerce(cls: type[C], config: Any, **settings: Any) -> C:
        """``config`` (default: the defaults) with ``settings`` applied; anything that is
        not a ``cls`` (a dict, a name) is refused with what to pass instead."""
        if config is None:
            config = cls()
        elif not isinstance(config, cls):
            hint = (f"{cls.__name__}(**{config!r})" if isinstance(config, dict)
                    else f"{cls.__name__}(...)")
            raise InvalidSelectionError(
                f"config must be a {cls.__name__}, got {type(config).__name__}; pass {hint} "
                "or the settings as keywords")
        return config.replace(**settings)

    def replace(self: C, **changes: Any) -> C:
        """A copy with ``changes`` (validated again); an unknown name is an error."""
        names = {f.name for f in dataclasses.fields(self)}  # type: ignore[arg-type]
        unknown = sorted(set(changes) - names)
        if unknown:
            raise InvalidSelectionError(
                f"{type(self).__name__} has no setting {', '.join(map(repr, unknown))}; "
                f"its settings are {', '.join(sorted(names))}"
            )
        return dataclasses.replace(self, **changes)  # type: ignore[type-var]

    def to_dict(self) -> dict[str, Any]:
        return to_jsonable({f.name: getattr(self, f.name)
                            for f in dataclasses.fields(self)})  # type: ignore[arg-type]

    @classmethod
    def from_dict(cls: type[C], data: dict[str, Any]) -> C:
        """The config ``to_dict`` wrote (validated again); an unknown name is an error."""
        names = {f.name for f in dataclasses.fields(cls) if f.init}  # type: ignore[arg-type]
        unknown = sorted(set(data) - names)
        if unknown:
            raise InvalidSelectionError(
                f"{cls.__name__} has no setting {', '.join(map(repr, unknown))}; "
                f"its settings are {', '.join(sorted(names))}")
        return cls(**data)  # type: ignore[call-arg]

    def to_json(self, path: str | Path | None = None) -> str:
        """The config as JSON text (also written to ``path`` when given)."""
        text = dumps(self.to_dict(), indent=1)
        if path is not None:

            write_text_atomically(Path(path), text)
        return text

    @classmethod
    def from_json(cls: type[C], text_or_path: str | Path) -> C:
        """Read a config from JSON text or from a file holding it."""
        text = str(text_or_path)
        if not text.lstrip().startswith("{"):
            text = Path(text_or_path).read_text()
        return cls.from_dict(json.loads(text))
