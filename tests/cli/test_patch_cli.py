"""``lens-possym patch``: numbers agree with the library, files written, clear errors."""

from __future__ import annotations

import json

import pytest
import torch

import lens_possym as lp
from lens_possym._json import tensor_from_json
from lens_possym.cli import main
from lens_possym.interventions import PatchingGrid, patch_grid
from lens_possym.tasks import binding_pairs


def test_patch_writes_per_head_effects_with_standard_errors(tmp_path, capsys):
    code = main(["patch", "--model", "tiny-llama", "--task", "binding", "--out", str(tmp_path),
                 "--no-progress"])
    assert code == 0
    printed = capsys.readouterr().out
    assert "binding/swap_query" in printed and "effect ± SE" in printed
    payload = json.loads((tmp_path / "patch.json").read_text())
    assert payload["axis_names"] == ["layer", "head"] and payload["n_prompts"] == 16
    effect, se = tensor_from_json(payload["effect"]), tensor_from_json(payload["effect_se"])
    assert effect.shape == se.shape == (2, 4) and (se > 0).all()
    model = lp.tiny_model("llama")
    pairs = binding_pairs(model, None, "swap_query", n_prompts=16, n_pairs=4)
    grid = patch_grid(model, pairs)
    assert torch.allclose(effect, grid.effect().mean(-1).double(), atol=1e-5)
    loaded = PatchingGrid.load(tmp_path / "patch.json")
    assert torch.allclose(loaded.uncertainty(of_effect=True).se, se.float(), atol=1e-6)
    assert torch.allclose(loaded.stderr(), tensor_from_json(payload["se"]).float(), atol=1e-6)
    report = (tmp_path / "report.html").read_text()
    assert "Largest effects" in report and "bootstrap" in report and "swap_query" in report
    for name in ("patch_grid", "patch_top"):
        assert (tmp_path / f"{name}.png").stat().st_size > 1000


def test_patch_other_sites_and_own_prompts(tmp_path, capsys):
    model = lp.tiny_model("llama")
    pairs = binding_pairs(model, None, "swap_attribute", n_prompts=3, n_pairs=3)
    lines = [json.dumps({"clean": c, "corrupted": k,
                         "clean_answer": model.tokenizer.decode([int(a)]),
                         "corrupted_answer": model.tokenizer.decode([int(b)])})
             for c, k, a, b in zip(pairs.clean_prompts, pairs.corrupted_prompts,
                                   pairs.clean_answers, pairs.corrupted_answers)]
    (tmp_path / "pairs.jsonl").write_text("\n".join(lines) + "\n")
    code = main(["patch", "--model", "tiny-llama", "--prompts", str(tmp_path / "pairs.jsonl"),
                 "--patch", "resid_pre", "--per-position", "--direction", "noise",
                 "--out", str(tmp_path / "out"), "--no-progress"])
    assert code == 0
    grid = PatchingGrid.load(tmp_path / "out" / "patch.json")
    assert grid.axis_names == ["layer", "pos"] and grid.config.direction == "noise"
    assert grid.info["pairs"]["task"] == "prompts"
    code = main(["patch", "--model", "tiny-llama", "--patch", "frequencies", "--layers", "1",
                 "--heads", "0", "--freqs", "0:2", "--n-prompts", "3", "--no-progress"])
    assert code == 0 and "1.0 f1" in capsys.readouterr().out


@pytest.mark.parametrize("argv, message", [
    (["--prompts", "missing.jsonl"], "cannot read --prompts"),
    (["--corruption", "swap"], "unknown binding corruption 'swap'"),
    (["--patch", "heads", "--freqs", "low"], "freqs applies to site='frequencies'"),
    (["--layers", "7"], "layer"),
])
def test_patch_errors_are_one_line(argv, message, capsys):
    code = main(["patch", "--model", "tiny-llama", "--n-prompts", "2", "--no-progress", *argv])
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if line.startswith("lens-possym")]
    assert code in (1, 2) and message in err and len(errors) == 1
