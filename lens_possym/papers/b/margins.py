r"""Paper B's claims under the rules of 2026-11-29 (docs/paper_b_rules.md, last addendum):
every threshold as a margin with its standard error, and "undecided" within one of them.

A thresholded condition is a :class:`Margin` ``m`` (positive when the condition holds) with
its standard error ``s``; ``z = m / s`` is its distance from the threshold in standard
errors, and the condition is **undecided** when ``|z| < 1``. A rule is a conjunction of
conditions (:func:`all_of`): false when one is false with ``|z| >= 1``, true when all are
true with ``z >= 1``, undecided otherwise (``None``). Standard errors:

* an accuracy ``p`` on ``n`` sentences: ``sqrt(p (1 - p) / n)`` (:func:`accuracy_se`), or
  the record's own ``accuracy_se``;
* a head's drop ``p - q``: the record's paired ``ablation_se`` (``sqrt(var(c_i - a_i) /
  n)``, :func:`~lens_possym.papers.b.levelled.score_cell`), or, for records without
  per-sentence outcomes, the unpaired ``sqrt((p (1 - p) + q (1 - q)) / n)``, which is
  larger for the positively correlated outcomes of one model with and without a head;
* ``x - k y`` of two models: ``sqrt(se_x^2 + k^2 se_y^2)``.

``n`` is the record's ``eval_size`` or, for records written before it existed, its base
preset's ``analysis_size`` (512 for ``paper-length``). The rules (:data:`CLAIMS2`):
claims 1-6, 11a, 11b and 12 as on 2026-11-25 with margins; the deposit as "a single head in
the first layer" with every other head's drop at most :data:`NEGLIGIBLE`
(:func:`first_layer_deposit`);
claims 9a / 9b and 10 judged only on models that learned their task (:data:`LEARNED`);
claim 5 read on a grid added after the main one saturated (:data:`CLAIM5_NOTE`).
:func:`judge_margins` applies them per seed and variant: a claim **holds** when ✓ in two of
three seeds, **does not hold** when ✗ in two, is **undecided** otherwise when judged in at
least two seeds, and **not judged** when fewer.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Sequence

from ...errors import InvalidSelectionError
from .presets import ENCODER_PRESETS, MAIN, NON_ROPE, ROPE_FAMILY
from .records import CellRecord
from .verdicts import (NEAR, SATURATED, TIE, hybrid_displaces_the_encoding, percent,
                       seed_views)
from .verdicts import MissingCell as _Missing

__all__ = ["Margin", "Outcome", "Claim2", "CLAIMS2", "CLAIM5_NOTE", "LEARNED", "RELATIVE",
           "NEGLIGIBLE", "RULES_DATE", "accuracy_with_se", "all_of", "any_of", "accuracy_se",
           "record_size",
           "first_layer_deposit", "judge_margins", "outcome_mark", "seed_distance"]

#: when these rules were fixed (docs/paper_b_rules.md)
RULES_DATE = "2026-11-29 01:23 UTC"
#: a model has learned its task at this accuracy
LEARNED = 0.5
#: the deposit head's drop, as a share of the accuracy, at least
RELATIVE = 0.25
#: "negligible": every other head's drop at most this (accuracy points / 100)
NEGLIGIBLE = 0.05
CLAIM5_NOTE = ("decided on a grid added on 2026-11-26 after the main grid saturated; the "
               "2026-11-25 rule said \"no fallback\"")

Outcome = "bool | None"          # True / False / None (undecided)


@dataclass(frozen=True)
class Margin:
    """A thresholded condition: ``value`` (> 0 when it holds) and its standard error."""

    name: str
    value: float
    se: float

    @property
    def z(self) -> float:
        """The margin in standard errors (``±inf`` for a nonzero margin without error)."""
        if self.se > 0:
            return self.value / self.se
        return math.copysign(math.inf, self.value) if self.value else 0.0

    @property
    def outcome(self) -> "bool | None":
        """``True`` / ``False`` when at least one standard error from the threshold, else
        ``None`` (undecided)."""
        return None if abs(self.z) < 1 else self.z > 0

    def text(self) -> str:
        return f"{self.name} z={self.z:+.1f}"


def all_of(outcomes: Iterable["bool | None"]) -> "bool | None":
    """A conjunction: ``False`` if any is decided false, ``True`` if all are decided true,
    else ``None`` (undecided)."""
    outcomes = list(outcomes)
    if any(o is False for o in outcomes):
        return False
    return True if all(o is True for o in outcomes) else None


def any_of(outcomes: Iterable["bool | None"]) -> "bool | None":
    """A disjunction: ``True`` if any is decided true, ``False`` if all are decided false,
    else ``None``."""
    outcomes = list(outcomes)
    if any(o is True for o in outcomes):
        return True
    return False if all(o is False for o in outcomes) else None


def _pts(x: float) -> str:
    """A threshold in accuracy points as a margin's name writes it (``0.01`` -> ``"1"``)."""
    return f"{100 * x:g}"


