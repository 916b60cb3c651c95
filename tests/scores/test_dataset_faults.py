"""Faults on disk during a dataset profile: nothing lost, mixed or left behind (issue 27).

Each test damages a profile's folder the way a disk, a kill or a second run would, runs
the profile again, and checks that the result equals an undamaged run bit for bit, that
what was damaged is said, and that no temporary file is left.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import torch

import lens_possym as lp
from lens_possym.errors import OutputError, ResultsFileError
from lens_possym.scores.dataset import DatasetIntegrityWarning, DatasetProfile, dataset_profile

SHARD = 4


def _prompts(n: int, seed: int) -> list[list[int]]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(2, 120, (int(k),), generator=g).tolist()
            for k in torch.randint(5, 10, (n,), generator=g)]


PROMPTS = _prompts(12, 0)
OTHERS = _prompts(12, 1)


@pytest.fixture(scope="module")
def model():
    return lp.tiny_model("llama", n_layers=2)


@pytest.fixture(scope="module")
def clean(model):
    return dataset_profile(model, PROMPTS, shard_size=SHARD, per_frequency=False)


def _run(model, out, prompts=PROMPTS):
    return dataset_profile(model, prompts, shard_size=SHARD, out_dir=out, per_frequency=False)


def _same(a: DatasetProfile, b: DatasetProfile) -> bool:
    return a.moments.keys() == b.moments.keys() and all(
        torch.equal(getattr(a.moments[k], f), getattr(b.moments[k], f))
        for k in a.moments for f in ("count", "mean", "m2"))


def _leftovers(out: Path) -> list[str]:
    return sorted(p.name for p in out.rglob("*") if ".tmp" in p.name or ".partial-" in p.name)


def _tensor_bytes(path: Path) -> tuple[int, int]:
    """``(offset, size)`` in the file of the largest tensor's raw bytes (torch's zip format
    stores them uncompressed)."""
    with zipfile.ZipFile(path) as archive:
        info = max((i for i in archive.infolist() if "/data/" in i.filename),
                   key=lambda i: i.file_size)
    with open(path, "rb") as handle:
        handle.seek(info.header_offset + 26)
        name_len, extra_len = (int.from_bytes(handle.read(2), "little") for _ in range(2))
    return info.header_offset + 30 + name_len + extra_len, info.file_size


def test_flipped_bytes_in_a_shards_tensors_are_caught_and_recomputed(model, clean, tmp_path):
    out = tmp_path / "profile"
    assert _same(_run(model, out), clean)
    shard = out / "shards" / "shard_000001.pt"
    offset, size = _tensor_bytes(shard)
    data = bytearray(shard.read_bytes())
    start = offset + size // 2
    data[start:start + 8] = bytes(b ^ 0xFF for b in data[start:start + 8])
    shard.write_bytes(bytes(data))
    torch.load(shard, weights_only=True)  # still loads: only the content digest can tell
    with pytest.warns(DatasetIntegrityWarning, match="shard_000001.pt failed its content "
                                                     "digest.*computing shard 1 again"):
        again = _run(model, out)
    assert _same(again, clean)
    assert _same(DatasetProfile.load(out / "profile.json"), clean)
    with _no_warning():
        assert _same(_run(model, out), clean)  # the rewritten shard reads back clean
    assert _leftovers(out) == []


class _no_warning:
    def __enter__(self):
        import warnings

        self._catch = warnings.catch_warnings()
        self._catch.__enter__()
        warnings.simplefilter("error", DatasetIntegrityWarning)

    def __exit__(self, *exc):
        self._catch.__exit__(*exc)


@pytest.mark.parametrize("damage", ["truncated", "empty", "garbage", "foreign"])
def test_a_damaged_shard_file_is_recomputed_and_said(model, clean, tmp_path, damage):
    out = tmp_path / "profile"
    _run(model, out)
    shard = out / "shards" / "shard_000002.pt"
    data = shard.read_bytes()
    shard.write_bytes({"truncated": data[: len(data) // 2], "empty": b"",
                       "garbage": os.urandom(len(data)),
                       "foreign": b""}[damage])
    if damage == "foreign":
        torch.save({"format": "something else"}, shard)
    with pytest.warns(DatasetIntegrityWarning, match="shard_000002.pt"):
        assert _same(_run(model, out), clean)


@pytest.mark.parametrize("damage", [b"", b'{"format": "lens-pos', b"\x00\xff garbage",
                                    b'["a list"]'])
def test_an_unreadable_manifest_says_what_to_do(model, clean, tmp_path, damage):
    out = tmp_path / "profile"
    _run(model, out)
    (out / "dataset.json").write_bytes(damage)
    with pytest.raises(ResultsFileError, match=r"dataset.json (is empty|is not a dataset "
                                               r"manifest).*delete .*dataset.json"):
        _run(model, out)
    (out / "dataset.json").unlink()  # what the message says to do: the shards are reused
    with _no_warning():
        assert _same(_run(model, out), clean)
    assert json.loads((out / "dataset.json").read_text())["shard_size"] == SHARD


_HOLD = """
import sys, time
from lens_possym._lock import folder_lock
with folder_lock(sys.argv[1], what="a dataset profile"):
    print("held", flush=True)
    time.sleep(60)
