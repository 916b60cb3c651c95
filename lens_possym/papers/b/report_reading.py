r"""Paper B's "Reading the verdicts": the prose under docs/paper_b.md's tables, written from the
same committed records as the tables (:func:`reading_markdown`; ``lens-possym paper-b report
--preset paper-length`` writes it between ``BEGIN/END PAPER-LENGTH READING``).

Every number in it is computed here from the records (accuracies, drops, heads over 10
points, late gains, the verdicts of :func:`~lens_possym.papers.b.verdicts.judge`), from the
``+copies`` ceiling (:func:`~lens_possym.papers.b.report.copies_ceiling`, as the table beside
it) or from the paper's own numbers (:data:`PAPER`); the module's string literals hold no
number but claim names (a test checks it, and that the committed block regenerates
unchanged). Sentences that interpret a number are written only when the numbers bear them
out (a claim that holds in every seed, a ranking that changes with the seed...).
"""

from __future__ import annotations

import textwrap
from typing import Callable, Iterable

from ...errors import InvalidSelectionError
from .presets import ENCODER_PRESETS, MAIN, NON_ROPE, with_trigger_copies_name
from .records import CellRecord, as_dicts
from .report import copies_ceiling
from .verdicts import CLAIMS, LEVELLED, NEAR, SATURATED, Claim, judge, late_gain, percent

__all__ = ["PAPER", "NAMES", "reading_markdown", "points", "span", "and_join", "count_word", "wrap"]

#: the paper's numbers (paper B's tables; accuracy in %)
PAPER = {("distance", "rope"): 92.64, ("count", "rope"): 69.43, ("count", "nope"): 77.69,
         ("count", "mla"): 97.41, ("distance", "mla"): 88.34}
VARIANTS = ("intended", "faithful")
#: the records' ``heads_over_10``: heads whose ablation alone costs more than this (points)
HEADS_OVER = 10
#: how the prose names a scheme (the others by their label)
NAMES = {"alibi": "ALiBi", "t5": "T5", "mla": "MLA", "rope": "RoPE", "nope": "NoPE"}


def _claim(number: str) -> Claim:
    return next(c for c in CLAIMS if c.number == number)


def points(x: float) -> str:
    """Accuracy points, one decimal, ``100`` for a full score (as the prose writes it)."""
    return f"{100 * x:.0f}" if round(100 * x, 1) >= 100 else percent(x)


def span(values: Iterable[float], fmt: Callable[[float], str] = points) -> str:
    """``lo-hi`` of ``values`` as ``fmt`` writes them (one value when both agree)."""
    values = list(values)
    lo, hi = fmt(min(values)), fmt(max(values))
    return lo if lo == hi else f"{lo}-{hi}"


def _int_span(values: Iterable[int]) -> str:
    return span(values, lambda v: str(int(v)))


def and_join(items: list[str]) -> str:
    """``a``, ``a and b``, ``a, b and c``."""
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def counted(k: int, noun: str) -> str:
    """``k`` with ``noun`` in the number ``k`` takes (``"1 cell"``, ``"4 cells"``, ``"1,024
    cells"``), for counts that may be one while a grid is landing."""
    return f"{k:,} {noun}" + ("" if k == 1 else "s")


def _seeds_phrase(seeds: list[int]) -> str:
    return ("seed " if len(seeds) == 1 else "seeds ") + and_join([str(s) for s in seeds])


