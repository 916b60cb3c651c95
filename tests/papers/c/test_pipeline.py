"""Paper C's pipeline (``lens-possym paper-c``, lens_possym/papers/c/pipeline.py and its
neighbours) on the tiny preset: every step parses; train -> analyse -> report -> verdicts
end to end; the queue goes on past a failed run; the grid's cells stay in the results; the
one-setting-at-a-time ablation (each variant differs from its base in exactly its own
setting, and the diagnostics are tracked at every checkpoint it names); and the report
(verdicts from what exists; missing seeds pending; the results file)."""

from __future__ import annotations

import argparse
import functools
import json

import pytest

from lens_possym.cli import build_parser, main

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@functools.lru_cache(maxsize=1)
def _parser() -> argparse.ArgumentParser:
    return build_parser()


def _paper_c(argv: list[str]) -> argparse.Namespace:
    return _parser().parse_args(["paper-c", *argv])


def test_every_step_parses_with_every_attribute_it_reads():
    from lens_possym.papers.c import cli_pipeline

    for step in [*cli_pipeline.STEPS, "ablate-settings"]:
        args = _paper_c([step, "1"] if step == "queue" else [step])
        assert args.paper_c_command == step
        if step != "ablate-settings":
            for name in ("tasks", "preset", "seed", "runs", "cache", "docs", "presets", "seeds",
                         *cli_pipeline._DEFAULTS):
                assert hasattr(args, name), (step, name)
    args = _paper_c(["grid", "--presets", "paper", "--seeds", "2", "--tasks", "letter",
                     "--readings", "target", "repeat", "--grid-lengths", "17", "300",
                     "--mask-lengths", "--grid-prompts", "10"])
    assert (args.presets, args.seeds, args.tasks, args.readings, args.grid_lengths,
            args.mask_lengths, args.grid_prompts) == (["paper"], [2], ["letter"],
                                                      ["target", "repeat"], [17, 300], [], 10)
    assert _paper_c(["analyse", "--analyses", "frequency", "--partial"]).analyses == ["frequency"]
    assert _paper_c(["timing", "--force"]).force and not _paper_c(["timing"]).partial
    assert _paper_c(["queue", "0"]).number == 0


