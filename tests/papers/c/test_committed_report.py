"""The committed paper C page regenerates byte-identical from the committed files alone: the
records (``docs/paper_c_runs/``), the grid's cells (``docs/paper_c_results.json``), the
settings ablation's record, the device's timings and the stage cache (``docs/paper_c_cache/``), as ``lens-possym paper-c report --cache
docs/paper_c_cache`` writes it (issue 38: every paper report regenerates unchanged; issue
37: every verdict re-derivable). Data that lands is landed with the page it gives."""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

import pytest

from lens_possym.cli import main

DOCS = Path(__file__).resolve().parents[3] / "docs"
WRITTEN = ("paper_c.md", "paper_c_results.json", "paper_c_verdict_inputs.json")

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_the_committed_page_regenerates_byte_identical(tmp_path):
    from lens_possym.papers.c.report import write_report

    docs = tmp_path / "docs"
    # everything the report reads (records, the cells in the results file it rewrites, the
    # settings' record, the device's timings), not the page, figures or cache (read in place)
    shutil.copytree(DOCS, docs, ignore=shutil.ignore_patterns(
        "paper_c_cache", "figures", "paper_c.md", "paper_c_verdict_inputs.json"))
    write_report(argparse.Namespace(docs=docs, cache=DOCS / "paper_c_cache", presets=None))
    for name in WRITTEN:
        assert (docs / name).read_bytes() == (DOCS / name).read_bytes(), (
            f"docs/{name} is not what the committed files give: run `lens-possym paper-c "
            "report --cache docs/paper_c_cache` and commit what it writes")
    # every figure it draws is committed (names only: a PNG's bytes carry the plotting
    # library's version, which a fresh install may move)
    drawn = {f.name for f in (docs / "figures" / "paper_c").iterdir()}
    assert drawn <= {f.name for f in (DOCS / "figures" / "paper_c").iterdir()}
    # and the verdicts recomputed from those files equal the page's table
    assert main(["paper-c", "verdicts", "--docs", str(DOCS)]) == 0