def _not(outcome: "bool | None") -> "bool | None":
    return None if outcome is None else not outcome


def record_size(record: dict[str, Any]) -> int:
    """Scoring sentences behind a record's accuracy: its ``eval_size``, or its base preset's
    ``analysis_size`` (the preset's name up to the first ``+`` / ``@``)."""
    if record.get("eval_size"):
        return int(record["eval_size"])
    base = record["preset"].split("+")[0].split("@")[0]
    if base not in ENCODER_PRESETS:
        raise InvalidSelectionError(f"record of preset {record['preset']!r} has no eval_size "
                                    "and no known base preset; add eval_size to it")
    return ENCODER_PRESETS[base].analysis_size


def accuracy_se(p: float, n: int) -> float:
    """Binomial standard error ``sqrt(p (1 - p) / n)`` of an accuracy ``p`` on ``n``."""
    if n < 1:
        raise InvalidSelectionError(f"n must be >= 1, got {n}")
    return math.sqrt(max(p * (1 - p), 0.0) / n)


def accuracy_with_se(record: dict[str, Any]) -> tuple[float, float]:
    """``(accuracy, standard error)`` of a record: its ``accuracy_se`` or the binomial one
    on :func:`record_size` sentences."""
    p = float(record["accuracy"])
    se = record.get("accuracy_se")
    return p, float(se) if se is not None else accuracy_se(p, record_size(record))


def _drop_se(record: dict[str, Any], layer: int, head: int) -> float:
    if record.get("ablation_se") is not None:
        return float(record["ablation_se"][layer][head])
    n = record_size(record)
    p, q = float(record["accuracy"]), float(record["ablation_grid"][layer][head])
    return math.sqrt((max(p * (1 - p), 0) + max(q * (1 - q), 0)) / n)


def _learned(record: dict[str, Any]) -> Margin:
    p, se = accuracy_with_se(record)
    return Margin("learned", p - LEARNED, se)


def first_layer_deposit(record: dict[str, Any]) -> tuple["bool | None", list[Margin], str]:
    """The deposit as the paper words it, "a single head in the first layer", the others
    negligible: ``(outcome, margins, text)``.

    Conditions: learned (accuracy >= :data:`LEARNED`); the largest single-head drop is in
    layer 0 (not a threshold); that drop >= :data:`RELATIVE` x accuracy; every other head's
    drop <= :data:`NEGLIGIBLE`. ``record["ablation_grid"]`` is ``[n_layers][n_heads]``
    accuracies with one head ablated."""
    p, se_p = accuracy_with_se(record)
    grid = record["ablation_grid"]
    if not grid:
        raise InvalidSelectionError(f"record {record['preset']} {record['task']} "
                                    f"{record['scheme']} has no ablation_grid")
    drops = [(p - float(q), layer, head) for layer, row in enumerate(grid)
             for head, q in enumerate(row)]
    drops.sort(key=lambda d: -d[0])
    top, layer, head = drops[0]
    se_top = _drop_se(record, layer, head)
    margins = [_learned(record),
               Margin(f"top>={RELATIVE:.0%}", top - RELATIVE * p,
                      math.hypot(se_top, RELATIVE * se_p))]
    margins += [Margin(f"{l}.{h}<={_pts(NEGLIGIBLE)}", NEGLIGIBLE - d, _drop_se(record, l, h))
                for d, l, h in drops[1:]]
    outcome = all_of([layer == 0] + [m.outcome for m in margins])
    second = drops[1][0] if len(drops) > 1 else 0.0
    binding = min(margins[2:], key=lambda m: m.z) if len(margins) > 2 else None
    ratio = f"{top / second:.2f}" if second > 0 else "—"      # the 2026-11-25 rule's ratio
    text = (f"{record['scheme']} head {layer}.{head} {percent(top)} pts, next {percent(second)}"
            f", top/second {ratio} ({margins[0].text()}, {margins[1].text()}"
            + (f", {binding.text()}" if binding else "")
            + f"{'' if layer == 0 else ', not layer 0'})")
    return outcome, margins, text


