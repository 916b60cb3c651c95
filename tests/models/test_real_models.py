"""The two real RoPE LMs that ship as GGUF packages: offline load, greedy output, geometry,
and the decomposition adding up to the model's scores on every layer and head.

Slow (a cold cache converts the GGUF files once: about 80 s for gemma, 30 s for smollm2),
but part of CI. Sockets are disabled for the whole run, so loading is proven offline.
"""

from __future__ import annotations

import pytest
import torch

import lens_possym as lp

pytestmark = pytest.mark.slow

PROMPT = ("Alice likes red. Bob likes blue. Carol likes green. Dave likes pink. "
          "What color does Carol like? Carol likes")


@pytest.mark.parametrize("name", ["gemma-3-270m", "smollm2-135m"])
def test_greedy_continuation(name, request):
    model = request.getfixturevalue("gemma" if name.startswith("gemma") else "smollm2")
    prompt, expected = lp.models.KNOWN_MODELS[name].greedy_check
    text = model.generate(prompt, max_new_tokens=12, do_sample=False, verbose=False)
    assert text.startswith(expected), text


def test_gemma_geometry(gemma):
    specs = lp.rope_specs(gemma)
    assert len(specs) == 18
    full = [s.layer for s in specs if s.layer_type == "full_attention"]
    assert full == [5, 11, 17]
    for s in specs:
        assert (s.n_heads, s.n_kv_heads, s.d_head, s.n_freqs) == (4, 1, 256, 128)
        assert s.scale == pytest.approx(256 ** -0.5)
        assert s.window == (None if s.layer in full else 512)
        base = 1e6 if s.layer in full else 1e4
        assert s.angles[1].item() == pytest.approx(base ** (-2 / 256), rel=1e-6)
        assert s.qk_layout == "bhpd" and s.rot_hooks and s.scores_hook


def test_smollm2_geometry(smollm2):
    specs = lp.rope_specs(smollm2)
    assert len(specs) == 30
    s = specs[0]
    assert (s.n_heads, s.n_kv_heads, s.d_head, s.n_freqs, s.pairing) == (9, 3, 64, 32, "half")
    assert s.kv_head(8) == 2 and s.kv_head(3) == 1
    assert s.angles[1].item() == pytest.approx(1e5 ** (-2 / 64), rel=1e-6)


@pytest.mark.parametrize("fixture", ["gemma", "smollm2"])
def test_terms_add_up_on_every_layer_and_head(fixture, request):
    model = request.getfixturevalue(fixture)
    tokens = model.to_tokens(PROMPT)
    results = lp.frequency_logits_all(model, tokens, query_positions=None, check=False)
    names = [r.spec.scores_hook for r in results.values()]
    _, cache = model.run_with_cache(tokens, names_filter=names)
    worst = 0.0
    for layer, fl in results.items():
        reference = cache[fl.spec.scores_hook]
        err = float((fl.scores() - reference)[..., fl.mask].abs().max())
        worst = max(worst, err)
        assert err <= 1e-4, (fixture, layer, err)
    print(f"{fixture}: worst |Σ terms − hook_attn_scores| = {worst:.2e}")


def test_frequency_norms_real(gemma):
    norms = lp.frequency_norms(gemma, PROMPT)
    assert norms.q.shape == (18, 4, 128) and norms.k.shape == (18, 4, 128)
    assert torch.all(norms.q >= 0) and norms.q.isfinite().all()
    # one KV head: every query head reads the same keys
    assert torch.equal(norms.k[:, 0], norms.k[:, 3])


def test_prompt_longer_than_context_is_rejected(smollm2):
    from lens_possym.errors import InvalidSelectionError

    too_long = torch.zeros(1, smollm2.cfg.n_ctx + 1, dtype=torch.long)
    with pytest.raises(InvalidSelectionError, match="context"):
        lp.frequency_logits(smollm2, too_long, 0)
