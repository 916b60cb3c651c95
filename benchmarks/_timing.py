"""The clock the training benchmarks count a grid's cost on (bench_paper_b, bench_paper_c)."""

from __future__ import annotations

import time
from typing import Callable

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
