"""docs/outside_transformerlens.md runs as written, and its figures hold."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

PAGE = Path(__file__).resolve().parents[1] / "docs" / "outside_transformerlens.md"


def _run(index: int) -> dict:
    blocks = re.findall(r"```python\n(.*?)```", PAGE.read_text(), re.S)
    assert len(blocks) == 2
    namespace: dict = {}
    exec(compile(blocks[index], str(PAGE), "exec"), namespace)
    return namespace


def test_compatibility_mode_changes_no_score(capsys):
    ns = _run(0)
    assert ns["compat_diff"] == 0.0 and ns["fl"].max_abs_error <= 1e-4
    assert "compatibility mode: max |Δ s_POS| 0.0e+00" in capsys.readouterr().out


def test_plain_tensors_from_a_hugging_face_model(capsys):
    ns = _run(1)
    assert ns["pattern_diff"] <= 1e-6          # the page says 1.5e-8
    assert ns["score_diff"] == 0.0 and ns["ablation_diff"] == 0.0
    assert ns["scores"].pos_freq.shape == (1, 4, 8)
    assert ns["head_exclusion"].ratio.shape == (1, 4)
    assert "scores vs the bridge 0.0e+00" in capsys.readouterr().out


@pytest.mark.slow
def test_compatibility_mode_on_smollm2(smollm2):
    """The page's smollm2 figures: scores within 1e-4 per head, 1e-5 per frequency."""
    import lens_possym as lp

    model = lp.load_model("smollm2-135m")  # its own copy: compatibility mode edits weights
    task = lp.binding_task(model, n_prompts=4, n_pairs=4)
    before = lp.swap_scores(model, task.tokens)
    model.enable_compatibility_mode(disable_warnings=True)
    after = lp.swap_scores(model, task.tokens)
    assert float((before.pos - after.pos).abs().max()) <= 1e-4
    assert float((before.sym - after.sym).abs().max()) <= 1e-4
    assert float((before.pos_freq - after.pos_freq).abs().max()) <= 1e-5
