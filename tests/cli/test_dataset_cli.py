"""``lens-possym dataset``: prompts from text or JSONL, a profile equal to the library's,
resuming from the shards written, and one-line errors for bad input."""

from __future__ import annotations

import pytest
import torch

from lens_possym.cli import main
from lens_possym.scores.dataset import DatasetProfile, dataset_profile

PROMPTS = ["The cat sat on the mat and looked at the door.",
           "Alice gave Bob a book because it was his birthday.",
           "A short prompt here.",
           "Rain fell on the quiet town all through the night."]


def test_dataset_from_jsonl_equals_the_library_and_resumes(tmp_path, capsys):
    source = tmp_path / "prompts.jsonl"
    source.write_text("".join(f'{{"id": {i}, "body": "{p}"}}\n' for i, p in enumerate(PROMPTS)))
    out = tmp_path / "profile"
    argv = ["dataset", "--model", "tiny-llama", "--device", "cpu", "--prompts", str(source),
            "--field", "body", "--shard-size", "3", "--layers", "0", "--out", str(out)]
    assert main(argv) == 0
    printed = capsys.readouterr()
    assert "4 prompts" in printed.out and "profile.json" in printed.out
    assert "prompt" in printed.err                                 # the progress bar
    result = DatasetProfile.load(out / "profile.json")
    expected = dataset_profile("tiny-llama", PROMPTS, shard_size=3, layers=0)
    for name, m in expected.moments.items():
        torch.testing.assert_close(result.moments[name].mean, m.mean, rtol=0, atol=0,
                                   equal_nan=True)
    assert sorted(p.name for p in (out / "shards").iterdir()) == ["shard_000000.pt",
                                                                   "shard_000001.pt"]
    (out / "profile.json").unlink()
    (out / "shards" / "shard_000001.pt").unlink()                  # as if interrupted
    stamp = (out / "shards" / "shard_000000.pt").stat().st_mtime_ns
    assert main(argv) == 0
    assert (out / "shards" / "shard_000000.pt").stat().st_mtime_ns == stamp
    torch.testing.assert_close(DatasetProfile.load(out / "profile.json").mean("pos_freq"),
                               result.mean("pos_freq"), rtol=0, atol=0, equal_nan=True)


@pytest.mark.parametrize("content, phrase", [
    ('{"text": "fine prompt here"}\n{broken\n', "prompts.jsonl:2 is not valid JSON"),
    ('{"body": "no text field"}\n', "prompts.jsonl:1 has no 'text' field"),
    ("\n\n", "holds no prompts"),
    ('{"text": "a b"}\n', "prompts 0 (3 tokens): token swaps need at least two keys"),
])
def test_bad_prompt_files_are_one_line(tmp_path, capsys, content, phrase):
    source = tmp_path / "prompts.jsonl"
    source.write_text(content)
    rc = main(["dataset", "--model", "tiny-llama", "--device", "cpu", "--prompts", str(source),
               "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 1 and phrase in err[-1] and err[-1].startswith("lens-possym: ")


def test_a_missing_prompts_file_is_one_line(tmp_path, capsys):
    rc = main(["dataset", "--model", "tiny-llama", "--prompts", str(tmp_path / "none.txt")])
    assert rc == 1 and "no prompts file at" in capsys.readouterr().err
