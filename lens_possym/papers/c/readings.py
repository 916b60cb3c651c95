r"""Paper C's length test under every reading of the extra symbols (docs/paper_c_rules.md,
addendum of 2026-11-28).

A **cell** is one (run, reading, length, mode): the accuracy of a trained run's final model
on ``n`` prompts of that length whose extra tokens are drawn by that reading
(:data:`~lens_possym.papers.c.tasks.FILLERS`), overall and per hop count, with the binomial
standard error ``se = sqrt(p (1 - p) / n)`` (``p`` the accuracy; per hop count with that
hop count's ``n``). ``mode`` is ``"as built"`` (the length test) or a masking-diagnostic
mode (:mod:`~lens_possym.papers.c.masking`: ``"mask"``, the extension hidden from layers
0-3; ``"positions"``, the extension at trained-range position ids). A cell is a plain
JSON object (:func:`length_cell`, :func:`mask_cells`)::

    {"run": "letter-paper-s0", "task": "letter", "preset": "paper", "seed": 0,
     "step": 7000, "run_fingerprint": "3f0c...", "reading": "answer", "same_as": "answer",
     "length": 850,
     "mode": "as built", "n": 1000, "accuracy": 0.91, "se": 0.009,
     "by_hops": [..4], "by_hops_n": [..4], "by_hops_se": [..4], "prompt_seed": 11}

(``run_fingerprint``: the identity of the run measured, :func:`.identity.fingerprint`; the
report and ``verdicts`` read a cell only as the run whose current record has it.)

The prompts of a (task, reading, length) are ``task.at_length(length, filler=reading)
.test_set(n, seed=prompt_seed + length)`` (as :func:`~lens_possym.papers.c.lengths.
accuracy_by_length` draws them), so the masking modes read the very prompts of the
``"as built"`` cell. A reading that generates the same tokens as another for a task
(:meth:`~lens_possym.papers.c.tasks.MultiHopTask.same_as`: Number's ``"answer"``,
Letter's ``"reach"``) copies that reading's cell (``same_as`` names it) instead of
recomputing it.

:class:`CellStore` keeps the cells of many runs in one JSON file (under the key
``"length_cells"``, beside whatever else the file holds, e.g. docs/paper_c_results.json),
written atomically under a file lock so parallel evaluation jobs can share it;
:func:`run_grid` computes every missing cell of one run (resumable: a cell in the store is
never recomputed). :func:`reading_claims` judges claims 13, 14 and 15 per reading under
the lenient and the strict rules of docs/paper_c_rules.md, :func:`all_readings_verdict`
the verdict that holds under every reading, :func:`fig5b_readings` the readings that
reproduce Fig 5B (from :func:`fig5b_distances`, each reading's largest deviation from the
figure, which the report prints beside them), and :func:`grid_table` prints the runs x
readings x lengths table.
:func:`verdict_table` recomputes every verdict of the report (lenient and strict) from
the committed docs/paper_c_verdict_inputs.json and the length cells alone.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Callable, Iterable, Sequence

import torch

from ...errors import InvalidSelectionError
from .identity import cells_of_runs, file_lock
from .masking import extension_accuracy
from .tasks import FILLERS, HEADLINE_FILLER, MultiHopTask
from .verdicts import (
    ROW_KEYS,
    STRICT_KEYS,
    RuleResult,
    analyses_from_dict,
    judge_seed,
    judge_seed_strict,
    judge_theory,
    verdict,
)

__all__ = ["GRID_LENGTHS", "MASK_LENGTHS", "FIG_5B", "FIG_5B_TOLERANCE", "standard_error",
           "length_cell", "mask_cells", "CellStore", "run_grid", "reading_claims",
           "all_readings_verdict", "fig5b_distances", "fig5b_readings", "fig5b_distance_table",
           "grid_table", "report_lines", "verdict_table"]

GRID_LENGTHS = (17, 50, 100, 200, 300, 500, 850, 1000)
MASK_LENGTHS = (100, 300, 850)
#: Fig 5B's values as read in paper_c.md §7 (Number ~0.83 at 50 from the text)
FIG_5B = {"number": {50: 0.83, 100: 0.75, 200: 0.64, 300: 0.47, 500: 0.31, 1000: 0.20},
          "letter": {100: 1.0, 200: 0.99, 300: 0.98, 500: 0.95, 1000: 0.86}}
FIG_5B_TOLERANCE = 0.10


def standard_error(p: float, n: int) -> float:
    """Binomial standard error ``sqrt(p (1 - p) / n)`` (``nan`` for ``n = 0``)."""
    return math.sqrt(p * (1 - p) / n) if n > 0 else math.nan


def _finite(x: float) -> float | None:
    return None if x is None or not math.isfinite(x) else float(x)


def _run_fields(task: MultiHopTask, run: str, preset: str, seed: int, step: int | None,
                fingerprint: str | None = None) -> dict:
    out = {"run": run, "task": task.name, "preset": preset, "seed": int(seed), "step": step}
    if fingerprint is not None:                 # the run's identity (identity.fingerprint)
        out["run_fingerprint"] = fingerprint
    return out


@torch.no_grad()
def length_cell(model, task: MultiHopTask, reading: str, length: int, *, run: str = "",
                preset: str = "", seed: int = 0, step: int | None = None,
                fingerprint: str | None = None, n_prompts: int = 1000, prompt_seed: int = 11,
                chunk: int = 32) -> dict:
    """One ``"as built"`` cell (module docstring): ``model``'s last-position argmax on
    ``n_prompts`` prompts of ``length`` tokens under ``reading``."""
    if reading not in FILLERS:
        raise InvalidSelectionError(f"reading must be one of {FILLERS}, got {reading!r}")
    if length < 2 * task.window + 1:
        raise InvalidSelectionError(f"length must be >= {2 * task.window + 1}, got {length}")
    model.eval()
    long = task.at_length(int(length), filler=reading)
    batch = long.test_set(n_prompts, seed=prompt_seed + int(length))
    preds = torch.cat([model(batch.tokens[i: i + chunk])[:, -1].argmax(-1).cpu()
                       for i in range(0, len(batch), chunk)])
    correct = (preds == batch.answers.cpu()).float()
    hops, _ = long.hop_path(batch.tokens)
    by, by_n = [], []
    for h in range(1, task.max_hops + 1):
        sel = hops == h
        by_n.append(int(sel.sum()))
        by.append(float(correct[sel].mean()) if sel.any() else math.nan)
    acc = float(correct.mean())
    return {**_run_fields(task, run, preset, seed, step, fingerprint), "reading": reading,
            "same_as": task.same_as(reading), "length": int(length), "mode": "as built",
            "n": int(len(batch)), "accuracy": acc, "se": standard_error(acc, len(batch)),
            "by_hops": [_finite(a) for a in by], "by_hops_n": by_n,
            "by_hops_se": [_finite(standard_error(a, k)) for a, k in zip(by, by_n)],
            "prompt_seed": int(prompt_seed)}


def mask_cells(model, task: MultiHopTask, reading: str, length: int, *, run: str = "",
               preset: str = "", seed: int = 0, step: int | None = None,
               fingerprint: str | None = None, n_prompts: int = 1000, prompt_seed: int = 11,
               layers: Sequence[int] = (0, 1, 2, 3),
               chunk: int = 32) -> list[dict]:
    """The masking diagnostic's ``"mask"`` and ``"positions"`` cells on the prompts of the
    ``"as built"`` cell (:func:`~lens_possym.papers.c.masking.extension_accuracy`)."""
    if reading not in FILLERS:
        raise InvalidSelectionError(f"reading must be one of {FILLERS}, got {reading!r}")
    res = extension_accuracy(model, task, [int(length)], layers=layers,
                             modes=("mask", "positions"), n_prompts=n_prompts,
                             seed=prompt_seed, chunk=chunk, filler=reading)
    out = []
    for mode in ("mask", "positions"):
        acc = float(res.accuracy[mode][0])
        out.append({**_run_fields(task, run, preset, seed, step, fingerprint),
                    "reading": reading,
                    "same_as": task.same_as(reading), "length": int(length), "mode": mode,
                    "layers": sorted(int(x) for x in layers), "n": int(n_prompts),
                    "accuracy": acc, "se": standard_error(acc, n_prompts),
                    "by_hops": [_finite(a) for a in res.by_hops[mode][0]],
                    "prompt_seed": int(prompt_seed)})
    return out


def _key(cell: dict) -> tuple:
    return (cell["run"], cell["reading"], int(cell["length"]), cell["mode"], int(cell["n"]))


class CellStore:
    """The cells of many runs in one JSON file, key ``"length_cells"`` (module docstring).

    Every :meth:`put` re-reads the file under an exclusive lock (``path + ".lock"``),
    merges and writes it atomically (a temporary file renamed), so several jobs can add
    cells to the same file; other keys of the file are kept as they are."""

    KEY = "length_cells"

    def __init__(self, path: str | Path):
        self.path = Path(path)

    def _locked(self):
        return file_lock(self.path)

    def _read(self) -> dict:
        if not self.path.is_file():
            return {}
        return json.loads(self.path.read_text())

    def cells(self) -> list[dict]:
        return list(self._read().get(self.KEY, []))

    def get(self, run: str, reading: str, length: int, mode: str, n: int) -> dict | None:
        for cell in self.cells():
            if _key(cell) == (run, reading, int(length), mode, int(n)):
                return cell
        return None

    def put(self, cells: Iterable[dict]) -> None:
        new = list(cells)
        with self._locked():
            data = self._read()
            merged = {_key(c): c for c in data.get(self.KEY, [])}
            merged.update({_key(c): c for c in new})
            data[self.KEY] = sorted(merged.values(), key=lambda c: (
                c["run"], c["reading"], int(c["length"]), c["mode"], int(c["n"])))
            tmp = self.path.with_name(self.path.name + f".tmp{os.getpid()}")
            tmp.write_text(json.dumps(data, indent=1, allow_nan=False) + "\n")
            tmp.replace(self.path)


def run_grid(model, task: MultiHopTask, store: CellStore, *, run: str, preset: str,
             seed: int, step: int | None = None, fingerprint: str | None = None,
             readings: Sequence[str] = FILLERS,
             lengths: Sequence[int] = GRID_LENGTHS, mask_lengths: Sequence[int] = MASK_LENGTHS,
             n_prompts: int = 1000, prompt_seed: int = 11,
             mask_layers: Sequence[int] | None = None,
             log: Callable[[str], None] | None = None) -> list[dict]:
    """Every missing cell of one run, headline reading first, then the others; each cell
    is stored as soon as it is measured (resumable). ``mask_layers``: the layers the
    masking diagnostic hides the extension from (default 0-3, fewer in a shallower
    model). ``fingerprint``: the run's identity (:func:`.identity.fingerprint`), carried by
    every new cell; a cell already in the store that carries none or another is refused
    (:func:`.identity.cells_of_runs`) instead of being kept as this run's. Returns the
    run's cells."""
    bad = [r for r in readings if r not in FILLERS]
    if bad:
        raise InvalidSelectionError(f"readings must be some of {FILLERS}, got {bad}")
    order = [r for r in readings if r == HEADLINE_FILLER] + \
        [r for r in readings if r != HEADLINE_FILLER]
    # a reading that coincides with another is measured after it and copies its cells
    order.sort(key=lambda r: task.same_as(r) != r)
    fields = dict(run=run, preset=preset, seed=seed, step=step, fingerprint=fingerprint,
                  n_prompts=n_prompts, prompt_seed=prompt_seed)
    if fingerprint is not None:
        cells_of_runs(store.cells(), {run: fingerprint}, source=str(store.path))
    out = []
    for reading in order:
        same = task.same_as(reading)
        plan = [(n, ("as built",)) for n in lengths] + \
            [(n, ("mask", "positions")) for n in mask_lengths]
        for n, modes in plan:
            have = [store.get(run, reading, n, m, n_prompts) for m in modes]
            if all(c is not None for c in have):
                out += have
                continue
            if same != reading:
                base = [store.get(run, same, n, m, n_prompts) for m in modes]
                if any(c is None for c in base):
                    raise InvalidSelectionError(
                        f"{run}: reading {reading!r} copies {same!r}, which has no "
                        f"{modes} cells at {n}; include {same!r} in the readings")
                cells = [{**c, "reading": reading, "same_as": same} for c in base]
            elif modes == ("as built",):
                cells = [length_cell(model, task, reading, n, **fields)]
            else:
                layers = range(min(4, model.cfg.n_layers)) if mask_layers is None \
                    else mask_layers
                cells = mask_cells(model, task, reading, n, layers=layers, **fields)
            store.put(cells)
            for c in cells:
                out.append(c)
                if log:
                    log(f"{run} {reading} {n} {c['mode']}: {c['accuracy']:.3f} "
                        f"± {c['se']:.3f}")
    return out


