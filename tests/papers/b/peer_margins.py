"""An independent peer of paper B's ``+levelled`` verdicts, written from the words of
docs/paper_b_rules.md ("Addendum, 2026-11-29 01:23 UTC") with nothing but ``math``: no
import from ``lens_possym``, so that a reading shared by mistake cannot agree with itself.

Records are plain mappings as ``docs/paper_b_results.json`` holds them. Where the rules
leave a choice, the peer takes the literal one and says so:

* claim 2's "rope >= every other MAIN scheme + 1 point" is a conjunction over every other
  scheme (the package compares rope with the best other one only; the two agree unless a
  worse scheme's standard error is far larger than the best one's);
* "the best" of a set is its highest accuracy; ties between models change no number;
* the deposit's "largest single-head drop" is the first in (layer, head) order among equal
  drops.

:func:`peer_verdicts` returns, per claim and variant, the per-seed marks (✓ ✗ ? –) and the
verdict, in the form the records file's ``"verdicts"`` hold them.
"""

from __future__ import annotations

import math

MAIN = ("nope", "sinusoidal", "learned", "alibi", "t5", "rope", "mla")
ROPE_MODELS = ("rope", "rope-k1", "rope-k2", "hybrid")
OTHERS = ("nope", "sinusoidal", "learned", "alibi", "t5")
#: the scoring size of records that keep none: the ``paper-length`` grids' 512 sentences
OLD_SIZE = 512
CLAIMS = ("1", "2", "3", "4", "5", "6", "7", "8", "9a", "9b", "10", "11a", "11b", "12")
#: the claims the ``+copies`` grid (distance only) is read for
COPIES_CLAIMS = ("1", "2", "3", "4", "5")

YES, NO, OPEN = True, False, None          # a condition: decided true, decided false, undecided


class Missing(Exception):
    """A cell a rule reads is not in the seed's records: the rule is not judged (–)."""


def decide(value: float, se: float) -> bool | None:
    """A condition ``value > 0`` with standard error ``se``: undecided within one error."""
    if se == 0:
        return OPEN if value == 0 else value > 0
    z = value / se
    return OPEN if abs(z) < 1 else z > 0


def both(*conditions: bool | None) -> bool | None:
    if NO in conditions:
        return NO
    return YES if all(c is YES for c in conditions) else OPEN


def either(*conditions: bool | None) -> bool | None:
    if YES in conditions:
        return YES
    return NO if all(c is NO for c in conditions) else OPEN


def negate(condition: bool | None) -> bool | None:
    return OPEN if condition is OPEN else not condition


def size(r: dict) -> int:
    return int(r.get("eval_size") or OLD_SIZE)


def acc(r: dict) -> tuple[float, float]:
    """Accuracy and its standard error (the record's, else binomial on its size)."""
    p = float(r["accuracy"])
    se = r.get("accuracy_se")
    return p, float(se) if se is not None else math.sqrt(p * (1 - p) / size(r))


def minus(a: tuple[float, float], b: tuple[float, float], k: float = 1.0,
          c: float = 0.0) -> tuple[float, float]:
    """``a - k b - c`` and its standard error (independent models)."""
    return a[0] - k * b[0] - c, math.sqrt(a[1] ** 2 + (k * b[1]) ** 2)


class Seed:
    """One variant and seed of a grid: its records by (task, scheme)."""

    def __init__(self, records: list[dict]):
        self.cells = {(r["task"], r["scheme"]): r for r in records}

    def __call__(self, task: str, scheme: str) -> dict:
        if (task, scheme) not in self.cells:
            raise Missing(f"{task}/{scheme}")
        return self.cells[(task, scheme)]

    def best(self, schemes, task: str = "distance") -> tuple[float, float]:
        return max((acc(self(task, s)) for s in schemes), key=lambda a: a[0])


def learned(r: dict) -> bool | None:
    p, se = acc(r)
    return decide(p - 0.5, se)


def deposit(r: dict) -> bool | None:
    """"A single head in the first layer", the others negligible (the addendum's words)."""
    if not r.get("ablation_grid"):
        raise Missing("ablation grid")
    p, se_p = acc(r)
    heads = [(p - float(q), layer, head) for layer, row in enumerate(r["ablation_grid"])
             for head, q in enumerate(row)]
    top = max(heads, key=lambda h: (h[0], -h[1], -h[2]))

    def drop_se(layer: int, head: int) -> float:
        if r.get("ablation_se") is not None:
            return float(r["ablation_se"][layer][head])
        q = float(r["ablation_grid"][layer][head])
        return math.sqrt((p * (1 - p) + q * (1 - q)) / size(r))

    conditions = [top[1] == 0, learned(r),
                  decide(*minus((top[0], drop_se(*top[1:])), (p, se_p), k=0.25))]
    conditions += [decide(0.05 - d, drop_se(layer, head)) for d, layer, head in heads
                   if (layer, head) != top[1:]]
    return both(*conditions)


