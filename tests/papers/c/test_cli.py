"""``lens-possym multihop``: train (resumable), dynamics, lengths, discrepancy, bad input."""

from __future__ import annotations

import json

import pytest

from lens_possym.cli import main


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("cli") / "run"
    assert main(["multihop", "train", "--task", "letter", "--preset", "tiny", "--steps", "20",
                 "--device", "cpu", "--out", str(out)]) == 0
    return out


def test_train_writes_checkpoints_and_resumes(tiny_run, capsys):
    assert (tiny_run / "checkpoint_000020.pt").is_file() and (tiny_run / "model.pt").is_file()
    assert main(["multihop", "train", "--task", "letter", "--preset", "tiny", "--steps", "20",
                 "--device", "cpu", "--out", str(tiny_run)]) == 0
    assert "after 20 steps" in capsys.readouterr().out


def test_dynamics_prints_scores_and_purity(tiny_run, tmp_path, capsys):
    out = tmp_path / "traj.json"
    assert main(["multihop", "dynamics", str(tiny_run), "--prompts", "8", "--gamma", "0.05",
                 "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "s_POS" in text and "pure heads (γ=0.05)" in text
    data = json.loads(out.read_text())
    assert data["steps"] == [20] and data["purity"]["gamma"] == 0.05


def test_lengths_and_discrepancy(tiny_run, capsys):
    assert main(["multihop", "lengths", str(tiny_run), "--lengths", "17,140",
                 "--prompts", "8"]) == 0
    assert "length   140" in capsys.readouterr().out
    assert main(["multihop", "lengths", str(tiny_run), "--lengths", "40", "--prompts", "8",
                 "--filler", "repeat"]) == 0
    assert "extra tokens: repeat" in capsys.readouterr().out
    assert main(["multihop", "discrepancy", "--theta", "0.8", "--lengths", "8,100"]) == 0
    text = capsys.readouterr().out
    assert "|   100 |" in text and "* above the bound" in text


@pytest.mark.parametrize("argv, code, message", [
    (["multihop", "train", "--task", "index", "--out", "x"], 2, "invalid choice"),
    (["multihop", "discrepancy", "--theta", "-1"], 2, "--theta"),
    (["multihop", "dynamics", "/nonexistent/run"], 1, "no checkpoints"),
    (["multihop", "dynamics", "/nonexistent/run", "--gamma", "0.7"], 2, "--gamma"),
])
def test_bad_input_gets_one_line(argv, code, message, capsys):
    assert main(argv) == code
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1


def test_lengths_are_a_comma_list_as_every_other_list(capsys):
    """Space-separated lengths are refused (usage error, exit 2) with the comma form named."""
    assert main(["multihop", "discrepancy", "--lengths", "8", "100"]) == 2
    assert "unrecognized arguments: 100" in capsys.readouterr().err
    assert main(["multihop", "discrepancy", "--lengths", "8,-1"]) == 2
    assert "expected positive integers, got -1" in capsys.readouterr().err


def test_filler_choices_are_the_tasks():
    from lens_possym.papers.c.cli import FILLER_CHOICES
    from lens_possym.papers.c.tasks import FILLERS

    assert FILLER_CHOICES == FILLERS
