"""Analyses accept a TransformerLens ActivationCache wherever they accept a prompt."""

from __future__ import annotations

import pytest
import torch

import lens_possym as lp
from lens_possym._inputs import as_tokens
from lens_possym.capture import cache_hook_names, capture_attention_inputs
from lens_possym.decompose import decompose_inputs
from lens_possym.errors import InvalidSelectionError

PROMPTS = ["Alice likes red . Bob likes blue . What", "Carol likes green . Dave likes gold . What"]


@pytest.fixture(scope="module")
def cached_runs(tiny_by_family):
    out = {}
    for family, model in tiny_by_family.items():
        tokens = as_tokens(model, PROMPTS)
        _, cache = model.run_with_cache(tokens)
        out[family] = (model, tokens, cache)
    return out


@pytest.mark.parametrize("family", lp.models.TINY_FAMILIES)
@pytest.mark.parametrize("query_positions", [-1, None, [2, 5]])
def test_frequency_logits_from_a_cache_equal_those_from_tokens(cached_runs, family,
                                                               query_positions):
    model, tokens, cache = cached_runs[family]
    layer = model.cfg.n_layers - 1
    from_tokens = lp.frequency_logits(model, tokens, layer, query_positions=query_positions,
                                      relative=True)
    from_cache = lp.frequency_logits(model, cache, layer, query_positions=query_positions,
                                     relative=True)
    assert torch.equal(from_cache.terms, from_tokens.terms)
    assert torch.equal(from_cache.cos_terms, from_tokens.cos_terms)
    assert torch.equal(from_cache.query_positions, from_tokens.query_positions)
    assert from_cache.checked_against == from_tokens.checked_against is not None
    assert from_cache.max_abs_error == from_tokens.max_abs_error


@pytest.mark.parametrize("family", lp.models.TINY_FAMILIES)
def test_all_layers_norms_and_decompose_inputs_from_a_cache(cached_runs, family):
    model, tokens, cache = cached_runs[family]
    a, b = lp.frequency_logits_all(model, cache), lp.frequency_logits_all(model, tokens)
    assert a.keys() == b.keys()
    assert all(torch.equal(a[layer].terms, b[layer].terms) for layer in a)
    na, nb = lp.frequency_norms(model, cache, per_token=True), lp.frequency_norms(model, tokens,
                                                                                  per_token=True)
    assert torch.equal(na.q_tokens, nb.q_tokens) and torch.equal(na.k_tokens, nb.k_tokens)
    captured = capture_attention_inputs(model, cache, 0)[0]
    assert torch.equal(decompose_inputs(captured).terms, b[0].terms)


def test_a_filtered_cache_is_enough_and_a_lacking_one_is_a_clear_error(tiny_by_family):
    model = tiny_by_family["llama"]
    tokens = as_tokens(model, PROMPTS)
    _, small = model.run_with_cache(tokens, names_filter=cache_hook_names(model, 1))
    expected = lp.frequency_logits(model, tokens, 1)
    assert torch.equal(lp.frequency_logits(model, small, 1).terms, expected.terms)
    _, qk_only = model.run_with_cache(
        tokens, names_filter=cache_hook_names(model, 1, model_scores=False))
    unchecked = lp.frequency_logits(model, qk_only, 1)  # nothing to check against: no error
    assert unchecked.checked_against is None and torch.equal(unchecked.terms, expected.terms)
    with pytest.raises(InvalidSelectionError, match=r"lacks blocks\.0\.attn\.hook_q, "
                       r"blocks\.0\.attn\.hook_k.*cache_hook_names"):
        lp.frequency_logits(model, small, 0)
    with pytest.raises(InvalidSelectionError, match="fwd_hooks cannot act on an activation"):
        capture_attention_inputs(model, small, 1, fwd_hooks=[("blocks.0.hook_resid_pre",
                                                               lambda t, hook: t)])
    with pytest.raises(InvalidSelectionError, match="not an activation cache"):
        as_tokens(model, small)
    with pytest.raises(InvalidSelectionError, match="out of range"):
        lp.frequency_logits(model, small, 1, query_positions=99)


@pytest.mark.parametrize("family", lp.models.TINY_FAMILIES)
def test_swap_scores_from_a_cache_equal_those_from_tokens(cached_runs, family):
    model, tokens, cache = cached_runs[family]
    from_tokens = lp.swap_scores(model, tokens, per_frequency=True)
    from_cache = lp.swap_scores(model, cache, per_frequency=True)
    for name in ("pos", "sym", "pos_freq", "sym_freq"):
        assert torch.equal(getattr(from_cache, name), getattr(from_tokens, name)), name
    assert from_cache.config == from_tokens.config  # BOS found from hook_embed
    assert from_cache.n_tokens == from_tokens.n_tokens


def test_swap_scores_from_a_filtered_cache_and_what_it_refuses(tiny_by_family):
    model = tiny_by_family["llama"]
    tokens = as_tokens(model, PROMPTS)
    _, small = model.run_with_cache(tokens, names_filter=cache_hook_names(model, 1))
    expected = lp.swap_scores(model, tokens, layers=1, exclude_bos=True)
    got = lp.swap_scores(model, small, layers=1, exclude_bos=True)
    assert torch.equal(got.sym[1], expected.sym[1]) and torch.isnan(got.sym[0]).all()
    with pytest.raises(InvalidSelectionError, match="cache hook_embed as well"):
        lp.swap_scores(model, small, layers=1)
    with pytest.raises(InvalidSelectionError, match="method='rerun' runs the model"):
        lp.swap_scores(model, small, layers=1, method="rerun", exclude_bos=True)
    with pytest.raises(InvalidSelectionError, match=r"lacks blocks\.0\.attn\.hook_q"):
        lp.swap_scores(model, small, layers=0, exclude_bos=True)
