"""Paper C's benchmark scripts on the tiny preset: the one-setting-at-a-time ablation (each
variant differs from its base in exactly its own setting, and the diagnostics are tracked
at every checkpoint it names), and the report (verdicts from what exists; missing seeds
pending; the results file)."""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _script(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module           # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("base", ["cpu", "tiny"])
def test_each_variant_changes_one_setting(base):
    from lens_possym.papers.c.presets import preset

    ablate = _script("paper_c_ablate_settings")
    found = ablate.variants(base)
    assert list(found) == list(ablate.VARIANTS)
    p = preset(base)
    for name, v in found.items():
        model = {k: x for k, x in {**p.model, **v.model}.items() if p.model.get(k) != x}
        train = {k: x for k, x in {**p.train, **v.train}.items() if p.train.get(k) != x}
        changed = set(model) | set(train)
        expected = {"base": set(), "dropout": {"dropout"}, "width": {"d_model", "d_mlp"},
                    "lr_schedule": {"lr", "betas", "warmup_steps", "schedule", "min_lr_ratio"},
                    "steps": {"steps"}}[name]
        assert changed == expected, (name, changed)
    if base == "cpu":
        assert found["lr_schedule"].train["lr"] == pytest.approx(1e-4)
        assert found["lr_schedule"].train["warmup_steps"] == 750
        assert found["steps"].train["steps"] == 7000 and found["width"].model["d_model"] == 128


def test_ablation_tracks_the_diagnostics_on_tiny(tmp_path):
    ablate = _script("paper_c_ablate_settings")
    argv = ["--base", "tiny", "--variants", "base", "dropout", "--track-every", "40",
            "--lengths", "17", "30", "--mask-lengths", "30", "--n-prompts", "16",
            "--gap-inputs", "8", "--out", str(tmp_path), "--preset-runs", str(tmp_path / "none")]
    rows = ablate.main(argv)
    assert [(r["variant"], r["step"]) for r in rows] == [("base", 40), ("base", 60),
                                                         ("dropout", 40), ("dropout", 60)]
    for r in rows:
        assert set(r["lengths"]) == {"17", "30"}
        assert set(r["masking"]) == {"as built", "mask", "positions"}
        assert r["masking"]["as built"] == [r["lengths"]["30"]]       # the same prompts
        assert len(r["gap_min"]) == 2 and len(r["gap_min"][0]) == 2      # 17, 30 × L0, L1
        assert all(m <= a + 1e-9 for m, a in zip(r["gap_min"][0], r["gap_mean"][0]))
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["variants"]["dropout"]["model"] == {"dropout": 0.1}
    again = ablate.main(argv)                                          # resumes from the cache
    assert again == rows

    lines: list[str] = []                                              # the report's section
    _script("paper_c_report")._ablation_section(lines.append, summary)
    table = [line for line in lines if line.startswith("| base") or line.startswith("| dropout")]
    assert len(table) == 4                                 # last-step row + trajectory row each
    assert f"| base | none (the `tiny` preset) | 60 | {rows[1]['lengths']['17']:.3f}" in table[0]
    assert table[1].startswith("| dropout | dropout 0.1 | 60 |")             # from the record
    assert any("the largest single change is **dropout**" in line for line in lines)


def test_base_variant_reads_the_presets_own_run_only_when_the_settings_match(tmp_path):
    ablate = _script("paper_c_ablate_settings")
    from lens_possym.training.loop import train

    own = tmp_path / "preset_runs" / "letter-tiny-s0"
    model, task, config = ablate.settings("tiny", "base", "letter", 0, own)
    train(model, task, config)
    for name, expected in (("base", True), ("dropout", False)):
        m, t, c = ablate.settings("tiny", name, "letter", 0, tmp_path / "elsewhere")
        assert ablate.same_run(own, m, t, c) is expected, name
    m, t, c = ablate.settings("tiny", "base", "letter", 1, tmp_path / "elsewhere")
    assert not ablate.same_run(own, m, t, c)                           # another seed
    argv = ["--base", "tiny", "--variants", "base", "--track-every", "1000", "--lengths", "17",
            "--mask-lengths", "30", "--n-prompts", "8", "--gap-inputs", "4",
            "--out", str(tmp_path / "ablate"), "--preset-runs", str(tmp_path / "preset_runs")]
    rows = ablate.main(argv)
    assert not (tmp_path / "ablate" / "runs").exists()                 # nothing trained again
    assert [r["step"] for r in rows] == [config.steps]


def _record(task, preset, seed, reach: int | None):
    hist = [{"step": s, "test_accuracy": 0.995 if reach and s >= reach else 0.3}
            for s in range(100, 1001, 100)]
    return {"task": task, "preset": preset, "seed": seed, "steps": 1000,
            "test_accuracy": hist[-1]["test_accuracy"], "train_time_s": 60.0,
            "history": hist}


def test_report_from_what_exists(tmp_path):
    """Two runs of seed 0 with lengths measured; nothing else: the rules that read lengths
    and histories decide seed 0, everything else is pending; seeds 1 and 2 are not run."""
    report = _script("paper_c_report")
    docs, cache = tmp_path / "docs", tmp_path / "cache"
    (docs / "paper_c_runs").mkdir(parents=True)
    for task, reach, acc in (("number", 800, {50: 0.4, 100: 0.3, 300: 0.1, 850: 0.02}),
                             ("letter", 500, {50: 0.9, 100: 0.7, 300: 0.3, 850: 0.1})):
        (docs / "paper_c_runs" / f"{task}-paper-s0.json").write_text(
            json.dumps(_record(task, "paper", 0, reach)))
        for n, a in acc.items():
            path = cache / "paper-s0" / f"length_{task}_{n}.json"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps({"task": task, "lengths": [n], "accuracy": [a],
                                        "by_hops": [[a] * 4], "n_prompts": 256,
                                        "model": "", "filler": "target"}))
        masked = {"as built": [acc[850]], "mask": [0.97 if task == "number" else 0.99],
                  "positions": [0.01]}
        (cache / "paper-s0" / f"masking_{task}_850.json").write_text(json.dumps(
            {"task": task, "lengths": [850], "accuracy": masked, "n_prompts": 256}))
    (cache / "paper-s0" / "frequency_number.json").write_text(json.dumps(
        {"weighted": [1.0, 2.0, 2.0, 2.5] + [38.0] * 8}))
    report.write_report(argparse.Namespace(docs=docs, cache=cache, presets=["paper"]))
    page = (docs / "paper_c.md").read_text()
    assert "| number-paper-s0 | 1.0 | 2.0 | 2.0 | 2.5 | 38.0 |" in page      # Table 1 beside
    assert "| number (Table 1) | 1 | 2 | 2 | 2 | 10 | 39 |" in page
    rows = {line.split(" | ")[0].strip("| "): line for line in page.splitlines()
            if line[:3].strip("| ").isdigit() and " | " in line}
    assert "✓ T = 500 (Letter) vs 800 (Number)" in rows["3"] and "**pending**" in rows["3"]
    assert "✓ 50: L 0.90 / N 0.40" in rows["13"]
    assert "✗ 0.100" in rows["14"] and "… not run" in rows["14"]
    assert "… missing" in rows["1"]
    assert "| number-paper-s1 | pending |" in page
    assert "| 4 | the counted positional heads are exactly L0-L3" in page   # strict rules
    assert "| letter-s0 | 0.100 / 0.990 / 0.010 |" in page                 # the masking table
    assert ("as built at most 0.100; with the extra tokens hidden from layers 0-3 at least "
            "**0.970**" in page and "the failure is in layers 0-3's attention" in page)
    # every verdict recomputed from the committed files equals the report's table
    script = _script("paper_c")
    script.main(["verdicts", "--docs", str(docs)])
    table = json.loads((docs / "paper_c_results.json").read_text())["verdicts"]
    assert table["paper"]["lenient"]["3"] == "pending" and table["paper"]["lenient"]["14"] \
        == "pending"
    inputs = json.loads((docs / "paper_c_verdict_inputs.json").read_text())
    for s in ("1", "2"):                                # seeds 1, 2 as seed 0: verdicts move
        inputs["runs"]["paper"][s] = inputs["runs"]["paper"]["0"]
    (docs / "paper_c_verdict_inputs.json").write_text(json.dumps(inputs))
    with pytest.raises(SystemExit, match="differs from the report"):
        script.main(["verdicts", "--docs", str(docs)])
    results = json.loads((docs / "paper_c_results.json").read_text())["runs"]
    assert [(r["task"], r["seed"]) for r in results] == [("number", 0), ("letter", 0)]
    number = results[0]
    assert number["accuracy_by_length"] == {"50": 0.4, "100": 0.3, "300": 0.1, "850": 0.02}
    assert number["first_step_at_0.99"] == 800 and number["steps"] == 1000
    assert number["pure_positional_end"] is None                    # not analysed: null


