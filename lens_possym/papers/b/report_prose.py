r"""Paper B's prose outside the tables, written from the committed records
(``docs/paper_b_results.json``) and the code's own constants, never typed by hand.

``lens-possym paper-b report --preset paper-length`` writes each block of :func:`prose_blocks`
between its markers in docs/paper_b.md (``pipeline.MARKERS``):

* ``copies``: why claim 5 has its own grid: the main grid's saturated distance accuracies and
  the official filler draw's statistics on each seed's analysis sentences (share with an
  extra trigger copy, the first-A-first-B reading's accuracy, the best possible one);
* ``cost``: the ``paper-length`` grid's size and the loop's own time (``train_time_s``), and
  why it runs :data:`~lens_possym.papers.b.presets.PAPER_LENGTH_STEPS` steps (the
  ``paper-length@2400`` budget checks, their loop histories);
* ``plan``: the ``+levelled`` grid's rule (:mod:`~lens_possym.papers.b.levelled`'s
  constants), how many committed cells did not level off by it, and its training time at the
  records' own cost per step;
* ``wall time``: the ``cpu`` preset's training time per cell.

Measurements that no record holds (benchmarks, pilot runs before the grid) are quoted with
their commands in docs/paper_b_rules.md, "The grid and its cost", not here. As in
:mod:`~lens_possym.papers.b.report_reading`, the module's string literals hold no number
(a test checks it); the paper's own figures come from ``report_reading.PAPER``.
"""

from __future__ import annotations

import math
import statistics
from typing import Iterable

from ...errors import InvalidSelectionError, ResultsFileError
from .cells import analysis_batch, grid_cells
from .levelled import (EXTENSION_STEPS, LEVEL_GAIN, LEVEL_WINDOW, SCORING_SIZE, STEP_CAP,
                       levelled_name, window_gain)
from .presets import (CLAIM_GRID, ENCODER_PRESETS, MAIN, PAPER_LENGTH_STEPS, Preset,
                      preset_task, with_trigger_copies, with_trigger_copies_name)
from .tasks import DistanceTask
from .records import CellRecord, as_dicts
from .report_margins import levelling_rows
from .report_reading import NAMES, PAPER, VARIANTS, and_join, count_word, points, span, wrap
from .deposit import DEPOSIT_LEARNED, DEPOSIT_RATIO, DEPOSIT_RELATIVE
from .verdicts import SATURATED, judge, percent

__all__ = ["prose_blocks", "copies_draw"]

#: the ``paper-length`` budget checks' preset suffix (cells trained at fewer steps)
BUDGET_MARK = "@"
#: the tasks draw gaps, sides and trigger counts from 1 up (``DistanceTask._generate``,
#: ``CountTask._generate``)
FIRST = 1
#: the share of a run's steps whose loop gain the cost block quotes (the last eighth)
EIGHTH = 1 / 8
_ORDER = ("nope", "sinusoidal", "learned", "alibi", "t5", "rope", "rope-k1", "rope-k2", "mla",
          "hybrid")


def _name(scheme: str) -> str:
    return NAMES.get(scheme, scheme)


def _thousands(n: float) -> str:
    return f"{int(round(n)):,}"


def _header(command: str) -> list[str]:
    return [f"<!-- written by `{command}`; do not edit -->", ""]


def _fill(text: str) -> str:
    return wrap(text, "")


def copies_draw(preset_name: str, seed: int) -> dict[str, float]:
    """The official filler draw on ``seed``'s analysis sentences of ``preset_name``'s
    ``+copies`` cells: ``n`` sentences, ``extra`` (the share holding a trigger more than the
    planted pair), ``first`` (the share where the first A and the first B give the drawn gap:
    :meth:`DistanceTask.solve`), ``best`` (the Bayes reading's share: ``best_guess``)."""
    preset = ENCODER_PRESETS[preset_name]
    task = preset_task(with_trigger_copies(preset), "distance", seed)
    batch = analysis_batch(preset, task, seed)
    triggers = ((batch.tokens == task.TRIGGER_A).sum(1) + (batch.tokens == task.TRIGGER_B).sum(1))
    first = task.solve(batch.tokens)[0]
    best = task.best_guess(batch.tokens)[0]
    return {"n": len(batch.answers), "extra": float((triggers > 2).double().mean()),
            "first": float((first == batch.answers).double().mean()),
            "best": float((best == batch.answers).double().mean())}


