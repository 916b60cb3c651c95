r"""Paper B's "Reading the ``+levelled`` verdicts": the prose under the ``+levelled`` tables of
docs/paper_b.md, written from the same committed records as those tables
(:func:`levelled_reading_markdown`; ``lens-possym paper-b report --preset paper-length
--levelled`` writes it between ``BEGIN/END PAPER-LENGTH+LEVELLED READING``).

Every number in it is computed here from the ``<preset>+levelled`` and
``<preset>+levelled+copies`` records (accuracies and their standard errors, scoring sizes,
the budget check of :func:`~lens_possym.papers.b.report_margins.levelling_rows`, the
single-head drops) through the rules of 2026-11-29 (:func:`~lens_possym.papers.b.margins.
judge_margins`: each threshold's margin ``z`` in standard errors), from the verdicts of
record on the ``<preset>`` records (:func:`~lens_possym.papers.b.verdicts.judge`, the
2026-11-25 rules) or from the code's constants (:mod:`~lens_possym.papers.b.levelled`,
:mod:`~lens_possym.papers.b.margins`); the module's string literals hold no number (a test
checks it). The grid runs over several sessions, so every sentence is written for a partial
grid too: what a seed lacks is counted, never guessed.

Bullets, in order: the grid so far (cells with records, scoring sizes, levelled off or
not, with the largest remaining gains); the verdicts per variant, claim 5 with its note;
the seeds within one standard error of a threshold; the decided verdicts nearest to a
threshold; the deposit as the paper words it; the models that did not learn their task;
what changed from the verdicts of record and the cells whose accuracy moved most.
"""

from __future__ import annotations

import math
from typing import Any, Iterable

from ...errors import InvalidSelectionError
from .cells import grid_cells
from .levelled import (LEVEL_GAIN, LEVEL_WINDOW, SCORING_SIZE, STEP_CAP, levelled_name)
from .margins import (CLAIM5_NOTE, LEARNED, NEGLIGIBLE, RELATIVE, RULES_DATE, Margin,
                      accuracy_with_se, first_layer_deposit, judge_margins, record_size,
                      seed_distance)
from .presets import ENCODER_PRESETS, with_trigger_copies, with_trigger_copies_name
from .records import CellRecord, as_dicts
from .report_margins import levelling_rows, rule_gain_text
from .report_reading import NAMES, and_join, count_word, counted, span, wrap
from .verdicts import RECORD_RULES_DATE, judge, percent

__all__ = ["levelled_reading_markdown", "VERDICTS", "NEAREST", "MOVED"]

VARIANTS = ("intended", "faithful")
#: the verdicts in the order the prose lists them
VERDICTS = ("holds", "does not hold", "undecided", "not judged")
#: how many decided verdicts, largest remaining gains and moved accuracies the prose names
NEAREST = 3
MOVED = 3
#: the claims read on the ``+copies`` grid (claim 5 is why it exists)
_DISTANCE = ("1", "2", "3", "4", "5")


def _cell_name(r: dict[str, Any]) -> str:
    return (f"{'+copies ' if r['preset'].endswith('+copies') else ''}{r['task']} "
            f"{r['variant']} {r['scheme']} s{r['seed']}")


def _n(n: float) -> str:
    """A count with thousands separators (``4096`` -> ``"4,096"``)."""
    return format(int(n), ",")


def _z(z: float) -> str:
    return f"{z:+.1f}"


def _claims_phrase(numbers: list[str]) -> str:
    return ("claim " if len(numbers) == 1 else "claims ") + and_join(numbers)


def _expected(base: str, seeds: tuple[int, ...]) -> tuple[int, int]:
    """Cells of ``base``'s grid and of its ``+copies`` grid in ``seeds`` (what the levelled
    queues train)."""
    out = []
    for preset in (ENCODER_PRESETS[base], with_trigger_copies(ENCODER_PRESETS[base])):
        out.append(len(grid_cells(seeds=seeds, tasks=tuple(preset.tasks), preset=preset,
                                  n_heads=preset.model["n_heads"])))
    return out[0], out[1]