# ---- claims under every reading -------------------------------------------------------

def _accuracies(cells: Iterable[dict], preset: str, mode: str = "as built"
                ) -> dict[tuple[str, int, str], dict[int, float]]:
    """``{(task, seed, reading): {length: accuracy}}`` of one preset."""
    out: dict[tuple[str, int, str], dict[int, float]] = {}
    for c in cells:
        if c["preset"] == preset and c["mode"] == mode:
            out.setdefault((c["task"], int(c["seed"]), c["reading"]), {})[int(c["length"])] = \
                float(c["accuracy"])
    return out


def _judge(key: str, need: dict[str, Sequence[int]], acc: dict, test) -> RuleResult:
    missing = [f"{t} {n}" for t, ns in need.items() for n in ns if n not in acc.get(t, {})]
    if missing:
        return RuleResult(key, None, "pending: " + ", ".join(missing))
    holds, ours = test(acc)
    return RuleResult(key, bool(holds), ours)


def _rules(strict: bool):
    """Claims 13, 14, 15: ``{claim: (lengths needed per task, test)}``."""
    def r13(acc):
        ns = [n for n in GRID_LENGTHS if n >= 50] if strict else [50, 100, 300, 850]
        return (all(acc["letter"][n] >= acc["number"][n] for n in ns),
                "; ".join(f"{n}: L {acc['letter'][n]:.2f} / N {acc['number'][n]:.2f}"
                          for n in ns))

    def r14(acc):
        if strict:
            ns = [n for n in GRID_LENGTHS if 50 <= n <= 850]
            low = min(acc["letter"][n] for n in ns)
            return all(acc["letter"][n] > 0.90 for n in ns), f"min over 50..850 {low:.3f}"
        return acc["letter"][850] >= 0.90, f"{acc['letter'][850]:.3f} at 850"

    def r15(acc):
        if strict:
            ns = [50, 100, 200, 300, 500]
            return (all(abs(acc["number"][n] - FIG_5B["number"][n]) <= FIG_5B_TOLERANCE
                        for n in ns),
                    ", ".join(f"{n}: {acc['number'][n]:.2f} (paper {FIG_5B['number'][n]:.2f})"
                              for n in ns))
        return acc["number"][300] <= 0.6, f"{acc['number'][300]:.3f} at 300"

    if strict:
        long = [n for n in GRID_LENGTHS if n >= 50]
        return {"13": ({"letter": long, "number": long}, r13),
                "14": ({"letter": [n for n in long if n <= 850]}, r14),
                "15": ({"number": [50, 100, 200, 300, 500]}, r15)}
    return {"13": ({"letter": [50, 100, 300, 850], "number": [50, 100, 300, 850]}, r13),
            "14": ({"letter": [850]}, r14), "15": ({"number": [300]}, r15)}


