"""The closed form equals the literal re-run, on every tiny family, per head and frequency.

(Heads whose swaps drain the attention, and paper C's own scoring: ``test_draining.py``.)

All in float64, where the only differences left are the model's own rounding (HF computes
the softmax and the rotation tables in float32 even for float64 models).
"""

from __future__ import annotations

import pytest
import torch

import lens_possym as lp
from lens_possym.capture import capture_attention_inputs
from lens_possym.scores import cross_logit_factors, exact_swap_scores, swap_scores, swap_set
from lens_possym.scores.swaps import SwapSet

PROMPT = "Alice likes red . Bob likes blue . Carol likes green . What color does"
TOL = 1e-5


@pytest.fixture(scope="module")
def models64():
    models = {family: lp.tiny_model(family, dtype=torch.float64) for family in lp.models.TINY_FAMILIES}
    # a window of 8 on the sliding layers: half the keys of PROMPT hidden, and room for blocks
    models["gemma3"] = lp.tiny_model("gemma3", dtype=torch.float64, sliding_window=8)
    return models


def _max_diff(a, b):
    return float((a - b).abs().max())


@pytest.mark.parametrize("family", lp.models.TINY_FAMILIES)
@pytest.mark.parametrize("swap", ["token", "block"])
def test_exact_equals_rerun(models64, family, swap):
    model = models64[family]
    kwargs = dict(swap=swap, n_blocks=4, tau=1e-2, exclude_bos=False)
    exact = swap_scores(model, PROMPT, method="exact", **kwargs)
    rerun = swap_scores(model, PROMPT, method="rerun", batch_size=17, **kwargs)
    for name in ("pos", "sym", "pos_freq", "sym_freq"):
        assert _max_diff(getattr(exact, name), getattr(rerun, name)) <= TOL, (family, swap, name)
    assert exact.pos.isfinite().all() and exact.pos_freq.isfinite().all()


def test_exact_equals_rerun_at_paper_tau_and_another_query(models64):
    model = models64["llama"]
    for query in (-1, 9):
        exact = swap_scores(model, PROMPT, query_position=query)
        rerun = swap_scores(model, PROMPT, query_position=query, method="rerun", batch_size=64)
        assert _max_diff(exact.pos, rerun.pos) <= TOL and _max_diff(exact.sym, rerun.sym) <= TOL
        assert _max_diff(exact.pos_freq, rerun.pos_freq) <= TOL


def test_exact_equals_rerun_over_a_batch_of_prompts(models64):
    model = models64["qwen2"]
    prompts = ["Alice likes red . Bob likes blue", "Carol likes green . Dave likes pink"]
    exact = swap_scores(model, prompts, tau=1e-3)
    rerun = swap_scores(model, prompts, tau=1e-3, method="rerun")
    assert exact.pos_prompts.shape == (2, 2, 4)
    assert _max_diff(exact.pos_prompts, rerun.pos_prompts) <= TOL
    assert torch.allclose(exact.pos, exact.pos_prompts.mean(0))


@pytest.mark.parametrize("family", ["llama", "gemma3", "neox", "gptj"])
def test_compiled_loop_equals_tensor_code(models64, family):
    """The per-frequency fast path and the tensor path compute the same numbers."""
    model = models64[family]
    layer = len(lp.rope_specs(model)) - 1
    inputs = capture_attention_inputs(model, PROMPT, layer)[layer]
    factors = cross_logit_factors(inputs, list(range(inputs.spec.n_heads)))
    swaps = swap_set("token", factors.query_position, factors.visible, exclude_bos=True)
    for tau in (1e-4, 1e-2, 1.0):
        fast = exact_swap_scores(factors, swaps, tau=tau, kernel=True)
        slow = exact_swap_scores(factors, swaps, tau=tau, kernel=False, max_elements=5000)
        assert _max_diff(fast.pos_freq, slow.pos_freq) <= 1e-12
        assert _max_diff(fast.sym_freq, slow.sym_freq) <= 1e-12
        assert _max_diff(fast.pos, slow.pos) <= 1e-13


