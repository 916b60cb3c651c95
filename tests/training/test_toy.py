"""The toy model: hook names and shapes, its RoPE geometry, frequency gates, TL conventions."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import lens_possym as lp
from lens_possym.errors import InvalidSelectionError, ToyConfigError
from lens_possym.rope import rotate
from lens_possym.training.toy import ToyConfig, ToyTransformer, rope_schedule


def small(**kw) -> ToyTransformer:
    settings = dict(d_vocab=11, n_ctx=9, n_layers=2, n_heads=3, d_head=10, rotary_dim=8,
                    seed=1)
    settings.update(kw)
    return ToyTransformer(ToyConfig(**settings))


def tokens(model, batch=4, pos=None, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(model.cfg.d_vocab, (batch, pos or model.cfg.n_ctx), generator=gen)


# ---- configuration ------------------------------------------------------------------------


@pytest.mark.parametrize("kwargs, match", [
    (dict(d_vocab=0), "d_vocab"),
    (dict(n_heads=2.5), "n_heads"),
    (dict(rotary_dim=7), "rotary_dim must be even"),
    (dict(rotary_dim=12), "rotary_dim must be even"),
    (dict(angles=(0.1, 0.2), rotary_dim=6), "does not match 2 angles"),
    (dict(angles=()), "angles is empty"),
    (dict(angles=(0.1, float("nan"))), "finite"),
    (dict(embedding="sinusoid"), "embedding must be"),
    (dict(d_model=20), "one-hot embeddings need d_model"),
    (dict(embedding="learned"), "learned embeddings need a positive d_model"),
    (dict(d_mlp=0), "d_mlp"),
    (dict(attn_scale=0.0), "attn_scale"),
    (dict(rope_base=1.0), "rope_base"),
])
def test_bad_configs_are_refused(kwargs, match):
    settings = dict(d_vocab=11, n_ctx=9, d_head=10, rotary_dim=8)
    settings.update(kwargs)
    with pytest.raises(ToyConfigError, match=match):
        ToyConfig(**settings)


def test_standard_schedule_matches_hugging_face_inv_freq():
    base, n = 10000.0, 16
    hf = 1.0 / (base ** (torch.arange(0, 2 * n, 2, dtype=torch.int64).float() / (2 * n)))
    assert torch.equal(torch.tensor(rope_schedule(n, base), dtype=torch.float32), hf)
    model = small(d_head=34, rotary_dim=32)
    spec = lp.rope_specs(model)[0]
    assert torch.equal(spec.inv_freq, hf)
    assert spec.n_freqs == 17 and spec.angles[-1] == 0.0       # the tail is the last id
    assert torch.all(spec.angles[:15] > spec.angles[1:16])           # fastest first


def test_explicit_angles_including_zero():
    model = small(angles=(0.5, 0.0, 2.0), d_head=6, rotary_dim=None)
    spec = lp.rope_specs(model)[0]
    assert spec.rotary_dim == 6 and not spec.has_tail
    assert spec.angles.tolist() == pytest.approx([0.5, 0.0, 2.0])
    fl = lp.frequency_logits(model, tokens(model), 1, query_positions=None)
    assert fl.max_abs_error < 1e-5
    # a θ = 0 pair does not depend on position: its term is the plain dot product
    cache = model.run_with_cache(tokens(model))[1]
    q, k = cache["blocks.1.attn.hook_q"], cache["blocks.1.attn.hook_k"]
    dims = spec.dims_of(1)
    plain = torch.einsum("bqhd,bkhd->bhqk", q[..., dims], k[..., dims]) * spec.scale
    mask = fl.mask
    assert torch.allclose(fl.terms[..., 1][..., mask], plain[..., mask], atol=1e-6)


def test_config_round_trips_through_dict():
    cfg = ToyConfig(d_vocab=7, n_ctx=5, angles=(0.3, 0.0), d_head=6, d_mlp=8, seed=3)
    assert ToyConfig.from_dict(cfg.to_dict()) == cfg


# ---- hooks, shapes, conventions -------------------------------------------------------------


def test_hook_names_and_shapes_match_the_bridge():
    model = small(d_mlp=12)
    B, n = 4, 7
    logits, cache = model.run_with_cache(tokens(model, B, n))
    cfg = model.cfg
    assert logits.shape == (B, n, cfg.d_vocab)
    for L in range(cfg.n_layers):
        a = f"blocks.{L}.attn."
        for name in ("hook_q", "hook_k", "hook_v", "hook_rot_q", "hook_rot_k", "hook_z"):
            assert cache[a + name].shape == (B, n, cfg.n_heads, cfg.d_head), name
        for name in ("hook_attn_scores", "hook_pattern"):
            assert cache[a + name].shape == (B, cfg.n_heads, n, n), name
        assert cache[a + "hook_result"].shape == (B, n, cfg.n_heads, cfg.d_model)
        for name in ("hook_resid_pre", "hook_attn_out", "hook_resid_mid", "hook_mlp_out",
                     "hook_resid_post"):
            assert cache[f"blocks.{L}.{name}"].shape == (B, n, cfg.d_model), name
        assert cache[f"blocks.{L}.mlp.hook_post"].shape == (B, n, cfg.d_mlp)
        scores = cache[a + "hook_attn_scores"]
        future = torch.ones(n, n, dtype=torch.bool).triu(1)
        assert torch.isneginf(scores[..., future]).all()          # masked at -inf
        assert torch.isfinite(scores[..., ~future]).all()
        assert torch.allclose(cache[a + "hook_pattern"], torch.softmax(scores, -1))
    assert cache["hook_embed"].shape == (B, n, cfg.d_model)


def test_rotation_hooks_equal_lens_possym_rotate_exactly():
    model = small()
    cache = model.run_with_cache(tokens(model))[1]
    for L, spec in enumerate(lp.rope_specs(model)):
        for side in ("q", "k"):
            un = cache[f"blocks.{L}.attn.hook_{side}"]
            ours = rotate(un, torch.arange(un.shape[1]), spec)
            assert torch.equal(ours, cache[f"blocks.{L}.attn.hook_rot_{side}"])


def test_rope_specs_describe_the_toy():
    model = small(attn_scale=0.25)
    specs = lp.rope_specs(model)
    assert len(specs) == 2
    for L, spec in enumerate(specs):
        assert spec.q_hook == f"blocks.{L}.attn.hook_q" and spec.k_hook == f"blocks.{L}.attn.hook_k"
        assert spec.scores_hook == f"blocks.{L}.attn.hook_attn_scores"
        assert spec.pattern_hook == f"blocks.{L}.attn.hook_pattern"
        assert spec.qk_layout == "bphd" and spec.rot_hooks and spec.family == "toy"
        assert spec.inv_freq.dtype == torch.float32 and spec.rotary_dim == 8
        assert spec.scale == 0.25 and spec.n_kv_heads == spec.n_heads == 3


def test_frequency_terms_add_up_to_the_model_scores_in_every_layer():
    model = small(d_mlp=6)
    results = lp.frequency_logits_all(model, tokens(model, 3), query_positions=None)
    for fl in results.values():
        assert fl.checked_against == "scores" and fl.max_abs_error < 1e-5


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    angles=st.lists(st.one_of(st.just(0.0), st.floats(1e-4, 3.0)), min_size=1, max_size=4),
    tail=st.integers(0, 3),
    gate=st.lists(st.booleans(), min_size=5, max_size=5),
    seed=st.integers(0, 2**16),
)
def test_frequency_terms_add_up_under_any_angles_and_gate(angles, tail, gate, seed):
    model = ToyTransformer(ToyConfig(d_vocab=9, n_ctx=8, n_heads=2, angles=tuple(angles),
                                     d_head=2 * len(angles) + tail, seed=seed))
    keep = [f for f in range(model.cfg.n_freqs) if gate[f]] or [0]
    model.set_frequencies(keep, head=1)
    fl = lp.frequency_logits(model, tokens(model, 2, seed=seed), 0, query_positions=None)
    assert fl.max_abs_error < 1e-5
    off = [f for f in range(model.cfg.n_freqs) if f not in keep]
    assert torch.all(fl.terms[:, 1, ..., off] == 0)                 # gated-off: no term at all


def test_stop_at_layer_returns_the_residual_before_that_block():
    model = small()
    t = tokens(model)
    _, cache = model.run_with_cache(t)
    out = model(t, stop_at_layer=1)
    assert torch.equal(out, cache["blocks.1.hook_resid_pre"])
    assert torch.equal(model(t, stop_at_layer=0), cache["blocks.0.hook_resid_pre"])
    assert model(t, return_type=None) is None


def test_a_larger_batch_from_resid_pre_flows_through():
    """The scores module swaps rows of a layer input and re-runs the block on B copies."""
    model = small()
    t = tokens(model, 2)
    clean = model.run_with_cache(t)[1]["blocks.1.hook_resid_pre"]
    copies = torch.stack([clean, clean.flip(1), clean * 0.5]).reshape(6, *clean.shape[1:])

    def widen(x, hook):
        return copies

    out = model.run_with_hooks(t, fwd_hooks=[("blocks.1.hook_resid_pre", widen)])
    assert out.shape == (6, t.shape[1], model.cfg.d_vocab)
    block = model.blocks[1]
    expected = block(copies, model.gate_dims(1)) @ model.W_U
    assert torch.allclose(out, expected, atol=1e-6)


def test_hooks_are_removed_when_user_code_raises():
    model = small()

    def boom(x, hook):
        raise RuntimeError("user hook failed")

    with pytest.raises(RuntimeError, match="user hook failed"):
        model.run_with_hooks(tokens(model), fwd_hooks=[("blocks.0.attn.hook_q", boom)])
    assert sum(len(h._forward_hooks) for h in model.hook_dict.values()) == 0


# ---- gates -----------------------------------------------------------------------------------


def test_a_gated_off_frequency_has_no_effect_on_logits():
    model = small(d_head=8, rotary_dim=8, n_layers=1, n_heads=2)
    t = tokens(model)
    model.set_frequencies([1, 3], head=0)
    before = model(t)
    spec = lp.rope_specs(model)[0]
    with torch.no_grad():                                # scramble a gated-off pair of head 0
        for f in (0, 2):
            model.blocks[0].attn.W_Q[0][:, spec.dims_of(f)] += 5.0
            model.blocks[0].attn.W_K[0][:, spec.dims_of(f)] -= 3.0
    assert torch.equal(model(t), before)
    with torch.no_grad():                                # ... while an open one matters
        model.blocks[0].attn.W_Q[0][:, spec.dims_of(1)] += 5.0
    assert not torch.allclose(model(t), before)


def test_gating_equals_zeroing_those_query_and_key_weights():
    gated = small(n_layers=1)
    gated.set_frequencies([2])
    zeroed = small(n_layers=1)
    spec = lp.rope_specs(zeroed)[0]
    with torch.no_grad():
        for f in range(zeroed.cfg.n_freqs):
            if f != 2:
                zeroed.blocks[0].attn.W_Q[..., spec.dims_of(f)] = 0
                zeroed.blocks[0].attn.W_K[..., spec.dims_of(f)] = 0
    t = tokens(gated)
    assert torch.allclose(gated(t), zeroed(t), atol=1e-6)


def test_set_frequencies_scopes_and_errors():
    model = small()
    model.set_frequencies([0], layer=1, head=2)
    gate = model.freq_gate
    assert gate[1, 2].tolist() == [1, 0, 0, 0, 0]
    assert gate[0].eq(1).all() and gate[1, :2].eq(1).all()
    model.set_frequencies(None)
    assert gate.eq(1).all()
    model.set_frequencies(-1)                               # negative ids count from the end
    assert gate[0, 0].tolist() == [0, 0, 0, 0, 1]
    with pytest.raises(InvalidSelectionError, match="out of range"):
        model.set_frequencies([5])
    with pytest.raises(InvalidSelectionError, match="layer 2 out of range"):
        model.set_frequencies([0], layer=2)
    with pytest.raises(InvalidSelectionError, match="head 3 out of range"):
        model.set_frequencies([0], head=3)


def test_gate_survives_state_dict_round_trip():
    a = small()
    a.set_frequencies([1, 4])
    b = small(seed=9)
    b.load_state_dict(a.state_dict())
    t = tokens(a)
    assert torch.equal(a(t), b(t)) and torch.equal(a.freq_gate, b.freq_gate)


# ---- embeddings, MLP, seeds, bad input -------------------------------------------------------


def test_learned_embeddings_and_mlp_run_and_decompose():
    model = small(embedding="learned", d_model=16, d_mlp=20)
    assert model.W_E.requires_grad and model.cfg.d_model == 16
    fl = lp.frequency_logits_all(model, tokens(model), query_positions=None)
    assert all(r.max_abs_error < 1e-5 for r in fl.values())
    norms = lp.frequency_norms(model, tokens(model))
    assert norms.q.shape == (2, 3, 5)


def test_one_hot_embedding_is_the_identity():
    model = small()
    t = tokens(model)
    emb = model.run_with_cache(t)[1]["hook_embed"]
    assert torch.equal(emb, torch.nn.functional.one_hot(t, model.cfg.d_vocab).float())
    assert "W_E" not in dict(model.named_parameters())


def test_weights_are_seeded_and_leave_the_global_rng_alone():
    state = torch.get_rng_state()
    a, b, c = small(seed=5), small(seed=5), small(seed=6)
    assert torch.equal(state, torch.get_rng_state())
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))
    assert not torch.equal(a.W_U, c.W_U)
    std = a.blocks[0].attn.W_Q.std().item()
    assert std == pytest.approx(1 / math.sqrt(a.cfg.d_model), rel=0.25)


def test_bad_inputs_are_refused():
    model = small()
    with pytest.raises(InvalidSelectionError, match="n_ctx"):
        model(torch.zeros(1, 10, dtype=torch.long))
    with pytest.raises(InvalidSelectionError, match="integer ids"):
        model(torch.zeros(1, 3))
    with pytest.raises(InvalidSelectionError, match="return_type"):
        model(torch.zeros(1, 3, dtype=torch.long), return_type="loss")
    with pytest.raises(ToyConfigError, match="ToyConfig"):
        ToyTransformer({"d_vocab": 3})
    assert model(torch.zeros(3, dtype=torch.long)).shape == (1, 3, 11)   # [pos] is one prompt


def test_toy_works_with_capture_and_norms():
    model = small()
    got = lp.capture_attention_inputs(model, tokens(model), layers=[0])
    assert got[0].q.shape == (4, 1, 3, 10) and got[0].k.shape == (4, 9, 3, 10)
    with pytest.raises(InvalidSelectionError):
        lp.frequency_logits(model, tokens(model, pos=9), layer=2)


# ---- the scores module on the toy ---------------------------------------------------------------


def test_swap_scores_exact_equals_rerun_on_the_toy():
    """The re-run path feeds swapped copies through hook_resid_pre (a larger batch).

    Moderate weights: with saturated attention (weights below float32's range) the float32
    re-run and the float64 closed form legitimately part ways.
    """
    model = small(n_layers=2, init_std=0.6)
    t = tokens(model, 3)
    exact = lp.swap_scores(model, t, exclude_bos=False, method="exact")
    rerun = lp.swap_scores(model, t, exclude_bos=False, method="rerun")
    assert torch.allclose(exact.pos, rerun.pos, atol=1e-5)
    assert torch.allclose(exact.sym, rerun.sym, atol=1e-5)


def test_swap_scores_invariants_on_the_toy():
    """Definition 2: a NoPE head is exactly symbolic; equal keys make a head exactly positional."""
    model = small(n_layers=1, init_std=2.0)           # peaked attention (uniform scores ~1 on both)
    t = tokens(model, 6)
    model.set_frequencies([4])                         # the θ = 0 tail only
    nope = lp.swap_scores(model, t, exclude_bos=False)
    assert torch.allclose(nope.sym, torch.ones_like(nope.sym), atol=1e-6)
    assert (nope.pos < 0.95).all()
    model.set_frequencies([0])
    with torch.no_grad():
        w = model.blocks[0].attn.W_K
        w[:] = w[:, :1]                                # every token has the same key
    same = lp.swap_scores(model, t, exclude_bos=False)
    assert torch.allclose(same.pos, torch.ones_like(same.pos), atol=1e-6)
    assert (same.sym < 0.95).all()
