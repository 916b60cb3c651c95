"""What the benchmarks share: the clock a cost is counted on (bench_paper_b, bench_paper_c,
bench_attribution, bench_faithfulness) and the binding pairs the patching benchmarks run
on (bench_patching, bench_attribution, bench_faithfulness)."""

from __future__ import annotations

import argparse
import time
from typing import Any, Callable

import torch


def cost_clock(device: torch.device) -> Callable[[], float]:
    """The process's CPU time on a CPU (what a shared machine spends), synchronised wall
    time on an accelerator (the device is the resource spent there)."""
    if device.type == "cpu":
        return time.process_time

    def wall() -> float:
        torch.cuda.synchronize(device)
        return time.perf_counter()
    return wall


def timed(fn: Callable[[], Any]) -> tuple[Any, float]:
    """``fn()`` and the CPU seconds this process spent on it (``time.process_time``: on a
    shared machine, wall time measures the other jobs too; with one torch thread the two
    agree on an idle one)."""
    start = time.process_time()
    out = fn()
    return out, time.process_time() - start


def add_binding_args(parser: argparse.ArgumentParser, *, n_prompts: int) -> None:
    """``--model``, ``--n-prompts``, ``--n-pairs``, ``--corruption``, ``--threads``: the
    binding pairs a patching benchmark runs on (:func:`binding_setup`)."""
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--n-prompts", type=int, default=n_prompts)
    parser.add_argument("--n-pairs", type=int, default=4)
    parser.add_argument("--corruption", default="swap_query")
    parser.add_argument("--threads", type=int, default=1)


def binding_setup(args: argparse.Namespace):
    """``(model, pairs, metric)`` from :func:`add_binding_args`'s arguments: the model, its
    binding counterfactual pairs (``lp.tasks.binding_pairs``) and their normalised logit
    difference; torch runs on ``--threads`` threads."""
    import lens_possym as lp
    from lens_possym.tasks import binding_pairs

    torch.set_num_threads(args.threads)
    model = lp.load_model(args.model)
    pairs = binding_pairs(model, None, args.corruption, n_prompts=args.n_prompts,
                          n_pairs=args.n_pairs)
    return model, pairs, pairs.metric(model)
