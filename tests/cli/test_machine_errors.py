"""What the machine, the disk or a file does to a command is one line, never "internal error"
(issue 27): memory that cannot be had, a full disk, files that are not text, a cluster
that cannot be reached, settings the floats cannot hold."""

from __future__ import annotations

import errno
import json

import pytest
import torch

from lens_possym.cli import _explain, main

TINY = ["--model", "tiny-llama", "--device", "cpu"]


def _one_error_line(capsys) -> str:
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("lens-possym")]
    assert len(lines) == 1 and "Traceback" not in err, err
    assert "internal error" not in lines[0], lines[0]
    return lines[0]


@pytest.mark.parametrize("exc, phrase", [
    (MemoryError(), "not enough memory"),
    (RuntimeError("[enforce fail at alloc_cpu.cpp:117] data. DefaultCPUAllocator: can't "
                  "allocate memory: you tried to allocate 40000000000 bytes. Error code 12"),
     "not enough memory (37.3 GiB asked for)"),
    (OSError(errno.ENOSPC, "No space left on device", "out/scores.json"), "the disk is full"),
    (UnicodeDecodeError("utf-8", b"\xff", 0, 1, "invalid start byte"), "not UTF-8"),
    (RuntimeError("[enforce fail at inline_container.cc:603] . PytorchStreamWriter failed "
                  "writing file data/0: file write failed"), "could not be written"),
])
def test_what_the_machine_does_is_explained(exc, phrase):
    line = _explain(exc)
    assert phrase in line and "internal error" not in line and "\n" not in line


def test_a_bug_is_still_called_one(capsys):
    assert "internal error: KeyError" in _explain(KeyError("x"))


def test_memory_that_cannot_be_had_is_one_line(monkeypatch, capsys, tmp_path):
    import lens_possym.scores.engine as engine

    def greedy(*args, **kwargs):
        torch.empty(1 << 62, dtype=torch.uint8)  # 4 EiB: no machine has it

    monkeypatch.setattr(engine, "score_layers", greedy)
    out = tmp_path / "out"
    assert main(["profile", *TINY, "--out", str(out), "--no-report"]) == 1
    assert "not enough memory" in _one_error_line(capsys)
    assert list(tmp_path.iterdir()) == []


def test_a_full_disk_while_writing_shards_is_one_line(tmp_path, monkeypatch, capsys):
    prompts = tmp_path / "p.jsonl"
    prompts.write_text("\n".join(json.dumps({"text": t}) for t in
                                 ["Alice likes red . Bob", "Carol likes blue . Dave"]))

    def full(obj, path, *args, **kwargs):
        with open(path, "wb") as handle:
            handle.write(b"PK")
        raise RuntimeError("[enforce fail at inline_container.cc:603] . PytorchStreamWriter "
                           "failed writing file data/0: file write failed")

    monkeypatch.setattr(torch, "save", full)
    out = tmp_path / "out"
    assert main(["dataset", *TINY, "--prompts", str(prompts), "--out", str(out)]) == 1
    assert "cannot write" in _one_error_line(capsys)
    assert not [p for p in out.rglob("*") if ".tmp" in p.name]


def test_a_full_disk_while_moving_outputs_is_one_line(tmp_path, monkeypatch, capsys):
    import lens_possym.cli._output as output

    def no_space(stage, dest):
        raise OSError(errno.ENOSPC, "No space left on device", str(dest / "scores.json"))

    monkeypatch.setattr(output, "_move_into_place", no_space)
    out = tmp_path / "out"
    assert main(["profile", *TINY, "--layers", "1", "--n-prompts", "2", "--no-report",
                 "--out", str(out)]) == 1
    assert "the disk is full" in _one_error_line(capsys)
    assert not list(tmp_path.glob("*.partial-*"))


@pytest.mark.parametrize("content", [b"\xff\xfe\x00\x81 binary", b"ok line\nbad \xc3\x28 line\n",
                                     b"\x00\x00\x00\x00"])
@pytest.mark.parametrize("suffix", [".txt", ".jsonl"])
def test_a_prompts_file_that_is_not_text_is_one_line(tmp_path, capsys, content, suffix):
    path = tmp_path / f"prompts{suffix}"
    path.write_bytes(content)
    assert main(["dataset", *TINY, "--prompts", str(path), "--out", str(tmp_path / "o")]) == 1
    line = _one_error_line(capsys)
    assert "not UTF-8" in line or "NUL byte" in line or "not valid JSON" in line, line