def _cells(records: list[dict], preset: str, seeds: Iterable[int] | None = None) -> list[dict]:
    return [r for r in records if r["preset"] == preset
            and (seeds is None or r["seed"] in tuple(seeds))]


def _acc(records: list[dict], preset: str, task: str, variant: str, scheme: str,
         seed: int) -> float:
    found = next((r["accuracy"] for r in records if r["preset"] == preset
                  and (r["task"], r["variant"], r["scheme"], r["seed"])
                  == (task, variant, scheme, seed)), None)
    if found is None:      # an error, not None: also inside a generator expression
        raise ResultsFileError(
            f"no {preset!r} record of (task, variant, scheme, seed) = "
            f"{(task, variant, scheme, seed)} in the paper B records; train and record "
            "that cell (lens-possym paper-b run) or leave its block unwritten")
    return float(found)


def _copies(records: list[dict], preset: str, seeds: tuple[int, ...]) -> str:
    copies = with_trigger_copies_name(preset)
    mine = _cells(records, copies, seeds)
    first = seeds[0]
    shown = ("sinusoidal", "rope", "alibi")
    accs = ", ".join(f"{_name(x)} {points(_acc(records, preset, 'distance', 'intended', x, first))} %"
                     for x in shown)
    draws = [copies_draw(preset, s) for s in seeds]
    sizes = sorted({d["n"] for d in draws})
    text = (f"**Claim 5's grid** (`{copies}`, {len(mine)} cells; docs/paper_b_rules.md, the "
            "addendum on claim 5's grid). With exact labels the distance task saturates at "
            "these lengths once the models are trained to their plateau (intended, seed "
            f"{first}: {accs}), and claim 5's rule refuses a saturated task. A second grid "
            "runs the MAIN schemes on the distance task with the official filler draw "
            "(`DistanceTask(trigger_copies=True)`: fillers from every word and both triggers, "
            "as `dis_gen/data-gen.py` draws them; the label is the drawn gap). On each seed's "
            f"{and_join([_thousands(n) for n in sizes])} analysis sentences (seeds "
            f"{' / '.join(str(s) for s in seeds)}), {' / '.join(percent(d['extra']) for d in draws)}"
            " % hold an extra trigger copy, the first-A-first-B reading is right for "
            f"{' / '.join(percent(d['first']) for d in draws)} %, and the best possible reading "
            "(Bayes: every trigger pair the draw could have planted is equally likely; "
            f"`DistanceTask.best_guess`) for {' / '.join(percent(d['best']) for d in draws)} %,"
            f" so no scheme can reach the {SATURATED * 100:.0f} % that counts as saturated. "
            "Claim 5 is judged there; claims 1-4 are shown there beside the main table's "
            "verdicts. The queues run it after the main grid.")
    return _fill(text)


def _hours(seconds: Iterable[float]) -> str:
    return f"{sum(seconds) / 3600:.1f}"


