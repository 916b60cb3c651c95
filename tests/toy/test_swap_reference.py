"""The private re-run reference of the token-swap scores (used until lens_possym.swap_scores)."""

from __future__ import annotations

import pytest
import torch

from lens_possym.tasks import RetrievalTask
from lens_possym.toy import ToyTransformer
from lens_possym.toy._swap_reference import reference_swap_scores
from lens_possym.training import toy_config_for


def _random_head(task, ids, seed=0, init_std=None):
    cfg = toy_config_for(task, n_freqs=4, seed=seed, init_std=init_std)
    return ToyTransformer(cfg).set_frequencies(ids)


def test_reference_scores_invariants():
    """NoPE head: exactly symbolic. Keys all equal: exactly positional (Definition 2)."""
    task = RetrievalTask(6, 3, 5)
    tokens = task.test_set(12).tokens
    # large random weights, so attention is peaked (uniform attention scores ~1 on both)
    nope = _random_head(task, [4], init_std=2.0)             # the θ = 0 tail only
    pos, sym = reference_swap_scores(nope, tokens)
    assert sym == pytest.approx(1.0, abs=1e-5) and pos < 0.9
    equal_keys = _random_head(task, [0], init_std=2.0)
    with torch.no_grad():
        w = equal_keys.blocks[0].attn.W_K
        w[:] = w[:, :1]                                       # every token has the same key
    pos, sym = reference_swap_scores(equal_keys, tokens)
    assert pos == pytest.approx(1.0, abs=1e-5) and sym < 0.9
