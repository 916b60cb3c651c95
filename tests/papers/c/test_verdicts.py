"""The verdict rules of docs/paper_c_rules.md: their text is the page's, each holds on a
run that shows the paper's claim and fails on one that does not, missing analyses are
pending (never guessed), and seeds combine as 'at least two of three'."""

from __future__ import annotations

import copy
import math
from pathlib import Path

import pytest
import torch

from lens_possym.errors import InvalidSelectionError
from lens_possym.papers.c.verdicts import (
    ROW_KEYS,
    RULES,
    RuleResult,
    RunAnalyses,
    convergence_step,
    judge_seed,
    judge_theory,
    mid_rise,
    relative_spread,
    verdict,
)

RULES_PAGE = Path(__file__).resolve().parents[3] / "docs" / "paper_c_rules.md"
STEPS = list(range(100, 7001, 100))


def test_rule_texts_are_the_pages():
    rows = {}
    lenient = RULES_PAGE.read_text().split("## Addendum")[0]     # the 2026-11-25 table
    for line in lenient.splitlines():
        if line.startswith("| ") and line[2].isdigit():
            cells = [c.strip() for c in line.strip("|").split(" | ")]
            rows[int(cells[0])] = cells
    assert sorted(rows) == list(range(1, 17)) and len(RULES) == 16
    for r in RULES:
        number, claim, rule = rows[r.number]
        assert rule == r.rule, r.number
        assert claim.startswith(r.claim), r.number
    assert len(ROW_KEYS) == 18


def test_definitions_by_hand():
    assert mid_rise([100, 200, 300], [0.1, 0.5, 0.9]) == 200
    assert mid_rise([100, 200], [0.1, 0.4]) == math.inf
    assert relative_spread([1000, 1500, 2000, 2000]) == 0.5
    assert relative_spread([1000, math.inf]) == 1.0
    assert math.isnan(relative_spread([math.inf, math.inf]))
    assert convergence_step([(100, 0.5), (200, 0.991), (300, 1.0)]) == 200


def _rise(at: int) -> list[float]:
    return [0.0 if s < at else 1.0 for s in STEPS]


def _scores(kinds: list[str], since: list[int], dips: dict[int, int] | None = None):
    """Scores [n_ckpt, 12, 1]: layer ℓ becomes pure of kinds[ℓ] at since[ℓ] ('-': never);
    dips: {layer: step} a positional-looking checkpoint (s_POS 0.9, s_SYM 0.2) there."""
    pos = torch.full((len(STEPS), 12, 1), 0.5)
    sym = torch.full((len(STEPS), 12, 1), 0.5)
    for layer, (kind, s) in enumerate(zip(kinds, since)):
        for i, step in enumerate(STEPS):
            if kind != "-" and step >= s:
                pos[i, layer, 0], sym[i, layer, 0] = (0.97, 0.03) if kind == "P" else (0.03, 0.97)
    for layer, step in (dips or {}).items():
        i = STEPS.index(step)
        pos[i, layer, 0], sym[i, layer, 0] = 0.9, 0.2
    return pos, sym


def _paper_like() -> tuple[RunAnalyses, RunAnalyses]:
    """Two runs that show every claim of the paper."""
    n_pos, n_sym = _scores(["P"] * 4 + ["S"] * 8, [4000] * 4 + [3000] * 8)
    lens = torch.zeros(4, 13, 5)
    patch = torch.zeros(4, 13, 5)
    for k in range(4):
        lens[3, 4 - k:, k] = 1.0
        patch[3, 4 - k, k] = 0.9
    hop = torch.full((12, 1, 4, 4), 0.1)
    for k in range(4):
        hop[3 - k, 0, 3, k] = 0.9
    ones = lambda: torch.ones(12, 1)  # noqa: E731
    number = RunAnalyses(
        "number", "paper", 0,
        history=[(s, 0.995 if s >= 4800 else 0.5) for s in STEPS], steps=STEPS,
        accuracy_by_hops=[list(x) for x in zip(*[_rise(2000 + 800 * h) for h in range(4)])],
        pos=n_pos, sym=n_sym, labels=[["Index"]] * 4 + [["Reflexive"]] * 8,
        hop_by_stop=hop, lens_decoded=lens, patch_restore=patch,
        lengths={17: 1.0, 50: 0.8, 100: 0.7, 300: 0.45, 850: 0.1},
        gap_min={17: ones(), 300: 0.1 * ones()}, gap_max={17: 2 * ones(), 300: ones()})
    l_pos, l_sym = _scores(["-"] + ["S"] * 11, [0] + [2500] * 11, {9: 1500, 10: 1500, 11: 1600})
    letter = RunAnalyses(
        "letter", "paper", 0,
        history=[(s, 0.995 if s >= 3000 else 0.5) for s in STEPS], steps=STEPS,
        accuracy_by_hops=[list(x) for x in zip(*[_rise(2500)] * 4)],
        pos=l_pos, sym=l_sym, labels=[["other"]] + [["Retrieval"]] * 3 + [["Reflexive"]] * 8,
        hop_by_stop=torch.full((12, 1, 4, 4), 0.2), lens_decoded=lens.clone(),
        patch_restore=patch.clone(),
        lengths={17: 1.0, 50: 1.0, 100: 1.0, 300: 0.98, 850: 0.92},
        gap_min={17: ones(), 300: 0.8 * ones()}, gap_max={17: ones(), 300: ones()})
    return number, letter


