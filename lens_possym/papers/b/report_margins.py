r"""Paper B's verdicts under the rules of 2026-11-29 (:mod:`.margins`), written from the
records only: every number in the block's tables and sentences is read from the records
(or from the rules' constants), none is typed by hand.

:func:`margins_markdown` gives, for a preset: the verdict table with each seed's margins in
standard errors and "undecided" verdicts; claim 5 on the preset's ``+copies`` grid, marked
as decided on a grid added after the main one saturated; the change from the 2026-11-25
verdicts (:func:`~.verdicts.judge`) claim by claim, seed by seed; accuracies with their
standard errors and scoring sizes; and the budget check (every cell's scoring sentences,
accuracy ± standard error, steps, gain over the last 20 % and the last quarter of its steps,
and whether it levelled off by the rule, with how many cells were scored on the
:data:`~.levelled.SCORING_SIZE` sentences of the 2026-11-29 rules).
"""

from __future__ import annotations

from typing import Any

from ...errors import InvalidSelectionError
from .levelled import (EXTENSION_LR_SCALE, EXTENSION_RULE_DATE, LEVEL_GAIN, LEVEL_WINDOW,
                       SCORING_SIZE, STEP_CAP, WINDOW_RULE_DATE, levelled_off,
                       reference_step, rule_gain, window_gain)
from .margins import (CLAIM5_NOTE, LEARNED, NEGLIGIBLE, RELATIVE, RULES_DATE, accuracy_with_se,
                      judge_margins, outcome_mark, record_size)
from .presets import MAIN, with_trigger_copies_name
from .records import CellRecord, as_dicts
from .report_reading import counted
from .verdicts import judge

__all__ = ["margins_markdown", "levelling_rows", "with_se"]

_DISTANCE = ("1", "2", "3", "4", "5")
_ORDER = list(MAIN) + ["rope-k1", "rope-k2", "hybrid"]


def _table(rows: list[dict[str, Any]], seeds: tuple[int, ...], note5: bool) -> list[str]:
    out = ["| # | claim | rule | intended, per seed | verdict | faithful, per seed | verdict |",
           "|---|---|---|---|---|---|---|"]
    for row in rows:
        c = row["claim"]
        cells = []
        for variant in ("intended", "faithful"):
            v = row[variant]
            per = "<br>".join(f"s{s}: {outcome_mark(o)} {text}"
                              for s, (o, text) in zip(seeds, v["seeds"]))
            counts = " ".join(f"{n}{m}" for m, n in v["counts"].items() if n)
            cells += [per, f"**{v['verdict']}** ({counts})"]
        rule = c.rule + (f" *({c.note})*" if note5 and c.note else "")
        out.append(f"| {c.number} | {c.text} | {rule} | " + " | ".join(cells) + " |")
    return out


def _old_number(new: str) -> str:
    return new[:-1] if new in ("9a", "9b") else new


def _changes(records: list[dict], preset: str, new_rows: list[dict], seeds: tuple[int, ...],
             claims: tuple[str, ...] | None = None) -> list[str]:
    """Claim by claim and variant: the 2026-11-25 verdict, the 2026-11-29 one and, where they
    differ, each seed's old and new outcome with what the new rule read."""
    old = {r["claim"].number: r for r in judge(records, preset, seeds)}
    lines, changed = [], 0
    for row in new_rows:
        number = row["claim"].number
        if claims is not None and number not in claims:
            continue
        before = old.get(_old_number(number))
        if before is None:
            continue
        for variant in ("intended", "faithful"):
            a, b = before[variant]["verdict"], row[variant]["verdict"]
            if a == b:
                continue
            changed += 1
            seeds_said = "; ".join(
                f"s{s}: {outcome_mark(o1)} → {outcome_mark(o2)} ({text})"
                for s, (o1, _), (o2, text) in zip(seeds, before[variant]["seeds"],
                                                 row[variant]["seeds"]))
            lines.append(f"| {number} | {variant} | {a} | **{b}** | {seeds_said} |")
    head = [f"{counted(changed, 'verdict')} {'differs' if changed == 1 else 'differ'} from the "
            "2026-11-25 rules' on the same records"
            + (":" if changed else "."), ""]
    if changed:
        head += ["| # | variant | 2026-11-25 | 2026-11-29 | per seed: old → new (what the new "
                 "rule read) |", "|---|---|---|---|---|"]
    return head + lines


