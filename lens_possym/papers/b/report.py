r"""Paper B's report: docs/paper_b.md's verdict block for a preset, written from the committed
records only (:func:`verdict_markdown`): the verdict table, the ``+copies`` distance claims
beside the best any model can score there (:func:`copies_ceiling`), accuracies and
single-head ablations per seed, whether the cells levelled off, claim 8 as the data say,
and the faithful variant's remaining departures from the official code."""

from __future__ import annotations

from typing import Any

from .cells import analysis_batch
from .deposit import DEPOSIT_LEARNED, DEPOSIT_RATIO, DEPOSIT_RELATIVE, HEADS_OVER
from .presets import (ENCODER_PRESETS, MAIN, PAPER_TASKS, Preset, preset_task,
                      with_trigger_copies, with_trigger_copies_name)
from .tasks import DistanceTask
from .records import CellRecord, as_dicts, record_key
from .verdicts import LEVELLED, SATURATED, deposit_table, judge, late_gain, percent

__all__ = ["verdict_markdown", "copies_ceiling", "faithful_departures", "DISTANCE_CLAIMS"]

#: the official code's figures that no preset holds (shared/reference/companion_code.md,
#: paper B's section): the classifier's width, the tokenizer's truncation length (the
#: official n_ctx), its one seed
OFFICIAL_HEAD, OFFICIAL_TRUNCATION, OFFICIAL_SEED = 574, PAPER_TASKS["count"]["n_ctx"], 42
#: the faithful model's agreement with the official classes (tests/papers/b/
#: test_encoder_official.py compares them in float64 to this tolerance or better)
OFFICIAL_AGREEMENT = 1e-13


def _sci(x: float) -> str:
    mantissa, exponent = f"{x:.0e}".split("e")
    return f"{mantissa}e{int(exponent)}"


def faithful_departures(ours: Preset | None = None, official: Preset | None = None
                        ) -> tuple[str, ...]:
    """What still separates the faithful variant of ``ours`` (default: the ``paper-length``
    preset) from the official code (``official``, default the ``paper`` preset: its sizes
    and schedule); the model itself equals the official classes (a test compares them in
    float64). Every figure is read from the presets, the tasks and the constants above when
    called, so the page follows the presets as they are."""
    ours = ENCODER_PRESETS["paper-length"] if ours is None else ours
    official = ENCODER_PRESETS["paper"] if official is None else official
    m, o = ours.model, official.model
    steps = sorted(set(ours.steps.values()))
    share = DistanceTask.__init__.__kwdefaults__["train_share"]
    dropout = official.faithful_model.get("dropout")
    classes = {t: preset_task(ours, t).n_classes for t in ("distance", "count")}
    return (
        f"**Size and budget**: {m['n_layers']} layers x {m['n_heads']} heads, d_model "
        f"{m['d_model']} (official {o['n_layers']} x {o['n_heads']}, d_model {o['d_model']}); "
        f"{' / '.join(f'{s:,}' for s in steps)} steps of {ours.batch_size} sentences at lr "
        f"{_sci(ours.lr)} (official: {official.batch_size} at {_sci(official.lr)}, MLA "
        f"{official.mla_batch_size}), betas {ours.betas} (official {official.betas}), a fresh "
        f"stream of sentences (official: {official.epochs} epochs of a fixed {share:.0%} split, "
        f"MLA {official.mla_epochs}; available as `--data fixed`).",
        f"**Dropout**: none (official {dropout:g} on attention weights, attention output and "
        f"MLP output; available as `dropout={dropout:g}`, used by the `paper` preset): on one "
        "CPU core it triples a faithful step's cost.",
        f"**Gradient clipping** at norm {ours.grad_clip:.1f} (the official code does not clip; "
        "kept for the tenfold learning rate).",
        "**Vocabulary and labels**: a synthetic vocabulary of single-token words, so the "
        "labels are exact (official: a Unigram subword tokenizer, whose splits make token gaps "
        f"differ from the word-count labels, and truncation at {OFFICIAL_TRUNCATION} tokens, "
        "which drops count triggers; docs/paper_b_rules.md); fillers never repeat a trigger "
        "(claim 5's `+copies` grid draws them as the official code does); no sentence without "
        "a trigger on the count task (the official loss ignores them).",
        f"**Classifier width**: one output per possible label ({classes['distance']} distance "
        f"classes, {classes['count']} count classes) instead of the official "
        f"{OFFICIAL_HEAD}-way head.",
        "**Evaluation**: accuracy and the ablations on held-out sentences (official ablation: "
        "the whole data set, training part included).",
        "**Seeds**: three seeds of data, weights and dropout; the official code ran one (seed "
        f"{OFFICIAL_SEED}; MLA unseeded).",
        "**MLA's official ablation** zeroes a latent slice read by every head (`mlavis.py`); "
        "the deposit rule reads the per-head ablation of every scheme, and faithful MLA's "
        "latent-slice summary is listed beside it.",
    )


