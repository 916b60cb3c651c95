"""Outputs that appear whole or not at all.

A command writes into a staging folder beside its destination, ``DEST.partial-<pid>``;
only when the command has finished are the files moved to the same relative paths under
the destination, each with ``os.replace`` (atomic on one filesystem, and the staging folder
is on the destination's filesystem by construction). While they move, SIGINT is held back
(re-delivered right after), so Ctrl-C cannot stop the move halfway. If the command fails
or is interrupted, the staging folder is removed and the destination is exactly as it was:
an older run's outputs stay intact, and no file under a final name is ever partial.

The destination may hold other files (``--out .``): only the files this run wrote are
replaced; nothing else there is touched. Two runs that finish together move their files
one after the other (under a lock on the destination folder), so the destination holds
one run's set of files, never a mix. Staging folders left by runs that were killed
(``DEST.partial-<pid>`` of a process that is gone) are removed by the next run.
"""

from __future__ import annotations

import os
import shutil
import signal
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from .._files import remove_stale
from .._lock import folder_lock
from ..errors import OutputError

__all__ = ["staged_dir", "staged_file", "staging_path", "check_output_dir", "check_output_file"]


def staging_path(dest: str | Path) -> Path:
    """``DEST.partial-<pid>`` beside ``dest`` (same parent folder, so same filesystem)."""
    dest = Path(dest).absolute()
    return dest.parent / f"{dest.name}.partial-{os.getpid()}"


@contextmanager
def _sigint_held() -> Iterator[None]:
    """Hold SIGINT back (it stays pending and is delivered on exit), main thread only."""
    can_block = (hasattr(signal, "pthread_sigmask")
                 and threading.current_thread() is threading.main_thread())
    old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT}) if can_block else None
    try:
        yield
    finally:
        if can_block:
            signal.pthread_sigmask(signal.SIG_SETMASK, old)


def check_output_dir(dest: str | Path) -> None:
    """Fail early (before any work) if ``dest`` cannot be an output folder."""
    dest = Path(dest)
    if dest.exists() and not dest.is_dir():
        raise OutputError(f"the output folder {dest} is a file; pass a folder with --out")


def check_output_file(dest: str | Path) -> None:
    """Fail early (before any work) if ``dest`` cannot be an output file."""
    dest = Path(dest)
    if dest.is_dir():
        raise OutputError(f"{dest} is a folder; pass a file name")
    if not dest.absolute().parent.is_dir():
        raise OutputError(
            f"cannot write {dest}: the folder {dest.absolute().parent} does not exist")


def _move_into_place(stage: Path, dest: Path) -> None:
    files = sorted(p for p in stage.rglob("*") if p.is_file() or p.is_symlink())
    for src in files:
        target = dest / src.relative_to(stage)
        if target.is_dir():
            raise OutputError(f"cannot write {target}: a folder of that name is in the way")
        target.parent.mkdir(parents=True, exist_ok=True)
        os.replace(src, target)


@contextmanager
def staged_dir(dest: str | Path) -> Iterator[Path]:
    """Yield a fresh staging folder for ``dest``; move its files into ``dest`` on success.

    On an exception (``KeyboardInterrupt`` included) the staging folder is removed, ``dest``
    is left as it was, and the exception propagates.
    """
    dest = Path(dest)
    check_output_dir(dest)
    stage = staging_path(dest)
    shutil.rmtree(stage, ignore_errors=True)  # a leftover of a killed run with our pid
    remove_stale(stage.parent, names={dest.absolute().name})  # of killed runs' pids
    try:
        stage.mkdir(parents=True)
    except OSError as exc:
        raise OutputError(f"cannot create {stage} beside the output folder: "
                          f"{exc.strerror or exc}") from exc
    try:
        yield stage
        with _sigint_held():
            with folder_lock(dest, what="another command", lock_file=False, wait=True):
                _move_into_place(stage, dest)
    finally:
        shutil.rmtree(stage, ignore_errors=True)


@contextmanager
def staged_file(dest: str | Path) -> Iterator[Path]:
    """Yield a staging path for one file; it replaces ``dest`` atomically on success."""
    dest = Path(dest)
    check_output_file(dest)
    stage = staging_path(dest)
    remove_stale(stage.parent, names={dest.absolute().name})
    try:
        yield stage
        with _sigint_held():
            os.replace(stage, dest)
    finally:
        stage.unlink(missing_ok=True)
