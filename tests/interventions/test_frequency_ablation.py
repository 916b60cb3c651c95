"""Frequency ablation: exact no-ops, exact term removal, unrotate = angle 0, GQA safety."""

from __future__ import annotations

import pytest
import torch

import lens_possym as lp
from lens_possym.decompose import apply_softcap
from lens_possym.errors import InvalidSelectionError
from lens_possym.interventions import (
    ablate_frequencies,
    ablate_frequencies_hook,
    ablate_frequencies_hooks,
    frequency_means,
    permute_content,
)
from lens_possym.rope import to_pairs
from tests.helpers import PROMPT, hooks_attached


def _layer(model) -> int:
    """A layer that sees every key (no sliding window): the last one on the tiny models."""
    specs = lp.rope_specs(model)
    return max(s.layer for s in specs if not s.window)


def _names(spec):
    return [f"blocks.{spec.layer}.attn.hook_z", spec.pattern_hook, spec.q_hook, spec.k_hook,
            f"blocks.{spec.layer}.attn.hook_v"]


def _run(model, tokens, names, hooks=()):
    with model.hooks(fwd_hooks=list(hooks)):
        logits, cache = model.run_with_cache(tokens, names_filter=names)
    return logits, cache


def _direct(model, tokens, spec, edited: dict[int, list[int]], how: str):
    """Pattern and z of layer ``spec.layer`` computed directly in float64 from clean q/k/v.

    ``edited`` maps query heads to frequency ids that are removed (``how="zero"``) or
    taken at angle 0 (``how="unrotate"``).
    """
    inputs = lp.capture_attention_inputs(model, tokens, spec.layer, query_positions=None)[spec.layer]
    fl = lp.decompose.decompose_inputs(inputs, dtype=torch.float64)
    terms = fl.terms.clone()
    q, k = inputs.q.double(), inputs.k_for_heads().double()
    q_pairs, _ = to_pairs(q, spec)
    k_pairs, _ = to_pairs(k, spec)
    angle0 = torch.einsum("bqhfc,bkhfc->bhqkf", q_pairs, k_pairs) * spec.scale
    for head, freqs in edited.items():
        for f in freqs:
            if how == "zero":
                terms[:, head, :, :, f] = 0
            elif f < spec.n_rot:
                terms[:, head, :, :, f] = angle0[:, head, :, :, f]
    scores = apply_softcap(terms.sum(-1), spec.softcap).masked_fill(~fl.mask, float("-inf"))
    pattern = torch.softmax(scores, -1)
    _, cache = model.run_with_cache(tokens, names_filter=[f"blocks.{spec.layer}.attn.hook_v"])
    v = cache[f"blocks.{spec.layer}.attn.hook_v"][:, :, spec.kv_index()].double()
    return pattern, torch.einsum("bhqk,bkhd->bqhd", pattern, v)


# ---- no-ops -------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["zero", "mean", "unrotate"])
def test_ablating_no_frequency_is_refused_not_a_silent_no_op(tiny, mode):
    """``freqs=[]`` would change nothing without a word (issue 27): it is refused, at every
    entry point, and no hook is left behind."""
    tokens = tiny.to_tokens(PROMPT)
    spec = lp.rope_spec(tiny, 1)
    means = frequency_means(tiny, tokens) if mode == "mean" else None
    before = hooks_attached(tiny)
    with pytest.raises(InvalidSelectionError, match="no frequency ids"):
        ablate_frequencies_hook(spec, range(spec.n_heads), [], mode, means=means)
    with pytest.raises(InvalidSelectionError, match="no frequency ids"):
        with ablate_frequencies(tiny, {"1.0": [], "0.*": []}, mode, reference=tokens):
            pass
    with pytest.raises(InvalidSelectionError, match="no frequency ids"):
        ablate_frequencies_hooks(tiny, "1.0", mode, freqs=torch.zeros(0, dtype=torch.long),
                                 reference=tokens)
    assert hooks_attached(tiny) == before


def test_mean_over_the_run_itself_is_the_identity(tiny):
    """Per-position means over a batch of one prompt are that prompt: an exact no-op."""
    tokens = tiny.to_tokens(PROMPT)
    clean = tiny(tokens)
    with ablate_frequencies(tiny, "1.*", "mean", freqs="all", side="qk", reference=tokens,
                            per_position=True):
        assert torch.equal(tiny(tokens), clean)


