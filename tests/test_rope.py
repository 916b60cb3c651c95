"""RoPE geometry: what rope_specs reads, and that it matches what each model computes."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import lens_possym as lp
from lens_possym.decompose import decompose_inputs
from lens_possym.errors import (DecompositionMismatchError, InvalidSelectionError,
                                NotRopeModelError, UnsupportedModelError)
from lens_possym.rope import RopeSpec, cos_sin, from_pairs, heads_view, rotate, to_pairs

EXPECTED = {
    # family: (pairing, rotary_dim, d_head, has_tail, rot_hooks_fire, has_pre_softmax_hook)
    "llama": ("half", 16, 16, False, True, True),
    "qwen2": ("half", 16, 16, False, True, True),
    "gemma3": ("half", 16, 16, False, True, True),
    "neox": ("half", 8, 16, True, False, True),
    "gptj": ("adjacent", 8, 16, True, False, False),
}


def test_spec_fields_per_family(tiny_by_family):
    for family, model in tiny_by_family.items():
        pairing, rdim, d_head, tail, rot, scores = EXPECTED[family]
        for spec in lp.rope_specs(model):
            assert spec.pairing == pairing, family
            assert spec.rotary_dim == rdim and spec.d_head == d_head, family
            assert spec.has_tail == tail and spec.n_freqs == rdim // 2 + int(tail)
            assert spec.rot_hooks == rot, family
            assert (spec.scores_hook is not None) == scores, family
            # angles: base^(-2f/R), fastest first; gemma3's full layer uses base 1e6
            base = 1e6 if spec.layer_type == "full_attention" and family == "gemma3" else 1e4
            expected = base ** (-torch.arange(0, rdim, 2, dtype=torch.float64) / rdim)
            assert torch.allclose(spec.angles[: rdim // 2], expected, rtol=1e-6), family
            if tail:
                assert spec.angles[-1] == 0.0
            assert torch.all(spec.angles[:-1] >= spec.angles[1:]), "ids must run fast to slow"


def test_gemma3_tiny_local_global_geometry(tiny_by_family):
    specs = lp.rope_specs(tiny_by_family["gemma3"])
    assert [s.layer_type for s in specs] == ["sliding_attention", "sliding_attention", "full_attention"]
    assert [s.window for s in specs] == [4, 4, None]
    assert specs[0].angles[1] == pytest.approx(1e4 ** (-2 / 16), rel=1e-6)
    assert specs[2].angles[1] == pytest.approx(1e6 ** (-2 / 16), rel=1e-6)
    # scale from query_pre_attn_scalar (default 256), not 1/sqrt(d_head) = 1/4
    assert all(s.scale == pytest.approx(1 / 16) for s in specs)
    assert specs[0].q_hook.endswith("hook_q_normed") and specs[0].qk_layout == "bhpd"


def _run(model, names, tokens):
    store = {}

    def keep(name):
        def hook(t, hook):
            store[name] = t.detach().clone()
        return hook

    model.run_with_hooks(tokens, fwd_hooks=[(n, keep(n)) for n in names], return_type=None)
    return store


def test_tables_and_rotation_match_the_model(tiny_by_family, prompt):
    """Our cos/sin equal hook_cos/hook_sin; rotating the un-rotated q gives hook_rot_q."""
    for family in ("llama", "qwen2", "gemma3", "neox"):
        model = tiny_by_family[family]
        tokens = model.to_tokens(prompt)
        positions = torch.arange(tokens.shape[1])
        for spec in lp.rope_specs(model):
            p = f"blocks.{spec.layer}.attn."
            names = [p + "hook_cos", p + "hook_sin", spec.q_hook, spec.k_hook]
            if spec.rot_hooks:
                names += [p + "hook_rot_q", p + "hook_rot_k"]
            got = _run(model, names, tokens)
            cos, sin = cos_sin(spec, positions)
            assert torch.equal(got[p + "hook_cos"][0], torch.cat([cos, cos], -1)), family
            assert torch.equal(got[p + "hook_sin"][0], torch.cat([sin, sin], -1)), family
            if spec.rot_hooks:
                q, k = got[spec.q_hook], got[spec.k_hook]
                if spec.qk_layout == "bhpd":
                    q, k = q.transpose(1, 2), k.transpose(1, 2)
                # same operations in the same order as HF: bit-identical
                assert torch.equal(rotate(q, positions, spec), got[p + "hook_rot_q"]), family
                assert torch.equal(rotate(k, positions, spec), got[p + "hook_rot_k"]), family


def test_gptj_table_matches_embed_positions(tiny_by_family):
    model = tiny_by_family["gptj"]
    for spec, block in zip(lp.rope_specs(model), model.blocks):
        table = block.attn.original_component.embed_positions[:50]
        cos, sin = cos_sin(spec, torch.arange(50))
        assert torch.equal(table, torch.cat([sin, cos], -1))


def test_gqa_map_matches_hf_repeat_kv(tiny_by_family, prompt):
    from transformers.models.llama.modeling_llama import repeat_kv

    model = tiny_by_family["llama"]
    spec = lp.rope_spec(model, 0)
    assert (spec.n_heads, spec.n_kv_heads) == (4, 2)
    inputs = lp.capture_attention_inputs(model, prompt, 0)[0]
    ours = inputs.k_for_heads()  # [batch, pos, head_index, d_head]
    theirs = repeat_kv(inputs.k.transpose(1, 2), spec.group_size).transpose(1, 2)
    assert torch.equal(ours, theirs)
    assert [spec.kv_head(h) for h in range(4)] == [0, 0, 1, 1]


def test_dims_of_each_pairing(tiny_by_family):
    half = lp.rope_spec(tiny_by_family["neox"], 0)   # R = 8 of 16
    adj = lp.rope_spec(tiny_by_family["gptj"], 0)    # R = 8 of 16
    assert half.dims_of(0) == [0, 4] and half.dims_of(3) == [3, 7]
    assert adj.dims_of(0) == [0, 1] and adj.dims_of(3) == [6, 7]
    assert half.dims_of(4) == list(range(8, 16))     # the tail
    with pytest.raises(InvalidSelectionError, match="frequency id 5 out of range"):
        half.dims_of(5)


def test_non_rope_model_is_rejected():
    import transformers

    config = transformers.GPT2Config(vocab_size=len(lp.models.tiny.TINY_VOCAB), n_embd=32,
                                     n_layer=1, n_head=2, n_positions=64)
    hf = transformers.GPT2LMHeadModel(config).eval()
    model = lp.from_hf(hf, lp.models.tiny_tokenizer(), name="tiny-gpt2")
    with pytest.raises(NotRopeModelError, match="no rotary position embedding"):
        lp.rope_specs(model)
    with pytest.raises(NotRopeModelError):
        lp.frequency_logits(model, "Alice likes red", 0)


def test_layer_out_of_range(tiny_by_family):
    model = tiny_by_family["llama"]
    with pytest.raises(InvalidSelectionError, match="layer 7 out of range: the model has 2 layers"):
        lp.rope_spec(model, 7)
    assert lp.rope_spec(model, -1).layer == 1


def test_specs_are_memoised_per_model(tiny_by_family):
    model = tiny_by_family["qwen2"]
    assert lp.rope_specs(model) is lp.rope_specs(model)
    assert lp.rope_specs(model, refresh=True) is not lp.rope_specs(tiny_by_family["llama"])


# ---- windows, layouts, input-dependent angles, the memo ---------------------------------

TOKENS = (torch.arange(24) * 7 + 5) % len(lp.models.tiny.TINY_VOCAB)


def _rotary(model):
    from lens_possym.rope.reading import _find_rotary_module

    return _find_rotary_module(model.original_model)


def _tokens(n):
    tokens = TOKENS[:n].clone()
    tokens[0] = 1  # <bos>
    return tokens[None]


@pytest.mark.parametrize("family, window", [
    ("mistral-window", 4), ("phi3", 4), ("starcoder2", 4), ("mistral", None), ("qwen2", None),
])
def test_window_read_where_the_family_keeps_it(family, window):
    """Mistral, Phi-3 and Starcoder2 keep their window only in config.sliding_window."""
    model = lp.tiny_model(family)
    assert all(spec.window == window for spec in lp.rope_specs(model))
    fl = lp.frequency_logits(model, _tokens(20), 0, query_positions=None)
    hidden = fl.model_scores <= torch.finfo(fl.model_scores.dtype).min / 2
    assert torch.equal(hidden[0, 0], ~fl.mask)  # the model hides exactly what we mask


def test_flat_qk_norm_layout_olmo2():
    """OLMo2 norms the whole projection: hook_q_normed is [batch, pos, heads*d_head]."""
    model = lp.tiny_model("olmo2", dtype=torch.float64)
    spec = lp.rope_spec(model, 0)
    assert spec.qk_layout == "flat" and spec.q_hook.endswith("hook_q_normed")
    flat = torch.arange(2 * 3 * 4 * 16.0).reshape(2, 3, 64)
    view = heads_view(flat, spec)
    assert view.shape == (2, 3, 4, 16) and view.data_ptr() == flat.data_ptr()
    assert torch.equal(view[1, 2, 3], flat[1, 2, 48:64])
    assert lp.frequency_logits(model, _tokens(12), 1, query_positions=None).max_abs_error < 1e-12


def test_adjacent_pairs_and_float32_rotation_cohere():
    """Cohere: adjacent pairs (settled on the probe); the bridge rounds q/k to float32
    before rotating, which the capture repeats (else ~1e-7 off in a float64 model)."""
    model = lp.tiny_model("cohere", dtype=torch.float64)
    spec = lp.rope_spec(model, 0)
    assert spec.pairing == "adjacent" and spec.rotary_input_dtype == torch.float32
    inputs = lp.capture_attention_inputs(model, _tokens(12), 0, query_positions=None)[0]
    assert decompose_inputs(inputs).max_abs_error < 1e-12
    x = torch.randn(3, 16, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    assert torch.equal(spec.round_rotary(x), x.float().double())  # every dim rotates here


def test_nope_layer_smollm3():
    specs = lp.rope_specs(lp.tiny_model("smollm3"))
    assert [s.rotary_dim for s in specs] == [16, 16, 16, 0]
    assert specs[3].n_freqs == 1 and specs[3].has_tail  # all of d_head is one content id


def test_longrope_angles_follow_the_input_length():
    """Phi-3 LongRoPE: short factors up to 16 tokens, long beyond; the tables the model
    used on each input equal spec.at_length(n) bit for bit."""
    model = lp.tiny_model("phi3-longrope", dtype=torch.float64)
    spec = lp.rope_spec(model, 0)
    assert spec.input_dependent and spec.rope_type == "longrope"
    assert spec.at_length(16) is spec
    long = spec.at_length(17)
    assert not torch.allclose(long.inv_freq, spec.inv_freq)
    for n, expected in ((20, long), (12, spec), (17, long)):
        got = _run(model, ["blocks.0.attn.hook_cos"], _tokens(n))["blocks.0.attn.hook_cos"][0]
        cos, _ = cos_sin(expected, torch.arange(n))
        assert torch.equal(got, torch.cat([cos, cos], -1).to(got.dtype)), n
    # the decomposition uses the input's angles; the short ones would be caught
    inputs = lp.capture_attention_inputs(model, _tokens(20), 1, query_positions=None)[1]
    assert torch.equal(inputs.spec.inv_freq, long.inv_freq)
    assert decompose_inputs(inputs).check() < 1e-12
    inputs.spec = spec
    with pytest.raises(DecompositionMismatchError, match="Likely cause: angles"):
        decompose_inputs(inputs).check()


def test_dynamic_ntk_angles_follow_the_rotary_state():
    """Dynamic NTK (context 16): growth recomputes the base, a shorter long input keeps the
    longest one's angles, a short input resets; at_length predicts each bit for bit."""
    model = lp.tiny_model("llama-dynamic", dtype=torch.float64)
    spec = lp.rope_spec(model, 0)
    rotary = _rotary(model)
    seen = set()
    for n in (20, 24, 18, 12, 18, 12):
        predicted = spec.at_length(n)
        with torch.no_grad():
            model(_tokens(n), return_type=None)
        assert torch.equal(predicted.inv_freq, rotary.inv_freq.float().cpu()), n
        seen.add(tuple(predicted.inv_freq.tolist()))
        fl = lp.frequency_logits(model, _tokens(n), 1, query_positions=None)
        assert fl.max_abs_error < 1e-12, n
    # grown to 20, to 24 (kept at 18), reset to the original at 12, grown to 18 afresh
    assert len(seen) == 4


