"""Attributes of a package imported on first use (PEP 562), so that importing the package
imports nothing heavy: ``lens_possym`` itself and each paper plug-in use it.

    __getattr__, __dir__ = lazy_attributes(__name__, {"scores": ["swap_scores", ...]})

maps each name to the submodule (relative to the package) that defines it; a submodule's
own name is served too. Where a name is also the name of a submodule
(``interventions.uncertainty``, the function in ``interventions/uncertainty.py``), the
name means what an eager ``from .uncertainty import uncertainty`` would make it mean: the
function, even after the submodule was imported (the import system would otherwise bind
the module over it).
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import Callable, Iterable, Mapping

__all__ = ["lazy_attributes"]


def lazy_attributes(package: str, table: Mapping[str, Iterable[str]],
                    modules: Iterable[str] = ()
                    ) -> tuple[Callable[[str], object], Callable[[], list[str]]]:
    """``(__getattr__, __dir__)`` for ``package``: ``table`` maps a submodule (``"scores"``,
    ``".tasks"``; relative to ``package``) to the names it defines; ``modules`` are
    submodules served as attributes themselves (``lp.viz``)."""
    where = {name: sub for sub, names in table.items() for name in names}
    subs = {m.lstrip("."): m for m in modules}
    sys.modules[package].__class__ = _keeping(set(where), package)

    def __getattr__(name: str) -> object:
        if name in where:
            module = importlib.import_module("." + where[name].lstrip("."), package)
            return getattr(module, name)
        if name in subs:
            return importlib.import_module("." + subs[name].lstrip("."), package)
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    def __dir__() -> list[str]:
        return sorted({*where, *subs})

    return __getattr__, __dir__


def _keeping(exported: set[str], package: str) -> type:
    """A module class that does not let a submodule's binding hide an exported name."""

    class LazyPackage(types.ModuleType):
        def __setattr__(self, name: str, value: object) -> None:
            if (name in exported and isinstance(value, types.ModuleType)
                    and value.__name__ == f"{package}.{name}"):
                return      # the submodule stays reachable as sys.modules[...] and by import
            super().__setattr__(name, value)

    return LazyPackage
