"""Head and frequency patching: identities, full restoration, exact pair replacement, TL setters."""

from __future__ import annotations

import pytest
import torch
from transformer_lens import patching as tl_patching

import lens_possym as lp
from lens_possym.errors import InvalidSelectionError
from lens_possym.interventions import (
    ablate_frequencies,
    frequency_index_df,
    patch_frequencies_hooks,
    frequency_patch_setter,
    patch_frequencies,
    patch_heads,
    permute_content,
    qk_activation_name,
    swap_permutation,
)
from tests.helpers import PROMPT, hooks_attached

OTHER = "Carol likes pink . Dave likes gold . Emma likes black . What color does Dave like ?"


def test_patching_a_head_from_the_same_prompt_is_the_identity(tiny):
    tokens = tiny.to_tokens(PROMPT)
    clean, cache = tiny.run_with_cache(tokens)
    with patch_heads(tiny, cache, "0.*,1.1"):
        assert torch.equal(tiny(tokens), clean)
    with patch_frequencies(tiny, cache, "0.*,1.1", side="qk"):
        assert torch.equal(tiny(tokens), clean)
    with patch_heads(tiny, tokens, "1.2", positions=[-1]):  # the source given as tokens
        assert torch.equal(tiny(tokens), clean)
    assert hooks_attached(tiny) == 0


def test_patching_every_head_of_a_corrupted_layer_restores_the_clean_run(tiny):
    """Corrupt layer 1's attention (move key content), then patch all of its heads from the
    clean run: everything downstream is the clean run again, bit for bit."""
    tokens = tiny.to_tokens(PROMPT)
    clean, cache = tiny.run_with_cache(tokens, names_filter=lambda n: n.endswith("hook_z"))
    perm = swap_permutation(tokens.shape[1], 1, 4)
    with permute_content(tiny, 1, perm, what="kv"):
        corrupted = tiny(tokens)
        with patch_heads(tiny, cache, "1.*"):
            restored = tiny(tokens)
        with patch_heads(tiny, cache, "1.0"):
            partial = tiny(tokens)
    assert not torch.allclose(corrupted, clean, atol=1e-4)
    assert torch.equal(restored, clean)
    assert not torch.equal(partial, clean)


def test_patching_every_frequency_reproduces_the_source_pattern(tiny):
    tokens, source = tiny.to_tokens(PROMPT), tiny.to_tokens(OTHER)
    assert tokens.shape == source.shape
    spec = lp.rope_spec(tiny, 1)
    _, src = tiny.run_with_cache(source, names_filter=[spec.q_hook, spec.k_hook, spec.pattern_hook])
    with patch_frequencies(tiny, src, "1.*", side="qk"):
        _, run = tiny.run_with_cache(tokens, names_filter=[spec.pattern_hook])
    assert torch.equal(run[spec.pattern_hook], src[spec.pattern_hook])


def test_patching_restores_an_ablated_frequency(tiny):
    """Ablate pairs, then patch exactly those pairs back from the clean run (hooks run in the
    order they were attached): the clean run, bit for bit."""
    tokens = tiny.to_tokens(PROMPT)
    clean, cache = tiny.run_with_cache(tokens)
    with ablate_frequencies(tiny, {"1.0": [0, 2], "1.3": "low"}):
        ablated = tiny(tokens)
        with patch_frequencies(tiny, cache, {"1.0": [0, 2], "1.3": "low"}):
            restored = tiny(tokens)
    assert not torch.equal(ablated, clean)
    assert torch.equal(restored, clean)