Cells = dict[tuple[str, str], dict]
Result = tuple["bool | None | str", str, list[Margin]]   # "–": not judged; the margins read


def _get(cells: Cells, task: str, scheme: str) -> dict:
    try:
        return cells[(task, scheme)]
    except KeyError:
        raise _Missing(f"{task}/{scheme}") from None


def _best(cells: Cells, task: str, among: Sequence[str] = MAIN) -> tuple[str, float, float]:
    for s in among:
        _get(cells, task, s)
    name = max(among, key=lambda s: float(cells[(task, s)]["accuracy"]))
    return (name, *accuracy_with_se(cells[(task, name)]))


def _diff(name: str, a: tuple[float, float], b: tuple[float, float], k: float = 1.0,
          offset: float = 0.0) -> Margin:
    """``a - k b - offset`` with ``sqrt(se_a^2 + k^2 se_b^2)``."""
    return Margin(name, a[0] - k * b[0] - offset, math.hypot(a[1], k * b[1]))


def _fails(cells: Cells, scheme: str) -> Result:
    name, best, se_best = _best(cells, "distance")
    acc = accuracy_with_se(_get(cells, "distance", scheme))
    m = Margin(f"<half of {name}", 0.5 * best - acc[0], math.hypot(0.5 * se_best, acc[1]))
    return m.outcome, f"{percent(acc[0])} vs best {percent(best)}; {m.text()}", [m]


def _rope_wins(cells: Cells) -> Result:
    rope = accuracy_with_se(_get(cells, "distance", "rope"))
    name, other, se = _best(cells, "distance", [s for s in MAIN if s != "rope"])
    m = _diff(f"rope-{name}-{_pts(TIE)}", rope, (other, se), offset=TIE)
    return m.outcome, f"rope {percent(rope[0])}, next {name} {percent(other)}; {m.text()}", [m]


def _absolute_second(cells: Cells) -> Result:
    absolute = max(("sinusoidal", "learned"),
                   key=lambda s: float(_get(cells, "distance", s)["accuracy"]))
    a, rope = accuracy_with_se(cells[("distance", absolute)]), accuracy_with_se(_get(cells, "distance", "rope"))
    name, rest, se = _best(cells, "distance", ("nope", "alibi", "t5"))
    m1 = _diff(f"rope-abs-{_pts(TIE)}", rope, a, offset=TIE)
    m2 = _diff(f"abs-{name}+{_pts(TIE)}", a, (rest, se), offset=-TIE)
    return (all_of([m1.outcome, m2.outcome]),
            f"{absolute} {percent(a[0])}, rope {percent(rope[0])}, {name} {percent(rest)}; "
            f"{m1.text()}, {m2.text()}", [m1, m2])


def _mla_near_best(cells: Cells) -> Result:
    top = [s for s in MAIN if ("distance", s) in cells
           and float(cells[("distance", s)]["accuracy"]) >= SATURATED]
    mla = accuracy_with_se(_get(cells, "distance", "mla"))
    name, best, se = _best(cells, "distance")
    if len(top) >= 2:
        return ("–", f"saturated ({', '.join(top)} >= {_pts(SATURATED)} %); mla "
                f"{percent(mla[0])}", [])
    m = Margin(f"{name}-mla<={_pts(NEAR)}", NEAR - (best - mla[0]), math.hypot(se, mla[1]))
    return m.outcome, f"mla {percent(mla[0])}, best {name} {percent(best)}; {m.text()}", [m]


def _count_order(cells: Cells) -> Result:
    mla, nope, rope = (accuracy_with_se(_get(cells, "count", s)) for s in ("mla", "nope", "rope"))
    m1, m2 = _diff("mla-nope", mla, nope), _diff("nope-rope", nope, rope)
    return (all_of([m1.outcome, m2.outcome]),
            f"mla {percent(mla[0])}, nope {percent(nope[0])}, rope {percent(rope[0])}; "
            f"{m1.text()}, {m2.text()}", [m1, m2])


def _deposit(record: dict) -> tuple["bool | None", list[Margin], str]:
    if not record.get("ablation_grid"):
        raise _Missing(f"{record['task']}/{record['scheme']} ablation grid")
    return first_layer_deposit(record)