class _Grid:
    """One preset's records by ``(task, variant, scheme, seed)``."""

    def __init__(self, records: list[dict], preset: str, seeds: tuple[int, ...]):
        self.cells = {(r["task"], r["variant"], r["scheme"], r["seed"]): r for r in records
                      if r["preset"] == preset and r["seed"] in seeds}
        self.seeds = seeds

    def get(self, task: str, variant: str, scheme: str, seed: int) -> dict:
        return self.cells[(task, variant, scheme, seed)]

    def acc(self, task: str, variant: str, scheme: str, seed: int) -> float:
        return float(self.get(task, variant, scheme, seed)["accuracy"])

    def accs(self, task: str, scheme: str, variants: Iterable[str] = VARIANTS) -> list[float]:
        return [self.acc(task, v, scheme, s) for v in variants for s in self.seeds
                if (task, v, scheme, s) in self.cells]

    def per_seed(self, task: str, variant: str, scheme: str) -> str:
        return " / ".join(points(self.acc(task, variant, scheme, s)) for s in self.seeds)

    def best(self, task: str, variant: str, seed: int,
             among: Iterable[str] = MAIN) -> tuple[str, float]:
        return max(((x, self.acc(task, variant, x, seed)) for x in among), key=lambda p: p[1])

    def abl(self, task: str, variant: str, scheme: str, seed: int) -> dict:
        return self.get(task, variant, scheme, seed)["ablation"]

    def rising(self) -> list[dict]:
        """Cells that ended below saturation after gaining more than ``LEVELLED`` over their
        last quarter (the report's "Did the cells level off?" list)."""
        return [r for r in self.cells.values()
                if (late_gain(r) or 0.0) > LEVELLED and r["accuracy"] < SATURATED]


def _verdicts(records: list[dict], preset: str, seeds: tuple[int, ...]) -> dict[str, dict]:
    return {row["claim"].number: row for row in judge(records, preset, seeds)}


def _held(row: dict, variant: str, n: int) -> str:
    return f"{row[variant]['held']}/{n}"


def _everywhere(row: dict, n: int) -> bool:
    return all(row[v]["held"] == n for v in VARIANTS)


def _what_holds(g: _Grid, rows: dict[str, dict]) -> str:
    n = len(g.seeds)
    best = [g.best("distance", v, s)[1] for v in VARIANTS for s in g.seeds]
    parts = []
    if _everywhere(rows["1"], n):
        parts.append(f"NoPE fails distance (claim 1: {span(g.accs('distance', 'nope'))} % "
                     f"against {span(best)} %)")
    if _everywhere(rows["9"], n):
        parts.append("no deposit in NoPE nor in RoPE on count (claim 9)")
    if _everywhere(rows["11a"], n) and _everywhere(rows["11b"], n):
        parts.append("RoPE on one or two heads keeps distance (claims 11a/b: "
                     f"{span(g.accs('distance', 'rope-k1') + g.accs('distance', 'rope-k2'))} %)")
    text = "**What holds**: "
    if parts:
        text += and_join(parts) + ", in every seed and both variants. "
    six, faithful, intended = rows["6"], rows["6"]["faithful"], rows["6"]["intended"]
    order = ("mla", "nope", "rope")
    ranges = " > ".join(span(g.accs("count", x, ["faithful"])) for x in order)
    said = ("holds in every seed" if faithful["held"] == n else
            f"holds in {faithful['held']} of {n} seeds" if faithful["held"] else "does not hold")
    text += f"The faithful count ranking MLA > NoPE > RoPE (claim 6) {said} ({ranges} %)"
    top = [max(order, key=lambda x: g.acc("count", "intended", x, s)) for s in g.seeds]
    changes = len(set(top)) > 1
    text += (f", and the intended one {'holds' if intended['verdict'] == 'holds' else 'does not'}"
             f" (all three at {span([a for x in order for a in g.accs('count', x, ['intended'])])}"
             f" %{', their order changes with the seed' if changes else ''})")
    if six["faithful"]["verdict"] == "holds" and intended["verdict"] != "holds":
        text += (": the ranking is the official architecture's (keys and values from the "
                 "layer-0 embeddings in every model but MLA), as the `cpu` preset found.")
    else:
        text += "."
    return text