def test_unrotating_the_tail_alone_is_the_identity(tiny_by_family):
    model = tiny_by_family["neox"]
    tokens = model.to_tokens(PROMPT)
    spec = lp.rope_spec(model, 1)
    clean = model(tokens)
    assert spec.has_tail
    with ablate_frequencies(model, "1.*", "unrotate", freqs=[spec.n_freqs - 1]):
        assert torch.equal(model(tokens), clean)  # θ = 0: nothing to rotate back
    with ablate_frequencies(model, "1.*", "unrotate", freqs=[0]):
        assert not torch.equal(model(tokens), clean)


# ---- exactness ------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["zero", "unrotate"])
def test_ablation_matches_a_direct_computation(tiny, mode):
    """Whole KV groups: the model's pattern and z under the hooks equal a float64 direct
    computation in which the chosen terms are removed or taken at angle 0 (≤ 1e-5)."""
    tokens = tiny.to_tokens(PROMPT)
    spec = lp.rope_spec(tiny, _layer(tiny))
    freqs = list(range(0, spec.n_freqs, 2))
    group = list(range(spec.group_size))  # query heads of KV head 0
    edited = {h: freqs for h in group}
    hooks = ablate_frequencies_hooks(tiny, {(spec.layer, h): freqs for h in group}, mode)
    _, cache = _run(tiny, tokens, _names(spec), hooks)
    pattern, z = _direct(tiny, tokens, spec, edited, mode)
    assert torch.allclose(cache[spec.pattern_hook].double(), pattern, atol=1e-5)
    assert torch.allclose(cache[f"blocks.{spec.layer}.attn.hook_z"].double(), z, atol=1e-5)


@pytest.mark.parametrize("family", ["llama", "qwen2", "gemma3"])
@pytest.mark.parametrize("mode", ["unrotate", "mean"])
def test_partial_kv_group_edits_only_the_chosen_head(tiny_by_family, family, mode):
    """GQA: a key edit for one query head leaves the other heads of its KV group unchanged,
    bit for bit, and gives the chosen head what a direct computation gives."""
    model = tiny_by_family[family]
    tokens = model.to_tokens(PROMPT)
    spec = lp.rope_spec(model, _layer(model))
    assert spec.group_size > 1
    freqs = list(range(spec.n_freqs))
    clean_logits, clean = _run(model, tokens, _names(spec))
    kwargs = {"side": "qk", "reference": model.to_tokens("Dave likes pink . Eve likes gold . w1 w2")} \
        if mode == "mean" else {}
    hooks = ablate_frequencies_hooks(model, {(spec.layer, 0): freqs}, mode, **kwargs)
    names = [name for name, _ in hooks]
    assert f"blocks.{spec.layer}.attn.hook_z" in names  # recomputed, the shared key untouched
    logits, cache = _run(model, tokens, _names(spec), hooks)
    z_name = f"blocks.{spec.layer}.attn.hook_z"
    others = [h for h in range(spec.n_heads) if h != 0]
    assert torch.equal(cache[z_name][:, :, others], clean[z_name][:, :, others])
    assert torch.equal(cache[spec.k_hook], clean[spec.k_hook])
    assert not torch.allclose(cache[z_name][:, :, 0], clean[z_name][:, :, 0], atol=1e-3)
    assert not torch.equal(logits, clean_logits)
    if mode == "unrotate":
        _, z = _direct(model, tokens, spec, {0: freqs}, "unrotate")
        assert torch.allclose(cache[z_name][:, :, 0].double(), z[:, :, 0], atol=1e-5)


def test_a_whole_kv_group_is_edited_at_the_key_hook(tiny_by_family):
    model = tiny_by_family["llama"]
    spec = lp.rope_spec(model, 1)
    whole = ablate_frequencies_hooks(model, "1.0,1.1", "unrotate", freqs="0:2")
    assert [n for n, _ in whole] == [spec.q_hook, spec.k_hook]
    # different frequency sets within one group cannot share the key: recomputed
    mixed = ablate_frequencies_hooks(model, {"1.0": "0:2", "1.1": "0:3"}, "unrotate")
    assert "blocks.1.attn.hook_z" in [n for n, _ in mixed]


