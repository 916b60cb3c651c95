"""Positional schemes: each split adds up to the model, the swap sites agree, the pitfall holds.

Tiny random float64 models of every supported non-RoPE family (absolute: GPT-2, OPT,
GPT-Neo; ALiBi: Bloom, MPT), plus a tiny RoPE model for the Hadamard form and the
unchanged RoPE path, plus scheme objects on random queries and keys.
"""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import lens_possym as lp
from lens_possym.capture import capture_attention_inputs
from lens_possym.errors import (InvalidSelectionError, LensPossymError, NoFrequenciesError,
                                NotRopeModelError)
from lens_possym.models.tiny_schemes import SCHEME_FAMILIES, tiny_scheme_model
from lens_possym.positions import (MLA, Absolute, AdditiveBias, NoPE, Rope, alibi_slopes,
                                   positional_scheme, schemes, t5_bucket)
from lens_possym.toeplitz import toeplitz_terms
from lens_possym.scores import ScoreConfig, swap_scores
from lens_possym.scores.sites import matrix_swap_scores
from lens_possym.scores.swaps import swap_set

PROMPT = "Alice likes red . Bob likes blue and Carol"
ABSOLUTE = ("gpt2", "opt", "gpt_neo")
MLA_MODELS = ("deepseek_v2", "deepseek_v3")
# a few-hot tau keeps every swap in the weighting, so agreements compare many swaps
SCORE = dict(per_frequency=False, tau=0.05, exclude_bos=False)


@pytest.fixture(scope="module")
def models(scheme_models):
    return scheme_models


@pytest.mark.parametrize("family", MLA_MODELS)
def test_mla_models_split_and_score_per_frequency(models, family):
    model = models[family]
    assert isinstance(positional_scheme(model, 1), MLA)
    terms = toeplitz_terms(model, PROMPT, 1)                    # adds up, or raises
    assert terms.max_abs_error < 1e-9
    scores = swap_scores(model, PROMPT, tau=0.05, exclude_bos=False)
    assert scores.pos_freq.shape == (2, 4, 5) and scores.pos_freq.isfinite().all()
    assert torch.equal(scores.angles[0, :4], positional_scheme(model, 0).inv_freq)
    # the content id has no position inside the head: symbolic
    assert torch.allclose(scores.sym_freq[..., -1], torch.ones(2, 4, dtype=torch.float64),
                          atol=1e-6)


@pytest.mark.parametrize("family", ("bloom", "mpt"))
def test_alibi_bias_is_toeplitz_up_to_a_row_constant(models, family):
    scheme = positional_scheme(models[family], 1)
    positions = torch.arange(9)
    bias = scheme.bias(positions, positions)
    relative = AdditiveBias.alibi(scheme.slopes).bias(positions, positions)
    shift = bias - relative                                    # constant along each row
    assert torch.allclose(shift, shift[..., :1].expand_as(shift), atol=1e-12)
    n, m = 6, 2
    assert torch.allclose(relative[:, n, m], -scheme.slopes * (n - m))


# ---- the scheme objects -----------------------------------------------------------------

def _random_qk(seed: int, n_pos: int = 8, heads: int = 2, d: int = 4):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(1, heads, d, generator=g, dtype=torch.float64),
            torch.randn(1, n_pos, heads, d, generator=g, dtype=torch.float64))


@settings(max_examples=20, deadline=None)
@given(st.integers(0, 10_000))
def test_nope_head_scores_symbolic(seed):
    q, k = _random_qk(seed)
    # a moderate scale keeps the swapped masses above the clamped cosine's 1e-8 floor
    cross = NoPE(scale=0.5).cross_logits(q, k, query_position=7)
    swaps = swap_set("token", 7, torch.ones(8, dtype=torch.bool))
    pos, sym = matrix_swap_scores(cross, swaps, tau=1e-4)
    assert torch.allclose(sym, torch.ones_like(sym), atol=1e-9)


@settings(max_examples=20, deadline=None)
@given(st.integers(0, 10_000), st.sampled_from(["alibi", "symmetric", "t5", "table"]))
def test_bias_only_head_scores_positional(seed, kind):
    q, k = _random_qk(seed)
    k = k[:, :1].expand_as(k)                                   # all keys equal: bias only
    g = torch.Generator().manual_seed(seed)
    scheme = {
        "alibi": AdditiveBias.alibi(torch.tensor([0.5, 0.125])),
        "symmetric": AdditiveBias.alibi(torch.tensor([0.5, 0.125]), symmetric=True),
        "t5": AdditiveBias.t5(torch.randn(2, 32, generator=g, dtype=torch.float64)),
        "table": AdditiveBias.table(torch.randn(2, 8, generator=g, dtype=torch.float64)),
    }[kind]
    cross = scheme.cross_logits(q, k, query_position=7)
    swaps = swap_set("token", 7, torch.ones(8, dtype=torch.bool))
    pos, sym = matrix_swap_scores(cross, swaps, tau=1e-4)
    assert torch.allclose(pos, torch.ones_like(pos), atol=1e-9)


