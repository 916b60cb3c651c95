"""The length test under every reading: cells (accuracy, per hop, standard error), the
shared cell store (resumable, other keys kept), readings that coincide, claims 13-15 per
reading (lenient and strict), the all-readings verdict, Fig 5B's readings, the table."""

from __future__ import annotations

import json
import math

import pytest

from lens_possym.errors import InvalidSelectionError
from lens_possym.papers.c import readings as R
from lens_possym.papers.c.tasks import FILLERS

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_grid_cells_are_stored_resumed_and_copied(tiny_multihop_run, tmp_path, monkeypatch):
    _, model, task = tiny_multihop_run
    path = tmp_path / "results.json"
    path.write_text(json.dumps({"runs": [1, 2]}))
    store = R.CellStore(path)
    kw = dict(run="number-tiny-s0", preset="tiny", seed=0, step=60, n_prompts=12,
              readings=("answer", "target", "reach"), lengths=(17, 40), mask_lengths=(40,))
    cells = R.run_grid(model, task, store, **kw)
    data = json.loads(path.read_text())
    assert data["runs"] == [1, 2] and len(data["length_cells"]) == len(cells) == 3 * 4
    for c in cells:
        assert c["n"] == 12 and 0 <= c["accuracy"] <= 1
        assert c["se"] == pytest.approx(math.sqrt(c["accuracy"] * (1 - c["accuracy"]) / 12))
        if c["mode"] == "as built":
            assert sum(c["by_hops_n"]) == 12 and len(c["by_hops"]) == task.max_hops
    by = {(c["reading"], c["length"], c["mode"]): c for c in cells}
    for n, mode in ((17, "as built"), (40, "as built"), (40, "mask"), (40, "positions")):
        ans = by[("answer", n, mode)]
        assert ans["same_as"] == "target" and ans["accuracy"] == by[("target", n, mode)]["accuracy"]
    assert by[("reach", 40, "as built")]["same_as"] == "reach"
    # resumable: nothing is recomputed
    monkeypatch.setattr(R, "length_cell", lambda *a, **k: pytest.fail("recomputed"))
    monkeypatch.setattr(R, "mask_cells", lambda *a, **k: pytest.fail("recomputed"))
    again = R.run_grid(model, task, store, **kw)
    assert sorted(map(R._key, again)) == sorted(map(R._key, cells))
    with pytest.raises(InvalidSelectionError, match="readings must be some of"):
        R.run_grid(model, task, store, **{**kw, "readings": ("letters",)})
    with pytest.raises(InvalidSelectionError, match="include 'target'"):
        R.run_grid(model, task, R.CellStore(tmp_path / "other.json"),
                   **{**kw, "readings": ("answer",)})


def _cells(values: dict) -> list[dict]:
    """Fake cells: ``values[(task, seed, reading)] = {length: accuracy}``."""
    return [{"run": f"{t}-paper-s{s}", "task": t, "preset": "paper", "seed": s,
             "reading": r, "same_as": r, "length": n, "mode": "as built", "n": 1000,
             "accuracy": a, "se": R.standard_error(a, 1000)}
            for (t, s, r), row in values.items() for n, a in row.items()]


def test_claims_per_reading_lenient_and_strict():
    lengths = [n for n in R.GRID_LENGTHS if n >= 50]
    paper_number = {n: R.FIG_5B["number"].get(n, 0.15) for n in lengths}
    values = {}
    for s in (0, 1, 2):
        values[("number", s, "target")] = {n: 0.1 for n in lengths}
        values[("letter", s, "target")] = {n: 0.6 for n in lengths}
        values[("number", s, "answer")] = dict(paper_number)
        values[("letter", s, "answer")] = {n: 0.99 if n <= 850 else 0.86 for n in lengths}
    rows = R.reading_claims(_cells(values), readings=("target", "answer"))
    got = {(r["claim"], r["rule"], r["reading"]): r["verdict"] for r in rows}
    assert got[("14", "lenient", "target")] == "does not hold"
    assert got[("14", "lenient", "answer")] == "holds"
    assert got[("14", "strict", "answer")] == "holds"
    assert got[("15", "lenient", "target")] == "holds"          # 0.1 <= 0.6
    assert got[("15", "strict", "target")] == "does not hold"   # far below Fig 5B
    assert got[("15", "strict", "answer")] == "holds"
    assert got[("13", "strict", "target")] == "holds"
    assert R.all_readings_verdict(rows, "14", "lenient") == "depends on the reading"
    assert R.all_readings_verdict(rows, "13", "lenient") == "holds"
    assert R.fig5b_readings(_cells(values), readings=("target", "answer")) == {
        "number": ["answer"], "letter": ["answer"]}
    # a missing cell makes the claim pending, never guessed
    for s in (1, 2):
        del values[("letter", s, "answer")][850], values[("letter", s, "answer")][1000]
    rows = R.reading_claims(_cells(values), readings=("target", "answer"))
    assert {r["verdict"] for r in rows if r["claim"] == "14" and r["reading"] == "answer"
            and r["rule"] == "lenient"} == {"pending"}
    assert R.all_readings_verdict(rows, "14", "lenient") == "pending"
    assert R.fig5b_readings(_cells(values), readings=("target", "answer"))["letter"] is None