def test_zero_removes_exactly_the_chosen_terms(tiny):
    """Zeroing q pairs leaves Σ_{f not ablated} λ_f as the head's scores; other heads and the
    keys are untouched bit for bit."""
    tokens = tiny.to_tokens(PROMPT)
    spec = lp.rope_spec(tiny, 1)
    clean_fl = lp.frequency_logits(tiny, tokens, 1, query_positions=None)
    drop = [0, 2, spec.n_freqs - 1]
    _, clean = _run(tiny, tokens, _names(spec))
    with ablate_frequencies(tiny, {"1.1": drop}):
        fl = lp.frequency_logits(tiny, tokens, 1, query_positions=None)
        _, cache = tiny.run_with_cache(tokens, names_filter=_names(spec))
    assert torch.all(fl.terms[:, 1, ..., drop] == 0)
    kept = [f for f in range(spec.n_freqs) if f not in drop]
    assert torch.allclose(fl.terms[:, 1, ..., kept], clean_fl.terms[:, 1, ..., kept], atol=1e-6)
    assert fl.max_abs_error <= 1e-4  # and those terms are what the model computed
    z = "blocks.1.attn.hook_z"
    others = [h for h in range(spec.n_heads) if h != 1]
    assert torch.equal(cache[z][:, :, others], clean[z][:, :, others])
    assert torch.equal(cache[spec.k_hook], clean[spec.k_hook])


def test_pooled_mean_replaces_the_pairs_by_the_reference_mean(tiny_by_family):
    model = tiny_by_family["gemma3"]  # q/k-norm hooks, [batch, head, pos, d_head]
    spec = lp.rope_spec(model, 1)
    reference = model.to_tokens(["Dave likes pink . Eve likes gold", "Bob likes tea . Ann eats rice"])
    means = frequency_means(model, reference, [1])
    captured = lp.capture_attention_inputs(model, reference, 1, query_positions=None)[1]
    assert torch.allclose(means.q[1][0, 0], captured.q[:, 1:].mean((0, 1)), atol=1e-6)
    tokens = model.to_tokens(PROMPT)
    seen = {}
    with ablate_frequencies(model, {"1.2": [3]}, "mean", means=means):
        with model.hooks(fwd_hooks=[(spec.q_hook, lambda t, hook: seen.setdefault("q", t))]):
            model(tokens)
    q = seen["q"].transpose(1, 2)  # -> [batch, pos, head, d_head]
    dims = spec.dims_of(3)
    assert torch.equal(q[0, :, 2][:, dims], means.q[1][0, 0, 2, dims].expand(q.shape[1], 2))


# ---- unrotate makes a head symbolic ---------------------------------------------------------


def test_unrotating_every_frequency_makes_a_head_exactly_symbolic(tiny):
    """Moving content (rows of the layer input) with positions kept: an unrotated head's
    last-row logits move with the content (λ'_p = λ_perm[p]), a RoPE head's do not."""
    tokens = tiny.to_tokens(PROMPT)
    spec = lp.rope_spec(tiny, _layer(tiny))
    n = tokens.shape[1]
    perm = torch.arange(n)
    perm[1:-1] = torch.randperm(n - 2, generator=torch.Generator().manual_seed(3)) + 1

    def last_row(hooks=(), permuted=False):
        with tiny.hooks(fwd_hooks=list(hooks)):
            if permuted:
                with permute_content(tiny, spec.layer, perm):
                    return lp.frequency_logits(tiny, tokens, spec.layer).scores()[:, :, 0]
            return lp.frequency_logits(tiny, tokens, spec.layer).scores()[:, :, 0]

    hooks = ablate_frequencies_hooks(tiny, f"{spec.layer}.*", "unrotate")
    a, b = last_row(hooks), last_row(hooks, permuted=True)
    assert torch.allclose(b, a[..., perm], atol=1e-5)
    a0, b0 = last_row(), last_row(permuted=True)  # control: RoPE on, not symbolic
    assert not torch.allclose(b0, a0[..., perm], atol=1e-3)


@pytest.mark.parametrize("family", ["llama", "gemma3", "gptj"])
def test_unrotated_heads_score_s_sym_one(tiny_by_family, family):
    """Paper C's swap procedure (re-run the block per swap) under the hooks: s_SYM = 1."""
    model = tiny_by_family[family]
    tokens = model.to_tokens(PROMPT)
    clean = lp.swap_scores(model, tokens, layers=[1], method="rerun", per_frequency=False,
                           exclusion=False)
    assert (clean.sym[1] < 0.999).any()
    with ablate_frequencies(model, "1.*", "unrotate"):
        scores = lp.swap_scores(model, tokens, layers=[1], method="rerun", per_frequency=False,
                                exclusion=False)
    assert torch.allclose(scores.sym[1], torch.ones(4, dtype=scores.sym.dtype), atol=1e-6)


