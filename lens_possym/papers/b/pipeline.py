"""Paper B reproduced: train the grid of scheme encoders as queues, then write
docs/paper_b.md's tables (the ``lens-possym paper-b`` command: :mod:`.cli_grid`).

    lens-possym paper-b run [--preset cpu|paper-length|paper] [--seeds 0 1 2]
        [--tasks distance count] [--only intended|faithful|k] [--labels rope mla]
        [--data stream|fixed] [--trigger-copies] [--shard I/N] [--root runs/paper_b]
        [--records docs/paper_b_results.json] [--no-profile]
    lens-possym paper-b queue N        # the paper-length grid, then claim 5's +copies grid
    lens-possym paper-b queue N --levelled   # the same grids trained until they level off,
                                             # scored on 4,096 sentences (.levelled)
    lens-possym paper-b report --preset paper-length [--levelled]
    lens-possym paper-b report [--preset cpu|paper-length] [--root runs/paper_b] [--out docs]
    lens-possym paper-b verdicts [--levelled]
    lens-possym paper-b migrate-records [--records docs/paper_b_results.json]
    lens-possym paper-b kernels [--cell distance rope intended 0]   # before the queues

``run`` walks :func:`lens_possym.papers.b.cells.grid_cells` (``cpu``: every scheme ×
both tasks × intended and faithful, then RoPE on k ∈ {0, 1, 2, 3, all} heads;
``paper-length`` / ``paper``: the schemes the claims name) and, per cell, trains the model
through the shared loop and caches its analyses in
``<root>/<preset>/<task>/<variant>/<scheme>/seed<s>/analysis.json``; a finished cell is never
trained again, an interrupted one resumes from its checkpoint. ``--shard I/N`` runs every
N-th cell from the I-th (to split a grid across machines). Queues started on one grid
(``paper-b queue N``: one per core) share it: each takes the next cell no other
queue holds (a lock in the cell's folder, dropped if the queue dies). Each finished
cell's record (:func:`~lens_possym.papers.b.cells.cell_record`) is written into
``--records`` at once (under a file lock, atomically), so the committed JSON grows as the
grid runs.

``report --preset cpu`` writes the grid's measured tables (accuracy, single-head
ablations, probe) into ``docs/paper_b.md`` (between ``BEGIN/END MEASURED TABLES``) and
``docs/figures/paper_b/*.png`` from the ``cpu`` records of ``--records`` (what ``run``
wrote for each cell: the committed file by default, so no run folder is needed), and the
head profiles, which no record holds, from the ``analysis.json`` files under ``<root>/cpu``
(between ``BEGIN/END CPU PROFILES``; left as they are where there is none). It writes no
record.
``report --preset paper-length`` reads the committed records and writes the verdict table
(:func:`lens_possym.papers.b.verdicts.judge`) between ``BEGIN/END PAPER-LENGTH TABLES``;
with ``--levelled``, the ``+levelled`` blocks, and the same verdicts with every seed's
margins into the records file's ``"verdicts"`` (:func:`levelled_verdicts`).

The records file (``--records``, :func:`read_results`) is one JSON object:
``{"verdicts": {grid: {"rules": date, "claims": [...]}}, "cells": [record, ...]}``.
``run`` merges its cells into ``"cells"`` and leaves ``"verdicts"`` as they are;
``report --levelled`` sets the verdicts of the grids it judged and leaves the cells
(both under the file's lock, atomically). A file of the old format (a JSON list of cells)
is refused with the command that converts it, ``migrate-records``: an explicit step, not a
silent rewrite by a queue, so that the format change is one commit of its own and a queue
started on an old file stops before training rather than after.
Paths are relative to the working directory (the repository's root).
"""

from __future__ import annotations

import argparse
import fcntl
import json
import math
import time
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

