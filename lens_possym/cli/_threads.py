"""``--threads``: a command's torch CPU thread count, restored when it ends (the commands
that train: ``train``, ``sweep``, ``encoder``, ``multihop``)."""

from __future__ import annotations

import argparse
import functools
from contextlib import contextmanager
from typing import Callable, Iterator

__all__ = ["apply_threads", "with_threads"]


@contextmanager
def apply_threads(args: argparse.Namespace) -> Iterator[None]:
    """Use ``--threads`` torch CPU threads while the command runs, then restore the count."""
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
