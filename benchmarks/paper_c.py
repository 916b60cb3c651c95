"""Paper C reproduced: train, analyse and report, one cached stage at a time.

    python benchmarks/paper_c.py train          # one run per task (resumable)
    python benchmarks/paper_c.py dynamics       # scores/entropy/accuracy at every checkpoint
    python benchmarks/paper_c.py timing         # Must-show: exact over all checkpoints vs re-run
    python benchmarks/paper_c.py roles          # roles, causal roles, logit lens, residual patching
    python benchmarks/paper_c.py discrepancy    # constructions, Theorem 3.2, trained heads' gaps
    python benchmarks/paper_c.py lengths        # lengths 17..850, every filler reading
    python benchmarks/paper_c.py grid --presets paper   # every run x reading x length,
                                                # 1,000 prompts, into docs/paper_c_results.json
    python benchmarks/paper_c.py masking        # the extension hidden from layers 0-3, positions
    python benchmarks/paper_c.py frequency      # Table 1 / Fig 8: frequency profile per layer
    python benchmarks/paper_c.py lm             # gemma-3-270m, smollm2-135m on 1-hop prompts
    python benchmarks/paper_c.py analyse        # every analysis above for every finished run
    python benchmarks/paper_c.py report         # docs/paper_c.md, docs/paper_c_results.json
    python benchmarks/paper_c.py verdicts       # recompute every verdict from committed files
    python benchmarks/paper_c.py time-cell --preset paper --grid-lengths 300 1000 --grid-prompts 100
                                                # CPU seconds of one grid cell (planning)
    python benchmarks/paper_c.py all            # train, every analysis, report

Every per-run stage works on one ``(--preset, --seed)`` (default ``cpu``, 0); ``analyse``
finds every finished run (``model.pt`` present) in the runs folder (``--presets`` and
``--seeds`` narrow it) and runs dynamics, roles, trained discrepancy, lengths and masking on
each, then the shared theory stages. Runs live in ``--runs`` (default
``out/paper_c/runs/{task}-{preset}-s{seed}``; checkpoints: not committed); each stage's
numbers in ``--cache`` (default ``out/paper_c/cache/{preset}-s{seed}/*.json``, one file per
cell, so a stage that stops resumes where it was; the environment variables
``PAPER_C_RUNS`` and ``PAPER_C_CACHE`` set the defaults); finished runs' records in
``docs/paper_c_runs/`` and the report in ``docs/`` (committed). Seeds: ``--seed`` seeds the
weights, the data stream and the test sets; the scored prompts use seed 1. Everything runs
on one CPU thread unless ``--threads`` says otherwise.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "out" / "paper_c"
RUNS = Path(os.environ.get("PAPER_C_RUNS") or OUT / "runs")
CACHE = Path(os.environ.get("PAPER_C_CACHE") or OUT / "cache")
TASKS = ("number", "letter")
PRESET_NAMES = ("paper", "cpu")
SEEDS = (0, 1, 2)
LENGTHS = (17, 50, 100, 200, 300, 500, 850)
READING_LENGTHS = (100, 300, 850)       # the other filler readings (the headline: LENGTHS)
MASK_LENGTHS = (100, 300, 850)
GAP_LENGTHS = (17, 100, 300)
LM_LENGTHS = (12, 48, 100, 300, 32, 200, 24, 64, 16, 80, 150)   # most telling first
LM_MODELS = ("gemma-3-270m", "smollm2-135m")


DOCS = ROOT / "docs"
RECORDS = DOCS / "paper_c_runs"      # one committed record per finished run


def run_name(task: str, args) -> str:
    return f"{task}-{args.preset}-s{args.seed}"


def run_dir(task: str, args) -> Path:
    return RUNS / run_name(task, args)


def run_cached(args, name: str, compute, *, force: bool = False):
    """:func:`cached` in the folder of one (preset, seed): ``CACHE/{preset}-s{seed}/``."""
    return cached(f"{args.preset}-s{args.seed}/{name}", compute, force=force)


def cached(name: str, compute, *, force: bool = False):
    """Read ``CACHE/name.json`` or compute, write and return it."""
    path = CACHE / f"{name}.json"
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
    raise TypeError(type(x))


def say(*parts) -> None:
    print(*parts, flush=True)


def final_model(task: str, args):
    from lens_possym.training.runs import latest_checkpoint, read_checkpoint

    found = latest_checkpoint(run_dir(task, args))
    if found is None:
        raise SystemExit(f"no run for {task}: run `python benchmarks/paper_c.py train` first")
    if found.name != "model.pt":
        raise SystemExit(f"{run_name(task, args)} is not finished (no model.pt in "
                         f"{run_dir(task, args)}); the analyses read finished runs")
    ckpt = read_checkpoint(found)
    return ckpt.model(), ckpt.make_task(), ckpt.step


# ---- stages -------------------------------------------------------------------------------

def stage_train(args) -> None:
    from lens_possym.papers.c.presets import train_multihop

    for task in args.tasks:
        out = run_dir(task, args)
        if run_finished(task, args) and (RECORDS / f"{run_name(task, args)}.json").is_file():
            # a finished run's record stays as written (reloading it would restamp its time)
            say(f"[train] {run_name(task, args)}: finished, record in {RECORDS}")
            continue
        say(f"[train] {task} preset={args.preset} seed={args.seed} -> {out}")
        _, _, result = train_multihop(task, args.preset, seed=args.seed, out_dir=out,
                                      device=args.device,
                                      log=lambda line, t=task: say(f"  {t}: {line}"))
        record = run_cached(args, f"train_{task}", lambda: {
            "task": task, "preset": args.preset, "seed": args.seed,
            "steps": result.steps_run, "test_accuracy": result.test_accuracy,
            "train_time_s": result.train_time_s, "threads": torch.get_num_threads(),
            "command": f"python benchmarks/paper_c.py train --preset {args.preset} "
                       f"--seed {args.seed} --tasks {task}",
            "train_config": result.train_config, "task_config": result.task_config,
            "model_config": result.model_config,
            "history": [{"step": h.step, "test_accuracy": h.test_accuracy,
                         "train_loss": h.train_loss, "test_loss": h.test_loss, "lr": h.lr,
                         "elapsed_s": h.elapsed_s} for h in result.history]}, force=True)
        RECORDS.mkdir(parents=True, exist_ok=True)
        (RECORDS / f"{run_name(task, args)}.json").write_text(json.dumps(record, indent=1))
        say(f"[train] {task}: {result.steps_run} steps, test accuracy "
            f"{result.test_accuracy:.4f}, {result.train_time_s:.0f} s")


def dynamics_data(task: str, args, *, complete_chunks_only: bool = False) -> dict | None:
    """Scores, entropy and accuracy per hop count at every checkpoint of one run, on the
    training loop's own 2,048 test prompts; cached ten checkpoints at a time.
    ``complete_chunks_only``: score only full chunks (of a run still training) and return
    ``None``."""
    from lens_possym.papers.c.dynamics import checkpoint_paths, score_run

    run = run_dir(task, args)
    steps = [s for s, _ in checkpoint_paths(run)]
    parts = []
    for i in range(0, len(steps), 10):
        chunk = steps[i: i + 10]
        if complete_chunks_only and len(chunk) < 10:
            break
        parts.append(run_cached(args, f"dynamics/{task}_{chunk[0]}-{chunk[-1]}", lambda c=chunk:
                                score_run(run, n_prompts=100, steps=c, eval_size=2048,
                                          training_eval=True, log=lambda l: say(f"  {task} {l}"))
                                .to_dict()))
    if complete_chunks_only:
        return None
    data = dict(parts[0])
    for key in ("steps", "pos", "sym", "entropy", "accuracy", "accuracy_by_hops"):
        data[key] = [x for part in parts for x in part[key]]
    data["score_seconds"] = sum(part["score_seconds"] for part in parts)
    return data


def stage_dynamics(args) -> None:
    from lens_possym.papers.c.dynamics import purity, ScoreTrajectory

    for task in args.tasks:
        if not run_finished(task, args) and args.partial:
            dynamics_data(task, args, complete_chunks_only=True)
            say(f"[dynamics] {run_name(task, args)}: complete chunks of a run in training scored")
            continue
        if not run_finished(task, args):
            raise SystemExit(f"{run_name(task, args)} is not finished (no model.pt in "
                             f"{run_dir(task, args)}); the analyses read finished runs (or "
                             "pass --partial to score its complete chunks now)")
        data = run_cached(args, f"dynamics_{task}", lambda task=task: dynamics_data(task, args))
        traj = ScoreTrajectory.from_dict(data)
        for gamma in (0.1, 0.05):
            p = purity(traj.pos, traj.sym, traj.steps, gamma)
            say(f"[dynamics] {run_name(task, args)} γ={gamma}: pure at the end "
                f"{p.final_counts()}, positional layers {p.layers_of('positional')}, "
                f"symbolic layers {p.layers_of('symbolic')}")


def stage_timing(args) -> None:
    """Must-show: the wall time to score every checkpoint of one run (all layers, last
    token, 100 prompts, exact) and the ratio to the re-run method on a subset."""
    from lens_possym.papers.c.dynamics import checkpoint_paths, score_model
    from lens_possym.training.runs import read_checkpoint

    task = args.tasks[0]

    def compute():
        found = checkpoint_paths(run_dir(task, args))
        first = read_checkpoint(found[0][1])
        prompts = first.make_task().test_set(100, seed=1).tokens
        models = [(s, read_checkpoint(p).model().bridge()) for s, p in found]
        for _, bridge in models[:1]:                       # warm-up (geometry read, caches)
            score_model(bridge, prompts[:4])
        start = time.perf_counter()
        exact = {s: score_model(b, prompts) for s, b in models}
        exact_s = time.perf_counter() - start
        subset = [models[-1]]
        start = time.perf_counter()
        rerun = {s: score_model(b, prompts, method="rerun") for s, b in subset}
        rerun_s = time.perf_counter() - start
        agree = max(float((exact[s][i] - rerun[s][i]).abs().max()) for s, _ in subset
                    for i in range(2))
        per_exact = exact_s / len(models)
        per_rerun = rerun_s / len(subset)
        return {"task": task, "n_checkpoints": len(models), "n_prompts": 100,
                "n_layers": int(models[0][1].cfg.n_layers), "exact_all_s": exact_s,
                "exact_per_checkpoint_s": per_exact, "rerun_subset": [s for s, _ in subset],
                "rerun_s": rerun_s, "rerun_per_checkpoint_s": per_rerun,
                "ratio": per_rerun / per_exact, "max_abs_diff": agree,
                "threads": torch.get_num_threads(), "machine": platform.processor() or
                platform.machine(), "load": os.getloadavg()[0]}

    t = run_cached(args, f"timing_{task}", compute, force=args.force)
    say(f"[timing] {t['task']}: scored all {t['n_checkpoints']} checkpoints ({t['n_layers']} "
        f"layers, last-token query, {t['n_prompts']} prompts, exact) in {t['exact_all_s']:.1f} s "
        f"({t['exact_per_checkpoint_s']:.2f} s each); re-run on step {t['rerun_subset']}: "
        f"{t['rerun_s']:.1f} s = {t['ratio']:.0f}x slower per checkpoint; max |exact - rerun| "
        f"= {t['max_abs_diff']:.1e} (load {t['load']:.1f}, {t['threads']} thread)")


def stage_roles(args) -> None:
    from lens_possym.papers.c.chain import chain_lens, chain_patching
    from lens_possym.papers.c.dynamics import path_scores
    from lens_possym.papers.c.roles import attention_roles, causal_roles

    for task in args.tasks:
        def compute(task=task):
            model, t, step = final_model(task, args)
            bridge = model.bridge()
            batch = t.test_set(200, seed=3)
            pos, sym, count = path_scores(bridge, t, batch)
            roles = attention_roles(bridge, t, batch)
            causal = causal_roles(bridge, t, batch)
            lens = chain_lens(bridge, t, batch)
            patch = chain_patching(bridge, t, batch)
            return {"step": step, "path_pos": pos[:, :, 0], "path_sym": sym[:, :, 0],
                    "path_count": count, "attention": roles.to_dict(),
                    "causal": causal.to_dict(), "lens": lens.to_dict(),
                    "patching": patch.to_dict()}
        data = run_cached(args, f"roles_{task}", compute)
        labels = [row[0] for row in data["attention"]["labels"]]
        say(f"[roles] {run_name(task, args)}: {labels}; single-head chain restore on/off "
            f"{[round(x, 3) for x in data['causal']['chain_restore']]}")


def stage_discrepancy(args) -> None:
    from lens_possym.papers.c.discrepancy import (
        head_discrepancy,
        index_bound_table,
        layer_gaps,
        retrieval_bound,
        task_offsets,
    )
    from lens_possym.papers.c.constructions import t_index_model, t_retrieval_model
    from lens_possym.papers.c.tasks import LetterTask, NumberTask
    from lens_possym.training.loop import evaluate

    lengths = [4, 8, 12, 17, 25, 50, 100, 200, 300, 500, 850]

    def constructions():
        out = {}
        for theta in (0.8, 1.0 * 10000 ** (-2 / 128)):
            task = NumberTask(max_hops=1)
            model, built = t_index_model(task, theta)
            out[f"t_index_{theta:.4f}"] = evaluate(model, task, task.test_set(2048)).accuracy
        for theta in (0.0, 0.0027):
            task = LetterTask(max_hops=1)
            model, built = t_retrieval_model(task, theta)
            out[f"t_retrieval_{theta:.4f}"] = evaluate(model, task, task.test_set(2048)).accuracy
        return out

    acc = cached("constructions_accuracy", constructions)
    say(f"[discrepancy] constructions at length 17: {acc}")

    def index_curves():
        out = {}
        for theta in (0.8, 10000 ** (-2 / 128)):
            table = index_bound_table(theta, range(2, 1001))
            own = index_bound_table(theta, range(17, 1001), task_offsets(8))
            out[f"{theta:.4f}"] = {
                "n": [r["n"] for r in table], "delta_max": [r["delta_max"] for r in table],
                "delta_min": [r["delta_min"] for r in table], "bound": [r["bound"] for r in table],
                "max_fails": sum(not r["max_holds"] for r in table),
                "min_fails": sum(not r["min_holds"] for r in table),
                "table": table, "task_offsets_table": own,
                "task_offsets": task_offsets(8),
                "task_offsets_max": [r["delta_max"] for r in own],
                "task_offsets_max_fails": sum(not r["max_holds"] for r in own),
                "task_offsets_min_fails": sum(not r["min_holds"] for r in own)}
        return out

    curves = cached("index_discrepancy_v2", index_curves)
    for theta, c in curves.items():
        say(f"[discrepancy] T_Index θ={theta}: bound fails for the max over all offsets at "
            f"{c['max_fails']}/999 lengths (min: {c['min_fails']}); over the task's offsets "
            f"9..16 at {c['task_offsets_max_fails']}/984 (min: {c['task_offsets_min_fails']})")

    def measured():
        out = {"index": {}, "retrieval": {}}
        for n in lengths:
            if n >= 17:
                task = NumberTask(max_hops=1, length=n)
                model, _ = t_index_model(task, 0.8, amplitude=1.0)
                d = head_discrepancy(model, task.test_set(256).tokens)
                out["index"][n] = d.summary()
        for theta in (0.0, 0.0027, 2 * math.pi / 8 / (2 * 850)):
            rows = {}
            for n in lengths:
                if n < 17:
                    continue
                task = LetterTask(max_hops=1, length=n)
                model, _ = t_retrieval_model(task, theta, amplitude=1.0)
                d = head_discrepancy(model, task.test_set(256).tokens)
                solver, _ = t_retrieval_model(task, theta)      # margin 10 nats at θ = 0
                rows[n] = {**d.summary(), "bound": retrieval_bound(theta, 8, n),
                           "accuracy": evaluate(solver, task, task.test_set(256)).accuracy}
            out["retrieval"][f"{theta:.5f}"] = rows
        return out

    m = cached("discrepancy_measured", measured)
    for theta, rows in m["retrieval"].items():
        say(f"[discrepancy] T_Retrieval θ={theta}: " + ", ".join(
            f"n={n}: max {r['max']:.3f} min {r['min']:.3f} bound {r['bound']:.3f} "
            f"acc {r['accuracy']:.2f}" for n, r in rows.items()))

    for task in args.tasks:
        if not run_finished(task, args):
            continue

        def trained(task=task):
            model, t, step = final_model(task, args)
            bridge = model.bridge(n_positions=max(GAP_LENGTHS))
            return {"step": step, **layer_gaps(bridge, t, GAP_LENGTHS, n_inputs=64,
                                               seed=5).to_dict()}
        d = run_cached(args, f"gaps_{task}", trained)
        say(f"[discrepancy] {run_name(task, args)}: min gap per layer at 17 / 300: "
            f"{[round(r[0], 2) for r in d['min'][0]]} / {[round(r[0], 2) for r in d['min'][-1]]}")


def stage_lengths(args) -> None:
    """The headline reading at every length, then the other readings at READING_LENGTHS."""
    from lens_possym.papers.c.lengths import accuracy_by_length
    from lens_possym.papers.c.tasks import FILLERS, HEADLINE_FILLER

    for task in args.tasks:
        model, t, _ = final_model(task, args)
        cells = [(HEADLINE_FILLER, n) for n in LENGTHS]
        cells += [(f, n) for f in FILLERS if f != HEADLINE_FILLER for n in READING_LENGTHS]
        rows = {}
        for filler, n in cells:
            key = f"length_{task}_{n}" if filler == HEADLINE_FILLER else \
                f"length_{task}_{filler}_{n}"
            rows[(filler, n)] = run_cached(args, key, lambda n=n, f=filler: accuracy_by_length(
                model, t, [n], n_prompts=256, seed=11, filler=f).to_dict())
        say(f"[lengths] {run_name(task, args)}: " + ", ".join(
            f"{f}@{n}: {r['accuracy'][0]:.3f}" for (f, n), r in rows.items()))


def stage_masking(args) -> None:
    """The masking diagnostic (the extension hidden from layers 0-3; trained-range
    position ids) at MASK_LENGTHS, headline reading."""
    from lens_possym.papers.c.masking import extension_accuracy

    for task in args.tasks:
        model, t, _ = final_model(task, args)
        rows = {n: run_cached(args, f"masking_{task}_{n}", lambda n=n: extension_accuracy(
            model, t, [n], layers=range(min(4, model.cfg.n_layers)), n_prompts=256,
            seed=11).to_dict())
            for n in MASK_LENGTHS}
        say(f"[masking] {run_name(task, args)}: " + "; ".join(
            f"{n}: " + ", ".join(f"{m} {a[0]:.3f}" for m, a in r["accuracy"].items())
            for n, r in rows.items()))


def stage_grid(args) -> None:
    """The length test under every reading (docs/paper_c_rules.md, addendum of
    2026-11-28): every finished run (``--presets``, ``--seeds``, ``--tasks``) x
    ``--readings`` x ``--grid-lengths``, ``--grid-prompts`` prompts per cell, and the masking
    diagnostic per reading at ``--mask-lengths``; each cell is written into
    docs/paper_c_results.json (key ``length_cells``) as soon as it is measured, so the
    stage resumes from the committed file (commit it as cells land)."""
    from lens_possym.papers.c.readings import CellStore, run_grid

    store = CellStore(args.docs / "paper_c_results.json")
    runs = finished_runs(args)
    say(f"[grid] finished runs: {[f'{t}-{p}-s{s}' for t, p, s in runs]}")
    for task, preset, seed in runs:
        one = argparse.Namespace(**{**vars(args), "tasks": [task], "preset": preset,
                                    "seed": seed})
        model, t, step = final_model(task, one)
        start = time.process_time()
        run_grid(model, t, store, run=run_name(task, one), preset=preset, seed=seed,
                 step=step, readings=args.readings, lengths=args.grid_lengths,
                 mask_lengths=args.mask_lengths, n_prompts=args.grid_prompts,
                 log=lambda line: say(f"[grid] {line}"))
        say(f"[grid] {run_name(task, one)}: done ({time.process_time() - start:.0f} CPU s "
            "in this call)")


def stage_frequency(args) -> None:
    """Table 1 / Fig 8: each layer's frequency profile of every finished run's final model
    (100 test prompts, seed 1, last-token query)."""
    from lens_possym.papers.c.frequency import frequency_profile

    for task in args.tasks:
        if not run_finished(task, args):
            continue

        def compute(task=task):
            model, t, step = final_model(task, args)
            return {"step": step, **frequency_profile(model, t, n_prompts=100, seed=1).to_dict()}
        d = run_cached(args, f"frequency_{task}", compute)
        say(f"[frequency] {run_name(task, args)}: weighted ID per layer "
            f"{[round(w, 1) for w in d['weighted']]}")


def stage_verdicts(args) -> None:
    """Every verdict recomputed from committed files only (docs/paper_c_verdict_inputs.json
    and the length cells of docs/paper_c_results.json), printed, and compared with the
    table the report wrote into docs/paper_c_results.json (key ``verdicts``); exits 1 on
    any difference."""
    from lens_possym.papers.c.readings import verdict_table

    inputs = json.loads((args.docs / "paper_c_verdict_inputs.json").read_text())
    results = json.loads((args.docs / "paper_c_results.json").read_text())
    table = verdict_table(inputs, results.get("length_cells", []))
    for preset, rows in table.items():
        if preset == "theory":
            say(f"[verdicts] theory: {rows}")
            continue
        for rule_set, verdicts in rows.items():
            say(f"[verdicts] {preset} {rule_set}: " + "; ".join(
                f"{k}: {v}" for k, v in verdicts.items()))
    reported = results.get("verdicts")
    if reported != table:
        raise SystemExit("[verdicts] the recomputed table differs from the report's "
                         f"(docs/paper_c_results.json 'verdicts'): {reported} != {table}")
    say("[verdicts] equal to the report's table")


def stage_time_cell(args) -> None:
    """The CPU cost of one length cell, for planning the grid: an untrained ``--preset``
    model (the cost does not depend on the weights), Letter, ``--grid-prompts`` prompts at
    each of ``--grid-lengths``, one thread; prints process CPU seconds (not wall time:
    the machine is shared) and the extrapolated cost of one run's grid."""
    from lens_possym.papers.c.presets import build_run
    from lens_possym.papers.c.readings import length_cell

    model, task, _ = build_run("letter", args.preset, seed=0)
    model.eval()
    cost = {}
    for n in args.grid_lengths:
        start = time.process_time()
        length_cell(model, task, "target", n, n_prompts=args.grid_prompts)
        cost[n] = time.process_time() - start
        say(f"[time-cell] {args.preset} letter length {n}, {args.grid_prompts} prompts: "
            f"{cost[n]:.1f} CPU s (load {os.getloadavg()[0]:.1f})")