from ...errors import InvalidSelectionError, ResultsFileError, TrainingError
from ...plugins import write_text_atomically
from ...training.kernels import kernels_note
from ...training.runs import load_checkpoint
from . import cells as pb_cells
from . import levelled as pb_levelled
from . import presets as pb_presets
from .kernels_check import first_evaluation_check
from .probe import positional_probe
from .records import CellRecord, record_key
from .report import DISTANCE_CLAIMS, verdict_markdown
from .report_cpu import (BEGIN, END, PROFILES, draw_figures, load_analyses, measured_markdown,
                         profiles_markdown, record_rows)
from .margins import RULES_DATE, judge_margins, outcome_mark
from .report_levelled import levelled_reading_markdown
from .report_margins import margins_markdown
from .report_prose import prose_blocks
from .report_reading import reading_markdown
from .verdicts import RECORD_RULES_DATE, judge

__all__ = ["RECORDS", "MARKERS", "COMMAND", "read_records", "write_records", "write_block",
           "preset_for", "select_cells", "run", "queue", "refresh_probe", "report",
           "report_blocks", "verdicts", "levelled_verdicts", "levelled_grids", "read_results",
           "read_verdicts", "write_verdicts", "migrate_records", "MIGRATE"]

#: the committed records, relative to the repository's root (the working directory)
RECORDS = Path("docs") / "paper_b_results.json"
#: how the report's header names the command that wrote it
COMMAND = "lens-possym paper-b report --preset"
MARKERS = {"paper-length": ("<!-- BEGIN PAPER-LENGTH TABLES -->",
                            "<!-- END PAPER-LENGTH TABLES -->"),
           "paper-length reread": ("<!-- BEGIN PAPER-LENGTH REREAD -->",
                                   "<!-- END PAPER-LENGTH REREAD -->"),
           "paper-length reading": ("<!-- BEGIN PAPER-LENGTH READING -->",
                                    "<!-- END PAPER-LENGTH READING -->"),
           "paper-length+levelled": ("<!-- BEGIN PAPER-LENGTH+LEVELLED TABLES -->",
                                     "<!-- END PAPER-LENGTH+LEVELLED TABLES -->"),
           "paper-length+levelled reading": ("<!-- BEGIN PAPER-LENGTH+LEVELLED READING -->",
                                             "<!-- END PAPER-LENGTH+LEVELLED READING -->"),
           # the prose outside the tables (report_prose.prose_blocks), from the same records
           "paper-length copies": ("<!-- BEGIN PAPER-LENGTH COPIES GRID -->",
                                   "<!-- END PAPER-LENGTH COPIES GRID -->"),
           "paper-length cost": ("<!-- BEGIN PAPER-LENGTH COST -->",
                                 "<!-- END PAPER-LENGTH COST -->"),
           "paper-length plan": ("<!-- BEGIN PAPER-LENGTH+LEVELLED PLAN -->",
                                 "<!-- END PAPER-LENGTH+LEVELLED PLAN -->"),
           "cpu wall time": ("<!-- BEGIN CPU WALL TIME -->", "<!-- END CPU WALL TIME -->"),
           "cpu quirks": ("<!-- BEGIN CPU QUIRKS -->", "<!-- END CPU QUIRKS -->"),
           "cpu verdicts": ("<!-- BEGIN CPU VERDICTS -->", "<!-- END CPU VERDICTS -->"),
           "presets": ("<!-- BEGIN PAPER-B PRESETS -->", "<!-- END PAPER-B PRESETS -->")}


@contextmanager
def _flocked(lock: Path, *, wait: bool = True):
    """An exclusive ``flock`` on the file ``lock`` for the block; yields whether this process
    holds it (always, when ``wait``; without ``wait``, ``False`` if another process does).
    The operating system drops it when its holder dies."""
    lock.parent.mkdir(parents=True, exist_ok=True)
    with open(lock, "w") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except BlockingIOError:
            yield False
            return
        try:
            yield True
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _locked(path: Path):
    """An exclusive lock beside ``path``, waited for (two queues write the same records
    file)."""
    return _flocked(path.with_name(path.name + ".lock"))