def test_every_rule_holds_on_a_run_that_shows_the_claim():
    number, letter = _paper_like()
    results = judge_seed(number, letter)
    assert set(results) == set(ROW_KEYS) - {"11", "12"}
    failing = {k: r.ours for k, r in results.items() if r.holds is not True}
    assert not failing, failing


@pytest.mark.parametrize("key, break_it", [
    ("1", lambda n, l: n.accuracy_by_hops.reverse()),                  # hop 4 first
    ("2", lambda n, l: setattr(l, "accuracy_by_hops",
                               [list(x) for x in zip(_rise(1000), _rise(1000), _rise(1000),
                                                     _rise(4000))])),
    ("3", lambda n, l: setattr(l, "history", [(s, 0.5) for s in STEPS])),   # never 0.99
    ("4", lambda n, l: (n.pos.__setitem__((slice(None), 5, 0), 0.97),    # L5 positional
                        n.sym.__setitem__((slice(None), 5, 0), 0.03))),
    ("5", lambda n, l: (l.pos.__setitem__((slice(None), 0, 0), 0.97),
                        l.sym.__setitem__((slice(None), 0, 0), 0.03))),
    ("6 number", lambda n, l: n.pos.__setitem__((slice(0, 59), 2, 0), 0.5)),  # L2 at 6000
    ("6 letter", lambda n, l: (l.sym.__setitem__((slice(0, 55), slice(3, 12), 0), 0.5),)),
    ("7", lambda n, l: l.sym.__setitem__((slice(None), slice(9, 12), 0),
                                         l.sym[:, 9:12, 0].clamp_min(0.5))),
    ("8", lambda n, l: n.hop_by_stop.__setitem__((slice(2, 4), 0, 3), 0.3)),
    ("9", lambda n, l: l.labels.__setitem__(2, ["Index"])),
    ("10 number", lambda n, l: n.patch_restore.mul_(0.5)),
    ("10 letter", lambda n, l: l.lens_decoded.zero_()),
    ("13", lambda n, l: n.lengths.__setitem__(850, 0.95)),
    ("14", lambda n, l: l.lengths.__setitem__(850, 0.85)),
    ("15", lambda n, l: n.lengths.__setitem__(300, 0.7)),
    ("16", lambda n, l: n.gap_min.__setitem__(300, torch.ones(12, 1))),
])
def test_each_rule_fails_on_a_run_that_does_not_show_the_claim(key, break_it):
    number, letter = copy.deepcopy(_paper_like())
    break_it(number, letter)
    results = judge_seed(number, letter)
    assert results[key].holds is False, results[key].ours


def test_missing_analyses_are_pending_never_guessed():
    number, letter = _paper_like()
    number.lengths = None
    letter.lens_decoded = None
    results = judge_seed(number, letter)
    for key in ("13", "15", "10 letter"):
        assert results[key].holds is None and results[key].ours.startswith("missing")
    assert results["9"].holds is True          # Retrieval among L1-L3 suffices
    nothing = judge_seed(None, None)
    assert all(r.holds is None for r in nothing.values())
    with pytest.raises(InvalidSelectionError, match="expected a number run"):
        judge_seed(letter, number)


def test_theory_rules():
    table = [{"n": n, "max_holds": n % 50 != 0, "min_holds": True} for n in range(17, 1001)]
    out = judge_theory({"t_index": 1.0, "t_retrieval": 0.995}, table, table)
    assert out["11"].holds is True and out["12"].holds is False       # 19 fails of 984 > 1 %
    table = [{"n": n, "max_holds": n % 200 != 0, "min_holds": True} for n in range(17, 1001)]
    assert judge_theory({"t": 0.98}, table)["12"].holds is True
    assert judge_theory({"t": 0.98}, table)["11"].holds is False
    assert judge_theory(None, None)["12"].holds is None


def test_two_of_three_seeds():
    yes, no = RuleResult("1", True, ""), RuleResult("1", False, "")
    pending = RuleResult("1", None, "missing")
    assert verdict([yes, yes, None]) == "holds"
    assert verdict([yes, no, yes]) == "holds"
    assert verdict([no, no, None]) == "does not hold"
    assert verdict([yes, no, None]) == "pending"
    assert verdict([yes, pending, pending]) == "pending"
    assert verdict([None, None, None]) == "pending"
    assert verdict([yes], n_seeds=1) == "holds" and verdict([pending], n_seeds=1) == "pending"


