"""Paper C reproduced: train, analyse and report, one cached stage at a time (the
``lens-possym paper-c`` command: :mod:`.cli_pipeline`).

    lens-possym paper-c train          # one run per task (resumable)
    lens-possym paper-c queue 0|1      # the twelve runs as two queues, one per core
    lens-possym paper-c analyse        # every analysis below for every finished run
    lens-possym paper-c analyse-queue  # analyse + report every --poll s until all 12 are done
    lens-possym paper-c dynamics       # scores/entropy/accuracy at every checkpoint
    lens-possym paper-c timing         # exact over all checkpoints vs re-run
    lens-possym paper-c roles          # roles, causal roles, logit lens, residual patching
    lens-possym paper-c discrepancy    # constructions, Theorem 3.2, trained heads' gaps
    lens-possym paper-c lengths        # lengths 17..850, every filler reading
    lens-possym paper-c masking        # the extension hidden from layers 0-3, positions
    lens-possym paper-c frequency      # Table 1 / Fig 8: frequency profile per layer
    lens-possym paper-c grid --presets paper   # every run x reading x length, 1,000 prompts,
                                               # into docs/paper_c_results.json
    lens-possym paper-c lm             # gemma-3-270m, smollm2-135m on 1-hop prompts
    lens-possym paper-c report         # docs/paper_c.md, docs/paper_c_results.json
    lens-possym paper-c verdicts       # recompute every verdict from committed files
    lens-possym paper-c stamp --cache DIR --runs RUNS   # stamp what older code wrote with
                                       # its run's identity, where it can be shown
    lens-possym paper-c time-cell --preset paper --grid-lengths 300 1000 --grid-prompts 100
                                       # CPU seconds of one grid cell (planning)
    lens-possym paper-c ablate-settings   # why Letter fails at length, one setting at a time
    lens-possym paper-c all            # train, every analysis, report

Every per-run stage works on one ``(--preset, --seed)`` (default ``cpu``, 0); ``analyse``
finds every finished run (``model.pt`` present) in the runs folder (``--presets`` and
``--seeds`` narrow it) and runs dynamics, roles, trained discrepancy, lengths, masking and
frequency on each (:mod:`.stages`), then the shared theory stages. Where things live
(:mod:`.workspace`): runs in ``--runs``
(default ``out/paper_c/runs/{task}-{preset}-s{seed}``; checkpoints: not committed); each
stage's numbers in ``--cache`` (default ``out/paper_c/cache/{preset}-s{seed}/*.json``, one
file per cell, so a stage that stops resumes where it was; the environment variables
``PAPER_C_RUNS`` and ``PAPER_C_CACHE`` set the defaults); finished runs' records in
``--docs``/paper_c_runs/ and the report in ``--docs`` (default ``docs``, committed). Paths
are relative to the working directory (run it from the repository's root). Seeds:
``--seed`` seeds the weights, the data stream and the test sets; the scored prompts use
seed 1.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import torch

from ... import models
from ...errors import ResultsFileError, TrainingError
from ...training.kernels import RecordCheck, evaluation_at
from .identity import (cells_of_runs, cpu_kernels, former_text, kernels_note, read_records,
                       run_name as name_of, stamp_cache, stamp_cells)
from .lengths import lm_hop_accuracy
from .presets import build_run, train_multihop
from .readings import CellStore, length_cell, run_grid, verdict_table
from .report import write_report
from .stages import ANALYSES, stage_discrepancy
from .workspace import (LM_MODELS, SEEDS, TASKS, cached, final_model, finished_runs,
                        one_run, records_dir, run_cached, run_dir, run_finished,
                        run_fingerprint, run_name, say)

__all__ = ["QUEUES", "stage_kernels", "stage_train", "stage_grid", "stage_verdicts",
           "check_report_records", "stage_stamp", "stage_time_cell", "stage_lm", "stage_analyse",
           "queue", "analyse_queue", "stage_all"]

#: the training queues: the paper preset's seeds 0, 1, 2, then the cpu preset's; Number on
#: queue 0, Letter on queue 1
QUEUES = {n: [(preset, seed, task) for preset in ("paper", "cpu") for seed in SEEDS]
          for n, task in enumerate(TASKS)}



# ---- stages -------------------------------------------------------------------------------

def _say_kernels(stage: str, presets: list[str]) -> None:
    """One line per preset whose committed runs were trained with other CPU kernels than
    this process runs (:data:`.identity.PRESET_KERNELS`)."""
    for preset in dict.fromkeys(presets):
        note = kernels_note(preset)
        if note is not None:
            say(f"[{stage}] {note}")


def evaluation_of(record: dict, step: int | None, name: str) -> dict:
    """The record's history entry at ``step`` (``None``: its first evaluation)."""
    history = record["history"]
    if step is None:
        return history[0]
    found = [h for h in history if int(h["step"]) == step]
    if not found:
        steps = ", ".join(str(int(h["step"])) for h in history[:3])
        raise ResultsFileError(f"{name}'s record has no evaluation at step {step}; pass one "
                               f"of its evaluation steps ({steps}, ... "
                               f"{int(history[-1]['step'])})")
    return found[0]


