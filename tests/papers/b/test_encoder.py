"""Paper B's scheme encoders: hooks, Toeplitz logits, rotations, ablation, faithful quirks."""

from __future__ import annotations

import pytest
import torch

from lens_possym.errors import InvalidSelectionError, ToyConfigError
from lens_possym.interventions import ablate_heads
from lens_possym.positions import AdditiveBias, HeadwiseRope
from lens_possym.scores.sites import site_cross_logits
from lens_possym.training.models import MODELS
from lens_possym.papers.b.encoder import (
    SCHEMES,
    EncoderConfig,
    SchemeEncoder,
    faithful_mla_ablation,
    faithful_mla_rotate,
    encoder_config_for,
)
from lens_possym.papers.b.deposit import single_head_ablations
from lens_possym.papers.b.tasks import DistanceTask

pytestmark = pytest.mark.usefixtures("one_torch_thread")

TASK = DistanceTask(n_ctx=16, max_between=8, max_side=3, n_words=10)


def small(scheme: str, variant: str = "intended", **kw) -> SchemeEncoder:
    cfg = encoder_config_for(TASK, scheme, variant=variant, n_layers=2, n_heads=4, d_model=32,
                             d_head=8, d_ff=32, seed=1, **kw)
    model = SchemeEncoder(cfg).eval()
    with torch.no_grad():  # biases and bias tables away from their zero init
        for name, p in model.named_parameters():
            if name.endswith(("b_Q", "b_K", "b_V", "t5_table")):
                p.normal_(0, 0.5, generator=torch.Generator().manual_seed(7))
    return model


def _toeplitz_error(s: torch.Tensor) -> float:
    """Largest spread of ``s[..., n, m]`` along a diagonal ``n - m = const``."""
    n = s.shape[-1]
    worst = 0.0
    for d in range(-n + 1, n):
        diag = torch.diagonal(s, offset=d, dim1=-2, dim2=-1)
        worst = max(worst, float((diag - diag[..., :1]).abs().max()))
    return worst


@pytest.mark.parametrize("variant", ["intended", "faithful"])
@pytest.mark.parametrize("scheme", SCHEMES)
def test_every_scheme_runs_with_transformerlens_hooks(scheme, variant):
    model = small(scheme, variant)
    tokens = TASK.sample(3).tokens
    logits, cache = model.run_with_cache(tokens)
    assert logits.shape == (3, 16, TASK.n_classes)
    assert torch.equal(logits[:, 0], logits[:, -1]), "the pooled prediction at every position"
    for name, shape in [("blocks.1.attn.hook_pattern", (3, 4, 16, 16)),
                        ("blocks.1.attn.hook_z", (3, 16, 4, 8)),
                        ("blocks.0.attn.hook_result", (3, 16, 4, 32)),
                        ("blocks.1.hook_resid_pre", (3, 16, 32))]:
        assert cache[name].shape == shape
    pattern = cache["blocks.0.attn.hook_pattern"]
    assert torch.allclose(pattern.sum(-1), torch.ones(3, 4, 16))
    real = tokens != 0                            # pads: id 0, at the end
    if model.cfg.pad_mask:                        # faithful MLA (official mla.py)
        assert torch.equal(pattern > 0, real[:, None, None, :].expand_as(pattern))
    else:
        assert (pattern[..., -1] > 0).all(), "bidirectional: the last key is seen by every query"
    summed = cache["blocks.0.attn.hook_result"].sum(2) + model.blocks[0].attn.b_O
    assert torch.allclose(summed, cache["blocks.0.hook_attn_out"], atol=1e-5)


def _constant_content_scores(model: SchemeEncoder, layer: int = 0) -> torch.Tensor:
    """Layer scores when every position holds the same token (content constant)."""
    tokens = torch.full((1, 16), 5)
    _, cache = model.run_with_cache(tokens)
    return cache[f"blocks.{layer}.attn.hook_attn_scores"][0]