def fails(cells: Seed, scheme: str) -> bool | None:
    best = cells.best(MAIN)
    return decide(*minus((0.5 * best[0], 0.5 * best[1]), acc(cells("distance", scheme))))


def claim(number: str, cells: Seed, variant: str) -> bool | None | str:
    """One seed's outcome: True, False, None (undecided) or "–" (not judged)."""
    d = lambda s: cells("distance", s)             # noqa: E731
    if number == "1":
        return fails(cells, "nope")
    if number == "2":
        rope = acc(d("rope"))
        return both(*(decide(*minus(rope, acc(d(s)), c=0.01)) for s in MAIN if s != "rope"))
    if number == "3":
        sin, lrn = acc(d("sinusoidal")), acc(d("learned"))
        absolute = lrn if lrn[0] > sin[0] else sin
        rope, rest = acc(d("rope")), cells.best(("nope", "alibi", "t5"))
        return both(decide(*minus(rope, absolute, c=0.01)),
                    decide(*minus(absolute, rest, c=-0.01)))
    if number == "4":
        return fails(cells, "alibi")
    if number == "5":
        best, mla = cells.best(MAIN), acc(d("mla"))
        if sum(acc(d(s))[0] >= 0.99 for s in MAIN) >= 2:
            return "–"                                      # saturated: not judged
        return decide(0.05 - (best[0] - mla[0]), math.hypot(best[1], mla[1]))
    if number == "6":
        c = lambda s: acc(cells("count", s))        # noqa: E731
        return both(decide(*minus(c("mla"), c("nope"))), decide(*minus(c("nope"), c("rope"))))
    if number == "7":
        return deposit(d("rope"))
    if number == "8":
        d("rope")
        rope_models = [deposit(cells.cells[("distance", s)]) for s in ROPE_MODELS
                       if ("distance", s) in cells.cells]
        return both(either(*rope_models), *(negate(deposit(d(s))) for s in OTHERS))
    if number in ("9a", "9b"):
        r = d("nope") if number == "9a" else cells("count", "rope")
        if learned(r) is NO:
            return "–"
        return both(learned(r), negate(deposit(r)))
    if number == "10":
        rope, mla = deposit(d("rope")), d("mla")
        if learned(mla) is NO:
            return "–"
        return both(rope, learned(mla), negate(deposit(mla)))
    if number in ("11a", "11b"):
        k = 2 if number == "11a" else 1
        return decide(*minus(acc(d(f"rope-k{k}")), acc(d("rope")), c=-0.05))
    if number == "12":
        hybrid = d("hybrid" if variant == "intended" else "rope").get("probe")
        sinusoidal = d("sinusoidal").get("probe")
        if not hybrid or not sinusoidal:
            raise Missing("probe")
        moved = lambda p: (p["aligned"][-1] - p["chance"]          # noqa: E731
                           <= 0.5 * (p["aligned"][0] - p["chance"]))
        return moved(hybrid) and not moved(sinusoidal)
    raise ValueError(number)


def mark(outcome: bool | None | str) -> str:
    return {True: "✓", False: "✗", None: "?"}.get(outcome, "–")   # type: ignore[arg-type]


def peer_verdicts(records: list[dict], grid: str, seeds=(0, 1, 2),
                  claims=CLAIMS) -> dict[tuple[str, str], tuple[list[str], str]]:
    """``{(claim, variant): ([mark per seed], verdict)}`` of ``grid``'s records."""
    out = {}
    for number in claims:
        for variant in ("intended", "faithful"):
            marks = []
            for seed in seeds:
                cells = Seed([r for r in records if (r["preset"], r["variant"], r["seed"])
                              == (grid, variant, seed)])
                try:
                    marks.append(mark(claim(number, cells, variant)))
                except Missing:
                    marks.append("–")
            judged = sum(m != "–" for m in marks)
            verdict = ("holds" if marks.count("✓") >= 2 else
                       "does not hold" if marks.count("✗") >= 2 else
                       "undecided" if judged >= 2 else "not judged")
            out[(number, variant)] = (marks, verdict)
    return out
