"""How fast the toy models train: one Index model to 99% test accuracy, and a full sweep.

    python benchmarks/bench_toy.py                 # both measurements
    python benchmarks/bench_toy.py --skip-sweep    # only time-to-99%
    python benchmarks/bench_toy.py --sweep-task retrieval --seeds 0,1,2

Time-to-99%: a default Index model (16 symbols, 16 positions, one head gated to frequency
id 2, default TrainConfig) evaluated on its 2048-prompt test set every 50 steps, stopped at
the first evaluation with test accuracy >= 0.99; one run per seed. Target: < 60 s on a
2-core CPU. Full sweep: the same setup for every frequency id (17 runs, default 2000 steps,
scores of the trained heads included), the wall time of
:func:`lens_possym.papers.a.frequency_sweep`.
The machine's load average is printed with the results: the numbers are only comparable
between runs on an otherwise idle machine.
"""

from __future__ import annotations

import argparse
import os
import platform
import time

import torch


def time_to_target(seed: int, freq: int, target: float, device: str) -> dict:
    import lens_possym as lp
    from lens_possym.papers import a as paper_a
    from lens_possym import training

    task = paper_a.IndexTask()
    model = paper_a.ToyTransformer(paper_a.toy_config_for(task, seed=seed)).set_frequencies([freq])
    config = training.TrainConfig(steps=4000, eval_every=50, target_accuracy=target, seed=seed,
                            device=device)
    start = time.perf_counter()
    result = training.train(model, task, config)
    wall = time.perf_counter() - start
    return {"seed": seed, "reached": result.reached_target_at, "steps": result.steps_run,
            "test_accuracy": result.test_accuracy, "wall_s": wall,
            "ms_per_step": 1e3 * wall / max(result.steps_run, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", default="0,1,2", help="seeds for time-to-99%%")
    parser.add_argument("--freq", type=int, default=2, help="frequency id of the Index head")
    parser.add_argument("--target", type=float, default=0.99)
    parser.add_argument("--skip-sweep", action="store_true")
    parser.add_argument("--sweep-task", default="index")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch CPU threads (default 1, as the CLI; 0 = torch's default)")
    args = parser.parse_args()
    if args.threads > 0:
        torch.set_num_threads(args.threads)

    import lens_possym as lp
    from lens_possym.papers import a as paper_a
    from lens_possym import training
    from lens_possym._inputs import resolve_device

    device = resolve_device(args.device)
    print(f"torch {torch.__version__} on {device} ({platform.processor() or platform.machine()}, "
          f"{os.cpu_count()} cores, {torch.get_num_threads()} torch threads); load average "
          f"{os.getloadavg()[0]:.2f}")
    # warm-up: first optimiser creation imports torch._dynamo (seconds, once per process)
    training.train(paper_a.ToyTransformer(paper_a.toy_config_for(paper_a.IndexTask(4, 4), n_freqs=2)),
             paper_a.IndexTask(4, 4), training.TrainConfig(steps=2, eval_every=2, eval_size=16))

    print(f"\nIndex, frequency id {args.freq}: time to test accuracy >= {args.target:.0%}")
    runs = [time_to_target(int(s), args.freq, args.target, str(device))
            for s in args.seeds.split(",")]
    for r in runs:
        status = f"reached at step {r['reached']}" if r["reached"] else "NOT reached"
        print(f"  seed {r['seed']}: {status}, test acc {r['test_accuracy']:.4f}, "
              f"{r['wall_s']:.1f} s ({r['ms_per_step']:.1f} ms/step incl. evaluations)")
    walls = sorted(r["wall_s"] for r in runs)
    print(f"  median {walls[len(walls) // 2]:.1f} s, max {walls[-1]:.1f} s (target < 60 s)")

    if not args.skip_sweep:
        task = training.make_task(args.sweep_task)
        print(f"\nfull sweep: {task.describe()}, every frequency id, one seed, default "
              "TrainConfig, scores included")
        start = time.perf_counter()
        result = paper_a.frequency_sweep(
            task, train_config=training.TrainConfig(device=str(device)))
        wall = time.perf_counter() - start
        train_s = sum(r.train_time_s for r in result.runs)
        print(f"  {len(result.runs)} models in {wall:.1f} s wall ({train_s:.1f} s training, "
              f"{wall / len(result.runs):.1f} s per model)")
        print(result.table())
    print(f"\nload average at the end: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
