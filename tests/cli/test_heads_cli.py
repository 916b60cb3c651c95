"""``lens-possym heads``: writes the per-head result and heatmap; bad input is one line."""

from __future__ import annotations

import json

import pytest
import torch

import lens_possym as lp
from lens_possym.cli import main
from lens_possym.errors import InvalidSelectionError
from lens_possym.interventions import HeadImportance, ImportanceBatch, head_importance


def test_heads_writes_json_and_heatmap_matching_the_library(tmp_path, capsys):
    out = tmp_path / "heads"
    rc = main(["heads", "--model", "tiny-llama", "--device", "cpu", "--n-prompts", "6",
               "--heads-per-pass", "3", "--out", str(out), "--no-progress"])
    assert rc == 0
    printed = capsys.readouterr().out
    assert "baseline logit_diff" in printed and "share of summed drop" in printed
    result = HeadImportance.from_json((out / "heads.json").read_text())
    assert result.ablated.shape == (2, 4) and result.info["task"] == "binding"
    assert (out / "heads.png").stat().st_size > 1000
    assert (out / "heads_top.png").stat().st_size > 1000 and "± SE" in printed
    assert result.effect_se.shape == (2, 4) and torch.isfinite(result.effect_se).all()
    model = lp.tiny_model("llama")
    task = lp.binding_task(model, n_prompts=6, n_pairs=4, seed=0)
    expected = head_importance(model, ImportanceBatch.from_binding(task), "logit_diff")
    torch.testing.assert_close(result.ablated, expected.ablated, atol=1e-5, rtol=0)


def test_mean_mode_on_some_layers_and_positions(tmp_path, capsys):
    rc = main(["heads", "--model", "tiny-qwen2", "--device", "cpu", "--n-prompts", "4",
               "--metric", "loss", "--mode", "mean", "--layers", "1", "--positions", "-1",
               "--reference-prompts", "4", "--out", str(tmp_path), "--no-progress"])
    assert rc == 0
    data = json.loads((tmp_path / "heads.json").read_text())
    n_pos = len(data["config"]["positions"]) and data["config"]["positions"][0] + 1
    assert data["config"]["layers"] == [1] and data["config"]["positions"] == [n_pos - 1] != [0]
    assert data["ablated"][0] == [None] * 4 and None not in data["ablated"][1]


@pytest.mark.parametrize("argv, code, match", [
    (["--layers", "0-2"], 2, "write '0:3'"),
    (["--layers", "5"], 1, "layer [5] out of range"),
    (["--positions", "x"], 2, "cannot read positions"),
    (["--heads-per-pass", "0"], 2, "expected a positive integer"),
    (["--n-prompts", "0"], 2, "expected a positive integer"),
    (["--task", "distance"], 1, "single tokens"),
])
def test_bad_arguments_print_one_line(argv, code, match, capsys):
    rc = main(["heads", "--model", "tiny-llama", "--device", "cpu", "--no-progress", *argv])
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if not line.startswith("loading ")]
    assert rc == code and len(lines) == 1 and match in lines[0], err


def test_layers_and_positions_use_the_shared_grammar(capsys):
    # the dash form is a usage error before any model loads, with the form to write instead
    rc = main(["heads", "--model", "tiny-llama", "--layers", "0-2"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "0:3" in err[0], err
