"""Outputs that appear whole or not at all.

A command writes into a staging folder beside its destination, ``DEST.partial-<pid>``;
only when the command has finished are the files moved to the same relative paths under
the destination, each with ``os.replace`` (atomic on one filesystem, and the staging folder
is on the destination's filesystem by construction). While they move, SIGINT is held back
(re-delivered right after), so Ctrl-C cannot stop the move halfway. If the command fails
or is interrupted, the staging folder is removed and the destination is exactly as it was:
an older run's outputs stay intact, and no file under a final name is ever partial.

The destination may hold other files (``--out .``): only the files this run wrote are
replaced, and the files the previous run wrote there (listed in ``DEST/.lens-possym-files``,
the manifest each run leaves) that this run did not write are removed, so the folder holds
the files of the run that wrote it last (``profile --no-report`` leaves no older report
beside its ``scores.json``); nothing else there is touched. Staging folders left by runs
that were killed (``DEST.partial-<pid>`` of a process that is gone) are removed by the next
run.

One owner per folder: a command that writes ``--out`` holds the folder's lock for its whole
run (:func:`command_output`, taken by :func:`lens_possym.cli.main`); a second command on the
same folder is refused at once with one line naming the first (its process id and command
line). Outside a command, two ``staged_dir`` writers that finish together move their files
one after the other (under the folder's lock), so the destination holds one run's set of
files, never a mix.
"""

from __future__ import annotations

import os
import shutil
import signal
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from .._files import remove_stale, write_text_atomically
from .._lock import folder_lock
from ..errors import OutputError

__all__ = ["staged_dir", "staged_file", "staging_path", "check_output_dir", "check_output_file",
           "command_output", "MANIFEST"]

#: the files the last run wrote into a folder, one relative path a line
MANIFEST = ".lens-possym-files"
_COMMANDS: dict[str, set[str]] = {}   # folder -> the files the command owning it wrote there


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


def _listed(dest: Path) -> set[str]:
    """The files the manifest of ``dest`` lists (relative paths inside ``dest`` only)."""
    try:
        lines = (dest / MANIFEST).read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeError):
        return set()
    return {line for line in lines if line and not line.startswith("/")
            and ".." not in Path(line).parts}


def _write_manifest(dest: Path, names: set[str]) -> None:
    write_text_atomically(dest / MANIFEST, "".join(f"{n}\n" for n in sorted(names)))


def _move_into_place(stage: Path, dest: Path) -> None:
    """Move the staged files into ``dest``, then remove what the previous run left there
    and this command did not write. The manifest first lists both sets (a kill halfway
    leaves nothing unlisted), then this command's files alone."""
    files = sorted(p for p in stage.rglob("*") if p.is_file() or p.is_symlink())
    new = {src.relative_to(stage).as_posix() for src in files}
    mine = _COMMANDS.get(str(dest.resolve()))
    if mine is not None:  # a command that writes the folder in several steps keeps them all
        mine |= new
        new = set(mine)
    old = _listed(dest)
    _write_manifest(dest, old | new)
    for src in files:
        target = dest / src.relative_to(stage)
        if target.is_dir():
            raise OutputError(f"cannot write {target}: a folder of that name is in the way")
        target.parent.mkdir(parents=True, exist_ok=True)
        os.replace(src, target)
    for name in sorted(old - new):
        stale = dest / name
        if stale.is_file() or stale.is_symlink():
            stale.unlink()
            for parent in stale.parents:  # the folders it leaves empty
                if parent == dest or not parent.is_dir() or any(parent.iterdir()):
                    break
                parent.rmdir()
    _write_manifest(dest, new)


@contextmanager
def command_output(dest: str | Path, command: str) -> Iterator[None]:
    """Own the output folder ``dest`` for a whole command (module docstring).

    ``command``: the command line, named by a second run that is refused.

    Raises:
        OutputError: ``dest`` is empty or a file, or another run holds it.
    """
    if str(dest).strip() == "":
        raise OutputError("--out is empty; pass a folder name (--out . for the current "
                          "folder)")
    dest = Path(dest)
    check_output_dir(dest)
    holder = f"pid {os.getpid()}: {' '.join(command.split())}"[:300]
    with folder_lock(dest, what="another command", holder=holder, tidy=True,
                     reentrant=True):
        key = str(dest.resolve())
        _COMMANDS[key] = set()
        try:
            yield
        finally:
            _COMMANDS.pop(key, None)


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