def _claimed(folder: Path):
    """Whether this process now holds the cell in ``folder``: a non-blocking lock on
    ``folder/claim.lock``, held while the cell runs. Queues sharing a grid each take the
    next cell no other queue holds, so they stay busy however unequal the cells' costs (a
    fixed share, with count cells at twice a distance cell's steps, would have left one core
    idle for hours). A killed queue's cell is free again and resumes from its checkpoint."""
    return _flocked(folder / "claim.lock", wait=False)


#: the command that turns a records file of the old format (a JSON list of cells) into
#: today's (:func:`read_results`)
MIGRATE = "lens-possym paper-b migrate-records"


def _load(path: Path) -> Any:
    """The JSON in ``path`` (``None`` if there is no file)."""
    if not path.exists():
        return None
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ResultsFileError(f"{path} is not a JSON file ({error}); restore it with "
                               f"`git checkout {path}`") from error


def read_results(path: Path = RECORDS) -> dict[str, Any]:
    """The records file at ``path`` as it is stored: ``{"verdicts": {grid: {"rules": date,
    "claims": [...]}}, "cells": [record, ...]}`` (the cells as
    :meth:`~.records.CellRecord.to_dict` writes them, sorted by key; the verdicts as
    :func:`levelled_verdicts` gives them, written by ``report --levelled``); both empty if
    there is no file.

    Raises:
        ResultsFileError: a file that is not JSON, one of the old format (a JSON list of
            cells: :data:`MIGRATE` turns it into this one) or of another shape.
    """
    data = _load(path)
    if data is None:
        return {"verdicts": {}, "cells": []}
    if isinstance(data, list):
        raise ResultsFileError(
            f"{path} is in the old format (a JSON list of cells, no verdicts); run "
            f"`{MIGRATE} --records {path}` once (it keeps every cell as it is)")
    if (not isinstance(data, dict) or set(data) != {"verdicts", "cells"}
            or not isinstance(data["cells"], list) or not isinstance(data["verdicts"], dict)):
        found = sorted(data) if isinstance(data, dict) else type(data).__name__
        raise ResultsFileError(f"{path} is not paper B's records file: it needs exactly the "
                               f"keys 'verdicts' (an object) and 'cells' (a list), found "
                               f"{found}")
    return data


def read_records(path: Path = RECORDS) -> list[CellRecord]:
    """The cells' records of the file at ``path`` (none if there is no file;
    :func:`read_results` says which files it refuses)."""
    return [CellRecord.from_dict(entry) for entry in read_results(path)["cells"]]


def read_verdicts(path: Path = RECORDS) -> dict[str, Any]:
    """The verdicts the file at ``path`` holds, by grid (:func:`levelled_verdicts`)."""
    return read_results(path)["verdicts"]


def _write_results(path: Path, verdicts: dict[str, Any], cells: list[dict[str, Any]]) -> None:
    """Write the file atomically (:func:`~lens_possym.plugins.write_text_atomically`); the
    caller holds its lock."""
    write_text_atomically(path, json.dumps({"verdicts": verdicts, "cells": cells}, indent=1,
                                           ensure_ascii=False) + "\n")   # ✓ ✗ ? – as such


def write_records(path: Path, new: list[CellRecord | dict]) -> list[CellRecord]:
    """Merge ``new`` into the records file's cells (a record replaces the one with its key),
    sorted, written atomically under a lock, its verdicts kept as they are; returns the
    merged list."""
    with _locked(path):
        data = read_results(path)
        merged = {r.key: r for r in (CellRecord.from_dict(e) for e in data["cells"])}
        merged.update({r.key: r for r in (r if isinstance(r, CellRecord)
                                          else CellRecord.from_dict(r) for r in new)})
        rows = [merged[k] for k in sorted(merged, key=lambda k: tuple(map(str, k)))]
        _write_results(path, data["verdicts"], [r.to_dict() for r in rows])
    return rows


