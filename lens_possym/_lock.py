"""One run at a time per output folder: an advisory lock on ``FOLDER/.lock``.

:func:`folder_lock` takes an exclusive ``flock`` on the folder's ``.lock`` file for as long
as the ``with`` block runs, without waiting: a second run on the same folder (in another
process, or another ``with`` in this one) is refused at once with an
:class:`~lens_possym.errors.OutputError` naming the process that holds it. The operating
system releases the lock when its holder ends, however it ends (a crash or ``SIGKILL``
included), so a lock is never stale; the small ``.lock`` file stays in the folder
(``tidy=True``: the holder removes the ``.lock`` it created, and the folder if it created
it and left it empty, as its last step while still holding the lock). On systems without
``fcntl`` (Windows) the lock is not taken.

``reentrant=True`` (a command owning its output folder for its whole run) lets a nested
``folder_lock`` of the same folder in this process (the command's own steps) go through
instead of being refused.
"""

from __future__ import annotations

import os
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from ._files import disk_error
from .errors import OutputError

__all__ = ["folder_lock", "LOCK_NAME"]


class _DirHandle:
    """A directory's file descriptor, with the few file methods :func:`folder_lock` uses."""

    def __init__(self, folder: Path) -> None:
        self.fd = os.open(folder, os.O_RDONLY)

    def fileno(self) -> int:
        return self.fd

    def seek(self, _: int) -> None:
        pass

    def read(self) -> str:
        return ""

    def truncate(self) -> None:
        pass

    def write(self, _: str) -> None:
        pass

    def flush(self) -> None:
        pass

    def close(self) -> None:
        os.close(self.fd)

LOCK_NAME = ".lock"
_HELD: dict[str, bool] = {}      # folders this process holds (flock is per open file), and
                                 # whether a nested lock of one goes through (reentrant)
_GUARD = threading.Lock()


@contextmanager
def folder_lock(folder: str | Path, *, what: str = "a run", lock_file: bool = True,
                wait: bool = False, holder: str | None = None, tidy: bool = False,
                reentrant: bool = False) -> Iterator[Path]:
    """Hold ``folder``'s lock (the folder is created) for the ``with`` block.

    ``lock_file=False`` locks the folder itself (its directory handle) instead of a
    ``.lock`` file in it: nothing is left in a folder that is the user's own, but the
    holder's process id cannot be named. ``wait=True`` waits for the holder instead of
    refusing (for short critical sections, such as moving finished files into place).
    ``holder``: the line written into ``.lock`` for a refused run to name (default
    ``pid N``; one line). ``tidy`` and ``reentrant``: the module docstring.

    Raises:
        OutputError: another run holds it (its process id is named), or the folder cannot
            be created.
    """
    folder = Path(folder)
    if folder.exists() and not folder.is_dir():
        raise OutputError(f"{folder} is a file; pass a folder")
    created = not folder.exists()
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise disk_error(exc, folder) from exc
    key = str(folder.resolve())
    with _GUARD:
        nested = key in _HELD
        if nested and not wait and not _HELD[key]:
            raise OutputError(f"{folder} is already being written by {what} in this process; "
                              "use another folder")
        if not nested:
            _HELD[key] = reentrant
    if nested:  # this process holds it already (locking again would wait for itself)
        yield folder
        return
    path = folder / LOCK_NAME
    made_lock = lock_file and not path.exists()
    handle = None
    locked = False
    fcntl = None
    try:
        try:
            import fcntl
        except ImportError:  # pragma: no cover - Windows: no lock
            fcntl = None
        if fcntl is not None:
            try:
                handle = open(path, "a+") if lock_file else _DirHandle(folder)
            except OSError as exc:
                raise disk_error(exc, path) from exc
            try:
                fcntl.flock(handle.fileno(), fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
                locked = True
            except BlockingIOError:
                handle.seek(0)
                held_by = " ".join(handle.read().split())[:300] or "another process"
                raise OutputError(
                    f"{folder} is being written by another run ({held_by}); wait for it to "
                    f"finish, or write to another folder (two runs on one folder would mix "
                    "their results)") from None
            except OSError:  # a filesystem without locks (some network mounts): go on
                pass
            handle.seek(0)
            handle.truncate()
            handle.write(" ".join((holder or f"pid {os.getpid()}").split()))
            handle.flush()
        yield folder
    finally:
        if tidy and (locked or fcntl is None):
            _tidy(folder, path if made_lock else None, created)
        if handle is not None:
            handle.close()  # releases the flock
        with _GUARD:
            _HELD.pop(key, None)


def _tidy(folder: Path, lock: Path | None, created: bool) -> None:
    """Remove the ``.lock`` this holder created, then ``folder`` if it created it and it is
    empty (a failed command leaves no folder behind)."""
    try:
        if lock is not None:
            lock.unlink(missing_ok=True)
        if created and not any(folder.iterdir()):
            folder.rmdir()
    except OSError:  # pragma: no cover - a folder made read-only meanwhile: left as it is
        pass
