"""``lens-possym models``: which real models are known, installed and converted."""

from __future__ import annotations

from .. import models
from ._command import add_command


HELP = "list the known real models and their state"


def register(sub) -> None:
    add_command(sub, "models", run, HELP)


def run(args) -> int:
    print(f"cache: {models.cache.cache_root()}")
    for info in models.list_models():
        state = ("converted" if info.cached else "installed") if info.installed else "missing"
        print(f"  {info.name:<14} {state:<10} {info.description}")
        if not info.installed:
            print(f"  {'':<14} install:   {info.install}")
    return 0
