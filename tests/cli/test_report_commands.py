"""Every ``report.html`` names the command that wrote it, and that command runs.

Each command is run on a tiny model (or a two-step toy); for every one that writes a
report, the "Written by" line is pasted back: it must parse as it stands, run to exit 0,
and write a report that names the same command (the command is a fixed point). The table
of commands is checked against the parser, so a new command is driven here too.
"""

from __future__ import annotations

import html
import re
import shlex

import pytest

from lens_possym.cli import build_parser, main

# the least each command needs to run quickly, and whether it writes a report.html
RUNS = {
    "models": ([], False),
    "decompose": (["--model", "tiny-llama", "--layer", "1"], False),
    "dataset": (["--model", "tiny-llama", "--prompts", "PROMPTS", "--out", "OUT"], False),
    "profile": (["--model", "tiny-llama", "--n-prompts", "2", "--n-pairs", "2", "--layers", "1",
                 "--out", "OUT"], True),
    "ablate": (["--model", "tiny-llama", "--n-prompts", "2", "--n-pairs", "2",
                "--heads", "1.0", "--freqs", "high", "--out", "OUT"], True),
    "ablate --sweep": (["--model", "tiny-llama", "--n-prompts", "2", "--n-pairs", "2",
                        "--sweep", "bands", "--layers", "-1", "--no-progress", "--out", "OUT"],
                       True),
    "patch": (["--model", "tiny-llama", "--n-prompts", "2", "--n-pairs", "2", "--layers", "1",
               "--no-progress", "--out", "OUT"], True),
    "circuit": (["--model", "tiny-llama", "--n-prompts", "2", "--n-pairs", "2", "--heads-top",
                 "2", "--no-labels", "--out", "OUT"], True),
    "heads": (["--model", "tiny-llama", "--n-prompts", "2", "--n-pairs", "2", "--layers", "1",
               "--positions", "-1", "--no-progress", "--out", "OUT"], True),
    "train": (["--task", "index", "--steps", "2", "--eval-every", "1", "--length", "4",
               "--vocab", "4", "--out", "OUT"], True),
    "sweep": (["--task", "index", "--steps", "2", "--eval-every", "1", "--length", "4",
               "--vocab", "4", "--seeds", "0", "--ids", "0", "--no-scores", "--out", "OUT"],
              True),
    "encoder": (["--task", "distance", "--scheme", "rope", "--steps", "2", "--out", "OUT"],
                False),
    "multihop": (["lengths"], False),
    "paper-b": (["report", "--preset", "paper-length", "--out", "OUT"], False),  # a page block
    "paper-c": (["verdicts", "--docs", "OUT"], False),       # docs/paper_c.md's verdicts
}


def _commands() -> list[str]:
    parser = build_parser()
    return sorted(next(a for a in parser._actions if a.dest == "command").choices)


def test_every_command_is_in_the_table():
    """A new command gets a row (and is checked below if it writes a report)."""
    assert sorted({name.split()[0] for name in RUNS}) == _commands()


def _written_by(page: str) -> str:
    found = re.search(r"<pre class='command'>(.*?)</pre>", page, re.S)
    assert found, "the report names no command"
    return html.unescape(found.group(1))


@pytest.mark.parametrize("name", [n for n, (_, report) in RUNS.items() if report])
def test_the_reports_command_runs_again(name, tmp_path, capsys):
    out = tmp_path / "first"
    argv = [name.split()[0]] + [str(out) if a == "OUT" else a for a in RUNS[name][0]]
    assert main(argv) == 0, capsys.readouterr().err
    command = _written_by((out / "report.html").read_text(encoding="utf-8"))
    words = shlex.split(command)
    assert words[0] == "lens-possym"
    assert "--commands" not in words and "--func" not in words
    build_parser().parse_args(words[1:])  # parses as it stands (UsageError otherwise)
    (out / "report.html").unlink()
    assert main(words[1:]) == 0, capsys.readouterr().err  # writes to the same --out
    assert _written_by((out / "report.html").read_text(encoding="utf-8")) == command


def test_a_value_that_looks_like_an_option_is_written_to_parse_back():
    from lens_possym.cli.profile import command_line

    args = build_parser().parse_args(["heads", "--positions", "-1", "--seed", "-3", "--debug"])
    args.metric = "loss"  # set by the command as it runs
    words = shlex.split(command_line(args))
    assert "--positions=-1" in words and "--seed=-3" in words and "--metric" in words
    assert "--debug" not in words and "--commands" not in words
    again = build_parser().parse_args(words[1:])
    assert again.positions == "-1" and again.seed == -3
