"""Attributes of a package imported on first use (PEP 562), so that importing the package
imports nothing heavy: ``lens_possym`` itself and each paper plug-in use it.

    __getattr__, __dir__ = lazy_attributes(__name__, {"scores": ["swap_scores", ...]})

maps each name to the submodule (relative to the package) that defines it; a submodule's
own name is served too. Where a name is also the name of a submodule
(``experiments.uncertainty``, the function in ``experiments/uncertainty.py``), the
name means what an eager ``from .uncertainty import uncertainty`` would make it mean: the
function, even after the submodule was imported (the import system would otherwise bind
the module over it).
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import types
from typing import Callable, Iterable, Mapping

__all__ = ["lazy_attributes", "lazy_module"]


def lazy_attributes(package: str, table: Mapping[str, Iterable[str]],
                    modules: Iterable[str] = ()
                    ) -> tuple[Callable[[str], object], Callable[[], list[str]]]:
    """``(__getattr__, __dir__)`` for ``package``: ``table`` maps a submodule (``"scores"``,
    ``".tasks"``; relative to ``package``; ``"..viz.attention"`` for a sibling package's) to
    the names it defines; ``modules`` are submodules imported as attributes themselves
    (``lp.viz``); any other submodule is a :func:`lazy_module`."""
    where = {name: _relative(sub) for sub, names in table.items() for name in names}
    subs = {m.lstrip("."): _relative(m) for m in modules}
    sys.modules[package].__class__ = _keeping(set(where), package)

    def __getattr__(name: str) -> object:
        if name in where:
            return getattr(importlib.import_module(where[name], package), name)
        if name in subs:
            return importlib.import_module(subs[name], package)
        module = None if name.startswith("__") else lazy_module(f"{package}.{name}")
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return module

    def __dir__() -> list[str]:
        return sorted({*where, *subs})

    return __getattr__, __dir__


def _relative(module: str) -> str:
    """``"scores"`` and ``".scores"`` -> ``".scores"``; ``"..viz"`` stays as it is."""
    return module if module.startswith("..") else "." + module.lstrip(".")


def lazy_module(name: str) -> types.ModuleType | None:
    """The module ``name`` (``"lens_possym._ids"``), or ``None`` if there is none. One not
    imported yet comes as a stand-in that imports it on its first attribute use, so that
    naming it costs nothing. The stand-in is kept out of ``sys.modules``: code that walks
    every module there (``inspect.getmodule`` does) must not import it half-way through
    another import, as ``importlib.util.LazyLoader``'s modules would be."""
    if name in sys.modules:
        return sys.modules[name]
    if name not in _STAND_INS:
        if importlib.util.find_spec(name) is None:
            return None
        _STAND_INS[name] = _StandIn(name)
    return _STAND_INS[name]


class _StandIn(types.ModuleType):
    """A module not imported yet: the first attribute read imports it; every read, write
    and deletion goes to the module itself, and its ``__dict__`` is the module's (so that
    ``monkeypatch.setattr`` on a stand-in restores the module's own value)."""

    def __getattribute__(self, attr: str) -> object:
        if attr == "__dict__":
            return vars(_module_of(self))
        return super().__getattribute__(attr)

    def __getattr__(self, attr: str) -> object:  # only names the stand-in lacks
        if attr.startswith("__") and attr.endswith("__"):
            raise AttributeError(attr)  # copy/pickle/inspect probing: not a reason to import
        return getattr(_module_of(self), attr)

    def __setattr__(self, attr: str, value: object) -> None:
        if attr in _MODULE_FIELDS:  # types.ModuleType.__init__ setting up the stand-in
            super().__setattr__(attr, value)
        else:
            setattr(_module_of(self), attr, value)

    def __delattr__(self, attr: str) -> None:
        delattr(_module_of(self), attr)

    def __dir__(self) -> list[str]:
        return dir(_module_of(self))

    def __repr__(self) -> str:
        name = types.ModuleType.__getattribute__(self, "__name__")
        if name in sys.modules:
            return repr(sys.modules[name])
        return f"<module {name!r} (imported on first use)>"


def _module_of(stand_in: _StandIn) -> types.ModuleType:
    name = types.ModuleType.__getattribute__(stand_in, "__name__")
    return sys.modules.get(name) or importlib.import_module(name)


_STAND_INS: dict[str, _StandIn] = {}
_MODULE_FIELDS = {"__name__", "__doc__", "__package__", "__loader__", "__spec__"}


def _keeping(exported: set[str], package: str) -> type:
    """A module class that does not let a submodule's binding hide an exported name."""

    class LazyPackage(types.ModuleType):
        def __setattr__(self, name: str, value: object) -> None:
            if (name in exported and isinstance(value, types.ModuleType)
                    and value.__name__ == f"{package}.{name}"):
                return      # the submodule stays reachable as sys.modules[...] and by import
            super().__setattr__(name, value)

    return LazyPackage
