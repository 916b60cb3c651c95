"""Atomic writes, leftovers of dead writers, folder locks, typed boundaries (issue 27)."""

from __future__ import annotations

import errno
import os
import subprocess
import sys

import pytest
import torch

from lens_possym._checks import boundary
from lens_possym._files import remove_stale, save_atomically, write_text_atomically
from lens_possym._lock import folder_lock
from lens_possym.errors import InvalidSelectionError, OutputError


def _dead_pid() -> int:
    return int(subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                              capture_output=True, text=True).stdout)


def test_a_write_that_fails_leaves_the_previous_file_and_no_temporary(tmp_path, monkeypatch):
    path = tmp_path / "scores.json"
    write_text_atomically(path, "old")

    def full(self, data):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(type(path), "write_bytes", full)
    with pytest.raises(OutputError, match="the disk is full: cannot write .*scores.json"):
        write_text_atomically(path, "new")
    monkeypatch.undo()
    assert path.read_text() == "old" and sorted(p.name for p in tmp_path.iterdir()) == [
        "scores.json"]


def test_a_torch_save_that_fails_is_an_output_error(tmp_path, monkeypatch):
    def broken(obj, path):
        raise RuntimeError("PytorchStreamWriter failed writing file data/0: file write failed")

    monkeypatch.setattr(torch, "save", broken)
    with pytest.raises(OutputError, match="cannot write"):
        save_atomically({"a": 1}, tmp_path / "x.pt")
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(OutputError, match="it is a folder"):
        write_text_atomically(tmp_path, "x")


def test_only_leftovers_of_dead_writers_with_our_names_are_removed(tmp_path):
    dead, alive = _dead_pid(), os.getppid()
    names = [f"a.json.tmp-{dead}-0", f"a.json.tmp{dead}", f"a.json.partial-{dead}",
             f"a.json.tmp-{alive}-0", f"b.json.tmp-{dead}-1", "a.json", "notes.txt"]
    for name in names:
        (tmp_path / name).write_text("x")
    removed = remove_stale(tmp_path, names={"a.json"})
    assert sorted(p.name for p in removed) == sorted(names[:3])
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(names[3:])


def test_a_folder_is_held_by_one_run_at_a_time(tmp_path):
    with folder_lock(tmp_path / "out", what="a profile"):
        with pytest.raises(OutputError, match="already being written by a profile"):
            with folder_lock(tmp_path / "out", what="a profile"):
                pass
        with folder_lock(tmp_path / "out", wait=True):  # the holder itself: no deadlock
            pass
    with folder_lock(tmp_path / "out"):  # released
        assert (tmp_path / "out" / ".lock").read_text() == f"pid {os.getpid()}"
    (tmp_path / "file").write_text("x")
    with pytest.raises(OutputError, match="is a file"):
        with folder_lock(tmp_path / "file"):
            pass


def test_boundary_checks_plain_annotations():
    @boundary
    def f(x: torch.Tensor, n: int, tau: float = 1.0, *, name: str | None = None,
          ids: list[int] | None = None) -> int:
        return n

    assert f(torch.zeros(2), 3, name="a", ids=[1, 2]) == 3
    for call, phrase in [(lambda: f("x", 3), "x must be a tensor, got 'x'"),
                         (lambda: f(torch.zeros(2), True), "n must be an integer"),
                         (lambda: f(torch.zeros(2), 1, "a"), "tau must be a number"),
                         (lambda: f(torch.zeros(2), 1, name=3), r"name must be text \(or None\)"),
                         (lambda: f(torch.zeros(2), 1, ids=[1.5]), "a list of integers"),
                         (lambda: f(torch.zeros(2)), "missing a required argument")]:
        with pytest.raises(InvalidSelectionError, match=phrase):
            call()
