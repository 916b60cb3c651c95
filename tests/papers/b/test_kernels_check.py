"""`paper-b kernels`: one committed cell retrained to its first loop evaluation, beside the
record's, says whether this machine retrains the committed records."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from lens_possym.cli import main
from lens_possym.errors import InvalidSelectionError
from lens_possym.papers.b.cells import Cell, train_cell
from lens_possym.papers.b.kernels_check import first_evaluation_check
from lens_possym.papers.b.presets import ENCODER_PRESETS, with_steps


@pytest.fixture
def tiny_record(tmp_path, monkeypatch):
    """A tiny `paper-length` preset, and the records file of one of its cells trained in
    full (the record a committed grid would hold)."""
    tiny = replace(with_steps(ENCODER_PRESETS["paper-length"], 8), name="paper-length",
                   eval_size=16, evals=2,
                   model=dict(n_layers=1, n_heads=2, d_model=16, d_head=8, d_ff=16, d_latent=8),
                   tasks={"distance": dict(n_ctx=16, max_between=8, max_side=3, n_words=10)})
    monkeypatch.setitem(ENCODER_PRESETS, "paper-length", tiny)
    cell = Cell("distance", "rope", "intended", 0)
    _, _, result = train_cell(tiny, cell, tmp_path / "runs")
    record = {"preset": "paper-length", "task": "distance", "scheme": "rope",
              "variant": "intended", "seed": 0,
              "history": [[h.step, h.test_accuracy] for h in result.history]}
    path = tmp_path / "results.json"
    path.write_text(json.dumps({"verdicts": {}, "cells": [record]}))
    return path, record, cell


def test_a_retrain_here_meets_the_record_at_its_first_evaluation(tiny_record):
    path, record, cell = tiny_record
    check = first_evaluation_check([record], cell)
    assert check.step == record["history"][0][0] == 4 and check.equal
    assert check.here == {"accuracy": record["history"][0][1]}
    assert "equal: this machine retrains the committed run up to step 4" in check.line()
    later = first_evaluation_check([record], cell, step=8)
    assert later.equal and later.here == {"accuracy": record["history"][1][1]}
    with pytest.raises(InvalidSelectionError, match="no loop evaluation at step 5; pass one "
                                                     r"of \[4, 8\]"):
        first_evaluation_check([record], cell, step=5)


def test_the_command_says_so_and_fails_on_another_run(tiny_record, capsys):
    path, record, _ = tiny_record
    argv = ["paper-b", "kernels", "--records", str(path)]
    assert main(argv) == 0
    assert capsys.readouterr().out.strip().endswith("retrains the committed run up to step 4")
    record["history"][0][1] += 1 / 16               # another run's first evaluation
    path.write_text(json.dumps({"verdicts": {}, "cells": [record]}))
    assert main(argv) == 1
    assert "different: this machine trains another run" in capsys.readouterr().out


def test_a_cell_without_a_record_is_refused(tiny_record, capsys):
    path, record, _ = tiny_record
    with pytest.raises(InvalidSelectionError, match="no committed paper-length record"):
        first_evaluation_check([record], Cell("distance", "alibi", "intended", 0))
    assert main(["paper-b", "kernels", "--records", str(path), "--cell", "distance", "rope",
                 "intended", "x"]) == 1
    assert "SEED must be a whole number, got 'x'" in capsys.readouterr().err
