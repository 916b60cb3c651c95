"""The command line's front door: ``--help`` of every command and ``models`` import no
model code (torch, transformers, matplotlib), however the commands are written."""

from __future__ import annotations

import subprocess
import sys

import pytest

from lens_possym.cli import build_parser

HEAVY = ("torch", "transformers", "transformer_lens", "matplotlib", "plotly", "numpy")
COMMANDS = sorted(build_parser().parse_args([]).commands)


def _heavy_modules_after(argv: list[str]) -> list[str]:
    code = ("import sys, contextlib, io\n"
            "from lens_possym.cli import main\n"
            "with contextlib.redirect_stdout(io.StringIO()):\n"
            f"    code = main({argv!r})\n"
            "assert code == 0, code\n"
            f"print(sorted({{m.split('.')[0] for m in sys.modules}} & set({HEAVY!r})))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return eval(done.stdout.strip())  # noqa: S307 - a list of names we printed


def test_the_commands_are_the_core_s_and_the_papers():
    assert {"models", "profile", "ablate", "train", "sweep", "encoder", "multihop"} <= set(
        COMMANDS)


@pytest.mark.parametrize("argv", [["--help"], *([c, "--help"] for c in COMMANDS)],
                         ids=lambda argv: " ".join(argv))
def test_help_imports_no_model_code(argv):
    assert _heavy_modules_after(argv) == []


def test_models_imports_no_model_code():
    assert _heavy_modules_after(["models"]) == []