def test_fig5b_distances_are_the_largest_signed_deviation_of_the_seed_mean():
    # seeds below the paper's value by 0.03, 0.06, 0.09 (mean -0.06), except one length
    # where seed 2 falls 0.45 below (mean -0.18): that length is the largest deviation
    values = {}
    for task, paper in R.FIG_5B.items():
        worst = sorted(paper)[1]
        for s, up in zip((0, 1, 2), (0.03, 0.06, 0.09)):
            values[(task, s, "target")] = {n: paper[n] - up for n in paper}
            values[(task, s, "answer")] = {n: paper[n] - 2 * up for n in paper}
        values[(task, 2, "target")][worst] = paper[worst] - 0.45
    cells = _cells(values)
    dist = R.fig5b_distances(cells, readings=("target", "answer"))
    for task, paper in R.FIG_5B.items():
        worst = sorted(paper)[1]
        deviation, at = dist[task]["target"]
        assert at == worst and deviation == pytest.approx(-(0.03 + 0.06 + 0.45) / 3)
        deviation, at = dist[task]["answer"]      # -0.12 everywhere: the first length
        assert at == min(paper) and deviation == pytest.approx(-0.12)
    # the readings named as reproducing Fig 5B are exactly those within the tolerance
    assert R.fig5b_readings(cells, readings=("target", "answer")) == {
        "number": [], "letter": []}
    table = "\n".join(R.fig5b_distance_table(dist))
    assert "| letter | -0.180 at 200 | -0.120 at 100 |" in table
    del values[("number", 1, "answer")][min(R.FIG_5B["number"])]
    dist = R.fig5b_distances(_cells(values), readings=("target", "answer"))
    assert dist["number"]["answer"] is None and dist["letter"]["answer"] is not None
    assert R.fig5b_readings(_cells(values), readings=("target", "answer"))["number"] is None


def test_grid_table_rows():
    values = {("letter", 0, "target"): {17: 1.0, 850: 0.5}, ("number", 0, "answer"): {17: 1.0}}
    cells = _cells(values)
    cells[-1]["same_as"] = "target"
    lines = R.grid_table(cells)
    assert lines[0].startswith("| run | reading | 17 | 50 |")
    assert "| letter-paper-s0 | target (headline) | 1.000 ± 0.000 |" in lines[2]
    assert "0.500 ± 0.016" in lines[2]
    assert "answer (= target)" in lines[3]
    assert lines[-1].startswith("| number (Fig 5B ≈) | |  | 0.83 | 0.75 |")
    assert set(FILLERS) >= {"target", "answer"}


def test_report_lines_name_every_verdict_and_fig5b():
    assert "_Pending" in "\n".join(R.report_lines([]))
    values = {(t, s, "target"): {n: (0.95 if t == "letter" else 0.1) for n in R.GRID_LENGTHS}
              for t in ("letter", "number") for s in (0, 1, 2)}
    text = "\n".join(R.report_lines(_cells(values)))
    assert "| letter-paper-s2 | target (headline) |" in text
    # the other readings are not measured: the all-readings verdict stays pending
    assert "| 14 Letter > 90 % up to 850 | strict | ✓✓✓ **holds** | **pending** |" in text
    assert "| 15 Number barely generalises (Fig 5B's values) | strict | ✗✗✗ **does not hold** |" \
        in text
    assert "reproduce Fig 5B" in text and "number: pending; letter: pending" in text
