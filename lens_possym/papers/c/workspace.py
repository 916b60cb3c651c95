"""Where paper C's pipeline (:mod:`.pipeline`, :mod:`.stages`) keeps things, and the
helpers every stage shares: the runs folder (``--runs``: ``$PAPER_C_RUNS`` or
``out/paper_c/runs``, one folder ``{task}-{preset}-s{seed}`` per run), the cache
(``--cache``: ``$PAPER_C_CACHE`` or ``out/paper_c/cache``, one JSON per cell), the
records (``--docs``/paper_c_runs), a finished run's final model, and the finished runs.
Every function takes the parsed ``args`` of ``lens-possym paper-c``; nothing is global."""

from __future__ import annotations

import argparse
import json
import math
import os
from pathlib import Path
from typing import Any, Callable

import torch

from ...errors import ResultsFileError, TrainingError
from ...training.runs import latest_checkpoint, read_checkpoint
from .identity import check_cached, fingerprint, former_text, recipe_differences, stamp_files

__all__ = ["TASKS", "PRESET_NAMES", "SEEDS", "LENGTHS", "READING_LENGTHS", "MASK_LENGTHS",
           "GAP_LENGTHS", "LM_LENGTHS", "LM_MODELS", "default_runs", "default_cache",
           "records_dir", "say", "run_name", "run_dir", "cached", "run_cached", "run_metrics",
           "run_fingerprint", "final_model", "run_finished", "finished_runs", "one_run"]

TASKS = ("number", "letter")
PRESET_NAMES = ("paper", "cpu")
SEEDS = (0, 1, 2)
LENGTHS = (17, 50, 100, 200, 300, 500, 850)
READING_LENGTHS = (100, 300, 850)       # the other filler readings (the headline: LENGTHS)
MASK_LENGTHS = (100, 300, 850)
GAP_LENGTHS = (17, 100, 300)
LM_LENGTHS = (12, 48, 100, 300, 32, 200, 24, 64, 16, 80, 150)   # most telling first
LM_MODELS = ("gemma-3-270m", "smollm2-135m")
def default_runs() -> Path:
    """``$PAPER_C_RUNS`` or ``out/paper_c/runs`` (read when called, not at import)."""
    return Path(os.environ.get("PAPER_C_RUNS") or Path("out") / "paper_c" / "runs")


def default_cache() -> Path:
    """``$PAPER_C_CACHE`` or ``out/paper_c/cache``."""
    return Path(os.environ.get("PAPER_C_CACHE") or Path("out") / "paper_c" / "cache")


def records_dir(args: argparse.Namespace) -> Path:
    """Where the finished runs' records go: ``--docs``/paper_c_runs (one JSON per run)."""
    return Path(args.docs) / "paper_c_runs"


def say(*parts) -> None:
    print(*parts, flush=True)


def run_name(task: str, args: argparse.Namespace) -> str:
    return f"{task}-{args.preset}-s{args.seed}"


def run_dir(task: str, args: argparse.Namespace) -> Path:
    return Path(args.runs) / run_name(task, args)


def run_cached(args: argparse.Namespace, name: str, compute: Callable[[], Any], *,
               task: str, force: bool = False,
               verify: Callable[[Any], bool] | None = None) -> Any:
    """:func:`cached` in the folder of one (preset, seed), ``cache/{preset}-s{seed}/``, for
    the run of ``task``, whose identity (:func:`run_fingerprint`) every file carries
    (:mod:`.identity`: ``stamps.json``): a file written is stamped; a file read must be
    stamped as this run's, else :class:`~lens_possym.errors.ResultsFileError` names it
    and the fix. ``verify``: a check of a file's content that proves it is this run's
    (dynamics: the accuracy at every checkpoint), which stamps an unstamped file found
    true. A run still training (no ``metrics.json``) has no identity yet: its files are
    written unstamped and read unchecked."""
    folder = Path(args.cache) / f"{args.preset}-s{args.seed}"
    rel = f"{name}.json"
    path = folder / rel
    fp = run_fingerprint(task, args)
    if path.is_file() and not force:
        if fp is not None:
            try:
                check_cached(folder, rel, run_name(task, args), fp,
                             fix=f"'lens-possym paper-c analyse --presets {args.preset} "
                                 f"--seeds {args.seed} --tasks {task}'")
            except ResultsFileError:
                if verify is None or not verify(json.loads(path.read_text())):
                    raise
                stamp_files(folder, {rel: (run_name(task, args), fp)})   # proven by content
        return json.loads(path.read_text())
    value = compute()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(value, indent=1, default=_plain))
    fp = fp or run_fingerprint(task, args)          # train: metrics.json written meanwhile
    if fp is not None:
        stamp_files(folder, {rel: (run_name(task, args), fp)})
    return json.loads(path.read_text())       # the same form as a later read


