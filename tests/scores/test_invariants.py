"""Paper A's invariants: a NoPE head is symbolic, a head with equal keys is positional,
and the swap cosines are what their definition says."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import lens_possym as lp
from lens_possym.scores import swap_cosines, swap_scores
from lens_possym.scores.swaps import WeightedCosines
from tests.helpers import hooks_attached

PROMPT = "Alice likes red . Bob likes blue . Carol likes green . What color does"


def _nope(model):
    """Make every layer NoPE: all rotary angles 0 (the model's own tables follow)."""
    for name, buffer in model.original_model.named_buffers():
        if name.endswith("inv_freq"):
            buffer.zero_()
    lp.rope_specs(model, refresh=True)
    return model


@pytest.mark.parametrize("family", ["llama", "qwen2", "gemma3", "neox"])
@pytest.mark.parametrize("method", ["exact", "rerun"])
def test_nope_head_is_exactly_symbolic(family, method):
    model = _nope(lp.tiny_model(family, dtype=torch.float64, seed=3))
    assert all(float(s.angles.abs().max()) == 0 for s in lp.rope_specs(model))
    scores = swap_scores(model, PROMPT, method=method, tau=1e-2)
    assert torch.allclose(scores.sym, torch.ones_like(scores.sym), atol=1e-12)
    assert torch.allclose(scores.sym_freq, torch.ones_like(scores.sym_freq), atol=1e-12)
    assert scores.pos.max() < 1 - 1e-3  # attention is not uniform: not positional too


@pytest.mark.parametrize("family", ["neox", "gptj"])
def test_the_nope_tail_of_a_partial_rotary_head_is_symbolic(family):
    model = lp.tiny_model(family, dtype=torch.float64)
    scores = swap_scores(model, PROMPT)
    assert lp.rope_spec(model, 0).angles[-1] == 0
    assert torch.allclose(scores.sym_freq[..., -1], torch.ones(2, 4, dtype=torch.float64), atol=1e-12)


@pytest.mark.parametrize("family", lp.models.TINY_FAMILIES)
@pytest.mark.parametrize("method", ["exact", "rerun"])
def test_a_head_whose_keys_are_all_equal_is_exactly_positional(family, method):
    model = lp.tiny_model(family, dtype=torch.float64)
    spec = lp.rope_spec(model, 0)
    constant = torch.randn(spec.d_head, generator=torch.Generator().manual_seed(0),
                           dtype=torch.float64)

    def equal_keys(k, hook):
        return constant.expand_as(k).clone()

    # the same value at every position: declared, the closed forms read through it (an
    # undeclared hook on the keys is refused, tests/scores/test_under_hooks.py)
    equal_keys = lp.scores.declare_hook(equal_keys, "position_free")
    with model.hooks(fwd_hooks=[(spec.k_hook, equal_keys)]):
        scores = swap_scores(model, PROMPT, layers=[0], method=method, tau=1e-2)
    assert torch.allclose(scores.pos[0], torch.ones(4, dtype=torch.float64), atol=1e-12)
    assert torch.allclose(scores.pos_freq[0], torch.ones_like(scores.pos_freq[0]), atol=1e-12)
    assert scores.pos[1].isnan().all()  # layer 1 was not asked for
    assert hooks_attached(model) == 0


@settings(max_examples=200, deadline=None)
@given(u=st.tuples(st.floats(-50, 50), st.floats(-50, 50)),
       v=st.tuples(st.floats(-50, 50), st.floats(-50, 50)))
def test_swap_cosines_are_cosines_of_the_masses(u, v):
    """cos((e^u1, e^u2), (e^v1, e^v2)) and cos(., (e^v2, e^v1)), whatever the scale."""
    pos, sym = swap_cosines(*(torch.tensor(x, dtype=torch.float64) for x in (*u, *v)))
    a = torch.tensor(u, dtype=torch.float64).exp()
    b = torch.tensor(v, dtype=torch.float64).exp()
    cos = lambda x, y: float(x @ y / (x.norm() * y.norm()))  # noqa: E731 (no eps clamp)
    assert math.isclose(pos, cos(a, b), abs_tol=1e-12)
    assert math.isclose(sym, cos(a, b.flip(0)), abs_tol=1e-12)


def test_swap_cosines_with_infinite_gaps():
    inf = torch.tensor(float("inf"))
    zero = torch.tensor(0.0)
    # a masked first group: (0, x) against (0, y): positional 1, symbolic 0
    pos, sym = swap_cosines(-inf, zero, -inf, zero)
    assert float(pos) == 1.0 and float(sym) == 0.0
    pos, sym = swap_cosines(zero, torch.tensor(1e6), zero, torch.tensor(-1e6))
    assert float(pos) == 0.0 and float(sym) == 1.0


@settings(max_examples=50, deadline=None)
@given(n=st.integers(1, 40), chunk=st.integers(1, 40), seed=st.integers(0, 1000),
       spread=st.floats(0.1, 2000))
def test_online_weighted_cosines_equal_one_softmax(n, chunk, seed, spread):
    gen = torch.Generator().manual_seed(seed)
    logw = torch.randn(3, n, generator=gen, dtype=torch.float64) * spread
    pos, sym = torch.rand(2, 3, n, generator=gen, dtype=torch.float64)
    acc = WeightedCosines()
    for start in range(0, n, chunk):
        acc.add(logw[:, start:start + chunk], pos[:, start:start + chunk], sym[:, start:start + chunk])
    w = torch.softmax(logw, -1)
    got_pos, got_sym = acc.result()
    assert torch.allclose(got_pos, (w * pos).sum(-1), atol=1e-12)
    assert torch.allclose(got_sym, (w * sym).sum(-1), atol=1e-12)


def test_scores_are_in_the_unit_square_and_weights_follow_tau():
    model = lp.tiny_model("llama", dtype=torch.float64)
    sharp = swap_scores(model, PROMPT, tau=1e-4)
    flat = swap_scores(model, PROMPT, tau=1e6)
    for s in (sharp, flat):
        for t in (s.pos, s.sym, s.pos_freq, s.sym_freq):
            assert (t >= -1e-12).all() and (t <= 1 + 1e-12).all()
    assert not torch.allclose(sharp.pos, flat.pos)
