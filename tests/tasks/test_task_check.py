"""Does the model solve the prompts? The verdict, the raw metrics of patch/heads/ablate."""

from __future__ import annotations

import json

import pytest
import torch

import lens_possym as lp
from lens_possym.cli import main
from lens_possym.tasks import SOLVED_MARGIN, batch_check, binding_pairs, task_check


def test_the_verdict_is_accuracy_against_chance_plus_the_margin():
    assert SOLVED_MARGIN == 0.1
    assert task_check(0.6, 0.5)["solves_task"] is True
    below = task_check(0.59, 0.5, logit_diff=-0.42)
    assert below["solves_task"] is False and "chance 50.0% + margin 10%" in below["warning"]
    assert below["logit_diff"] == -0.42
    assert task_check(1.0, 0.95)["solves_task"] is True  # the bar is capped at 1
    unknown = task_check(0.1, None)
    assert unknown["solves_task"] is None and "warning" not in unknown


def test_raw_metrics_of_pairs_are_the_unnormalised_baselines():
    model = lp.tiny_model("llama")
    pairs = binding_pairs(model, None, "swap_query", n_prompts=6, n_pairs=3)
    check = pairs.raw_metrics(model)
    clean, corrupted = pairs.baselines(model)
    assert check["clean_logit_diff"] == pytest.approx(float(clean.mean()), abs=1e-5)
    assert check["corrupted_logit_diff"] == pytest.approx(float(corrupted.mean()), abs=1e-5)
    assert check["accuracy"] == pytest.approx(float((clean > 0).double().mean()))
    assert check["chance"] == 0.5
    assert check["solves_task"] == (check["accuracy"] >= 0.6)


def test_batch_check_counts_the_answer_above_every_distractor():
    model = lp.tiny_model("llama")
    task = lp.binding_task(model, n_prompts=5, n_pairs=4)
    batch = lp.tasks.ImportanceBatch.from_binding(task)
    check = batch_check(model, batch)
    result = lp.evaluate_binding(model, task)
    assert check["chance"] == pytest.approx(1 / 4)
    assert check["candidate_accuracy"] == pytest.approx(result.candidate_accuracy)
    assert check["top1_accuracy"] == pytest.approx(result.accuracy)


def test_patch_prints_and_stores_the_raw_metric_and_warns(tmp_path, capsys):
    code = main(["patch", "--model", "tiny-llama", "--n-prompts", "4", "--layers", "1",
                 "--out", str(tmp_path), "--no-progress"])
    assert code == 0
    captured = capsys.readouterr()
    stored = json.loads((tmp_path / "patch.json").read_text())["info"]["task_check"]
    assert f"clean logit diff {stored['clean_logit_diff']:.3f}" in captured.out
    assert f"corrupted logit diff {stored['corrupted_logit_diff']:.3f}" in captured.out
    # the tiny random model does not solve binding: warned on stderr, flagged in file and page
    assert stored["solves_task"] is False
    assert "warning: the model does not solve these prompts" in captured.err
    page = (tmp_path / "report.html").read_text()
    assert "Does the model solve the task?" in page and "does not solve" in page


@pytest.mark.parametrize("argv,name", [
    (["heads", "--layers", "1"], "heads.json"),
    (["ablate", "--heads", "1.0"], "ablate.json")])
def test_heads_and_ablate_store_the_check(argv, name, tmp_path, capsys):
    code = main(argv + ["--model", "tiny-llama", "--n-prompts", "3", "--out", str(tmp_path)])
    assert code == 0
    data = json.loads((tmp_path / name).read_text())
    check = data.get("task_check") or data["info"]["task_check"]
    assert {"accuracy", "chance", "solves_task", "logit_diff"} <= set(check)
    assert "unedited model:" in capsys.readouterr().out
    assert "Does the model solve the task?" in (tmp_path / "report.html").read_text()