def test_alibi_slopes_match_the_paper_and_bloom():
    assert torch.allclose(alibi_slopes(8), torch.tensor([2.0 ** -(i + 1) for i in range(8)],
                                                        dtype=torch.float64))
    from transformers.models.bloom.modeling_bloom import build_alibi_tensor

    for heads in (4, 6, 12):
        bloom = build_alibi_tensor(torch.ones(1, 3), heads, torch.float64).view(heads, 3)[:, 1]
        assert torch.allclose(alibi_slopes(heads), bloom.double(), atol=1e-6)


def test_t5_buckets_match_transformers():
    from transformers.models.t5.modeling_t5 import T5Attention

    delta = torch.arange(-300, 300)
    for bidirectional in (True, False):
        ours = t5_bucket(delta, bidirectional=bidirectional, num_buckets=32, max_distance=128)
        theirs = T5Attention._relative_position_bucket(delta, bidirectional=bidirectional,
                                                       num_buckets=32, max_distance=128)
        assert torch.equal(ours, theirs)


def test_schemes_without_frequencies_say_so(models):
    for scheme in (NoPE(), Absolute(), positional_scheme(models["bloom"], 0)):
        assert not scheme.has_frequencies
        with pytest.raises(NoFrequenciesError, match="per_frequency=False"):
            scheme.frequency_angles()
    with pytest.raises(NoFrequenciesError, match="alibi layer"):
        swap_scores(models["bloom"], PROMPT, per_frequency=True)
    scored = swap_scores(models["bloom"], PROMPT)  # the defaults score what it has
    assert scored.pos.isfinite().all() and scored.pos_freq is None


# ---- swap sites ---------------------------------------------------------------------------

@pytest.mark.parametrize("family", ABSOLUTE)
def test_absolute_layer_swap_is_symbolic_by_construction(models, family):
    """The pitfall: a layer-local swap moves position with content, on every head and layer."""
    scores = swap_scores(models[family], PROMPT, swap_site="layer", **SCORE)
    assert scores.config.swap_site == "layer"
    assert torch.allclose(scores.sym, torch.ones_like(scores.sym), atol=1e-9)
    content = swap_scores(models[family], PROMPT, layers=0, swap_site="content", **SCORE)
    assert (content.sym[0] < 1 - 1e-3).any()                  # the content swap is not


@pytest.mark.parametrize("family", SCHEME_FAMILIES)
@pytest.mark.parametrize("site", ("layer", "content", "input"))
def test_exact_equals_rerun_at_every_site(models, family, site):
    model = models[family]
    exact = swap_scores(model, PROMPT, layers=0, swap_site=site, method="exact", **SCORE)
    rerun = swap_scores(model, PROMPT, layers=0, swap_site=site, method="rerun", **SCORE)
    for name in ("pos", "sym"):
        assert torch.allclose(getattr(exact, name)[0], getattr(rerun, name)[0], atol=1e-7)
    assert exact.config.swap_site == site == rerun.config.swap_site


@pytest.mark.parametrize("family", ("gpt2", "bloom"))
def test_block_swaps_exact_equals_rerun(models, family):
    model = models[family]
    kw = dict(SCORE, swap="block", n_blocks=3, layers=0, swap_site="content")
    exact, rerun = (swap_scores(model, PROMPT, method=m, **kw) for m in ("exact", "rerun"))
    assert torch.allclose(exact.pos[0], rerun.pos[0], atol=1e-7)
    assert torch.allclose(exact.sym[0], rerun.sym[0], atol=1e-7)


def test_content_and_input_sites_agree_deeper_by_rerun(models):
    model = models["gpt2"]
    content, tokens = (swap_scores(model, PROMPT, layers=1, swap_site=s, method="rerun", **SCORE)
                       for s in ("content", "input"))
    assert torch.allclose(content.sym[1], tokens.sym[1], atol=1e-9)
    with pytest.raises(InvalidSelectionError, match="method='rerun'"):
        swap_scores(model, PROMPT, layers=1, swap_site="content", **SCORE)