def _claim5(g: _Grid, c: _Grid, rows: dict[str, dict], ceilings: list[float], preset: str,
            copies_rows: dict[str, dict]) -> str:
    n, seeds = len(g.seeds), c.seeds
    five = copies_rows["5"]
    gaps = [c.best("distance", v, s)[1] - c.acc("distance", v, "mla", s)
            for v in VARIANTS for s in seeds]
    behind = [c.acc("distance", v, "rope", s) - c.acc("distance", v, "mla", s)
              for v in VARIANTS for s in seeds]
    ahead = sum(b < 0 for b in behind)
    below = [ceilings[i] - c.acc("distance", v, "mla", s)
             for v in VARIANTS for i, s in enumerate(seeds)]
    mla_best = [s for s in seeds if c.best("distance", "intended", s)[0] == "mla"]
    paper_gap = PAPER[("distance", "rope")] - PAPER[("distance", "mla")]
    verdict = five["intended"]["verdict"] if five["intended"]["verdict"] == \
        five["faithful"]["verdict"] else None
    text = (f"**Claim 5, on the official filler draw** (the `+copies` grid, {len(c.cells)} "
            f"cells; its best possible accuracy {' / '.join(points(x) for x in ceilings)} % in "
            f"seeds {' / '.join(str(s) for s in seeds)}, so it cannot saturate): MLA is within "
            f"{percent(max(gaps))} points of the best MAIN scheme in every seed of both "
            f"variants, so claim 5 **{verdict or 'is split'}** (intended "
            f"{_held(five, 'intended', n)}, faithful {_held(five, 'faithful', n)}). Intended: "
            f"MLA {c.per_seed('distance', 'intended', 'mla')} %, RoPE "
            f"{c.per_seed('distance', 'intended', 'rope')} %"
            + (f" (MLA the best scheme in {_seeds_phrase(mla_best)})" if mla_best else "")
            + f"; faithful, the paper's models: MLA {c.per_seed('distance', 'faithful', 'mla')} "
            f"%, RoPE {c.per_seed('distance', 'faithful', 'rope')} %. The paper has MLA "
            f"{paper_gap:.1f} points behind RoPE ({PAPER[('distance', 'mla')]} vs "
            f"{PAPER[('distance', 'rope')]} %); here MLA is at most {percent(max(behind))} "
            f"point{'s' if round(100 * max(behind), 1) != 1 else ''} behind RoPE"
            + (f" (and ahead of it in {count_word(ahead)} of the {count_word(len(behind))} seeds)"
               if ahead else "")
            + f", {span(below, percent)} points below the best possible"
            + (', so "near-optimal" holds.' if verdict == "holds" else "."))
    # claims 1-4 on the +copies grid, beside the main table
    one, two, three, four = (copies_rows[k] for k in ("1", "2", "3", "4"))
    text += (f" Claims 1-4 on this grid (beside, not instead of, the main table): NoPE "
             f"{'fails' if one['intended']['verdict'] == 'holds' else 'does not fail'} "
             f"({span(c.accs('distance', 'nope'))} %, {_held(one, 'intended', n)} intended, "
             f"{_held(one, 'faithful', n)} faithful); RoPE "
             + ("never wins by a point" if not two["intended"]["held"] + two["faithful"]["held"]
                else "wins by a point")
             + f" ({_held(two, 'intended', n)} intended, {_held(two, 'faithful', n)} faithful; "
             f"MLA within {percent(max(behind))} point of it or ahead); absolute is second in "
             f"{_held(three, 'intended', n)} intended seeds and {_held(three, 'faithful', n)} "
             f"faithful")
    second = []
    for s in seeds:
        holds = three["faithful"]["seeds"][seeds.index(s)][0]
        if holds:
            absolute = max(("sinusoidal", "learned"),
                           key=lambda x: c.acc("distance", "faithful", x, s))
            a = c.acc("distance", "faithful", absolute, s)
            second.append((s, absolute, a, c.acc("distance", "faithful", "rope", s) - a))
    if second:
        names = sorted({x[1] for x in second})
        text += (f" ({and_join(names)} {' / '.join(points(x[2]) for x in second)} % in faithful "
                 f"{_seeds_phrase([x[0] for x in second])}, "
                 f"{and_join([percent(x[3]) for x in second])} points below RoPE)")
    main_three = rows["3"]
    tie = span(g.accs("distance", "sinusoidal") + g.accs("distance", "rope"))
    text += (f", where the main table found {_held(main_three, 'intended', n)} intended and "
             f"{_held(main_three, 'faithful', n)} faithful (sinusoidal and RoPE there: {tie} %)")
    fails_at = [s for s, (h, _) in zip(seeds, four["faithful"]["seeds"]) if h]
    text += (f"; ALiBi {'does not fail' if four['faithful']['verdict'] != 'holds' else 'fails'}"
             f" (intended {span(c.accs('distance', 'alibi', ['intended']))} %; faithful "
             f"{c.per_seed('distance', 'faithful', 'alibi')} %"
             + (f", below half of the best only in {_seeds_phrase(fails_at)}, "
                f"{_held(four, 'faithful', n)}" if fails_at and len(fails_at) < n else "")
             + ").")
    still = [x for x in MAIN if any(r["scheme"] == x for r in c.rising())]
    if still:
        names = [NAMES.get(x, x) for x in still]
        names[0] = names[0][0].upper() + names[0][1:]
        decisive = {c.best("distance", v, s)[0] for v in VARIANTS for s in seeds} | {"mla"}
        text += (f" {and_join(names)} {'was' if len(names) == 1 else 'were'} still rising on this "
                 f"grid (the list above), so {'its row is a lower bound' if len(names) == 1 else 'their rows are lower bounds'}"
                 + ("; no claim-5 reading depends on them." if not decisive & set(still)
                    else "."))
    return text


