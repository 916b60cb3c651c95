"""``lens-possym train`` and ``lens-possym sweep``."""

from __future__ import annotations

import json

import pytest

from lens_possym.cli import main
from lens_possym.errors import InvalidSelectionError


def test_cli_train(tmp_path, capsys):
    code = main(["train", "--task", "index", "--length", "5", "--vocab", "5", "--freq-ids", "0",
                 "--n-freqs", "4", "--steps", "30", "--eval-every", "15", "--out",
                 str(tmp_path)])
    assert code == 0
    out = capsys.readouterr().out
    assert "test accuracy" in out and "id 0 (θ=1)" in out
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    assert metrics["steps_run"] == 30 and (tmp_path / "model.pt").is_file()
    report = (tmp_path / "report.html").read_text()
    assert "Accuracy by answer position" in report and "--freq-ids 0" in report


def test_cli_sweep(tmp_path, capsys):
    code = main(["sweep", "--task", "retrieval", "--length", "4", "--vocab", "4", "--ids", "0:2",
                 "--pair-with", "4", "--n-freqs", "4", "--steps", "20", "--eval-every", "20",
                 "--no-scores", "--out", str(tmp_path)])
    assert code == 0
    out = capsys.readouterr().out
    assert "| 4+0 |" in out and "| 4+1 |" in out
    for name in ("sweep.json", "table.md", "accuracy_vs_freq.png", "accuracy_by_position.png",
                 "report.html"):
        assert (tmp_path / name).is_file(), name


def test_cli_reports_bad_ids(tmp_path, capsys):
    # unreadable: a usage error before anything runs; out of range: known once the model is
    assert main(["train", "--task", "index", "--freq-ids", "x", "--out", str(tmp_path)]) == 2
    assert "cannot read frequency ids" in capsys.readouterr().err
    assert main(["train", "--task", "index", "--freq-ids", "0-3", "--out", str(tmp_path)]) == 2
    assert "write '0:4'" in capsys.readouterr().err
    assert main(["train", "--task", "index", "--freq-ids", "40", "--out", str(tmp_path)]) == 1
    assert "out of range" in capsys.readouterr().err


def test_parse_ids():
    from lens_possym.papers.a._toy_args import parse_ids
    from lens_possym.training.toy import ToyConfig

    config = ToyConfig(d_vocab=4, n_ctx=8, d_head=34, rotary_dim=32)  # 16 pairs + tail = 17 ids
    assert parse_ids("3", config) == [3] and parse_ids("16,4", config) == [4, 16]
    assert parse_ids("0:3,8", config) == [0, 1, 2, 8] and parse_ids(None, config) is None
    for bad in ("1-x", "0-3", "17", "-1"):
        with pytest.raises(InvalidSelectionError):
            parse_ids(bad, config)