def test_inside_schemes_layer_site_is_definition_2_deeper(models):
    model = models["bloom"]
    exact = swap_scores(model, PROMPT, layers=1, **SCORE)
    rerun = swap_scores(model, PROMPT, layers=1, method="rerun", **SCORE)
    assert torch.allclose(exact.sym[1], rerun.sym[1], atol=1e-7)
    with pytest.raises(InvalidSelectionError, match="no closed form"):
        swap_scores(model, PROMPT, layers=1, swap_site="input", **SCORE)


def test_rope_models_keep_their_path_and_take_other_sites():
    model = lp.tiny_model("llama", dtype=torch.float64)
    before = swap_scores(model, PROMPT, layers=0, tau=0.05, exclude_bos=False)
    assert before.pos_freq is not None and before.config.swap_site == "layer"
    kw = dict(SCORE, layers=0)
    site = swap_scores(model, PROMPT, swap_site="input", method="rerun", **kw)
    # at layer 0, swapping token ids is swapping the layer's input rows
    assert torch.allclose(site.sym[0], before.sym[0], atol=1e-7)
    assert torch.allclose(site.pos[0], before.pos[0], atol=1e-7)
    with pytest.raises(InvalidSelectionError, match="'layer' site only"):
        swap_scores(model, PROMPT, swap_site="input", per_frequency=True, layers=0)


def test_config_records_and_validates_the_site():
    config = ScoreConfig(swap_site="content")
    assert ScoreConfig.from_json(config.to_json()).swap_site == "content"
    with pytest.raises(InvalidSelectionError, match="swap site"):
        ScoreConfig(swap_site="embedding")


def test_scheme_detection(models):
    assert all(isinstance(ls.scheme, Absolute) for ls in schemes(models["gpt2"]))
    neo = schemes(models["gpt_neo"])
    assert [ls.scheme.window for ls in neo] == [None, 4]
    assert isinstance(positional_scheme(models["mpt"], 0), AdditiveBias)
    assert isinstance(positional_scheme(models["falcon"], 0), AdditiveBias)
    assert isinstance(positional_scheme(lp.tiny_model("llama"), 0), Rope)


def test_unknown_scheme_names_the_known_ones():
    import transformers

    config = transformers.GPTBigCodeConfig(vocab_size=len(lp.models.tiny.TINY_VOCAB),
                                           n_embd=32, n_layer=1, n_head=2, n_positions=64)
    model = lp.from_hf(transformers.GPTBigCodeForCausalLM(config).eval(),
                       lp.models.tiny_tokenizer())
    with pytest.raises(NotRopeModelError, match="gpt2.*bloom.*deepseek_v2") as error:
        schemes(model)
    assert isinstance(error.value, LensPossymError) and isinstance(error.value, ValueError)
    with pytest.raises(InvalidSelectionError, match="unknown family"):
        tiny_scheme_model("t5")


# ---- MLA: a content part plus a decoupled RoPE part with a shared key ----------------------

def _rotate_half(x: torch.Tensor, angle: torch.Tensor) -> torch.Tensor:
    """Rotate the half-split pairs of ``x`` (``[..., 2F]``) by ``angle`` (``[..., F]``)."""
    a, b = x.chunk(2, -1)
    return torch.cat([a * angle.cos() - b * angle.sin(), a * angle.sin() + b * angle.cos()], -1)


def _mla_inputs(seed: int, n_pos: int = 7, heads: int = 3):
    g = torch.Generator().manual_seed(seed)
    r = lambda *s: torch.randn(*s, generator=g, dtype=torch.float64)  # noqa: E731
    return r(1, heads, 4), r(1, heads, 6), r(1, n_pos, heads, 4), r(1, n_pos, 6)


MLA_SCHEME = MLA(inv_freq=torch.tensor([1.0, 0.3, 0.01], dtype=torch.float64), scale=0.5)


@settings(max_examples=10, deadline=None)
@given(st.integers(0, 10_000))
def test_mla_cross_logits_are_the_heads_logits_with_content_moved(seed):
    qc, qr, kc, kr = _mla_inputs(seed)
    n = kc.shape[1] - 1
    cross = MLA_SCHEME.mla_cross_logits(qc, qr, kc, kr, n)
    theta = MLA_SCHEME.inv_freq
    q_rot = _rotate_half(qr, n * theta)                                     # [1, h, 6]
    for p in range(n + 1):
        k_rot = _rotate_half(kr, p * theta)                                 # content c at p
        direct = (torch.einsum("bhd,bchd->bhc", qc, kc)
                  + torch.einsum("bhd,bcd->bhc", q_rot, k_rot)) * MLA_SCHEME.scale
        assert torch.allclose(cross[:, :, p], direct, atol=1e-12)
    terms = MLA_SCHEME.frequency_cross_logits(qc, qr, kc, kr, n)
    assert terms.shape[2] == len(MLA_SCHEME.frequency_angles()) == 4
    assert torch.allclose(terms.sum(2), cross)


