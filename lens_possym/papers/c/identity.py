r"""Which run a record, a cached analysis and a grid cell belong to (paper C).

**Current records.** A run is ``(task, preset, seed)`` trained with what
:func:`.presets.run_configs` builds for it today. A record (``docs/paper_c_runs/
{task}-{preset}-s{seed}.json``, or a run folder's ``metrics.json``) is read as that run
only when its ``model_config``, ``task_config`` and ``train_config`` equal today's
(:func:`recipe_differences`). Not part of the recipe: where the run was kept
(``out_dir``), the ``device`` and how evaluations were batched (``eval_batch``, a speed
setting). A key that a record lacks means what the code did before the key existed
(:data:`FORMER_DEFAULTS`: ``activation`` ``gelu_new``, ``embedding_dropout`` ``None`` (=
the dropout), ``decay`` ``"all"``); any other missing key is a difference. A record of
another recipe is never read as the run: every consumer lists it ("trained with a former
recipe: <fields>; retrain it") and treats the run as not there.

**Fingerprint** (:func:`fingerprint`): the first 16 hex digits of the sha256 of the run's
name, its recipe (as compared above) and its evaluation history (step, test accuracy,
train and test loss, learning rate at every evaluation), as canonical JSON. Why these:
the records are committed and the checkpoints are not, so a run's identity must be
computable from the record alone (and from ``metrics.json``, which holds the same
fields); the losses at every evaluation, to 17 digits, are a function of the trained
weights that two different trainings do not share, while the wall times (``elapsed_s``,
``train_time_s``), the thread count and the command are not part of it, so a run
retrained bit for bit (training is reproducible on one machine, dropout included) keeps
its fingerprint and its analyses stay valid.

**The reference CPU kernels** (:data:`PRESET_KERNELS`). Which vector kernels MKL and
ATen pick depends on the CPU: the same run trained on an AVX-512 machine after an AVX2 one
(seed 2, 2026-12-07) had the same test accuracy at all 70 of Number's evaluations but its
losses differed from the 8th digit at the first, so it was another run with another
fingerprint. With ``MKL_CBWR=AVX2 ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2`` in
the environment, that AVX-512 machine reproduced the AVX2 machine's losses to the last
digit: the committed ``paper`` runs were trained with AVX2 kernels, so one retrained under
these settings on any x86-64 CPU with AVX2 is the committed run (and its committed analyses
hold). The committed ``cpu`` runs came from an AVX-512 machine instead (checked with
``paper-c kernels``, 2026-12-07: all six equal the records under AVX-512 kernels, natively
and with ``MKL_CBWR=AVX512 ATEN_CPU_CAPABILITY=avx512``, and seed 0 differs under AVX2 ones,
Number at step 100, Letter at 500 though not at 100), so they retrain only on an AVX-512
CPU (:data:`AVX512_KERNELS`).
``lens-possym paper-c kernels`` retrains a run to one of its record's evaluations and
compares, ``train``, ``analyse`` and ``grid`` say when the settings of their preset are
missing (:func:`kernels_note`), and a record written by ``train`` names its kernels
(``cpu_kernels``, not part of the fingerprint).

**Stage cache.** Each ``{preset}-s{seed}/`` folder of ``--cache`` holds
``stamps.json``: ``{"files": {path: {"run", "fingerprint", "sha256"}}}``, one entry per
file a stage wrote (``path`` relative to the folder, e.g. ``dynamics/number_100-1000.json``;
``sha256`` of the file's bytes, so a file rewritten after it was stamped is unstamped
again). The data files are left as the stages write them. :func:`check_cached` refuses a
file stamped for another run, or not stamped (written by code older than these stamps).

**Grid cells** carry ``run_fingerprint`` (:func:`cells_of_runs` refuses a cell of a
current run measured on another run, or carrying none).

**Stamping what older code wrote** (:func:`stamp_cache`, :func:`stamp_cells`;
``lens-possym paper-c stamp``): only files of runs whose record is current and whose run
folder (``--runs``) holds that very run (its ``metrics.json`` has the record's
fingerprint), and only when the file can be shown to belong to it: a dynamics file by its
content (its accuracy at every checkpoint equals the record's test accuracy there, to the
last digit), the record's own copy (``train_{task}.json``) by its fingerprint, any other
file by its time (written after the run's ``model.pt``: not before the run it is stamped
for finished); a grid cell by its ``step`` (the run's last) and the run folder, since
cells share one file and carry no time of their own. Stamping is idempotent.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Iterator

from ...errors import LensPossymError, ResultsFileError
from ...plugins import to_jsonable
from ...training.kernels import AVX2_KERNELS, AVX512_KERNELS, cpu_kernels
from ...training.kernels import kernels_note as core_kernels_note
from .presets import run_configs

__all__ = ["REFERENCE_KERNELS", "PRESET_KERNELS", "cpu_kernels", "kernels_note", "FORMER_DEFAULTS",
           "NOT_RECIPE", "HISTORY_KEYS", "STAMPS", "run_name", "today_configs",
           "recipe_differences", "former_text", "fingerprint", "Records",
           "read_records", "file_lock", "read_stamps", "stamp_files", "check_cached",
           "cells_of_runs", "dynamics_matches", "stamp_cache", "stamp_cells"]

TASKS = ("number", "letter")
SECTIONS = ("model_config", "task_config", "train_config")
#: what a key missing from a record meant: the code's behaviour before the key existed
FORMER_DEFAULTS = {"model_config": {"activation": "gelu_new", "embedding_dropout": None},
                   "train_config": {"decay": "all"}}
#: settings that do not change what is trained (where, on what, evaluation batching)
NOT_RECIPE = {"train_config": ("out_dir", "device", "eval_batch")}
#: the history fields the fingerprint reads (not the wall times)
HISTORY_KEYS = ("step", "test_accuracy", "train_loss", "test_loss", "lr")
STAMPS = "stamps.json"


#: the kernels the committed `paper` runs were trained with (module docstring): AVX2, on
#: any x86-64 CPU that has it
REFERENCE_KERNELS = AVX2_KERNELS
#: the kernels each preset's committed runs were trained with (module docstring)
PRESET_KERNELS = {"paper": REFERENCE_KERNELS, "cpu": AVX512_KERNELS}


def kernels_note(preset: str = "paper") -> str | None:
    """``None`` when this process runs the kernels ``preset``'s committed runs were trained
    with (or the preset has none on record), else one line saying what differs and the
    prefix that fixes it (read once, at the start of a stage)."""
    reference = PRESET_KERNELS.get(preset)
    if reference is None:
        return None
    return core_kernels_note(reference, f"a {preset} run trained here differs from the "
                             "committed record after its first steps, and analyses may "
                             "differ in their last digits")


def run_name(task: str, preset: str, seed: int) -> str:
    return f"{task}-{preset}-s{seed}"


@functools.lru_cache(maxsize=64)
def _today_text(task: str, preset: str, seed: int) -> str:
    t, model_config, config = run_configs(task, preset, seed=seed, out_dir="(any)")
    return json.dumps({"model_config": model_config.to_dict(),
                       "task_config": to_jsonable(t.config()),
                       "train_config": to_jsonable(asdict(config))})


def today_configs(task: str, preset: str, seed: int) -> dict[str, dict]:
    """``{"model_config", "task_config", "train_config"}`` as :func:`.presets.run_configs`
    builds them today (JSON forms; ``out_dir`` a placeholder)."""
    return json.loads(_today_text(task, preset, int(seed)))


def _recipe(section: str, config: dict | None) -> dict:
    """A record's section as compared: former defaults filled in, non-recipe keys out."""
    out = {**FORMER_DEFAULTS.get(section, {}), **to_jsonable(config or {})}
    return {k: v for k, v in out.items() if k not in NOT_RECIPE.get(section, ())}