def _progress(main: list[dict], copies: list[dict], name: str, copies_name: str,
              expected: tuple[int, int]) -> str:
    rows = levelling_rows(main + copies)
    sizes = [record_size(r) for r, _ in rows]
    small = [r for r, _ in rows if record_size(r) < SCORING_SIZE]
    flat = [(r, i) for r, i in rows if i["levelled"]]
    rising = sorted(((r, i) for r, i in rows if not i["levelled"]),
                    key=lambda ri: -(ri[1]["gain_rule"] or 0.0))
    capped = [r for r, i in rising if (i["steps"] or 0) >= STEP_CAP]
    text = (f"**The grid so far**: {len(main)} of the {expected[0]} cells of `{name}` and "
            f"{len(copies)} of the {expected[1]} of `{copies_name}` have records"
            + ("" if (len(main), len(copies)) == expected else
               " (a seed that lacks a cell a rule reads is \"–\" in the tables above)")
            + f"; each is scored on {span(sizes, _n)} held-out "
            f"sentences" + (f" (the rule's {SCORING_SIZE:,} or more)" if not small else
                            f", {len(small)} below the rule's {SCORING_SIZE:,}: "
                            + ", ".join(f"{_cell_name(r)} ({record_size(r):,})" for r in small))
            + ".")
    if flat:
        steps = [i["steps"] for _, i in flat if i["steps"] is not None]
        extensions = [i["extensions"] for _, i in flat]
        text += (f" {len(flat)} of the {len(rows)} levelled off by the rule (less than "
                 f"{LEVEL_GAIN * 100:g} point of loop accuracy gained over the last "
                 f"{LEVEL_WINDOW * 100:g} % of their steps, from the latest end of one of their "
                 "runs there, if any), after "
                 f"{span(extensions, lambda k: str(int(k)))} extension"
                 f"{'' if set(extensions) == {1} else 's'} ("
                 f"{span(steps, _n)} steps).")
    if rising:
        named = rising[:NEAREST]
        text += (f" {len(rising)} did not"
                 + (f", {len(capped)} of them at the {STEP_CAP:,}-step cap" if capped else "")
                 + f"; {'the largest gains' if len(rising) > len(named) else 'their gains'} "
                 "by the rule: "
                 + ", ".join(f"{_cell_name(r)} ({rule_gain_text(i['gain_rule'])} points)"
                             for r, i in named)
                 + " (every one in the budget check above). A verdict that reads such a cell "
                 "compares schemes still learning.")
    else:
        text += " Every cell levelled off by the rule."
    return text


#: how the prose says a verdict of one claim and of several
_SAY = {"holds": ("holds", "hold"), "does not hold": ("does not hold", "do not hold"),
        "undecided": ("is undecided", "are undecided"),
        "not judged": ("is not judged", "are not judged")}


def _verdict_lists(rows: list[dict], five: dict | None) -> str:
    parts = []
    for variant in VARIANTS:
        said = []
        for verdict in VERDICTS:
            numbers = [r["claim"].number for r in rows if r[variant]["verdict"] == verdict]
            if numbers:
                said.append(f"{_claims_phrase(numbers)} {_SAY[verdict][len(numbers) > 1]}")
        parts.append(f"{variant.capitalize()}: " + "; ".join(said) + ".")
    text = ("**Verdicts** (✓ in two seeds holds, ✗ in two does not, ? is a seed within one "
            "standard error of a threshold). " + " ".join(parts))
    if five is not None:
        text += (f" Claim 5 is read on the `+copies` grid ({CLAIM5_NOTE}): intended "
                 f"**{five['intended']['verdict']}**, faithful **{five['faithful']['verdict']}**.")
    return text


