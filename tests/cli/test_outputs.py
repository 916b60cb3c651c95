"""Outputs appear whole or not at all; Ctrl-C ends a command with one line and exit 130.

An interrupted or failed command leaves the previous run's outputs exactly as they were
and no file, partial or not, under a final name; no staging folder is left behind.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import lens_possym
from lens_possym.cli import main
from lens_possym.cli._output import staged_dir, staged_file, staging_path
from lens_possym.errors import OutputError

pytestmark = pytest.mark.usefixtures("one_torch_thread")

TINY = ["--model", "tiny-llama", "--device", "cpu"]


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def _previous_run(folder: Path, names: list[str]) -> dict[str, bytes]:
    folder.mkdir(parents=True)
    for name in names:
        (folder / name).write_bytes(f"previous run's {name}".encode())
    (folder / "notes.txt").write_text("the user's own file")
    return _snapshot(folder)


def _no_staging_left(folder: Path) -> bool:
    return not list(folder.parent.glob(f"{folder.name}.partial-*"))


# ---- the staging folder itself ------------------------------------------------------------


def test_staged_dir_moves_every_file_into_place_on_success(tmp_path):
    dest = tmp_path / "out"
    before = _previous_run(dest, ["a.json"])
    with staged_dir(dest) as stage:
        assert stage == staging_path(dest) and stage.parent == dest.parent
        (stage / "a.json").write_text("new")
        (stage / "runs" / "x").mkdir(parents=True)
        (stage / "runs" / "x" / "m.pt").write_text("model")
        assert _snapshot(dest) == before  # nothing visible until the end
    assert (dest / "a.json").read_text() == "new"
    assert (dest / "runs" / "x" / "m.pt").read_text() == "model"
    assert (dest / "notes.txt").read_text() == "the user's own file"
    assert _no_staging_left(dest)


@pytest.mark.parametrize("stop", [KeyboardInterrupt, RuntimeError])
def test_staged_dir_leaves_the_destination_alone_on_failure(tmp_path, stop):
    dest = tmp_path / "out"
    before = _previous_run(dest, ["a.json", "b.png"])
    with pytest.raises(stop):
        with staged_dir(dest) as stage:
            (stage / "a.json").write_text("new")
            (stage / "b.png").write_bytes(b"\x89PNG trunc")  # a figure cut off midway
            raise stop()
    assert _snapshot(dest) == before and _no_staging_left(dest)


def test_staged_file_replaces_whole_or_not_at_all(tmp_path):
    dest = tmp_path / "numbers.json"
    dest.write_text("old")
    with pytest.raises(KeyboardInterrupt):
        with staged_file(dest) as path:
            path.write_text("half")
            raise KeyboardInterrupt
    assert dest.read_text() == "old" and not staging_path(dest).exists()
    with staged_file(dest) as path:
        path.write_text("new")
    assert dest.read_text() == "new" and not staging_path(dest).exists()


def test_a_destination_that_cannot_be_one_is_an_output_error(tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(OutputError, match="is a file"):
        with staged_dir(tmp_path / "file"):
            pass
    with pytest.raises(OutputError, match="is a folder"):
        with staged_file(tmp_path):
            pass
    with pytest.raises(OutputError, match="does not exist"):
        with staged_file(tmp_path / "missing" / "x.json"):
            pass


# ---- commands interrupted in-process ----------------------------------------------------------


def test_interrupted_profile_keeps_the_previous_report(tmp_path, monkeypatch, capsys):
    """Ctrl-C while the report is written, after scores.json and the figures are done."""
    import lens_possym.report as report

    out = tmp_path / "prof"
    before = _previous_run(out, ["scores.json", "report.html", "plane.png"])

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(report, "profile_report", interrupted)
    code = main(["profile", *TINY, "--n-prompts", "2", "--n-pairs", "3", "--out", str(out)])
    assert code == 130
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert [line for line in err.splitlines() if line.startswith("lens-possym")] == [
        "lens-possym: interrupted (outputs are only written when a command completes)"]
    assert _snapshot(out) == before and _no_staging_left(out)


def test_a_complete_profile_replaces_the_previous_outputs(tmp_path, capsys):
    out = tmp_path / "prof"
    _previous_run(out, ["scores.json", "report.html"])
    assert main(["profile", *TINY, "--n-prompts", "2", "--n-pairs", "3", "--out", str(out)]) == 0
    assert b"previous run" not in (out / "scores.json").read_bytes()
    assert b"previous run" not in (out / "report.html").read_bytes()
    assert (out / "notes.txt").read_text() == "the user's own file"
    assert _no_staging_left(out)
    assert f"wrote {out / 'scores.json'}" in capsys.readouterr().out  # the final path


def test_interrupted_train_leaves_no_partial_checkpoint(tmp_path, monkeypatch, capsys):
    import lens_possym.training as training

    out = tmp_path / "run"
    before = _previous_run(out, ["metrics.json", "model.pt"])

    def train_then_interrupted(model, task, config, **kwargs):
        Path(config.out_dir, "model.pt").write_bytes(b"half a checkpoint")
        raise KeyboardInterrupt

    monkeypatch.setattr(training, "train", train_then_interrupted)
    code = main(["train", "--task", "index", "--length", "4", "--vocab", "4", "--n-freqs", "4",
                 "--out", str(out)])
    assert code == 130 and "Traceback" not in capsys.readouterr().err
    assert _snapshot(out) == before and _no_staging_left(out)


def test_train_records_the_final_folder_not_the_staging_one(tmp_path):
    import json

    out = tmp_path / "run"
    assert main(["train", "--task", "index", "--length", "4", "--vocab", "4", "--n-freqs", "4",
                 "--steps", "2", "--eval-every", "2", "--out", str(out)]) == 0
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["train_config"]["out_dir"] == str(out)
    assert (out / "model.pt").is_file() and _no_staging_left(out)


# ---- a real Ctrl-C ------------------------------------------------------------------------------


@pytest.mark.skipif(sys.platform == "win32", reason="SIGINT to a child process is POSIX")
def test_a_real_sigint_ends_the_process_in_one_line_with_exit_130(tmp_path):
    out = tmp_path / "run"
    before = _previous_run(out, ["metrics.json"])
    env = {**os.environ, "PYTHONPATH": str(Path(lens_possym.__file__).parents[1]),
           "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "lens_possym.cli", "train", "--task", "index", "--length", "4",
         "--vocab", "4", "--n-freqs", "4", "--steps", "1000000", "--eval-every", "1000000",
         "--out", str(out)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
        # as a terminal's foreground job: a shell starts background jobs (`make test &`,
        # `nohup ... &`) with SIGINT ignored, the child would inherit that, and Python keeps
        # an inherited SIG_IGN, so Ctrl-C could not reach it at all
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        deadline = time.monotonic() + 120
        while _no_staging_left(out):  # training has started once the staging folder exists
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the command never started training"
            time.sleep(0.1)
        time.sleep(0.5)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err
    assert err.splitlines() == [
        "lens-possym: interrupted (outputs are only written when a command completes)"]
    assert _snapshot(out) == before and _no_staging_left(out)


def test_staging_folders_of_killed_runs_are_removed_by_the_next_run(tmp_path):
    """SIGKILL (or SIGTERM) leaves ``DEST.partial-<pid>/``: the next run with the same
    destination removes those of processes that are gone, and nothing of others'."""
    dead = int(subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                              capture_output=True, text=True).stdout)
    out = tmp_path / "profile"
    killed = tmp_path / f"profile.partial-{dead}"
    (killed / "figures").mkdir(parents=True)
    (killed / "scores.json").write_text("half")
    alive = tmp_path / f"profile.partial-{os.getppid()}"       # a running process's: kept
    alive.mkdir()
    other = tmp_path / f"elsewhere.partial-{dead}"              # another destination's: kept
    other.mkdir()
    with staged_dir(out) as stage:
        (stage / "scores.json").write_text("{}")
    assert not killed.exists() and alive.exists() and other.exists()
    assert (out / "scores.json").read_text() == "{}"
    file_dest = tmp_path / "decompose.json"
    stale = tmp_path / f"decompose.json.partial-{dead}"
    stale.write_text("half")
    with staged_file(file_dest) as path:
        path.write_text("{}")
    assert not stale.exists() and file_dest.read_text() == "{}"
