"""Paper B's report regenerates from the committed records, prose included: no number in
"Reading the verdicts" is typed by hand."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest

from lens_possym.papers.b.pipeline import COMMAND, MARKERS
from lens_possym.papers.b.report import verdict_markdown
from lens_possym.papers.b.report_margins import margins_markdown
from lens_possym.papers.b.report_reading import reading_markdown

ROOT = Path(__file__).resolve().parents[3]
PAGE = ROOT / "docs" / "paper_b.md"
PRESET = "paper-length"


@pytest.fixture(scope="module")
def records():
    return json.loads((ROOT / "docs" / "paper_b_results.json").read_text())["cells"]


def _block(name: str) -> str:
    begin, end = MARKERS[name]
    return PAGE.read_text().split(begin + "\n", 1)[1].split(end, 1)[0]


def test_the_committed_paper_length_blocks_regenerate_byte_identical(records):
    """What `lens-possym paper-b report --preset paper-length` writes from the committed
    JSON is what docs/paper_b.md holds: the tables, the 2026-11-29 reread and the prose."""
    command = f"{COMMAND} {PRESET}"
    assert _block(PRESET) == verdict_markdown(records, PRESET, command=command)
    assert _block(f"{PRESET} reread") == margins_markdown(records, PRESET, command=command)
    assert _block(f"{PRESET} reading") == reading_markdown(records, PRESET, command=command)


def _literals(tree: ast.AST) -> list[str]:
    """The string pieces a module writes: constants and the literal parts of f-strings,
    without docstrings and format specs (``:.1f``)."""
    docs = {id(node.body[0].value) for node in ast.walk(tree)
            if isinstance(node, (ast.Module, ast.FunctionDef, ast.ClassDef)) and node.body
            and isinstance(node.body[0], ast.Expr)
            and isinstance(node.body[0].value, ast.Constant)}
    specs = {id(part) for node in ast.walk(tree) if isinstance(node, ast.FormattedValue)
             and node.format_spec is not None for part in ast.walk(node.format_spec)}
    return [node.value for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str)
            and id(node) not in docs and id(node) not in specs]


def _typed(module: str) -> list[str]:
    """``module``'s string literals that hold a digit outside claim names ("claim 5",
    "claims 1-4", "11a/b"), scheme labels and record keys ("t5", "rope-k1",
    "heads_over_10"), "layer-0" and "float64"."""
    tree = ast.parse((ROOT / "lens_possym" / "papers" / "b" / module).read_text())
    names = re.compile(r"\bclaims?[ -]\d+[ab]?(?:(?:, | and |-|/)\d*[ab]?)*|\b11a/b\b|"
                       r"\bnor 11\b|\blayer-0\b|\bfloat64\b", re.IGNORECASE)
    label = re.compile(r"[A-Za-z][A-Za-z0-9_-]*|[0-9]+[ab]?")    # "rope-k1", "T5", a claim key
    return [text for text in _literals(tree)
            if not label.fullmatch(text) and re.search(r"\d", names.sub("", text))]


#: the writers of the page's other generated blocks whose literals still type numbers: the
#: paper's own figures (verdicts.CLAIMS' "paper" column, quoted from paper B's results), the
#: rules' thresholds as the dated rules word them ("+ 1 point", "within 5 points", "99 %")
#: and the rules' dates; a new typed number changes the count and fails
#: test_the_table_writers_type_no_new_number
KNOWN_TYPED = {"verdicts.py": 20, "margins.py": 14, "report_margins.py": 5}


def test_the_table_writers_type_no_new_number():
    assert {m: len(_typed(m)) for m in KNOWN_TYPED} == KNOWN_TYPED


@pytest.mark.parametrize("module", ["report_reading.py", "report_prose.py", "report.py",
                                    "report_levelled.py"])
def test_the_prose_writer_types_no_number(module):
    """The writers of the page's prose and tables (the reading; report_prose: claim 5's
    grid, the cost, the +levelled plan, the cpu verdicts, quirks, wall time and presets;
    report.py: the verdict block and the faithful variant's departures) type no number:
    every number is computed from the records or read from the code's constants."""
    typed = _typed(module)
    assert typed == [], f"numbers typed by hand in the prose writer: {typed}"


def test_the_prose_follows_the_records(records):
    """Change a record and the prose changes with it (a number that did not would be
    typed by hand)."""
    before = reading_markdown(records, PRESET)
    assert "claim 1: 4.5-6.2 % against 100 %" in before
    changed = [dict(r) for r in records]
    cell = next(r for r in changed if r["preset"] == PRESET and r["task"] == "distance"
                and r["scheme"] == "nope" and r["variant"] == "intended" and r["seed"] == 0)
    cell["accuracy"] = 0.031
    after = reading_markdown(changed, PRESET)
    assert "claim 1: 3.1-6.2 % against 100 %" in after
    assert before.replace("4.5-6.2 %", "3.1-6.2 %") == after.replace("4.5-6.2 %", "3.1-6.2 %")