def _labelled(rows: list[dict], copies_rows: list[dict]) -> list[tuple[str, dict]]:
    """``(where, row)``: the main grid's rows (claim 5 there only without a ``+copies``
    grid) and the ``+copies`` grid's claims 1-5."""
    out = [("", r) for r in rows]
    out += [(" on `+copies`", r) for r in copies_rows if r["claim"].number in _DISTANCE]
    return out


def _undecided(labelled: list[tuple[str, dict]], seeds: tuple[int, ...]) -> str | None:
    found = []
    for where, row in labelled:
        for variant in VARIANTS:
            v = row[variant]
            close = []
            for seed, (outcome, _), margins in zip(seeds, v["seeds"], v["margins"]):
                if outcome is None:
                    near = [m for m in margins if abs(m.z) < 1]
                    close.append(f"s{seed}" + (f" ({', '.join(m.text() for m in near)})"
                                              if near else ""))
            if close:
                found.append(f"claim {row['claim'].number} {variant}{where}, "
                             f"{v['verdict']}: {', '.join(close)}")
    if not found:
        judged = any(o != "–" for _, row in labelled for v in VARIANTS
                     for o, _ in row[v]["seeds"])
        return ("**Within one standard error**: none of the judged seeds; each is at least "
                "one standard error from every threshold it reads." if judged else None)
    return ("**Within one standard error** (the seeds marked ?, with the margins within one "
            "standard error of their threshold): " + "; ".join(found) + ".")


def _nearest(labelled: list[tuple[str, dict]], seeds: tuple[int, ...]) -> str | None:
    decided = []
    for where, row in labelled:
        for variant in VARIANTS:
            v = row[variant]
            want = {"holds": True, "does not hold": False}.get(v["verdict"])
            if want is None:
                continue
            near = [(d, seed) for seed, (outcome, _), margins
                    in zip(seeds, v["seeds"], v["margins"]) if outcome is want
                    for d in [seed_distance(row["claim"], outcome, margins)] if d is not None]
            if near:
                d, seed = min(near)
                decided.append((d, f"claim {row['claim'].number} {variant}{where} "
                                   f"({v['verdict']}; s{seed}: {d:.1f} standard errors)"))
    if not decided:
        return None
    decided.sort(key=lambda d: d[0])
    named, rest = decided[:NEAREST], decided[NEAREST:]
    return ("**Decided verdicts nearest to changing** (rules that are a conjunction of "
            "thresholds; for each verdict, the seed that agrees with it and is fewest standard "
            "errors from changing its outcome: a ✓ by its weakest margin, a ✗ by the largest "
            "|z| among its failed conditions): " + "; ".join(t for _, t in named)
            + (f". Every other such verdict's nearest seed is at least {rest[0][0]:.1f} "
               "standard errors from changing." if rest else "."))


def _deposit(main: list[dict], seeds: tuple[int, ...]) -> str | None:
    distance = [r for r in main if r["task"] == "distance" and r.get("ablation_grid")]
    if not distance:
        return None
    read = [(r, *first_layer_deposit(r)) for r in distance]
    met = [r for r, outcome, _, _ in read if outcome is True]
    open_ = [r for r, outcome, _, _ in read if outcome is None]
    text = (f"**The deposit as the paper words it** (the largest single-head drop in the first "
            f"layer, at least {RELATIVE:.0%} of the accuracy, every other head at most "
            f"{NEGLIGIBLE * 100:g} points, accuracy at least {LEARNED:.0%}): met by "
            f"{len(met)} of the {counted(len(distance), 'distance model')}"
            + (": " + ", ".join(_cell_name(r) for r in met) if met else "")
            + (f"; undecided in {len(open_)}: " + ", ".join(_cell_name(r) for r in open_)
               if open_ else "") + ".")
    index = {(r["variant"], r["scheme"], r["seed"]): r for r in distance}
    for variant in VARIANTS:
        got = [index.get((variant, "rope", s)) for s in seeds]
        if not any(got):
            continue
        tops, heads, seconds, ratios = [], [], [], []
        for r in got:
            if r is None:
                tops.append("–"), heads.append("–"), seconds.append("–"), ratios.append("–")
                continue
            p = float(r["accuracy"])
            drops = sorted(((p - float(q), layer, head)
                            for layer, row in enumerate(r["ablation_grid"])
                            for head, q in enumerate(row)), key=lambda d: -d[0])
            top, layer, head = drops[0]
            second = drops[1][0] if len(drops) > 1 else 0.0
            tops.append(percent(top))
            heads.append(f"{layer}.{head}")
            seconds.append(percent(second))
            ratios.append(f"{top / second:.2f}" if second > 0 else "—")
        text += (f" {variant.capitalize()} RoPE's largest single-head drop, seeds "
                 f"{' / '.join(str(s) for s in seeds)}: {' / '.join(tops)} points (head "
                 f"{' / '.join(heads)}, layer.head), the next {' / '.join(seconds)} (the "
                 f"{RECORD_RULES_DATE} rule's top/second ratio: {' / '.join(ratios)}).")
    return text