def reading_claims(cells: Iterable[dict], *, preset: str = "paper",
                   seeds: Sequence[int] = (0, 1, 2), readings: Sequence[str] = FILLERS
                   ) -> list[dict]:
    """Claims 13, 14, 15 under each reading, lenient and strict rules: one row per
    (claim, rule, reading) with the per-seed :class:`RuleResult` and the verdict
    (:func:`~lens_possym.papers.c.verdicts.verdict`, two of three seeds)."""
    acc = _accuracies(cells, preset)
    rows = []
    for strict in (False, True):
        for claim, (need, test) in _rules(strict).items():
            for reading in readings:
                per_seed = []
                for s in seeds:
                    by_task = {t: acc.get((t, s, reading), {}) for t in ("number", "letter")}
                    per_seed.append(_judge(claim, need, by_task, test))
                rows.append({"claim": claim, "rule": "strict" if strict else "lenient",
                             "reading": reading, "seeds": list(seeds),
                             "results": per_seed,
                             "verdict": verdict(per_seed, n_seeds=len(seeds))})
    return rows


def all_readings_verdict(rows: Sequence[dict], claim: str, rule: str) -> str:
    """``"holds"`` / ``"does not hold"`` when the claim's verdict is that under **every**
    reading, ``"depends on the reading"`` when readings disagree, ``"pending"`` while
    any reading is pending."""
    verdicts = [r["verdict"] for r in rows if r["claim"] == claim and r["rule"] == rule]
    if not verdicts or "pending" in verdicts:
        return "pending"
    if all(v == "holds" for v in verdicts):
        return "holds"
    if all(v == "does not hold" for v in verdicts):
        return "does not hold"
    return "depends on the reading"


