r"""Plug-ins: how a paper (or any extension) adds tasks, trainable models and commands
(the registry; :mod:`lens_possym.plugins` serves it with the rest of the plug-in API).

The core of lens-possym (models, positions, capture, decomposition, scores, interventions,
the training loop) knows no paper. Each paper's experiments live in a plug-in
(``lens_possym/papers/a``, ``b``, ``c``; a fourth paper is a fourth) that describes what it
adds as **data**: a :class:`Plugin` with tables of *where things live*, written as
``"module:attribute"`` strings. Listing the plug-ins, or building ``lens-possym --help``,
imports none of those modules; a task, a model or a command is imported the first time it
is asked for (:func:`resolve`).

A plug-in is found in one of two ways:

* an installed package declares it as an entry point in the group
  ``lens_possym.plugins`` (lens-possym's own papers do, in ``pyproject.toml``)::

      [project.entry-points."lens_possym.plugins"]
      paper-d = "my_package.lens_plugin:PLUGIN"

* code registers it directly with :func:`register_plugin` (a notebook, a test).

What a plug-in adds (docs/adding_a_paper.md walks through one):

* ``tasks``: registry name -> a :class:`~lens_possym.training.tasks.Task` class, found by
  :func:`~lens_possym.training.make_task` and by checkpoints;
* ``models``: model kind -> a :class:`~lens_possym.training.models.TrainableModel` class,
  found when a checkpoint is read;
* ``commands``: modules with ``register(subparsers)``, each adding one ``lens-possym``
  subcommand (the same contract as the core's commands, ``lens_possym.cli``).

:class:`Registry` is the lookup both registries share: classes registered in code first,
then the plug-ins' tables.

A broken plug-in stays its own problem: an entry point that cannot be loaded (or is no
:class:`Plugin`), or a command module that cannot be imported or registered, is reported
once per process as a :class:`PluginWarning` naming it and is left out; every other
plug-in and every command of the core keep working (:func:`report_broken`).
"""

from __future__ import annotations

import importlib
import re
import warnings
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from typing import Any, Callable

from .errors import LensPossymError, PluginError

__all__ = [
    "ENTRY_POINT_GROUP",
    "Plugin",
    "Registry",
    "register_plugin",
    "unregister_plugin",
    "plugins",
    "resolve",
    "PluginWarning",
    "report_broken",
]

ENTRY_POINT_GROUP = "lens_possym.plugins"
_REF = re.compile(r"[A-Za-z_][\w.]*:[A-Za-z_]\w*")
_NAME = re.compile(r"[a-z0-9][a-z0-9_-]*")


@dataclass(frozen=True)
class Plugin:
    """What one plug-in adds, as ``"module:attribute"`` references (validated here).

    Attributes:
        name: the plug-in's name (``"paper-c"``), unique among plug-ins.
        title: one line saying what it is (the paper's title).
        tasks: task registry name -> ``"module:Class"``.
        models: model kind -> ``"module:Class"``.
        commands: modules whose ``register(subparsers)`` adds a ``lens-possym`` subcommand.
    """

    name: str
    title: str = ""
    tasks: Mapping[str, str] = field(default_factory=dict)
    models: Mapping[str, str] = field(default_factory=dict)
    commands: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not _NAME.fullmatch(self.name):
            raise PluginError(f"a plug-in's name is lowercase letters, digits, '-' and '_'; "
                              f"got {self.name!r}")
        for table in ("tasks", "models"):
            for key, ref in dict(getattr(self, table)).items():
                if not isinstance(key, str) or not _NAME.fullmatch(key):
                    raise PluginError(f"plug-in {self.name!r}: {table} key {key!r} must be "
                                      "lowercase letters, digits, '-' and '_'")
                if not isinstance(ref, str) or not _REF.fullmatch(ref):
                    raise PluginError(f"plug-in {self.name!r}: {table}[{key!r}] = {ref!r} must "
                                      "be a 'package.module:Attribute' reference")
        object.__setattr__(self, "tasks", dict(self.tasks))
        object.__setattr__(self, "models", dict(self.models))
        commands = (self.commands,) if isinstance(self.commands, str) else tuple(self.commands)
        for module in commands:
            if not isinstance(module, str) or ":" in module or not _REF.fullmatch(module + ":x"):
                raise PluginError(f"plug-in {self.name!r}: command {module!r} must be a module "
                                  "name (the module's register(subparsers) adds the command)")
        object.__setattr__(self, "commands", commands)


class PluginWarning(UserWarning):
    """A plug-in that cannot be used (left out; everything else keeps working)."""


_registered: dict[str, Plugin] = {}
_discovered: list[bool] = [False]
_reported: set[str] = set()


def report_broken(what: str, exc: BaseException | None = None) -> None:
    """Warn once per process that ``what`` (a sentence naming the plug-in part) is broken
    and left out, with the exception that broke it."""
    message = what if exc is None else f"{what}: {type(exc).__name__}: {exc}"
    message = " ".join(message.split())
    if message in _reported:
        return
    _reported.add(message)
    warnings.warn(f"{message} (left out; every other command and plug-in still works)",
                  PluginWarning, stacklevel=2)


