"""The one score engine: every scheme through one per-layer path, RoPE's factors and any
scheme's matrix through one protocol (each source scores itself), and the two agreeing
where both apply."""

from __future__ import annotations

import pytest
import torch

import lens_possym as lp
from lens_possym.capture import capture_attention_inputs
from lens_possym.errors import InvalidSelectionError
from lens_possym.models.tiny_schemes import tiny_scheme_model
from lens_possym.positions import Rope
from lens_possym.resolved import resolve
from lens_possym.scores import ScoreConfig, cross_logit_factors, swap_set
from lens_possym.scores import engine
from lens_possym.scores.matrix import CrossLogitMatrix
from lens_possym.scores.profile import per_prompt_scores
from lens_possym.scores.sources import CrossLogitSource, FactorSource

PROMPT = "Alice likes red . Bob likes blue . Carol likes green . What color does"
# llama: full rotary; neox: a non-rotated tail; gptj: adjacent pairs; gemma2: a softcap and
# a window on alternate layers; gemma3: a window
FAMILIES = ["llama", "neox", "gptj", "gemma2", "gemma3"]


def _inputs(family: str, layer: int):
    model = lp.tiny_model(family, dtype=torch.float64)
    tokens = model.to_tokens(PROMPT)
    return capture_attention_inputs(model, tokens, layer)[layer]


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("layer", [0, 1])
def test_rope_cross_logits_are_the_factors_head_full(family, layer):
    """The RoPE scheme's cross_logits (and its per-frequency terms) are the matrices of the
    factors the engine scores."""
    inputs = _inputs(family, layer)
    heads = list(range(inputs.spec.n_heads))
    factors = cross_logit_factors(inputs, heads)
    qpos = int(inputs.query_positions[0])
    cross = Rope(spec=inputs.spec).cross_logits(inputs.q[:, 0][:, heads],
                                                inputs.k_for_heads(heads), qpos)
    assert torch.equal(cross, factors.head_full())
    terms = Rope(spec=inputs.spec).frequency_cross_logits(inputs.q[:, 0][:, heads],
                                                          inputs.k_for_heads(heads), qpos)
    assert torch.equal(terms, factors.frequency_full())
    assert isinstance(FactorSource(factors), CrossLogitSource)


@pytest.mark.parametrize("family,swap", [(f, "token") for f in FAMILIES]
                         # gemma3's window of 4 leaves no block pair to swap
                         + [(f, "block") for f in FAMILIES if f != "gemma3"])
def test_a_rope_layer_scores_the_same_as_factors_and_as_a_matrix(family, swap):
    """One protocol, two sources: RoPE's factors (the per-frequency kernel) and the
    same cross-logits handed over as a matrix (matrix_swap_scores, each C_f as a head)."""
    inputs = _inputs(family, 1)
    heads = list(range(inputs.spec.n_heads))
    factors = FactorSource(cross_logit_factors(inputs, heads))
    matrix = CrossLogitMatrix(factors.head_full(), factors.visible,
                              terms_of=factors.frequency_full)
    assert isinstance(matrix, CrossLogitSource)
    config = ScoreConfig(swap=swap, n_blocks=3, exclude_bos=True,
                         query_position=int(inputs.query_positions[0]))
    swaps = swap_set(config.swap, config.query_position, factors.visible,
                     exclude_bos=True, n_blocks=3)
    by_factors = factors.swap_scores(swaps, config)
    by_matrix = matrix.swap_scores(swaps, config)
    for name in ("pos", "sym", "pos_freq", "sym_freq"):
        a, b = getattr(by_factors, name), getattr(by_matrix, name)
        assert a.shape == b.shape and float((a - b).abs().max()) <= 1e-10, name
    keys = engine.exclusion_keys(config.query_position, factors.visible, True)
    for per_factors, per_matrix in zip(factors.exclusion(keys, config),
                                       matrix.exclusion(keys, config)):
        for name in ("var", "s_pos", "s_sym"):
            a, b = getattr(per_factors, name), getattr(per_matrix, name)
            assert a.shape == b.shape
            assert float(((a - b).abs() / b.abs().clamp_min(1)).max()) <= 1e-10, name


@pytest.mark.parametrize("model_of,kind", [
    (lambda: lp.tiny_model("llama", dtype=torch.float64), FactorSource),
    (lambda: tiny_scheme_model("bloom", dtype=torch.float64), CrossLogitMatrix),
    (lambda: tiny_scheme_model("deepseek_v2", dtype=torch.float64), CrossLogitMatrix),
])
def test_every_scheme_is_scored_by_its_source(monkeypatch, model_of, kind):
    """The engine asks the source to score itself: RoPE layers give factors, every other
    scheme a matrix, and the engine never asks which."""
    seen = []
    for cls in (FactorSource, CrossLogitMatrix):
        def spy(source, swaps, config, original=cls.swap_scores):
            seen.append(type(source))
            return original(source, swaps, config)

        monkeypatch.setattr(cls, "swap_scores", spy)
    model = model_of()
    lp.swap_scores(model, model.to_tokens(PROMPT) if hasattr(model, "to_tokens") else PROMPT)
    assert seen and all(t is kind for t in seen)