@pytest.mark.parametrize("scheme,variant,kw", [
    ("alibi", "intended", {}), ("alibi", "faithful", {}), ("t5", "intended", {}),
    ("t5", "faithful", {}), ("rope", "intended", {}), ("rope", "intended", {"rope_heads": 2}),
    ("rope", "faithful", {"rope_heads": 3}), ("mla", "intended", {}), ("nope", "intended", {}),
])
def test_bias_and_rope_logits_are_toeplitz(scheme, variant, kw):
    scores = _constant_content_scores(small(scheme, variant, **kw))
    assert _toeplitz_error(scores) < 1e-4
    if scheme != "nope":  # and position really enters: not constant
        assert float(scores.std(dim=(-1, -2)).max()) > 1e-3


def test_additive_bias_is_the_schemes_bias():
    for variant in ("intended", "faithful"):
        for scheme in ("alibi", "t5"):
            model = small(scheme, variant)
            ls = model.lens_possym_schemes()[1]
            assert isinstance(ls.scheme, AdditiveBias)
            positions = torch.arange(16)
            expected = ls.scheme.bias(positions, positions)
            assert torch.allclose(model.blocks[1].attn.bias(16).double(), expected, atol=1e-6)
    slopes = small("alibi", "faithful").lens_possym_schemes()[0].scheme.slopes
    assert torch.allclose(slopes, torch.exp(-torch.arange(4.0) / 4).double())


def test_faithful_mla_logits_are_not_toeplitz():
    assert _toeplitz_error(_constant_content_scores(small("mla", "faithful"))) > 1e-2


@pytest.mark.parametrize("scheme,kw", [("rope", {}), ("rope", {"rope_heads": 1}),
                                       ("hybrid", {}), ("mla", {})])
def test_intended_rotations_preserve_norms(scheme, kw):
    model = small(scheme, **kw)
    _, cache = model.run_with_cache(TASK.sample(2).tokens)
    for layer in range(2):
        q, rq = cache[f"blocks.{layer}.attn.hook_q"], cache[f"blocks.{layer}.attn.hook_rot_q"]
        k, rk = cache[f"blocks.{layer}.attn.hook_k"], cache[f"blocks.{layer}.attn.hook_rot_k"]
        assert torch.allclose(q.norm(dim=-1), rq.norm(dim=-1), rtol=1e-5)
        assert torch.allclose(k.norm(dim=-1), rk.norm(dim=-1), rtol=1e-5)
        assert not torch.allclose(q[:, 1:, 0], rq[:, 1:, 0]), "head 0 rotates"
    if kw.get("rope_heads") == 1:
        assert torch.equal(q[:, :, 1:], rq[:, :, 1:]), "heads past rope_heads do not rotate"


def test_faithful_mla_rotation_is_not_norm_preserving():
    x = torch.randn(1, 64, 16, generator=torch.Generator().manual_seed(0))
    ratio = faithful_mla_rotate(x, torch.arange(64)).norm(dim=-1) / x.norm(dim=-1)
    assert float((ratio - 1).abs().max()) > 0.05
    model = small("mla", "faithful")
    _, cache = model.run_with_cache(TASK.sample(2).tokens)
    q, rq = cache["blocks.0.attn.hook_q"], cache["blocks.0.attn.hook_rot_q"]
    assert not torch.allclose(q.norm(dim=-1), rq.norm(dim=-1), rtol=1e-3)


@pytest.mark.parametrize("scheme,variant,kw", [
    ("nope", "intended", {}), ("alibi", "intended", {}), ("t5", "intended", {}),
    ("rope", "intended", {}), ("rope", "intended", {"rope_heads": 2}), ("t5", "faithful", {}),
    ("sinusoidal", "intended", {}),
])
def test_scheme_objects_reproduce_the_attention(scheme, variant, kw):
    """The closed-form cross-logits of the positions/ objects give the model's pattern."""
    model = small(scheme, variant, **kw)
    tokens = TASK.sample(2).tokens
    _, cache = model.run_with_cache(tokens)
    for ls in model.lens_possym_schemes():
        cross = site_cross_logits(model, tokens, ls, list(range(4)), 15, "layer")
        implied = torch.softmax(torch.diagonal(cross, dim1=-2, dim2=-1), -1)
        pattern = cache[ls.pattern_hook][:, :, 15].double()
        assert torch.allclose(implied, pattern, atol=1e-5)
    if scheme == "rope":
        assert isinstance(model.lens_possym_schemes()[0].scheme, HeadwiseRope)


