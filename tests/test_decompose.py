"""Per-frequency decomposition: the terms add up to the model, and the invariants hold."""

from __future__ import annotations

import pytest
import torch

import lens_possym as lp
from lens_possym.decompose import apply_softcap, decompose_inputs
from lens_possym.errors import DecompositionMismatchError, InvalidSelectionError
from tests.helpers import hooks_attached


def _model_rows(model, tokens, spec):
    """The model's own score (or pattern) rows for one layer, read independently."""
    name = spec.scores_hook or spec.pattern_hook
    _, cache = model.run_with_cache(tokens, names_filter=[name])
    return cache[name]


def test_terms_add_up_to_model_scores_every_layer_and_head(tiny, prompt):
    """Σ_f terms (softcapped) equals hook_attn_scores at every unmasked entry (≤ 1e-4).

    For GPT-J, which has no pre-softmax hook, softmax of the sum equals hook_pattern.
    """
    tokens = tiny.to_tokens(prompt)
    results = lp.frequency_logits_all(tiny, tokens, query_positions=None, check=False)
    for layer, fl in results.items():
        assert fl.terms.shape == (1, fl.spec.n_heads, tokens.shape[1], tokens.shape[1],
                                  fl.spec.n_freqs)
        reference = _model_rows(tiny, tokens, fl.spec)
        if fl.spec.scores_hook:
            ours = apply_softcap(fl.terms.sum(-1), fl.spec.softcap)
            err = (ours - reference)[..., fl.mask].abs().max()
        else:
            err = (fl.pattern() - reference).abs().max()
        assert err <= 1e-4, (tiny.cfg.model_name, layer, float(err))
        assert fl.max_abs_error == pytest.approx(float(err), abs=1e-7)


def test_relative_form_equals_absolute_form(tiny, prompt):
    for fl in lp.frequency_logits_all(tiny, prompt, query_positions=None, relative=True).values():
        assert torch.allclose(fl.cos_terms + fl.sin_terms, fl.terms, atol=1e-5)
        # at zero offset (the diagonal) the rotation part vanishes
        diag = torch.diagonal(fl.sin_terms, dim1=2, dim2=3)
        assert diag.abs().max() <= 1e-6
        if fl.spec.has_tail:
            assert torch.all(fl.sin_terms[..., -1] == 0)


def test_default_is_last_query_row_only(tiny, prompt):
    tokens = tiny.to_tokens(prompt)
    fl = lp.frequency_logits(tiny, tokens, 0)
    n = tokens.shape[1]
    assert fl.terms.shape == (1, fl.spec.n_heads, 1, n, fl.spec.n_freqs)
    assert fl.query_positions.tolist() == [n - 1]
    full = lp.frequency_logits(tiny, tokens, 0, query_positions=None)
    assert torch.allclose(full.terms[:, :, -1:], fl.terms, atol=1e-6)


def test_heads_and_positions_select_the_right_slices(tiny_by_family, prompt):
    model = tiny_by_family["llama"]
    full = lp.frequency_logits(model, prompt, 1, query_positions=None)
    part = lp.frequency_logits(model, prompt, 1, heads=[3, 1], query_positions=[2, -1])
    assert part.heads == [3, 1]
    assert torch.allclose(part.terms, full.terms[:, [3, 1]][:, :, [2, -1]], atol=1e-6)


def test_sliding_window_mask(tiny_by_family, prompt):
    fl = lp.frequency_logits(tiny_by_family["gemma3"], prompt, 0, query_positions=[8])
    assert fl.mask[0].nonzero().flatten().tolist() == [5, 6, 7, 8]  # window 4
    pattern = fl.pattern()
    assert torch.all(pattern[..., :5] == 0) and torch.all(pattern[..., 9:] == 0)


def test_batched_prompts(tiny_by_family):
    model = tiny_by_family["qwen2"]
    prompts = ["Alice likes red . Bob likes blue", "Carol likes green . Dave likes pink"]
    batched = lp.frequency_logits(model, prompts, 1)
    for i, p in enumerate(prompts):
        single = lp.frequency_logits(model, p, 1)
        assert torch.allclose(batched.terms[i : i + 1], single.terms, atol=1e-6)