def test_one_pair_is_replaced_and_nothing_else(tiny_by_family):
    model = tiny_by_family["gemma3"]
    spec = lp.rope_spec(model, 1)
    tokens, source = model.to_tokens(PROMPT), model.to_tokens(OTHER)
    _, src = model.run_with_cache(source, names_filter=[spec.q_hook])
    _, run = model.run_with_cache(tokens, names_filter=[spec.q_hook])
    seen = {}
    with patch_frequencies(model, src, {"1.2": [5]}):
        model.run_with_hooks(tokens, fwd_hooks=[(spec.q_hook, lambda t, hook: seen.setdefault("q", t))])
    dims = spec.dims_of(5)
    got, mine, theirs = (t.transpose(1, 2) for t in (seen["q"], run[spec.q_hook], src[spec.q_hook]))
    assert torch.equal(got[:, :, 2, dims], theirs[:, :, 2, dims])
    keep = torch.ones(spec.d_head, dtype=torch.bool)
    keep[dims] = False
    assert torch.equal(got[:, :, 2][..., keep], mine[:, :, 2][..., keep])
    assert torch.equal(got[:, :, [0, 1, 3]], mine[:, :, [0, 1, 3]])


@pytest.mark.parametrize("family", ["llama", "gemma3"])
def test_key_patch_for_one_head_of_a_group_leaves_the_others(tiny_by_family, family):
    model = tiny_by_family[family]
    spec = lp.rope_spec(model, 1)
    tokens, source = model.to_tokens(PROMPT), model.to_tokens(OTHER)
    z = "blocks.1.attn.hook_z"
    _, clean = model.run_with_cache(tokens, names_filter=[z])
    hooks = patch_frequencies_hooks(model, source, {"1.1": "all"}, side="k")
    with model.hooks(fwd_hooks=hooks):
        _, run = model.run_with_cache(tokens, names_filter=[z])
    others = [h for h in range(spec.n_heads) if h != 1]
    assert torch.equal(run[z][:, :, others], clean[z][:, :, others])
    assert not torch.allclose(run[z][:, :, 1], clean[z][:, :, 1], atol=1e-4)


@pytest.mark.parametrize("family", ["llama", "gemma3"])
def test_the_setter_works_with_transformer_lens_patching(tiny_by_family, family):
    """generic_activation_patch with our setter gives what our own hooks give."""
    model = tiny_by_family[family]
    clean_tokens, corrupted = model.to_tokens(PROMPT), model.to_tokens(OTHER)
    name = qk_activation_name(model, "q")
    assert name == ("rot_q" if family == "gemma3" else "q")
    _, clean_cache = model.run_with_cache(clean_tokens)

    def metric(logits):
        return logits[:, -1].log_softmax(-1)[:, 7].mean()

    index_df = frequency_index_df(model, layers=[1], heads=[0, 3], freqs=[0, 5])
    assert len(index_df) == 4 and list(index_df.columns) == ["layer", "head_index", "freq"]
    result = tl_patching.generic_activation_patch(
        model, corrupted, clean_cache, metric, frequency_patch_setter(model), name,
        index_df=index_df)
    for i, (layer, head, freq) in enumerate(index_df.itertuples(index=False)):
        with patch_frequencies(model, clean_cache, {(layer, head): [freq]}):
            ours = metric(model(corrupted))
        assert float(result[i]) == pytest.approx(float(ours.detach()), abs=1e-5)


def test_bad_sources_and_heads(tiny_by_family):
    model = tiny_by_family["llama"]
    tokens = model.to_tokens(PROMPT)
    _, cache = model.run_with_cache(tokens, names_filter=["blocks.1.attn.hook_z"])
    with pytest.raises(InvalidSelectionError, match="unknown head 1.4"):
        with patch_heads(model, cache, "1.4"):
            pass
    with pytest.raises(InvalidSelectionError, match="has no 'blocks.0.attn.hook_z'"):
        with patch_heads(model, cache, "0.1"):
            pass
    with pytest.raises(InvalidSelectionError, match="same positions"):
        with patch_heads(model, cache, "1.1"):
            model(model.to_tokens("Alice likes red"))
    with pytest.raises(InvalidSelectionError, match="unknown side 'v'"):
        patch_frequencies_hooks(model, cache, "1.1", side="v")
    assert hooks_attached(model) == 0
