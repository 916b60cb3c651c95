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

__all__ = ["TASKS", "PRESET_NAMES", "SEEDS", "LENGTHS", "READING_LENGTHS", "MASK_LENGTHS",
           "GAP_LENGTHS", "LM_LENGTHS", "LM_MODELS", "default_runs", "default_cache",
           "records_dir", "say", "run_name", "run_dir", "cached", "run_cached", "final_model",
           "run_finished", "finished_runs", "one_run"]

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
               force: bool = False) -> Any:
    """:func:`cached` in the folder of one (preset, seed): ``cache/{preset}-s{seed}/``."""
    return cached(args, f"{args.preset}-s{args.seed}/{name}", compute, force=force)


def cached(args: argparse.Namespace, name: str, compute: Callable[[], Any], *,
           force: bool = False) -> Any:
    """Read ``args.cache/name.json`` or compute, write and return it (in the form a later
    read gives: non-finite floats as null, tensors as lists)."""
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
    """``(model, task, step)`` of a finished run's final checkpoint."""
    found = latest_checkpoint(run_dir(task, args))
    if found is None:
        raise TrainingError(f"no run for {task} in {run_dir(task, args)}: run "
                            "'lens-possym paper-c train' first")
    if found.name != "model.pt":
        raise TrainingError(f"{run_name(task, args)} is not finished (no model.pt in "
                            f"{run_dir(task, args)}); the analyses read finished runs")
    ckpt = read_checkpoint(found)
    return ckpt.model(), ckpt.make_task(), ckpt.step


def run_finished(task: str, args: argparse.Namespace) -> bool:
    return (run_dir(task, args) / "model.pt").is_file()


def finished_runs(args: argparse.Namespace) -> list[tuple[str, str, int]]:
    """``(task, preset, seed)`` of every finished run in ``args.runs`` (``model.pt``
    written), narrowed by ``--presets``/``--seeds``/``--tasks``."""
    out = []
    for path in sorted(Path(args.runs).glob("*-*-s*")):
        task, preset, seed = path.name.rsplit("-", 2)
        if not (path / "model.pt").is_file() or not seed[1:].isdigit():
            continue
        if task in args.tasks and preset in args.presets and int(seed[1:]) in args.seeds:
            out.append((task, preset, int(seed[1:])))
    order = {p: i for i, p in enumerate(args.presets)}
    return sorted(out, key=lambda r: (order.get(r[1], 9), r[2], TASKS.index(r[0])))


def one_run(args: argparse.Namespace, task: str, preset: str, seed: int) -> argparse.Namespace:
    """``args`` narrowed to one run."""
    return argparse.Namespace(**{**vars(args), "tasks": [task], "preset": preset, "seed": seed})