def fig5b_distances(cells: Iterable[dict], *, preset: str = "paper",
                    seeds: Sequence[int] = (0, 1, 2), readings: Sequence[str] = FILLERS
                    ) -> dict[str, dict[str, tuple[float, int] | None]]:
    """Per task and reading, how far the mean over ``seeds`` strays from Fig 5B:
    ``(deviation, length)``, the signed ``mean - Fig 5B`` of largest size over the lengths
    both give (the first such length on a tie), or ``None`` while a needed cell is missing."""
    acc = _accuracies(cells, preset)
    out: dict[str, dict[str, tuple[float, int] | None]] = {}
    for task, paper in FIG_5B.items():
        out[task] = {}
        for reading in readings:
            vals = {n: [acc.get((task, s, reading), {}).get(n) for s in seeds] for n in paper}
            if any(v is None for vs in vals.values() for v in vs):
                out[task][reading] = None
                continue
            devs = [(sum(vs) / len(vs) - paper[n], n) for n, vs in vals.items()]
            out[task][reading] = max(devs, key=lambda d: abs(d[0]))
    return out


def fig5b_readings(cells: Iterable[dict], *, preset: str = "paper",
                   seeds: Sequence[int] = (0, 1, 2), readings: Sequence[str] = FILLERS
                   ) -> dict[str, list[str] | None]:
    """Per task, the readings under which the mean over ``seeds`` is within
    :data:`FIG_5B_TOLERANCE` of every Fig 5B value at the lengths both give (``None``
    while a needed cell is missing: no reading is named before every one is measured)."""
    return _within_tolerance(fig5b_distances(cells, preset=preset, seeds=seeds,
                                             readings=readings))


