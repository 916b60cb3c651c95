"""The whole of docs/paper_b.md that `lens-possym paper-b report --preset paper-length`
and `--preset cpu` write regenerates byte-identical from the committed records; the prose
blocks follow the records, the `cpu` head profiles come from the cells' analysis.json, and
the `+levelled` block will be written from the levelled records once they land."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from lens_possym.cli import main
from lens_possym.papers.b.pipeline import MARKERS
from lens_possym.papers.b.report_cpu import PROFILES
from lens_possym.papers.b.report_prose import prose_blocks

ROOT = Path(__file__).resolve().parents[3]
PAGE = ROOT / "docs" / "paper_b.md"
RECORDS = ROOT / "docs" / "paper_b_results.json"
PRESET = "paper-length"


@pytest.fixture(scope="module")
def records():
    return json.loads(RECORDS.read_text())["cells"]


def _report(tmp_path: Path, records: list[dict] | None = None, *extra: str) -> str:
    """`lens-possym paper-b report --preset paper-length` on temporary copies of the page
    and the records; the page it leaves."""
    out = tmp_path / "docs"
    out.mkdir(exist_ok=True)
    shutil.copy(PAGE, out / "paper_b.md")
    if records is None:
        shutil.copy(RECORDS, tmp_path / "records.json")
    else:
        (tmp_path / "records.json").write_text(json.dumps({"verdicts": {}, "cells": records}))
    assert main(["paper-b", "report", "--preset", PRESET, "--out", str(out),
                 "--records", str(tmp_path / "records.json"), *extra]) == 0
    return (out / "paper_b.md").read_text()


def _block(page: str, key: str) -> str:
    begin, end = MARKERS[key]
    return page.split(begin + "\n", 1)[1].split(end, 1)[0]


def _cpu_report(tmp_path: Path, runs: Path) -> str:
    """`lens-possym paper-b report --preset cpu --no-figures` on the temporary page and
    records of :func:`_report`, head profiles read under ``runs``; the page it leaves."""
    out = tmp_path / "docs"
    assert main(["paper-b", "report", "--preset", "cpu", "--out", str(out), "--records",
                 str(tmp_path / "records.json"), "--root", str(runs), "--no-figures"]) == 0
    return (out / "paper_b.md").read_text()


def test_the_report_commands_regenerate_the_page_byte_identical(tmp_path):
    """Every block `report --preset paper-length` writes (the tables, the reread, the reading,
    claim 5's grid, the cost, the +levelled plan, the cpu verdicts, wall time and quirks) and
    the measured tables `report --preset cpu` writes from the cpu records (no run folder:
    the head profiles stay as they are) are what the committed page holds."""
    records = RECORDS.read_bytes()
    _report(tmp_path)
    assert _cpu_report(tmp_path, tmp_path / "runs") == PAGE.read_text()
    assert (tmp_path / "records.json").read_bytes() == records   # no report writes a record
    changed = json.loads(records)                    # the cpu block is written from them
    cell = next(r for r in changed["cells"] if r["preset"] == "cpu" and r["scheme"] == "alibi"
                and (r["task"], r["variant"], r["seed"]) == ("distance", "intended", 0))
    cell["accuracy"] = 0.5
    (tmp_path / "records.json").write_text(json.dumps(changed))
    assert "| distance | intended | alibi | 50.0 |" in _cpu_report(tmp_path, tmp_path / "runs")


def test_the_cpu_head_profiles_come_from_the_analyses(tmp_path):
    """With a run folder whose cell holds a profile, the profile block is that cell's means
    per layer; the measured tables still come from the records."""
    shutil.copy(RECORDS, tmp_path / "records.json")
    (tmp_path / "docs").mkdir()
    shutil.copy(PAGE, tmp_path / "docs" / "paper_b.md")
    cell = tmp_path / "runs" / "cpu" / "distance" / "intended" / "rope" / "seed0"
    cell.mkdir(parents=True)
    profile = {"pos": [[0.25, 0.75], [0.5, 0.5]], "sym": [[1.0, 0.0], [0.125, 0.125]],
               "site": "layer"}
    (cell / "analysis.json").write_text(json.dumps(
        {"cell": {"task": "distance", "label": "rope", "variant": "intended", "seed": 0},
         "baseline": 0.0, "profile": profile}))
    page = _cpu_report(tmp_path, tmp_path / "runs")
    block = page.split(PROFILES[0] + "\n", 1)[1].split(PROFILES[1], 1)[0]
    rows = [line for line in block.split("\n") if line.startswith("| distance")]
    assert rows == ["| distance | intended | rope | layer | L0 0.50/0.50; L1 0.50/0.12 |"]
    committed = PAGE.read_text()
    assert page.replace(block, "") == committed.replace(
        committed.split(PROFILES[0] + "\n", 1)[1].split(PROFILES[1], 1)[0], "")


def test_the_prose_blocks_follow_the_records(records):
    """A changed record changes the number the prose prints from it: a wall-time table
    cell (cpu), the grid's time (paper-length), the copies grid's size."""
    before = prose_blocks(records, PRESET)
    changed = [dict(r) for r in records]
    cpu = next(r for r in changed if r["preset"] == "cpu" and r["task"] == "distance"
               and r["variant"] == "intended" and r["scheme"] == "nope" and r["seed"] == 0)
    cpu["train_time_s"] = 4321.0
    main_cell = next(r for r in changed if r["preset"] == PRESET)
    main_cell["train_time_s"] += 36_000.0                      # ten hours more
    after = prose_blocks(changed, PRESET)
    assert "| nope | 43 |" in before["cpu wall time"]
    assert "| nope | 4321 |" in after["cpu wall time"]
    hours = lambda text: float(re.search(r"([\d.]+)\s+hours\s+for\s+the\s+grid", text).group(1))
    assert hours(after[f"{PRESET} cost"]) == pytest.approx(hours(before[f"{PRESET} cost"]) + 10,
                                                           abs=0.051)
    assert "(`paper-length+copies`, 42 cells;" in before[f"{PRESET} copies"]


def test_the_levelled_block_is_written_from_levelled_records(tmp_path, records):
    """The committed placeholder holds no number; once `+levelled` records exist (here: the
    committed records relabelled, a synthetic stand-in), `report --levelled` replaces it by
    their verdicts, and a changed levelled record changes the block."""
    begin, end = MARKERS[f"{PRESET}+levelled"]
    placeholder = PAGE.read_text().split(begin, 1)[1].split(end, 1)[0]
    assert not re.search(r"\\d", placeholder.replace("+levelled", "")), placeholder
    relabel = {PRESET: f"{PRESET}+levelled", f"{PRESET}+copies": f"{PRESET}+levelled+copies"}
    levelled = [dict(r, preset=relabel[r["preset"]]) for r in records if r["preset"] in relabel]
    page = _report(tmp_path, records + levelled, "--levelled")
    block = _block(page, f"{PRESET}+levelled")
    assert "Not run yet" not in block and f"preset `{PRESET}+levelled`" in block
    cell = next(r for r in levelled if r["preset"] == f"{PRESET}+levelled"
                and (r["task"], r["variant"], r["scheme"], r["seed"])
                == ("distance", "intended", "nope", 0))
    assert " 4.7 " in block or "4.7 ±" in block
    cell["accuracy"] = 0.031
    again = _block(_report(tmp_path, records + levelled, "--levelled"), f"{PRESET}+levelled")
    assert again != block and "3.1" in again


def test_a_block_whose_records_are_missing_says_so(records):
    """Without the `cpu` cells the wall-time block says what it lacks, with no number."""
    blocks = prose_blocks([r for r in records if r["preset"] != "cpu"], PRESET)
    text = blocks["cpu wall time"].split("\n", 2)[2]
    assert text.startswith("Not written yet") and "`cpu` cells" in text
    assert "Not written yet" not in blocks[f"{PRESET} cost"]


#: digits that are names, not measurements: claims, issues, seeds, dates and times, file
#: and hash names, layer names, T5, the H200, CPU instruction sets
_NAMES = re.compile(r"\bclaims? \d+[ab]?(?:(?:, | and |-|/)\d+[ab]?)*|\bissues? \d+|"
                    r"\bseeds? \d(?:(?:,\s+|\s+and\s+)\d)*|\d{4}-\d\d-\d\d|\d\d:\d\d UTC|"
                    r"sha256|float64|layer-0|\bL\d\b|\bT5\b|\bH200\b|\bAVX-?(?:2|512)\b|"
                    r"\bDefinition \d", re.IGNORECASE)


def _prose_sections(page: str) -> dict[str, str]:
    """The page's hand-written prose by section heading: generated blocks (between BEGIN /
    END markers), fenced code and inline code left out."""
    page = re.sub(r"<!-- BEGIN ([^>]*) -->.*?<!-- END \1 -->", "", page, flags=re.S)
    page = re.sub(r"<!-- BEGIN MEASURED TABLES -->.*?<!-- END MEASURED TABLES -->", "", page,
                  flags=re.S)
    page = re.sub(r"```.*?```", "", page, flags=re.S)
    sections, heading = {}, ""
    for line in page.split("\n"):
        if line.startswith("#"):
            heading = line
            sections.setdefault(heading, "")
        else:
            sections[heading] = sections.get(heading, "") + re.sub(r"`[^`]*`", "", line) + "\n"
    return sections


def test_no_section_of_the_page_holds_a_hand_typed_number():
    """Outside the generated blocks (and code), docs/paper_b.md holds no digit but names
    (claims, issues, seeds, dates, T5, the H200): every number in its prose is written by
    `lens-possym paper-b report --preset paper-length` from the records and the code."""
    sections = _prose_sections(PAGE.read_text())
    typed = {h: re.findall(r"[^\n]*\d[^\n]*", _NAMES.sub("", text))
             for h, text in sections.items() if re.search(r"\d", _NAMES.sub("", text))}
    assert typed == {}, f"numbers typed by hand: {typed}"