@pytest.mark.parametrize("address", ["nonsense::x", "ray://"])
def test_a_cluster_that_cannot_be_reached_is_one_line(tmp_path, capsys, address):
    pytest.importorskip("ray")
    path = tmp_path / "prompts.txt"
    path.write_text("Alice likes red . Bob likes blue\n")
    assert main(["dataset", *TINY, "--prompts", str(path), "--out", str(tmp_path / "o"),
                 "--ray", address]) == 1
    assert "cannot start Ray" in _one_error_line(capsys)


@pytest.mark.parametrize("argv, phrase", [
    (["profile", *TINY, "--tau", "1e-320", "--out", "x"], "below the smallest normal"),
    (["profile", *TINY, "--layers", "0,,1", "--out", "x"], "empty item"),
    (["profile", *TINY, "--layers", "1,1", "--out", "x"], "more than once"),
    (["ablate", *TINY, "--heads", "1.0,1.0", "--freqs", "0"], "more than once"),
    (["ablate", *TINY, "--heads", "1.0", "--freqs", "\uff11"], "must be an integer"),
])
def test_values_that_read_but_cannot_be_used_are_one_line(argv, phrase, capsys, tmp_path,
                                                          monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(argv) in (1, 2)
    assert phrase in _one_error_line(capsys)
    assert list(tmp_path.iterdir()) == []


# ---- the CLI attack of issue 39: one line, never "internal error" or a crash ---------------

THREADED = {  # every command with --threads, with the least it needs to parse
    "train": ["train", "--task", "index", "--steps", "1", "--length", "4", "--vocab", "4"],
    "sweep": ["sweep", "--task", "index", "--steps", "1", "--length", "4", "--vocab", "4",
              "--seeds", "0", "--ids", "0", "--no-scores"],
    "encoder": ["encoder", "--task", "distance", "--scheme", "rope", "--steps", "1"],
    "multihop train": ["multihop", "train", "--task", "number", "--preset", "tiny",
                       "--steps", "1"],
    "multihop lengths": ["multihop", "lengths", "RUN"],
}


@pytest.mark.parametrize("name", sorted(THREADED))
def test_more_threads_than_the_machine_has_are_refused(name, tmp_path, capsys):
    """Before: --threads 100000 ended train, sweep, multihop train and encoder with a
    segmentation fault (exit 139)."""
    argv = [str(tmp_path / "run") if a == "RUN" else a for a in THREADED[name]]
    if name != "multihop lengths":
        argv += ["--out", str(tmp_path / "out")]
    assert main(argv + ["--threads", "100000"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--threads: 100000 is more than this machine" in err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("argv, code, phrase", [
    (["decompose", "--model", "tiny-llama", "--device", "mps", "--layer", "1"], 1,
     "device 'mps' is not usable here"),
    (["profile", *TINY, "--n-prompts", "1000000000", "--out", "OUT"], 1,
     "n_prompts must be between 1 and 100000"),
    (["profile", *TINY, "--task", "random", "--prompts", "IDS", "--out", "OUT"], 2,
     "--task random builds prompts, and --prompts"),
    (["profile", *TINY, "--prompts", "IDS", "--out", "OUT"], 1,
     "token id 1e+23 is out of range"),
    (["profile", *TINY, "--out", ""], 1, "--out is empty"),
    (["ablate", *TINY, "--heads", "1.0", "--per-position", "--mode", "zero"], 2,
     "--per-position takes one mean per position, for --mode mean only"),
], ids=["mps", "1e9 prompts", "task and prompts", "id 1e23", "empty out", "per-position"])
def test_the_attack_s_invocations_end_in_one_line(argv, code, phrase, tmp_path, capsys):
    """Before: "internal error" (mps, an id of 10^23), a hang (10^9 prompts), exit 0 with
    the option ignored (--task with --prompts, --per-position with --mode zero) or the
    current folder written (--out '')."""
    ids = tmp_path / "ids.jsonl"
    ids.write_text(json.dumps([1, 2, 3, 10 ** 23, 4]) + "\n")
    argv = [{"OUT": str(tmp_path / "out"), "IDS": str(ids)}.get(a, a) for a in argv]
    assert main(argv) == code
    line = _one_error_line(capsys)
    assert phrase in line, line
    assert not (tmp_path / "out").exists()