def stage_kernels(args: argparse.Namespace) -> None:
    """``paper-c kernels``: each ``--tasks`` run of ``(--preset, --seed)`` retrained in memory
    to its committed record's evaluation at ``--step`` (default the first:
    :func:`~lens_possym.training.kernels.evaluation_at`; 100 steps of ``paper``, about a
    CPU-minute), its test accuracy and test loss beside the record's, to the last digit:
    run it on a new machine before retraining (a difference proves the retrain another run;
    equality is evidence that it is the committed one, stronger at a later step:
    :class:`~lens_possym.training.kernels.RecordCheck`). Raises
    :class:`~lens_possym.errors.TrainingError` (exit 1) when one differs."""
    _say_kernels("kernels", [args.preset])
    records = read_records(records_dir(args))
    differ = []
    for task in args.tasks:
        record = records.current.get((task, args.preset, args.seed))
        if record is None:
            raise ResultsFileError(f"no record of {run_name(task, args)} in "
                                   f"{records_dir(args)} (or one of a former recipe): name a "
                                   "committed run with --preset, --seed and --tasks")
        first = evaluation_of(record, args.step, run_name(task, args))
        model, t, config = build_run(task, args.preset, seed=args.seed, device=args.device)
        here = evaluation_at(model, t, config, int(first["step"]))
        check = RecordCheck(
            run=run_name(task, args), step=int(first["step"]),
            record={"test_accuracy": first["test_accuracy"], "test_loss": first["test_loss"]},
            here={"test_accuracy": here.accuracy, "test_loss": here.loss},
            kernels=cpu_kernels())
        say(f"[kernels] {check.line()}")
        if not check.equal:
            differ.append(f"{check.run} (step {check.step})")
    if differ:
        raise TrainingError(f"{', '.join(differ)}: a retrain here is not the committed run "
                            "(its evaluation differs); retrain under the kernels that "
                            "trained it (identity.PRESET_KERNELS) or on another CPU")