def recipe_differences(record: dict, task: str, preset: str, seed: int) -> list[str]:
    """What in ``record``'s configs differs from what ``preset`` builds today for ``task``
    and ``seed``, one ``section.key`` phrase each (empty: the record is current)."""
    try:
        today = today_configs(task, preset, seed)
    except LensPossymError as error:
        return [f"preset {preset!r} / task {task!r} is not one today's code builds ({error})"]
    out = []
    for section in SECTIONS:
        if not record.get(section):
            out.append(f"{section} not recorded")
            continue
        theirs_raw = to_jsonable(record[section])
        theirs, ours = _recipe(section, theirs_raw), _recipe(section, today[section])
        for key in sorted(set(theirs) | set(ours)):
            if theirs.get(key, _MISSING) == ours.get(key, _MISSING):
                continue
            if key not in theirs:
                out.append(f"{section}.{key} not recorded (today {json.dumps(ours[key])})")
            elif key not in ours:
                out.append(f"{section}.{key} = {json.dumps(theirs[key])} (unknown today)")
            elif key not in theirs_raw:
                out.append(f"{section}.{key} not recorded, i.e. the former default "
                           f"{json.dumps(theirs[key])} (today {json.dumps(ours[key])})")
            else:
                out.append(f"{section}.{key} = {json.dumps(theirs[key])} "
                           f"(today {json.dumps(ours[key])})")
    return out


