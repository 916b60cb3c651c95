"""What paper C's training runs cost on a device: milliseconds per step and whole runs.

    python benchmarks/bench_paper_c.py [--device cpu|cuda] [--steps 50] [--presets paper cpu]
        [--threads 1]

For each preset and task (Number, Letter), the preset's model is trained for ``--steps``
steps through the shared loop (after 5 warm-up steps) and one evaluation on the preset's
test set is timed. The script prints the seconds per step, the projected time of one full
run (its steps plus its evaluations every ``eval_every`` steps) and of the preset's three
seeds of both tasks. On a CPU the cost clock is the process's CPU time (what a shared
machine spends); on ``cuda`` it is synchronised wall time. Checkpoint writing is not
counted (``paper`` writes 70 of about 28 MB each per run: seconds).

Times depend on the machine and its load; compare numbers from one run only.
"""

from __future__ import annotations

import argparse

import torch

from _timing import cost_clock
from lens_possym.papers.c.presets import build_run, preset
from lens_possym.training.loop import evaluate, train


def time_run(preset_name: str, task_name: str, steps: int, device: str) -> dict[str, float]:
    """Cost-clock seconds per training step and per evaluation of ``preset_name``'s run."""
    clock = cost_clock(torch.device(device))
    p = preset(preset_name)
    model, task, config = build_run(task_name, preset_name, device=device, steps=5,
                                    eval_every=5, eval_size=64)
    train(model, task, config)                                               # warm-up
    model, task, config = build_run(task_name, preset_name, device=device, steps=steps,
                                    eval_every=steps, eval_size=64)
    start = clock()
    train(model, task, config)
    step = (clock() - start) / steps
    test = task.test_set(p.train["eval_size"])
    start = clock()
    evaluate(model, task, test)
    return {"step": step, "eval": clock() - start, "steps": p.train["steps"],
            "evals": p.train["steps"] // p.train["eval_every"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--presets", nargs="+", default=["paper", "cpu"])
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    unit = "CPU" if args.device == "cpu" else args.device
    print(f"device {args.device}, torch threads {torch.get_num_threads()}; {unit} time")
    print(f"{'preset':7} {'task':7} {'ms/step':>8} {'eval (s)':>9} {'run (min)':>10}")
    for name in args.presets:
        total = 0.0
        for task in ("number", "letter"):
            t = time_run(name, task, args.steps, args.device)
            run = t["steps"] * t["step"] + t["evals"] * t["eval"]
            total += 3 * run
            print(f"{name:7} {task:7} {1e3 * t['step']:8.1f} {t['eval']:9.2f} {run / 60:10.1f}",
                  flush=True)
        print(f"{name}: 3 seeds x 2 tasks = {total / 3600:.2f} {unit}-hours")


if __name__ == "__main__":
    main()
