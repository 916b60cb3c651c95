"""The ``lens-possym`` command.

Each subcommand lives in its own module of this package and exposes
``register(subparsers)``, which adds its parser and sets ``func`` to a function taking the
parsed arguments and returning an exit code. Adding a subcommand is adding a module and
one entry in :data:`SUBCOMMANDS`.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys

__all__ = ["main", "build_parser", "SUBCOMMANDS"]

SUBCOMMANDS = ["models", "decompose", "profile", "ablate", "train", "sweep", "heads"]


def build_parser() -> argparse.ArgumentParser:
    from .. import __version__

    parser = argparse.ArgumentParser(
        prog="lens-possym",
        description="Positional vs symbolic attention heads in RoPE models, per frequency.",
    )
    parser.add_argument("--version", action="version", version=f"lens-possym {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="log progress details")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in SUBCOMMANDS:
        importlib.import_module(f"{__name__}.{name}").register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
    if not args.verbose:  # the command owns its process: keep its output to the point
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
        hf_logging.set_verbosity_error()
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    from ..errors import LensPossymError

    try:
        return int(args.func(args) or 0)
    except LensPossymError as exc:  # expected failures: one clear line, no traceback
        print(f"lens-possym: error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
