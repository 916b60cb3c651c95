"""The ``lens-possym`` command.

Each subcommand lives in its own module and exposes ``register(subparsers)``, which adds
its parser and sets ``func`` to a function taking the parsed arguments and returning an
exit code. The core's commands are the modules of this package listed in
:data:`SUBCOMMANDS`; the papers' commands (``train``, ``sweep``, ``encoder``,
``multihop``) and any other plug-in's are the modules its
:class:`~lens_possym.plugins.Plugin` lists in ``commands``. A command module imports
argparse helpers and packages at its top, and names what it calls where it calls it
(``scores.swap_scores(...)``): packages and their submodules are imported on first use
(:mod:`lens_possym._lazy`), so ``lens-possym --help`` imports no model code.

How a command ends (all of it decided here, in :func:`main`):

* success: exit 0;
* a bad argument (argparse's own checks, a number that is not a number, a selection that
  does not parse): one line on stderr, exit 2;
* an error lens-possym raises on purpose (:class:`~lens_possym.errors.LensPossymError`:
  a head out of range, a model not installed, ...) or an output that cannot be written
  (``OSError``): one line on stderr, exit 1;
* Ctrl-C: one line, exit 130 (128 + SIGINT, the shell convention);
* anything else is a bug: one line naming the exception, exit 1. ``--debug`` (before or
  after the command name) or ``LENS_POSSYM_DEBUG=1`` lets every error propagate with its
  traceback instead.

Outputs are staged (:mod:`._output`): an interrupted or failed command leaves the previous
outputs as they were. A command with ``--out`` owns that folder for its whole run
(:func:`._output.command_output`): a second run on it is refused with one line naming the
first; a command whose ``--out`` is a file sets ``out_is_file=True`` in its parser's
defaults.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
import warnings
from typing import NoReturn

from .. import __version__
from .._interrupt import interrupt_raises, quiet_exit_on_interrupt, was_interrupted
from ..errors import LensPossymError, UsageError
from ..registry import PluginWarning, plugins, report_broken
from . import _output

__all__ = ["main", "build_parser", "SUBCOMMANDS", "UsageError", "ArgumentParser"]

SUBCOMMANDS = ["models", "decompose", "profile", "ablate", "patch", "circuit", "heads", "dataset"]

EXIT_ERROR, EXIT_USAGE, EXIT_INTERRUPTED = 1, 2, 130


class ArgumentParser(argparse.ArgumentParser):
    """argparse, with a usage error raised as :class:`UsageError` (one line, in :func:`main`)
    instead of printed with the whole usage block and ``sys.exit(2)``."""

    def error(self, message: str) -> NoReturn:  # noqa: D102 - argparse's hook
        raise UsageError(f"{self.prog}: error: {message} (see '{self.prog} --help')")


def build_parser() -> ArgumentParser:
    parser = ArgumentParser(
        prog="lens-possym",
        description="Positional vs symbolic attention heads in RoPE models, per frequency.",
    )
    parser.add_argument("--version", action="version", version=f"lens-possym {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true",
                        help="log what each step does (the model loaded: layers, heads, dtype, "
                        "device and seconds; the conversion cache) and show Hugging Face's "
                        "own messages and progress bars (put it before the command)")
    parser.add_argument("--debug", action="store_true",
                        help="show the full traceback of any error (or set LENS_POSSYM_DEBUG=1)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")  # parsers of our class
    for name in SUBCOMMANDS:
        importlib.import_module(f"{__name__}.{name}").register(sub)
    with warnings.catch_warnings(record=True) as caught:   # a broken plug-in: one line
        warnings.simplefilter("always", PluginWarning)
        _register_plugins(sub)
    for warning in caught:
        if issubclass(warning.category, PluginWarning):
            _say(f"warning: {warning.message}")
        else:
            warnings.showwarning(warning.message, warning.category, warning.filename,
                                 warning.lineno)
    parser.set_defaults(commands=tuple(sub.choices))  # every command, the plug-ins' too
    for subparser in sub.choices.values():  # --debug also after the command name
        subparser.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                               help="show the full traceback of any error")
    return parser


def _register_plugins(sub) -> None:
    """Add every plug-in's commands to ``sub``; a plug-in that cannot be loaded, or whose
    command module fails to import or register, is reported once and left out."""
    for plugin in plugins().values():
        for module in plugin.commands:
            before = dict(sub.choices)
            try:
                importlib.import_module(module).register(sub)
            except Exception as exc:  # noqa: BLE001 - one plug-in's bug is its own
                for name in set(sub.choices) - set(before):  # half-registered: undone
                    del sub.choices[name]
                sub._choices_actions[:] = [a for a in sub._choices_actions
                                           if a.dest in sub.choices]
                report_broken(f"plug-in {plugin.name!r}: its command module {module!r} "
                              "cannot be registered", exc)


def _one_line(text: object) -> str:
    return " ".join(str(text).split())


def _say(message: str) -> None:
    print(f"lens-possym: {_one_line(message)}", file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    """Run the command line ``argv`` (default ``sys.argv[1:]``); return the exit code."""
    as_program = argv is None
    argv = sys.argv[1:] if argv is None else list(argv)
    debug = os.environ.get("LENS_POSSYM_DEBUG", "") not in ("", "0") or "--debug" in argv
    if as_program:
        # while the command runs, Ctrl-C is a KeyboardInterrupt (staged outputs are removed
        # on the way out); before (imports) and after (shutdown) it ends the process with
        # one line and exit 130 (lens_possym._interrupt)
        _import_torch_first(argv)
        interrupt_raises()
        try:
            code = _run(argv, debug, as_program)
        except KeyboardInterrupt:  # landed in the reporting itself
            code = _interrupted(as_program)
        quiet_exit_on_interrupt()
        sys.stdout.flush()
        sys.stderr.flush()
        return code
    return _run(argv, debug, as_program)


#: arguments that end the command before any model code runs
_NO_MODEL = ("-h", "--help", "--version")


def _import_torch_first(argv: list[str]) -> None:
    """Import torch while Ctrl-C still ends the process with one line (the handler
    :func:`lens_possym._interrupt.install_if_command` set), for a command that will load
    it anyway: a ``KeyboardInterrupt`` raised inside torch's extension initialisation
    aborts the interpreter (exit -6) instead of reaching :func:`main`. ``--help``,
    ``--version`` and ``models`` import no torch and skip this."""
    if argv and argv[0] != "models" and not any(arg in _NO_MODEL for arg in argv):
        importlib.import_module("torch")


def _interrupted(as_program: bool) -> int:
    _say("interrupted (outputs are only written when a command completes)")
    if as_program:
        # CPython 3.11 marks an interrupt that lands inside exec() of a string (e.g. while
        # dataclasses builds a class during a lazy import) as unhandled even after it is
        # caught, and then ends the process by SIGINT (exit -2) instead of our code. The
        # staged outputs are already cleaned up here; end now with the code we mean.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(EXIT_INTERRUPTED)
    return EXIT_INTERRUPTED


def _caused_by_interrupt(exc: BaseException) -> bool:
    """Whether a KeyboardInterrupt is anywhere in ``exc``'s chain of causes."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, KeyboardInterrupt):
            return True
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return False


