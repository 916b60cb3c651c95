"""What `lens-possym paper-b report --preset paper-length --levelled` writes once the
`+levelled` records land, and `paper-b verdicts --levelled`, which recomputes every verdict
from the committed files and checks the page against them.

The `+levelled` grid lands a few cells a session, so the records here are **fabricated**
(the committed `+levelled` records are left out): each committed
`paper-length` and `paper-length+copies` record relabelled `paper-length+levelled` /
`paper-length+levelled+copies`, given the fields a levelled record has
(:func:`lens_possym.papers.b.levelled.levelled_record`): ``eval_size`` 4,096
(:data:`~lens_possym.papers.b.levelled.SCORING_SIZE`), the binomial ``accuracy_se`` on
4,096 sentences, an ``ablation_se`` per head (the unpaired error, since the committed
records keep no per-sentence outcomes) and ``levelling`` from
:func:`~lens_possym.papers.b.levelled.levelling_summary` of the record's own loop history
(no extension). Their numbers are the committed ones; only their sizes are not.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from lens_possym.cli import main
from lens_possym.papers.b import levelled as lv
from lens_possym.papers.b import margins as m
from lens_possym.papers.b.pipeline import (MARKERS, levelled_verdicts, read_verdicts,
                                         report_blocks, write_records)
from lens_possym.papers.b.records import CellRecord
from lens_possym.papers.b.report_levelled import levelled_reading_markdown

ROOT = Path(__file__).resolve().parents[3]
PAGE = ROOT / "docs" / "paper_b.md"
RECORDS = ROOT / "docs" / "paper_b_results.json"
BASE, NAME, COPIES = "paper-length", "paper-length+levelled", "paper-length+levelled+copies"


def _levelled(record: dict) -> dict:
    """A committed record as the levelled pipeline would write it (module docstring)."""
    n, p = lv.SCORING_SIZE, float(record["accuracy"])
    relabel = {BASE: NAME, f"{BASE}+copies": COPIES}
    out = dict(record, preset=relabel[record["preset"]], eval_size=n,
               accuracy_se=m.accuracy_se(p, n),
               ablation_se=[[math.sqrt((p * (1 - p) + q * (1 - q)) / n) for q in row]
                            for row in record["ablation_grid"]],
               levelling=lv.levelling_summary(record["history"], 0))
    return CellRecord.from_dict(out).to_dict()          # the record's own schema


@pytest.fixture(scope="module")
def committed() -> list[dict]:
    """The committed records less the `+levelled` ones that have landed: each of those is
    replaced by its fabricated twin, so that every test sees the whole grid."""
    return [r for r in json.loads(RECORDS.read_text())["cells"]
            if lv.SUFFIX not in r["preset"]]


@pytest.fixture()
def records(committed) -> list[dict]:
    """The committed records and the fabricated levelled ones (a fresh copy per test)."""
    return committed + [_levelled(r) for r in committed
                        if r["preset"] in (BASE, f"{BASE}+copies")]


def _cell(records, preset, task, variant, scheme, seed) -> dict:
    return next(r for r in records if (r["preset"], r["task"], r["variant"], r["scheme"],
                                       r["seed"]) == (preset, task, variant, scheme, seed))


def _reading(records) -> str:
    return " ".join(levelled_reading_markdown(records, BASE).split())      # unwrapped


def _blocks(records) -> dict[str, str]:
    return report_blocks(records, BASE, (0, 1, 2), levelled=True)


def _row(text: str, claim: str, after: str = "") -> str:
    text = text.split(after, 1)[1] if after else text
    return next(line for line in text.splitlines() if line.startswith(f"| {claim} |"))


def test_the_report_writes_tables_and_reading_and_verdicts_checks_them(tmp_path, records):
    """End to end through the CLI on copies of the page and records: both `+levelled` blocks
    replace their placeholders and the records file's verdicts hold every seed's margins;
    `verdicts --levelled` finds the page and the verdicts equal to what the cells give, and
    a tampered verdict or a record changed after the report makes it fail (exit 1)."""
    out = tmp_path / "docs"
    out.mkdir()
    page = PAGE.read_text()
    for key in (NAME, f"{NAME} reading"):                 # the page before any cell landed
        begin, end = MARKERS[key]
        head, rest = page.split(begin, 1)
        page = head + begin + "\nNot run yet.\n" + end + rest.split(end, 1)[1]
    (out / "paper_b.md").write_text(page)
    path = tmp_path / "records.json"
    records = [r for r in records if r["preset"].startswith(BASE)]     # what the report reads
    write_records(path, records)
    argv = ["--preset", BASE, "--levelled", "--out", str(out), "--records", str(path)]
    assert main(["paper-b", "report", *argv]) == 0
    page = (out / "paper_b.md").read_text()
    for key, text in _blocks(records).items():
        assert MARKERS[key][0] + "\n" + text + MARKERS[key][1] in page
    assert "Not run yet" not in page.split(MARKERS[NAME][0], 1)[1].split(
        MARKERS[f"{NAME} reading"][1], 1)[0]
    # the verdicts with every seed's margins, machine-readable, in the records file itself
    table = read_verdicts(path)
    assert table == levelled_verdicts(records, BASE, (0, 1, 2))
    assert set(table) == {NAME, COPIES} and table[NAME]["rules"] == m.RULES_DATE
    assert json.loads(path.read_text())["cells"] == json.loads(
        json.dumps(sorted(records, key=lambda r: tuple(map(str, (
            r["preset"], r["task"], r["variant"], r["scheme"], r["seed"]))))))
    two = next(c for c in table[COPIES]["claims"] if c["claim"] == "2")["faithful"]
    assert two["verdict"] == "undecided" and two["seeds"][0]["outcome"] == "?"
    (margin,) = two["seeds"][0]["margins"]
    assert margin["name"] == "rope-mla-1" and abs(margin["z"]) < 1
    assert margin["z"] == pytest.approx(margin["value"] / margin["se"])
    assert main(["paper-b", "verdicts", *argv]) == 0
    _cell(records, NAME, "count", "faithful", "mla", 1)["accuracy"] = 0.5
    write_records(path, records)                 # a cell changed after the report
    assert main(["paper-b", "verdicts", *argv]) == 1


def test_every_cell_shows_its_size_error_and_gain(records):
    """The budget check: per cell its scoring sentences (4,096), accuracy ± standard error,
    steps, gains over the last 20 % and quarter, levelled or not; the reading says the grid
    is complete and scored on the rule's size."""
    tables = _blocks(records)[NAME]
    row = next(line for line in tables.splitlines()
               if line.startswith(f"| {NAME} | count | faithful | nope | 0 |"))
    assert row == f"| {NAME} | count | faithful | nope | 0 | 4,096 | 92.0 ± 0.4 | 4,800 | 0 " \
                  "| +23.05 (3,600) | +23.0 | **no** |"
    assert "Scoring sentences per cell: 4,096 (156 cells); 156 of 156 cells scored on at " \
           "least the 4,096" in tables
    reading = _reading(records)
    assert f"114 of the 114 cells of `{NAME}` and 42 of the 42 of `{COPIES}` have records; " \
           "each is scored on 4,096 held-out sentences (the rule's 4,096 or more)" in reading
    _cell(records, NAME, "distance", "intended", "t5", 1)["eval_size"] = 512
    assert "1 below the rule's 4,096: distance intended t5 s1 (512)" in _reading(records)