def _cost(records: list[dict], preset: str, seeds: tuple[int, ...]) -> str:
    main = _cells(records, preset, seeds)
    models = {(r["variant"], r["scheme"]) for r in main}
    per_variant = {v: sum(1 for w, _ in models if w == v) for v in CLAIM_GRID}
    tasks = sorted({r["task"] for r in main})
    times = sorted(float(r["train_time_s"]) for r in main)
    step_ms = statistics.median(1000 * float(r["train_time_s"]) / r["steps"] for r in main)
    steps = sorted({r["steps"] for r in main})
    checks = [r for r in records if r["preset"].startswith(preset + BUDGET_MARK)]
    out = ["### Cost of the `paper-length` grid, and why these steps", ""]
    out.append(_fill(
        f"{len(main)} cells: {len(models)} models "
        f"({', '.join(f'{n} {v}' for v, n in per_variant.items())}) × {len(tasks)} tasks × "
        f"{len(seeds)} seeds, {and_join([_thousands(s) for s in steps])} steps each "
        "(`PAPER_LENGTH_STEPS`). The loop's own time (`train_time_s` in "
        "`docs/paper_b_results.json`: wall time, evaluations included, on a machine shared "
        f"with other jobs): {_hours(times)} hours for the grid, "
        f"{_thousands(times[0])}-{_thousands(times[-1])} s per cell (median "
        f"{_thousands(statistics.median(times))} s, {step_ms:.0f} ms per step). The pilot "
        "runs and benchmarks that chose the batch, the learning rate and the steps before "
        "the grid ran are quoted with their commands in `docs/paper_b_rules.md` (\"The grid "
        "and its cost\")."))
    if checks:
        short = sorted({r["steps"] for r in checks})
        climbing = []
        for r in sorted(checks, key=lambda r: _ORDER.index(r["scheme"])
                        if r["scheme"] in _ORDER else len(_ORDER)):
            h = r.get("history") or []
            gain = window_gain(h, EIGHTH)
            if gain is not None and gain >= LEVEL_GAIN and h[-1][1] < SATURATED:
                before = h[-1][1] - gain
                climbing.append((r, f"{_name(r['scheme'])} {percent(before)} → "
                                    f"{percent(h[-1][1])} %"))
        pairs = []
        for r in checks:
            full = [x for x in main if (x["task"], x["variant"], x["scheme"], x["seed"]) ==
                    (r["task"], r["variant"], r["scheme"], r["seed"])]
            if full:
                pairs.append((full[0]["accuracy"] - r["accuracy"], r, full[0]))
        kinds = sorted({(r["task"], r["variant"]) for r in checks})
        kind = and_join([f"{v} {t}" for t, v in kinds])
        in_order = sorted(checks, key=lambda r: _ORDER.index(r["scheme"])
                          if r["scheme"] in _ORDER else len(_ORDER))
        text = (f"The grid was first launched at {and_join([_thousands(s) for s in short])} steps "
                f"on distance; its {len(checks)} {kind} cells of seed "
                f"{and_join(sorted({str(r['seed']) for r in checks}))} "
                f"({and_join([_name(r['scheme']) for r in in_order])})"
                " are kept as budget checks (`preset: \"paper-length@…\"` in the records; the "
                "report lists them beside their grid cells, and no rule reads them).")
        if climbing:
            text += (" At the end of their steps, with the learning rate at zero, "
                     f"{count_word(len(climbing))} of them were still climbing by at least "
                     f"{LEVEL_GAIN * 100:g} point of loop accuracy over the last eighth of "
                     f"their steps ({', '.join(c for _, c in climbing)}).")
        if pairs:
            gain, r, full = max(pairs, key=lambda p: p[0])
            h = full.get("history") or []
            late = window_gain(h, EIGHTH)
            text += (f" Trained for {_thousands(full['steps'])} steps, "
                     f"{_name(r['scheme'])} reached {points(full['accuracy'])} % (against "
                     f"{points(r['accuracy'])} % at {_thousands(r['steps'])})"
                     + (f", {percent(h[-1][1] - late)} → {percent(h[-1][1])} % over its last "
                        "eighth" if late is not None else "")
                     + ". With the shorter budget the distance verdicts (which scheme wins, "
                     "which is second, which fails) would have ranked learning speed, not what "
                     "the schemes can learn; so the preset runs "
                     f"{and_join(sorted({_thousands(s) for s in PAPER_LENGTH_STEPS.values()}))}"
                     " steps on both tasks. Which cells still rise then is in the report (\"Did "
                     "the cells level off?\").")
        out += ["", _fill(text)]
    first = seeds[0]
    rope = _acc(records, preset, "distance", "intended", "rope", first)
    nope = _acc(records, preset, "count", "intended", "nope", first)
    out += ["", _fill(
        "Two consequences worth knowing before reading the verdicts: at these lengths **both "
        f"tasks can reach their ceiling** (intended, seed {first}: RoPE {points(rope)} % on "
        f"distance, NoPE {points(nope)} % on count, where the paper has "
        f"{PAPER[('distance', 'rope')]} % and {PAPER[('count', 'nope')]} %), so rankings may come "
        "down to a few points near the top (claim 5's rule refuses a saturated distance task; "
        "claim 6's does not); and the paper's label noise, absent here, is one reason its "
        "accuracies stay lower (`docs/paper_b_rules.md`).")]
    return "\n".join(out)