@pytest.mark.parametrize("argv, phrase", [
    (["queue", "2"], "invalid choice"),
    (["grid", "--readings", "nonsense"], "invalid choice"),
    (["train", "--preset", "huge"], "invalid choice"),
    (["grid", "--grid-prompts", "0"], "positive integer"),
    (["ablate-settings", "--variants", "wider"], "invalid choice"),
])
def test_a_bad_step_option_is_one_line_exit_2(argv, phrase, capsys):
    assert main(["paper-c", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert phrase in err and len(err.splitlines()) == 1


def test_the_help_constants_equal_the_modules():
    """cli_pipeline names them so that --help imports no torch."""
    from lens_possym.papers.c import cli_pipeline, presets, settings_ablation, stages, workspace
    from lens_possym.papers.c.tasks import FILLERS

    assert cli_pipeline.TASKS == workspace.TASKS
    assert set(cli_pipeline.PRESETS) == set(presets.MULTIHOP_PRESETS)
    assert cli_pipeline.FILLERS == tuple(FILLERS)
    assert cli_pipeline.ANALYSES == tuple(stages.ANALYSES)
    assert cli_pipeline.LM_LENGTHS == workspace.LM_LENGTHS
    assert cli_pipeline.MASK_LENGTHS == workspace.MASK_LENGTHS
    assert cli_pipeline.VARIANTS == settings_ablation.VARIANTS


def _runs_holding(tiny_multihop_run, runs):
    """``runs``/number-tiny-s0: a copy of the session's tiny Number run (60 steps)."""
    import shutil

    shutil.copytree(tiny_multihop_run[0], runs / "number-tiny-s0")
    return runs


def test_train_analyse_report_verdicts_end_to_end(tiny_multihop_run, tmp_path, monkeypatch,
                                                  capsys):
    """The tiny preset, Number only (the run trained, not its record): train resumes the
    finished run and writes its record; a second train skips it; analyse (frequency)
    caches its cell; report writes the page and the results; verdicts recomputes the table
    and finds it equal. The environment variables set the folders."""
    runs = _runs_holding(tiny_multihop_run, tmp_path / "runs")
    monkeypatch.setenv("PAPER_C_RUNS", str(runs))
    monkeypatch.setenv("PAPER_C_CACHE", str(tmp_path / "cache"))
    docs = tmp_path / "docs"
    common = ["--preset", "tiny", "--tasks", "number", "--docs", str(docs)]
    assert main(["paper-c", "train", *common]) == 0
    record = json.loads((docs / "paper_c_runs" / "number-tiny-s0.json").read_text())
    assert record["command"] == ("lens-possym paper-c train --preset tiny --seed 0 "
                                 "--tasks number")
    assert (record["task"], record["preset"], record["seed"], record["steps"]) == (
        "number", "tiny", 0, 60)
    assert main(["paper-c", "train", *common]) == 0                  # finished: skipped
    assert "finished, record in" in capsys.readouterr().out
    narrow = ["--presets", "tiny", "--seeds", "0", "--tasks", "number", "--docs", str(docs)]
    assert main(["paper-c", "analyse", *narrow, "--analyses", "frequency"]) == 0
    frequency = json.loads((tmp_path / "cache" / "tiny-s0" / "frequency_number.json")
                           .read_text())
    assert len(frequency["weighted"]) == record["model_config"]["n_layers"]
    assert main(["paper-c", "report", *narrow]) == 0
    page = (docs / "paper_c.md").read_text()
    assert page.startswith("# Paper C reproduced")
    assert "_Generated by `lens-possym paper-c report`" in page
    assert "| number-tiny-s0 | 60 |" in page and "| letter-tiny-s0 | pending |" in page
    assert "| number-tiny-s0 | " + " | ".join(f"{w:.1f}" for w in frequency["weighted"]) in page
    results = json.loads((docs / "paper_c_results.json").read_text())
    assert [(r["task"], r["preset"], r["seed"]) for r in results["runs"]] == [
        ("number", "tiny", 0)]
    capsys.readouterr()
    assert main(["paper-c", "verdicts", "--docs", str(docs)]) == 0
    assert "equal to the report's table" in capsys.readouterr().out


def test_kernels_retrains_a_committed_run_to_its_first_evaluation(tiny_multihop_run, tmp_path,
                                                                   monkeypatch, capsys):
    """`paper-c kernels`: the run retrained here to its record's first evaluation has the
    record's test accuracy and loss to the last digit; a record of another run (one digit
    of its loss changed) is reported, exit 1; a run without a record is named."""
    runs = _runs_holding(tiny_multihop_run, tmp_path / "runs")
    monkeypatch.setenv("PAPER_C_RUNS", str(runs))
    docs = tmp_path / "docs"
    common = ["--preset", "tiny", "--tasks", "number", "--docs", str(docs)]
    assert main(["paper-c", "train", *common]) == 0
    capsys.readouterr()
    assert main(["paper-c", "kernels", *common]) == 0
    line = capsys.readouterr().out.strip().splitlines()[-1]
    path = docs / "paper_c_runs" / "number-tiny-s0.json"
    record = json.loads(path.read_text())
    first = record["history"][0]
    assert line.startswith(f"[kernels] number-tiny-s0, step {first['step']}: test_accuracy "
                           f"record {first['test_accuracy']!r} here {first['test_accuracy']!r}")
    assert line.endswith(f"equal: this machine retrains the committed run up to step "
                         f"{first['step']}")
    second = record["history"][1]["step"]
    assert main(["paper-c", "kernels", *common, "--step", str(second)]) == 0
    assert f"step {second}: test_accuracy record" in capsys.readouterr().out
    assert main(["paper-c", "kernels", *common, "--step", str(second + 1)]) == 1
    assert f"no evaluation at step {second + 1}; pass one of its evaluation steps (" in \
        capsys.readouterr().err
    first["test_loss"] = first["test_loss"] * (1 + 1e-12)
    path.write_text(json.dumps(record))
    assert main(["paper-c", "kernels", *common]) == 1
    captured = capsys.readouterr()
    assert "different: this machine trains another run" in captured.out
    assert (f"number-tiny-s0 (step {first['step']}): a retrain here is not the committed "
            "run") in captured.err
    assert main(["paper-c", "kernels", "--preset", "tiny", "--tasks", "letter", "--docs",
                 str(docs)]) == 1
    assert "no record of letter-tiny-s0" in capsys.readouterr().err


def test_the_queue_goes_on_past_a_failed_run(tiny_multihop_run, tmp_path, monkeypatch, capsys):
    from lens_possym.papers.c import pipeline

    runs = _runs_holding(tiny_multihop_run, tmp_path / "runs")
    monkeypatch.setitem(pipeline.QUEUES, 0, [("nonsense", 0, "number"), ("tiny", 0, "number")])
    code = main(["paper-c", "queue", "0", "--runs", str(runs), "--cache",
                 str(tmp_path / "cache"), "--docs", str(tmp_path / "docs")])
    captured = capsys.readouterr()
    assert code == 1
    assert "== failed: nonsense seed 0 number" in captured.out
    assert "queue 0 done" in captured.out
    assert (tmp_path / "docs" / "paper_c_runs" / "number-tiny-s0.json").is_file()
    assert captured.err.strip().splitlines() == [
        "lens-possym: error: queue 0: nonsense seed 0 number failed (see above)"]


@pytest.mark.parametrize("base", ["cpu", "tiny"])
def test_each_variant_changes_one_setting(base):
    from lens_possym.papers.c import settings_ablation as ablate
    from lens_possym.papers.c.presets import preset

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
    from lens_possym.papers.c import settings_ablation as ablate
    from lens_possym.papers.c.report_sections import ablation_section

    argv = ["paper-c", "ablate-settings", "--base", "tiny", "--variants", "base", "dropout",
            "--track-every", "40", "--lengths", "17", "30", "--mask-lengths", "30",
            "--n-prompts", "16", "--gap-inputs", "8", "--out", str(tmp_path),
            "--preset-runs", str(tmp_path / "none"), "--record", str(tmp_path / "record.json")]
    rows = ablate.run(build_parser().parse_args(argv))
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
    assert (tmp_path / "record.json").read_text() == (tmp_path / "summary.json").read_text()
    command = summary["command"].split()
    assert command[:2] == ["lens-possym", "paper-c"]                   # the command parses
    again = build_parser().parse_args(command[1:])
    assert (again.base, again.variants, again.track_every, again.lengths) == (
        "tiny", ["base", "dropout"], 40, [17, 30])
    assert main(argv) == 0                                             # resumes from the cache
    assert json.loads((tmp_path / "summary.json").read_text())["rows"] == rows

    lines: list[str] = []                                              # the report's section
    ablation_section(lines.append, summary)
    table = [line for line in lines if line.startswith("| base") or line.startswith("| dropout")]
    assert len(table) == 4                                 # last-step row + trajectory row each
    assert f"| base | none (the `tiny` preset) | 60 | {rows[1]['lengths']['17']:.3f}" in table[0]
    assert table[1].startswith("| dropout | dropout 0.1 | 60 |")             # from the record
    assert any("the largest single change is **dropout**" in line for line in lines)


def test_base_variant_reads_the_presets_own_run_only_when_the_settings_match(tmp_path):
    from lens_possym.papers.c import settings_ablation as ablate
    from lens_possym.training.loop import train

    own = tmp_path / "preset_runs" / "letter-tiny-s0"
    model, task, config = ablate.settings("tiny", "base", "letter", 0, own)
    train(model, task, config)
    for name, expected in (("base", True), ("dropout", False)):
        m, t, c = ablate.settings("tiny", name, "letter", 0, tmp_path / "elsewhere")
        assert ablate.same_run(own, m, t, c) is expected, name
    m, t, c = ablate.settings("tiny", "base", "letter", 1, tmp_path / "elsewhere")
    assert not ablate.same_run(own, m, t, c)                           # another seed
    argv = ["paper-c", "ablate-settings", "--base", "tiny", "--variants", "base",
            "--track-every", "1000", "--lengths", "17", "--mask-lengths", "30",
            "--n-prompts", "8", "--gap-inputs", "4", "--out", str(tmp_path / "ablate"),
            "--preset-runs", str(tmp_path / "preset_runs")]
    rows = ablate.run(build_parser().parse_args(argv))
    assert not (tmp_path / "ablate" / "runs").exists()                 # nothing trained again
    assert [r["step"] for r in rows] == [config.steps]


def _record(task, preset, seed, reach: int | None):
    """A fabricated record of a run trained with what ``preset`` builds today."""
    from lens_possym.papers.c.identity import today_configs

    hist = [{"step": s, "test_accuracy": 0.995 if reach and s >= reach else 0.3}
            for s in range(100, 1001, 100)]
    return {"task": task, "preset": preset, "seed": seed, "steps": 1000,
            "test_accuracy": hist[-1]["test_accuracy"], "train_time_s": 60.0,
            "history": hist, **today_configs(task, preset, seed)}


def _stamp_all(cache, docs):
    """Stamp every fabricated cache file with the run of its record (identity.py)."""
    from lens_possym.papers.c.identity import read_records, stamp_files

    fingerprints = read_records(docs / "paper_c_runs").fingerprints
    for folder in cache.glob("*-s*"):
        preset, seed = folder.name.rsplit("-s", 1)
        entries = {}
        for path in folder.rglob("*.json"):
            rel = path.relative_to(folder).as_posix()
            name = f"{rel.split('_')[1].split('.')[0]}-{preset}-s{seed}"
            entries[rel] = (name, fingerprints[name])
        stamp_files(folder, entries)


def test_report_from_what_exists(tmp_path, capsys):
    """Two runs of seed 0 with lengths measured; nothing else: the rules that read lengths
    and histories decide seed 0, everything else is pending; seeds 1 and 2 are not run."""
    from lens_possym.papers.c.report import write_report

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
    _stamp_all(cache, docs)
    write_report(argparse.Namespace(docs=docs, cache=cache, presets=["paper"]))
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
    assert main(["paper-c", "verdicts", "--docs", str(docs)]) == 0
    table = json.loads((docs / "paper_c_results.json").read_text())["verdicts"]
    assert table["paper"]["lenient"]["3"] == "pending" and table["paper"]["lenient"]["14"] \
        == "pending"
    inputs = json.loads((docs / "paper_c_verdict_inputs.json").read_text())
    for s in ("1", "2"):                                # seeds 1, 2 as seed 0: verdicts move
        inputs["runs"]["paper"][s] = inputs["runs"]["paper"]["0"]
    (docs / "paper_c_verdict_inputs.json").write_text(json.dumps(inputs))
    capsys.readouterr()
    assert main(["paper-c", "verdicts", "--docs", str(docs)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "differs from the report" in err[0]
    results = json.loads((docs / "paper_c_results.json").read_text())["runs"]
    assert [(r["task"], r["seed"]) for r in results] == [("number", 0), ("letter", 0)]
    number = results[0]
    assert number["accuracy_by_length"] == {"50": 0.4, "100": 0.3, "300": 0.1, "850": 0.02}
    assert number["first_step_at_0.99"] == 800 and number["steps"] == 1000
    assert number["pure_positional_end"] is None                    # not analysed: null


def test_grid_stage_writes_cells_the_report_keeps(tiny_multihop_run, tmp_path):
    """`paper-c grid` measures every cell of a finished run into the results file
    (resumable), and the report keeps them there and prints the readings section."""
    from lens_possym.papers.c.report import write_report

    run_dir, _, _ = tiny_multihop_run
    runs, docs = tmp_path / "runs", tmp_path / "docs"
    runs.mkdir()
    (runs / "number-tiny-s0").symlink_to(run_dir, target_is_directory=True)
    argv = ["paper-c", "grid", "--presets", "tiny", "--tasks", "number", "--seeds", "0",
            "--runs", str(runs), "--cache", str(tmp_path / "cache"), "--docs", str(docs),
            "--grid-prompts", "8", "--grid-lengths", "17", "30", "--mask-lengths", "30",
            "--readings", "target", "answer"]
    assert main(argv) == 0
    results = docs / "paper_c_results.json"
    cells = json.loads(results.read_text())["length_cells"]
    assert {(c["reading"], c["length"], c["mode"]) for c in cells} == {
        (r, n, m) for r in ("target", "answer") for n, m in
        ((17, "as built"), (30, "as built"), (30, "mask"), (30, "positions"))}
    (docs / "paper_c_runs").mkdir()
    write_report(argparse.Namespace(docs=docs, cache=tmp_path / "cache", presets=["tiny"]))
    assert json.loads(results.read_text())["length_cells"] == cells