def _unlearned(main: list[dict], copies: list[dict]) -> str | None:
    groups: dict[tuple, list[dict]] = {}
    for r in main + copies:
        p, se = accuracy_with_se(r)
        z = Margin("learned", p - LEARNED, se).z
        if z < 1:
            key = (r["preset"].endswith("+copies"), r["task"], r["variant"], r["scheme"])
            groups.setdefault(key, []).append(dict(r, _z=z))
    if not groups:
        return None
    said = []
    for (copy, task, variant, scheme), rs in sorted(groups.items()):
        rs.sort(key=lambda r: r["seed"])
        undecided = [r for r in rs if r["_z"] > -1]
        said.append(f"{'+copies ' if copy else ''}{task} {variant} "
                    f"{NAMES.get(scheme, scheme)} in seed{'s' if len(rs) > 1 else ''} "
                    f"{and_join([str(r['seed']) for r in rs])} "
                    f"({span([float(r['accuracy']) for r in rs], percent)} %"
                    + (f"; within one standard error of {LEARNED:.0%} in "
                       f"{count_word(len(undecided))}" if undecided else "") + ")")
    return ("**Models that did not learn their task** (accuracy below "
            f"{LEARNED:.0%} by at least one standard error, or within one of it; claims 9a, 9b "
            "and 10 are judged only on models that learned, so none of these counts as a model "
            "without a deposit): " + "; ".join(said) + ".")


