"""Theorem 1 (the exclusion principle): the bound holds, and the closed form is exact."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import lens_possym as lp
from lens_possym.capture import capture_attention_inputs
from lens_possym.errors import InvalidSelectionError
from lens_possym.scores import (
    cross_logit_factors,
    exclusion_by_enumeration,
    exclusion_from_factors,
    exclusion_from_matrix,
    swap_scores,
)


def _brute_force(matrix: torch.Tensor):
    """Paper A's definition summed over every permutation (rows: position, cols: content)."""
    import itertools

    n = matrix.shape[-1]
    diag = torch.diagonal(matrix)
    pos = sym = 0.0
    for perm in itertools.permutations(range(n)):
        for j in range(n):
            pos += float(matrix[j, perm[j]] - diag[j]) ** 2
            sym += float(matrix[perm[j], j] - diag[j]) ** 2
    return pos, sym


@settings(max_examples=30, deadline=None)
@given(n=st.integers(2, 6), seed=st.integers(0, 10_000), scale=st.floats(1e-3, 1e3))
def test_closed_form_equals_the_sum_over_permutations(n, seed, scale):
    matrix = torch.randn(n, n, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    matrix = matrix * scale
    ex = exclusion_from_matrix(matrix)
    norm_pos, norm_sym = ex.norm_sq()
    pos, sym = _brute_force(matrix)
    assert math.isclose(float(norm_pos), pos, rel_tol=1e-9)
    assert math.isclose(float(norm_sym), sym, rel_tol=1e-9)
    log_pos, log_sym = ex.log_norm()
    assert math.isclose(float(log_pos), 0.5 * math.log(pos), rel_tol=1e-9, abs_tol=1e-12)


@settings(max_examples=200, deadline=None)
@given(n=st.integers(2, 30), seed=st.integers(0, 10_000),
       kind=st.sampled_from(["random", "positional", "symbolic", "rank1"]))
def test_theorem_1_holds_on_random_heads(n, seed, kind):
    """Var(λ) <= (S_pos + S_sym)/N² for any logit function; equality cases inside [0, 1]."""
    gen = torch.Generator().manual_seed(seed)
    a, b = torch.randn(2, n, generator=gen, dtype=torch.float64)
    matrix = {
        "random": torch.randn(n, n, generator=gen, dtype=torch.float64),
        "positional": a[:, None].expand(n, n),       # depends on the position only
        "symbolic": b[None, :].expand(n, n),         # depends on the content only
        "rank1": a[:, None] * b[None, :],
    }[kind]
    ex = exclusion_from_matrix(matrix)
    assert float(ex.var) <= float(ex.bound) * (1 + 1e-12) + 1e-15
    assert 0 <= float(ex.ratio) <= 1 + 1e-12
    if kind == "positional":
        assert float(ex.s_pos) == 0
        assert float(ex.positional_share) == 1 or float(ex.s_sym) == 0
    if kind == "symbolic":
        assert float(ex.s_sym) == 0
        assert float(ex.positional_share) == 0 or float(ex.s_pos) == 0


def test_a_head_both_positional_and_symbolic_has_constant_logits():
    constant = torch.full((5, 5), 2.5, dtype=torch.float64)
    ex = exclusion_from_matrix(constant)
    assert float(ex.var) == float(ex.bound) == float(ex.ratio) == 0.0


@pytest.mark.parametrize("family", lp.models.TINY_FAMILIES)
def test_closed_form_equals_enumeration_over_reruns(family):
    """n <= 7: re-run the layer on all 720 permutations of 6 key rows; same sums."""
    model = lp.tiny_model(family, dtype=torch.float64, seed=1)
    tokens = model.to_tokens("Alice likes red . Bob likes blue")
    layer = len(lp.rope_specs(model)) - 1
    heads = list(range(4))
    query = tokens.shape[1] - 1
    keys = torch.arange(query - 6, query)
    inputs = capture_attention_inputs(model, tokens, layer)[layer]
    factors = cross_logit_factors(inputs, heads)
    head, freq = exclusion_from_factors(factors, keys)
    brute_head, brute_freq = exclusion_by_enumeration(model, tokens, layer, heads, keys)
    for ours, brute in ((head, brute_head), (freq, brute_freq)):
        for name in ("s_pos", "s_sym", "var"):
            a, b = getattr(ours, name), getattr(brute, name)
            assert torch.allclose(a, b, rtol=1e-9, atol=1e-12), (family, name)
        assert (ours.var <= ours.bound * (1 + 1e-9)).all()


def test_per_frequency_closed_form_equals_the_matrices():
    model = lp.tiny_model("gptj", dtype=torch.float64)
    inputs = capture_attention_inputs(model, "Alice likes red . Bob likes blue . Carol", 1)[1]
    factors = cross_logit_factors(inputs, [0, 2])
    keys = torch.arange(1, 9)
    _, freq = exclusion_from_factors(factors, keys)
    direct = exclusion_from_matrix(factors.freq_matrix(keys))
    assert torch.allclose(freq.s_pos, direct.s_pos, rtol=1e-10)
    assert torch.allclose(freq.s_sym, direct.s_sym, rtol=1e-10)
    assert torch.allclose(freq.var, direct.var, rtol=1e-10)


def test_exclusion_keys_are_checked():
    model = lp.tiny_model("llama")
    inputs = capture_attention_inputs(model, "Alice likes red . Bob", 0)[0]
    factors = cross_logit_factors(inputs, [0])
    query = factors.query_position
    with pytest.raises(InvalidSelectionError, match="before the query"):
        exclusion_from_factors(factors, torch.arange(1, query + 1))
    with pytest.raises(InvalidSelectionError, match="at least two"):
        exclusion_from_factors(factors, torch.tensor([1]))
    with pytest.raises(InvalidSelectionError, match="N <= 6"):
        exclusion_by_enumeration(model, model.to_tokens("Alice likes red . Bob likes blue"), 0,
                                 [0], torch.arange(7))


def test_profile_reports_the_ratio_per_head_and_frequency():
    model = lp.tiny_model("neox", dtype=torch.float64)
    scores = swap_scores(model, "Alice likes red . Bob likes blue . Carol likes green")
    assert scores.exclusion_ratio.shape == (2, 4)
    assert scores.exclusion_ratio_freq.shape == (2, 4, 5)
    for t in (scores.exclusion_ratio, scores.exclusion_ratio_freq):
        assert ((t >= 0) & (t <= 1 + 1e-9)).all()
    # the NoPE tail: S_sym = 0, so the ratio is Var / (S_pos/N²) and the positional share is 0
    assert scores.exclusion_ratio_freq[..., -1].isfinite().all()
    assert torch.allclose(scores.positional_share_freq[..., -1],
                          torch.zeros(2, 4, dtype=torch.float64))
    assert ((scores.positional_share >= 0) & (scores.positional_share <= 1)).all()
