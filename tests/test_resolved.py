"""Resolve once (lens_possym/resolved.py): a public function reads the model's RoPE specs
once per call, whatever it calls below; given a Resolved it reads nothing again and gives
what the raw model gives; an edit between calls is seen by the next call."""

from __future__ import annotations

import pytest
import torch

import lens_possym as lp
import lens_possym.resolved as resolved_module
from lens_possym.interventions import (Intervention, InterventionSpec, band_sweep,
                                       binding_metrics, compare_with_random_heads,
                                       frequency_means, patch_grid)
from lens_possym.positions import schemes, toeplitz_magnitudes
from lens_possym.resolved import Resolved, model_of, resolve
from lens_possym.tasks import binding_pairs, binding_task
from tests.helpers import PROMPT


@pytest.fixture(scope="module")
def llama():
    return lp.tiny_model("llama", dtype=torch.float64)


@pytest.fixture(scope="module")
def task(llama):
    return binding_task(llama, n_prompts=3, n_pairs=3, seed=1)


@pytest.fixture
def reads(monkeypatch):
    """How many times the model's specs were read (through Resolved, the one reader)."""
    count = {"specs": 0}
    real = resolved_module.rope_specs

    def counting(model, **kwargs):
        count["specs"] += 1
        return real(model, **kwargs)

    monkeypatch.setattr(resolved_module, "rope_specs", counting)
    return count


def _calls(task) -> dict:
    """Public entry points that reach several lower ones (capture, hook factories, means)."""
    tokens = task.tokens
    metric = binding_metrics(task)
    mean = Intervention("ablate_frequencies", {"1.0": "low"}, mode="mean")
    return {
        "frequency_logits": lambda m: lp.frequency_logits(m, tokens, 1),
        "frequency_norms": lambda m: lp.frequency_norms(m, tokens),
        "toeplitz_magnitudes": lambda m: toeplitz_magnitudes(m, tokens, layers=[0, 1]),
        "band_sweep (mean)": lambda m: band_sweep(m, tokens, metric, layers=[1], heads=[0],
                                                  mode="mean", progress=False),
        "compare_with_random_heads": lambda m: compare_with_random_heads(
            m, tokens, metric, "1.0", n_random=1, bands=("low",), progress=False),
        "patch_grid (frequencies)": lambda m: patch_grid(
            m, binding_pairs(model_of(m), task, corruption="swap_query"), site="frequencies",
            layers=(1,), heads=(0,), freqs="0:2"),
        "InterventionSpec.hooks (mean)": lambda m: InterventionSpec((mean, mean)).hooks(
            m, reference=tokens),
        "frequency_means": lambda m: frequency_means(m, tokens),
    }


CALLS = ["frequency_logits", "frequency_norms", "toeplitz_magnitudes", "band_sweep (mean)",
         "compare_with_random_heads", "patch_grid (frequencies)",
         "InterventionSpec.hooks (mean)", "frequency_means"]


@pytest.mark.parametrize("name", CALLS)
def test_a_public_function_reads_the_specs_once_per_call(llama, task, reads, name):
    call = _calls(task)[name]
    call(llama)
    assert reads["specs"] == 1, f"{name} read the model's specs {reads['specs']} times"
    resolved = resolve(llama)
    resolved.specs
    call(resolved)
    assert reads["specs"] == 2, f"{name} read the specs of a Resolved model again"


def test_a_resolved_model_gives_what_the_raw_model_gives(llama, task):
    metric = binding_metrics(task)
    kwargs = dict(layers=[1], heads=[0, 1], mode="mean", progress=False)
    raw = band_sweep(llama, task.tokens, metric, **kwargs)
    done = band_sweep(resolve(llama), task.tokens, metric, **kwargs)
    for name in raw.values:
        assert torch.equal(raw.values[name].nan_to_num(), done.values[name].nan_to_num())
    a = lp.frequency_logits(llama, PROMPT, 1)
    b = lp.frequency_logits(resolve(llama), PROMPT, 1)
    assert torch.equal(a.terms, b.terms)


def test_a_rope_models_schemes_are_made_from_the_specs_read_once(reads):
    model = lp.tiny_model("qwen2")
    resolved = resolve(model)
    assert [ls.scheme.spec for ls in resolved.schemes] == resolved.specs
    assert reads["specs"] == 1
    assert [ls.q_hook for ls in schemes(model)] == [ls.q_hook for ls in resolved.schemes]


def test_an_edit_between_calls_is_seen_by_the_next_call():
    """A Resolved belongs to one call; the next call resolves again and sees the edit."""
    model = lp.tiny_model("llama")
    before = lp.capture_attention_inputs(model, PROMPT, 0)[0].spec.scale
    model.blocks[0].attn.original_component.scaling = 0.5
    after = lp.capture_attention_inputs(model, PROMPT, 0, model_scores=False)[0].spec.scale
    assert after == 0.5 != before
    kept = Resolved(model)
    assert resolve(kept) is kept and model_of(kept) is model and model_of(model) is model
