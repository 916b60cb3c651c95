r"""Paper B's claims judged from finished cells: one rule per claim, named for what it tests.

The rules are those of ``docs/paper_b_rules.md`` (dated, written before the
``paper-length`` grid ran); :data:`CLAIMS` holds each claim's text, the paper's number, the
rule in words and the function that applies it to one seed of one variant. A rule returns
``(holds, ours)``: ``holds`` is ``True``, ``False`` or ``None`` (the rule cannot be
applied: a cell is missing, or claim 5's task saturates), ``ours`` a short account of the
numbers it read. :func:`judge` applies every rule to every seed and gives the verdict:
**a claim holds for a variant when its rule holds in at least two of the three seeds**.

Definitions the rules share (points are accuracy points, 1 point = 0.01):

* ``MAIN``: nope, sinusoidal, learned, alibi, t5, rope, mla; ``best`` = the highest
  accuracy among them on the task (same variant and seed).
* **fails**: accuracy below half of ``best``.
* **a tie**: within ``TIE`` = 1 point.
* **deposit** (the rule as written in docs/paper_b.md, applied to every scheme): the
  largest single-head drop is at least 25 % of the accuracy and at least twice the second
  largest, in a model whose accuracy is at least 50 %
  (:func:`~lens_possym.papers.b.deposit.deposit_summary`).
* **saturated** (distance): at least two ``MAIN`` schemes reach 99 %.
* **displaced** (probe): the share of the stream's positional part along the input
  encoding's directions after the last block has fallen at least half-way from its
  layer-0 value to chance.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterable

from ...errors import InvalidSelectionError
from .presets import MAIN, NON_ROPE, ROPE_FAMILY
from .records import CellRecord, as_dicts

__all__ = ["Claim", "CLAIMS", "MissingCell", "judge", "seed_view", "seed_views", "deposit_table",
           "late_gain", "percent", "MAIN", "ROPE_FAMILY", "NON_ROPE", "RECORD_RULES_DATE", "TIE",
           "NEAR", "SATURATED", "LEVELLED",
           "nope_fails_distance", "rope_wins_distance", "absolute_second_on_distance",
           "alibi_fails_distance", "mla_near_best_on_distance", "count_order_mla_nope_rope",
           "rope_has_a_distance_deposit", "deposit_only_in_rope_models",
           "no_deposit_in_nope_or_count_rope", "mla_removes_the_deposit",
           "rope_on_two_heads_near_rope", "rope_on_one_head_near_rope",
           "hybrid_displaces_the_encoding"]

#: when these rules (the verdicts of record) were fixed, before the paper-length grid ran
RECORD_RULES_DATE = "2026-11-25"
TIE = 0.01
NEAR = 0.05          # "near" (claims 5 and 11): within 5 points
SATURATED = 0.99

Cells = dict[tuple[str, str], dict]          # (task, scheme) -> record, one variant and seed
Result = tuple["bool | None", str]


class MissingCell(InvalidSelectionError):
    """A cell the rule needs is not there."""


def _get(cells: Cells, task: str, scheme: str) -> dict:
    try:
        return cells[(task, scheme)]
    except KeyError:
        raise MissingCell(f"{task}/{scheme}") from None


def _acc(cells: Cells, task: str, scheme: str) -> float:
    return float(_get(cells, task, scheme)["accuracy"])


def _best(cells: Cells, task: str, among: Iterable[str] = MAIN) -> tuple[str, float]:
    # "the best scheme" over a partial seed would judge a claim on whichever cells happened to
    # finish first, so every scheme compared must be there
    among = tuple(among)
    absent = [s for s in among if (task, s) not in cells]
    if absent:
        raise MissingCell(f"{task}/{','.join(absent)}")
    return max(((s, _acc(cells, task, s)) for s in among), key=lambda x: x[1])


def percent(x: float) -> str:
    """A fraction as accuracy points with one decimal (``0.9264`` -> ``"92.6"``)."""
    return f"{100 * x:.1f}"


def _dep(cells: Cells, task: str, scheme: str) -> bool:
    return bool(_get(cells, task, scheme)["ablation"]["deposit"])


def _dep_text(cells: Cells, task: str, scheme: str) -> str:
    a = _get(cells, task, scheme)["ablation"]
    head = ".".join(str(x) for x in a["top_head"])
    return (f"{scheme} {'deposit' if a['deposit'] else 'no deposit'} (head {head}: "
            f"{percent(a['top_drop'])} / {percent(a['second_drop'])} pts, "
            f"{a['heads_over_10']} heads > 10)")


def _fails(cells: Cells, scheme: str) -> Result:
    _, best = _best(cells, "distance")
    acc = _acc(cells, "distance", scheme)
    return acc < 0.5 * best, f"{percent(acc)} vs best {percent(best)}"


def nope_fails_distance(cells: Cells) -> Result:
    return _fails(cells, "nope")


def rope_wins_distance(cells: Cells) -> Result:
    rope = _acc(cells, "distance", "rope")
    name, other = _best(cells, "distance", [s for s in MAIN if s != "rope"])
    return rope >= other + TIE, f"rope {percent(rope)}, next {name} {percent(other)}"


def absolute_second_on_distance(cells: Cells) -> Result:
    absolute = max(("sinusoidal", "learned"), key=lambda s: _acc(cells, "distance", s))
    a, rope = _acc(cells, "distance", absolute), _acc(cells, "distance", "rope")
    name, rest = _best(cells, "distance", ("nope", "alibi", "t5"))
    return (rope >= a + TIE and a >= rest - TIE,
            f"{absolute} {percent(a)}, rope {percent(rope)}, best other {name} {percent(rest)}")


def alibi_fails_distance(cells: Cells) -> Result:
    return _fails(cells, "alibi")


def mla_near_best_on_distance(cells: Cells) -> Result:
    top = [s for s in MAIN if (("distance", s) in cells
                               and _acc(cells, "distance", s) >= SATURATED)]
    mla = _acc(cells, "distance", "mla")
    name, best = _best(cells, "distance")
    if len(top) >= 2:
        return None, f"saturated ({', '.join(top)} >= 99 %); mla {percent(mla)}"
    return best - mla <= NEAR, f"mla {percent(mla)}, best {name} {percent(best)}"


def count_order_mla_nope_rope(cells: Cells) -> Result:
    mla, nope, rope = (_acc(cells, "count", s) for s in ("mla", "nope", "rope"))
    return mla > nope > rope, f"mla {percent(mla)}, nope {percent(nope)}, rope {percent(rope)}"


def rope_has_a_distance_deposit(cells: Cells) -> Result:
    return _dep(cells, "distance", "rope"), _dep_text(cells, "distance", "rope")


def deposit_only_in_rope_models(cells: Cells) -> Result:
    rope = [s for s in ROPE_FAMILY if ("distance", s) in cells and _dep(cells, "distance", s)]
    other = [s for s in NON_ROPE if ("distance", s) in cells and _dep(cells, "distance", s)]
    for s in ("rope",) + NON_ROPE:
        _get(cells, "distance", s)
    mla = " mla" if ("distance", "mla") in cells and _dep(cells, "distance", "mla") else ""
    text = (f"deposits: RoPE models [{', '.join(rope) or 'none'}], others "
            f"[{', '.join(other) or 'none'}]{'; also' + mla if mla else ''}")
    return bool(rope) and not other, text


def no_deposit_in_nope_or_count_rope(cells: Cells) -> Result:
    nope, rope = _dep(cells, "distance", "nope"), _dep(cells, "count", "rope")
    return (not nope and not rope,
            f"{_dep_text(cells, 'distance', 'nope')}; count {_dep_text(cells, 'count', 'rope')}")


def mla_removes_the_deposit(cells: Cells) -> Result:
    mla, rope = _dep(cells, "distance", "mla"), _dep(cells, "distance", "rope")
    return rope and not mla, f"{_dep_text(cells, 'distance', 'mla')}; rope {'deposit' if rope else 'no deposit'}"


def _rope_on_k_heads_near_rope(cells: Cells, k: int) -> Result:
    part, full = _acc(cells, "distance", f"rope-k{k}"), _acc(cells, "distance", "rope")
    return part >= full - NEAR, f"rope-k{k} {percent(part)} vs rope {percent(full)}"


def rope_on_two_heads_near_rope(cells: Cells) -> Result:
    return _rope_on_k_heads_near_rope(cells, 2)


def rope_on_one_head_near_rope(cells: Cells) -> Result:
    return _rope_on_k_heads_near_rope(cells, 1)


def _displaced(probe: dict) -> bool:
    a0, out, chance = probe["aligned"][0], probe["aligned"][-1], probe["chance"]
    return out - chance <= 0.5 * (a0 - chance)


def hybrid_displaces_the_encoding(cells: Cells) -> Result:
    variant = next(iter(cells.values()))["variant"] if cells else "intended"
    hybrid = "hybrid" if variant == "intended" else "rope"          # faithful: RoPE + APE
    h, s = (_get(cells, "distance", x).get("probe") for x in (hybrid, "sinusoidal"))
    if not h or not s:
        raise MissingCell("probe")
    text = (f"aligned L0 -> out: {hybrid} {h['aligned'][0]:.2f} -> {h['aligned'][-1]:.2f}, "
            f"sinusoidal {s['aligned'][0]:.2f} -> {s['aligned'][-1]:.2f} (chance "
            f"{h['chance']:.2f})")
    return _displaced(h) and not _displaced(s), text


@dataclass(frozen=True)
class Claim:
    """One claim of paper B with its rule."""

    number: str
    text: str
    paper: str
    rule: str
    apply: Callable[[Cells], Result]


CLAIMS: tuple[Claim, ...] = (
    Claim("1", "NoPE fails the distance task", "fails",
          "nope's distance accuracy < half of the best MAIN scheme's", nope_fails_distance),
    Claim("2", "RoPE wins the distance task", "92.64 %",
          "rope's distance accuracy >= every other MAIN scheme's + 1 point", rope_wins_distance),
    Claim("3", "absolute is second best on distance", "second",
          "the better of sinusoidal/learned is >= 1 point below rope and within 1 point of "
          "(or above) the best of nope, alibi, t5", absolute_second_on_distance),
    Claim("4", "ALiBi fails the distance task", "fails",
          "alibi's distance accuracy < half of the best MAIN scheme's", alibi_fails_distance),
    Claim("5", "MLA is near-optimal on distance", "88.34 % (RoPE 92.64 %)",
          "judged only where distance does not saturate (fewer than two MAIN schemes >= 99 %): "
          "mla within 5 points of the best MAIN scheme", mla_near_best_on_distance),
    Claim("6", "count: MLA > NoPE > RoPE", "97.41 / 77.69 / 69.43 %",
          "count accuracy mla > nope > rope", count_order_mla_nope_rope),
    Claim("7", "in RoPE models one head carries distance (ablation ~60 %)", "~60 %",
          "rope (distance) has a deposit", rope_has_a_distance_deposit),
    Claim("8", "the deposit pattern is specific to RoPE", "RoPE only",
          "some RoPE model (rope, rope-k1, rope-k2, hybrid) has a distance deposit and no "
          "nope/sinusoidal/learned/alibi/t5 model has one; the report lists every scheme's "
          "deposits as the data give them", deposit_only_in_rope_models),
    Claim("9", "no deposit with NoPE, nor with RoPE on count", "none",
          "no deposit in nope (distance) and none in rope (count)", no_deposit_in_nope_or_count_rope),
    Claim("10", "MLA removes the pattern", "removed",
          "rope (distance) has a deposit and mla (distance, per-head ablation) has none", mla_removes_the_deposit),
    Claim("11a", "RoPE on two heads still reaches ~90 %", "~90 %",
          "rope-k2's distance accuracy within 5 points of rope's", rope_on_two_heads_near_rope),
    Claim("11b", "RoPE on one head still reaches ~90 %", "~90 %",
          "rope-k1's distance accuracy within 5 points of rope's", rope_on_one_head_near_rope),
    Claim("12", "Absolute+RoPE hybrid: additive positional directions displaced after layer 2",
          "displaced",
          "the hybrid's (faithful: rope's, which adds an encoding) probe is displaced by the "
          "last block and the sinusoidal model's is not (distance)", hybrid_displaces_the_encoding),
)


def seed_view(records: Iterable[CellRecord | dict], preset: str, variant: str, seed: int) -> Cells:
    """The records of one preset, variant and seed, by ``(task, scheme)``."""
    return {(r["task"], r["scheme"]): r for r in as_dicts(records)
            if r["preset"] == preset and r["variant"] == variant and r["seed"] == seed}


def seed_views(records: Iterable[CellRecord | dict], preset: str, variants: tuple[str, ...],
               seeds: tuple[int, ...]) -> dict[tuple[str, int], Cells]:
    """:func:`seed_view` of every ``(variant, seed)``; a preset without any record is an
    error (its grid has not run), not a table of missing cells."""
    mine = [r for r in as_dicts(records) if r["preset"] == preset]
    if not mine:
        raise InvalidSelectionError(f"no record of preset {preset!r}; run its grid first")
    return {(v, s): seed_view(mine, preset, v, s) for v in variants for s in seeds}


def judge(records: list[CellRecord | dict], preset: str, seeds: tuple[int, ...] = (0, 1, 2),
          variants: tuple[str, ...] = ("intended", "faithful")) -> list[dict[str, Any]]:
    """Every claim's rule per variant and seed, and its verdict.

    Returns one row per claim: ``claim`` (:class:`Claim`), and per variant
    ``{variant: {"seeds": [(holds, ours), ...], "verdict": str}}``. The verdict is
    ``"holds"`` when the rule holds in at least two seeds, ``"does not hold"`` when it is
    judged in at least two seeds and holds in fewer than two, ``"not judged"`` otherwise.
    """
    views = seed_views(records, preset, variants, seeds)
    rows = []
    for claim in CLAIMS:
        row: dict[str, Any] = {"claim": claim}
        for variant in variants:
            results = []
            for seed in seeds:
                cells = views[(variant, seed)]
                try:
                    results.append(claim.apply(cells))
                except MissingCell as missing:
                    results.append((None, f"missing {missing}"))
            judged = [h for h, _ in results if h is not None]
            held = sum(1 for h in judged if h)
            verdict = ("holds" if held >= 2 else "does not hold" if len(judged) >= 2
                       else "not judged")
            row[variant] = {"seeds": results, "verdict": verdict, "held": held,
                            "judged": len(judged)}
        rows.append(row)
    return rows


def deposit_table(records: list[CellRecord | dict], preset: str, seeds: tuple[int, ...] = (0, 1, 2)
                  ) -> dict[tuple[str, str, str], int]:
    """``(task, variant, scheme) -> number of seeds with a deposit`` (claim 8 as the data
    say)."""
    out: dict[tuple[str, str, str], int] = {}
    for r in as_dicts(records):
        if r["preset"] == preset and r["seed"] in seeds:
            key = (r["task"], r["variant"], r["scheme"])
            out[key] = out.get(key, 0) + int(bool(r["ablation"]["deposit"]))
    return out


#: a cell "still rises" when its accuracy gained more than this over its last quarter of steps
#: and ended below :data:`SATURATED`
LEVELLED = 0.05


def late_gain(record: dict[str, Any]) -> float | None:
    """Accuracy gained over the last quarter of a cell's training: its last evaluation minus
    the last one at or before 3/4 of its steps (``None`` without a history). The learning
    rate decays to zero, so a small gain says the schedule ended, a large one that the cell
    had not reached what these steps could reach; a verdict on such a cell compares schemes
    at this budget, not at convergence."""
    history = record.get("history") or []
    if len(history) < 2:
        return None
    last_step, last = history[-1]
    before = [acc for step, acc in history if step <= 0.75 * last_step]
    return None if not before else last - before[-1]