def _within_tolerance(distances: dict[str, dict[str, tuple[float, int] | None]]
                      ) -> dict[str, list[str] | None]:
    """:func:`fig5b_readings` from :func:`fig5b_distances`' answer."""
    out: dict[str, list[str] | None] = {}
    for task, by_reading in distances.items():
        if any(d is None for d in by_reading.values()):
            out[task] = None
        else:
            out[task] = [r for r, d in by_reading.items() if abs(d[0]) <= FIG_5B_TOLERANCE]
    return out


def grid_table(cells: Iterable[dict], *, preset: str = "paper",
               lengths: Sequence[int] = GRID_LENGTHS, readings: Sequence[str] = FILLERS,
               mode: str = "as built") -> list[str]:
    """Markdown rows: one per (run, reading) with ``accuracy ± se`` at each length (blank
    where not measured), then Fig 5B's values."""
    table: dict[tuple[str, int, str], dict[int, dict]] = {}
    for c in cells:
        if c["preset"] == preset and c["mode"] == mode:
            table.setdefault((c["task"], int(c["seed"]), c["reading"]), {})[int(c["length"])] = c
    lines = ["| run | reading | " + " | ".join(str(n) for n in lengths) + " |",
             "|---|---|" + "---:|" * len(lengths)]
    for task in ("letter", "number"):
        for seed in sorted({s for t, s, _ in table if t == task}):
            for reading in readings:
                row = table.get((task, seed, reading))
                if not row:
                    continue
                name = f"{task}-{preset}-s{seed}"
                same = next(iter(row.values()))["same_as"]
                label = reading + (" (headline)" if reading == HEADLINE_FILLER else "") + \
                    (f" (= {same})" if same != reading else "")
                lines.append(f"| {name} | {label} | " + " | ".join(
                    f"{row[n]['accuracy']:.3f} ± {row[n]['se']:.3f}" if n in row else ""
                    for n in lengths) + " |")
    for task in ("letter", "number"):
        lines.append(f"| {task} (Fig 5B ≈) | | " + " | ".join(
            f"{FIG_5B[task][n]:.2f}" if n in FIG_5B[task] else "" for n in lengths) + " |")
    return lines


