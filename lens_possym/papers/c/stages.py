"""The analyses of ``lens-possym paper-c`` (:mod:`.pipeline`), one stage per analysis, each
on the finished runs of one ``(--preset, --seed)`` and ``--tasks``, every cell cached in
``--cache``/{preset}-s{seed}/ (so a stage that stops resumes where it was):

* ``dynamics``: scores, entropy and accuracy per hop count at every checkpoint
  (:func:`.dynamics.score_run`, ten checkpoints per cache file) and the pure heads;
* ``timing``: the wall time to score every checkpoint exactly against the re-run method;
* ``roles``: path scores, attention and causal roles, logit lens and residual patching;
* ``discrepancy``: the constructions' accuracy, T_Index's discrepancy against Theorem 3.2,
  T_Retrieval's measured one (shared, not per run), and the trained heads' gaps;
* ``lengths``: the headline reading at every length, the other readings at three;
* ``masking``: the extension hidden from layers 0-3, and at trained-range position ids;
* ``frequency``: each layer's frequency profile (Table 1 / Fig 8).
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import time

import torch

from ...errors import TrainingError
from ...training.loop import evaluate
from ...training.runs import read_checkpoint
from .chain import chain_lens, chain_patching
from .constructions import t_index_model, t_retrieval_model
from .discrepancy import (head_discrepancy, index_bound_table, layer_gaps, retrieval_bound,
                          task_offsets)
from .dynamics import ScoreTrajectory, checkpoint_paths, path_scores, purity, score_model, score_run
from .frequency import frequency_profile
from .lengths import accuracy_by_length
from .masking import extension_accuracy
from .roles import attention_roles, causal_roles
from .tasks import FILLERS, HEADLINE_FILLER, LetterTask, NumberTask
from .identity import dynamics_matches
from .workspace import (GAP_LENGTHS, LENGTHS, MASK_LENGTHS, READING_LENGTHS, cached,
                        final_model, run_cached, run_dir, run_finished, run_metrics, run_name,
                        say)

__all__ = ["dynamics_data", "stage_dynamics", "stage_timing", "stage_roles",
           "stage_discrepancy", "stage_lengths", "stage_masking", "stage_frequency",
           "ANALYSES"]


def dynamics_data(task: str, args: argparse.Namespace, *,
                  complete_chunks_only: bool = False) -> dict | None:
    """Scores, entropy and accuracy per hop count at every checkpoint of one run, on the
    training loop's own 2,048 test prompts; cached ten checkpoints at a time.
    ``complete_chunks_only``: score only full chunks (of a run still training) and return
    ``None``."""
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
                                .to_dict(), task=task, verify=_scored_on(task, args)))
    if complete_chunks_only:
        return None
    data = dict(parts[0])
    for key in ("steps", "pos", "sym", "entropy", "accuracy", "accuracy_by_hops"):
        data[key] = [x for part in parts for x in part[key]]
    data["score_seconds"] = sum(part["score_seconds"] for part in parts)
    return data


def _scored_on(task: str, args: argparse.Namespace):
    """A dynamics file's proof of its run: its accuracy per checkpoint is the run's
    (:func:`.identity.dynamics_matches` against the run folder's metrics.json)."""
    def verify(data) -> bool:
        metrics = run_metrics(task, args)
        return metrics is not None and dynamics_matches(data, metrics)
    return verify


def stage_dynamics(args: argparse.Namespace) -> None:
    for task in args.tasks:
        if not run_finished(task, args) and args.partial:
            dynamics_data(task, args, complete_chunks_only=True)
            say(f"[dynamics] {run_name(task, args)}: complete chunks of a run in training scored")
            continue
        if not run_finished(task, args):
            raise TrainingError(f"{run_name(task, args)} is not finished (no model.pt in "
                                f"{run_dir(task, args)}); the analyses read finished runs (or "
                                "pass --partial to score its complete chunks now)")
        data = run_cached(args, f"dynamics_{task}", lambda task=task: dynamics_data(task, args),
                          task=task, verify=_scored_on(task, args))
        traj = ScoreTrajectory.from_dict(data)
        for gamma in (0.1, 0.05):
            p = purity(traj.pos, traj.sym, traj.steps, gamma)
            say(f"[dynamics] {run_name(task, args)} γ={gamma}: pure at the end "
                f"{p.final_counts()}, positional layers {p.layers_of('positional')}, "
                f"symbolic layers {p.layers_of('symbolic')}")


def stage_timing(args: argparse.Namespace) -> None:
    """The wall time to score every checkpoint of one run (all layers, last token, 100
    prompts, exact) and the ratio to the re-run method on the last one (``--force``:
    measure again)."""
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

    t = run_cached(args, f"timing_{task}", compute, task=task, force=args.force)
    say(f"[timing] {t['task']}: scored all {t['n_checkpoints']} checkpoints ({t['n_layers']} "
        f"layers, last-token query, {t['n_prompts']} prompts, exact) in {t['exact_all_s']:.1f} s "
        f"({t['exact_per_checkpoint_s']:.2f} s each); re-run on step {t['rerun_subset']}: "
        f"{t['rerun_s']:.1f} s = {t['ratio']:.0f}x slower per checkpoint; max |exact - rerun| "
        f"= {t['max_abs_diff']:.1e} (load {t['load']:.1f}, {t['threads']} thread)")


def stage_roles(args: argparse.Namespace) -> None:
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
        data = run_cached(args, f"roles_{task}", compute, task=task)
        labels = [row[0] for row in data["attention"]["labels"]]
        say(f"[roles] {run_name(task, args)}: {labels}; single-head chain restore on/off "
            f"{[round(x, 3) for x in data['causal']['chain_restore']]}")


def _constructions() -> dict:
    out = {}
    for theta in (0.8, 1.0 * 10000 ** (-2 / 128)):
        task = NumberTask(max_hops=1)
        model, _ = t_index_model(task, theta)
        out[f"t_index_{theta:.4f}"] = evaluate(model, task, task.test_set(2048)).accuracy
    for theta in (0.0, 0.0027):
        task = LetterTask(max_hops=1)
        model, _ = t_retrieval_model(task, theta)
        out[f"t_retrieval_{theta:.4f}"] = evaluate(model, task, task.test_set(2048)).accuracy
    return out


def _index_curves() -> dict:
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


def _measured(lengths: list[int]) -> dict:
    out: dict = {"index": {}, "retrieval": {}}
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


def stage_discrepancy(args: argparse.Namespace) -> None:
    """The theory (shared, cached at the cache's top) and each finished run's gaps."""
    lengths = [4, 8, 12, 17, 25, 50, 100, 200, 300, 500, 850]
    acc = cached(args, "constructions_accuracy", _constructions)
    say(f"[discrepancy] constructions at length 17: {acc}")
    curves = cached(args, "index_discrepancy_v2", _index_curves)
    for theta, c in curves.items():
        say(f"[discrepancy] T_Index θ={theta}: bound fails for the max over all offsets at "
            f"{c['max_fails']}/999 lengths (min: {c['min_fails']}); over the task's offsets "
            f"9..16 at {c['task_offsets_max_fails']}/984 (min: {c['task_offsets_min_fails']})")
    m = cached(args, "discrepancy_measured", lambda: _measured(lengths))
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
        d = run_cached(args, f"gaps_{task}", trained, task=task)
        say(f"[discrepancy] {run_name(task, args)}: min gap per layer at 17 / 300: "
            f"{[round(r[0], 2) for r in d['min'][0]]} / {[round(r[0], 2) for r in d['min'][-1]]}")


def stage_lengths(args: argparse.Namespace) -> None:
    """The headline reading at every length, then the other readings at READING_LENGTHS."""
    for task in args.tasks:
        model, t, _ = final_model(task, args)
        cells = [(HEADLINE_FILLER, n) for n in LENGTHS]
        cells += [(f, n) for f in FILLERS if f != HEADLINE_FILLER for n in READING_LENGTHS]
        rows = {}
        for filler, n in cells:
            key = f"length_{task}_{n}" if filler == HEADLINE_FILLER else \
                f"length_{task}_{filler}_{n}"
            rows[(filler, n)] = run_cached(args, key, lambda n=n, f=filler: accuracy_by_length(
                model, t, [n], n_prompts=256, seed=11, filler=f).to_dict(), task=task)
        say(f"[lengths] {run_name(task, args)}: " + ", ".join(
            f"{f}@{n}: {r['accuracy'][0]:.3f}" for (f, n), r in rows.items()))


def stage_masking(args: argparse.Namespace) -> None:
    """The masking diagnostic (the extension hidden from layers 0-3; trained-range
    position ids) at MASK_LENGTHS, headline reading."""
    for task in args.tasks:
        model, t, _ = final_model(task, args)
        rows = {n: run_cached(args, f"masking_{task}_{n}", lambda n=n: extension_accuracy(
            model, t, [n], layers=range(min(4, model.cfg.n_layers)), n_prompts=256,
            seed=11).to_dict(), task=task)
            for n in MASK_LENGTHS}
        say(f"[masking] {run_name(task, args)}: " + "; ".join(
            f"{n}: " + ", ".join(f"{m} {a[0]:.3f}" for m, a in r["accuracy"].items())
            for n, r in rows.items()))


def stage_frequency(args: argparse.Namespace) -> None:
    """Table 1 / Fig 8: each layer's frequency profile of every finished run's final model
    (100 test prompts, seed 1, last-token query)."""
    for task in args.tasks:
        if not run_finished(task, args):
            continue

        def compute(task=task):
            model, t, step = final_model(task, args)
            return {"step": step, **frequency_profile(model, t, n_prompts=100, seed=1).to_dict()}
        d = run_cached(args, f"frequency_{task}", compute, task=task)
        say(f"[frequency] {run_name(task, args)}: weighted ID per layer "
            f"{[round(w, 1) for w in d['weighted']]}")


#: the analyses ``analyse`` runs per finished run, in this order by default
ANALYSES = {"dynamics": stage_dynamics, "roles": stage_roles, "discrepancy": stage_discrepancy,
            "lengths": stage_lengths, "masking": stage_masking, "frequency": stage_frequency}
