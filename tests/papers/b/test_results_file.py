"""Paper B's records file (`docs/paper_b_results.json`): one JSON object holding the cells'
records and the `+levelled` verdicts with their margins (`{"verdicts": {grid: {"rules",
"claims"}}, "cells": [...]}`). Writing a cell keeps the verdicts, writing the verdicts keeps
the cells, a file of the old format (a JSON list of cells) is refused with the command that
converts it, and `verdicts --levelled` names the grid whose stored verdicts are stale.

The records are synthetic and tiny (a `paper-length+levelled` grid of 1 seed, the rules'
schemes on a 3 x 8 ablation grid), so nothing trains."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from lens_possym.cli import main
from lens_possym.errors import ResultsFileError
from lens_possym.papers.b import pipeline as pb
from lens_possym.papers.b.deposit import deposit_summary
from lens_possym.papers.b.margins import RULES_DATE, accuracy_se
from lens_possym.papers.b.levelled import window_gain
from lens_possym.papers.b.records import CellRecord
from lens_possym.papers.b.verdicts import late_gain

ROOT = Path(__file__).resolve().parents[3]
BASE, NAME, COPIES = "paper-length", "paper-length+levelled", "paper-length+levelled+copies"
N = 4096


def rec(preset, task, scheme, acc, drops=None, *, seed=0, variant="intended"):
    """A record with ``drops`` {(layer, head): drop} on a 3 x 8 grid (others 0); a
    ``+levelled`` one with its scoring size and standard error."""
    grid = [[acc] * 8 for _ in range(3)]
    for (layer, head), d in (drops or {}).items():
        grid[layer][head] = acc - d
    extra = ({"eval_size": N, "accuracy_se": accuracy_se(acc, N),
              "levelling": {"steps": 4800, "extensions": 0, "segment_ends": [],
                            "since": 3600, "gain_rule": 0.0, "gain_last_fifth": 0.0,
                            "gain_last_quarter": 0.0, "levelled": True, "capped": False}}
             if "levelled" in preset else {})
    return {"preset": preset, "task": task, "scheme": scheme, "variant": variant,
            "seed": seed, "accuracy": acc, "ablation_grid": grid,
            "ablation": deposit_summary(torch.tensor(grid), acc), "probe": None, **extra}


def grid(preset=NAME, seed=0):
    return [rec(preset, "distance", "nope", 0.05, seed=seed),
            rec(preset, "distance", "sinusoidal", 0.80, {(0, 1): 0.3}, seed=seed),
            rec(preset, "distance", "learned", 0.70, seed=seed),
            rec(preset, "distance", "t5", 0.30, seed=seed),
            rec(preset, "distance", "alibi", 0.20, seed=seed),
            rec(preset, "distance", "rope", 0.95, {(0, 3): 0.6}, seed=seed),
            rec(preset, "distance", "mla", 0.90, {(0, 1): 0.3}, seed=seed),
            rec(preset, "distance", "rope-k1", 0.93, seed=seed),
            rec(preset, "count", "nope", 0.80, seed=seed),
            rec(preset, "count", "mla", 0.95, seed=seed),
            rec(preset, "count", "rope", 0.70, {(1, 0): 0.4}, seed=seed)]


def test_writing_a_cell_keeps_the_verdicts_and_writing_verdicts_keeps_the_cells(tmp_path):
    path = tmp_path / "results.json"
    pb.write_records(path, grid()[:3])
    assert json.loads(path.read_text()) == {"verdicts": {}, "cells": json.loads(json.dumps(
        [CellRecord.from_dict(r).to_dict() for r in sorted(grid()[:3],
                                                          key=lambda r: r["scheme"])]))}
    verdicts = pb.levelled_verdicts(grid(), BASE, (0,))
    assert set(verdicts) == {NAME} and verdicts[NAME]["rules"] == RULES_DATE
    pb.write_verdicts(path, pb.levelled_grids(BASE), verdicts)
    cells = json.loads(path.read_text())["cells"]
    assert len(cells) == 3 and pb.read_verdicts(path) == verdicts
    pb.write_records(path, grid()[3:])                  # a queue lands more cells
    assert pb.read_verdicts(path) == verdicts and len(pb.read_records(path)) == len(grid())
    before = path.read_text()
    pb.write_records(path, [])                          # a no-op rewrite is byte for byte
    assert path.read_text() == before
    # the +copies grid's entry is replaced, the other grids' left alone
    pb.write_verdicts(path, (COPIES,), {COPIES: {"rules": "x", "claims": []}})
    assert set(pb.read_verdicts(path)) == {NAME, COPIES}
    pb.write_verdicts(path, pb.levelled_grids(BASE), {})    # no cell of either: removed
    assert pb.read_verdicts(path) == {} and len(pb.read_records(path)) == len(grid())


def test_the_old_list_format_is_refused_and_migrated_as_it_is(tmp_path, capsys):
    path = tmp_path / "results.json"
    old = json.dumps(grid(BASE), indent=1) + "\n"
    path.write_text(old)
    message = (f"{path} is in the old format (a JSON list of cells, no verdicts); run "
               f"`lens-possym paper-b migrate-records --records {path}` once")
    for read in (pb.read_records, pb.read_verdicts):
        with pytest.raises(ResultsFileError, match="old format") as error:
            read(path)
        assert str(error.value).startswith(message)
    with pytest.raises(ResultsFileError, match="old format"):
        pb.write_records(path, grid(BASE)[:1])
    assert main(["paper-b", "report", "--preset", BASE, "--records", str(path),
                 "--out", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1              # one line
    assert path.read_text() == old                              # nothing written
    assert main(["paper-b", "migrate-records", "--records", str(path)]) == 0
    data = json.loads(path.read_text())
    assert data == {"verdicts": {}, "cells": json.loads(old)}
    assert [list(c) for c in data["cells"]] == [list(c) for c in json.loads(old)]  # key order
    migrated = path.read_text()
    assert main(["paper-b", "migrate-records", "--records", str(path)]) == 0   # left alone
    assert path.read_text() == migrated and "already" in capsys.readouterr().out
    for bad, why in (({"cells": []}, "exactly the keys"), ([{"x": 1}], "not a cell's record"),
                     ("[1,", "not a JSON file")):
        path.write_text(bad if isinstance(bad, str) else json.dumps(bad))
        assert main(["paper-b", "migrate-records", "--records", str(path)]) == 1
        assert why in capsys.readouterr().err


def test_the_committed_file_is_in_the_new_format():
    """Its cells keep their last-quarter gain in their history: `late_gain` reads it, the
    same number as a `+levelled` record's `levelling["gain_last_quarter"]`."""
    data = json.loads((ROOT / "docs" / "paper_b_results.json").read_text())
    assert list(data) == ["verdicts", "cells"] and len(data["cells"]) >= 213
    assert set(data["verdicts"]) <= {NAME, COPIES}
    for cell in data["cells"]:
        assert late_gain(cell) == window_gain(cell["history"] or [], 0.25)
        if "levelling" in cell:
            assert late_gain(cell) == cell["levelling"]["gain_last_quarter"]


