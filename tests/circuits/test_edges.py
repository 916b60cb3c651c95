"""Edge attribution: each edge's score equals the derivative of the metric when only that
receiver input sees the sender's output difference (the model's own backward pass through
attention), its positional and content parts add up, and unsupported models are refused."""

from __future__ import annotations

import pytest
import torch

import lens_possym as lp
from lens_possym.circuits import Edge, as_edge_scores, graph_edges
from lens_possym.circuits.edges import EdgeAttribution, edge_attribution
from lens_possym.errors import InvalidSelectionError, UnsupportedModelError
from lens_possym.resolved import resolve

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _pair(model, seed=1, batch=2, pos=6):
    g = torch.Generator().manual_seed(seed)
    clean = torch.randint(1, model.cfg.d_vocab, (batch, pos), generator=g)
    corr = clean.clone()
    corr[:, 2] = torch.randint(1, model.cfg.d_vocab, (batch,), generator=g)
    return clean, corr


def _metric(logits):
    return logits[:, -1, 3] - logits[:, -1, 5]


def _sender_diff(model, clean_cache, corr_cache, sender):
    if sender.kind == "embed":
        name = "blocks.0.hook_resid_pre"
        return clean_cache[name] - corr_cache[name]
    name = f"blocks.{sender.layer}.attn.hook_z"
    dz = clean_cache[name][:, :, sender.head] - corr_cache[name][:, :, sender.head]
    return dz @ model.W_O[sender.layer, sender.head].detach()


def _derivative(model, corr, clean_cache, corr_cache, edge, dims=None):
    """d/dε metric, where only ``edge.receiver``'s ``edge.channel`` (its rows of hook_q/k/v,
    optionally only ``dims``) reads ``ln1(x + ε Δout_sender)``: the model's own backward."""
    layer, head = edge.receiver.layer, edge.receiver.head
    spec = resolve(model).specs[layer]
    delta = _sender_diff(model, clean_cache, corr_cache, edge.sender)
    x = corr_cache[f"blocks.{layer}.ln1.hook_in"]
    ln = model.blocks[layer].ln1
    w = {"q": model.W_Q, "k": model.W_K, "v": model.W_V}[edge.channel][layer, head].detach()
    eps = torch.zeros((), requires_grad=True)
    name = {"q": spec.q_hook, "k": spec.k_hook, "v": f"blocks.{layer}.attn.hook_v"}[edge.channel]

    def hook(act, hook=None):
        change = (ln(x + eps * delta) - ln(x)) @ w  # [b, p, d_head]
        if dims is not None:
            mask = torch.zeros(change.shape[-1])
            mask[dims] = 1
            change = change * mask
        out = act.clone()
        out[:, :, head] = act[:, :, head] + change
        return out

    with torch.enable_grad(), model.hooks(fwd_hooks=[(name, hook)]):
        value = _metric(model(corr)).sum()
        (grad,) = torch.autograd.grad(value, eps)
    return float(grad)


@pytest.mark.parametrize("family", ["neox", "llama"])
def test_edge_scores_are_the_receivers_own_derivative(family):
    model = lp.tiny_model(family)
    clean, corr = _pair(model)
    result = edge_attribution(model, corr, clean, _metric, positional=[0, 1])
    _, cc = model.run_with_cache(clean)
    _, rc = model.run_with_cache(corr)
    spec = resolve(model).specs[1]
    mha = spec.n_kv_heads == spec.n_heads
    channels = ("q", "k", "v") if mha else ("q",)  # a GQA key is shared: no one-head hook
    for name in ["L0H1->L1H2", "embed->L1H0", "L0H3->L1H1"]:
        for c in channels:
            edge = Edge.parse(f"{name}.{c}")
            want = _derivative(model, corr, cc, rc, edge)
            i = result.edges.index(edge.name)
            got = float(result.values[i].sum())  # the derivative of the prompts' sum
            assert got == pytest.approx(want, rel=1e-3, abs=1e-6), edge.name
            assert result.score(edge) == pytest.approx(got / corr.shape[0])
            if c in ("q", "k"):
                dims = [d for f in (0, 1) for d in spec.dims_of(f)]
                pos = _derivative(model, corr, cc, rc, edge, dims)
                assert float(result.positional[i].sum()) == pytest.approx(pos, rel=1e-3,
                                                                          abs=1e-6)
    both = result.positional + result.content
    qk = ~torch.isnan(both[:, 0])
    torch.testing.assert_close(both[qk], result.values[qk], rtol=1e-5, atol=1e-6)
    assert qk.any() and (~qk).any()
    share = result.positional_share[qk]
    known = ~torch.isnan(share)  # nan: both parts 0 (a sender the corruption leaves alone)
    assert known.any() and ((share[known] >= 0) & (share[known] <= 1)).all()


def test_logit_edges_sum_and_the_graph():
    """Every edge of the graph, in its order; an edge into the logits is the sender's
    difference times the gradient at the final residual, so the logit edges of all senders
    add up to the final residual's difference times that gradient."""
    model = lp.tiny_model("qwen2")
    clean, corr = _pair(model)
    result = edge_attribution(model, corr, clean, _metric)
    assert result.edges == [e.name for e in graph_edges(model)]
    last = f"blocks.{model.cfg.n_layers - 1}.hook_resid_post"
    eps = torch.zeros((), requires_grad=True)
    _, cc = model.run_with_cache(clean, names_filter=[last])
    _, rc = model.run_with_cache(corr, names_filter=[last])
    with torch.enable_grad(), model.hooks(fwd_hooks=[
            (last, lambda act, hook=None: act + eps * (cc[last] - rc[last]))]):
        (grad,) = torch.autograd.grad(_metric(model(corr)).sum(), eps)
    logit_edges = [i for i, e in enumerate(result.edges) if e.endswith("->logits")]
    assert float(result.values[logit_edges].sum()) == pytest.approx(float(grad), rel=1e-3)
    scores = as_edge_scores(result)
    assert scores.edges == result.edges and scores.method == "attribution"


def test_round_trip_and_refusals(tmp_path):
    model = lp.tiny_model("llama")
    clean, corr = _pair(model)
    result = edge_attribution(model, corr, clean, _metric, positional={"L1H0": "high"})
    back = EdgeAttribution.load(result.save(tmp_path / "e.json"))
    torch.testing.assert_close(back.values, result.values)
    assert back.positional_freqs["L1H0"] == result.positional_freqs["L1H0"]
    assert result.positional_freqs["L1H1"] == ()  # not named: no split
    with pytest.raises(InvalidSelectionError, match="differ in shape"):
        edge_attribution(model, corr, clean[:, :4], _metric)
    with pytest.raises(UnsupportedModelError, match="post-attention norms"):
        edge_attribution(lp.tiny_model("gemma3"), corr, clean, _metric)