def test_memo_notices_edited_rotary_buffers():
    model = lp.tiny_model("llama")
    first = lp.rope_specs(model)
    assert lp.rope_specs(model) is first  # nothing changed: the memo answers
    rotary = _rotary(model)
    with torch.no_grad():
        rotary.inv_freq.mul_(0.5)
    second = lp.rope_specs(model)
    assert second is not first and torch.equal(second[0].inv_freq, first[0].inv_freq * 0.5)
    assert lp.frequency_logits(model, _tokens(12), 0).max_abs_error < 1e-5
    rotary.inv_freq.data[0] = 0.25  # an edit through .data (no version bump) is seen too
    edited = lp.rope_specs(model)
    assert edited[0].inv_freq[0] == 0.25
    fresh = lp.rope_specs(model, refresh=True)
    assert fresh is not edited and lp.rope_specs(model) is fresh


def test_attention_settings_are_part_of_the_memo():
    model = lp.tiny_model("llama")
    before = lp.rope_spec(model, 0).scale
    model.blocks[0].attn.original_component.scaling = 0.5
    assert lp.rope_spec(model, 0).scale == 0.5 != before


@pytest.mark.parametrize("family, reason", [
    ("hunyuan", "after\\* RoPE|after RoPE"),
    ("llama4", "NoPE layers"),
    ("qwen3-next", "no attention block"),
])
def test_unsupported_families_are_named_with_the_reason(family, reason):
    model = lp.tiny_model(family)
    with pytest.raises(UnsupportedModelError, match=reason) as caught:
        lp.rope_specs(model)
    assert type(model.original_model).__name__ in str(caught.value)