def stage_train(args: argparse.Namespace) -> None:
    """Train (or resume) one run per ``--tasks`` of ``(--preset, --seed)``; a finished run's
    record goes to ``--docs``/paper_c_runs/{task}-{preset}-s{seed}.json."""
    records = records_dir(args)
    _say_kernels("train", [args.preset])
    for task in args.tasks:
        out = run_dir(task, args)
        if run_finished(task, args) and (records / f"{run_name(task, args)}.json").is_file():
            # a finished run's record stays as written (reloading it would restamp its time)
            say(f"[train] {run_name(task, args)}: finished, record in {records}")
            continue
        say(f"[train] {task} preset={args.preset} seed={args.seed} -> {out}")
        _, _, result = train_multihop(task, args.preset, seed=args.seed, out_dir=out,
                                      device=args.device,
                                      log=lambda line, t=task: say(f"  {t}: {line}"))
        record = run_cached(args, f"train_{task}", lambda: {
            "task": task, "preset": args.preset, "seed": args.seed,
            "steps": result.steps_run, "test_accuracy": result.test_accuracy,
            "train_time_s": result.train_time_s, "threads": torch.get_num_threads(),
            "cpu_kernels": cpu_kernels() if str(args.device or "cpu").startswith("cpu")
            else str(args.device),
            "command": f"lens-possym paper-c train --preset {args.preset} "
                       f"--seed {args.seed} --tasks {task}",
            "train_config": result.train_config, "task_config": result.task_config,
            "model_config": result.model_config,
            "history": [{"step": h.step, "test_accuracy": h.test_accuracy,
                         "train_loss": h.train_loss, "test_loss": h.test_loss, "lr": h.lr,
                         "elapsed_s": h.elapsed_s} for h in result.history]},
            task=task, force=True)
        records.mkdir(parents=True, exist_ok=True)
        (records / f"{run_name(task, args)}.json").write_text(json.dumps(record, indent=1))
        say(f"[train] {task}: {result.steps_run} steps, test accuracy "
            f"{result.test_accuracy:.4f}, {result.train_time_s:.0f} s")


def stage_grid(args: argparse.Namespace) -> None:
    """The length test under every reading (docs/paper_c_rules.md, addendum of
    2026-11-28): every finished run (``--presets``, ``--seeds``, ``--tasks``) x
    ``--readings`` x ``--grid-lengths``, ``--grid-prompts`` prompts per cell, and the masking
    diagnostic per reading at ``--mask-lengths``; each cell is written into
    ``--docs``/paper_c_results.json (key ``length_cells``) as soon as it is measured, so the
    stage resumes from the committed file (commit it as cells land)."""
    store = CellStore(Path(args.docs) / "paper_c_results.json")
    _say_kernels("grid", args.presets)
    runs = finished_runs(args)
    say(f"[grid] finished runs: {[f'{t}-{p}-s{s}' for t, p, s in runs]}")
    for task, preset, seed in runs:
        one = one_run(args, task, preset, seed)
        model, t, step = final_model(task, one)
        start = time.process_time()
        run_grid(model, t, store, run=run_name(task, one), preset=preset, seed=seed,
                 step=step, fingerprint=run_fingerprint(task, one), readings=args.readings,
                 lengths=args.grid_lengths,
                 mask_lengths=args.mask_lengths, n_prompts=args.grid_prompts,
                 log=lambda line: say(f"[grid] {line}"))
        say(f"[grid] {run_name(task, one)}: done ({time.process_time() - start:.0f} CPU s "
            "in this call)")


def stage_verdicts(args: argparse.Namespace) -> None:
    """Every verdict recomputed from committed files only (paper_c_verdict_inputs.json and
    the length cells of paper_c_results.json in ``--docs``), printed, and compared with the
    table the report wrote into paper_c_results.json (key ``verdicts``); raises
    :class:`~lens_possym.errors.ResultsFileError` (exit 1) on any difference, and when the
    report read a record that is not current (:func:`check_report_records`) or a cell of
    another run."""
    docs = Path(args.docs)
    for name in ("paper_c_verdict_inputs.json", "paper_c_results.json"):
        if not (docs / name).is_file():
            raise ResultsFileError(f"{docs / name} does not exist: pass --docs the folder "
                                   "'lens-possym paper-c report' wrote into")
    inputs = json.loads((docs / "paper_c_verdict_inputs.json").read_text())
    results = json.loads((docs / "paper_c_results.json").read_text())
    used = check_report_records(inputs, docs)
    cells = cells_of_runs(results.get("length_cells", []), used,
                          source=str(docs / "paper_c_results.json"))
    table = verdict_table(inputs, cells)
    for preset, rows in table.items():
        if preset == "theory":
            say(f"[verdicts] theory: {rows}")
            continue
        for rule_set, verdicts in rows.items():
            say(f"[verdicts] {preset} {rule_set}: " + "; ".join(
                f"{k}: {v}" for k, v in verdicts.items()))
    reported = results.get("verdicts")
    if reported != table:
        raise ResultsFileError(
            f"[verdicts] the recomputed table differs from the report's ({docs}/"
            f"paper_c_results.json 'verdicts'): {reported} != {table}; run 'lens-possym "
            "paper-c report' again")
    say("[verdicts] equal to the report's table")