# ---- invariants -------------------------------------------------------------------------

def _equal_keys_hook(spec):
    """Replace every key by the key at position 0: the head can only see position."""
    def hook(k, hook):
        if spec.qk_layout == "bhpd":
            return k[:, :, :1].expand_as(k).clone()
        return k[:, :1].expand_as(k).clone()
    return hook


@pytest.mark.parametrize("family", lp.models.TINY_FAMILIES)
def test_equal_keys_make_a_head_positional(tiny_by_family, family):
    """All keys equal ⇒ the logit depends only on position (moving content changes nothing)."""
    model = tiny_by_family[family]
    spec = lp.rope_spec(model, 0)
    tokens = model.to_tokens("Alice likes red . Bob likes blue . Carol likes green")
    shuffled = tokens.clone()
    perm = torch.randperm(tokens.shape[1] - 2, generator=torch.Generator().manual_seed(0)) + 1
    shuffled[0, 1:-1] = tokens[0, perm]  # keep BOS and the query token in place
    assert not torch.equal(tokens, shuffled)
    with model.hooks(fwd_hooks=[(spec.k_hook, _equal_keys_hook(spec))]):
        a = lp.frequency_logits(model, tokens, 0)
        b = lp.frequency_logits(model, shuffled, 0)
    # layer 0's query at the last row depends only on the (unchanged) last token
    assert torch.allclose(a.terms, b.terms, atol=1e-6)
    assert a.max_abs_error <= 1e-4 and b.max_abs_error <= 1e-4
    assert hooks_attached(model) == 0


def test_tail_only_head_is_symbolic(tiny_by_family):
    """With the rotated dims of q zeroed, only the θ=0 tail remains: logits follow content.

    Symbolic (Definition 2): moving a token to another position moves its logit with it.
    """
    model = tiny_by_family["neox"]
    spec = lp.rope_spec(model, 0)

    def tail_only(q, hook):
        q = q.clone()
        q[..., : spec.rotary_dim] = 0
        return q

    tokens = model.to_tokens("Alice likes red . Bob likes blue . Carol likes green")
    n = tokens.shape[1]
    perm = torch.arange(n)
    perm[1:-1] = torch.randperm(n - 2, generator=torch.Generator().manual_seed(1)) + 1
    moved = tokens[:, perm]  # position j now holds the token from position perm[j]
    with model.hooks(fwd_hooks=[(spec.q_hook, tail_only)]):
        a = lp.frequency_logits(model, tokens, 0)
        b = lp.frequency_logits(model, moved, 0)
    assert torch.all(a.terms[..., : spec.n_rot] == 0)  # no rotated component left
    assert torch.allclose(b.scores()[..., :], a.scores()[..., perm], atol=1e-6)
    assert a.max_abs_error <= 1e-4


def test_wrong_geometry_is_caught(tiny_by_family, prompt):
    model = tiny_by_family["llama"]
    inputs = lp.capture_attention_inputs(model, prompt, 0, query_positions=None)[0]
    inputs.spec = inputs.spec.with_(pairing="adjacent")
    with pytest.raises(DecompositionMismatchError, match="do not add up to the model's scores"):
        decompose_inputs(inputs).check()


@pytest.fixture(scope="module")
def mistral_window():
    """Mistral with a window of 4 kept only in config.sliding_window (float64)."""
    return lp.tiny_model("mistral-window", dtype=torch.float64)


@pytest.mark.parametrize("change, cause", [
    (dict(window=None), "Likely cause: mask/window"),
    (dict(window=6), "Likely cause: mask/window"),
    ("angles", "Likely cause: angles"),
    (dict(pairing="adjacent"), "Likely cause: angles"),
    (dict(scale=0.5), "Likely cause: scale"),
])
def test_mismatch_names_what_disagrees(mistral_window, prompt, change, cause):
    """A wrong window, angle, pairing or scale is reported as such, with rows and size."""
    inputs = lp.capture_attention_inputs(mistral_window, prompt, 1, query_positions=None)[1]
    good = decompose_inputs(inputs)
    assert good.check() <= 1e-12
    if change == "angles":
        change = dict(inv_freq=inputs.spec.inv_freq * 1.01)
    inputs.spec = inputs.spec.with_(**change)
    with pytest.raises(DecompositionMismatchError) as caught:
        decompose_inputs(inputs).check()
    message = str(caught.value)
    assert cause in message and "layer 1" in message and "query row" in message
    if "window" in change:
        assert "reach back at most 4 positions" in message  # the model's window, seen
    else:
        assert "differ by up to" in message