def finished_runs(args) -> list[tuple[str, str, int]]:
    """``(task, preset, seed)`` of every finished run in RUNS (``model.pt`` written),
    narrowed by ``--presets``/``--seeds``/``--tasks``."""
    out = []
    for path in sorted(RUNS.glob("*-*-s*")):
        task, preset, seed = path.name.rsplit("-", 2)
        if not (path / "model.pt").is_file() or not seed[1:].isdigit():
            continue
        if task in args.tasks and preset in args.presets and int(seed[1:]) in args.seeds:
            out.append((task, preset, int(seed[1:])))
    order = {p: i for i, p in enumerate(args.presets)}
    return sorted(out, key=lambda r: (order.get(r[1], 9), r[2], TASKS.index(r[0])))


def run_finished(task: str, args) -> bool:
    return (run_dir(task, args) / "model.pt").is_file()


def stage_analyse(args) -> None:
    """Every analysis for every finished run, one run at a time (each cell cached)."""
    runs = finished_runs(args)
    say(f"[analyse] finished runs: {[f'{t}-{p}-s{s}' for t, p, s in runs]}")
    for task, preset, seed in runs:
        one = argparse.Namespace(**{**vars(args), "tasks": [task], "preset": preset,
                                    "seed": seed})
        for stage in args.analyses:
            start = time.perf_counter()
            ANALYSES[stage](one)
            say(f"[analyse] {task}-{preset}-s{seed} {stage}: {time.perf_counter() - start:.0f} s")
    if "discrepancy" in args.analyses:               # the theory part, also with no run
        stage_discrepancy(argparse.Namespace(**{**vars(args), "tasks": []}))