def levelling_rows(records: list[dict]) -> list[tuple[dict, dict[str, Any]]]:
    """Each record with its budget check: the record's ``levelling`` or, for older records,
    the same figures computed from its ``history`` (no extension, so the rule's window is the
    last 20 % of its evaluations)."""
    out = []
    for r in records:
        info = r.get("levelling")
        if info is not None and "gain_rule" not in info:
            raise InvalidSelectionError(
                f"the {r['preset']} record {r['task']} {r['variant']} {r['scheme']} seed "
                f"{r['seed']} was levelled under a rule before the addendum of "
                f"{WINDOW_RULE_DATE} (its levelling has no gain_rule); withdraw it and derive "
                "it again (`lens-possym paper-b queue N --levelled` does, from its runs)")
        if info is None:
            history = r.get("history") or []
            info = {"steps": r.get("steps"), "extensions": 0,
                    "since": reference_step(history), "gain_rule": rule_gain(history),
                    "gain_last_fifth": window_gain(history, LEVEL_WINDOW),
                    "gain_last_quarter": window_gain(history, 0.25),
                    "levelled": levelled_off(history)}
        out.append((r, info))
    return out


def _gain(x: float | None) -> str:
    return "—" if x is None else f"{100 * x:+.1f}"


def rule_gain_text(x: float | None) -> str:
    """The gain the levelling rule read, in points to two decimals: the loop's 1,024
    sentences move it in steps of 0.098 points, and at one decimal a gain of 0.977 points
    (levelled off: less than 1) would print as +1.0."""
    return "—" if x is None else f"{100 * x:+.2f}"


def _since(step: int | None) -> str:
    return "—" if step is None else f"{step:,}"