def write_verdicts(path: Path, grids: tuple[str, ...], verdicts: dict[str, Any]) -> None:
    """Set the verdicts of ``grids`` in the records file to ``verdicts`` (a grid not in it
    is removed: it has no record), written atomically under a lock, its cells kept as they
    are."""
    with _locked(path):
        data = read_results(path)
        kept = {g: v for g, v in data["verdicts"].items() if g not in grids}
        _write_results(path, dict(sorted({**kept, **verdicts}.items())), data["cells"])


def migrate_records(args: argparse.Namespace) -> None:
    """``paper-b migrate-records``: turn a records file of the old format (a JSON list of
    cells) into today's, every cell kept as it is (no verdict yet); a file already in
    today's format is left alone."""
    path = Path(args.records)
    with _locked(path):
        data = _load(path)
        if not isinstance(data, list):
            read_results(path)            # refuses what is neither format
            print(f"{path} is already in today's format (verdicts and cells): left as it is")
            return
        for entry in data:                # each entry must be a record
            try:
                CellRecord.from_dict(entry)
            except (TypeError, AttributeError) as error:
                raise ResultsFileError(f"{path}: {str(entry)[:80]} is not a cell's record "
                                       f"({error}); nothing was changed") from error
        _write_results(path, {}, data)
    print(f"{path}: {len(data)} cells kept as they were, under 'cells'; 'verdicts' added "
          "(empty: `lens-possym paper-b report --preset paper-length --levelled` fills it)")


def preset_for(args: argparse.Namespace) -> pb_presets.Preset:
    """The preset ``args`` name, with its ``--trigger-copies``, ``--data``, ``--steps``,
    ``--batch-size`` and ``--lr`` variants (each renames it, so its cells and records stay
    apart)."""
    preset = pb_presets.ENCODER_PRESETS[args.preset]
    if getattr(args, "trigger_copies", False):
        preset = pb_presets.with_trigger_copies(preset)
    if getattr(args, "data", None):
        preset = pb_presets.with_data(preset, args.data, epochs=getattr(args, "epochs", None))
    if getattr(args, "steps", None):      # budget checks: another step count, own folder
        preset = pb_presets.with_steps(preset, args.steps)
        preset = replace(preset, name=f"{preset.name}@{args.steps}")
    if getattr(args, "batch_size", None):
        preset = replace(preset, batch_size=args.batch_size,
                         name=f"{preset.name}-b{args.batch_size}")
    if getattr(args, "lr", None):
        preset = replace(preset, lr=args.lr, name=f"{preset.name}-lr{args.lr:g}")
    return preset


def select_cells(args: argparse.Namespace, preset: pb_presets.Preset) -> list[pb_cells.Cell]:
    """The cells of ``preset``'s grid that ``args`` select (tasks, ``--only``, ``--labels``,
    ``--shard I/N``), in the order they are worth running."""
    tasks = tuple(t for t in args.tasks if t in preset.tasks)    # +copies: distance only
    cells = pb_cells.grid_cells(seeds=tuple(args.seeds), tasks=tasks,
                          n_heads=preset.model["n_heads"], preset=preset)
    if args.only == "k":
        cells = [c for c in cells if c.label.startswith("rope-k")]
    elif args.only:
        cells = [c for c in cells if c.variant == args.only and (
            preset.grid is not None or not c.label.startswith("rope-k"))]
    if args.labels:
        cells = [c for c in cells if c.label in args.labels]
    if args.shard:
        index, count = (int(x) for x in args.shard.split("/"))
        if not 0 <= index < count:
            raise InvalidSelectionError(f"--shard I/N needs 0 <= I < N, got {args.shard}")
        cells = cells[index::count]
    return cells


def say_kernels(command: str) -> None:
    """One line when this process does not run the kernels the committed records were
    trained with (:data:`.presets.REFERENCE_KERNELS`)."""
    note = kernels_note(pb_presets.REFERENCE_KERNELS, "a base run trained here differs from "
                        "its committed record after its first steps")
    if note is not None:
        print(f"[{command}] {note}", flush=True)