def _rope_deposit(cells: Cells) -> Result:
    record = _get(cells, "distance", "rope")
    outcome, margins, text = _deposit(record)
    # a largest drop outside layer 0 decides it whatever the margins (no standard error)
    return outcome, text, margins if _top_layer(record) == 0 else []


def _top_layer(record: dict) -> int:
    """The layer of the largest single-head drop (as :func:`first_layer_deposit` finds it)."""
    grid = record["ablation_grid"]
    cells = [(float(q), layer) for layer, row in enumerate(grid) for q in row]
    return min(cells, key=lambda c: c[0])[1]


def _only_rope(cells: Cells) -> Result:
    _get(cells, "distance", "rope")
    rope = {s: _deposit(cells[("distance", s)])[0] for s in ROPE_FAMILY
            if ("distance", s) in cells}
    other = {s: _deposit(_get(cells, "distance", s))[0] for s in NON_ROPE}
    outcome = all_of([any_of(rope.values())] + [_not(o) for o in other.values()])

    # a model that did not learn distance has no deposit, and is named as such
    unlearned = [s for s in NON_ROPE if _learned(cells[("distance", s)]).outcome is False]

    def said(d: dict) -> str:
        return ", ".join(f"{s}{'?' if o is None else ''}" for s, o in d.items()
                         if o is not False) or "none"
    # nested any/all over many models: no one margin decides it
    return (outcome, f"deposits: RoPE models [{said(rope)}], others [{said(other)}] "
            f"(? undecided); did not learn distance: [{', '.join(unlearned) or 'none'}]", [])


def _no_deposit_if_learned(cells: Cells, task: str, scheme: str) -> Result:
    record = _get(cells, task, scheme)
    learned = _learned(record)
    if learned.outcome is False:
        return ("–", f"{scheme} did not learn {task} ({percent(record['accuracy'])}; "
                f"{learned.text()})", [learned])
    outcome, margins, text = _deposit(record)
    return all_of([learned.outcome, _not(outcome)]), text, margins


def _mla_removes(cells: Cells) -> Result:
    rope, rope_margins, rope_text = _deposit(_get(cells, "distance", "rope"))
    mla = _get(cells, "distance", "mla")
    learned = _learned(mla)
    if learned.outcome is False:
        return "–", f"mla did not learn distance ({percent(mla['accuracy'])})", [learned]
    mla_dep, mla_margins, mla_text = _deposit(mla)
    return (all_of([rope, learned.outcome, _not(mla_dep)]), f"{mla_text}; rope: {rope_text}",
            mla_margins + rope_margins)


def _k_near(cells: Cells, k: int) -> Result:
    part, full = accuracy_with_se(_get(cells, "distance", f"rope-k{k}")), accuracy_with_se(_get(cells, "distance", "rope"))
    m = _diff(f"k{k}-rope+{_pts(NEAR)}", part, full, offset=-NEAR)
    return m.outcome, f"rope-k{k} {percent(part[0])} vs rope {percent(full[0])}; {m.text()}", [m]


def _probe(cells: Cells) -> Result:
    return (*hybrid_displaces_the_encoding(cells), [])      # a probe share: no standard error


@dataclass(frozen=True)
class Claim2:
    """One claim under the 2026-11-29 rules."""

    number: str
    text: str
    rule: str
    apply: Callable[[Cells], Result]
    note: str = ""
    #: the rule is the conjunction of the margins it returns (and of conditions without a
    #: standard error, such as the deposit's layer): what a seed's distance from changing
    #: its outcome is read from (:func:`seed_distance`); not so for claims 8, 9a, 9b, 10, 12
    conjunction: bool = True