# ---- property tests of the rotation arithmetic ------------------------------------------

@st.composite
def specs(draw):
    n_rot = draw(st.integers(1, 6))
    tail = draw(st.integers(0, 4))
    base = draw(st.sampled_from([10.0, 1e4, 1e6]))
    inv = base ** (-torch.arange(0, 2 * n_rot, 2, dtype=torch.float32) / (2 * n_rot))
    return RopeSpec(layer=0, n_heads=2, n_kv_heads=1, d_head=2 * n_rot + tail,
                    rotary_dim=2 * n_rot, pairing=draw(st.sampled_from(["half", "adjacent"])),
                    inv_freq=inv, scale=draw(st.floats(0.05, 2.0)))


@settings(max_examples=40, deadline=None)
@given(spec=specs(), seed=st.integers(0, 2**16))
def test_pairs_roundtrip_and_rotation_is_orthogonal(spec, seed):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(2, 7, 3, spec.d_head, generator=gen, dtype=torch.float64)
    pairs, tail = to_pairs(x, spec)
    assert torch.equal(from_pairs(pairs, tail, spec), x)
    positions = torch.arange(7)
    rotated = rotate(x, positions, spec)
    r_pairs, r_tail = to_pairs(rotated, spec)
    assert torch.allclose(r_pairs.norm(dim=-1), pairs.norm(dim=-1), atol=1e-12)
    assert torch.equal(r_tail, tail)
    # position 0 is the identity
    assert torch.allclose(rotated[:, 0], x[:, 0], atol=0)


