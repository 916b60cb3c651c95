"""Files that appear whole or not at all, and the leftovers of writes that did not finish.

Every file lens-possym writes goes through :func:`write_bytes_atomically` (or its text and
``torch.save`` forms): the data is written to ``NAME.tmp-<pid>-<n>`` beside the final name,
flushed and ``fsync``-ed, then renamed over it (``os.replace``: atomic on one filesystem).
A kill at any moment leaves the previous file, or none, under the final name; never a torn
one. A full disk is an :class:`~lens_possym.errors.OutputError` naming the file, and the
temporary file is removed.

:func:`remove_stale` removes what writers killed before they could clean up left behind
(``*.tmp-<pid>-*``, ``*.partial-<pid>``): only entries whose process is gone, so a writer
that is still running is never disturbed.
"""

from __future__ import annotations

import errno
import itertools
import os
import re
import shutil
from pathlib import Path
from typing import Callable

from .errors import OutputError

__all__ = ["write_bytes_atomically", "write_text_atomically", "save_atomically",
           "remove_stale", "pid_alive", "disk_error"]

_COUNTER = itertools.count()
# NAME.tmp-<pid>-<n>, NAME.tmp<pid> (older shards), NAME.partial-<pid>[...]
_STALE = re.compile(r"^(?P<name>.+)\.(?:tmp-?|partial-)(?P<pid>\d+)(?:-[^/]*)?$")


def disk_error(exc: OSError, path: Path | str) -> OutputError:
    """An :class:`OutputError` for a failed write of ``path`` that says what to do."""
    if exc.errno == errno.ENOSPC or exc.errno == errno.EDQUOT:
        return OutputError(f"the disk is full: cannot write {path}; free some space and run "
                           "again (finished work is kept)")
    if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        return OutputError(f"cannot write {path}: permission denied (or a read-only disk); "
                           "choose another folder")
    return OutputError(f"cannot write {path}: {exc.strerror or exc}")


def _write(path: Path, fill: Callable[[Path], None]) -> Path:
    path = Path(path)
    if path.is_dir():
        raise OutputError(f"cannot write {path}: it is a folder; pass a file name")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise disk_error(exc, path.parent) from exc
    tmp = path.with_name(f"{path.name}.tmp-{os.getpid()}-{next(_COUNTER)}")
    try:
        fill(tmp)
        with open(tmp, "rb+") as handle:
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except OSError as exc:
        raise disk_error(exc, path) from exc
    except RuntimeError as exc:  # torch.save reports a failed write as a RuntimeError
        if "write" in str(exc).lower() or "file" in str(exc).lower():
            raise OutputError(f"cannot write {path}: {exc}") from exc
        raise
    finally:
        try:
            tmp.unlink()
        except FileNotFoundError:
            pass
        except OSError:  # pragma: no cover - the folder went away
            pass
    return path


def write_bytes_atomically(path: Path | str, data: bytes) -> Path:
    """Write ``data`` to ``path`` atomically (module docstring)."""
    return _write(Path(path), lambda tmp: tmp.write_bytes(data))


def write_text_atomically(path: Path | str, text: str) -> Path:
    """Write ``text`` (UTF-8) to ``path`` atomically."""
    return write_bytes_atomically(path, text.encode("utf-8"))


def save_atomically(obj, path: Path | str) -> Path:
    """``torch.save(obj, path)``, atomically."""
    import torch

    return _write(Path(path), lambda tmp: torch.save(obj, tmp))


def pid_alive(pid: int) -> bool:
    """Whether a process with this id exists (on this machine)."""
    if pid <= 0:
        return False
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: alive
        return True
    except OSError:
        return True
    return True


def remove_stale(folder: Path | str, *, names: set[str] | None = None,
                 keep_own: bool = True) -> list[Path]:
    """Remove the leftovers of dead writers in ``folder`` (not recursive): temporary files
    ``NAME.tmp-<pid>-*`` / ``NAME.tmp<pid>`` and staging entries ``NAME.partial-<pid>*``
    whose process no longer exists (``names``: only those of these ``NAME``s; a folder
    that is not lens-possym's own must pass them). Returns what was removed."""
    folder = Path(folder)
    removed: list[Path] = []
    try:
        entries = list(folder.iterdir())
    except OSError:
        return removed
    for entry in entries:
        match = _STALE.match(entry.name)
        if match is None or (names is not None and match.group("name") not in names):
            continue
        pid = int(match.group("pid"))
        if pid_alive(pid) and (keep_own or pid != os.getpid()):
            continue
        try:
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry)
            else:
                entry.unlink()
            removed.append(entry)
        except OSError:
            continue
    return removed