def _levelling_block(records: list[dict], preset: str, seeds: tuple[int, ...]) -> list[str]:
    """The cells still rising at the end of training, and the budget checks (records of
    ``<preset>@<steps>``: the same cell trained longer) beside their base cells."""
    grids = (preset, with_trigger_copies_name(preset))
    mine = [r for r in records if r["preset"] in grids and r["seed"] in seeds]
    gains = [(r, late_gain(r)) for r in mine]
    # a cell that climbed to the ceiling levelled off there
    rising = sorted(((r, g) for r, g in gains
                     if g is not None and g > LEVELLED and r["accuracy"] < SATURATED),
                    key=lambda rg: -rg[1])
    out = ["", "### Did the cells level off?", "",
           f"Accuracy gained over the last quarter of training (evaluations of the training "
           f"loop; the learning rate decays to zero). {len(rising)} of {len(mine)} cells "
           f"ended below {SATURATED * 100:.0f} % and gained more than {LEVELLED * 100:.0f} "
           f"points"
           + (": " + ", ".join(f"{r['task']}{'+copies' * (r['preset'] != preset)} "
                                f"{r['variant']} {r['scheme']} s{r['seed']} "
                                f"(+{g * 100:.1f})" for r, g in rising) if rising else "")
           + ". A verdict that reads those cells compares the schemes at this budget."]
    base = {record_key(r)[1:]: r for r in mine if r["preset"] == preset}
    checks = [r for r in records if r["preset"].startswith(preset + "@")]
    if checks:
        out += ["", "Budget checks (the same cell at another step count; "
                "`lens-possym paper-b run --steps N`):", "",
                "| task | variant | scheme | seed | this preset | other steps |",
                "|---|---|---|---|---|---|"]
        for r in sorted(checks, key=lambda r: tuple(map(str, record_key(r)))):
            b = base.get(record_key(r)[1:])
            shown = (f"{percent(b['accuracy'])} at {b['steps']:,} steps" if b else "not run")
            out.append(f"| {r['task']} | {r['variant']} | {r['scheme']} | {r['seed']} | "
                       f"{shown} | {percent(r['accuracy'])} at {r['steps']:,} steps |")
    return out


def _mark(holds: "bool | None") -> str:
    return "✓" if holds else "–" if holds is None else "✗"


def _verdict_table(rows: list[dict[str, Any]], seeds: tuple[int, ...]) -> list[str]:
    """The verdict table's lines: per claim, the rule per seed and the verdict, per variant."""
    out = ["| # | claim | paper | rule | intended, per seed | verdict | faithful, per seed "
           "| verdict |", "|---|---|---|---|---|---|---|---|"]
    for row in rows:
        c = row["claim"]
        cells = []
        for variant in ("intended", "faithful"):
            v = row[variant]
            per = "<br>".join(f"s{s}: {_mark(h)} {text}" for s, (h, text) in zip(seeds, v["seeds"]))
            cells += [per, f"**{v['verdict']}** ({v['held']}/{len(seeds)})"]
        out.append(f"| {c.number} | {c.text} | {c.paper} | {c.rule} | " + " | ".join(cells) + " |")
    return out


#: the claims read on the ``+copies`` preset's distance task (claim 5 is why it exists)
DISTANCE_CLAIMS = ("1", "2", "3", "4", "5")


