"""What paper C's report reads (:mod:`.report`): the finished runs' current records
(``docs/paper_c_runs/*.json``, :mod:`.identity`) and the cached analyses of one run
(``--cache``, one folder per ``(preset, seed)``; each file stamped with its run), turned
into the :class:`~lens_possym.papers.c.verdicts.RunAnalyses` the verdict rules read and
into one entry of ``docs/paper_c_results.json``; and the formatting helpers the report's
sections share."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import torch

from .dynamics import purity
from .identity import check_cached, read_records, read_stamps
from .tasks import FILLERS, HEADLINE_FILLER
from .verdicts import RunAnalyses, nan_list

__all__ = ["TASKS", "SEEDS", "MARK", "read_json", "nan_list", "as_tensor", "records",
           "load_run", "analyses_of", "first_step", "result_record", "run_order",
           "verdict_cell", "fmt"]

TASKS = ("number", "letter")
SEEDS = (0, 1, 2)
MARK = {True: "✓", False: "✗", None: "…"}


# ---- reading ---------------------------------------------------------------------------------

def read_json(path: Path) -> Any:
    """The JSON at ``path``, or ``None`` if there is no such file."""
    return json.loads(path.read_text()) if path.is_file() else None


def as_tensor(x) -> torch.Tensor:
    return torch.tensor(nan_list(x), dtype=torch.float32)


def records(folder: Path) -> dict[tuple[str, str, int], dict]:
    """Every **current** record in ``folder`` (``docs/paper_c_runs``) by ``(task, preset,
    seed)``: one trained with what its preset builds today (:func:`.identity.read_records`
    also gives the former-recipe ones and the fingerprints)."""
    return read_records(folder).current


def load_run(cache: Path, task: str, preset: str, seed: int, *, fingerprint: str) -> dict:
    """Every cached analysis of one run (``None`` where missing); each file read must be
    stamped as computed from the run ``fingerprint`` (:func:`.identity.check_cached`,
    :class:`~lens_possym.errors.ResultsFileError` naming the file and the fix)."""
    folder = cache / f"{preset}-s{seed}"
    stamps = read_stamps(folder)
    name = f"{task}-{preset}-s{seed}"
    fix = f"'lens-possym paper-c analyse --presets {preset} --seeds {seed} --tasks {task}'"

    def read(path: Path) -> Any:
        if not path.is_file():
            return None
        check_cached(folder, path.relative_to(folder).as_posix(), name, fingerprint,
                     fix=fix, stamps=stamps)
        return json.loads(path.read_text())

    lengths: dict[str, dict[int, dict]] = {f: {} for f in FILLERS}
    for path in sorted(folder.glob(f"length_{task}_*.json")):
        data = read(path)
        lengths[data.get("filler", HEADLINE_FILLER)][int(data["lengths"][0])] = data
    masking = {}
    for path in sorted(folder.glob(f"masking_{task}_*.json")):
        data = read(path)
        masking[int(data["lengths"][0])] = data
    return {"dynamics": read(folder / f"dynamics_{task}.json"),
            "roles": read(folder / f"roles_{task}.json"),
            "gaps": read(folder / f"gaps_{task}.json"),
            "timing": read(folder / f"timing_{task}.json"),
            "frequency": read(folder / f"frequency_{task}.json"),
            "lengths": lengths, "masking": masking}


def analyses_of(task: str, preset: str, seed: int, record: dict | None,
                run: dict | None) -> RunAnalyses | None:
    """The :class:`RunAnalyses` the verdict rules read (``None`` if the run does not exist)."""
    if record is None or run is None:
        return None
    a = RunAnalyses(task, preset, seed,
                    history=[(h["step"], h["test_accuracy"]) for h in record["history"]])
    d = run["dynamics"]
    if d:
        a.steps, a.accuracy_by_hops = list(d["steps"]), nan_list(d["accuracy_by_hops"])
        a.pos, a.sym = as_tensor(d["pos"]), as_tensor(d["sym"])
    r = run["roles"]
    if r:
        a.labels = r["attention"]["labels"]
        a.hop_by_stop = as_tensor(r["attention"]["hop_by_stop"])
        if "lens" in r:
            a.lens_decoded = as_tensor(r["lens"]["decoded"])
            a.patch_restore = as_tensor(r["patching"]["restore"])
    head = run["lengths"][HEADLINE_FILLER]
    if head:
        a.lengths = {n: v["accuracy"][0] for n, v in head.items()}
    g = run["gaps"]
    if g:
        a.gap_min = {n: as_tensor(g["min"][i]) for i, n in enumerate(g["lengths"])}
        a.gap_max = {n: as_tensor(g["max"][i]) for i, n in enumerate(g["lengths"])}
    return a


def first_step(history: list[dict], level: float = 0.99) -> int | None:
    """The first evaluated step with test accuracy >= ``level`` (``None``: never)."""
    for h in history:
        if h["test_accuracy"] >= level:
            return h["step"]
    return None


def result_record(rec: dict, run: dict, fingerprint: str | None = None) -> dict:
    """One run's entry of ``docs/paper_c_results.json`` (``runs``): its record, its
    identity (:func:`.identity.fingerprint`) and the analyses it has (null where not
    measured yet)."""
    head = run["lengths"][HEADLINE_FILLER]
    pos_end = sym_end = None
    d = run["dynamics"]
    if d:
        p = purity(as_tensor(d["pos"]), as_tensor(d["sym"]), d["steps"], 0.1)
        counts = p.final_counts()
        pos_end, sym_end = counts["positional"], counts["symbolic"]
    return {
        "task": rec["task"], "preset": rec["preset"], "seed": rec["seed"],
        "fingerprint": fingerprint, "steps": rec["steps"], "test_accuracy": rec["test_accuracy"],
        "accuracy_by_length": {str(n): head[n]["accuracy"][0] for n in sorted(head)} or None,
        "accuracy_by_length_by_reading": {
            f: {str(n): v["accuracy"][0] for n, v in sorted(run["lengths"][f].items())}
            for f in FILLERS if run["lengths"][f]} or None,
        "first_step_at_0.99": first_step(rec["history"]),
        "pure_positional_end": pos_end, "pure_symbolic_end": sym_end,
        "train_time_s": rec["train_time_s"],
    }


# ---- formatting ------------------------------------------------------------------------------

def run_order(item: tuple[tuple[str, int], Any]) -> tuple[int, int]:
    """Runs by seed, Number before Letter."""
    (task, seed), _ = item
    return seed, TASKS.index(task)


def verdict_cell(result) -> str:
    """A rule's result as a table cell: mark and what we measured."""
    if result is None:
        return "… not run"
    text = result.ours.replace("|", "/")
    return f"{MARK[result.holds]} {text}"


def fmt(x, digits=2) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "–"
    return f"{x:.{digits}f}"
