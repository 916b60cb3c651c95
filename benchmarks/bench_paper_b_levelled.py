"""What paper B's ``+levelled`` grid costs: one cell's training steps and its 4,096-sentence
scoring timed here, and the plan (cells x time) for the queue.

    OMP_NUM_THREADS=1 nice -n 5 python benchmarks/bench_paper_b_levelled.py \
        [--task distance] [--label rope] [--variant intended] [--steps 240] [--threads 1]

Times one ``paper-length`` cell (after 3 warm-up steps): CPU seconds per training step
through the shared loop, one loop evaluation (1,024 sentences), and the cell's scoring
(:func:`lens_possym.papers.b.levelled.score_cell`: accuracy and 24 single-head ablations
on 4,096 sentences, paired standard errors). Then the plan, from those figures and the
committed ``docs/paper_b_results.json``: how many ``paper-length`` cells (and ``+copies``
cells) already level off at 4,800 steps by the 2026-11-29 rule, and the grid's CPU-hours
with no extension, with one extension for every cell that has not levelled off, and at the
step cap for all of them. Times are CPU time of this process (what a shared machine
spends); compare numbers from one run only.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch

from _timing import cost_clock
from lens_possym.papers import b as pb
from lens_possym.papers.b import levelled as lv
from lens_possym.training.loop import TrainConfig, evaluate, train


def time_cell(task_name: str, label: str, variant: str, steps: int) -> dict[str, float]:
    """CPU seconds per step, per loop evaluation and per scoring of one paper-length cell."""
    clock = cost_clock(torch.device("cpu"))
    preset = pb.ENCODER_PRESETS["paper-length"]
    task = pb.preset_task(preset, task_name, 0)
    model = pb.make_model(preset, task, label, variant, 0)
    scheme = pb.parse_label(label)[0]
    config = dict(batch_size=preset.batch_size_for(scheme), lr=preset.lr, betas=preset.betas,
                  eval_size=64, device="cpu")
    train(model, task, TrainConfig(steps=3, eval_every=3, **config))          # warm-up
    cost = clock()
    train(model, task, TrainConfig(steps=steps, eval_every=steps, **config))
    step = (clock() - cost) / steps
    loop_set = task.test_set(preset.eval_size)
    cost = clock()
    evaluate(model, task, loop_set)
    evaluation = clock() - cost
    batch = lv.scoring_batch(task, 0)
    cost, wall = clock(), time.perf_counter()
    lv.score_cell(model, batch)
    return {"step": step, "eval": evaluation, "score": clock() - cost,
            "score_wall": time.perf_counter() - wall}


def plan(t: dict[str, float], records: list[dict]) -> list[str]:
    """The grid's cost lines: base run, extensions, cap."""
    out = []
    grids = {"paper-length": 114, "paper-length+copies": 42}
    base_steps = 4800
    evals_base, evals_ext = 8, lv.EXTENSION_EVALS
    base = base_steps * t["step"] + evals_base * t["eval"]
    ext = lv.EXTENSION_STEPS * t["step"] + evals_ext * t["eval"]
    n_ext_max = (lv.STEP_CAP - base_steps) // lv.EXTENSION_STEPS
    total_cells, still = 0, 0
    for name, cells in grids.items():
        mine = [r for r in records if r["preset"] == name]
        rising = [r for r in mine if not lv.levelled_off(r.get("history") or [])]
        out.append(f"{name}: {len(mine)} committed cells of {cells}; {len(rising)} not levelled "
                   f"off at {base_steps} steps by the rule (gain over the last 20 % >= "
                   f"{lv.LEVEL_GAIN * 100:g} point on the loop's evaluations)")
        total_cells += cells
        still += round(len(rising) * cells / max(len(mine), 1))
    per_cell = base + t["score"]
    out += [f"per cell: base run {base / 3600:.2f} CPU-h ({base_steps} steps + {evals_base} loop "
            f"evaluations), one extension {ext / 3600:.2f} CPU-h ({lv.EXTENSION_STEPS} steps + "
            f"{evals_ext} evaluations), scoring {t['score'] / 60:.1f} CPU-min",
            f"grid ({total_cells} cells): base runs and scoring {total_cells * per_cell / 3600:.0f} "
            f"CPU-h; + one extension for the ~{still} not levelled off: "
            f"{(total_cells * per_cell + still * ext) / 3600:.0f} CPU-h; every one of them at the "
            f"cap ({n_ext_max} extensions): {(total_cells * per_cell + still * n_ext_max * ext) / 3600:.0f}"
            f" CPU-h; on 2 cores half of each in wall hours",
            f"re-scoring only (base runs already on disk): {total_cells * t['score'] / 3600:.1f} CPU-h"]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--task", default="distance", choices=["distance", "count"])
    parser.add_argument("--label", default="rope")
    parser.add_argument("--variant", default="intended", choices=["intended", "faithful"])
    parser.add_argument("--steps", type=int, default=240)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--records", default="docs/paper_b_results.json")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    t = time_cell(args.task, args.label, args.variant, args.steps)
    print(f"paper-length {args.task} {args.variant} {args.label}, torch threads "
          f"{torch.get_num_threads()}: {1e3 * t['step']:.0f} CPU-ms per training step "
          f"({args.steps} steps), {t['eval']:.1f} CPU-s per loop evaluation (1,024), scoring "
          f"on {lv.SCORING_SIZE} sentences with 24 ablations {t['score']:.0f} CPU-s "
          f"({t['score_wall']:.0f} s wall)")
    records = pb.as_dicts(pb.read_records(Path(args.records)))    # the file's "cells"
    for line in plan(t, records):
        print(line)


if __name__ == "__main__":
    main()