def register_plugin(plugin: Plugin, *, replace: bool = False) -> Plugin:
    """Add ``plugin`` to the plug-ins this process knows (``replace``: allow a new version
    of one already registered under its name)."""
    if not isinstance(plugin, Plugin):
        raise PluginError(f"register_plugin expects a Plugin, got {type(plugin).__name__}")
    _discover()
    if plugin.name in _registered and not replace and _registered[plugin.name] != plugin:
        raise PluginError(f"a plug-in named {plugin.name!r} is already registered; pass "
                          "replace=True to replace it")
    _registered[plugin.name] = plugin
    return plugin


def unregister_plugin(name: str) -> Plugin:
    """Forget the plug-in named ``name`` in this process (a test's clean-up); return it."""
    _discover()
    if name not in _registered:
        raise PluginError(f"no plug-in named {name!r} is registered; known: {sorted(_registered)}")
    return _registered.pop(name)


def plugins() -> dict[str, Plugin]:
    """Every plug-in: installed ones (entry points, found once) and registered ones."""
    _discover()
    return dict(_registered)


def _discover() -> None:
    if _discovered[0]:
        return
    _discovered[0] = True
    for point in entry_points(group=ENTRY_POINT_GROUP):
        where = f"the plug-in entry point {point.name!r} ({point.value})"
        try:
            plugin = point.load()
        except Exception as exc:  # noqa: BLE001 - a broken plug-in names itself, once
            report_broken(f"{where} cannot be loaded", exc)
            continue
        if not isinstance(plugin, Plugin):
            report_broken(f"{where} is a {type(plugin).__name__}, not a "
                          "lens_possym.plugins.Plugin")
            continue
        _registered.setdefault(plugin.name, plugin)


def resolve(ref: str) -> Any:
    """The object a ``"module:attribute"`` reference names (imported on first use)."""
    module, _, attribute = ref.partition(":")
    try:
        return getattr(importlib.import_module(module), attribute)
    except (ImportError, AttributeError) as exc:
        raise PluginError(f"{ref!r} cannot be imported: {type(exc).__name__}: {exc}") from exc


def _registry_error(registry: "Registry", message: str) -> LensPossymError:
    """The registry's own error class (a task's is a TaskConfigError, ...) for ``message``."""
    return registry._error(message)


class Registry(Mapping):
    """Name -> class: classes registered in code, then the core's ``builtin`` references and
    the plug-ins' ``table`` entries (a plug-in may not claim a built-in name for another
    class).

    A read-only mapping (``REGISTRY["index"]``, ``sorted(REGISTRY)``); :meth:`register`
    adds a class from code. Plug-in entries are imported when first looked up.
    """

    def __init__(self, what: str, table: Callable[[Plugin], Mapping[str, str]],
                 error: type[LensPossymError] = PluginError,
                 builtin: Mapping[str, str] | None = None):
        self._what, self._table, self._error = what, table, error
        self._builtin = dict(builtin or {})       # the core's own, "module:Class"
        self._classes: dict[str, type] = {}       # registered in code
        self._resolved: dict[str, type] = {}      # plug-in references imported so far

    def register(self, name: str, cls: type, *, replace: bool = False) -> type:
        """Add ``cls`` under ``name`` (``replace``: allow a new class for a known name)."""
        if not isinstance(name, str) or not _NAME.fullmatch(name):
            raise _registry_error(self, f"a {self._what} name is lowercase letters, digits, "
                                        f"'-' and '_'; got {name!r}")
        known = self._classes.get(name)
        if known is not None and known is not cls and not replace:
            raise _registry_error(self, f"a {self._what} named {name!r} is already registered "
                                        f"({known.__qualname__}); pass replace=True to replace it")
        if known is None and not replace:  # the core's or a plug-in's, by reference
            ref = self._refs().get(name)
            own = f"{getattr(cls, '__module__', '')}:{getattr(cls, '__qualname__', '')}"
            if ref is not None and ref != own:
                raise _registry_error(self, f"a {self._what} named {name!r} is already "
                                            f"defined ({ref}); pass replace=True to replace it "
                                            "in this process, or choose another name")
        self._classes[name] = cls
        return cls

    def unregister(self, name: str) -> None:
        """Forget the class registered in code under ``name`` (a plug-in's entry stays)."""
        if name not in self._classes:
            raise _registry_error(self, f"no {self._what} named {name!r} was registered in "
                                        "code")
        del self._classes[name]

    def _refs(self) -> dict[str, str]:
        refs: dict[str, str] = dict(self._builtin)
        for plugin in plugins().values():
            for name, ref in self._table(plugin).items():
                if refs.get(name, ref) != ref:
                    whose = "the core and a plug-in" if name in self._builtin else "two plug-ins"
                    raise _registry_error(self, f"{whose} define the {self._what} "
                                                f"{name!r}: {refs[name]} and {ref}")
                refs[name] = ref
        return refs

    def __getitem__(self, name: str) -> type:
        if name in self._classes:
            return self._classes[name]
        refs = self._refs()
        if name not in refs:
            raise KeyError(name)
        ref = refs[name]
        if ref not in self._resolved:
            self._resolved[ref] = resolve(ref)
        return self._resolved[ref]

    def __iter__(self) -> Iterator[str]:
        return iter(sorted({*self._classes, *self._refs()}))

    def __len__(self) -> int:
        return len({*self._classes, *self._refs()})

    def __contains__(self, name: object) -> bool:
        return name in self._classes or name in self._refs()

    def __repr__(self) -> str:
        return f"<{self._what} registry: {', '.join(self)}>"