def _claim5_pointer(rows: list[dict[str, Any]], copies: str, seeds: tuple[int, ...]) -> str:
    """One line under the main table: where claim 5's verdict of record is, and what it is
    (the main table refuses claim 5 wherever the exact-label task saturates). ``rows``:
    :func:`judge` on the ``+copies`` grid."""
    row = next(r for r in rows if r["claim"].number == "5")
    said = ", ".join(f"{v} **{row[v]['verdict']}** ({row[v]['held']}/{len(seeds)})"
                     for v in ("intended", "faithful"))
    return (f"Claim 5's verdict of record is read on the official filler draw (preset "
            f"`{copies}`, below), where the distance task cannot saturate: {said}.")


def copies_ceiling(preset: Preset, seed: int) -> tuple[float, float]:
    """The best accuracy any model can have on a ``+copies`` cell's analysis sentences: the
    share of them the Bayes reading (:meth:`DistanceTask.best_guess`) gets right, and the
    chance it is right averaged over them (the task's ceiling, less the set's luck)."""
    task = preset_task(with_trigger_copies(preset), "distance", seed)
    batch = analysis_batch(preset, task, seed)
    guess, prob = task.best_guess(batch.tokens)
    return float((guess == batch.answers).double().mean()), float(prob.mean())


def _copies_block(records: list[dict], rows: list[dict[str, Any]], preset: str,
                  seeds: tuple[int, ...]) -> list[str]:
    """Claims 1-5 judged, by the same rules, on the distance task with the official filler
    draw (``preset``'s ``+copies`` grid; ``rows``: :func:`judge` on it), and its accuracies
    beside the most any model can get on the same sentences."""
    copies = with_trigger_copies_name(preset)
    rows = [r for r in rows if r["claim"].number in DISTANCE_CLAIMS]
    mine = {(r["variant"], r["scheme"], r["seed"]): r for r in records if r["preset"] == copies}
    out = ["", f"### The distance claims on the official filler draw (preset `{copies}`)", "",
           "The same rules on the distance task whose fillers are drawn as the official "
           "generator draws them (both trigger words among them; the label is the drawn gap, "
           "which a sentence with an extra trigger copy leaves open): a task with a ceiling "
           "below a perfect score, so claim 5 can be judged where the exact-label task saturates. "
           "MAIN schemes only; the table above stays the verdict of record for claims 1-4.", "",
           *_verdict_table(rows, seeds), "",
           "| scheme | intended, per seed | faithful, per seed |", "|---|---|---|"]
    for scheme in MAIN:
        out.append(f"| {scheme} | " + " | ".join(
            " / ".join(percent(mine[(v, scheme, s)]["accuracy"]) if (v, scheme, s) in mine else "·"
                       for s in seeds) for v in ("intended", "faithful")) + " |")
    ceilings = [copies_ceiling(ENCODER_PRESETS[preset], s)[0] for s in seeds]
    best = " / ".join(percent(c) for c in ceilings)
    reach = ("below" if max(ceilings) < SATURATED else "not below")
    out += [f"| *best possible* | {best} | {best} |", "",
            "*Best possible*: the Bayes reading of the same analysis sentences "
            "(`DistanceTask.best_guess`: every (A, B) pair the draw could have planted is "
            "equally likely, so the best guess is the gap with the most posterior mass), the most "
            f"any model can score on them: at most {percent(max(ceilings))} %, {reach} the "
            f"{SATURATED * 100:.0f} % that counts as saturated."]
    return out