def run(args: argparse.Namespace) -> None:
    """Train and analyse every selected cell not held by another queue (module docstring)."""
    preset = preset_for(args)
    say_kernels("run")
    cells = select_cells(args, preset)
    levelled = getattr(args, "levelled", False)
    # a levelled cell's claim lock lives in its +levelled folder; its base run in the preset's
    root = Path(args.root) / (pb_levelled.levelled_name(preset.name) if levelled else preset.name)
    records = Path(args.records) if args.records else None
    if records is not None:
        read_results(records)           # an unreadable or old-format file stops us here
    failed = []
    for i, cell in enumerate(cells):
        start, cpu = time.perf_counter(), time.process_time()
        with _claimed(root / cell.key) as mine:
            if not mine:
                print(f"[{i + 1}/{len(cells)}] {cell.key}: held by another queue", flush=True)
                continue
            try:
                if levelled:
                    data = pb_levelled.analyse_levelled(preset, cell, args.root)
                    record = pb_levelled.levelled_record(data)
                else:
                    data = pb_cells.analyse_cell(preset, cell, root,
                                                 profile=False if args.no_profile else None)
                    record = pb_cells.cell_record(data)
                if records is not None:
                    write_records(records, [record])
            except Exception as error:          # one broken cell must not stop the queue
                failed.append(cell.key)
                print(f"[{i + 1}/{len(cells)}] {cell.key}: FAILED: {type(error).__name__}: "
                      f"{error}", flush=True)
                continue
        print(f"[{i + 1}/{len(cells)}] {cell.key}: accuracy {data['baseline']:.4f}, top head "
              f"drop {data['deposit']['top_drop']:.3f} ({time.perf_counter() - start:.0f} s, "
              f"{time.process_time() - cpu:.0f} CPU-s; training {data['train_time_s']:.0f} s)",
              flush=True)
    if failed:
        raise TrainingError(f"{len(failed)} cell(s) failed: {', '.join(failed)}")


def refresh_probe(args: argparse.Namespace) -> None:
    """Recompute the probe of every finished cell from its saved model (seconds each)."""
    root = Path(args.root) / args.preset
    preset = pb_presets.ENCODER_PRESETS[args.preset]
    for path in sorted(root.glob("**/analysis.json")):
        data = json.loads(path.read_text())
        model, task, _ = load_checkpoint(path.parent / "model.pt")
        batch = pb_cells.analysis_batch(preset, task, data["cell"]["seed"])
        data["probe"] = positional_probe(model.eval(), batch.tokens[:256])
        path.write_text(json.dumps(data, indent=1))
        print(f"{data['cell']}: probe {'none' if data['probe'] is None else 'refreshed'}")


def write_block(page: Path, begin: str, end: str, text: str) -> None:
    """Replace what lies between ``begin`` and ``end`` in ``page`` by ``text``."""
    body = page.read_text() if page.exists() else f"{begin}\n{end}\n"
    if begin not in body or end not in body:
        raise InvalidSelectionError(
            f"{page} lacks the markers {begin} / {end} that say where the tables go")
    head, rest = body.split(begin, 1)
    page.write_text(head + begin + "\n" + text + end + rest.split(end, 1)[1])


def report_blocks(records: list[CellRecord | dict], preset: str, seeds: tuple[int, ...],
                  *, levelled: bool = False) -> dict[str, str]:
    """Every block ``lens-possym paper-b report --preset <preset> [--levelled]`` writes into
    docs/paper_b.md, by its :data:`MARKERS` key, computed from ``records`` only: the
    verdicts of record, the 2026-11-29 reread, the reading and the prose blocks
    (:func:`~.report_prose.prose_blocks`), or, with ``levelled``, the ``<preset>+levelled``
    verdict tables (:func:`~.report_margins.margins_markdown`) and their reading
    (:func:`~.report_levelled.levelled_reading_markdown`)."""
    if levelled:
        name = pb_levelled.levelled_name(preset)
        command = f"{COMMAND} {preset} --levelled"
        return {name: margins_markdown(records, name, seeds, command=command),
                f"{name} reading": levelled_reading_markdown(records, preset, seeds,
                                                             command=command)}
    command = f"{COMMAND} {preset}"
    blocks = {preset: verdict_markdown(records, preset, seeds, command=command),
              # the same records re-read under the 2026-11-29 rules
              f"{preset} reread": margins_markdown(records, preset, seeds, command=command),
              # the prose that reads the tables, every number from the same records
              f"{preset} reading": reading_markdown(records, preset, seeds, command=command)}
    # the rest of the page's prose: claim 5's grid, the cost, the +levelled plan, wall time
    blocks.update(prose_blocks(records, preset, seeds, command=command))
    return blocks