def count_word(k: int) -> str:
    """``k`` as a word up to ten (the prose's "three of the six seeds")."""
    words = ("no", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten")
    return words[k] if 0 <= k < len(words) else str(k)


def _saturates(g: _Grid, rows: dict[str, dict]) -> str | None:
    top = [x for x in MAIN if all(a >= SATURATED for a in g.accs("distance", x))]
    if len(top) < 2:
        return None
    names = [NAMES.get(x, x) for x in top]
    four = rows["4"]
    half = all(h is False for v in ("faithful",) for h, _ in four[v]["seeds"])
    text = (f"**Distance saturates**: {and_join(names)} reach "
            f"{span([a for x in top for a in g.accs('distance', x)])} % in every seed of both "
            "variants")
    if rows["2"]["intended"]["verdict"] != "holds" and rows["3"]["intended"]["verdict"] != "holds":
        text += (', so "RoPE wins by a point" (claim 2) and "absolute is second" (claim 3) '
                 "cannot hold")
    if four["intended"]["verdict"] != "holds" and four["faithful"]["verdict"] != "holds":
        text += (f", and ALiBi does not fail (claim 4: intended "
                 f"{span(g.accs('distance', 'alibi', ['intended']))} %; faithful, with the "
                 f"official slopes, {span(g.accs('distance', 'alibi', ['faithful']))} %"
                 + (", above half of the best" if half else "") + ")")
    return text + (f". The paper's {PAPER[('distance', 'rope')]} % for RoPE comes from noisier "
                   "labels (its tokenizer and truncation; `docs/paper_b_rules.md`) at another "
                   "size and budget.")


def _deposit(g: _Grid) -> str:
    distance = [r for (t, *_), r in g.cells.items() if t == "distance"]
    found = sorted((r for r in distance if r["ablation"]["deposit"]),
                   key=lambda r: (r["variant"] != "faithful", r["scheme"], r["seed"]))

    def one(r: dict) -> str:
        a = r["ablation"]
        name = NAMES.get(r["scheme"], r["scheme"])
        return (f"{'the ' if r['variant'] == 'intended' else ''}{r['variant']} {name} seed "
                f"{r['seed']} (head {a['top_head'][0]}.{a['top_head'][1]}: "
                f"{percent(a['top_drop'])}{' points' if r is found[0] else ''}, next "
                f"{percent(a['second_drop'])})")

    text = (f"**The deposit pattern** (claims 7, 8, 10) is met by {len(found)} of the "
            f"{len(distance)} distance models" + (": " + and_join([one(r) for r in found])
                                                    if found else "") + ".")
    n = len(g.seeds)
    tops = [g.abl("distance", "faithful", "rope", s)["top_drop"] for s in g.seeds]
    seconds = [g.abl("distance", "faithful", "rope", s)["second_drop"] for s in g.seeds]
    passes = sum(bool(g.abl("distance", "faithful", "rope", s)["deposit"]) for s in g.seeds)
    text += (f" Faithful RoPE, the paper's model, loses about {round(sum(tops) / n * 100, -1):.0f}"
             f" points to one head in **every** seed ({' / '.join(percent(t) for t in tops)}, "
             f'the paper\'s "{_claim("7").paper}"), but the next head costs {span(seconds, lambda x: f"{100 * x:.0f}")} '
             f'points, so the rule\'s "twice the second" passes in {count_word(passes)} seed'
             f"{'' if passes == 1 else 's'} of {count_word(n)}.")
    non_rope = [r for r in distance if r["scheme"] in NON_ROPE and r["ablation"]["deposit"]]
    first = g.seeds[0]
    examples = [(x, g.abl("distance", "intended", x, first)) for x in ("sinusoidal", "alibi")]
    if not non_rope:
        text += (" No non-RoPE model meets the rule in any seed; their top and second drops are "
                 "both large (" + ", ".join(
                     f"{NAMES.get(x, x)} {percent(a['top_drop'])} and "
                     f"{percent(a['second_drop'])}" + (" points" if x == "sinusoidal" else "")
                     for x, a in examples)
                 + f", intended, seed {first}): each of several heads is needed, none alone "
                 "carries the task.")
    over = [g.abl("distance", "intended", "rope", s)["heads_over_10"] for s in g.seeds]
    text += (f" Intended RoPE spreads the task too ({_int_span(over)} heads over "
             f"{HEADS_OVER} points).")
    rope_only = not non_rope and not any(r["scheme"] == "mla" for r in found)
    text += (" So the data say: **a single head carrying about "
             f"{round(sum(tops) / n * 100, -1):.0f} % reproduces in the official RoPE model; the "
             f"deposit as the rule defines it is rare ({len(found)} of {len(distance)})"
             + (", and seen only in models with RoPE.**" if rope_only else ".**")
             + ' MLA "removes" nothing that was there (claim 10 needs a RoPE deposit in the '
             "same seed).")
    return text


def _seed_variance(g: _Grid) -> str:
    groups = sorted({k[:3] for k in g.cells}, key=str)
    spread = []
    for t, v, x in groups:
        accs = [g.acc(t, v, x, s) for s in g.seeds if (t, v, x, s) in g.cells]
        if len(accs) == len(g.seeds):
            spread.append((max(accs) - min(accs), t, v, x))
    spread.sort(reverse=True)
    (_, t1, v1, x1), (_, t2, v2, x2) = spread[:2]
    accs = [g.acc(t1, v1, x1, s) for s in g.seeds]
    hi = max(range(len(accs)), key=lambda i: accs[i])
    low = [i for i in range(len(accs)) if i != hi]
    gains = [late_gain(g.get(t1, v1, x1, g.seeds[i])) or 0.0 for i in low]
    name = NAMES.get(x1, x1)
    return (f"**Seed variance is large** where a scheme learns late: {v1} {name} on {t1} "
            f"reaches {points(accs[hi])} % in seed {g.seeds[hi]} and "
            f"{' / '.join(points(accs[i]) for i in low)} % in "
            f"{_seeds_phrase([g.seeds[i] for i in low])} (still rising at the end: "
            f"{and_join(['+' + percent(x) for x in gains])} points over the last quarter); "
            f"{x2} on {t2}{'' if v2 == v1 else ' ' + v2} {g.per_seed(t2, v2, x2)} %. The `cpu` "
            f"preset's reading of {name} as a budget artefact fits: with the larger learning "
            f"rate {count_word(sum(a >= 0.9 for a in accs))} seed of {count_word(len(accs))} learns the "
            "task.")


def _still_rising(g: _Grid, c: _Grid, rows: dict[str, dict]) -> str:
    main, copies = g.rising(), c.rising()
    total = len(main) + len(copies)
    late = [late_gain(g.get("count", "faithful", x, s)) or 0.0
            for x in ("nope", "rope") for s in g.seeds]
    top = span(g.accs("distance", "rope") + g.accs("distance", "sinusoidal"))
    k1 = [(s, g.acc("distance", "faithful", "rope-k1", s)) for s in g.seeds]
    s_low, a_low = min(k1, key=lambda p: p[1])
    rising_k1 = (late_gain(g.get("distance", "faithful", "rope-k1", s_low)) or 0) > LEVELLED
    deposit_models = span([a for x in ("rope", "hybrid", "mla") for a in g.accs("distance", x)])
    spread = [g.abl("count", v, "rope", s)["heads_over_10"] for v in VARIANTS for s in g.seeds]
    return (f"**Cells still rising** (the list above: {total} of the "
            f"{len(g.cells) + len(c.cells)} cells, {len(main)} of the {len(g.cells)} main ones "
            f"and {len(copies)} of the {len(c.cells)} `+copies` ones, ended below "
            f"{SATURATED * 100:.0f} % after gaining more than {LEVELLED * 100:.0f} points in the "
            "last quarter, while the learning rate decayed to zero). The verdicts that read "
            "such cells: claim 6 faithful (NoPE and RoPE on count gained "
            f"{span(late, lambda x: f'{100 * x:.0f}')} points late; longer training could "
            "narrow MLA's lead) and claim 4 faithful (ALiBi rising, which moves it away from "
            '"fails", not towards it). More training cannot turn claims 1-3 (they read NoPE at '
            f"chance and schemes already at {top} %), nor 11 (faithful RoPE on one head, "
            f"{points(a_low)} % in seed {s_low}{' and rising' if rising_k1 else ''}, is already "
            f"within the rule's {NEAR * 100:.0f} points); the deposit claims read models at {deposit_models} "
            f"%, and claim 9's count models spread the task over {_int_span(spread)} heads.")


def reading_markdown(records: list[CellRecord | dict], preset: str,
                     seeds: tuple[int, ...] = (0, 1, 2), *, command: str = "") -> str:
    """The "Reading the verdicts" section for ``preset`` (and its ``+copies`` grid) from the
    committed records: one bullet per reading, every number computed from the records."""
    records = as_dicts(records)
    copies = with_trigger_copies_name(preset)
    g, c = _Grid(records, preset, seeds), _Grid(records, copies, seeds)
    try:
        rows, copy_rows = _verdicts(records, preset, seeds), _verdicts(records, copies, seeds)
        ceilings = [copies_ceiling(ENCODER_PRESETS[preset], s)[0] for s in seeds]
        bullets = [_what_holds(g, rows), _claim5(g, c, rows, ceilings, preset, copy_rows),
                   _saturates(g, rows), _deposit(g), _seed_variance(g),
                   _still_rising(g, c, rows)]
    except (KeyError, ValueError, InvalidSelectionError):
        # a grid still running, or one without its +copies grid: nothing to read yet
        bullets = [f"Not written yet: the reading needs every cell of `{preset}` and "
                   f"`{copies}` in seeds {', '.join(str(s) for s in seeds)}; the records "
                   f"hold {len(g.cells)} and {len(c.cells)}."]
    seed_txt = ", ".join(str(s) for s in seeds)
    out = [f"<!-- written by `{command or 'lens-possym paper-b report --preset ' + preset}`"
           "; do not edit -->", "",
           f"### Reading the verdicts (main grid: {len(g.cells)} cells; claim 5's grid: "
           f"{len(c.cells)} cells; seeds {seed_txt})", "",
           wrap(f"Written by `{command or 'lens-possym paper-b report --preset ' + preset}` "
                 "from the records of the tables above, every number computed from them; "
                 "claim 5 is read on the `+copies` grid.", ""), ""]
    out += [wrap(text, "* " if len(bullets) > 1 else "") for text in bullets if text]
    return "\n".join(out) + "\n"


def wrap(text: str, bullet: str) -> str:
    """``text`` in lines of at most 92 characters (a number is never parted from its
    ``%``), as a bullet when ``bullet`` is ``"* "``."""
    glued = text.replace(" %", "\0%")
    lines = textwrap.fill(glued, width=92, initial_indent=bullet,
                          subsequent_indent=" " * len(bullet), break_on_hyphens=False,
                          break_long_words=False)
    return lines.replace("\0", " ")

