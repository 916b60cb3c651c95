"""Head ablation at hook_z: per query head (GQA-safe), zero and mean, hooks always removed."""

from __future__ import annotations

import pytest
import torch
from tests.helpers import hooks_attached
from hypothesis import given, settings
from hypothesis import strategies as st

import lens_possym as lp
from lens_possym.papers import a as paper_a
from lens_possym.errors import InvalidSelectionError, LensPossymError
from lens_possym.interventions import (
    ablate_heads,
    ablate_heads_hook,
    ablate_heads_hooks,
    head_means,
)


@pytest.fixture(scope="module")
def llama64():
    """Tiny llama in float64: 2 layers, 4 query heads in 2 KV groups (GQA)."""
    return lp.tiny_model("llama", dtype=torch.float64, seed=1)


@pytest.fixture(scope="module")
def tokens():
    return torch.randint(5, 120, (3, 10), generator=torch.Generator().manual_seed(0))


def _toy(n_layers=1, seed=0, d_mlp=None):
    cfg = paper_a.ToyConfig(d_vocab=16, n_ctx=12, n_layers=n_layers, n_heads=3, d_head=8,
                       d_mlp=d_mlp, seed=seed)
    return paper_a.ToyTransformer(cfg).double()


def _z_after(model, tokens, layer, ablation_hooks):
    """hook_z of ``layer`` as the ablation left it (a capture hook placed after it)."""
    seen = {}

    def keep(z, hook):
        seen["z"] = z.detach().clone()
        return z

    name = f"blocks.{layer}.attn.hook_z"
    with torch.no_grad():
        model.run_with_hooks(tokens, fwd_hooks=ablation_hooks + [(name, keep)])
    return seen["z"]


def test_zero_ablating_a_silent_head_changes_nothing(llama64, tokens):
    """A head whose W_O slice is zero contributes nothing, so ablating it is a no-op."""
    o_proj = llama64.blocks[1].attn.o.original_component
    d_head = llama64.cfg.d_head
    saved = o_proj.weight.detach().clone()
    try:
        with torch.no_grad():
            o_proj.weight[:, 2 * d_head:3 * d_head] = 0
            clean = llama64(tokens)
            for mode in ("zero", "mean"):
                with ablate_heads(llama64, "1.2", mode, reference=tokens):
                    ablated = llama64(tokens)
                torch.testing.assert_close(ablated, clean, rtol=0, atol=1e-12)
            with ablate_heads(llama64, "1.1"):  # a live head does change the output
                assert (llama64(tokens) - clean).abs().max() > 1e-3
    finally:
        with torch.no_grad():
            o_proj.weight.copy_(saved)