def check_report_records(inputs: dict, docs: Path) -> dict[str, str]:
    """The runs a report read (``inputs["records"]``: run name -> fingerprint), each checked
    against its record in ``docs``/paper_c_runs: raises
    :class:`~lens_possym.errors.ResultsFileError` (one line) when the report read a record
    trained with a former recipe (naming the differing fields), a record that is gone, or
    another run than the record now there, or when the inputs predate run identities."""
    found = read_records(docs / "paper_c_runs")
    read = [(p, int(s), t) for p, seeds in inputs.get("runs", {}).items()
            for s, tasks in seeds.items() for t in tasks]
    for preset, seed, task in read:
        if (task, preset, seed) in found.former:
            raise ResultsFileError(
                f"[verdicts] the report in {docs} read "
                + former_text(name_of(task, preset, seed), found.former[(task, preset, seed)])
                + ", then run 'lens-possym paper-c report' again")
    used = inputs.get("records")
    if used is None:
        raise ResultsFileError(
            f"[verdicts] {docs}/paper_c_verdict_inputs.json names no run fingerprints "
            "('records': written by code older than run identities): run 'lens-possym "
            "paper-c report' again")
    for name, fp in used.items():
        now = found.fingerprints.get(name)
        if now is None:
            raise ResultsFileError(
                f"[verdicts] the report read {name}, whose record is not in "
                f"{docs}/paper_c_runs: restore it or run 'lens-possym paper-c report' again")
        if now != fp:
            raise ResultsFileError(
                f"[verdicts] the report read another run of {name} (fingerprint {fp}; the "
                f"record's: {now}): run 'lens-possym paper-c report' again")
    return dict(used)


def stage_stamp(args: argparse.Namespace) -> None:
    """Stamp what code older than run identities wrote (:mod:`.identity`): every
    unstamped file of ``--cache``/{preset}-s{seed}/ and every grid cell of
    ``--docs``/paper_c_results.json without a fingerprint, when its run's record in
    ``--docs``/paper_c_runs is current, the run folder in ``--runs`` holds that very run,
    and the file can be shown to be that run's (dynamics by content, others written after
    the run's model.pt; cells by their step). What cannot be shown is listed, not
    stamped; a second call stamps nothing more."""
    found = read_records(records_dir(args))
    runs = Path(args.runs) if Path(args.runs).is_dir() else None
    files = stamp_cache(Path(args.cache), found, runs, log=say)
    results = Path(args.docs) / "paper_c_results.json"
    cells = stamp_cells(CellStore(results), found, runs, log=say) if results.is_file() else \
        {"stamped": 0, "already": 0, "refused": 0}
    say(f"[stamp] files: {files['stamped']} stamped, {files['already']} already, "
        f"{files['refused']} not stamped; cells: {cells['stamped']} stamped, "
        f"{cells['already']} already, {cells['refused']} not stamped")


def stage_time_cell(args: argparse.Namespace) -> None:
    """The CPU cost of one length cell, for planning the grid: an untrained ``--preset``
    model (the cost does not depend on the weights), Letter, ``--grid-prompts`` prompts at
    each of ``--grid-lengths``; prints process CPU seconds (not wall time: the machine is
    shared)."""
    model, task, _ = build_run("letter", args.preset, seed=0)
    model.eval()
    for n in args.grid_lengths:
        start = time.process_time()
        length_cell(model, task, "target", n, n_prompts=args.grid_prompts)
        cost = time.process_time() - start
        say(f"[time-cell] {args.preset} letter length {n}, {args.grid_prompts} prompts: "
            f"{cost:.1f} CPU s (load {os.getloadavg()[0]:.1f})")