@pytest.mark.parametrize("family", ["llama", "gemma3"])
def test_one_unrotated_head_of_a_group_is_symbolic_too(tiny_by_family, family):
    """A symbolic head's output at a fixed query is invariant under moving key content."""
    model = tiny_by_family[family]
    tokens = model.to_tokens(PROMPT)
    spec = lp.rope_spec(model, _layer(model))
    n = tokens.shape[1]
    perm = torch.arange(n)
    perm[:-1] = torch.randperm(n - 1, generator=torch.Generator().manual_seed(5))
    z_name = f"blocks.{spec.layer}.attn.hook_z"

    def z_last(hooks, permuted):
        with model.hooks(fwd_hooks=hooks):
            if permuted:
                with permute_content(model, spec.layer, perm):
                    _, cache = model.run_with_cache(tokens, names_filter=[z_name])
            else:
                _, cache = model.run_with_cache(tokens, names_filter=[z_name])
        return cache[z_name][:, -1]

    hooks = ablate_frequencies_hooks(model, {(spec.layer, 1): "all"}, "unrotate")
    assert torch.allclose(z_last(hooks, True)[:, 1], z_last(hooks, False)[:, 1], atol=1e-5)
    assert not torch.allclose(z_last([], True)[:, 1], z_last([], False)[:, 1], atol=1e-3)


# ---- hooks come off ---------------------------------------------------------------------


def test_hooks_are_gone_after_the_block_also_when_it_raises(tiny_by_family):
    model = tiny_by_family["llama"]
    tokens = model.to_tokens(PROMPT)
    mine = []
    model.blocks[0].attn.hook_q.add_hook(lambda t, hook: mine.append(1) or t)  # a user's hook
    try:
        before = hooks_attached(model)
        with ablate_frequencies(model, "1.0", "unrotate", freqs="low"):
            assert hooks_attached(model) > before
        assert hooks_attached(model) == before
        with pytest.raises(RuntimeError, match="boom"):
            with ablate_frequencies(model, {"1.0": "0:2", "1.2": "all"}, "unrotate"):
                model(tokens)
                raise RuntimeError("boom")
        assert hooks_attached(model) == before
        model(tokens)
        assert mine  # the user's hook is still there
    finally:
        model.blocks[0].attn.hook_q.remove_hooks()
    assert hooks_attached(model) == 0


# ---- bad input ------------------------------------------------------------------------------


def test_bad_input_gets_a_clear_error(tiny_by_family):
    model = tiny_by_family["llama"]  # 2 layers, 4 heads, 8 frequency ids
    cases = [
        (dict(selection="1.7"), "unknown head 1.7: layer 1 has 4 query heads"),
        (dict(selection="5.0"), "layer 5 out of range: the model has 2 layers"),
        (dict(selection="1-0"), "write heads as LAYER.HEAD"),
        (dict(selection={"1.0": [8]}), r"frequency id \[8\] out of range for layer 1: it has 8"),
        (dict(selection={"1.0": "0:16"}), "'0:16' out of range for layer 1"),
        (dict(selection={"1.0": "fast"}), "frequency id 'fast' must be an integer"),
        (dict(selection="1.0", mode="scramble"), "unknown ablation mode 'scramble'; choose one of zero, mean, unrotate"),
        (dict(selection="1.0", mode="unrotate", side="q"), "acts on queries and keys together"),
        (dict(selection="1.0", mode="mean"), "needs reference"),
        (dict(selection="1.0", side="v"), "unknown side 'v'"),
    ]
    for kwargs, message in cases:
        selection = kwargs.pop("selection")
        with pytest.raises(InvalidSelectionError, match=message):
            ablate_frequencies_hooks(model, selection, **kwargs)
    assert hooks_attached(model) == 0
    spec = lp.rope_spec(model, 1)
    with pytest.raises(InvalidSelectionError, match="key head 3 out of range"):
        ablate_frequencies_hook(spec, [3], [0], side="k")  # only 2 KV heads
    with pytest.raises(InvalidSelectionError, match="attach this hook at"):
        hook = ablate_frequencies_hook(spec, [0], [0])
        model.run_with_hooks(model.to_tokens(PROMPT), fwd_hooks=[(spec.k_hook, hook)])
    long_run = model.to_tokens(PROMPT + " w1 w2 w3")
    with pytest.raises(InvalidSelectionError, match="at least as long"):
        with ablate_frequencies(model, "1.0", "mean", reference=model.to_tokens(PROMPT),
                                per_position=True):
            model(long_run)
