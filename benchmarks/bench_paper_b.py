"""Wall time of every paper B encoder variant at the CPU preset.

    python benchmarks/bench_paper_b.py [--steps 40] [--tasks distance count] [--threads 1]
        [--root /work/pb_runs]

For each task, scheme (and RoPE on 2 heads) and variant: the model of the ``cpu`` preset
(3 layers × 8 heads, d_model 64) is trained for ``--steps`` steps through the shared loop
(after 3 warm-up steps), and the script prints milliseconds per step, the projected time of
the preset's full run (1,000 steps) and one forward pass over a batch of 64 sentences.
With ``--root``, it also prints the measured training time of every finished cell of the
grid (``benchmarks/paper_b.py run``), which is the number the docs quote; with
``--measured-only`` it prints only those (no training, seconds).

Times depend on the machine and its load; compare numbers from one run only.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch

from lens_possym.papers.b import experiments as pb
from lens_possym.training.loop import TrainConfig, train

LABELS = ["nope", "sinusoidal", "learned", "alibi", "t5", "rope", "rope-k2", "mla", "hybrid"]


def time_variant(preset: pb.Preset, task_name: str, label: str, variant: str, steps: int
                 ) -> tuple[float, float]:
    task = pb.make_task(preset, task_name)
    model = pb.make_model(preset, task, label, variant)
    config = dict(batch_size=preset.batch_size, lr=preset.lr, betas=preset.betas,
                  eval_size=64, device="cpu")
    train(model, task, TrainConfig(steps=3, eval_every=3, **config))          # warm-up
    start = time.perf_counter()
    train(model, task, TrainConfig(steps=steps, eval_every=steps, **config))
    per_step = (time.perf_counter() - start) / steps
    tokens = task.sample(64, seed=1).tokens
    model.eval()
    forward = []
    with torch.no_grad():
        for _ in range(5):
            t0 = time.perf_counter()
            model(tokens)
            forward.append(time.perf_counter() - t0)
    return per_step, statistics.median(forward)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--tasks", nargs="+", default=["distance", "count"])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--root", default=None, help="the grid's run folder (measured times)")
    parser.add_argument("--measured-only", action="store_true",
                        help="only print the grid's measured times (needs --root; no training)")
    args = parser.parse_args()
    if args.measured_only and not args.root:
        parser.error("--measured-only needs --root (the grid's run folder)")
    torch.set_num_threads(args.threads)
    preset = pb.PRESETS["cpu"]
    print(f"cpu preset: {preset.model}, batch {preset.batch_size}; torch threads "
          f"{torch.get_num_threads()}")
    if not args.measured_only:
        print(f"{'task':9} {'variant':9} {'scheme':11} {'ms/step':>8} {'1000 steps (s)':>15} "
              f"{'forward (ms)':>13}")
    for task in [] if args.measured_only else args.tasks:
        for variant in ("intended", "faithful"):
            for label in LABELS:
                if variant == "faithful" and label == "hybrid":
                    continue  # the official RoPE model already is the hybrid
                per_step, forward = time_variant(preset, task, label, variant, args.steps)
                full = per_step * preset.steps[task]
                print(f"{task:9} {variant:9} {label:11} {1e3 * per_step:8.1f} {full:15.0f} "
                      f"{1e3 * forward:13.1f}", flush=True)
    if args.root:
        rows = [json.loads(p.read_text()) for p in
                sorted((Path(args.root) / "cpu").glob("**/analysis.json"))]
        print(f"\nmeasured training time of the grid's cells ({len(rows)}):")
        for r in rows:
            c = r["cell"]
            print(f"  {c['task']:9} {c['variant']:9} {c['label']:11} seed {c['seed']}: "
                  f"{r['train_time_s']:6.0f} s for {r['steps']} steps")


if __name__ == "__main__":
    main()
