"""``lens-possym encoder``: train, ablate, reload; bad inputs get one line."""

from __future__ import annotations

import json

import pytest

from lens_possym.cli import main

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_cli_encoder_trains_ablates_and_reloads(tmp_path, capsys):
    out = tmp_path / "run"
    code = main(["encoder", "--task", "distance", "--scheme", "rope-k2", "--steps", "4",
                 "--ablate", "--device", "cpu", "--out", str(out)])
    assert code == 0
    text = capsys.readouterr().out
    assert "test accuracy" in text and "top head" in text and "rope-k2 (intended)" in text
    analysis = json.loads((out / "analysis.json").read_text())
    assert len(analysis["ablation"]) == 3 and len(analysis["ablation"][0]) == 8
    assert json.loads((out / "metrics.json").read_text())["steps_run"] == 4
    code = main(["encoder", "--task", "distance", "--scheme", "rope-k2", "--load", str(out),
                 "--out", str(tmp_path / "again")])
    assert code == 0
    again = json.loads((tmp_path / "again" / "analysis.json").read_text())
    assert again["baseline"] == analysis["baseline"]


@pytest.mark.parametrize("argv,code,phrase", [
    (["--task", "distance", "--scheme", "xpos"], 2, "unknown scheme 'xpos'"),
    (["--task", "sorting", "--scheme", "rope"], 2, "invalid choice: 'sorting'"),
    (["--task", "count", "--scheme", "rope", "--variant", "paper"], 2, "invalid choice: 'paper'"),
    (["--task", "count", "--scheme", "rope", "--steps", "0"], 2, "expected a positive integer"),
    (["--task", "count", "--scheme", "rope-k99", "--steps", "1"], 1, "rope_heads must be in 0..8"),
    (["--task", "count", "--scheme", "rope", "--load", "/nonexistent/x"], 1, "holds no model.pt"),
])
def test_cli_encoder_bad_inputs_one_line(argv, code, phrase, tmp_path, capsys):
    assert main(["encoder", *argv, "--out", str(tmp_path / "o")]) == code
    err = capsys.readouterr().err.strip()
    assert phrase in err and len(err.splitlines()) == 1
    assert not (tmp_path / "o").exists(), "nothing written on failure"
