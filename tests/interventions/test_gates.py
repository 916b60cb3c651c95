"""Frequency gates: exact scaling of each term, fixed masks = zero ablation, gradients flow."""

from __future__ import annotations

import pytest
import torch

import lens_possym as lp
from lens_possym.errors import InvalidSelectionError
from lens_possym.interventions import FrequencyGate, FrequencyGates, ablate_frequencies
from tests.helpers import PROMPT, hooks_attached


def test_an_open_raw_gate_changes_nothing_bit_for_bit(tiny):
    tokens = tiny.to_tokens(PROMPT)
    clean = tiny(tokens)
    gates = FrequencyGates(tiny, kind="raw")
    with tiny.hooks(fwd_hooks=gates.fwd_hooks()):
        assert torch.equal(tiny(tokens), clean)
    assert hooks_attached(tiny) == 0


def test_a_zero_mask_is_zero_ablation(tiny):
    tokens = tiny.to_tokens(PROMPT)
    spec = lp.rope_spec(tiny, 1)
    mask = torch.ones(spec.n_heads, spec.n_freqs)
    mask[2, :3] = 0
    mask[0, -1] = 0
    gate = FrequencyGate.from_mask(spec, mask)
    assert not list(gate.parameters())  # fixed: nothing to train
    with tiny.hooks(fwd_hooks=gate.fwd_hooks()):
        gated = tiny(tokens)
    with ablate_frequencies(tiny, {"1.2": [0, 1, 2], "1.0": [spec.n_freqs - 1]}):
        ablated = tiny(tokens)
    assert torch.equal(gated, ablated)


def test_a_gate_scales_each_term_exactly(tiny_by_family):
    model = tiny_by_family["gemma3"]
    tokens = model.to_tokens(PROMPT)
    spec = lp.rope_spec(model, 1)
    values = torch.rand(spec.n_heads, spec.n_freqs, generator=torch.Generator().manual_seed(0))
    clean = lp.frequency_logits(model, tokens, 1, query_positions=None)
    gate = FrequencyGate(spec, kind="raw", init=values)
    with model.hooks(fwd_hooks=gate.fwd_hooks()):
        gated = lp.frequency_logits(model, tokens, 1, query_positions=None)
    expected = clean.terms * values[None, :, None, None, :]
    assert torch.allclose(gated.terms, expected, atol=1e-6)
    assert gated.max_abs_error <= 1e-4


def test_key_side_gate_has_one_row_per_kv_head(tiny_by_family):
    model = tiny_by_family["llama"]
    spec = lp.rope_spec(model, 0)
    gate = FrequencyGate(spec, side="k", kind="raw", init=0.5)
    assert gate.gate_values().shape == (spec.n_kv_heads, spec.n_freqs)
    assert gate.hook_name == spec.k_hook
    x = torch.randn(2, 5, spec.n_kv_heads, spec.d_head)
    assert torch.equal(gate(x), x * 0.5)


def test_sigmoid_gates_learn_an_ablation(tiny_by_family):
    """Training only the gates to reproduce the output of a zero ablation lowers the loss
    and closes the ablated gates more than the others."""
    model = tiny_by_family["qwen2"]
    tokens = model.to_tokens(PROMPT)
    with torch.no_grad(), ablate_frequencies(model, {"1.0": "0:4"}):
        target = model(tokens)
    gates = FrequencyGates(model, layers=[1], init=0.5)
    assert gates.gate_values().shape == (1, 4, lp.rope_spec(model, 1).n_freqs)
    opt = torch.optim.Adam(gates.parameters(), lr=0.3)
    losses = []
    for _ in range(15):
        with model.hooks(fwd_hooks=gates.fwd_hooks()):
            loss = (model(tokens) - target).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    model.zero_grad(set_to_none=True)
    assert losses[-1] < 0.2 * losses[0]
    values = gates.gate_values()[0]
    assert values[0, :4].max() < values[0, 4:].min()


def test_gradients_flow_through_the_model(tiny_by_family):
    model = tiny_by_family["llama"]
    tokens = model.to_tokens(PROMPT)
    gate = FrequencyGate(lp.rope_spec(model, 1), init=0.9)
    with model.hooks(fwd_hooks=gate.fwd_hooks()):
        loss = model(tokens, return_type="loss")
    loss.backward()
    model.zero_grad(set_to_none=True)
    grad = gate.weight.grad
    assert grad is not None and grad.shape == (4, 8)
    assert torch.isfinite(grad).all() and grad.abs().sum() > 0


def test_bad_gates(tiny_by_family):
    spec = lp.rope_spec(tiny_by_family["llama"], 0)
    with pytest.raises(InvalidSelectionError, match="unknown gate kind 'hard'"):
        FrequencyGate(spec, kind="hard")
    with pytest.raises(InvalidSelectionError, match=r"needs a float or a tensor of shape \(4, 8\)"):
        FrequencyGate(spec, init=torch.ones(3, 8))
    with pytest.raises(InvalidSelectionError, match="unknown side 'qk'"):
        FrequencyGate(spec, side="qk")