def levelled_grids(preset: str) -> tuple[str, str]:
    """The ``+levelled`` grids of ``preset`` whose verdicts the records file holds: its
    own and its ``+copies`` grid's (claims 1-5)."""
    return (pb_levelled.levelled_name(preset),
            pb_levelled.levelled_name(pb_presets.with_trigger_copies_name(preset)))


def levelled_verdicts(records: list[CellRecord | dict], preset: str,
                      seeds: tuple[int, ...]) -> dict[str, Any]:
    """The verdicts of ``preset``'s ``+levelled`` grids (:func:`levelled_grids`, each one
    that has a record) under the rules of :data:`~.margins.RULES_DATE`
    (:func:`~.margins.judge_margins`; the ``+copies`` grid for claims 1-5), as the records
    file's ``"verdicts"`` hold them: ``{grid: {"rules": date, "claims": [{"claim", "text",
    "rule", "note", "intended": {"verdict", "counts", "seeds": [{"seed", "outcome"
    (✓ ✗ ? –), "text", "margins": [{"name", "value", "se", "z"}]}]}, "faithful": ...}]}}``;
    ``z`` (the margin's distance from its threshold in standard errors, ``value / se``) is
    ``null`` where the margin has no standard error (``value`` and ``se`` say which way)."""
    name, copies = levelled_grids(preset)
    grids: dict[str, dict[str, Any]] = {}
    for grid in (name, copies):
        if not any(record_key(r)[0] == grid for r in records):
            continue
        rows = []
        for row in judge_margins(records, grid, seeds):
            claim = row["claim"]
            if grid == copies and claim.number not in DISTANCE_CLAIMS:
                continue
            entry: dict[str, Any] = {"claim": claim.number, "text": claim.text,
                                     "rule": claim.rule,
                                     "note": claim.note if grid == copies else ""}
            for variant in ("intended", "faithful"):
                v = row[variant]
                entry[variant] = {"verdict": v["verdict"], "counts": v["counts"], "seeds": [
                    {"seed": seed, "outcome": outcome_mark(outcome), "text": text,
                     "margins": [{"name": m.name, "value": m.value, "se": m.se,
                                  "z": None if math.isinf(m.z) else m.z} for m in margins]}
                    for seed, (outcome, text), margins in zip(seeds, v["seeds"], v["margins"])]}
            rows.append(entry)
        grids[grid] = {"rules": RULES_DATE, "claims": rows}
    return json.loads(json.dumps(grids))   # as read back


def _checked(args: argparse.Namespace) -> tuple[list[CellRecord], Path]:
    """The records and the page ``args`` name, with the records of ``args.preset`` (and,
    with ``--levelled``, of its ``+levelled`` grid) in them."""
    records = read_records(Path(args.records))
    if not any(r.preset == args.preset for r in records):
        raise InvalidSelectionError(f"no {args.preset} record in {args.records}; run "
                                    "`lens-possym paper-b queue N` (docs/paper_b.md) first")
    if getattr(args, "levelled", False):
        name = pb_levelled.levelled_name(args.preset)
        if not any(r.preset == name for r in records):
            raise InvalidSelectionError(f"no {name} record in {args.records}; run "
                                        "`lens-possym paper-b queue N --levelled` first")
    return records, Path(args.out) / "paper_b.md"