def _plan(records: list[dict], preset: str, seeds: tuple[int, ...]) -> str:
    copies = with_trigger_copies_name(preset)
    grids = [(preset, _cells(records, preset, seeds)), (copies, _cells(records, copies, seeds))]
    total = sum(len(c) for _, c in grids)
    rising = {name: [r for r, i in levelling_rows(cells) if not i["levelled"]]
              for name, cells in grids}
    n_rising = sum(len(v) for v in rising.values())
    every = [r for _, cells in grids for r in cells]
    step_s = statistics.median(float(r["train_time_s"]) / r["steps"] for r in every)
    base = sum(float(r["train_time_s"]) for r in every)
    extension = EXTENSION_STEPS * step_s
    extensions_to_cap = {r["steps"]: -(-(STEP_CAP - r["steps"]) // EXTENSION_STEPS)
                         for r in every}
    at_cap = sum(extensions_to_cap[r["steps"]] for v in rising.values() for r in v)
    text = (f"The grid: the `{preset}` grid ({len(grids[0][1])} cells) and its `+copies` grid "
            f"({len(grids[1][1])} cells), every cell trained until it levels off (less than "
            f"{LEVEL_GAIN * 100:g} point of loop accuracy gained over the last "
            f"{LEVEL_WINDOW:.0%} of its steps, from the latest end of one of its runs there "
            f"once it has been extended; {_thousands(EXTENSION_STEPS)}-step extensions "
            f"from the last model, cap {_thousands(STEP_CAP)} steps; "
            "`lens_possym/papers/b/levelled.py`) and scored on "
            f"{_thousands(SCORING_SIZE)} held-out sentences with standard errors. A cell's base "
            f"run is its `{preset}` run, in the same folder (`runs/paper_b/{preset}/...`): where "
            "that folder exists it is loaded or resumed, not retrained; where it does not, the "
            "base run trains again. By the rule, the committed histories say "
            f"{n_rising} of the {total} cells had not levelled off "
            f"({len(rising[preset])} of {len(grids[0][1])} in `{preset}`, "
            f"{len(rising[copies])} of {len(grids[1][1])} in `{copies}`). At the records' own "
            f"cost (`train_time_s`, median {1000 * step_s:.0f} ms per step): the base runs "
            f"{_hours([base])} hours, one extension {extension / 3600:.2f} hours, so one extension "
            f"for each cell still rising adds {_hours([n_rising * extension])} hours and running "
            f"every one of them to the cap {_hours([at_cap * extension])} hours, scoring aside. "
            "The per-step and scoring costs measured by the benchmarks, and the estimates "
            "they print, are quoted with their commands in `docs/paper_b_rules.md` (\"The grid "
            "and its cost\"). Every finished cell's record lands in "
            f"`docs/paper_b_results.json` at once (preset `{levelled_name(preset)}` or "
            f"`{levelled_name(copies)}`), so each session's cells can be committed as they "
            "finish.")
    return _fill(text)


def _wall_time(records: list[dict], preset: str = "cpu") -> str:
    mine = [r for r in records if r["preset"] == preset]
    seed = min(r["seed"] for r in mine)
    first = [r for r in mine if r["seed"] == seed]
    labels = [x for x in _ORDER if any(r["scheme"] == x for r in first)]
    labels += sorted({r["scheme"] for r in first} - set(labels))
    cols = [(t, v) for t in ("distance", "count") for v in ("intended", "faithful")]
    steps = sorted({r["steps"] for r in first})
    by = {(r["task"], r["variant"], r["scheme"]): float(r["train_time_s"]) for r in first}
    out = [_fill(f"Training time of each cell of the `{preset}` grid (seconds for its "
                 f"{and_join([_thousands(s) for s in steps])} steps on one core, `train_time_s` in "
                 f"`docs/paper_b_results.json`, measured by the loop itself with one torch "
                 f"thread, seed {seed}; the machine was shared with other jobs, so "
                 "small differences are load, not the scheme):"), "",
           "| scheme | " + " | ".join(f"{t} {v}" for t, v in cols) + " |",
           "|---|" + "---|" * len(cols)]
    for x in labels:
        out.append(f"| {x} | " + " | ".join(
            f"{by[(t, v, x)]:.0f}" if (t, v, x) in by else "—" for t, v in cols) + " |")
    med = {t: statistics.median(s for (tt, _, _), s in by.items() if tt == t)
           for t in ("distance", "count")}
    mla = [s / med[t] for (t, _, x), s in by.items() if x == "mla"]
    out += ["", _fill(f"Median over the cells: {med['distance']:.0f} s (distance), "
                      f"{med['count']:.0f} s (count); MLA's cells take "
                      f"{span(mla, lambda q: f'{q:.2f}')}x their task's median. "
                      "`python benchmarks/bench_paper_b.py --root runs/paper_b --measured-only` "
                      "prints the same table from the grid's own records.")]
    return "\n".join(out)


def _cpu(records: list[dict], task: str, variant: str, scheme: str, seed: int = 0) -> dict:
    for r in records:
        if r["preset"] == "cpu" and (r["task"], r["variant"], r["scheme"], r["seed"]) == (
                task, variant, scheme, seed):
            return r
    raise ResultsFileError(
        f"no 'cpu' record of (task, variant, scheme, seed) = {(task, variant, scheme, seed)} "
        "in the paper B records; train and record that cell (lens-possym paper-b run)")


def _quirks(records: list[dict]) -> str:
    """What the official code's quirks change, from the ``cpu`` preset's records (seed 0;
    seed 1 where the count ranking has it) and the presets' sizes."""
    cpu, paper = ENCODER_PRESETS["cpu"], ENCODER_PRESETS["paper"]
    acc = lambda t, v, x, s=0: float(_cpu(records, t, v, x, s)["accuracy"])
    additive = ("nope", "rope", "sinusoidal", "alibi")
    worse = all(acc("count", "faithful", x) < acc("count", "intended", x) for x in additive)
    pairs = ", ".join(f"{_name(x)} {percent(acc('count', 'faithful', x))} vs "
                      f"{percent(acc('count', 'intended', x))} %" for x in additive)
    order = ("mla", "nope", "rope")
    seeds = sorted({r["seed"] for r in records if r["preset"] == "cpu"
                    and (r["task"], r["variant"], r["scheme"]) == ("count", "intended", "mla")})
    f = [acc("count", "faithful", x) for x in order]
    f_gaps = [f[0] - f[1], f[1] - f[2]]
    i_gaps = [acc("count", "intended", a, s) - acc("count", "intended", b, s)
              for s in seeds for a, b in zip(order, order[1:])]
    ranked = all(g > 0 for g in f_gaps + i_gaps)
    one = (f"* **Count task, keys and values from the layer-0 embeddings.** Every faithful "
           "model built on `trans.py` / `partialrope.py` (keys and values from the layer-0 "
           f"input) counts {'worse than' if worse else 'differently from'} its intended twin: "
           f"{pairs}. Faithful MLA, the one official model that attends over the current "
           f"stream (`mla.py` has no such quirk), keeps {percent(f[0])} %. So the paper's count "
           f"ranking (MLA > NoPE > RoPE) appears {'' if ranked else 'only in part '}with gaps of "
           f"{and_join([percent(g) for g in f_gaps])} points **with the official code's "
           f"architecture** ({' > '.join(percent(x) for x in f)} %) and of "
           f"{span(i_gaps, percent)} points once every scheme gets the same architecture "
           f"(intended, {'seeds ' if len(seeds) > 1 else 'seed '}{and_join([str(s) for s in seeds])}: "
           + ", ".join(f"{_name(x)} {' / '.join(percent(acc('count', 'intended', x, s)) for s in seeds)}"
                       for x in order) + " %)"
           + (": in the official comparison, most of MLA's count advantage is an architecture "
              "difference, not a positional-scheme one." if min(f_gaps) > max(i_gaps) else "."))
    rope = _cpu(records, "distance", "faithful", "rope")["ablation"]
    k_all = _cpu(records, "distance", "faithful", f"rope-k{cpu.model['n_heads']}")["ablation"]
    two = ("* **The \"RoPE\" model's added absolute encoding.** The official RoPE model (RoPE + "
           "`cat(sin, cos)` added at the input) "
           + ("shows the one clear RoPE deposit on distance" if rope["deposit"] else
              "has its largest single-head drop on distance")
           + f" (head {rope['top_head'][0]}.{rope['top_head'][1]}: {percent(rope['top_drop'])} "
           f"points, next {percent(rope['second_drop'])}); RoPE on all heads without the "
           "absolute encoding (`partialrope.py`, k = all, same quirks otherwise) "
           + ("spreads the task" if not k_all["deposit"] else "has one too")
           + f" (largest drop {percent(k_all['top_drop'])} points). What the paper attributes "
           "to RoPE may owe something to the additive encoding riding along.")
    d_head, latent, heads = cpu.model["d_head"], cpu.model["d_latent"], cpu.model["n_heads"]
    three = ("* **MLA's non-rotation and latent-slice ablation.** Faithful MLA still solves "
             f"distance ({points(acc('distance', 'faithful', 'mla'))} %) with a rotation that is "
             "not norm-preserving (a test pins this); its official ablation hits a latent slice "
             f"read by every head (heads {latent // d_head}–{heads - 1}, past the {latent}-wide "
             "latent, are exact no-ops), so its heatmap is not a per-head one.")
    slopes = [math.exp(-h / heads) for h in range(heads)]
    alibi = [acc("distance", v, "alibi") for v in ("faithful", "intended")]
    four = (f"* **ALiBi slopes.** The official slopes `e^{{-h/H}}` ({slopes[0]:.1f} … "
            f"{slopes[-1]:.2f}, all steep) give {percent(alibi[0])} % on distance against "
            f"{percent(alibi[1])} % with the standard ones"
            + ("; neither fails." if min(alibi) >= max(
                acc("distance", v, x) for v in VARIANTS for x in MAIN) / 2 else "."))
    t5 = [acc("distance", v, "t5") for v in ("faithful", "intended")]
    steps, lr = cpu.steps["distance"], cpu.lr
    n_ctx = cpu.tasks["distance"]["n_ctx"]
    steepest = 2 ** (-8 / heads)                        # the standard slopes 2^{-8(h+1)/H}
    paper_steps = paper.steps["distance"]
    five = (f"* **\"Relative\" as an unbucketed table** vs {_name('t5')} buckets: both fail here "
            f"({percent(t5[0])} % and {percent(t5[1])} % on distance) for a reason that is not "
            "the scheme: bias tables start at zero and Adam moves each entry by about `lr` per "
            f"step, so after {_thousands(steps)} steps at {_sci(lr)} an entry has moved by at most "
            f"about {steps * lr:.1f}, too little to pick out one offset (ALiBi's fixed biases "
            f"reach −{steepest * (n_ctx - 1):.1f}). The {_name('t5')} rows are a **budget "
            "artefact**; the "
            f"`paper` preset ({_thousands(paper_steps)} steps at {_sci(paper.lr)}, at most about "
            f"{paper_steps * paper.lr:.1f}) would not fix it either, and a larger learning rate "
            "for the tables would.")
    return "\n".join(_bullet(x) for x in (one, two, three, four, five))


def _bullet(text: str) -> str:
    return wrap(text[len("* "):], "* ")


def _cpu_verdicts(records: list[dict]) -> str:
    """The ``cpu`` preset's claims under the ``paper-length`` grid's rules, read on seed 0
    alone (and claim 6 on every other seed its count cells have)."""
    mine = [r for r in records if r["preset"] == "cpu"]
    seed = min(r["seed"] for r in mine)
    rows = judge(records, "cpu", (seed,))
    mark = {True: "✓", False: "✗", None: "–"}
    notes = sorted({r["note"] for r in mine if r.get("note")})
    out = [wrap(f"CPU preset, seed {seed}: each claim's rule (the `paper-length` grid's, "
                "`docs/paper_b_rules.md`) read on this one seed: ✓ holds, ✗ does not, – "
                "cannot be applied; one seed decides no verdict, and where the distance task "
                "saturates the rules say so. "
                + (f"Faithful rows marked in the records: “{notes[0]}”." if len(notes) == 1
                   else ""), ""), "",
           f"| # | claim | paper | rule | intended, seed {seed} | faithful, seed {seed} |",
           "|---|---|---|---|---|---|"]
    for row in rows:
        c = row["claim"]
        cells = [f"{mark[row[v]['seeds'][0][0]]} {row[v]['seeds'][0][1]}" for v in VARIANTS]
        out.append(f"| {c.number} | {c.text} | {c.paper} | {c.rule} | " + " | ".join(cells) + " |")
    more = sorted({r["seed"] for r in mine} - {seed})
    extra = []
    for s in more:
        six = next(r for r in judge(records, "cpu", (s,), ("intended",))
                   if r["claim"].number == "6")["intended"]["seeds"][0]
        if six[0] is not None:
            extra.append(f"seed {s}: {mark[six[0]]} {six[1]}")
    if extra:
        out += ["", wrap(f"Claim 6 (intended) on the other seeds its count cells were trained "
                         f"with: {'; '.join(extra)}.", "")]
    labels = [x for x in _ORDER if any(r["scheme"] == x and r["variant"] == "intended"
                                        and r["seed"] == seed for r in mine)]
    top = [x for x in labels if _cpu(records, "distance", "intended", x, seed)["accuracy"]
           >= SATURATED]
    out += ["", wrap(f"Thresholds: a *deposit* is a top single-head drop of at least "
                     f"{DEPOSIT_RELATIVE:.0%} of the accuracy and at least {DEPOSIT_RATIO:g}x "
                     f"the second-largest drop, in a model with accuracy ≥ {DEPOSIT_LEARNED:.0%} "
                     "(definitions below). The distance task saturates at this size ("
                     f"{count_word(len(top))} intended schemes reach {SATURATED * 100:.0f} % or "
                     f"more: {and_join([_name(x) for x in top])}), so accuracy cannot rank those "
                     "schemes; the ablations still can.", "")]
    return "\n".join(out)


def _sci(x: float) -> str:
    """``0.001`` as ``1e-3``, ``2e-3``: a learning rate or weight decay as code writes it."""
    mantissa, exponent = f"{x:.0e}".split("e")
    return f"{mantissa}e{int(exponent)}"


def _presets_table() -> str:
    """The presets side by side, every figure read from :data:`ENCODER_PRESETS`."""
    names = ("cpu", "paper-length", "paper")
    roles = {"cpu": "(the quick preset)", "paper-length": "(the verdicts)",
             "paper": "(provided; timed on a GPU, not run)"}
    share = DistanceTask.__init__.__kwdefaults__["train_share"]
    shares = f"{share:.0%}/{1 - share:.0%}"

    def model(p: Preset) -> str:
        m = p.model
        return (f"{m['n_layers']} layers × {m['n_heads']} heads, d_model {m['d_model']}, d_head "
                f"{m['d_head']}, d_ff {m['d_ff']}, MLA latent {m['d_latent']}")

    def distance(p: Preset) -> str:
        t = p.tasks["distance"]
        return (f"{t['n_ctx']} positions" + (f", {t['max_len']} words" if t.get("max_len") else "")
                + f", gaps {FIRST}..{t['max_between']} ({t['max_between']} classes), sides "
                f"{FIRST}..{t['max_side']}, {t['n_words']} fillers")

    def count(p: Preset) -> str:
        t = p.tasks["count"]
        return (f"{t['n_ctx']} positions" + (f", {t['max_len']} words" if t.get("max_len") else "")
                + f", {FIRST}..{t['max_count']} of {t['n_triggers']} triggers ({t['max_count']} "
                f"classes), {t['n_words']} fillers")

    def data(p: Preset) -> str:
        if p.data == "stream":
            return "a fresh stream"
        return (f"the official fixed set: {_thousands(p.sentences['distance'])} / "
                f"{_thousands(p.sentences['count'])} sentences, {shares}, de-duplicated")

    def schedule(p: Preset) -> str:
        opt = (f"AdamW lr {_sci(p.lr)}, betas {p.betas}, wd {_sci(p.weight_decay)}, "
               f"{p.warmup_fraction:.0%} warm-up, cosine, "
               + (f"clip {p.grad_clip:.1f}" if p.grad_clip else "no clip"))
        if p.data == "fixed":
            return (f"{p.epochs} epochs of the {share:.0%} split, batch {p.batch_size}, {opt}; "
                    f"MLA {p.mla_epochs} epochs × {p.mla_batch_size}")
        steps = sorted(set(p.steps.values()))
        said = (_thousands(steps[0]) if len(steps) == 1 else " / ".join(
            f"{_thousands(p.steps[t])} ({t})" for t in p.steps))
        return f"{said} steps × {p.batch_size}, {opt}"

    def faithful(p: Preset) -> str:
        f = p.faithful_model
        return ("the faithful model, " + ("the official (PyTorch) initialisation"
                                           if f.get("init") == "torch" else "our initialisation")
                + (f" and dropout {f['dropout']:g}" if f.get("dropout") else ""))

    def schemes(p: Preset) -> str:
        if p.grid is None:
            ks = sorted({int(c.label[len("rope-k"):]) for c in grid_cells(preset=p, n_heads=p.model["n_heads"])
                         if c.label.startswith("rope-k")})
            return "every scheme, RoPE on k = " + ", ".join(
                "all" if k == p.model["n_heads"] else str(k) for k in ks) + " heads"
        return "the claims' schemes (`CLAIM_GRID`)"

    rows = [("model", model), ("distance", distance), ("count", count), ("data", data),
            ("schedule", schedule), ("faithful cells", faithful), ("schemes", schemes)]
    out = ["| | " + " | ".join(f"`{n}` {roles[n]}" for n in names) + " |",
           "|---|" + "---|" * len(names)]
    for label, cell in rows:
        texts = [cell(ENCODER_PRESETS[n]) for n in names]
        shown = [texts[0]] + [f"as `{names[i - 1]}`" if texts[i] == texts[i - 1] else texts[i]
                              for i in range(1, len(names))]
        out.append(f"| {label} | " + " | ".join(shown) + " |")
    return "\n".join(out)


def prose_blocks(records: list[CellRecord | dict], preset: str,
                 seeds: tuple[int, ...] = (0, 1, 2), *, command: str = "") -> dict[str, str]:
    """Each prose block of docs/paper_b.md outside the tables, by its ``pipeline.MARKERS``
    key (``"<preset> copies"``, ``"<preset> cost"``, ``"<preset> plan"``, ``"cpu wall
    time"``), each ending in a newline, every number computed (module docstring)."""
    records = as_dicts(records)
    command = command or f"lens-possym paper-b report --preset {preset}"
    head = _header(command)
    writers = {f"{preset} copies": lambda: _copies(records, preset, seeds),
               f"{preset} cost": lambda: _cost(records, preset, seeds),
               f"{preset} plan": lambda: _plan(records, preset, seeds),
               "cpu wall time": lambda: _wall_time(records),
               "cpu quirks": lambda: _quirks(records),
               "cpu verdicts": lambda: _cpu_verdicts(records),
               "presets": _presets_table}
    blocks = {}
    for key, write in writers.items():
        try:
            blocks[key] = write()
        except (KeyError, ValueError, TypeError, IndexError,
                statistics.StatisticsError, InvalidSelectionError):
            # a grid still running, or records without the fields this block reads
            blocks[key] = _fill(f"Not written yet: this block reads the `{preset}` and "
                                f"`{with_trigger_copies_name(preset)}` cells of seeds "
                                f"{', '.join(str(s) for s in seeds)} and the `cpu` cells, with "
                                "their `train_time_s` and loop histories; the records lack "
                                "some of them.")
    return {k: "\n".join(head + [v]) + "\n" for k, v in blocks.items()}
