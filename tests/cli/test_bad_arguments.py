"""Every command answers a bad argument with one line and a non-zero exit, never a traceback.

Exit 2 for a command line that does not parse (checked before any model loads, so these
cases are fast); exit 1 for a value that parses but does not fit the model (a layer the
model does not have), after the model is known.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import lens_possym
from lens_possym.cli import main

TINY = ["--model", "tiny-llama", "--device", "cpu"]

USAGE = [  # (argv, a phrase the one line must hold)
    ([], "no command given"),
    (["frobnicate"], "invalid choice: 'frobnicate'"),
    (["models", "--bogus"], "unrecognized arguments: --bogus"),
    (["decompose", *TINY, "--layer", "x"], "argument --layer: invalid int value: 'x'"),
    (["decompose", *TINY, "--top", "0"], "expected a positive integer, got '0'"),
    (["profile", *TINY, "--layers", "1,x"], "layer 'x' must be an integer"),
    (["profile", *TINY, "--layers", "0-1"], "write '0:2'"),
    (["profile", *TINY, "--n-prompts", "-3"], "expected a positive integer"),
    (["profile", *TINY, "--tau", "nan"], "expected a positive number, got 'nan'"),
    (["profile", *TINY, "--swap", "pairs"], "invalid choice: 'pairs'"),
    (["ablate", *TINY, "--sweep", "bands", "--layers", "1,x"], "layer 'x' must be an integer"),
    (["ablate", *TINY, "--heads", "1.0", "--freqs", "0-3"], "write '0:4'"),
    (["ablate", *TINY, "--sweep", "bands", "--bands", "0"], "expected a positive integer"),
    (["ablate", *TINY, "--heads", "1.0", "--mode", "scramble"], "invalid choice: 'scramble'"),
    (["train", "--task", "index", "--freq-ids", "0-3", "--out", "x"], "write '0:4'"),
    (["train", "--task", "index", "--steps", "0", "--out", "x"], "expected a positive integer"),
    (["train", "--task", "index", "--lr", "inf", "--out", "x"], "expected a positive number"),
    (["train", "--task", "sorting", "--out", "x"], "invalid choice: 'sorting'"),
    (["train", "--task", "index"], "the following arguments are required: --out"),
    (["sweep", "--task", "index", "--ids", "1:x", "--out", "x"],
     "frequency id 'x' must be an integer"),
    (["sweep", "--task", "index", "--seeds", "0,a", "--out", "x"], "comma-separated integers"),
    (["sweep", "--task", "index", "--pair-with", "-1", "--out", "x"], "an integer >= 0"),
]


@pytest.mark.parametrize("argv, phrase", USAGE, ids=[" ".join(a) or "(none)" for a, _ in USAGE])
def test_a_command_line_that_does_not_parse_is_one_line_and_exit_2(argv, phrase, capsys):
    assert main(argv) == 2
    captured = capsys.readouterr()
    lines = captured.err.splitlines()
    assert len(lines) == 1, captured.err
    assert phrase in lines[0] and "Traceback" not in captured.err
    assert captured.out == ""


def _error_lines(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith("lens-possym")]


@pytest.mark.parametrize("argv, phrase", [
    (["decompose", *TINY, "--layer", "9"], "layer 9 out of range"),
    (["decompose", *TINY, "--layer", "1", "--head", "7"], "head [7] out of range"),
    (["profile", *TINY, "--layers", "0,5", "--no-report", "--n-prompts", "1"],
     "layer [5] out of range"),
    (["ablate", *TINY, "--heads", "1.0", "--freqs", "0:99", "--n-prompts", "2"], "out of range"),
    (["train", "--task", "index", "--freq-ids", "40", "--n-freqs", "4"],
     "frequency id [40] out of range"),
    (["sweep", "--task", "index", "--pair-with", "99", "--n-freqs", "4"],
     "frequency id [99] out of range"),
    (["profile", "--model", "no-such-model", "--n-prompts", "1"], "unknown model 'no-such-model'"),
])
def test_a_value_the_model_cannot_take_is_one_line_and_exit_1(argv, phrase, tmp_path, capsys):
    out = [] if argv[0] == "decompose" else ["--out", str(tmp_path / "out")]
    code = main(argv + out)
    err = capsys.readouterr().err
    assert code == 1 and "Traceback" not in err
    lines = _error_lines(err)
    assert len(lines) == 1 and phrase in lines[0], err
    assert not (tmp_path / "out").exists()  # nothing written for a failed command


def test_an_output_folder_that_is_a_file_is_one_line(tmp_path, capsys):
    taken = tmp_path / "taken"
    taken.write_text("mine")
    assert main(["train", "--task", "index", "--steps", "1", "--out", str(taken)]) == 1
    lines = _error_lines(capsys.readouterr().err)
    assert len(lines) == 1 and "is a file" in lines[0]
    assert taken.read_text() == "mine"


def test_an_internal_error_is_one_line_unless_debugging(monkeypatch, capsys):
    import lens_possym.cli.models as models_cli

    def broken(args):
        raise ZeroDivisionError("a bug")

    monkeypatch.setattr(models_cli, "run", broken)
    assert main(["models"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "internal error: ZeroDivisionError: a bug" in err
    assert "--debug" in err
    with pytest.raises(ZeroDivisionError):
        main(["models", "--debug"])
    monkeypatch.setenv("LENS_POSSYM_DEBUG", "1")
    with pytest.raises(ZeroDivisionError):
        main(["models"])


def test_help_and_version_exit_0(capsys):
    assert main(["--version"]) == 0
    assert lens_possym.__version__ in capsys.readouterr().out
    assert main(["ablate", "--help"]) == 0
    assert "half-open START:STOP" in capsys.readouterr().out


def test_the_installed_command_prints_one_line_and_no_traceback(tmp_path):
    """The real process: exit status and stderr as a shell sees them."""
    env = {**os.environ, "PYTHONPATH": str(Path(lens_possym.__file__).parents[1])}
    proc = subprocess.run([sys.executable, "-m", "lens_possym.cli", "ablate", *TINY, "--sweep",
                           "bands", "--layers", "1,x"], capture_output=True, text=True, env=env,
                          timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
    assert "argument --layers" in proc.stderr