def _report_records(args: argparse.Namespace) -> None:
    """The verdict blocks of a preset judged from the committed records (each where the
    page has its markers: docs/paper_b.md has them all)."""
    records, page = _checked(args)
    levelled = getattr(args, "levelled", False)
    blocks = report_blocks(records, args.preset, tuple(args.seeds), levelled=levelled)
    body = page.read_text() if page.exists() else ""
    verdict_keys = {args.preset, f"{args.preset} reread", f"{args.preset} reading",
                    pb_levelled.levelled_name(args.preset),
                    f"{pb_levelled.levelled_name(args.preset)} reading"}
    for key, text in blocks.items():
        # the verdict blocks always; the prose blocks where the page has their markers
        if key in verdict_keys or any(marker in body for marker in MARKERS[key]):
            write_block(page, *MARKERS[key], text)
    if levelled:
        found = levelled_verdicts(records, args.preset, tuple(args.seeds))
        write_verdicts(Path(args.records), levelled_grids(args.preset), found)
        print(f"wrote the {' and '.join(found)} verdicts into {page} and {args.records}")
        return
    print(f"wrote the {args.preset} verdicts into {page} from "
          f"{sum(r.preset == args.preset for r in records)} records")


def verdicts(args: argparse.Namespace) -> None:
    """Every verdict of ``args.preset`` (``--levelled``: of its ``+levelled`` grids)
    recomputed from the committed files only (the records JSON and docs/paper_b.md, no run
    folder), printed one line per claim and variant, and every block the report wrote (and,
    with ``--levelled``, the records file's ``"verdicts"`` of the ``+levelled`` grids)
    compared with what the records give now; raises
    :class:`~lens_possym.errors.ResultsFileError` (exit 1) on a difference."""
    records, page = _checked(args)
    if not page.exists():
        raise ResultsFileError(f"{page} does not exist: pass --out the folder of paper_b.md")
    seeds, levelled = tuple(args.seeds), getattr(args, "levelled", False)
    base = pb_levelled.levelled_name(args.preset) if levelled else args.preset
    for preset in (base, pb_presets.with_trigger_copies_name(base)):
        if not any(r.preset == preset for r in records):
            continue
        for rules, rows in ((RULES_DATE, judge_margins(records, preset, seeds)),) + (
                () if levelled else ((RECORD_RULES_DATE, judge(records, preset, seeds)),)):
            for row in rows:
                if preset != base and row["claim"].number not in DISTANCE_CLAIMS:
                    continue             # the +copies grid is read for claims 1-5 only
                for variant in ("intended", "faithful"):
                    v = row[variant]
                    marks = "".join(outcome_mark(o) if rules == RULES_DATE else
                                    "✓" if o else "–" if o is None else "✗"
                                    for o, _ in v["seeds"])
                    print(f"[verdicts] {preset} ({rules} rules) claim {row['claim'].number} "
                          f"{variant}: {v['verdict']} ({marks})")
    body = page.read_text()
    stale = []
    for key, text in report_blocks(records, args.preset, seeds, levelled=levelled).items():
        begin, end = MARKERS[key]
        if begin not in body:
            continue
        if body.split(begin + "\n", 1)[1].split(end, 1)[0] != text:
            stale.append(key)
    stale = [f"{page}'s {key} block" for key in stale]
    if levelled:
        stored, now = read_verdicts(Path(args.records)), levelled_verdicts(records,
                                                                            args.preset, seeds)
        for grid in levelled_grids(args.preset):
            if stored.get(grid) != now.get(grid):
                why = (" (missing)" if grid not in stored else
                       " (no cell of it)" if grid not in now else "")
                stale.append(f"the {grid} verdicts in {args.records}{why}")
    if stale:
        raise ResultsFileError(
            f"{', '.join(stale)} differ(s) from what the cells of {args.records} give; "
            f"run `{COMMAND} {args.preset}{' --levelled' if levelled else ''}` again")
    print(f"[verdicts] every block of {page} the report writes"
          + (f" and the {' and '.join(now)} verdicts of {args.records}" if levelled else "")
          + f" equal what the cells of {args.records} give")