def _strict_paper_like():
    number, letter = copy.deepcopy(_paper_like())
    letter.labels[0] = ["Retrieval"]                    # L0-L3 all Retrieval
    return number, letter


def test_strict_rules_hold_on_a_run_that_shows_the_claims_as_written():
    from lens_possym.papers.c.verdicts import STRICT_RULES, judge_seed_strict

    results = judge_seed_strict(*_strict_paper_like())
    assert set(results) == {"4", "5", "6 number", "6 letter", "9", "16"}
    assert {k.split()[0] for k in results} == set(STRICT_RULES)
    failing = {k: r.ours for k, r in results.items() if r.holds is not True}
    assert not failing, failing
    assert all(r.holds is None for r in judge_seed_strict(None, None).values())


@pytest.mark.parametrize("key, break_it", [
    # 3 positional heads: the lenient rule (>= 2) holds, the strict (exactly L0-L3) not
    ("4", lambda n, l: n.pos.__setitem__((slice(None), 0, 0), 0.5)),
    # L0 pure symbolic at the end: lenient (>= 9 symbolic) holds, strict not
    ("5", lambda n, l: (l.pos.__setitem__((slice(None), 0, 0), 0.03),
                        l.sym.__setitem__((slice(None), 0, 0), 0.97))),
    # L3 pure only from 5,000 (T = 4,800): 11 of 12 at T satisfies the lenient rule
    ("6 number", lambda n, l: n.pos.__setitem__((slice(0, STEPS.index(5000)), 3, 0), 0.5)),
    ("9", lambda n, l: l.labels.__setitem__(0, ["other"])),
    # the max discrepancy grows for Number's positional heads
    ("16", lambda n, l: n.gap_max.__setitem__(300, 3 * torch.ones(12, 1))),
])
def test_each_strict_rule_fails_where_the_lenient_one_may_pass(key, break_it):
    from lens_possym.papers.c.verdicts import judge_seed_strict

    number, letter = _strict_paper_like()
    break_it(number, letter)
    assert judge_seed_strict(number, letter)[key].holds is False
    if key in ("4", "5", "6 number"):
        assert judge_seed(number, letter)[key].holds is True


def test_analyses_round_trip_and_the_table_from_inputs():
    from lens_possym.papers.c.readings import verdict_table
    from lens_possym.papers.c.verdicts import (analyses_from_dict, analyses_to_dict,
                                               judge_seed_strict)
    import json

    number, letter = _strict_paper_like()
    back = [analyses_from_dict(json.loads(json.dumps(analyses_to_dict(r))))
            for r in (number, letter)]
    assert {k: r.holds for k, r in judge_seed(*back).items()} == \
        {k: r.holds for k, r in judge_seed(number, letter).items()}
    assert {k: r.holds for k, r in judge_seed_strict(*back).items()} == \
        {k: r.holds for k, r in judge_seed_strict(number, letter).items()}
    runs = {str(s): {"number": analyses_to_dict(number), "letter": analyses_to_dict(letter)}
            for s in range(3)}
    table = verdict_table({"runs": {"paper": runs}})
    assert set(table["paper"]["lenient"].values()) == {"holds"}
    assert table["paper"]["strict"]["4"] == "holds"
    assert table["paper"]["strict"]["13"] == "pending"          # no length cells given
    assert table["theory"] == {"11": "pending", "12": "pending"}


def test_analyses_with_nan_are_strict_json_and_read_back_as_nan():
    """A run's inputs with ``nan`` (a hop count no prompt had, a head never scored) are
    written as strict JSON (``null``; ``allow_nan=False`` succeeds) and read back as
    ``nan`` in the same places, so the verdicts re-derived from the committed file see
    what the report saw."""
    import json
    import math

    from lens_possym.papers.c.verdicts import analyses_from_dict, analyses_to_dict

    number, _ = _strict_paper_like()
    number.pos[0, 1, 0] = float("nan")
    number.gap_max[300][2, 0] = float("nan")
    number.accuracy_by_hops[0][1] = float("nan")
    number.lengths = {17: 1.0, 300: float("nan")}
    text = json.dumps(analyses_to_dict(number), allow_nan=False)
    assert "NaN" not in text
    back = analyses_from_dict(json.loads(text))
    assert torch.equal(back.pos.isnan(), number.pos.isnan())
    assert torch.equal(torch.nan_to_num(back.pos), torch.nan_to_num(number.pos))
    assert back.gap_max[300][2, 0].isnan() and not back.gap_max[300][1, 0].isnan()
    assert math.isnan(back.accuracy_by_hops[0][1])
    assert back.lengths[17] == 1.0 and math.isnan(back.lengths[300])