def stage_lm(args: argparse.Namespace) -> None:
    """Paper Table 3's protocol on small pretrained LMs (:data:`LM_MODELS`): 1-hop prompts
    at ``--lm-lengths``, ``--lm-prompts`` each, one cache file per (model, task, length)."""
    cache = Path(args.cache)
    for name in LM_MODELS:
        model = None
        for task in TASKS:
            for n in args.lm_lengths:
                key = f"lm_{name}_{task}_{n}_{args.lm_prompts}"
                if (cache / f"{key}.json").is_file():
                    continue
                if model is None:
                    model = models.load_model(name)
                data = cached(args, key, lambda: lm_hop_accuracy(
                    model, task, [n], n_prompts=args.lm_prompts, seed=args.seed,
                    name=name).to_dict())
                say(f"[lm] {name} {task} {n}: {data['accuracy'][0]:.2f}")


def stage_analyse(args: argparse.Namespace) -> None:
    """Every analysis in ``--analyses`` for every finished run, one run at a time (each cell
    cached), then the theory part of ``discrepancy`` (also with no run)."""
    _say_kernels("analyse", args.presets)
    runs = finished_runs(args)
    say(f"[analyse] finished runs: {[f'{t}-{p}-s{s}' for t, p, s in runs]}")
    for task, preset, seed in runs:
        one = one_run(args, task, preset, seed)
        for stage in args.analyses:
            start = time.perf_counter()
            ANALYSES[stage](one)
            say(f"[analyse] {task}-{preset}-s{seed} {stage}: {time.perf_counter() - start:.0f} s")
    if "discrepancy" in args.analyses:               # the theory part, also with no run
        stage_discrepancy(argparse.Namespace(**{**vars(args), "tasks": []}))


def _stamp() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def queue(args: argparse.Namespace) -> None:
    """Training queue ``args.number`` (:data:`QUEUES`; one per core): each run trained or
    resumed from its latest checkpoint (dropout's stream included, so the result equals an
    uninterrupted run; a finished run is skipped in seconds), its record written to
    ``--docs``/paper_c_runs/. A failed run is reported and the queue goes on; raises
    :class:`~lens_possym.errors.TrainingError` at the end if any failed."""
    failed = []
    for preset, seed, task in QUEUES[args.number]:
        say(f"== {_stamp()} {preset} seed {seed} {task}")
        one = argparse.Namespace(**{**vars(args), "tasks": [task], "preset": preset,
                                    "seed": seed})
        try:
            stage_train(one)
        except Exception as error:  # noqa: BLE001 - one run's failure; the queue goes on
            failed.append(f"{preset} seed {seed} {task}")
            say(f"== failed: {preset} seed {seed} {task} ({type(error).__name__}: {error})")
    say(f"== {_stamp()} queue {args.number} done")
    if failed:
        raise TrainingError(f"queue {args.number}: {', '.join(failed)} failed (see above)")


def analyse_queue(args: argparse.Namespace) -> None:
    """The analyses as one job that follows the training queues: every ``--poll`` seconds,
    ``analyse`` (every finished run, every cell not cached yet) then ``report``; stops once
    ``--until`` runs of ``--presets`` x ``--seeds`` x ``--tasks`` are finished and analysed.
    A failed step is reported and the loop goes on."""
    while True:
        for name, step in (("analyse", stage_analyse), ("report", write_report)):
            say(f"== {_stamp()} {name}")
            try:
                step(args)
            except Exception as error:  # noqa: BLE001 - the loop outlives one failed step
                say(f"== {name} failed ({type(error).__name__}: {error})")
        done = len(finished_runs(args))
        if done >= args.until:
            say(f"== {_stamp()} all {done} runs finished and analysed")
            return
        time.sleep(args.poll)


def stage_all(args: argparse.Namespace) -> None:
    """train, analyse, report."""
    stage_train(args)
    stage_analyse(args)
    write_report(args)

