"""The per-layer frequency profile (Table 1 / Fig 8): the max logit term per frequency,
the weighted-average ID, on a trained tiny run."""

from __future__ import annotations

import math

import pytest
import torch

from lens_possym.errors import InvalidSelectionError
from lens_possym.decompose import frequency_logits
from lens_possym.papers.c.frequency import TABLE_1, FrequencyProfile, frequency_profile, weighted_id

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_weighted_id_by_hand():
    profile = torch.tensor([[0.0, 2.0, 0.0, 2.0], [1.0, -5.0, 0.0, 0.0], [-1.0, -1.0, 0, 0]])
    got = weighted_id(profile)
    assert got[0] == pytest.approx(3.0) and got[1] == pytest.approx(1.0)
    assert math.isnan(got[2])                               # nothing positive: undefined
    assert len(TABLE_1["number"]) == len(TABLE_1["letter"]) == 12


def test_profile_is_the_mean_max_term_per_frequency(tiny_multihop_run, tmp_path):
    _, model, task = tiny_multihop_run
    prof = frequency_profile(model, task, n_prompts=6, seed=1, chunk=4)
    n_layers, n_freqs = model.cfg.n_layers, model.cfg.n_freqs
    assert len(prof.profile) == n_layers and len(prof.profile[0]) == n_freqs
    assert prof.max_abs_error < 1e-4 and prof.n_prompts == 6
    assert all(1 <= w <= n_freqs for w in prof.weighted)
    # by hand, layer 1: the terms of each prompt's last query, max over keys, mean
    tokens = task.test_set(6, seed=1).tokens
    fl = frequency_logits(model.bridge(), tokens, 1, heads=[0])
    by_hand = fl.terms[:, 0, 0].max(dim=1).values.mean(0)
    assert torch.allclose(torch.tensor(prof.profile[1]), by_hand.float(), atol=1e-5)
    assert FrequencyProfile.from_dict(prof.to_dict()).weighted == prof.weighted
    assert len(prof.weighted_angle()) == n_layers
    with pytest.raises(InvalidSelectionError, match="n_prompts must be >= 1"):
        frequency_profile(model, task, n_prompts=0)