_MISSING = object()


def former_text(name: str, differences: list[str]) -> str:
    """The sentence every consumer prints for a record of another recipe."""
    return f"{name}: trained with a former recipe ({'; '.join(differences)}), retrain it"


def fingerprint(record: dict, task: str, preset: str, seed: int) -> str:
    """The run's identity (module docstring): 16 hex digits of a sha256 over its name, its
    recipe and its evaluation history."""
    body = {"run": run_name(task, preset, seed),
            **{s: _recipe(s, record.get(s)) for s in SECTIONS},
            "history": [[h.get(k) for k in HISTORY_KEYS] for h in record.get("history", [])]}
    text = json.dumps(to_jsonable(body), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


@dataclass
class Records:
    """The records of a folder: ``current`` (read as their runs) by ``(task, preset,
    seed)``, ``fingerprints`` by run name, ``former`` (another recipe: the differing
    fields) by ``(task, preset, seed)``."""

    current: dict[tuple[str, str, int], dict] = field(default_factory=dict)
    fingerprints: dict[str, str] = field(default_factory=dict)
    former: dict[tuple[str, str, int], list[str]] = field(default_factory=dict)

    def former_lines(self, presets: Iterable[str] | None = None) -> list[str]:
        keep = None if presets is None else set(presets)
        return [former_text(run_name(*k), d) for k, d in sorted(self.former.items())
                if keep is None or k[1] in keep]


def read_records(folder: Path) -> Records:
    """Every record in ``folder`` (``docs/paper_c_runs``), sorted into current and
    former-recipe ones (:func:`recipe_differences`)."""
    out = Records()
    for path in sorted(Path(folder).glob("*.json")):
        r = json.loads(path.read_text())
        key = (r["task"], r["preset"], int(r["seed"]))
        differences = recipe_differences(r, *key)
        if differences:
            out.former[key] = differences
        else:
            out.current[key] = r
            out.fingerprints[run_name(*key)] = fingerprint(r, *key)
    return out


# ---- the stage cache's stamps -----------------------------------------------------------

@contextmanager
def file_lock(path: Path) -> Iterator[None]:
    """An exclusive ``flock`` on ``path + ".lock"`` for the ``with`` block (parallel jobs
    that rewrite one JSON file take turns)."""
    import fcntl

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(str(path) + ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _sha(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def read_stamps(folder: Path) -> dict[str, dict]:
    """``{path: {"run", "fingerprint", "sha256"}}`` of a ``{preset}-s{seed}`` folder."""
    path = Path(folder) / STAMPS
    return json.loads(path.read_text())["files"] if path.is_file() else {}


def stamp_files(folder: Path, entries: dict[str, tuple[str, str]]) -> None:
    """Stamp the files ``{path: (run, fingerprint)}`` of ``folder`` with the sha256 of their
    bytes now (under the stamps file's lock; atomic rewrite)."""
    if not entries:
        return
    folder = Path(folder)
    target = folder / STAMPS
    with file_lock(target):
        files = read_stamps(folder)
        for rel, (run, fp) in entries.items():
            files[rel] = {"run": run, "fingerprint": fp, "sha256": _sha(folder / rel)}
        tmp = target.with_name(f"{STAMPS}.tmp{os.getpid()}")
        tmp.write_text(json.dumps({"about": "the run each file was computed from "
                                            "(lens_possym/papers/c/identity.py)",
                                   "files": dict(sorted(files.items()))}, indent=1) + "\n")
        tmp.replace(target)


def check_cached(folder: Path, rel: str, run: str, fp: str, *, fix: str,
                 stamps: dict[str, dict] | None = None) -> None:
    """Refuse ``folder/rel`` unless it is stamped as computed from run ``run`` with
    fingerprint ``fp`` (and unchanged since). ``fix``: the command that recomputes it."""
    folder = Path(folder)
    path = folder / rel
    stamp = (read_stamps(folder) if stamps is None else stamps).get(rel)
    if stamp is None or stamp["sha256"] != _sha(path):
        why = "not stamped" if stamp is None else "changed since it was stamped"
        raise ResultsFileError(
            f"{path} is {why} with the run it was computed from (written by code older than "
            f"run identities?): run 'lens-possym paper-c stamp --cache {folder.parent} --runs "
            f"RUNS' (it stamps it after checking it is {run}'s), or delete it and run {fix}")
    if stamp["fingerprint"] != fp:
        raise ResultsFileError(
            f"{path} was computed from another run of {run} (fingerprint "
            f"{stamp['fingerprint']}; {run}'s record: {fp}): delete it and run {fix}")


# ---- grid cells ------------------------------------------------------------------------

def _cell_name(c: dict) -> str:
    return f"{c['run']} {c['reading']} {c['length']} {c['mode']} n={c['n']}"


def cells_of_runs(cells: Iterable[dict], fingerprints: dict[str, str], *,
                  source: str = "paper_c_results.json") -> list[dict]:
    """The cells of the runs in ``fingerprints`` (run name -> fingerprint); a cell of any
    other run is left out (that run is pending). Raises :class:`ResultsFileError` for a
    cell of such a run that carries no fingerprint, or another run's."""
    out = []
    for c in cells:
        fp = fingerprints.get(c["run"])
        if fp is None:
            continue
        got = c.get("run_fingerprint")
        if got is None:
            raise ResultsFileError(
                f"the grid cell {_cell_name(c)} in {source} has no run fingerprint (measured "
                "by code older than run identities): run 'lens-possym paper-c stamp --runs "
                f"RUNS' (it stamps it after checking the cell is {c['run']}'s), or remove it "
                "and run 'lens-possym paper-c grid' again")
        if got != fp:
            raise ResultsFileError(
                f"the grid cell {_cell_name(c)} in {source} was measured on another run of "
                f"{c['run']} (fingerprint {got}; the record's: {fp}): remove {c['run']}'s cells "
                f"with that fingerprint from {source} (key length_cells) and run "
                f"'lens-possym paper-c grid' again")
        out.append(c)
    return out


# ---- stamping what older code wrote ---------------------------------------------------

_TASK_OF = re.compile(r"^(?:dynamics/)?(?:[a-z]+_)?(number|letter)[_.]")


def _task_of(rel: str) -> str | None:
    m = _TASK_OF.match(rel)
    return m.group(1) if m else None


def dynamics_matches(data: dict, record: dict) -> bool:
    """Whether a dynamics file (a chunk or the whole) was scored on ``record``'s run: its
    accuracy at every checkpoint (the training loop's own test prompts) equals the record's
    test accuracy there, exactly."""
    history = {int(h["step"]): h["test_accuracy"] for h in record.get("history", [])}
    steps, acc = data.get("steps") or [], data.get("accuracy") or []
    return bool(steps) and len(steps) == len(acc) and all(
        int(s) in history and history[int(s)] == a for s, a in zip(steps, acc))


def _run_folder(runs: Path | None, name: str, fp: str, task: str, preset: str, seed: int
                ) -> tuple[float | None, str]:
    """``(finish time, why not)`` of ``runs/name`` if it holds the run ``fp``."""
    if runs is None:
        return None, "no --runs given"
    folder = Path(runs) / name
    metrics, model = folder / "metrics.json", folder / "model.pt"
    if not (metrics.is_file() and model.is_file()):
        return None, f"{folder} holds no finished run"
    if fingerprint(json.loads(metrics.read_text()), task, preset, seed) != fp:
        return None, f"{folder} holds another run than the record"
    return model.stat().st_mtime, ""


def stamp_cache(cache: Path, records: Records, runs: Path | None,
                log: Callable[[str], None] = print) -> dict[str, int]:
    """Stamp every unstamped file of ``cache/{preset}-s{seed}/`` that can be shown to belong
    to its run (module docstring); the rest is listed, not stamped. Returns counts
    ``{"stamped", "already", "refused"}``."""
    counts = {"stamped": 0, "already": 0, "refused": 0}
    for folder in sorted(p for p in Path(cache).glob("*-s*") if p.is_dir()):
        preset, _, seed_text = folder.name.rpartition("-s")
        if not seed_text.isdigit():
            continue
        seed = int(seed_text)
        stamps = read_stamps(folder)
        new: dict[str, tuple[str, str]] = {}
        finished: dict[str, tuple[float | None, str]] = {}
        for path in sorted(folder.rglob("*.json")):
            rel = path.relative_to(folder).as_posix()
            task = _task_of(rel)
            if rel == STAMPS or task is None:
                continue
            key, name = (task, preset, seed), run_name(task, preset, seed)
            if key in records.former:
                counts["refused"] += 1
                log(f"[stamp] {path}: not stamped: {former_text(name, records.former[key])}")
                continue
            fp = records.fingerprints.get(name)
            if fp is None:
                counts["refused"] += 1
                log(f"[stamp] {path}: not stamped: no record of {name}")
                continue
            old = stamps.get(rel)
            if old is not None and old["sha256"] == _sha(path):
                if old["fingerprint"] == fp:
                    counts["already"] += 1
                else:
                    counts["refused"] += 1
                    log(f"[stamp] {path}: stamped for another run of {name} "
                        f"({old['fingerprint']}; the record's {fp}): delete it")
                continue
            record = records.current[key]
            if rel.startswith("dynamics"):
                ok = dynamics_matches(json.loads(path.read_text()), record)
                why = "its accuracy per checkpoint is not the record's"
            elif rel == f"train_{task}.json":
                ok = fingerprint(json.loads(path.read_text()), *key) == fp
                why = "it is another run's record"
            else:
                if name not in finished:
                    finished[name] = _run_folder(runs, name, fp, *key)
                done, why = finished[name]
                ok = done is not None and path.stat().st_mtime >= done
                if done is not None and not ok:
                    why = "written before the run finished (another run's)"
            if ok:
                new[rel] = (name, fp)
                counts["stamped"] += 1
            else:
                counts["refused"] += 1
                log(f"[stamp] {path}: not stamped: {why}")
        stamp_files(folder, new)
        for rel, (name, fp) in new.items():
            log(f"[stamp] {folder / rel}: {name} ({fp})")
    return counts


def stamp_cells(store, records: Records, runs: Path | None,
                log: Callable[[str], None] = print) -> dict[str, int]:
    """Stamp the grid cells without ``run_fingerprint`` of ``store`` (a
    :class:`.readings.CellStore`: docs/paper_c_results.json, key ``length_cells``) whose
    run's record is current, whose run folder in ``runs`` holds that run and whose
    ``step`` is its last; the rest is listed. Returns counts."""
    counts = {"stamped": 0, "already": 0, "refused": 0}
    new = []
    folders: dict[str, tuple[float | None, str]] = {}
    for c in store.cells():
        name = c["run"]
        fp = records.fingerprints.get(name)
        if c.get("run_fingerprint") is not None:
            counts["already" if c["run_fingerprint"] == fp else "refused"] += 1
            if c["run_fingerprint"] != fp:
                log(f"[stamp] cell {_cell_name(c)}: measured on another run "
                    f"({c['run_fingerprint']}; the record's {fp})")
            continue
        key = (c["task"], c["preset"], int(c["seed"]))
        why = ""
        if key in records.former:
            why = former_text(name, records.former[key])
        elif fp is None:
            why = f"no record of {name}"
        else:
            if name not in folders:
                folders[name] = _run_folder(runs, name, fp, *key)
            done, why = folders[name]
            if done is not None and c.get("step") != records.current[key]["steps"]:
                why = f"its step {c.get('step')} is not the run's last"
        if why:
            counts["refused"] += 1
            log(f"[stamp] cell {_cell_name(c)}: not stamped: {why}")
            continue
        new.append({**c, "run_fingerprint": fp})
    if new:
        store.put(new)
        counts["stamped"] = len(new)
        log(f"[stamp] {len(new)} cells of {sorted({c['run'] for c in new})} in {store.path}")
    return counts