def test_zero_value_head_on_the_toy_model_is_a_no_op():
    toy = _toy(n_layers=2, d_mlp=8)
    toks = torch.randint(0, 16, (4, 12), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        toy.blocks[0].attn.W_V[1] = 0
        clean = toy(toks)
        with ablate_heads(toy, "0.1"):
            assert torch.equal(toy(toks), clean)
        with ablate_heads(toy, "0.0"):
            assert not torch.allclose(toy(toks), clean)


def test_gqa_one_query_head_only(llama64, tokens):
    """Zeroing query head 0 leaves head 1 (same KV group) and the others bit for bit."""
    specs = lp.rope_specs(llama64)
    assert specs[0].n_kv_heads < specs[0].n_heads and specs[0].kv_head(0) == specs[0].kv_head(1)
    clean = _z_after(llama64, tokens, 0, [])
    hooks = ablate_heads_hooks(llama64, "0.0", "zero")
    z = _z_after(llama64, tokens, 0, hooks)
    assert torch.equal(z[:, :, 1:], clean[:, :, 1:])
    assert torch.count_nonzero(z[:, :, 0]) == 0
    assert torch.count_nonzero(clean[:, :, 0]) > 0


def test_hook_refuses_a_kv_head_tensor():
    hook = ablate_heads_hook(0, "zero", n_heads=4)
    with pytest.raises(InvalidSelectionError, match="4 head"):
        hook(torch.ones(1, 3, 2, 16))  # a hook_v / hook_k tensor of 2 KV heads


def test_positions_restrict_the_ablation(llama64, tokens):
    clean = _z_after(llama64, tokens, 1, [])
    z = _z_after(llama64, tokens, 1, ablate_heads_hooks(llama64, "1.3", positions=[-1, 2]))
    changed = (z != clean).any(-1).any(0)  # [pos, head]
    assert changed[:, 3].nonzero().flatten().tolist() == [2, 9]
    assert not changed[:, :3].any()


def test_hooks_removed_when_the_body_raises(llama64, tokens):
    before = hooks_attached(llama64)
    with pytest.raises(RuntimeError):
        with ablate_heads(llama64, "0.*", "mean", reference=tokens):
            assert hooks_attached(llama64) > before
            raise RuntimeError("user code")
    assert hooks_attached(llama64) == before


@settings(max_examples=12, deadline=None)
@given(seed=st.integers(0, 10_000), head=st.integers(0, 2), position=st.integers(0, 11))
def test_mean_ablation_keeps_the_batch_mean_output(seed, head, position):
    """One attention layer with a linear read-out: logits = (x + Σ_h z_h W_O^h) W_U. With
    the per-position mean taken over the evaluated batch itself, ablating head h at one
    position p changes each prompt's logits at p, but not their batch mean (the mean of
    z_h − E[z_h] is 0), and nothing at other positions (one layer: position p feeds
    only its own output). Zero ablation has no such invariant."""
    toy = _toy(seed=seed)
    toks = torch.randint(0, 16, (5, 12), generator=torch.Generator().manual_seed(seed))
    with torch.no_grad():
        clean = toy(toks)
        means = head_means(toy, toks, per_position=True)
        with ablate_heads(toy, (0, head), "mean", means=means, positions=position):
            mean_ablated = toy(toks)
        with ablate_heads(toy, (0, head), "zero", positions=position):
            zeroed = toy(toks)
    others = [p for p in range(12) if p != position]
    assert torch.equal(mean_ablated[:, others], clean[:, others])
    torch.testing.assert_close(mean_ablated[:, position].mean(0), clean[:, position].mean(0),
                               rtol=0, atol=1e-12)
    assert (mean_ablated[:, position] - clean[:, position]).abs().max() > 1e-6
    assert (zeroed[:, position].mean(0) - clean[:, position].mean(0)).abs().max() > 1e-6


def test_pooled_means_skip_position_zero_and_match_the_cache(llama64, tokens):
    means = head_means(llama64, tokens, layers=[1])
    _, cache = llama64.run_with_cache(tokens, names_filter=["blocks.1.attn.hook_z"])
    expected = cache["blocks.1.attn.hook_z"][:, 1:].mean((0, 1))
    torch.testing.assert_close(means.z[1], expected, rtol=0, atol=1e-14)
    assert set(means.z) == {1} and not means.per_position and means.n_prompts == 3
    from_cache = head_means(llama64, cache, layers=1)
    torch.testing.assert_close(from_cache.z[1], expected, rtol=0, atol=0)


@pytest.mark.parametrize("call, match", [
    (lambda m, t: ablate_heads_hooks(m, "0.0", "unrotate"), "unknown head ablation mode"),
    (lambda m, t: ablate_heads_hooks(m, "0.7"), "unknown head 0.7"),
    (lambda m, t: ablate_heads_hooks(m, "5.0"), "layer 5 out of range"),
    (lambda m, t: ablate_heads_hooks(m, "0.0", "mean"), "needs reference"),
    (lambda m, t: head_means(m, t[:, :1]), "at least 2 tokens"),
    (lambda m, t: head_means(m, {"x": 1}, layers=[0]), "lacks"),
    (lambda m, t: ablate_heads_hooks(torch.nn.Linear(2, 2), "0.0"), "hook_dict"),
])
def test_bad_inputs_raise(llama64, tokens, call, match):
    with pytest.raises(LensPossymError, match=match):
        call(llama64, tokens)


def test_per_position_means_shorter_than_the_run(llama64, tokens):
    means = head_means(llama64, tokens[:, :4], per_position=True)
    with pytest.raises(InvalidSelectionError, match="per-position means cover 4"):
        with ablate_heads(llama64, "0.0", "mean", means=means):
            llama64(tokens)