def test_ablating_a_head_whose_output_is_already_zero_changes_nothing():
    model = small("rope")
    tokens = TASK.sample(4).tokens
    with torch.no_grad():
        model.blocks[1].attn.W_V[2] = 0.0
        model.blocks[1].attn.b_V[2] = 0.0
    clean = model(tokens)
    with ablate_heads(model, "1.2", mode="zero"):
        assert torch.equal(model(tokens), clean)
    with ablate_heads(model, "1.1", mode="zero"):
        assert not torch.allclose(model(tokens), clean)


def test_faithful_mla_ablation_zeroes_a_shared_latent_slice():
    model = small("mla", "faithful")          # d_latent 16, d_head 8: heads 0, 1 hit slices
    tokens = TASK.sample(3).tokens
    clean_logits = model(tokens)
    _, clean = model.run_with_cache(tokens)
    with faithful_mla_ablation(model, 0, 0):
        _, hit = model.run_with_cache(tokens)
    z0, z1 = clean["blocks.0.attn.hook_z"], hit["blocks.0.attn.hook_z"]
    assert not torch.allclose(z0[:, :, 1:], z1[:, :, 1:]), "every head changes, not head 0 only"
    assert z1[:, :, 0].abs().max() > 0, "head 0's output is not zeroed"
    with faithful_mla_ablation(model, 0, 3):  # slice 24:32 of a 16-wide latent: empty
        assert torch.equal(model(tokens), clean_logits)
    _, again = model.run_with_cache(tokens)
    assert torch.equal(again["blocks.0.attn.hook_z"], z0), "weights restored on exit"
    intended = small("mla")                   # intended: zeroing hook_z touches head 0 alone
    _, c = intended.run_with_cache(tokens)
    with ablate_heads(intended, "0.0"):
        _, a = intended.run_with_cache(tokens)
    assert torch.equal(a["blocks.0.attn.hook_z"][:, :, 1:], c["blocks.0.attn.hook_z"][:, :, 1:])
    assert torch.equal(a["blocks.0.attn.hook_z"][:, :, 0], torch.zeros_like(z0[:, :, 0]))


def test_faithful_keys_and_values_come_from_the_layer0_input():
    tokens = TASK.sample(2).tokens

    def shift(x, hook):
        return x + 1.0

    for variant, same in (("faithful", True), ("intended", False)):
        model = small("alibi", variant)
        _, clean = model.run_with_cache(tokens)
        with model.hooks(fwd_hooks=[("blocks.1.hook_resid_pre", shift)]):
            _, moved = model.run_with_cache(tokens)
        for name in ("hook_k", "hook_v"):
            unchanged = torch.allclose(clean[f"blocks.1.attn.{name}"],
                                       moved[f"blocks.1.attn.{name}"])
            assert unchanged is same
        assert not torch.allclose(clean["blocks.1.attn.hook_q"], moved["blocks.1.attn.hook_q"])


def test_input_encodings_per_variant():
    assert small("rope", "faithful").cfg.input_encoding == "halves"   # trans.py's RoPE + APE
    assert small("rope", "faithful", rope_heads=4).cfg.input_encoding is None  # partialrope
    assert small("rope").cfg.input_encoding is None
    assert small("hybrid").cfg.input_encoding == "sinusoidal"
    model = small("mla", "faithful")
    assert torch.equal(model.W_pos, torch.zeros_like(model.W_pos)), "official zero init"
    _, cache = small("learned").run_with_cache(TASK.sample(1).tokens)
    assert "hook_pos_embed" in cache


