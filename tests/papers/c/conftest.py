"""Fixtures of the synthetic tests: one tiny multi-hop GPT-J run, trained once."""

from __future__ import annotations

import pytest
import torch


@pytest.fixture(scope="session")
def tiny_multihop_run(tmp_path_factory):
    """A 60-step ``tiny``-preset Number run with checkpoints every 20 steps:
    ``(run_dir, model, task)``."""
    from lens_possym.papers.c.presets import train_multihop

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        run_dir = tmp_path_factory.mktemp("multihop") / "number-tiny"
        model, task, _ = train_multihop("number", "tiny", out_dir=run_dir, device="cpu")
    finally:
        torch.set_num_threads(before)
    return run_dir, model, task
