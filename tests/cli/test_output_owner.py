"""One owner per output folder for a whole command (issue 39), and a folder holding only the
files of the run that wrote it last.

Before: two ``profile`` (or ``train``) runs on one ``--out`` both exited 0 and one run's
result was lost (the lock was held only while files moved into place); ``profile
--no-report`` into a folder with an earlier report left the old ``report.html`` and figures
beside the new ``scores.json``.

The concurrent runs are real processes: while the first run is mid-run (loading its model,
or training), a forked copy of this process (no second import of torch) runs the second
command on the same folder.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import sys
from pathlib import Path

import pytest

from lens_possym import _lock
from lens_possym.cli import main
from lens_possym.cli._output import MANIFEST, command_output, staged_dir
from lens_possym.errors import OutputError

pytestmark = [pytest.mark.usefixtures("one_torch_thread"),
              pytest.mark.skipif(sys.platform == "win32", reason="fork and flock are POSIX")]

TINY = ["--model", "tiny-llama", "--device", "cpu"]
PROFILE = ["profile", *TINY, "--n-prompts", "2", "--n-pairs", "2", "--layers", "1",
           "--no-report"]
TRAIN = ["train", "--task", "index", "--steps", "2", "--eval-every", "1", "--length", "4",
         "--vocab", "4"]
# every command that writes --out, with the least it needs (none of them gets to run)
WRITERS = {
    "profile": PROFILE, "train": TRAIN,
    "dataset": ["dataset", *TINY, "--prompts", "PROMPTS"],
    "ablate": ["ablate", *TINY, "--n-prompts", "2", "--heads", "1.0"],
    "patch": ["patch", *TINY, "--n-prompts", "2", "--layers", "1"],
    "circuit": ["circuit", *TINY, "--n-prompts", "2", "--heads-top", "2"],
    "heads": ["heads", *TINY, "--n-prompts", "2", "--layers", "1"],
    "sweep": ["sweep", "--task", "index", "--steps", "2", "--length", "4", "--vocab", "4",
              "--seeds", "0", "--ids", "0", "--no-scores"],
    "encoder": ["encoder", "--task", "distance", "--scheme", "rope", "--steps", "2"],
    "multihop train": ["multihop", "train", "--task", "number", "--preset", "tiny",
                       "--steps", "1"],
    "paper-b report": ["paper-b", "report", "--preset", "paper-length"],
}


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def _run(argv) -> tuple[int, str]:
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = main([str(a) for a in argv])
    return code, err.getvalue()


@contextlib.contextmanager
def _first_run(target, stall):
    """Fork; the child patches ``stall`` (a (module, name) pair) to stop there until told,
    then runs ``target()``; yields the child's pid once it has stopped (it holds the
    folder); the child goes on when the block ends, and its exit code is checked."""
    started_r, started_w = os.pipe()
    go_r, go_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the first run
        code = 99
        try:
            os.close(started_r)
            os.close(go_w)
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, 1)
            os.dup2(devnull, 2)
            module, name = stall
            real = getattr(module, name)

            def stalled(*args, **kwargs):
                os.write(started_w, b"1")
                os.read(go_r, 1)
                return real(*args, **kwargs)

            setattr(module, name, stalled)
            code = target()
        except BaseException:  # noqa: BLE001 - said in the parent's assertion
            import traceback

            os.write(started_w, traceback.format_exc().encode()[-2000:])
        finally:
            os._exit(code)
    os.close(started_w)
    os.close(go_r)
    try:
        assert os.read(started_r, 1) == b"1", "the first run never got going"
        yield pid
    finally:
        os.write(go_w, b"1")
        os.close(go_w)
        _, status = os.waitpid(pid, 0)
        said = os.read(started_r, 4000).decode(errors="replace")
        os.close(started_r)
    assert os.waitstatus_to_exitcode(status) == 0, f"the first run failed: {said}"


def _second_run(argv) -> tuple[int, str]:
    """Run ``argv`` in a forked copy of this process, as another command would (its own
    process: none of this one's folders held); return its exit code and stderr. The copy
    is refused before any model code runs (forking is unsafe once OpenMP has run, so the
    forked copy must not get that far)."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            _lock._HELD.clear()  # this process's holdings are not the copy's
            code, err = _run(argv)
            os.write(write, json.dumps([code, err]).encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as said:
        answer = said.read()
    os.waitpid(pid, 0)
    assert answer, "the second run died"
    code, err = json.loads(answer)
    return code, err


def _during(monkeypatch, module, name: str, argv) -> list:
    """Patch ``module.name`` to run ``argv`` as a second command first; the answers."""
    real, answers = getattr(module, name), []

    def first_then_second(*args, **kwargs):
        answers.append(_second_run(argv))
        return real(*args, **kwargs)

    monkeypatch.setattr(module, name, first_then_second)
    return answers


def test_a_second_profile_on_one_folder_is_refused_and_nothing_is_lost(tmp_path, monkeypatch):
    """The second run starts while the first loads its model: refused in one line naming
    the first; the first completes; the folder holds the first run's files whole."""
    import lens_possym.cli.profile as profile

    out = tmp_path / "prof"
    out.mkdir()
    (out / "notes.txt").write_text("the user's own file")
    answers = _during(monkeypatch, profile, "load_from_args",
                      [*PROFILE[:-1], "--seed", "1", "--out", str(out)])
    assert _run(PROFILE + ["--out", out])[0] == 0
    (code, err), = answers
    assert code == 1 and len(err.strip().splitlines()) == 1, err
    assert f"pid {os.getpid()}: lens-possym profile" in err and str(out) in err
    assert sorted(_snapshot(out)) == [MANIFEST, "notes.txt", "scores.json"]
    assert json.loads((out / "scores.json").read_text())["task"]["seed"] == 0
    assert not list(tmp_path.glob("prof.partial-*")) and not (out / ".lock").exists()


def test_a_second_train_on_one_folder_is_refused_mid_training(tmp_path, monkeypatch):
    import lens_possym.training as training

    out = tmp_path / "run"
    answers = _during(monkeypatch, training, "train", TRAIN + ["--seed", "1", "--out", str(out)])
    assert _run(TRAIN + ["--out", out])[0] == 0
    (code, err), = answers
    assert code == 1 and f"pid {os.getpid()}: lens-possym train" in err, err
    assert sorted(_snapshot(out)) == sorted([MANIFEST, "metrics.json", "model.pt",
                                             "report.html"])
    assert json.loads((out / "metrics.json").read_text())["train_config"]["seed"] == 0


def test_every_command_writing_out_is_refused_while_another_run_holds_it(tmp_path):
    out = tmp_path / "shared"
    out.mkdir()
    (out / "scores.json").write_text("the first run's")
    (tmp_path / "prompts.txt").write_text("Alice likes red . Bob likes blue\n")
    with _first_run(lambda: _hold(out), (sys.modules[__name__], "_inside")) as first:
        for name, argv in WRITERS.items():
            argv = [str(tmp_path / "prompts.txt") if a == "PROMPTS" else a for a in argv]
            code, err = _run(argv + ["--out", out])
            assert code == 1, (name, err)
            assert f"pid {first}: lens-possym first" in err, (name, err)
            assert _snapshot(out) == {"scores.json": b"the first run's",
                                      ".lock": f"pid {first}: lens-possym first".encode()}
    assert _snapshot(out) == {"scores.json": b"the first run's"}  # its .lock tidied away


def _inside() -> None:
    """Where the first run stops while it holds the folder."""


def _hold(out: Path) -> int:
    with command_output(out, "lens-possym first"):
        _inside()
    return 0


def test_a_command_holds_its_folder_only_once_and_a_failed_one_leaves_none(tmp_path):
    out = tmp_path / "new"
    with pytest.raises(OutputError, match="empty"):
        with command_output("", "x"):
            pass
    with pytest.raises(RuntimeError):
        with command_output(out, "x"):
            assert (out / ".lock").read_text().startswith(f"pid {os.getpid()}: x")
            with staged_dir(out) as stage:  # the command's own steps go through
                (stage / "a.json").write_text("{}")
            raise RuntimeError
    assert _snapshot(out) == {"a.json": b"{}", MANIFEST: b"a.json\n"}
    with pytest.raises(RuntimeError):
        with command_output(tmp_path / "other", "x"):
            raise RuntimeError
    assert not (tmp_path / "other").exists()  # a failed command leaves no folder


def test_the_folder_holds_only_the_last_runs_files(tmp_path):
    """An earlier full profile (report and figures, in the manifest) then ``--no-report``:
    only the new scores.json (and the user's own file) are left."""
    out = tmp_path / "prof"
    (out / "figures").mkdir(parents=True)
    earlier = ["report.html", "plane.png", "figures/atlas.png", "scores.json"]
    for name in earlier:
        (out / name).write_text("earlier run's")
    (out / MANIFEST).write_text("".join(f"{n}\n" for n in earlier))
    (out / "notes.txt").write_text("the user's own file")
    assert _run(PROFILE + ["--out", out])[0] == 0
    assert sorted(_snapshot(out)) == [MANIFEST, "notes.txt", "scores.json"]
    assert not (out / "figures").exists() and (out / MANIFEST).read_text() == "scores.json\n"
    assert b"earlier" not in (out / "scores.json").read_bytes()


def test_one_command_writing_a_folder_twice_keeps_both_steps(tmp_path):
    out = tmp_path / "o"
    with command_output(out, "x"):
        for name in ("a.json", "b.json"):
            with staged_dir(out) as stage:
                (stage / name).write_text(name)
    assert (out / MANIFEST).read_text() == "a.json\nb.json\n"
    with staged_dir(out) as stage:  # outside a command: one run, one step
        (stage / "c.json").write_text("c")
    assert sorted(_snapshot(out)) == [MANIFEST, "c.json"]