def test_mla_scores_equal_recomputing_the_swapped_logits():
    from lens_possym.scores.sites import _add
    from lens_possym.scores.swaps import WeightedCosines

    qc, qr, kc, kr = _mla_inputs(3)
    n = kc.shape[1] - 1
    swaps = swap_set("token", n, torch.ones(n + 1, dtype=torch.bool))
    pos, sym = matrix_swap_scores(MLA_SCHEME.mla_cross_logits(qc, qr, kc, kr, n), swaps, tau=0.05)
    clean = torch.softmax(torch.diagonal(MLA_SCHEME.mla_cross_logits(qc, qr, kc, kr, n),
                                         dim1=-2, dim2=-1), -1)
    acc = WeightedCosines()
    for s in range(swaps.n_swaps):        # swap the rows of both key parts, recompute
        perm = swaps.permutation(s, n + 1)
        after = MLA_SCHEME.mla_cross_logits(qc, qr, kc[:, perm], kr[:, perm], n)
        row = torch.softmax(torch.diagonal(after, dim1=-2, dim2=-1), -1)
        _add(acc, row[:, :, None], clean, swaps.first[s : s + 1], swaps.second[s : s + 1], 0.05)
    ref_pos, ref_sym = acc.result()
    assert torch.allclose(pos, ref_pos, atol=1e-12) and torch.allclose(sym, ref_sym, atol=1e-12)


def test_mla_parts_score_as_their_schemes():
    from lens_possym.scores.sites import frequency_matrix_swap_scores

    qc, qr, kc, kr = _mla_inputs(5)
    n = kc.shape[1] - 1
    swaps = swap_set("token", n, torch.ones(n + 1, dtype=torch.bool))
    # the shared RoPE key equal at every position: each RoPE frequency is purely positional
    kr_same = kr[:, :1].expand_as(kr)
    pos_f, sym_f = frequency_matrix_swap_scores(
        MLA_SCHEME.frequency_cross_logits(qc, qr, kc, kr_same, n), swaps, tau=1e-4)
    rope_ids = slice(0, len(MLA_SCHEME.inv_freq))
    assert torch.allclose(pos_f[..., rope_ids], torch.ones_like(pos_f[..., rope_ids]), atol=1e-9)
    # the content id has no position: symbolic, whatever the keys
    assert torch.allclose(sym_f[..., -1], torch.ones_like(sym_f[..., -1]), atol=1e-9)
    with pytest.raises(InvalidSelectionError, match="mla_cross_logits"):
        MLA_SCHEME.cross_logits(qc, kc, n)


def test_a_wrongly_read_scheme_is_caught(models):
    from dataclasses import replace

    from lens_possym.errors import DecompositionMismatchError
    from lens_possym.positions import LayerScheme

    model = models["bloom"]
    right = schemes(model)
    wrong = [replace(ls, scheme=AdditiveBias.alibi(ls.scheme.slopes * 2, reference="zero",
                                                    scale=ls.scheme.scale)) for ls in right]
    model.lens_possym_schemes = lambda: wrong
    try:
        with pytest.raises(DecompositionMismatchError, match="alibi scheme"):
            swap_scores(model, PROMPT, layers=0, **SCORE)
        swap_scores(model, PROMPT, layers=0, check=False, **SCORE)     # skipped on request
    finally:
        del model.lens_possym_schemes
    assert isinstance(right[0], LayerScheme)


# ---- RoPE on only some heads ----------------------------------------------------------------