def _against_record(records: list[dict], base: str, levelled: list[dict], rows: list[dict],
                    copies_rows: list[dict], seeds: tuple[int, ...]) -> str | None:
    copies = with_trigger_copies_name(base)
    if not any(r["preset"] == base for r in records):
        return None
    changed, waiting = [], 0
    for old_preset, new_rows, claims in ((base, rows, None), (copies, copies_rows, _DISTANCE)):
        if not new_rows or not any(r["preset"] == old_preset for r in records):
            continue
        old = {r["claim"].number: r for r in judge(records, old_preset, seeds)}
        for row in new_rows:
            number = row["claim"].number
            if claims is not None and number not in claims:
                continue
            before = old.get(number[:-1] if number in ("9a", "9b") else number)
            if before is None:
                continue
            for variant in VARIANTS:
                a, b = before[variant]["verdict"], row[variant]["verdict"]
                if b == "not judged" and any(t.startswith("missing")
                                             for _, t in row[variant]["seeds"]):
                    waiting += 1          # not judged for want of cells: nothing to compare
                elif a != b:
                    changed.append(f"claim {number} {variant}"
                                   f"{' on `+copies`' if claims else ''}: {a} → {b}")
    text = (f"**Against the verdicts of record** (the {RECORD_RULES_DATE} rules on `{base}` and "
            f"`{copies}`, each cell trained for its preset's steps and scored on "
            f"{span([record_size(r) for r in records if r['preset'] in (base, copies)], _n)}"
            f" sentences): " + (f"{len(changed)} verdict{'s' if len(changed) != 1 else ''} "
                                "differ: " + "; ".join(changed) if changed
                                else "no verdict differs")
            + (f" ({waiting} not yet judged for want of cells, not compared)" if waiting else "")
            + ".")
    moved = []
    for r in levelled:
        old_preset = copies if r["preset"].endswith("+copies") else base
        old = next((o for o in records if o["preset"] == old_preset and all(
            o[k] == r[k] for k in ("task", "variant", "scheme", "seed"))), None)
        if old is None:
            continue
        (p, se), (q, se_old) = accuracy_with_se(r), accuracy_with_se(old)
        diff = Margin("moved", p - q, math.hypot(se, se_old))
        moved.append((abs(diff.value), r, q, p, diff))
    if moved:
        moved.sort(key=lambda m: -m[0])
        beyond = [m for m in moved if abs(m[4].z) >= 1]
        if beyond:
            text += (f" Trained until they levelled off and scored on more sentences, "
                     f"{len(beyond)} of the {counted(len(moved), 'cell')} moved by more than "
                     "one standard error; the most: " + ", ".join(
                         f"{_cell_name(r)} {percent(q)} → {percent(p)} % (z={_z(d.z)})"
                         for _, r, q, p, d in beyond[:MOVED]) + ".")
        else:
            text += (" The cell's accuracy did not move" if len(moved) == 1 else
                     f" None of the {len(moved):,} cells' accuracy moved") + (
                " by more than one standard error from its verdict-of-record cell.")
    return text


def levelled_reading_markdown(records: list[CellRecord | dict], preset: str = "paper-length",
                              seeds: tuple[int, ...] = (0, 1, 2), *, command: str = "") -> str:
    """The "Reading the ``+levelled`` verdicts" section for ``preset``'s levelled grids, from
    the committed records (module docstring); every number computed from them."""
    records = as_dicts(records)
    name, copies_name = levelled_name(preset), levelled_name(with_trigger_copies_name(preset))
    main = [r for r in records if r["preset"] == name and r["seed"] in seeds]
    copies = [r for r in records if r["preset"] == copies_name and r["seed"] in seeds]
    command = command or f"lens-possym paper-b report --preset {preset} --levelled"
    out = [f"<!-- written by `{command}`; do not edit -->", "",
           f"### Reading the `+levelled` verdicts (`{name}`: {counted(len(main), 'cell')}; "
           f"`{copies_name}`: {counted(len(copies), 'cell')}; seeds "
           f"{', '.join(map(str, seeds))})", "",
           wrap(f"Written by `{command}` from the records of the tables above, every number "
                f"computed from them, under the rules of {RULES_DATE} "
                "(`docs/paper_b_rules.md`, last addendum).", ""), ""]
    if not main:
        return "\n".join(out + [wrap(f"Not written yet: no `{name}` record.", ""), ""])
    try:
        rows = judge_margins(records, name, seeds)
        copies_rows = judge_margins(records, copies_name, seeds) if copies else []
    except InvalidSelectionError as error:
        return "\n".join(out + [wrap(f"Not written yet: {error}.", ""), ""])
    five = next((r for r in copies_rows if r["claim"].number == "5"), None)
    main_rows = [r for r in rows if not (five is not None and r["claim"].number == "5")]
    labelled = _labelled(main_rows, copies_rows)
    bullets: Iterable[str | None] = (
        _progress(main, copies, name, copies_name, _expected(preset, seeds)),
        _verdict_lists(main_rows, five), _undecided(labelled, seeds), _nearest(labelled, seeds),
        _deposit(main, seeds), _unlearned(main, copies),
        _against_record(records, preset, main + copies, main_rows, copies_rows, seeds))
    out += [wrap(text, "* ") for text in bullets if text]
    return "\n".join(out) + "\n"