def test_a_cell_not_levelled_off_is_listed_with_its_gain(records):
    for r in records:
        if r["preset"] in (NAME, COPIES):
            r["levelling"] = dict(r["levelling"], levelled=True, gain_rule=0.002, since=4800,
                                  gain_last_quarter=0.004, extensions=1, steps=7200)
    late = _cell(records, NAME, "distance", "faithful", "rope", 1)
    late["levelling"] = dict(late["levelling"], levelled=False, gain_rule=0.023, since=14_400,
                             gain_last_quarter=0.031, extensions=6, steps=19_200, capped=True)
    tables = _blocks(records)[NAME]
    assert "155 of 156 cells levelled off by the rule; 1 did not: distance faithful rope s1 " \
           "(+2.30)." in tables
    assert f"| {NAME} | distance | faithful | rope | 1 | 4,096 | 100.0 ± 0.0 | 19,200 | 6 | " \
           "+2.30 (14,400) | +3.1 | **no** |" in tables
    reading = _reading(records)
    assert "155 of the 156 levelled off by the rule" in reading
    assert "after 1 extension (7,200 steps)" in reading
    assert "1 did not, 1 of them at the 19,200-step cap; their gains by the rule: " \
           "distance faithful rope s1 (+2.30 points)" in reading


def test_a_verdict_within_one_standard_error_is_undecided(records):
    """Claim 2 faithful on `+copies`: RoPE is 1.0 point over MLA in seeds 0 and 1, exactly
    the rule's point (z = 0.0): undecided in the table and in the reading; RoPE 4 points
    over decides it."""
    blocks = _blocks(records)
    row = _row(blocks[NAME], "2", after="Claims 1-5 on that grid")
    assert "s0: ? rope 93.2, next mla 92.2; rope-mla-1 z=-0.0" in row
    assert row.count("**undecided** (1✗ 2?)") == 1
    reading = _reading(records)
    assert "claim 2 faithful on `+copies`, undecided: s0 (rope-mla-1 z=-0.0), s1 " \
           "(rope-mla-1 z=-0.0)" in reading
    for seed in (0, 1):
        _cell(records, COPIES, "distance", "faithful", "rope", seed)["accuracy"] += 0.04
    row = _row(_blocks(records)[NAME], "2", after="Claims 1-5 on that grid")
    assert "s0: ✓ rope 97.2" in row and "**holds** (2✓ 1✗)" in row
    assert "claim 2 faithful on `+copies`, undecided" not in _reading(records)


