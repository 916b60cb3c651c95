"""Paper A's toy-model claims, on trained models (short budgets; the full sweeps are in the docs).

Each claim is checked on the default tasks and toy model, one seed, with the budget the
claim needs: success runs stop at the first evaluation reaching the target accuracy,
failure runs train 1000 steps (half the default) — long enough that the easy frequencies
are solved well within it (they reach >= 99% in about 1000-1500 steps).
"""

from __future__ import annotations

import pytest
import torch

import lens_possym as lp
from lens_possym.papers import a as paper_a
from lens_possym import training

NOPE = 16


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _train(task, ids, **config):
    model = paper_a.ToyTransformer(paper_a.toy_config_for(task)).set_frequencies(ids)
    result = training.train(model, task, training.TrainConfig(**config))
    return model, result


@pytest.mark.slow
def test_index_needs_a_fast_frequency_and_its_head_is_positional():
    task = paper_a.IndexTask()
    model, result = _train(task, [2], target_accuracy=0.99, eval_every=100)
    assert result.test_accuracy >= 0.99
    scores = training.head_scores(model, task.test_set(32).tokens)
    assert scores.pos > 0.9 and scores.sym < 0.1
    _, slow = _train(task, [6], steps=1000, eval_every=500)
    assert slow.test_accuracy < 0.5
    by_pos = torch.tensor(slow.test_accuracy_by_position)
    assert by_pos[[0, -1]].mean() > by_pos[4:12].mean() + 0.1        # U: the ends survive


@pytest.mark.slow
def test_retrieval_needs_a_slow_frequency_and_its_head_is_symbolic():
    task = paper_a.RetrievalTask()
    model, result = _train(task, [NOPE], target_accuracy=0.99, eval_every=100)
    assert result.test_accuracy >= 0.99
    scores = training.head_scores(model, task.test_set(32).tokens)
    assert scores.sym > 0.9 and scores.pos < 0.5
    _, fast = _train(task, [2], steps=1000, eval_every=500)
    assert fast.test_accuracy < 0.9
    by_pos = torch.tensor(fast.test_accuracy_by_position)
    assert by_pos[2:6].mean() > by_pos[[0, -1]].mean() + 0.1        # inverse U