def test_headwise_rope_rotated_heads_are_rope_and_the_rest_nope():
    from lens_possym.positions import HeadwiseRope
    from lens_possym.scores.sites import frequency_matrix_swap_scores

    g = torch.Generator().manual_seed(0)
    n_pos, n = 8, 7
    q = torch.randn(1, 3, 6, generator=g, dtype=torch.float64)
    k = torch.randn(1, n_pos, 3, 6, generator=g, dtype=torch.float64)
    theta = torch.tensor([1.0, 0.2, 0.01], dtype=torch.float64)
    scheme = HeadwiseRope(inv_freq=theta, rope_heads=(0, 2), scale=0.5)
    cross = scheme.cross_logits(q, k, n)
    for p in range(n + 1):     # rotated heads: <R(n)q, R(p)k_c>; head 1: plain q·k_c
        for h in range(3):
            angle = theta * (h != 1)
            direct = torch.einsum("d,cd->c", _rotate_half(q[0, h], n * angle),
                                  _rotate_half(k[0, :, h], p * angle)) * 0.5
            assert torch.allclose(cross[0, h, p], direct, atol=1e-12)
    swaps = swap_set("token", n, torch.ones(n_pos, dtype=torch.bool))
    pos_f, sym_f = frequency_matrix_swap_scores(scheme.frequency_cross_logits(q, k, n), swaps)
    assert torch.allclose(sym_f[0, 1], torch.ones(3, dtype=torch.float64), atol=1e-9)
    assert not torch.allclose(sym_f[0, 0], torch.ones(3, dtype=torch.float64), atol=1e-3)


@pytest.mark.parametrize("kind", ["nope", "alibi", "symmetric", "t5", "table", "headwise"])
def test_closed_form_equals_recomputing_every_swap_for_each_scheme(kind):
    """For schemes with no model to re-run: swap the key rows, recompute the clean logit row
    (keys at their new positions), and score; the closed form from ``C`` must agree."""
    from lens_possym.positions import HeadwiseRope
    from lens_possym.scores.sites import _add
    from lens_possym.scores.swaps import WeightedCosines

    q, k = _random_qk(11, n_pos=8, heads=2, d=4)
    g = torch.Generator().manual_seed(1)
    scheme = {
        "nope": NoPE(scale=0.7),
        "alibi": AdditiveBias.alibi(torch.tensor([0.5, 0.125])),
        "symmetric": AdditiveBias.alibi(torch.tensor([0.3, 0.05]), symmetric=True),
        "t5": AdditiveBias.t5(torch.randn(2, 32, generator=g, dtype=torch.float64)),
        "table": AdditiveBias.table(torch.randn(2, 8, generator=g, dtype=torch.float64)),
        "headwise": HeadwiseRope(inv_freq=torch.tensor([1.0, 0.1], dtype=torch.float64),
                                 rope_heads=(1,)),
    }[kind]
    n = 7
    for swap in ("token", "block"):
        swaps = swap_set(swap, n, torch.ones(8, dtype=torch.bool), n_blocks=3)
        cross = scheme.cross_logits(q, k, n)
        pos, sym = matrix_swap_scores(cross, swaps, tau=0.05)
        clean = torch.softmax(torch.diagonal(cross, dim1=-2, dim2=-1), -1)
        acc = WeightedCosines()
        for s in range(swaps.n_swaps):
            after = scheme.cross_logits(q, k[:, swaps.permutation(s, 8)], n)
            row = torch.softmax(torch.diagonal(after, dim1=-2, dim2=-1), -1)
            _add(acc, row[:, :, None], clean, swaps.first[s : s + 1], swaps.second[s : s + 1],
                 0.05)
        ref_pos, ref_sym = acc.result()
        assert torch.allclose(pos, ref_pos, atol=1e-12)
        assert torch.allclose(sym, ref_sym, atol=1e-12)


def test_rope_models_are_scored_by_the_rope_path():
    """The dispatch sends every-RoPE models, at the layer site, to the per-frequency path
    unchanged: the result is exactly the closed form of ``scores.exact`` on their factors."""
    from lens_possym.scores.crosslogits import cross_logit_factors
    from lens_possym.scores.exact import exact_swap_scores

    model = lp.tiny_model("qwen2", dtype=torch.float64)
    scores = swap_scores(model, PROMPT, layers=1, tau=0.05, exclude_bos=False)
    inputs = capture_attention_inputs(model, PROMPT, 1)[1]
    factors = cross_logit_factors(inputs, list(range(inputs.spec.n_heads)))
    swaps = swap_set("token", int(inputs.query_positions[0]), factors.visible)
    direct = exact_swap_scores(factors, swaps, tau=0.05)
    # (to the last bit but one: the prompt mean of the assembly rounds once)
    for name in ("pos", "sym", "pos_freq", "sym_freq"):
        assert torch.allclose(getattr(scores, name)[1], getattr(direct, name)[0], rtol=0,
                              atol=1e-15)
    assert scores.config.swap_site == "layer"
