"""Standard errors and bootstrap intervals over prompts: TransformerLens's arithmetic."""

from __future__ import annotations

import math

import pytest
import torch
from transformer_lens.utilities import statistics as tl_stats

from lens_possym.errors import InvalidSelectionError
from lens_possym.interventions import bootstrap_interval, standard_error, uncertainty


def test_the_bootstrap_interval_of_a_constant_is_a_point():
    values = torch.full((3, 5, 7), 0.25)
    low, high = bootstrap_interval(values)
    assert torch.equal(low, torch.full((3, 5), 0.25)) and torch.equal(high, low)
    assert torch.equal(standard_error(values), torch.zeros(3, 5))


def test_numbers_are_those_of_transformer_lens():
    gen = torch.Generator().manual_seed(0)
    values = torch.randn(4, 6, 9, generator=gen, dtype=torch.float64)
    assert torch.equal(standard_error(values), tl_stats.standard_error(values, dim=-1))
    low, high = bootstrap_interval(values, seed=3)
    tl_low, tl_high = tl_stats.bootstrap_ci(values, dim=-1, generator=tl_stats.derive_generator(
        3, "bootstrap", "mean"))
    assert torch.equal(low, tl_low) and torch.equal(high, tl_high)
    assert (low <= values.mean(-1)).all() and (values.mean(-1) <= high).all()
    se = values.std(-1, unbiased=True) / math.sqrt(9)
    assert torch.allclose(standard_error(values), se)


def test_the_summary_and_its_limits():
    values = torch.tensor([[1.0, 2.0, 3.0, 4.0]])
    unc = uncertainty(values, confidence=0.9, n_resamples=500, seed=1)
    assert unc.mean.tolist() == [2.5] and unc.n_prompts == 4 and unc.confidence == 0.9
    assert unc.se.item() == pytest.approx(values.std().item() / 2)
    assert unc.label(0).startswith("2.5 ± 0.645 [")
    one = uncertainty(torch.tensor([[3.0]]))  # one prompt: no spread to estimate
    assert math.isnan(one.se.item()) and one.low.item() == one.high.item() == 3.0
    assert "±" not in one.label(0)
    with pytest.raises(InvalidSelectionError, match="confidence must be in"):
        bootstrap_interval(values, confidence=1.0)
    with pytest.raises(InvalidSelectionError, match="n_resamples must be a positive"):
        bootstrap_interval(values, n_resamples=0)
    with pytest.raises(InvalidSelectionError, match="prompt axis"):
        standard_error(torch.tensor(1.0))
