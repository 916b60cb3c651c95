"""One subcommand's parser: the name and lines ``lens-possym --help`` shows, and the
function its parsed arguments go to. Every command's ``register(sub)`` starts here, the
core's and the plug-ins' (``docs/adding_a_paper.md``)."""

from __future__ import annotations

import argparse
from typing import Any, Callable

__all__ = ["add_command"]


def add_command(sub: Any, name: str, run: Callable[[argparse.Namespace], int], help: str,
                description: str | None = None) -> argparse.ArgumentParser:
    """Add subcommand ``name`` to ``sub`` (what ``add_subparsers`` returned): ``help`` is its
    line in the parent's ``--help``, ``description`` the paragraph of its own ``--help``
    (none by default); ``run(args)`` is called with its parsed arguments and returns the
    exit code. Returns the parser, to add the command's options to."""
    parser = sub.add_parser(name, help=help, description=description)
    parser.set_defaults(func=run)
    return parser
