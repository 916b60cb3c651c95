"""Wall time of every paper B encoder variant, and what a preset's grid costs.

    python benchmarks/bench_paper_b.py [--preset cpu|paper-length] [--steps 40]
        [--tasks distance count] [--threads 1] [--root runs/paper_b] [--measured-only]
        [--budget-hours 12]
    python benchmarks/bench_paper_b.py --preset paper-length --attention [--steps 10]
    python benchmarks/bench_paper_b.py --preset paper --device cuda [--steps 20]

For each task, scheme (and RoPE on 2 heads; ``paper-length``: the schemes of its grid) and
variant: the preset's model is trained for ``--steps`` steps through the shared loop (after
3 warm-up steps), and the script prints milliseconds per step (wall and CPU: the process's
own CPU time, which is what a grid costs on a shared machine), the projected time of the
preset's full run and one forward pass over a batch of 64 sentences. For a preset with a
claim grid it then prints the grid's cost in CPU-hours (3 seeds; every cell's steps, its
evaluations during training, its per-head ablations and probe) and the steps per cell that
fit in ``--budget-hours``. ``--attention`` compares a training step with the fused
attention and with the written-out one (what a hook on the pattern forces). With ``--root``, it also prints the measured training time of
every finished cell of the grid (``lens-possym paper-b run``), which is the number the
docs quote; with ``--measured-only`` it prints only those (no training, seconds).

On ``--device cuda`` every time is wall-clock time with the device synchronised (the GPU
is the resource a grid spends there), and the grid's cost is printed in GPU-hours.

Times depend on the machine and its load; compare numbers from one run only.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch

from _timing import cost_clock
from lens_possym.papers import b as pb
from lens_possym.training.loop import TrainConfig, evaluate, train

LABELS = ["nope", "sinusoidal", "learned", "alibi", "t5", "rope", "rope-k2", "mla", "hybrid"]


def time_variant(preset: pb.Preset, task_name: str, label: str, variant: str, steps: int,
                 device: str = "cpu") -> dict[str, float]:
    """Seconds per training step (wall, and on the cost clock: :func:`_timing.cost_clock`),
    a forward pass of 64, and the cost of one evaluation on ``eval_size`` and on ``analysis_size``
    sentences. The step uses the cell's own batch size (MLA's may differ)."""
    dev = torch.device(device)
    clock = cost_clock(dev)
    task = pb.preset_task(preset, task_name)
    model = pb.make_model(preset, task, label, variant)
    scheme = pb.parse_label(label)[0]
    config = dict(batch_size=preset.batch_size_for(scheme), lr=preset.lr, betas=preset.betas,
                  eval_size=64, device=device)
    train(model, task, TrainConfig(steps=3, eval_every=3, **config))          # warm-up
    start, cost = time.perf_counter(), clock()
    train(model, task, TrainConfig(steps=steps, eval_every=steps, **config))
    out = {"step_cpu": (clock() - cost) / steps, "step": (time.perf_counter() - start) / steps,
           "cell_steps": preset.steps_for(task_name, scheme, getattr(task, "epoch_size", None))}
    tokens = task.sample(64, seed=1).tokens.to(dev)
    model.eval()
    forward = []
    with torch.no_grad():
        for _ in range(5):
            t0 = clock()
            model(tokens)
            forward.append(clock() - t0)
    out["forward"] = statistics.median(forward)
    for name, size in (("eval_cpu", preset.eval_size), ("analysis_cpu", preset.analysis_size)):
        batch = task.test_set(size, seed=3)
        cost = clock()
        evaluate(model, task, batch)
        out[name] = clock() - cost
    return out


def attention_paths(preset: pb.Preset, steps: int, batch_size: int = 64) -> tuple[float, float]:
    """CPU seconds per training step of intended RoPE on distance with the fused attention
    (no hook on the scores or pattern) and with the written-out one (a no-op hook on every
    layer's pattern), same batches."""
    task = pb.preset_task(preset, "distance")
    out = []
    for hooked in (False, True):
        model = pb.make_model(preset, task, "rope", "intended")
        if hooked:
            for L in range(model.cfg.n_layers):
                model.add_hook(f"blocks.{L}.attn.hook_pattern", lambda x, hook: x)
        opt = torch.optim.AdamW(model.parameters(), lr=preset.lr)
        gen = torch.Generator().manual_seed(0)
        for i in range(steps + 2):                      # two warm-up steps
            if i == 2:
                cpu = time.process_time()
            batch = task.sample(batch_size, generator=gen)
            loss = torch.nn.functional.cross_entropy(model(batch.tokens)[:, -1], batch.answers)
            opt.zero_grad()
            loss.backward()
            opt.step()
        out.append((time.process_time() - cpu) / steps)
    return out[0], out[1]


def grid_cost(preset: pb.Preset, timed: dict[tuple[str, str, str], dict[str, float]],
              scale: float = 1.0, seeds: int = 3) -> float:
    """CPU seconds of the preset's grid with every cell's steps times ``scale``: training,
    the evaluations during training, one per-head ablation grid per cell (two for faithful
    MLA), probe and start-up counted as three more evaluations."""
    total = 0.0
    n_heads = preset.model["n_layers"] * preset.model["n_heads"]
    for (task, variant, label), t in timed.items():
        steps = scale * t["cell_steps"]
        ablations = 2 if (label == "mla" and variant == "faithful") else 1
        per_cell = (steps * t["step_cpu"] + (preset.evals + 1) * t["eval_cpu"]
                    + (ablations * n_heads + 3) * t["analysis_cpu"])
        total += seeds * per_cell
    return total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--preset", default="cpu", choices=["cpu", "paper-length", "paper"])
    parser.add_argument("--device", default="cpu", help="cpu, cuda, cuda:1, ...")
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--tasks", nargs="+", default=["distance", "count"])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--root", default=None, help="the grid's run folder (measured times)")
    parser.add_argument("--measured-only", action="store_true",
                        help="only print the grid's measured times (needs --root; no training)")
    parser.add_argument("--budget-hours", type=float, default=12.0,
                        help="CPU-hours the grid may cost (claim-grid presets)")
    parser.add_argument("--attention", action="store_true",
                        help="only compare the fused and the written-out attention (batch 64)")
    args = parser.parse_args()
    if args.attention:
        torch.set_num_threads(args.threads)
        fused, written = attention_paths(pb.ENCODER_PRESETS[args.preset], args.steps)
        print(f"{args.preset}, distance, intended RoPE, batch 64: fused attention "
              f"{1e3 * fused:.0f} CPU-ms per step, written out {1e3 * written:.0f} "
              f"({written / fused:.2f}x)")
        return
    if args.measured_only and not args.root:
        parser.error("--measured-only needs --root (the grid's run folder)")
    torch.set_num_threads(args.threads)
    preset = pb.ENCODER_PRESETS[args.preset]
    print(f"{preset.name} preset: {preset.model}, batch {preset.batch_size}; torch threads "
          f"{torch.get_num_threads()}")
    if not args.measured_only:
        print(f"{'task':9} {'variant':9} {'scheme':11} {'ms/step':>8} {'CPU ms/step':>11} "
              f"{'full run (s)':>13} {'forward (ms)':>13}")
    timed = {}
    for task in [] if args.measured_only else args.tasks:
        for variant in ("intended", "faithful"):
            labels = preset.grid[variant] if preset.grid else LABELS
            for label in labels:
                if variant == "faithful" and label == "hybrid":
                    continue  # the official RoPE model already is the hybrid
                t = time_variant(preset, task, label, variant, args.steps, args.device)
                timed[(task, variant, label)] = t
                full = t["step"] * t["cell_steps"]
                print(f"{task:9} {variant:9} {label:11} {1e3 * t['step']:8.1f} "
                      f"{1e3 * t['step_cpu']:11.1f} {full:13.0f} {1e3 * t['forward']:13.1f}",
                      flush=True)
    if timed and preset.grid:
        cells = 3 * len(timed)
        total, fixed = grid_cost(preset, timed), grid_cost(preset, timed, scale=0.0)
        share = (args.budget_hours * 3600 - fixed) / (total - fixed)
        unit = "CPU-hours" if args.device == "cpu" else f"{args.device}-hours"
        steps = ", ".join(f"{t} {max(v['cell_steps'] for k, v in timed.items() if k[0] == t)}"
                          for t in args.tasks)
        print(f"\ngrid: {cells} cells (3 seeds) at up to {steps} steps: {total / 3600:.1f} {unit} "
              f"({fixed / 3600:.1f} of them evaluations and ablations); "
              f"{args.budget_hours:g} {unit} fit {100 * share:.0f} % of those steps")
    if args.root:
        rows = [json.loads(p.read_text()) for p in
                sorted((Path(args.root) / preset.name).glob("**/analysis.json"))]
        print(f"\nmeasured training time of the grid's cells ({len(rows)}):")
        for r in rows:
            c = r["cell"]
            print(f"  {c['task']:9} {c['variant']:9} {c['label']:11} seed {c['seed']}: "
                  f"{r['train_time_s']:6.0f} s for {r['steps']} steps")


if __name__ == "__main__":
    main()