def report(args: argparse.Namespace) -> None:
    """docs/paper_b.md's block of ``args.preset``: the verdicts from the committed records
    (``paper-length``), or (``cpu``, :mod:`.report_cpu`) the measured tables and figures
    from the ``cpu`` records and the head profiles from the ``analysis.json`` files under
    ``<root>/cpu`` (module docstring). The ``cpu`` report writes no record."""
    if args.preset in MARKERS:
        return _report_records(args)
    records = ([r for r in read_records(Path(args.records)) if r.preset == args.preset]
               if args.records else [])
    if not records:
        raise InvalidSelectionError(
            f"no {args.preset} record in {args.records or '(no --records)'}; run "
            f"`lens-possym paper-b run --preset {args.preset}` (it records each cell) first")
    rows, command = record_rows(records), f"{COMMAND} {args.preset}"
    page = Path(args.out) / "paper_b.md"
    write_block(page, BEGIN, END, measured_markdown(rows, args.preset, command=command))
    profiles = profiles_markdown(load_analyses(Path(args.root) / args.preset),
                                 min(r.seed for r in records), command=command)
    if profiles:
        write_block(page, *PROFILES, profiles)
    said = (f"{page} from {len(rows)} records" + (" (head profiles from their analysis.json)"
                                                  if profiles else ""))
    if getattr(args, "no_figures", False):
        print(f"wrote the tables into {said} (no figures)")
        return
    figs = Path(args.out) / "figures" / "paper_b"
    draw_figures(rows, figs)
    print(f"wrote the tables into {said} and {len(list(figs.glob('*.png')))} figures")


#: claim 5's grid after the main one, one variant at a time (the intended cells of every
#: seed first: claim 5's intended verdict needs them all)
QUEUE = (dict(trigger_copies=False, tasks=["distance", "count"], only=None),
         dict(trigger_copies=True, tasks=["distance"], only="intended"),
         dict(trigger_copies=True, tasks=["distance"], only="faithful"))


def kernels(args: argparse.Namespace) -> int:
    """``paper-b kernels``: one committed cell retrained to its first loop evaluation
    (:func:`.kernels_check.first_evaluation_check`); 1 when it differs from the record."""
    task, label, variant, seed = args.cell
    try:
        cell = pb_cells.Cell(task=task, label=label, variant=variant, seed=int(seed))
    except ValueError as error:
        raise InvalidSelectionError(f"--cell SEED must be a whole number, got {seed!r}") \
            from error
    say_kernels("kernels")
    check = first_evaluation_check(read_results(Path(args.records))["cells"], cell,
                                   step=args.step)
    print(check.line(), flush=True)
    return 0 if check.equal else 1


def queue(args: argparse.Namespace) -> None:
    """One queue of the ``paper-length`` grid (114 cells), then of claim 5's
    ``paper-length+copies`` grid (42 cells), seeds 0, 1, 2: queues started on one grid share
    it (:func:`run`), each writing its finished cells' records into ``args.records``. A
    failed stage is reported and the queue goes on to the next."""
    failed = []
    for stage in QUEUE:
        name = "paper-length" + ("+levelled" if getattr(args, "levelled", False) else "") + (
            "+copies" if stage["trigger_copies"] else "")
        print(f"== {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())} {name} "
              f"{stage['only'] or ''} queue {args.number}".replace("  ", " "), flush=True)
        step = argparse.Namespace(**{"levelled": False, **vars(args), "preset": "paper-length",
                                     "seeds": [0, 1, 2],
                                     "labels": None, "shard": None, "data": None,
                                     "epochs": None, "steps": None, "batch_size": None,
                                     "lr": None, "no_profile": False, **stage})
        try:
            run(step)
        except TrainingError as error:
            failed.append(f"{name} {stage['only'] or ''}".strip())
            print(f"== failed: {name}: {error}", flush=True)
    print(f"== {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())} queue {args.number} done",
          flush=True)
    if failed:
        raise TrainingError(f"queue {args.number}: {', '.join(failed)} had failed cells")