def stage_lm(args) -> None:
    import lens_possym as lp
    from lens_possym.papers.c.lengths import lm_hop_accuracy

    for name in LM_MODELS:
        model = None
        for task in TASKS:
            for n in args.lm_lengths:
                key = f"lm_{name}_{task}_{n}_{args.lm_prompts}"
                if (CACHE / f"{key}.json").is_file():
                    continue
                if model is None:
                    model = lp.load_model(name)
                cached(key, lambda: lm_hop_accuracy(model, task, [n], n_prompts=args.lm_prompts,
                                                    seed=args.seed, name=name).to_dict())
                say(f"[lm] {name} {task} {n}: "
                    f"{json.loads((CACHE / f'{key}.json').read_text())['accuracy'][0]:.2f}")


ANALYSES = {"dynamics": stage_dynamics, "roles": stage_roles, "discrepancy": stage_discrepancy,
            "lengths": stage_lengths, "masking": stage_masking, "frequency": stage_frequency}
STAGES = {"train": stage_train, "dynamics": stage_dynamics, "timing": stage_timing,
          "roles": stage_roles, "discrepancy": stage_discrepancy, "lengths": stage_lengths,
          "masking": stage_masking, "lm": stage_lm, "analyse": stage_analyse,
          "grid": stage_grid, "frequency": stage_frequency, "verdicts": stage_verdicts,
          "time-cell": stage_time_cell}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("stage", choices=[*STAGES, "report", "all"])
    parser.add_argument("--tasks", nargs="+", default=list(TASKS), choices=TASKS)
    parser.add_argument("--preset", default="cpu")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--force", action="store_true", help="recompute the timing stage")
    parser.add_argument("--lm-lengths", type=int, nargs="+", default=list(LM_LENGTHS))
    parser.add_argument("--lm-prompts", type=int, default=10)
    parser.add_argument("--runs", type=Path, default=None,
                        help="folder of the run folders (default out/paper_c/runs or "
                             "$PAPER_C_RUNS)")
    parser.add_argument("--cache", type=Path, default=None,
                        help="folder of the cached stage results (default out/paper_c/cache "
                             "or $PAPER_C_CACHE)")
    parser.add_argument("--presets", nargs="+", default=list(PRESET_NAMES),
                        help="analyse/report: the presets to read")
    parser.add_argument("--seeds", nargs="+", type=int, default=list(SEEDS),
                        help="analyse/report: the seeds to read")
    parser.add_argument("--analyses", nargs="+", default=list(ANALYSES), choices=list(ANALYSES),
                        help="analyse: which analyses, in this order")
    parser.add_argument("--partial", action="store_true",
                        help="dynamics: score the complete 10-checkpoint chunks of a run still "
                             "training (cached for later)")
    parser.add_argument("--readings", nargs="+", default=None,
                        help="grid: the readings of the extra symbols (default: every one)")
    parser.add_argument("--grid-lengths", type=int, nargs="+",
                        default=[17, 50, 100, 200, 300, 500, 850, 1000],
                        help="grid: the lengths (default 17 50 100 200 300 500 850 1000)")
    parser.add_argument("--mask-lengths", type=int, nargs="*", default=list(MASK_LENGTHS),
                        help="grid: the masking diagnostic's lengths (default 100 300 850)")
    parser.add_argument("--grid-prompts", type=int, default=1000,
                        help="grid: prompts per cell (default 1000)")
    parser.add_argument("--docs", type=Path, default=DOCS,
                        help="where the records (paper_c_runs/), the report, the results and "
                             "the figures go (default docs/)")
    args = parser.parse_args(argv)
    if args.readings is None:
        from lens_possym.papers.c.tasks import FILLERS
        args.readings = list(FILLERS)
    global RUNS, CACHE, RECORDS
    RECORDS = args.docs / "paper_c_runs"
    RUNS = args.runs if args.runs is not None else RUNS
    CACHE = args.cache if args.cache is not None else CACHE
    args.runs, args.cache = RUNS, CACHE
    torch.set_num_threads(args.threads)
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    stages = ["train", "analyse", "report"] if args.stage == "all" else [args.stage]
    for stage in stages:
        if stage == "report":
            from paper_c_report import write_report
            write_report(args)
        else:
            STAGES[stage](args)


if __name__ == "__main__":
    main(sys.argv[1:])
