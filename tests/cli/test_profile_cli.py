"""``lens-possym profile`` end to end on gemma-3-270m (small settings), offline."""

from __future__ import annotations

import json

import pytest

from lens_possym.cli import main
from lens_possym.scores import PosSymScores

pytestmark = pytest.mark.slow


def test_profile_writes_scores_figures_and_report(tmp_path, capsys):
    out = tmp_path / "prof"
    code = main(["profile", "--model", "gemma-3-270m", "--n-prompts", "2", "--n-pairs", "3",
                 "--layers", "0,5,17", "--out", str(out)])
    assert code == 0
    printed = capsys.readouterr().out
    assert "binding accuracy" in printed and "Pearson r(s_POS, s_SYM)" in printed
    scores = PosSymScores.load(out / "scores.json")
    assert scores.layers == [0, 5, 17] and scores.pos.shape == (18, 4)
    assert scores.task["name"] == "binding" and 0 <= scores.task["accuracy"] <= 1
    assert scores.pos[[0, 5, 17]].isfinite().all() and scores.pos[1].isnan().all()
    html = (out / "report.html").read_text()
    assert "gemma-3-270m" in html and html.count("<img") == 7  # the PNGs, in the report too
    assert "id=\"explore-atlas\"" in html and "const DATA = " in html  # the explorer
    assert json.loads((out / "scores.json").read_text())["config"]["swap"] == "token"


def test_profile_reports_bad_input_without_a_traceback(tmp_path, capsys):
    code = main(["profile", "--model", "gemma-3-270m", "--n-prompts", "1", "--n-pairs", "2",
                 "--swap", "block", "--n-blocks", "99", "--no-report", "--out", str(tmp_path)])
    assert code == 1
    assert "too few keys for 99 blocks" in capsys.readouterr().err

