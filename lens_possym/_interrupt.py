"""Ctrl-C in the ``lens-possym`` command: one line and exit 130, at any moment.

Python turns SIGINT into ``KeyboardInterrupt``, which the command catches in
:func:`lens_possym.cli.main` (so that staged outputs are cleaned up). Outside ``main``
there is nothing to clean up, but an interrupt there would print a traceback: while the
package is still being imported (torch and friends: a few seconds), and while the
interpreter shuts down after the command (``Exception ignored ... KeyboardInterrupt``,
exit 0). :func:`install_if_command` (run first thing by ``import lens_possym``, only when
the process is the ``lens-possym`` command) and :func:`quiet_exit_on_interrupt` (after
``main``) answer SIGINT there with one line and exit 130 instead.
"""

from __future__ import annotations

import os
import signal
import sys
import threading

__all__ = ["install_if_command", "quiet_exit_on_interrupt", "interrupt_raises", "was_interrupted",
           "is_command"]

EXIT_INTERRUPTED = 130
MESSAGE = b"lens-possym: interrupted\n"


def is_command() -> bool:
    """Whether this process is the ``lens-possym`` command (the console script or
    ``python -m lens_possym.cli``)."""
    argv = list(getattr(sys, "orig_argv", None) or sys.argv)
    if sys.argv and os.path.basename(sys.argv[0]) in ("lens-possym", "lens-possym.exe"):
        return True
    for i, arg in enumerate(argv[:-1]):
        if arg == "-m" and argv[i + 1] in ("lens_possym.cli", "lens_possym.cli.__main__"):
            return True
    return False


def _exit_now(signum, frame) -> None:  # noqa: ARG001 - a signal handler's signature
    try:
        os.write(2, MESSAGE)
    finally:
        os._exit(EXIT_INTERRUPTED)


def _ignored() -> bool:
    """SIGINT ignored (a background job of a shell): left so."""
    return signal.getsignal(signal.SIGINT) is signal.SIG_IGN


def quiet_exit_on_interrupt() -> None:
    """From now on, SIGINT ends the process with one line and exit 130 (main thread;
    unless SIGINT is ignored)."""
    if threading.current_thread() is threading.main_thread() and not _ignored():
        signal.signal(signal.SIGINT, _exit_now)


_received: list[bool] = [False]


def _raise_interrupt(signum, frame) -> None:
    _received[0] = True
    signal.default_int_handler(signum, frame)


def interrupt_raises() -> None:
    """From now on, SIGINT raises ``KeyboardInterrupt`` (unless it is ignored), and
    :func:`was_interrupted` remembers it: a library may swallow the ``KeyboardInterrupt``
    and fail later with an error of its own (an import interrupted half-way), which the
    command must still report as the interrupt it was."""
    if threading.current_thread() is threading.main_thread() and not _ignored():
        signal.signal(signal.SIGINT, _raise_interrupt)


def was_interrupted() -> bool:
    """Whether SIGINT arrived since :func:`interrupt_raises`."""
    return _received[0]


def install_if_command() -> None:
    """In the ``lens-possym`` command, answer SIGINT with one line and exit 130 until
    :func:`lens_possym.cli.main` takes over."""
    if is_command():
        quiet_exit_on_interrupt()