def _levelling_block(records: list[dict], seeds: tuple[int, ...]) -> list[str]:
    rows = levelling_rows(sorted(records, key=lambda r: (r["preset"], r["task"], r["variant"],
                                                         _ORDER.index(r["scheme"])
                                                         if r["scheme"] in _ORDER else 99,
                                                         r["seed"])))
    rows = [(r, i) for r, i in rows if r["seed"] in seeds]
    flat = [(r, i) for r, i in rows if i["levelled"]]
    rising = [(r, i) for r, i in rows if not i["levelled"]]
    sizes = [record_size(r) for r, _ in rows]
    by_size = sorted(set(sizes), reverse=True)
    scored = sum(n >= SCORING_SIZE for n in sizes)
    out = ["", f"### Budget check: did every cell level off? (rule: less than "
           f"{LEVEL_GAIN * 100:g} point gained over the last {LEVEL_WINDOW:.0%} of its steps, "
           f"from the latest end of one of its runs there, if any; cap {STEP_CAP:,} steps; "
           f"extensions at {EXTENSION_LR_SCALE:g}x the peak learning rate; addenda of "
           f"{EXTENSION_RULE_DATE} and {WINDOW_RULE_DATE})", "",
           f"{len(flat)} of {counted(len(rows), 'cell')} levelled off by the rule; "
           f"{len(rising)} did not"
           + (": " + ", ".join(f"{'+copies ' if r['preset'].endswith('+copies') else ''}"
                               f"{r['task']} {r['variant']} {r['scheme']} s{r['seed']} "
                               f"({rule_gain_text(i['gain_rule'])})" for r, i in rising)
              if rising else "") + ". Scoring sentences per cell: "
           + ", ".join(f"{n:,} ({counted(sizes.count(n), 'cell')})" for n in by_size)
           + f"; {scored} of {counted(len(rows), 'cell')} scored on at least the "
           f"{SCORING_SIZE:,} of the "
           "2026-11-29 rules.", "",
           "| grid | task | variant | scheme | seed | sentences | accuracy ± SE | steps | "
           "extensions | loop-accuracy gain by the rule (from step) | gain, last quarter "
           "| levelled |", "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r, i in rows:
        p, se = accuracy_with_se(r)
        out.append(f"| {r['preset']} | {r['task']} | {r['variant']} | {r['scheme']} | {r['seed']} "
                   f"| {record_size(r):,} | {with_se(p, se)} "
                   f"| {'—' if i['steps'] is None else format(i['steps'], ',')} "
                   f"| {i['extensions']} | {rule_gain_text(i['gain_rule'])} "
                   f"({_since(i['since'])}) | "
                   f"{_gain(i['gain_last_quarter'])} | {'yes' if i['levelled'] else '**no**'} |")
    return out


def with_se(p: float, se: float) -> str:
    """An accuracy and its standard error in points, ``"92.6 ± 0.4"``: one decimal, or two
    where a nonzero error would print as 0.0 (``0.9990`` on 4,096 sentences: ``"99.90 ±
    0.05"``), so "± 0.0" always means no error (every sentence right, or every one wrong)."""
    digits = 2 if 0 < 100 * se < 0.05 else 1
    return f"{100 * p:.{digits}f} ± {100 * se:.{digits}f}"


def _accuracy_block(mine: list[dict], preset: str, seeds: tuple[int, ...]) -> list[str]:
    index = {(r["task"], r["variant"], r["scheme"], r["seed"]): r for r in mine}
    sizes = sorted({record_size(r) for r in mine})
    schemes = sorted({r["scheme"] for r in mine},
                     key=lambda s: _ORDER.index(s) if s in _ORDER else len(_ORDER))
    out = ["", f"### Accuracy ± standard error (%, {' / '.join(f'{n:,}' for n in sizes)} "
           f"scoring sentences per cell), preset `{preset}`, seeds "
           f"{', '.join(map(str, seeds))}", "",
           "| scheme | distance intended | distance faithful | count intended | count faithful |",
           "|---|---|---|---|---|"]
    for scheme in schemes:
        cells = []
        for task in ("distance", "count"):
            for variant in ("intended", "faithful"):
                got = [index.get((task, variant, scheme, s)) for s in seeds]
                cells.append("—" if not any(got) else " / ".join(
                    "·" if g is None else with_se(*accuracy_with_se(g))
                    for g in got))
        out.append(f"| {scheme} | " + " | ".join(cells) + " |")
    return out


def margins_markdown(records: list[CellRecord | dict], preset: str,
                     seeds: tuple[int, ...] = (0, 1, 2), *, command: str = "") -> str:
    """docs/paper_b.md's block of ``preset`` under the 2026-11-29 rules (module docstring)."""
    records = as_dicts(records)
    rows = judge_margins(records, preset, seeds)
    mine = [r for r in records if r["preset"] == preset]
    copies = with_trigger_copies_name(preset)
    has_copies = any(r["preset"] == copies for r in records)
    main_rows = [r for r in rows if not (has_copies and r["claim"].number == "5")]
    out = [f"<!-- written by `{command}`; do not edit -->", "",
           f"### Verdicts under the rules of {RULES_DATE}, preset `{preset}` (seeds "
           f"{', '.join(map(str, seeds))}; docs/paper_b_rules.md, last addendum)", "",
           "Each seed: ✓ holds, ✗ does not, ? undecided (a threshold within one standard "
           "error: |z| < 1, z = margin / standard error), – not judged. A claim **holds** with "
           "two ✓, **does not hold** with two ✗, is **undecided** otherwise when judged in at "
           "least two seeds. Deposit: the largest single-head drop in layer 0, at least "
           f"{RELATIVE:.0%} of the accuracy, every other head at most {NEGLIGIBLE * 100:g} "
           f"points, in a model that learned its task (accuracy >= {LEARNED:.0%}).", "",
           *_table(main_rows, seeds, note5=False)]
    if has_copies:
        copy_rows = judge_margins(records, copies, seeds)
        five = [r for r in copy_rows if r["claim"].number == "5"]
        said = ", ".join(f"{v} **{five[0][v]['verdict']}**" for v in ("intended", "faithful"))
        out += ["", f"**Claim 5** is read on `{copies}` ({CLAIM5_NOTE}): {said}. Claims 1-5 "
                f"on that grid:", "", *_table([r for r in copy_rows
                                              if r["claim"].number in _DISTANCE], seeds, True)]
    out += ["", f"### What changed from the 2026-11-25 rules (preset `{preset}`)", "",
            *_changes(records, preset, main_rows, seeds)]
    if has_copies:
        out += ["", f"On `{copies}` (claims 1-5):", "",
                *_changes(records, copies, judge_margins(records, copies, seeds), seeds,
                          _DISTANCE)]
    out += _accuracy_block(mine, preset, seeds)
    out += _levelling_block([r for r in records if r["preset"] in (preset, copies)], seeds)
    return "\n".join(out) + "\n"
