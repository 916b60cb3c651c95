"""Which run a record, a cached analysis and a grid cell belong to (paper C,
lens_possym/papers/c/identity.py): a record of another recipe is listed and not read by
the report, ``verdicts``, ``analyse``/``grid`` and the runs table; a cache file or a cell
of another run (or unstamped) is refused with its name and the fix; ``paper-c stamp``
stamps what can be shown to belong, and is idempotent; the committed seed-0 cache and
cells carry their records' fingerprints. Fabricated records and files only (no training)."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import pytest

from lens_possym.cli import main
from lens_possym.errors import ResultsFileError
from lens_possym.papers.c import identity as I

REPO = Path(__file__).resolve().parents[3]
FORMER_KEYS = {"model_config": ("activation", "embedding_dropout"), "train_config": ("decay",)}


def _record(task, preset="paper", seed=0, *, former=False, reach=500, loss=1.0):
    """A record trained with what ``preset`` builds today (``former``: as the code wrote
    it before activation, embedding_dropout and decay existed)."""
    hist = [{"step": s, "test_accuracy": 0.995 if s >= reach else 0.3, "train_loss": loss,
             "test_loss": loss, "lr": 1e-4, "elapsed_s": float(s)}
            for s in range(100, 1001, 100)]
    configs = I.today_configs(task, preset, seed)
    if former:
        for section, keys in FORMER_KEYS.items():
            for k in keys:
                configs[section].pop(k)
    return {"task": task, "preset": preset, "seed": seed, "steps": 1000,
            "test_accuracy": hist[-1]["test_accuracy"], "train_time_s": 60.0,
            "history": hist, **configs}


def _write_records(docs, *records):
    folder = docs / "paper_c_runs"
    folder.mkdir(parents=True, exist_ok=True)
    for r in records:
        (folder / f"{r['task']}-{r['preset']}-s{r['seed']}.json").write_text(json.dumps(r))


def test_the_recipe_check_names_the_differing_fields():
    committed = REPO / "docs" / "paper_c_runs"
    new = json.loads((committed / "number-paper-s0.json").read_text())     # retrained
    # a record as the 2026-11-25 code wrote it: the keys added since are missing (built from
    # the retrained record, so the test does not depend on which records are committed)
    old = {**new, "model_config": {k: v for k, v in new["model_config"].items()
                                   if k not in ("activation", "embedding_dropout")},
           "train_config": {k: v for k, v in new["train_config"].items() if k != "decay"}}
    assert I.recipe_differences(old, "number", "paper", 0) == [
        'model_config.activation not recorded, i.e. the former default "gelu_new" '
        '(today "gelu")',
        'model_config.embedding_dropout not recorded, i.e. the former default null '
        '(today 0.0)',
        'train_config.decay not recorded, i.e. the former default "all" (today "matrices")']
    assert I.recipe_differences(new, "number", "paper", 0) == []
    assert I.recipe_differences(new, "number", "paper", 1) == [              # another seed
        "model_config.seed = 0 (today 1)", "task_config.seed = 0 (today 1)",
        "train_config.seed = 0 (today 1)"]
    moved = {**new, "train_config": {**new["train_config"], "out_dir": "/elsewhere",
                                     "device": "cuda", "eval_batch": 256}}
    assert I.recipe_differences(moved, "number", "paper", 0) == []          # not the recipe
    changed = {**new, "train_config": {**new["train_config"], "lr": 3e-4}}
    assert I.recipe_differences(changed, "number", "paper", 0) == [
        "train_config.lr = 0.0003 (today 0.0001)"]
    # the cpu preset never set these keys: its former defaults are today's
    cpu = json.loads((committed / "letter-cpu-s0.json").read_text())
    assert I.recipe_differences(cpu, "letter", "cpu", 0) == []


def test_the_fingerprint_reads_the_recipe_and_history_not_the_wall_times():
    r = _record("number")
    fp = I.fingerprint(r, "number", "paper", 0)
    assert len(fp) == 16 and int(fp, 16) >= 0
    slower = {**r, "train_time_s": 1e4, "threads": 4, "command": "x",
              "history": [{**h, "elapsed_s": 9.0, "train_accuracy": 0.1} for h in r["history"]]}
    assert I.fingerprint(slower, "number", "paper", 0) == fp               # metrics.json too
    other = _record("number", loss=1.0 + 1e-12)
    assert I.fingerprint(other, "number", "paper", 0) != fp
    assert I.fingerprint(r, "number", "paper", 1) != fp


def _stamped_cache(cache, docs, name="number-paper-s0"):
    """One stamped analysis file of ``name`` in ``cache``/paper-s0."""
    folder = cache / "paper-s0"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "length_number_50.json"
    path.write_text(json.dumps({"task": "number", "lengths": [50], "accuracy": [0.4],
                                "by_hops": [[0.4] * 4], "filler": "target"}))
    fp = I.read_records(docs / "paper_c_runs").fingerprints[name]
    I.stamp_files(folder, {"length_number_50.json": (name, fp)})
    return path, fp


def test_a_former_recipe_record_is_listed_and_not_read(tmp_path, capsys):
    from lens_possym.papers.c.report import write_report

    docs, cache = tmp_path / "docs", tmp_path / "cache"
    _write_records(docs, _record("number", reach=800), _record("letter"),
                   _record("number", seed=1, reach=800, former=True),
                   _record("letter", seed=1, former=True))
    # a cell of the former run would decide claims if it were read
    from lens_possym.papers.c.readings import CellStore
    CellStore(docs / "paper_c_results.json").put([{
        "run": "letter-paper-s1", "task": "letter", "preset": "paper", "seed": 1,
        "step": 1000, "reading": "target", "same_as": "target", "length": 850,
        "mode": "as built", "n": 10, "accuracy": 1.0, "se": 0.0}])
    write_report(argparse.Namespace(docs=docs, cache=cache, presets=["paper"]))
    out = capsys.readouterr().out
    page = (docs / "paper_c.md").read_text()
    line = ('number-paper-s1: trained with a former recipe (model_config.activation not '
            'recorded, i.e. the former default "gelu_new" (today "gelu"); '
            'model_config.embedding_dropout not recorded, i.e. the former default null '
            '(today 0.0); train_config.decay not recorded, i.e. the former default "all" '
            '(today "matrices")), retrain it')
    assert f"[report] {line}" in out and f"- {line}." in page
    assert "| number-paper-s1 | pending: trained with a former recipe, retrain it |" in page
    row3 = next(x for x in page.splitlines() if x.startswith("| 3 |"))
    assert "✓ T = 500 (Letter) vs 800 (Number) | … not run | … not run" in row3
    results = json.loads((docs / "paper_c_results.json").read_text())
    assert [(r["task"], r["seed"]) for r in results["runs"]] == [("number", 0), ("letter", 0)]
    assert results["former_recipe"][1] == line
    assert len(results["length_cells"]) == 1                  # kept in the file, not read
    assert "letter-paper-s1 | target" not in page
    inputs = json.loads((docs / "paper_c_verdict_inputs.json").read_text())
    assert set(inputs["records"]) == {"number-paper-s0", "letter-paper-s0"}
    assert main(["paper-c", "verdicts", "--docs", str(docs)]) == 0

    # a report that read seed 1 before its record turned out to be of a former recipe
    _write_records(docs, _record("number", seed=1, reach=800), _record("letter", seed=1))
    (docs / "paper_c_results.json").write_text(json.dumps({"length_cells": []}))
    write_report(argparse.Namespace(docs=docs, cache=cache, presets=["paper"]))
    assert main(["paper-c", "verdicts", "--docs", str(docs)]) == 0
    _write_records(docs, _record("number", seed=1, reach=800, former=True))
    capsys.readouterr()
    assert main(["paper-c", "verdicts", "--docs", str(docs)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "read number-paper-s1: trained with a former recipe " \
        "(model_config.activation" in err[0] and "train_config.decay" in err[0]
    # ... or another run of the same recipe (its history differs)
    _write_records(docs, _record("number", seed=1, reach=900))
    assert main(["paper-c", "verdicts", "--docs", str(docs)]) == 1
    assert "read another run of number-paper-s1" in capsys.readouterr().err


def test_analyse_and_grid_leave_a_former_recipe_run_out(tmp_path, capsys):
    from lens_possym.papers.c.workspace import finished_runs, final_model

    runs = tmp_path / "runs"
    for name, rec in (("number-paper-s0", _record("number")),
                      ("number-paper-s1", _record("number", seed=1, former=True))):
        (runs / name).mkdir(parents=True)
        (runs / name / "model.pt").write_bytes(b"")
        (runs / name / "metrics.json").write_text(json.dumps(rec))
    args = argparse.Namespace(runs=runs, tasks=["number"], presets=["paper"], seeds=[0, 1],
                              preset="paper", seed=1, cache=tmp_path / "cache")
    assert finished_runs(args) == [("number", "paper", 0)]
    assert ("[runs] number-paper-s1: trained with a former recipe (model_config.activation"
            in capsys.readouterr().out)
    with pytest.raises(Exception, match="former recipe.*retrain it"):
        final_model("number", args)


def test_a_cache_file_of_another_run_is_refused_with_its_name(tmp_path):
    from lens_possym.papers.c.report_data import load_run

    docs, cache = tmp_path / "docs", tmp_path / "cache"
    _write_records(docs, _record("number"))
    path, fp = _stamped_cache(cache, docs)
    assert load_run(cache, "number", "paper", 0, fingerprint=fp)["lengths"]["target"][50]
    with pytest.raises(ResultsFileError) as e:
        load_run(cache, "number", "paper", 0, fingerprint="0" * 16)
    assert str(path) in str(e.value) and "another run of number-paper-s0" in str(e.value)
    assert "paper-c analyse --presets paper --seeds 0 --tasks number" in str(e.value)
    path.write_text(path.read_text() + " ")                        # changed after stamping
    with pytest.raises(ResultsFileError, match="changed since it was stamped.*paper-c stamp"):
        load_run(cache, "number", "paper", 0, fingerprint=fp)
    (cache / "paper-s0" / "roles_number.json").write_text("{}")   # never stamped
    path.write_text(path.read_text()[:-1])
    with pytest.raises(ResultsFileError, match="roles_number.json is not stamped"):
        load_run(cache, "number", "paper", 0, fingerprint=fp)


def test_the_stages_stamp_what_they_write_and_refuse_another_runs_file(tmp_path):
    from lens_possym.papers.c.workspace import run_cached

    runs, cache = tmp_path / "runs", tmp_path / "cache"
    (runs / "number-paper-s0").mkdir(parents=True)
    rec = _record("number")
    (runs / "number-paper-s0" / "metrics.json").write_text(json.dumps(rec))
    args = argparse.Namespace(runs=runs, cache=cache, preset="paper", seed=0)
    assert run_cached(args, "gaps_number", lambda: {"step": 1000}, task="number") == \
        {"step": 1000}
    fp = I.fingerprint(rec, "number", "paper", 0)
    assert I.read_stamps(cache / "paper-s0")["gaps_number.json"]["fingerprint"] == fp
    assert run_cached(args, "gaps_number", lambda: 1 / 0, task="number") == {"step": 1000}
    retrained = _record("number", loss=2.0)                        # another run, same name
    (runs / "number-paper-s0" / "metrics.json").write_text(json.dumps(retrained))
    with pytest.raises(ResultsFileError, match="gaps_number.json was computed from another"):
        run_cached(args, "gaps_number", lambda: 1 / 0, task="number")
    # a dynamics file proves its run by content: stamped on read when it matches
    chunk = {"steps": [100, 200], "accuracy": [0.3, 0.3]}
    (cache / "paper-s0" / "dynamics").mkdir()
    (cache / "paper-s0" / "dynamics" / "number_100-200.json").write_text(json.dumps(chunk))
    verify = lambda d: I.dynamics_matches(d, retrained)               # noqa: E731
    assert run_cached(args, "dynamics/number_100-200", lambda: 1 / 0, task="number",
                      verify=verify) == chunk
    assert "dynamics/number_100-200.json" in I.read_stamps(cache / "paper-s0")


def test_a_cell_of_another_run_is_refused_with_its_name(tmp_path):
    from lens_possym.papers.c.readings import CellStore, run_grid
    from lens_possym.papers.c.tasks import NumberTask

    cell = {"run": "number-paper-s0", "task": "number", "preset": "paper", "seed": 0,
            "step": 1000, "reading": "target", "same_as": "target", "length": 50,
            "mode": "as built", "n": 10, "accuracy": 0.5, "se": 0.1}
    assert I.cells_of_runs([cell], {}) == []                            # run not current
    with pytest.raises(ResultsFileError, match="grid cell number-paper-s0 target 50 as "
                       "built n=10 in x.json has no run fingerprint.*paper-c stamp"):
        I.cells_of_runs([cell], {"number-paper-s0": "a" * 16}, source="x.json")
    other = {**cell, "run_fingerprint": "b" * 16}
    with pytest.raises(ResultsFileError, match="number-paper-s0 target 50 as built n=10 .*"
                       "measured on another run of number-paper-s0 .*paper-c grid"):
        I.cells_of_runs([other], {"number-paper-s0": "a" * 16})
    assert I.cells_of_runs([other], {"number-paper-s0": "b" * 16}) == [other]
    store = CellStore(tmp_path / "results.json")
    store.put([other])
    with pytest.raises(ResultsFileError, match="measured on another run"):
        run_grid(None, NumberTask(), store, run="number-paper-s0", preset="paper", seed=0,
                 fingerprint="a" * 16, lengths=(50,), mask_lengths=(), n_prompts=10)


def _older_code_wrote(tmp_path):
    """A retrained run (current record, run folder) and a former-recipe one, with files and
    cells as code older than the stamps wrote them (none stamped)."""
    docs, cache, runs = tmp_path / "docs", tmp_path / "cache", tmp_path / "runs"
    new, old = _record("number"), _record("number", seed=1, former=True)
    _write_records(docs, new, old)
    folder = runs / "number-paper-s0"
    folder.mkdir(parents=True)
    (folder / "metrics.json").write_text(json.dumps(new))
    (folder / "model.pt").write_bytes(b"")
    finished = (folder / "model.pt").stat().st_mtime
    s0, s1 = cache / "paper-s0", cache / "paper-s1"
    (s0 / "dynamics").mkdir(parents=True)
    s1.mkdir()
    files = {s0 / "dynamics" / "number_100-200.json": ({"steps": [100, 200],
                                                        "accuracy": [0.3, 0.3]}, -100),
             s0 / "roles_number.json": ({"step": 1000}, 10),             # after model.pt
             s0 / "gaps_number.json": ({"step": 1000}, -10),             # before: another's
             s1 / "roles_number.json": ({"step": 1000}, 10)}             # a former run's
    for path, (data, dt) in files.items():
        path.write_text(json.dumps(data))
        os.utime(path, (finished + dt, finished + dt))
    cells = [{"run": "number-paper-s0", "task": "number", "preset": "paper", "seed": 0,
              "step": step, "reading": "target", "same_as": "target", "length": length,
              "mode": "as built", "n": 10, "accuracy": 0.5, "se": 0.1}
             for step, length in ((1000, 50), (900, 100))]
    (docs / "paper_c_results.json").write_text(json.dumps({"length_cells": cells,
                                                            "other": 1}))
    return docs, cache, runs


def test_the_stamp_command_stamps_what_belongs_and_is_idempotent(tmp_path, capsys):
    docs, cache, runs = _older_code_wrote(tmp_path)
    argv = ["paper-c", "stamp", "--cache", str(cache), "--runs", str(runs), "--docs", str(docs)]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "[stamp] files: 2 stamped, 0 already, 2 not stamped; cells: 1 stamped, " \
        "0 already, 1 not stamped" in out
    assert "gaps_number.json: not stamped: written before the run finished" in out
    assert "paper-s1/roles_number.json: not stamped: number-paper-s1: trained with a " \
        "former recipe" in out
    assert "cell number-paper-s0 target 100 as built n=10: not stamped: its step 900" in out
    fp = I.read_records(docs / "paper_c_runs").fingerprints["number-paper-s0"]
    stamps = I.read_stamps(cache / "paper-s0")
    assert {k: v["fingerprint"] for k, v in stamps.items()} == {
        "dynamics/number_100-200.json": fp, "roles_number.json": fp}
    results = json.loads((docs / "paper_c_results.json").read_text())
    assert [c.get("run_fingerprint") for c in results["length_cells"]] == [fp, None]
    assert results["other"] == 1
    before = {p: p.read_bytes() for p in (cache / "paper-s0" / "stamps.json",
                                          docs / "paper_c_results.json")}
    assert main(argv) == 0                                          # idempotent
    assert "[stamp] files: 0 stamped, 2 already, 2 not stamped; cells: 0 stamped, " \
        "1 already, 1 not stamped" in capsys.readouterr().out
    assert {p: p.read_bytes() for p in before} == before
    # without the run folder, only what proves itself by content is stamped
    docs2, cache2, _ = _older_code_wrote(tmp_path / "again")
    assert main(["paper-c", "stamp", "--cache", str(cache2), "--runs",
                 str(tmp_path / "nowhere"), "--docs", str(docs2)]) == 0
    assert set(I.read_stamps(cache2 / "paper-s0")) == {"dynamics/number_100-200.json"}


def test_the_committed_seed0_cache_and_cells_belong_to_their_records():
    """docs/paper_c_cache/{preset}-s{seed}/ and the cells of docs/paper_c_results.json:
    every file and cell of a run with a current record is stamped with its fingerprint."""
    found = I.read_records(REPO / "docs" / "paper_c_runs")
    cache = REPO / "docs" / "paper_c_cache"
    checked = 0
    for folder in sorted(p for p in cache.glob("*-s*") if p.is_dir()):
        stamps = I.read_stamps(folder)
        for path in sorted(folder.rglob("*.json")):
            rel = path.relative_to(folder).as_posix()
            if rel == I.STAMPS:
                continue
            assert rel in stamps, (f"{folder / rel} is not stamped: run 'lens-possym paper-c "
                                   "stamp --cache CACHE --runs RUNS' where the stages wrote it "
                                   "and copy its stamps.json here")
            name = stamps[rel]["run"]
            assert name in found.fingerprints, f"{folder / rel}: {name} has no current record"
            I.check_cached(folder, rel, name, found.fingerprints[name], fix="analyse",
                           stamps=stamps)
            checked += 1
    assert checked >= 30
    cells = json.loads((REPO / "docs" / "paper_c_results.json").read_text())["length_cells"]
    assert len(I.cells_of_runs(cells, found.fingerprints)) == \
        sum(c["run"] in found.fingerprints for c in cells)


def test_the_kernels_note_names_what_is_missing(monkeypatch):
    from lens_possym.papers.c.identity import REFERENCE_KERNELS, kernels_note

    for name, value in REFERENCE_KERNELS.items():
        monkeypatch.setenv(name, value)
    assert kernels_note() is None
    monkeypatch.delenv("MKL_CBWR")
    monkeypatch.setenv("ATEN_CPU_CAPABILITY", "avx512")
    note = kernels_note()
    assert note is not None and note.endswith("start the command with MKL_CBWR=AVX2 "
                                              "ATEN_CPU_CAPABILITY=avx2")


def test_each_preset_has_the_kernels_its_committed_runs_were_trained_with(monkeypatch):
    """`paper`: AVX2; `cpu`: AVX-512 (no environment satisfies both: the note of the other
    one prints); a preset with no committed runs has no note."""
    from lens_possym.papers.c.identity import PRESET_KERNELS, kernels_note
    from lens_possym.training.kernels import AVX2_KERNELS, AVX512_KERNELS

    assert PRESET_KERNELS == {"paper": AVX2_KERNELS, "cpu": AVX512_KERNELS}
    for name in ("MKL_CBWR", "ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA"):
        monkeypatch.delenv(name, raising=False)
    for name, value in AVX512_KERNELS.items():
        monkeypatch.setenv(name, value)
    assert kernels_note("cpu") is None and kernels_note("tiny") is None
    note = kernels_note("paper")
    assert note.startswith("not the reference CPU kernels") and "a paper run trained here" \
        in note and note.endswith("MKL_CBWR=AVX2 ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2")