def test_grid_stage_writes_cells_the_report_keeps(tiny_multihop_run, tmp_path):
    """`paper_c.py grid` measures every cell of a finished run into the results file
    (resumable), and the report keeps them there and prints the readings section."""
    run_dir, _, _ = tiny_multihop_run
    runs, docs = tmp_path / "runs", tmp_path / "docs"
    runs.mkdir()
    (runs / "number-tiny-s0").symlink_to(run_dir, target_is_directory=True)
    script = _script("paper_c")
    argv = ["grid", "--presets", "tiny", "--tasks", "number", "--seeds", "0", "--runs",
            str(runs), "--cache", str(tmp_path / "cache"), "--docs", str(docs),
            "--grid-prompts", "8", "--grid-lengths", "17", "30", "--mask-lengths", "30",
            "--readings", "target", "answer"]
    script.main(argv)
    results = docs / "paper_c_results.json"
    cells = json.loads(results.read_text())["length_cells"]
    assert {(c["reading"], c["length"], c["mode"]) for c in cells} == {
        (r, n, m) for r in ("target", "answer") for n, m in
        ((17, "as built"), (30, "as built"), (30, "mask"), (30, "positions"))}
    report = _script("paper_c_report")
    (docs / "paper_c_runs").mkdir()
    report.write_report(argparse.Namespace(docs=docs, cache=tmp_path / "cache",
                                           presets=["tiny"]))
    assert json.loads(results.read_text())["length_cells"] == cells
