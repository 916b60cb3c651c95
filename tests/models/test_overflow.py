"""Half precision fails honestly: a model whose activations overflow its dtype is refused
at load time, naming the dtype and the layer (lens_possym.models.overflow)."""

from __future__ import annotations

import pytest
import torch

import lens_possym as lp
from lens_possym.errors import NonFiniteResultError
from lens_possym.models.overflow import check_activation_range


def _overflowing(dtype):
    hf_model, tokenizer = lp.models.tiny.tiny_hf_model("llama", dtype=dtype)
    with torch.no_grad():  # layer 1's MLP writes entries far past float16's 65,504
        hf_model.model.layers[1].mlp.down_proj.weight.fill_(3e4)
    return hf_model, tokenizer


def test_a_float16_overflow_is_refused_at_load_naming_dtype_and_layer():
    with pytest.raises(NonFiniteResultError, match=r"overflows float16: its residual stream is "
                       r"inf/nan after layer 1 .*65,504.*bfloat16 \(float32's range\) or "
                       r"float32"):
        lp.from_hf(*_overflowing(torch.float16))


def test_the_same_weights_load_in_bfloat16_and_float32():
    for dtype in (torch.bfloat16, torch.float32):
        model = lp.from_hf(*_overflowing(dtype))
        assert model.cfg.n_layers == 2


def test_the_probe_reports_each_layers_range_in_half_precision():
    model = lp.tiny_model("llama", dtype=torch.float16)
    largest = check_activation_range(model)
    assert sorted(largest) == [0, 1] and all(0 < v < 65504 for v in largest.values())
    assert check_activation_range(lp.tiny_model("llama")) == {}  # float32: not probed


@pytest.mark.slow
def test_gemma_in_float16_is_refused_with_the_overflow_named():
    with pytest.raises(NonFiniteResultError, match=r"gemma-3-270m overflows float16: .*after "
                       r"layer 7 .*after layer 6 is \d"):
        lp.load_model("gemma-3-270m", dtype=torch.float16, device="cpu")


@pytest.mark.slow
def test_gemma_in_bfloat16_unrotates_part_of_a_kv_group():
    """Head 5.1 shares its key head with 5.0, 5.2, 5.3: editing its keys recomputes it from
    its own queries and keys, checked against the model's hook_z at bfloat16's tolerance
    (it was refused, 0.19 off against 0.12, while that check was done in float32)."""
    model = lp.load_model("gemma-3-270m", dtype=torch.bfloat16, device="cpu")
    task = lp.binding_task(model, n_prompts=2, n_pairs=4)
    with torch.no_grad():
        before = model(task.tokens)
        with lp.ablate_frequencies(model, {"5.1": "high"}, mode="unrotate"):
            after = model(task.tokens)
    assert after.isfinite().all() and not torch.equal(after, before)
