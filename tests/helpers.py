"""Helpers the test modules share (import them: ``from tests.helpers import PROMPT``).

``tests`` is a package, so ``python -m pytest`` from the repository root finds it; fixtures
stay in ``conftest.py``.
"""

from __future__ import annotations

import math

__all__ = ["PROMPT", "hooks_attached", "toy_frequency_sweep"]

PROMPT = "Alice likes red . Bob likes blue . Carol likes green . What color does Bob like ?"


def hooks_attached(model) -> int:
    """Number of forward hooks currently registered on the model's hook points."""
    return sum(len(hp._forward_hooks) for hp in model.hook_dict.values())


def toy_frequency_sweep():
    """A small paper A :class:`~lens_possym.papers.a.sweeps.FrequencySweep` built by hand:
    two runs, one with per-frequency scores and a ``nan`` accuracy, one without."""
    from lens_possym.papers.a.sweeps import FrequencySweep, FrequencySweepRun  # a plug-in

    return FrequencySweep(
        task="index", task_config={"n": 8}, model_config={}, train_config={},
        angles=[1.0, 0.1, 0.0], answer_positions=[1, 2],
        runs=[FrequencySweepRun(freq_ids=[0], angles=[1.0], seed=0, test_accuracy=0.5,
                                accuracy_by_position=[0.25, math.nan], steps_run=10,
                                train_time_s=0.1, pos_score=0.9, sym_score=0.1,
                                pos_freq=[0.9, 0.5, 0.2], sym_freq=[0.1, 0.4, 0.8]),
              FrequencySweepRun(freq_ids=[1, 2], angles=[0.1, 0.0], seed=1,
                                test_accuracy=0.75, accuracy_by_position=[0.5, 1.0],
                                steps_run=10, train_time_s=0.1)])