_CLAIMS = {"13": "Letter generalises better than Number", "14": "Letter > 90 % up to 850",
           "15": "Number barely generalises (Fig 5B's values)"}


def report_lines(cells: Sequence[dict], *, preset: str = "paper",
                 seeds: Sequence[int] = (0, 1, 2)) -> list[str]:
    """The report's section on the length test under every reading (Markdown lines):
    the runs x readings x lengths table beside Fig 5B, the masking diagnostic per
    reading, claims 13-15 per reading (strict and lenient), the verdict under all
    readings and the readings that reproduce Fig 5B."""
    cells = [c for c in cells if c["preset"] == preset]
    add = []
    add += ["### Length generalisation under every reading of the extra symbols", "",
            "`lens_possym.papers.c.readings` (rules and headline: docs/paper_c_rules.md, "
            "addendum of 2026-11-28): every run x reading x length, 1,000 prompts per cell "
            "(`test_set(1000, seed=11 + length)`), accuracy ± binomial standard error. A "
            "reading marked `(= target)` generates `target`'s tokens for that task and "
            "repeats its cell. Every cell, with its accuracy per hop count: "
            "`docs/paper_c_results.json`, key `length_cells`.", ""]
    if not any(c["mode"] == "as built" for c in cells):
        return add + ["_Pending: no cell measured yet "
                      "(`lens-possym paper-c grid`)._", ""]
    add += grid_table(cells, preset=preset) + [""]
    mask = [c for c in cells if c["mode"] in ("mask", "positions")]
    if mask:
        add += ["The masking diagnostic per reading (as built / extension hidden from "
                "layers 0-3 / extension at trained-range position ids):", ""]
        lengths = sorted({int(c["length"]) for c in mask})
        add += ["| run | reading | " + " | ".join(str(n) for n in lengths) + " |",
                "|---|---|" + "---|" * len(lengths)]
        idx = {(c["run"], c["reading"], int(c["length"]), c["mode"]): c["accuracy"]
               for c in cells}
        for run, reading in sorted({(c["run"], c["reading"]) for c in mask}):
            def cell(n):
                vals = [idx.get((run, reading, n, m)) for m in ("as built", "mask", "positions")]
                return " / ".join("" if v is None else f"{v:.3f}" for v in vals)
            add.append(f"| {run} | {reading} | " + " | ".join(cell(n) for n in lengths) + " |")
        add.append("")
    rows = reading_claims(cells, preset=preset, seeds=seeds)
    readings = [r for r in FILLERS if any(c["reading"] == r for c in cells)]
    add += ["Claims 13-15 per reading (✓ holds / ✗ does not / … pending, per seed; the verdict "
            "by two of three seeds):", "",
            "| claim | rule | " + " | ".join(readings) + " | under all readings |",
            "|---|---|" + "---|" * (len(readings) + 1)]
    mark = {True: "✓", False: "✗", None: "…"}
    for claim in _CLAIMS:
        for rule in ("strict", "lenient"):
            got = {r["reading"]: r for r in rows if r["claim"] == claim and r["rule"] == rule}
            add.append(f"| {claim} {_CLAIMS[claim]} | {rule} | " + " | ".join(
                "".join(mark[x.holds] for x in got[r]["results"]) + f" **{got[r]['verdict']}**"
                for r in readings) + f" | **{all_readings_verdict(rows, claim, rule)}** |")
    add.append("")
    # over every reading, not only those measured: one not measured keeps the sentence pending
    distances = fig5b_distances(cells, preset=preset, seeds=seeds)
    found = _within_tolerance(distances)
    say = {None: "pending", (): "none"}
    add.append("Readings that reproduce Fig 5B (mean over the seeds within "
               f"{FIG_5B_TOLERANCE:.2f} of every Fig 5B value at the lengths both give): "
               + "; ".join(f"{task}: " + (say.get(None if v is None else tuple(v))
                                          or ", ".join(v)) for task, v in found.items()) + ".")
    add += [""] + fig5b_distance_table(distances, readings)
    return add