def run_metrics(task: str, args: argparse.Namespace) -> dict | None:
    """The run folder's ``metrics.json`` (``None`` while the run trains)."""
    path = run_dir(task, args) / "metrics.json"
    return json.loads(path.read_text()) if path.is_file() else None


def run_fingerprint(task: str, args: argparse.Namespace) -> str | None:
    """The identity (:func:`.identity.fingerprint`) of the run of ``task`` in ``--runs``,
    from its ``metrics.json`` (``None`` while it trains); raises
    :class:`~lens_possym.errors.TrainingError` for a run trained with a former recipe."""
    metrics = run_metrics(task, args)
    if metrics is None:
        return None
    differences = recipe_differences(metrics, task, args.preset, args.seed)
    if differences:
        raise TrainingError(f"{run_dir(task, args)}: "
                            + former_text(run_name(task, args), differences).split(": ", 1)[1]
                            + " (its analyses are not computed)")
    return fingerprint(metrics, task, args.preset, args.seed)


def cached(args: argparse.Namespace, name: str, compute: Callable[[], Any], *,
           force: bool = False) -> Any:
    """Read ``args.cache/name.json`` or compute, write and return it (in the form a later
    read gives: non-finite floats as null, tensors as lists). For what belongs to no run
    (the theory, the pretrained LMs); a run's cells go through :func:`run_cached`."""
    path = Path(args.cache) / f"{name}.json"
    if path.is_file() and not force:
        return json.loads(path.read_text())
    value = compute()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(value, indent=1, default=_plain))
    return json.loads(path.read_text())       # the same form as a later read


def _plain(x):
    if isinstance(x, torch.Tensor):
        return x.tolist()
    if isinstance(x, float) and not math.isfinite(x):
        return None
    raise ResultsFileError(f"a stage returned a {type(x).__name__}, which has no JSON form; "
                           "return numbers, lists, dicts or tensors")


def final_model(task: str, args: argparse.Namespace) -> tuple[Any, Any, int]:
    """``(model, task, step)`` of a finished run's final checkpoint (a run trained with a
    former recipe is refused: :func:`run_fingerprint`)."""
    found = latest_checkpoint(run_dir(task, args))
    if found is None:
        raise TrainingError(f"no run for {task} in {run_dir(task, args)}: run "
                            "'lens-possym paper-c train' first")
    if found.name != "model.pt":
        raise TrainingError(f"{run_name(task, args)} is not finished (no model.pt in "
                            f"{run_dir(task, args)}); the analyses read finished runs")
    run_fingerprint(task, args)
    ckpt = read_checkpoint(found)
    return ckpt.model(), ckpt.make_task(), ckpt.step


def run_finished(task: str, args: argparse.Namespace) -> bool:
    return (run_dir(task, args) / "model.pt").is_file()


def finished_runs(args: argparse.Namespace) -> list[tuple[str, str, int]]:
    """``(task, preset, seed)`` of every finished run in ``args.runs`` (``model.pt``
    written), narrowed by ``--presets``/``--seeds``/``--tasks``; a run trained with a
    former recipe (its ``metrics.json`` against :func:`.identity.recipe_differences`) is
    listed ("trained with a former recipe: ..., retrain it") and left out."""
    out = []
    for path in sorted(Path(args.runs).glob("*-*-s*")):
        task, preset, seed = path.name.rsplit("-", 2)
        if not (path / "model.pt").is_file() or not seed[1:].isdigit():
            continue
        if task in args.tasks and preset in args.presets and int(seed[1:]) in args.seeds:
            metrics = path / "metrics.json"
            if not metrics.is_file():
                say(f"[runs] {path.name}: no metrics.json, so its recipe cannot be read "
                    "(not read)")
                continue
            differences = recipe_differences(json.loads(metrics.read_text()), task, preset,
                                             int(seed[1:]))
            if differences:
                say(f"[runs] {former_text(path.name, differences)} (not read)")
                continue
            out.append((task, preset, int(seed[1:])))
    order = {p: i for i, p in enumerate(args.presets)}
    return sorted(out, key=lambda r: (order.get(r[1], 9), r[2], TASKS.index(r[0])))


def one_run(args: argparse.Namespace, task: str, preset: str, seed: int) -> argparse.Namespace:
    """``args`` narrowed to one run."""
    return argparse.Namespace(**{**vars(args), "tasks": [task], "preset": preset, "seed": seed})
