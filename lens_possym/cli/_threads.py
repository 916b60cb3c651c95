"""``--threads``: a command's torch CPU thread count, restored when it ends (the commands
that train: ``train``, ``sweep``, ``encoder``, ``multihop``), at most the machine's CPUs."""

from __future__ import annotations

import argparse
import functools
import os
from contextlib import contextmanager
from typing import Callable, Iterator

from ..errors import UsageError

__all__ = ["apply_threads", "with_threads", "machine_cpus"]


def machine_cpus() -> int:
    """The CPUs this process may run on (its affinity where the system tells it)."""
    try:
        return max(len(os.sched_getaffinity(0)), 1)
    except (AttributeError, OSError):  # not Linux
        return max(os.cpu_count() or 1, 1)


@contextmanager
def apply_threads(args: argparse.Namespace) -> Iterator[None]:
    """Use ``--threads`` torch CPU threads while the command runs, then restore the count.

    Raises:
        UsageError: more threads than the machine has CPUs (``--threads 100000`` made the
            thread pools crash the process with a segmentation fault).
    """
    cpus = machine_cpus()
    if args.threads and args.threads > cpus:
        raise UsageError(
            f"lens-possym {getattr(args, 'command', '')}: error: argument --threads: "
            f"{args.threads} is more than this machine's {cpus} CPUs; pass at most {cpus} "
            "(0: torch's default)")
    import torch

    before = torch.get_num_threads()
    if args.threads and args.threads > 0:
        torch.set_num_threads(args.threads)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def with_threads(run: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    """A command's ``run(args)`` under :func:`apply_threads`."""
    @functools.wraps(run)
    def threaded(args: argparse.Namespace) -> int:
        with apply_threads(args):
            return run(args)
    return threaded