"""


def test_a_second_run_on_a_folder_in_use_is_refused(model, clean, tmp_path):
    """A run holding the folder (another process) keeps it: a second run with other prompts
    is refused at once, writes nothing, and the first run's profile is whole."""
    out = tmp_path / "profile"
    _run(model, out)
    before = {p.name: p.read_bytes() for p in (out / "shards").iterdir()}
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    holder = subprocess.Popen([sys.executable, "-c", _HOLD, str(out)], stdout=subprocess.PIPE,
                              env=env, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(OutputError, match=r"being written by another run \(pid "
                                              f"{holder.pid}\\).*mix"):
            _run(model, out, OTHERS)
        with pytest.raises(OutputError, match="another run"):
            _run(model, out)
    finally:
        holder.kill()
        holder.wait()
    assert {p.name: p.read_bytes() for p in (out / "shards").iterdir()} == before
    # the lock dies with its holder (killed): the folder is usable again at once
    assert _same(_run(model, out), clean)


def test_a_later_run_with_other_prompts_is_refused_and_mixes_nothing(model, clean, tmp_path):
    out = tmp_path / "profile"
    _run(model, out)
    with pytest.raises(ResultsFileError, match="other prompts than shard 0"):
        _run(model, out, OTHERS)
    with pytest.raises(ResultsFileError, match="other prompts than shard 1"):
        _run(model, out, PROMPTS[:4] + OTHERS[4:])
    assert _same(DatasetProfile.load(out / "profile.json"), clean)
    assert _same(_run(model, out), clean)


def test_temporary_files_of_a_killed_run_are_removed(model, clean, tmp_path):
    out = tmp_path / "profile"
    _run(model, out)
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True).stdout.strip()
    planted = [out / "shards" / f"shard_000001.pt.tmp{dead}",          # the old naming
               out / "shards" / f"shard_000002.pt.tmp-{dead}-0",
               out / f"profile.json.tmp-{dead}-3"]
    for path in planted:
        path.write_bytes(b"half a file")
    (out / "profile.json").unlink()
    assert _same(_run(model, out), clean)
    assert _leftovers(out) == [] and not any(p.exists() for p in planted)


def test_an_edited_profile_json_is_refused_on_load(model, tmp_path):
    """profile.json carries a digest of its content (issue 39: an edited mean loaded without
    complaint): an edited number is refused; the file as written loads back equal."""
    out = tmp_path / "p"
    first = _run(model, out, PROMPTS[:SHARD])
    assert _same(DatasetProfile.load(out / "profile.json"), first)
    data = json.loads((out / "profile.json").read_text())
    mean = data["moments"]["pos"]["mean"]
    mean[0][0] = (mean[0][0] or 0) + 0.25
    (out / "profile.json").write_text(json.dumps(data))
    with pytest.raises(ResultsFileError, match="failed its digest"):
        DatasetProfile.load(out / "profile.json")
