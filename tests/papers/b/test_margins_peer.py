"""Paper B's ``+levelled`` verdicts against an independent peer (``peer_margins``, written
from the rules' words with no import from the package): on random grids built to sit near
every threshold, on the committed records re-read under these rules, and on the verdicts
the records file holds."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from lens_possym.papers.b.margins import judge_margins, outcome_mark
from lens_possym.papers.b.pipeline import levelled_verdicts
from lens_possym.papers.b.presets import CLAIM_GRID

from . import peer_margins as peer

RECORDS = Path(__file__).resolve().parents[3] / "docs" / "paper_b_results.json"
GRID = "paper-length+levelled"


def _package(records: list[dict], grid: str) -> dict[tuple[str, str], tuple[list[str], str]]:
    out = {}
    for row in judge_margins(records, grid):
        for variant in ("intended", "faithful"):
            v = row[variant]
            out[(row["claim"].number, variant)] = ([outcome_mark(o) for o, _ in v["seeds"]],
                                                   v["verdict"])
    return out


def _accuracy(rng: random.Random, n: int) -> float:
    """Near the thresholds the rules read (50 %, 99 %, a half, each other) as often as not."""
    p = rng.choice([rng.random(), 0.5 + rng.gauss(0, 0.03), 0.99 + rng.gauss(0, 0.01),
                    0.9 + rng.gauss(0, 0.05), rng.choice([0.0, 1.0])])
    return round(min(1.0, max(0.0, p)) * n) / n


def _record(rng: random.Random, task: str, scheme: str, variant: str, seed: int,
            n: int) -> dict:
    p = _accuracy(rng, n)
    drops = [[abs(rng.gauss(0, 0.03)) for _ in range(8)] for _ in range(3)]
    if rng.random() < 0.6:                          # one large head, in a random layer
        drops[rng.choice([0, 0, 1, 2])][rng.randrange(8)] = rng.uniform(0.1, 0.7) * p
    if rng.random() < 0.2:                          # a tie for the largest drop
        drops[1][0] = drops[0][0] = max(max(row) for row in drops)
    grid = [[round(max(0.0, p - d) * n) / n for d in row] for row in drops]
    paired = rng.random() < 0.7
    record = {"preset": GRID, "task": task, "scheme": scheme, "variant": variant,
              "seed": seed, "accuracy": p, "ablation_grid": grid,
              "probe": {"aligned": [rng.random() for _ in range(4)], "chance": 0.125}}
    if rng.random() < 0.8:                          # a levelled record; else an old one
        record.update(eval_size=n, accuracy_se=(p * (1 - p) / n) ** 0.5, ablation_se=(
            [[abs(rng.gauss(0, 0.01)) for _ in row] for row in grid] if paired else None))
    return record


def _grid(seed: int) -> list[dict]:
    rng = random.Random(seed)
    n = rng.choice([64, 256, 4096])                  # small n: many undecided conditions
    records = [_record(rng, task, scheme, variant, s, n)
               for s in (0, 1, 2) for variant in ("intended", "faithful")
               for scheme in CLAIM_GRID[variant] for task in ("distance", "count")]
    return [r for r in records if rng.random() > 0.03]        # a few missing cells: –


@pytest.mark.parametrize("seed", range(40))
def test_random_grids_agree_with_the_peer(seed):
    records = _grid(seed)
    assert _package(records, GRID) == peer.peer_verdicts(records, GRID)


def test_the_random_grids_reach_every_outcome():
    """The comparison above is worth something only if the grids decide every way."""
    marks, verdicts = set(), set()
    for seed in range(40):
        for seed_marks, verdict in peer.peer_verdicts(_grid(seed), GRID).values():
            marks.update(seed_marks)
            verdicts.add(verdict)
    assert marks == {"✓", "✗", "?", "–"}
    assert verdicts == {"holds", "does not hold", "undecided", "not judged"}


@pytest.mark.parametrize("grid", ["paper-length", "paper-length+copies", GRID])
def test_the_committed_records_agree_with_the_peer(grid):
    records = json.loads(RECORDS.read_text())["cells"]
    assert _package(records, grid) == peer.peer_verdicts(records, grid)


def test_the_committed_verdicts_are_the_peers():
    """The records file's ``"verdicts"`` (what the report prints), recomputed by the peer
    from the file's cells alone."""
    data = json.loads(RECORDS.read_text())
    assert data["verdicts"] == levelled_verdicts(data["cells"], "paper-length", (0, 1, 2))
    for grid, verdicts in data["verdicts"].items():
        claims = peer.COPIES_CLAIMS if grid.endswith("+copies") else peer.CLAIMS
        expected = peer.peer_verdicts(data["cells"], grid, claims=claims)
        got = {(c["claim"], variant): ([s["outcome"] for s in c[variant]["seeds"]],
                                       c[variant]["verdict"])
               for c in verdicts["claims"] for variant in ("intended", "faithful")}
        assert got == expected, grid