def _run(argv: list[str], debug: bool, as_program: bool) -> int:
    try:
        return _main(argv)
    except KeyboardInterrupt:
        if debug:
            raise
        return _interrupted(as_program)
    except UsageError as exc:
        print(_one_line(exc), file=sys.stderr)
        return EXIT_USAGE
    except Exception as exc:  # noqa: BLE001 - the one place a command's failure is reported
        if debug:
            raise
        if _caused_by_interrupt(exc) or was_interrupted():
            # a library turned the Ctrl-C into its own error, or swallowed it and failed
            # after (an import interrupted half-way: transformers then reports "Could not
            # import module ...")
            return _interrupted(as_program)
        if isinstance(exc, LensPossymError):
            _say(f"error: {exc}")
        else:
            _say(_explain(exc))
        return EXIT_ERROR


_NO_MEMORY = ("can't allocate memory", "out of memory", "cannot allocate memory",
              "failed to allocate", "not enough memory")
_WRITE_FAILED = ("pytorchstreamwriter failed", "file write failed", "unexpected pos")


def _explain(exc: BaseException) -> str:
    """One line for an exception that is not lens-possym's own: what the machine, the disk
    or a file did, and what to do; "internal error" only for what is left (a bug)."""
    import errno

    text = " ".join(str(exc).split())
    low = text.lower()
    if isinstance(exc, MemoryError) or type(exc).__name__ == "OutOfMemoryError" or (
            isinstance(exc, RuntimeError) and any(m in low for m in _NO_MEMORY)):
        size = ""
        for word in text.split():
            if word.isdigit() and int(word) > 1 << 20:
                size = f" ({int(word) / 2**30:.1f} GiB asked for)"
                break
        return (f"error: not enough memory{size}: a size setting (length, batch size, "
                "number of prompts) is too large for this machine; make it smaller")
    if isinstance(exc, OSError):
        where = f" ({exc.filename})" if getattr(exc, "filename", None) else ""
        if exc.errno in (errno.ENOSPC, getattr(errno, "EDQUOT", -1)):
            return f"error: the disk is full{where}; free some space and run again"
        return f"error: {exc.strerror or text}{where}"
    if isinstance(exc, UnicodeError):
        return (f"error: a file is not UTF-8 text ({text[:120]}); pass a text file saved as "
                "UTF-8")
    if isinstance(exc, RuntimeError) and any(m in low for m in _WRITE_FAILED):
        return f"error: a file could not be written (is the disk full?): {text[:160]}"
    return (f"internal error: {type(exc).__name__}: {text} (a bug; run again with --debug "
            "for the traceback, and please report it)")


def _main(argv: list[str]) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help and --version print and exit 0
        return int(exc.code or 0)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
    if not args.verbose:  # the command owns its process: keep its output to the point
        _quiet_hugging_face()
    if not getattr(args, "func", None):
        raise UsageError(f"lens-possym: error: no command given; choose one of "
                         f"{', '.join(args.commands)} (see 'lens-possym --help')")
    out = getattr(args, "out", None)
    if out is None or getattr(args, "out_is_file", False):
        return int(args.func(args) or 0)
    with _output.command_output(out, "lens-possym " + " ".join(argv)):
        return int(args.func(args) or 0)


def _quiet_hugging_face() -> None:
    """No Hugging Face progress bars or info lines. Through the environment, which
    transformers reads when (and if) a command imports it, so that a command that never
    loads a model (``models``) does not pay 2 s for importing it; directly if it is
    already imported."""
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    if "transformers" in sys.modules:
        hf_logging = sys.modules["transformers"].utils.logging
        hf_logging.disable_progress_bar()
        hf_logging.set_verbosity_error()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