def test_scale_cause_states_the_factor(mistral_window, prompt):
    inputs = lp.capture_attention_inputs(mistral_window, prompt, 0, query_positions=None)[0]
    inputs.spec = inputs.spec.with_(scale=inputs.spec.scale * 4)
    with pytest.raises(DecompositionMismatchError, match=r"0\.25 times the sum of the terms"):
        decompose_inputs(inputs).check()


def test_hooks_removed_even_when_the_forward_raises(tiny_by_family):
    model = tiny_by_family["llama"]
    bad = torch.tensor([[1, 5, 10_000]])  # id outside the vocabulary: the embedding raises
    with pytest.raises(Exception):
        lp.frequency_logits(model, bad, 0)
    assert hooks_attached(model) == 0


def test_bad_selections(tiny_by_family, prompt):
    model = tiny_by_family["llama"]
    with pytest.raises(InvalidSelectionError, match="head \\[9\\] out of range"):
        lp.frequency_logits(model, prompt, 0, heads=[9])
    with pytest.raises(InvalidSelectionError, match="query position \\[99\\] out of range"):
        lp.frequency_logits(model, prompt, 0, query_positions=99)
    with pytest.raises(InvalidSelectionError, match="empty"):
        lp.frequency_logits(model, "", 0)
    with pytest.raises(InvalidSelectionError, match="context is 256"):
        lp.frequency_logits(model, torch.ones(1, 300, dtype=torch.long), 0)
    with pytest.raises(InvalidSelectionError, match="different lengths"):
        lp.frequency_logits(model, ["Alice likes red", "Bob likes"], 0)


# ---- norms --------------------------------------------------------------------------------

def test_frequency_norms_match_pair_norms(tiny_by_family, prompt):
    model = tiny_by_family["gptj"]
    norms = lp.frequency_norms(model, prompt, per_token=True)
    n_layers = len(lp.rope_specs(model))
    spec = lp.rope_spec(model, 1)
    assert norms.q.shape == (n_layers, spec.n_heads, spec.n_freqs)
    inputs = lp.capture_attention_inputs(model, prompt, 1, query_positions=None)[1]
    f = 2  # adjacent pairing: dims 4 and 5
    manual = inputs.q[..., [4, 5]].norm(dim=-1).mean(dim=(0, 1))
    assert torch.allclose(norms.q[1, :, f], manual, atol=1e-6)
    tail = inputs.k[..., spec.rotary_dim:].norm(dim=-1).mean(dim=(0, 1))
    assert torch.allclose(norms.k[1, :, -1], tail, atol=1e-6)
    assert norms.q_tokens.shape[1:3] == inputs.q.shape[:2]


def test_logit_norms_ignore_masked_keys(tiny_by_family, prompt):
    fl = lp.frequency_logits(tiny_by_family["gemma3"], prompt, 0, query_positions=None)
    norms = fl.norms()
    visible = fl.terms.masked_fill(~fl.mask[..., None], 0)
    assert torch.allclose(norms, visible.pow(2).sum(-2).sqrt())
    assert norms.shape == fl.terms.shape[:3] + (fl.spec.n_freqs,)


def test_norms_of_layers_with_different_frequency_counts_are_refused():
    """SmolLM3's fourth layer is NoPE (one id): norms of all layers cannot share an axis."""
    model = lp.tiny_model("smollm3")
    with pytest.raises(InvalidSelectionError, match="different numbers of frequency ids"):
        lp.frequency_norms(model, "Alice likes red")
    assert lp.frequency_norms(model, "Alice likes red", [0, 1, 2]).q.shape == (3, 4, 8)
    assert lp.frequency_norms(model, "Alice likes red", 3).q.shape == (1, 4, 1)