def test_registry_rebuilds_the_model():
    model = small("t5", "faithful")
    again = MODELS[model.kind].from_config(model.cfg.to_dict())
    again.load_state_dict(model.state_dict())
    tokens = TASK.sample(2).tokens
    assert torch.equal(again.eval()(tokens), model(tokens))


@pytest.mark.parametrize("kw", [dict(scheme="xpos"), dict(variant="paper"),
                                dict(scheme="alibi", rope_heads=2), dict(rope_heads=9),
                                dict(d_head=7), dict(n_heads=0)])
def test_bad_configs_raise(kw):
    base = dict(d_vocab=10, n_classes=5, n_ctx=8)
    with pytest.raises(ToyConfigError):
        EncoderConfig(**{**base, **kw})


def test_bad_inputs_raise():
    model = small("nope")
    with pytest.raises(InvalidSelectionError, match="n_ctx"):
        model(torch.zeros(1, 17, dtype=torch.long))
    with pytest.raises(InvalidSelectionError, match="d_vocab"):
        model(torch.full((1, 4), 99))
    with pytest.raises(InvalidSelectionError):
        faithful_mla_ablation(model, 0, 0).__enter__()


@pytest.mark.parametrize("variant", ["intended", "faithful"])
@pytest.mark.parametrize("scheme", SCHEMES)
def test_fused_attention_equals_the_written_out_path(scheme, variant):
    """Without hooks on the scores or pattern the encoder uses one fused attention kernel;
    with one it writes the attention out. Same logits, same gradients."""
    model = small(scheme, variant).double()
    tokens = TASK.sample(4, seed=3).tokens

    def run(hooks):
        model.zero_grad()
        with model.hooks(fwd_hooks=hooks):
            logits = model(tokens)
        logits.square().sum().backward()
        return logits, [p.grad.clone() for p in model.parameters()]

    fused, grads = run([])
    written, grads_w = run([("blocks.1.attn.hook_pattern", lambda x, hook: x),
                            ("blocks.0.attn.hook_attn_scores", lambda x, hook: x)])
    assert torch.allclose(fused, written, atol=1e-12)
    assert all(torch.allclose(a, b, atol=1e-10) for a, b in zip(grads, grads_w))


@pytest.mark.parametrize("scheme,variant", [("rope", "intended"), ("rope", "faithful"),
                                            ("alibi", "faithful"), ("t5", "intended"),
                                            ("learned", "intended"), ("mla", "intended"),
                                            ("mla", "faithful")])
def test_single_head_ablations_equal_ablate_heads_bit_for_bit(scheme, variant):
    """The reused clean pass gives exactly (torch.equal) the logits of a full forward under
    ablate_heads: faithful keys from the layer-0 input, biases, MLA's pad mask included."""
    model = small(scheme, variant)
    tokens = TASK.test_set(24).tokens
    tokens[:3, -5:] = 0                        # pads, which MLA's faithful mask skips
    clean, ablated = single_head_ablations(model, tokens)
    assert ablated.shape == (2, 4) + clean.shape
    with torch.no_grad():
        assert torch.equal(clean, model(tokens)[:, -1])
        for layer in range(2):
            for head in range(4):
                with ablate_heads(model, [(layer, head)], mode="zero"):
                    assert torch.equal(ablated[layer, head], model(tokens)[:, -1])
    with pytest.raises(InvalidSelectionError, match="eval mode"):
        single_head_ablations(model.train(), tokens)


def test_the_official_mla_grid_in_passes_equals_one_pass():
    """ablation_grid(official=True) evaluates in passes of 64: the accuracies of one pass."""
    from lens_possym.papers.b.deposit import ablation_grid
    from lens_possym.training.loop import evaluate

    model = small("mla", "faithful")
    batch = TASK.test_set(150)
    grid = ablation_grid(model, TASK, batch, official=True)
    for layer, head in ((0, 0), (1, 1)):
        with faithful_mla_ablation(model, layer, head):
            assert grid[layer, head] == evaluate(model, TASK, batch).accuracy
