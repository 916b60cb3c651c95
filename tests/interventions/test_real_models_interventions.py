"""Interventions on gemma-3-270m (4 query heads on one KV head, q/k-norm, two RoPE bases)."""

from __future__ import annotations

import pytest
import torch

import lens_possym as lp
from lens_possym.decompose import apply_softcap, decompose_inputs
from lens_possym.rope import to_pairs
from tests.helpers import hooks_attached

PROMPT = "Alice likes red. Bob likes blue. Carol likes green. What color does Bob like? Bob likes"


@pytest.mark.slow
@pytest.mark.parametrize("layer", [4, 11])  # a sliding (base 1e4) and a global (1e6) layer
def test_unrotate_on_gemma_is_exact_and_gqa_safe(gemma, layer):
    model = gemma
    tokens = model.to_tokens(PROMPT)
    spec = lp.rope_spec(model, layer)
    assert spec.n_kv_heads == 1 and spec.n_heads == 4
    freqs = list(range(40, 128))
    inputs = lp.capture_attention_inputs(model, tokens, layer, query_positions=None)[layer]
    fl = decompose_inputs(inputs, dtype=torch.float64)
    q_pairs, _ = to_pairs(inputs.q.double(), spec)
    k_pairs, _ = to_pairs(inputs.k_for_heads().double(), spec)
    terms = fl.terms.clone()
    terms[..., freqs] = (torch.einsum("bqhfc,bkhfc->bhqkf", q_pairs, k_pairs) * spec.scale)[..., freqs]
    direct = apply_softcap(terms.sum(-1), spec.softcap)
    with lp.ablate_frequencies(model, f"{layer}.*", "unrotate", freqs=freqs):
        _, cache = model.run_with_cache(tokens, names_filter=[spec.scores_hook])
    scale = float(direct[..., fl.mask].abs().max())
    err = float((cache[spec.scores_hook].double() - direct)[..., fl.mask].abs().max())
    assert err <= 1e-6 * max(1.0, scale)  # float32 rounding (measured ~1e-7 relative)

    z = f"blocks.{layer}.attn.hook_z"
    clean_logits, clean = model.run_with_cache(tokens, names_filter=[z])
    with lp.ablate_frequencies(model, {(layer, 1): freqs}, "unrotate"):
        logits, edited = model.run_with_cache(tokens, names_filter=[z])
    assert torch.equal(edited[z][:, :, [0, 2, 3]], clean[z][:, :, [0, 2, 3]])
    assert not torch.equal(edited[z][:, :, 1], clean[z][:, :, 1])
    with pytest.raises(lp.errors.InvalidSelectionError, match="no frequency ids"):
        with lp.ablate_frequencies(model, {(layer, 1): []}, "unrotate"):
            pass
    assert hooks_attached(model) == 0