CLAIMS2: tuple[Claim2, ...] = (
    Claim2("1", "NoPE fails the distance task", "nope < half of the best MAIN",
           lambda c: _fails(c, "nope")),
    Claim2("2", "RoPE wins the distance task", "rope >= every other MAIN + 1 point", _rope_wins),
    Claim2("3", "absolute is second best on distance",
           "rope >= best absolute + 1 point, best absolute >= best of nope/alibi/t5 - 1 point",
           _absolute_second),
    Claim2("4", "ALiBi fails the distance task", "alibi < half of the best MAIN",
           lambda c: _fails(c, "alibi")),
    Claim2("5", "MLA is near-optimal on distance",
           "not saturated; mla within 5 points of the best MAIN", _mla_near_best, CLAIM5_NOTE),
    Claim2("6", "count: MLA > NoPE > RoPE", "mla > nope > rope (count)", _count_order),
    Claim2("7", "in RoPE models one head carries distance",
           "rope (distance) has a deposit: a single layer-0 head, others <= 5 points",
           _rope_deposit),
    Claim2("8", "the deposit pattern is specific to RoPE",
           "a RoPE model has a distance deposit, no nope/sinusoidal/learned/alibi/t5 has one",
           _only_rope, conjunction=False),
    Claim2("9a", "no deposit with NoPE (distance)",
           "judged only if nope learned distance: no deposit",
           lambda c: _no_deposit_if_learned(c, "distance", "nope"), conjunction=False),
    Claim2("9b", "no deposit with RoPE on count",
           "judged only if rope learned count: no deposit",
           lambda c: _no_deposit_if_learned(c, "count", "rope"), conjunction=False),
    Claim2("10", "MLA removes the pattern",
           "rope (distance) has a deposit; mla, judged only if it learned distance, has none",
           _mla_removes, conjunction=False),
    Claim2("11a", "RoPE on two heads still reaches ~90 %", "rope-k2 >= rope - 5 points",
           lambda c: _k_near(c, 2)),
    Claim2("11b", "RoPE on one head still reaches ~90 %", "rope-k1 >= rope - 5 points",
           lambda c: _k_near(c, 1)),
    Claim2("12", "Absolute+RoPE hybrid: additive directions displaced",
           "as 2026-11-25 (probe, no standard error)", _probe, conjunction=False),
)


def seed_distance(claim: Claim2, outcome: "bool | None | str",
                  margins: Sequence[Margin]) -> float | None:
    """How many standard errors a seed's decided outcome is from changing, for a rule that
    is the conjunction of its ``margins`` (``claim.conjunction``): a ✓ becomes ? once its
    weakest margin comes within one standard error, so ``min z``; a ✗ stays ✗ while any
    margin is decided false, so the largest ``|z|`` among those. ``None`` when it cannot be
    read so: an undecided or unjudged seed, another kind of rule, a ✗ decided by a
    condition without a standard error (the deposit's layer), an infinite margin (a
    difference without error)."""
    if not claim.conjunction or outcome not in (True, False) or not margins:
        return None
    if outcome is True:
        z = min(m.z for m in margins)
    else:
        false = [-m.z for m in margins if m.z <= -1]
        if not false:
            return None
        z = max(false)
    return None if math.isinf(z) else float(z)


def outcome_mark(outcome: "bool | None | str") -> str:
    """✓ holds, ✗ does not, ? undecided, – not judged."""
    return {True: "✓", False: "✗", None: "?"}.get(outcome, "–")   # type: ignore[arg-type]


def judge_margins(records: Sequence[CellRecord | dict], preset: str,
                  seeds: tuple[int, ...] = (0, 1, 2),
                  variants: tuple[str, ...] = ("intended", "faithful"),
                  claims: Sequence[Claim2] = CLAIMS2) -> list[dict[str, Any]]:
    """Every claim's rule per variant and seed, with margins, and its verdict.

    One row per claim: ``claim`` (:class:`Claim2`) and per variant ``{"seeds": [(outcome,
    text), ...], "margins": [[Margin, ...], ...], "verdict": str, "counts": {"✓": n, "✗": n,
    "?": n, "–": n}}``; ``outcome`` is ``True``, ``False``, ``None`` (undecided) or ``"–"``
    (not judged: a missing cell, a saturated task, a model that did not learn); ``margins``
    are the thresholded conditions each seed's rule read (none for claim 8's nested rule, the
    probe of claim 12 and a cell that is missing)."""
    views = seed_views(records, preset, variants, seeds)
    rows = []
    for claim in claims:
        row: dict[str, Any] = {"claim": claim}
        for variant in variants:
            results, margins = [], []
            for seed in seeds:
                cells = views[(variant, seed)]
                try:
                    outcome, text, read = claim.apply(cells)
                except _Missing as missing:
                    outcome, text, read = "–", f"missing {missing}", []
                results.append((outcome, text))
                margins.append(list(read))
            counts = {m: sum(outcome_mark(o) == m for o, _ in results) for m in "✓✗?–"}
            judged = counts["✓"] + counts["✗"] + counts["?"]
            verdict = ("holds" if counts["✓"] >= 2 else "does not hold" if counts["✗"] >= 2
                       else "undecided" if judged >= 2 else "not judged")
            row[variant] = {"seeds": results, "margins": margins, "verdict": verdict,
                            "counts": counts}
        rows.append(row)
    return rows