def verdict_markdown(records: list[CellRecord | dict], preset: str, seeds: tuple[int, ...] = (0, 1, 2),
                     *, command: str = "") -> str:
    """docs/paper_b.md's block for ``preset``: the verdict table (the paper's number, ours
    per seed, the rule, the verdict), accuracy per seed, the per-head ablation summaries,
    claim 8's deposit counts, and the faithful variant's remaining departures. ``records``:
    :class:`~.records.CellRecord` or their mappings."""
    records = as_dicts(records)
    rows = judge(records, preset, seeds)
    mine = [r for r in records if r["preset"] == preset]
    seed_txt = ", ".join(str(s) for s in seeds)
    out = [f"<!-- written by `{command or 'lens-possym paper-b report --preset ' + preset}`"
           "; do not edit -->", "",
           f"### Verdicts, preset `{preset}` (seeds {seed_txt}; rules fixed in "
           "docs/paper_b_rules.md before the runs)", "",
           "A rule is applied per seed (✓ holds, ✗ does not, – cannot be applied); a claim "
           "**holds** when its rule holds in at least two of the three seeds.", "",
           *_verdict_table(rows, seeds)]
    copies = with_trigger_copies_name(preset)
    if any(r["preset"] == copies for r in records):
        copy_rows = judge(records, copies, seeds)
        out += ["", _claim5_pointer(copy_rows, copies, seeds)]
        out += _copies_block(records, copy_rows, preset, seeds)
    out += ["", f"### Accuracy (held-out sentences, %), preset `{preset}`, seeds {seed_txt}", "",
            "| scheme | distance intended | distance faithful | count intended | count faithful |",
            "|---|---|---|---|---|"]
    schemes = []
    for r in mine:
        if r["scheme"] not in schemes:
            schemes.append(r["scheme"])
    order = list(MAIN) + ["rope-k1", "rope-k2", "hybrid"]
    schemes.sort(key=lambda s: order.index(s) if s in order else len(order))
    index = {(r["task"], r["variant"], r["scheme"], r["seed"]): r for r in mine}

    def per_seed(task, variant, scheme, read) -> str:
        got = [index.get((task, variant, scheme, s)) for s in seeds]
        if not any(got):
            return "—"
        return " / ".join("·" if g is None else read(g) for g in got)

    for scheme in schemes:
        out.append(f"| {scheme} | " + " | ".join(
            per_seed(t, v, scheme, lambda g: percent(g["accuracy"]))
            for t in ("distance", "count") for v in ("intended", "faithful")) + " |")
    out += ["", "### Single-head ablation (per-head, every scheme), per seed", "",
            "Top drop / second drop in accuracy points, heads whose ablation alone costs more "
            f"than {HEADS_OVER * 100:.0f} points, and the deposit rule (top drop >= "
            f"{DEPOSIT_RELATIVE * 100:.0f} % of the accuracy and >= {DEPOSIT_RATIO:g}x the second, "
            f"accuracy >= {DEPOSIT_LEARNED * 100:.0f} %).", "",
            "| task | variant | scheme | accuracy | top head | top drop | second drop | "
            f"heads > {HEADS_OVER * 100:.0f} | deposit |", "|---|---|---|---|---|---|---|---|---|"]
    for task in ("distance", "count"):
        for variant in ("intended", "faithful"):
            for scheme in schemes:
                if not any(index.get((task, variant, scheme, s)) for s in seeds):
                    continue
                a = lambda key, fmt: per_seed(task, variant, scheme,  # noqa: E731
                                              lambda g: fmt(g["ablation"][key]))
                out.append(
                    f"| {task} | {variant} | {scheme} | "
                    f"{per_seed(task, variant, scheme, lambda g: percent(g['accuracy']))} | "
                    f"{a('top_head', lambda h: f'{h[0]}.{h[1]}')} | {a('top_drop', percent)} | "
                    f"{a('second_drop', percent)} | {a('heads_over_10', str)} | "
                    f"{a('deposit', lambda d: 'yes' if d else 'no')} |")
    official = [r for r in mine if "ablation_official" in r]
    if official:
        out += ["", "Faithful MLA's official (latent-slice, `mlavis.py`) ablation, beside the "
                "per-head one above: " + "; ".join(
                    f"{r['task']} s{r['seed']}: top {percent(r['ablation_official']['top_drop'])} / "
                    f"second {percent(r['ablation_official']['second_drop'])}, deposit "
                    f"{'yes' if r['ablation_official']['deposit'] else 'no'}"
                    for r in sorted(official, key=lambda r: (r["task"], r["seed"]))) + "."]
    out += _levelling_block(records, preset, seeds)
    counts = deposit_table(records, preset, seeds)
    with_dep = sorted((k, n) for k, n in counts.items() if n)
    out += ["", "**Claim 8 as the data say**: models with a deposit, in how many seeds: "
            + (", ".join(f"{t} {v} {s} ({n}/{len(seeds)})" for (t, v, s), n in with_dep)
               or "none") + ".", "",
            "**The faithful variant's remaining departures from the official code** (its "
            f"model equals the official classes to within {OFFICIAL_AGREEMENT:g} in float64, "
            "`tests/papers/b/test_encoder_official.py`):", ""]
    out += [f"* {d}" for d in faithful_departures()]
    return "\n".join(out) + "\n"
