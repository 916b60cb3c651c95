"""Paper C reproduced (stub: training stage; the analysis stages are added below)."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
RUNS = ROOT / "out" / "paper_c" / "runs"


def run_dir(task: str, preset: str, seed: int) -> Path:
    return RUNS / f"{task}-{preset}-s{seed}"


def stage_train(args) -> None:
    from lens_possym.synthetic.multihop import train_multihop

    for task in args.tasks:
        out = run_dir(task, args.preset, args.seed)
        print(f"[train] {task} preset={args.preset} seed={args.seed} -> {out}", flush=True)
        _, _, result = train_multihop(task, args.preset, seed=args.seed, out_dir=out,
                                      device=args.device,
                                      log=lambda line: print(f"  {task}: {line}", flush=True))
        print(f"[train] {task}: {result.steps_run} steps, test accuracy "
              f"{result.test_accuracy:.4f}, {result.train_time_s:.0f} s", flush=True)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("stage", choices=["train"])
    parser.add_argument("--tasks", nargs="+", default=["number", "letter"])
    parser.add_argument("--preset", default="cpu")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    {"train": stage_train}[args.stage](args)


if __name__ == "__main__":
    main(sys.argv[1:])