@settings(max_examples=40, deadline=None)
@given(spec=specs(), seed=st.integers(0, 2**16), shift=st.integers(1, 50))
def test_rope_scores_depend_on_offset_only(spec, seed, shift):
    """<R(n)q, R(j)k> = <R(n+s)q, R(j+s)k>: the defining property of RoPE."""
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(1, 1, 1, spec.d_head, generator=gen, dtype=torch.float64)
    k = torch.randn(1, 1, 1, spec.d_head, generator=gen, dtype=torch.float64)
    spec64 = spec.with_(inv_freq=spec.inv_freq.double())
    n, j = 9, 4

    def score(a, b):
        cq = rotate(q, torch.tensor([a]), spec64)
        ck = rotate(k, torch.tensor([b]), spec64)
        return float((cq * ck).sum())

    # tables are float32 (as in the models), so agreement is to float32 angle rounding
    assert math.isclose(score(n, j), score(n + shift, j + shift), rel_tol=1e-4, abs_tol=1e-4)


def test_every_family_file_is_data_and_no_attention_class_is_claimed_twice():
    from lens_possym.rope.families import DEFAULT, FAMILIES, Family, family_files, family_of

    files = family_files()
    assert {"gptj", "cohere", "glm", "helium", "hunyuan", "llama4"} <= set(files)
    claimed = [name for family in files.values() for name in family.attention]
    assert len(claimed) == len(set(claimed)) == len(FAMILIES)
    assert all(isinstance(f, Family) and f.attention for f in files.values())
    assert family_of("LlamaAttention") is DEFAULT and DEFAULT.pairing == "half"
    assert family_of("GPTJAttention").angles == "gptj_table"
    assert family_of("CohereAttention").pairing == "adjacent"
    assert "normalises q and k *after* RoPE" in family_of("HunYuanDenseV1Attention").refused


def test_a_family_file_is_all_it_takes(monkeypatch):
    """Adding a family is adding a file: the reader asks the family table, nothing else."""
    from lens_possym.rope import families, reading

    model = lp.tiny_model("llama")
    kind = type(model.blocks[0].attn.original_component).__name__
    monkeypatch.setitem(families.FAMILIES, kind, families.Family(
        attention=(kind,), refused="a test says so"))
    with pytest.raises(lp.errors.UnsupportedModelError, match="a test says so"):
        reading.rope_specs(model, refresh=True)
