"""The README's Python example runs as written (a user's first copy-paste)."""

from __future__ import annotations

import re
from pathlib import Path

import matplotlib
import pytest

README = Path(__file__).resolve().parents[1] / "README.md"


@pytest.mark.slow
def test_readme_python_example_runs(capsys):
    matplotlib.use("Agg")
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)
    assert blocks, "README has no Python example"
    namespace: dict = {}
    for block in blocks:
        exec(compile(block, str(README), "exec"), namespace)
    scores, fl = namespace["scores"], namespace["fl"]
    assert scores.pos.shape == scores.sym.shape == (18, 4)
    assert scores.pos_freq.shape == (18, 4, 128)
    assert scores.pos.isfinite().all()
    assert fl.max_abs_error <= 1e-4
    assert "BindingResult(accuracy=" in capsys.readouterr().out