def test_a_seed_missing_a_cell_shows_a_dash(records):
    records.remove(_cell(records, NAME, "distance", "intended", "rope", 2))
    tables = _blocks(records)[NAME]
    assert "s2: – missing distance/rope" in _row(tables, "7")
    assert "| rope | 100.0 ± 0.0 / 100.0 ± 0.0 / · |" in tables
    reading = _reading(records)
    assert f"113 of the 114 cells of `{NAME}`" in reading
    assert 'a seed that lacks a cell a rule reads is "–"' in reading
    assert "Intended RoPE's largest single-head drop, seeds 0 / 1 / 2: 86.5 / 89.8 / – " \
           "points (head 0.2 / 0.0 / –" in reading


def test_a_record_change_moves_the_prose(records):
    """The reading's numbers are the records': one accuracy changed moves every sentence
    that reads it, and nothing else."""
    before = _reading(records)
    assert "distance intended NoPE in seeds 0, 1 and 2 (4.5-4.9 %)" in before
    assert "None of the 156 cells' accuracy moved by more than one standard error" in before
    cell = _cell(records, NAME, "distance", "intended", "nope", 0)
    cell["accuracy"] = 0.031
    cell["accuracy_se"] = m.accuracy_se(0.031, lv.SCORING_SIZE)
    after = _reading(records)
    assert "distance intended NoPE in seeds 0, 1 and 2 (3.1-4.9 %)" in after
    assert "1 of the 156 cells moved by more than one standard error; the most: distance " \
           "intended nope s0 4.7 → 3.1 % (z=-1.6)" in after
    unchanged = lambda text: text.split("* **Models that did not learn")[0]   # noqa: E731
    assert unchanged(before) == unchanged(after)


def test_a_grid_of_one_landed_cell_reads_in_the_singular(records):
    """The page while the grid lands: one cell is "1 cell", never "1 cells"."""
    one = [r for r in records if lv.SUFFIX not in r["preset"]] + [
        _cell(records, NAME, "distance", "intended", "nope", 0)]
    tables, reading = _blocks(one)[NAME], _reading(one)
    assert "1 of 1 cell levelled off by the rule; 0 did not. Scoring sentences per cell: " \
           "4,096 (1 cell); 1 of 1 cell scored on at least the 4,096" in tables
    assert "0 verdicts differ from the 2026-11-25 rules'" in tables
    assert f"(`{NAME}`: 1 cell; `{COPIES}`: 0 cells; seeds 0, 1, 2)" in reading
    assert "The cell's accuracy did not move by more than one standard error" in reading
    assert "1 cells" not in tables + reading


def test_the_deposit_reading_and_the_verdicts_against_the_record(records):
    reading = _reading(records)
    assert "met by 0 of the 57 distance models" in reading
    assert "Faithful RoPE's largest single-head drop, seeds 0 / 1 / 2: 60.9 / 62.5 / 60.5 " \
           "points (head 1.5 / 2.1 / 2.0, layer.head), the next 31.2 / 29.1 / 34.6 (the " \
           "2026-11-25 rule's top/second ratio: 1.95 / 2.15 / 1.75)" in reading
    assert "claim 9a intended: holds → not judged" in reading
    assert "claim 6 intended (does not hold; s2: 1.6 standard errors)" in reading
    assert f"Claim 5 is read on the `+copies` grid ({m.CLAIM5_NOTE}): intended **holds**" \
        in reading
    # one faithful RoPE head alone, in layer 0: the deposit as the paper words it
    cell = _cell(records, NAME, "distance", "faithful", "rope", 0)
    cell["ablation_grid"] = [[1.0] * 8 for _ in range(3)]
    cell["ablation_grid"][0][4] = 0.3
    assert "met by 1 of the 57 distance models: distance faithful rope s0" in _reading(records)


def test_seed_distance_reads_conjunctions_only():
    claims = {c.number: c for c in m.CLAIMS2}
    ok, low = m.Margin("a", 0.05, 0.01), m.Margin("b", 0.02, 0.01)
    bad, worse = m.Margin("c", -0.02, 0.01), m.Margin("d", -0.04, 0.01)
    assert m.seed_distance(claims["2"], True, [ok, low]) == pytest.approx(2.0)
    assert m.seed_distance(claims["6"], False, [ok, bad, worse]) == pytest.approx(4.0)
    assert m.seed_distance(claims["6"], None, [ok]) is None
    assert m.seed_distance(claims["9b"], True, [ok]) is None, "a negated rule"
    assert m.seed_distance(claims["7"], False, [ok]) is None, "decided by the layer"
    assert m.seed_distance(claims["2"], True, [m.Margin("e", 0.01, 0.0)]) is None