@pytest.mark.parametrize("family", ["gemma2", "qwen2"])
def test_the_whole_head_loop_equals_tensor_code(family, monkeypatch):
    """The whole-head token swaps run through the compiled loop (swapped logits read from
    the held matrix; gemma2's softcapped) and give the tensor code's scores; block swaps,
    the scale-free cosine, the GPU's path and factors without the whole matrix do not."""
    from lens_possym.scores import exact

    calls = []
    original = exact.token_swap_matrix_scores
    monkeypatch.setattr(exact, "token_swap_matrix_scores",
                        lambda *a, **k: calls.append(1) or original(*a, **k))
    model = lp.tiny_model(family, dtype=torch.float64)
    for layer in (0, 1):
        inputs = capture_attention_inputs(model, PROMPT, layer)[layer]
        factors = cross_logit_factors(inputs, list(range(inputs.spec.n_heads)))
        assert (factors.spec.softcap is not None) == (family == "gemma2")
        swaps = swap_set("token", factors.query_position, factors.visible, exclude_bos=True)
        for tau in (1e-4, 1.0):
            fast = exact_swap_scores(factors, swaps, tau=tau, per_frequency=False)
            slow = exact_swap_scores(factors, swaps, tau=tau, per_frequency=False, kernel=False)
            assert _max_diff(fast.pos, slow.pos) <= 1e-12 and _max_diff(fast.sym, slow.sym) <= 1e-12
            assert 0.1 < float(fast.pos.abs().max()) <= 1 + 1e-12
    assert len(calls) == 4
    # keys that are not a range: the loop reads a gathered block of the matrix
    scattered = SwapSet("token", query_position=factors.query_position,
                        keys=swaps.keys[[0, 2, 3, 6, 7, 9, 12]])
    fast = exact_swap_scores(factors, scattered, per_frequency=False)
    slow = exact_swap_scores(factors, scattered, per_frequency=False, kernel=False)
    assert _max_diff(fast.pos, slow.pos) <= 1e-12 and _max_diff(fast.sym, slow.sym) <= 1e-12
    assert len(calls) == 5
    blocks = swap_set("block", factors.query_position, factors.visible, n_blocks=3)
    exact_swap_scores(factors, blocks, per_frequency=False)
    exact_swap_scores(factors, swaps, per_frequency=False, cosine="scale_free")
    exact_swap_scores(factors, swaps, per_frequency=False, fused=True)
    factors.max_matrix_elements = 10                      # the long-context path: not held
    assert not factors.holds_full
    held = exact_swap_scores(factors, scattered, per_frequency=False)
    assert len(calls) == 5
    assert _max_diff(held.pos, fast.pos) <= 1e-12


def test_chunking_does_not_change_the_result(models64):
    model = models64["gemma3"]
    big = swap_scores(model, PROMPT, swap="block", n_blocks=3)
    small = swap_scores(model, PROMPT, swap="block", n_blocks=3, max_elements=7)
    assert _max_diff(big.pos_freq, small.pos_freq) <= 1e-13
    assert _max_diff(big.sym, small.sym) <= 1e-13


@pytest.mark.slow
def test_exact_equals_rerun_on_a_real_model_layer():
    """gemma-3-270m in float64, a global layer (base 1e6) and a local one, every frequency."""
    model = lp.load_model("gemma-3-270m", dtype=torch.float64)
    prompt = "Alice likes red. Bob likes blue. Carol likes green. What color does Bob like?"
    for swap in ("token", "block"):
        kwargs = dict(layers=[4, 5], swap=swap, n_blocks=4, tau=1e-3)
        exact = swap_scores(model, prompt, **kwargs)
        rerun = swap_scores(model, prompt, method="rerun", **kwargs)
        for name in ("pos", "sym", "pos_freq", "sym_freq"):
            diff = _max_diff(getattr(exact, name)[[4, 5]], getattr(rerun, name)[[4, 5]])
            assert diff <= TOL, (swap, name, diff)


def test_the_compiled_loops_exponential_is_accurate():
    import numpy as np

    from lens_possym.scores._kernel import _exp_neg_array

    g = np.concatenate([np.linspace(0, 40, 400_001), np.geomspace(1e-12, 1e-2, 1000)])
    assert np.abs(_exp_neg_array(g) / np.exp(-g) - 1).max() <= 5e-16
    beyond = _exp_neg_array(np.array([40.0, 41.0, 1e6, np.inf]))
    assert np.all(beyond == beyond[0]) and beyond[0] == pytest.approx(np.exp(-40.0), rel=1e-15)
    # the normaliser's factor: the same polynomial, capped at 700 (its table reaches 2^-1010)
    wide = np.linspace(0, 700, 700_001)
    assert np.abs(_exp_neg_array(wide, 700.0) / np.exp(-wide) - 1).max() <= 5e-16
    assert _exp_neg_array(np.array([800.0]), 700.0)[0] == pytest.approx(np.exp(-700.0), rel=1e-15)