def fig5b_distance_table(distances: dict[str, dict[str, tuple[float, int] | None]],
                         readings: Sequence[str] | None = None) -> list[str]:
    """Markdown lines: each reading's largest deviation from Fig 5B per task, as
    :func:`fig5b_distances` returns them (columns: ``readings``, default all of them), so
    that the sentence above can be checked and a near miss seen."""
    readings = list(next(iter(distances.values()))) if readings is None else list(readings)
    lines = ["Largest deviation from Fig 5B (mean over the seeds minus the paper's value, and "
             "the length where it is largest; within "
             f"{FIG_5B_TOLERANCE:.2f} everywhere reproduces the figure):", "",
             "| task | " + " | ".join(readings) + " |", "|---|" + "---|" * len(readings)]
    for task, by_reading in distances.items():
        lines.append(f"| {task} | " + " | ".join(
            "pending" if d is None else f"{d[0]:+.3f} at {d[1]}"
            for d in (by_reading[r] for r in readings)) + " |")
    return lines + [""]


def verdict_table(inputs: dict, length_cells: Sequence[dict] = ()) -> dict:
    """Every verdict from committed inputs alone: ``inputs`` as the report writes
    docs/paper_c_verdict_inputs.json (``{"runs": {preset: {seed: {task: analyses}}},
    "theory": {"constructions", "index_table", "index_table_all"}}``), ``length_cells``
    the cells of docs/paper_c_results.json. Returns ``{preset: {"lenient": {key:
    verdict}, "strict": {key: verdict}}, "theory": {key: verdict}}``; the strict rows of
    claims 13-15 are the headline reading's
    (:func:`lens_possym.papers.c.readings.reading_claims`)."""
    out: dict = {}
    for preset, seeds in inputs.get("runs", {}).items():
        lenient: dict[str, list] = {k: [] for k in ROW_KEYS if k not in ("11", "12")}
        strict: dict[str, list] = {k: [] for k in STRICT_KEYS}
        for seed in ("0", "1", "2"):
            tasks = seeds.get(seed, {})
            num = analyses_from_dict(tasks["number"]) if tasks.get("number") else None
            let = analyses_from_dict(tasks["letter"]) if tasks.get("letter") else None
            judged = judge_seed(num, let) if (num or let) else {}
            judged_s = judge_seed_strict(num, let) if (num or let) else {}
            for k in lenient:
                lenient[k].append(judged.get(k))
            for k in STRICT_KEYS:
                strict[k].append(judged_s.get(k))
        table = {"lenient": {k: verdict(v) for k, v in lenient.items()},
                 "strict": {k: verdict(v) for k, v in strict.items()}}
        for row in reading_claims(length_cells, preset=preset):
            if row["rule"] == "strict" and row["reading"] == HEADLINE_FILLER:
                table["strict"][row["claim"]] = row["verdict"]
        out[preset] = table
    th = inputs.get("theory", {})
    theory = judge_theory(th.get("constructions"), th.get("index_table"),
                          th.get("index_table_all"))
    out["theory"] = {k: verdict([r], n_seeds=1) for k, r in theory.items()}
    return out
