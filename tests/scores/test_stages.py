"""What a whole-model profile costs in operators and host-device synchronisations, per
stage (scores/stages.py), as a regression guard: on a GPU each operator is a kernel launch
and each synchronisation a wait, so a change that adds them per layer slows GPU profiles
even where CPU timings do not move (issue 41). Also: the checks gathered over layers
decide and raise as the per-layer check did, and the bounds follow a CUDA device's free
memory only where left at their defaults."""

from __future__ import annotations

import functools

import pytest
import torch

import lens_possym as lp
from lens_possym.capture import capture_attention_inputs
from lens_possym.decompose import decompose_inputs, pending_check, read_checks
from lens_possym.errors import DecompositionMismatchError
from lens_possym.scores import ScoreConfig, engine, exact, sources
from lens_possym.scores.config import MAX_ELEMENTS, MAX_MATRIX_ELEMENTS
from lens_possym.scores.crosslogits import cross_logit_factors
from lens_possym.scores.exclusion import exclusion_from_factors
from lens_possym.scores.stages import stage_table

#: operators per scored layer of each stage, measured on tiny llama (2 layers, n = 24,
#: torch 2.13 CPU) when the guard was written; "freq" is the GPU's path (the fused
#: function, run eagerly here). A change may add a few: more fails.
OPS_PER_LAYER = {"check": 98, "factors": 78, "swaps": 121, "freq": 211, "exclusion": 121,
                 "finish": 30, "assembly": 94}
PER_LAYER_STAGES = ("check", "factors", "swaps", "freq", "exclusion")


@pytest.fixture(scope="module")
def fused_profile():
    model = lp.tiny_model("llama")
    tokens = torch.randint(1, 100, (1, 24), generator=torch.Generator().manual_seed(0))
    patched = functools.partial(exact.exact_swap_scores, fused=True)   # the GPU's path
    original = sources.exact_swap_scores
    sources.exact_swap_scores = patched
    try:
        lp.swap_scores(model, tokens)                                      # warm-up
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
            lp.swap_scores(model, tokens)
    finally:
        sources.exact_swap_scores = original
    return stage_table(prof.events()), model.cfg.n_layers


def test_no_stage_of_the_per_layer_loop_synchronises(fused_profile):
    table, n_layers = fused_profile
    assert set(PER_LAYER_STAGES) <= set(table), table
    for name in PER_LAYER_STAGES + ("finish", "assembly"):
        assert table[name]["syncs"] == 0, (name, table[name])
    assert table["check"]["calls"] == n_layers      # the check still runs on every layer


def test_operators_per_layer_do_not_grow(fused_profile):
    table, n_layers = fused_profile
    for name, allowed in OPS_PER_LAYER.items():
        per_layer = table[name]["ops"] / n_layers
        assert per_layer <= allowed * 1.1 + 2, (
            f"stage {name}: {per_layer:.1f} operators per layer, was {allowed} (each is a "
            "kernel launch on a GPU): batch it, or raise OPS_PER_LAYER with a reason")


def test_the_gathered_check_decides_as_the_per_layer_one(tiny_by_family):
    for family, model in tiny_by_family.items():
        tokens = torch.randint(1, 100, (2, 12), generator=torch.Generator().manual_seed(3))
        for inputs in capture_attention_inputs(model, tokens).values():
            heads = list(range(inputs.spec.n_heads))
            full = decompose_inputs(inputs, heads)
            pending = pending_check(inputs, heads)
            if full.checked_against is None:
                assert pending.allowed == float("inf")
                continue
            assert float(pending.error) == full.max_abs_error, family       # bit for bit
            read_checks([pending])                                          # passes
            broken = capture_attention_inputs(model, tokens, inputs.layer)[inputs.layer]
            if broken.model_scores is not None:
                broken.model_scores = broken.model_scores + 1.0
            else:
                broken.model_pattern = broken.model_pattern.roll(1, -1)
            with pytest.raises(DecompositionMismatchError) as per_layer:
                decompose_inputs(broken, heads).check()
            with pytest.raises(DecompositionMismatchError) as gathered:
                read_checks([pending_check(inputs, heads), pending_check(broken, heads)])
            assert str(gathered.value) == str(per_layer.value)


def test_a_range_of_keys_gives_the_exclusion_of_the_tensor_of_them(tiny_by_family):
    model = tiny_by_family["llama"]
    tokens = torch.randint(1, 100, (2, 14), generator=torch.Generator().manual_seed(5))
    inputs = capture_attention_inputs(model, tokens, 0)[0]
    factors = cross_logit_factors(inputs, [0, 1])
    for bound in (None, 50):          # the whole matrix, and pieces
        factors.max_matrix_elements, factors._full = bound, None
        by_tensor = exclusion_from_factors(factors, torch.arange(2, 13))
        by_range = exclusion_from_factors(factors, range(2, 13), trusted=True)
        for a, b in zip(by_tensor, by_range):
            for name in ("var", "s_pos", "s_sym"):
                assert torch.equal(getattr(a, name), getattr(b, name))


def test_bounds_follow_a_cuda_devices_free_memory_only_at_their_defaults(monkeypatch):
    config = ScoreConfig()
    assert engine.device_bounds(config, "cpu") is config
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (64 << 30, 80 << 30))
    wide = engine.device_bounds(config, "cuda")
    assert wide.max_matrix_elements == (64 << 30) // 4 // 8            # a quarter, float64
    assert wide.max_elements == (64 << 30) // 4 // 8 // 16            # 16 live chunks
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (1 << 40, 1 << 41))
    assert engine.device_bounds(config, "cuda").max_elements == engine.DEVICE_MAX_ELEMENTS
    mine = ScoreConfig(max_elements=1000, max_matrix_elements=5000)
    assert engine.device_bounds(mine, "cuda") == mine                  # set: kept
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (1 << 20, 80 << 30))
    small = engine.device_bounds(config, "cuda")                       # never below the CPU's
    assert (small.max_elements, small.max_matrix_elements) == (MAX_ELEMENTS,
                                                               MAX_MATRIX_ELEMENTS)