def test_exclusion_keys_are_the_visible_keys_before_the_query():
    visible = torch.tensor([True, True, False, True, True, True])
    assert engine.exclusion_keys(5, visible, False).tolist() == [0, 1, 3, 4]
    assert engine.exclusion_keys(5, visible, True).tolist() == [1, 3, 4]


def test_per_prompt_scores_default_to_what_the_model_has():
    """An ALiBi model has no frequencies: left at the defaults, whole heads (as swap_scores)."""
    model = tiny_scheme_model("bloom", dtype=torch.float64)
    prompts = ["Alice likes red . Bob likes blue", "Carol likes green . Dave likes pink"]
    per_prompt, _, config = per_prompt_scores(model, prompts)
    assert config.per_frequency is False and per_prompt["pos_freq"] is None
    whole = lp.swap_scores(model, prompts)
    assert torch.equal(per_prompt["pos"], whole.pos_prompts)


def test_a_resolved_model_is_read_once_and_scores_the_same():
    model = lp.tiny_model("llama", dtype=torch.float64)
    resolved = resolve(model)
    a = lp.swap_scores(resolved, PROMPT, layers=[1])
    b = lp.swap_scores(model, PROMPT, layers=[1])
    assert torch.equal(a.pos_freq.nan_to_num(), b.pos_freq.nan_to_num())


def test_an_activation_cache_is_scored_at_the_layer_site_only():
    model = lp.tiny_model("llama", dtype=torch.float64)
    _, cache = model.run_with_cache(model.to_tokens(PROMPT))
    with pytest.raises(InvalidSelectionError, match="activation cache"):
        lp.swap_scores(model, cache, swap_site="content", per_frequency=False, exclude_bos=True)


def test_rope_on_some_heads_is_scored_per_frequency_and_its_nope_heads_are_symbolic():
    """A matrix scheme with frequencies (RoPE on heads 0-1, NoPE on 2-3) supplies its C_f:
    every id of a NoPE head is a 2-D content part, so it scores s_SYM = 1."""
    from lens_possym.papers.b.encoder import SchemeEncoder, encoder_config_for
    from lens_possym.papers.b.tasks import DistanceTask

    task = DistanceTask(n_ctx=16, max_between=8, max_side=3, n_words=10)
    cfg = encoder_config_for(task, "rope", n_layers=2, n_heads=4, d_model=32, d_head=8,
                             d_ff=32, seed=1, rope_heads=2)
    model = SchemeEncoder(cfg).eval()
    tokens = task.sample(2).tokens
    scores = lp.swap_scores(model, tokens, query_position=15, tau=0.05)
    assert scores.config.per_frequency and scores.pos_freq.shape == (2, 4, 4)
    assert torch.allclose(scores.sym_freq[:, 2:], torch.ones(2, 2, 4, dtype=torch.float64),
                          atol=1e-9)
    assert not torch.allclose(scores.sym_freq[:, :2], torch.ones(2, 2, 4, dtype=torch.float64),
                              atol=1e-3)
    whole = lp.swap_scores(model, tokens, query_position=15, tau=0.05, per_frequency=False)
    assert torch.equal(whole.pos, scores.pos) and torch.equal(whole.sym, scores.sym)


def test_mla_exclusion_per_frequency_holds_the_bound_and_its_content_part_is_symbolic():
    """MLA supplies C_f: Theorem 1 per frequency (Var <= bound), and the content part (the
    last id, no position) has positional share 0, as a NoPE part."""
    model = tiny_scheme_model("deepseek_v2", dtype=torch.float64)
    scores = lp.swap_scores(model, PROMPT, exclude_bos=False)
    ratio = scores.exclusion_ratio_freq
    assert ratio.shape == scores.pos_freq.shape and ratio.isfinite().all()
    assert bool((ratio <= 1 + 1e-9).all())
    assert torch.allclose(scores.positional_share_freq[..., -1], torch.zeros_like(ratio[..., -1]),
                          atol=1e-12)


def test_the_scale_free_cosine_is_refused_where_it_would_be_ignored():
    # ALiBi layers are scored from a matrix with the clamped cosine: asking for the
    # scale-free one there is an error naming the fix, not a silently different result
    model = tiny_scheme_model("bloom")
    tokens = torch.randint(1, 50, (1, 10), generator=torch.Generator().manual_seed(0))
    with pytest.raises(InvalidSelectionError, match="cosine='clamped'"):
        lp.swap_scores(model, tokens, cosine="scale_free", per_frequency=False)
    clamped = lp.swap_scores(model, tokens, cosine="clamped", per_frequency=False)
    assert torch.isfinite(clamped.pos).all()