def test_verdicts_levelled_names_the_stale_grid(tmp_path, capsys):
    """`report --levelled` writes the verdicts into the records file; `verdicts --levelled`
    passes, then fails in one line naming the grid whose stored verdicts differ from what
    its cells give (tampered, missing, or of a grid that has no cell)."""
    path, page = tmp_path / "results.json", tmp_path / "paper_b.md"
    pb.write_records(path, grid(BASE)[:1] + grid(NAME))
    page.write_text("".join(f"{begin}\n{end}\n" for key in (NAME, f"{NAME} reading")
                            for begin, end in [pb.MARKERS[key]]))
    argv = ["--preset", BASE, "--levelled", "--out", str(tmp_path), "--records", str(path),
            "--seeds", "0"]
    assert main(["paper-b", "report", *argv]) == 0
    stored = pb.read_verdicts(path)
    assert stored == pb.levelled_verdicts(pb.read_records(path), BASE, (0,)) != {}
    capsys.readouterr()
    assert main(["paper-b", "verdicts", *argv]) == 0
    assert f"the {NAME} verdicts of {path} equal" in capsys.readouterr().out
    stale = f"the {NAME} verdicts in {path}"
    tampered = json.loads(json.dumps(stored))
    tampered[NAME]["claims"][0]["intended"]["verdict"] = "holds?"
    for verdicts, why in ((tampered, ""), ({}, " (missing)"),
                          (dict(stored, **{COPIES: stored[NAME]}), " (no cell of it)")):
        pb.write_verdicts(path, pb.levelled_grids(BASE), verdicts)
        assert main(["paper-b", "verdicts", *argv]) == 1
        err = capsys.readouterr().err
        name = COPIES if COPIES in verdicts else NAME
        assert f"the {name} verdicts in {path}{why}" in err and err.count("\n") == 1, err
        assert f"run `lens-possym paper-b report --preset {BASE} --levelled` again" in err
    pb.write_verdicts(path, pb.levelled_grids(BASE), stored)
    assert main(["paper-b", "verdicts", *argv]) == 0
    # a cell changed after the report: the page's blocks and the verdicts are both stale
    pb.write_records(path, [dict(grid(NAME)[5], accuracy=0.5)])
    assert main(["paper-b", "verdicts", *argv]) == 1
    assert stale in capsys.readouterr().err
