"""Batched patching grids: identities, one-at-a-time equality, TransformerLens's grids."""

from __future__ import annotations

import pytest
import torch
from transformer_lens import patching as tl_patching

import lens_possym as lp
from lens_possym.errors import InvalidSelectionError
from lens_possym.interventions import (PatchGridConfig, PatchingGrid, generic_patch_grid,
                                       patch_attn_out, patch_frequencies, patch_grid,
                                       patch_head_out_all_pos, patch_head_out_by_pos, patch_heads,
                                       patch_mlp_out, patch_resid_pre, patch_resid_pre_all_pos)
from lens_possym.tasks import binding_pairs
from tests.helpers import hooks_attached


@pytest.fixture(scope="module")
def setup():
    model = lp.tiny_model("llama")
    pairs = binding_pairs(model, None, "swap_query", n_prompts=5, n_pairs=3)
    metric = pairs.metric(model)
    _, clean = model.run_with_cache(pairs.clean_tokens)
    return model, pairs, metric, clean


def _full(model, tokens, metric, **kwargs):
    with torch.no_grad():
        return metric(model(tokens, **kwargs))


def test_patching_a_head_from_the_clean_run_into_itself_changes_nothing(tiny):
    """Every cell is found to change nothing and holds the unpatched run's values; on the
    hook path (every cell patched, nothing skipped) bit for bit the same as passes with
    nothing patched."""
    pairs = binding_pairs(tiny, None, "swap_query", n_prompts=3, n_pairs=3)
    _, clean = tiny.run_with_cache(pairs.clean_tokens)
    metric = pairs.logit_diff

    def untouched(activation, index, source):
        return activation

    for axes, grid_fn, per_pass in ((("layer", "head"), patch_head_out_all_pos, 5),
                                    (("layer", "pos", "head"), patch_head_out_by_pos, 7)):
        grid = grid_fn(tiny, pairs.clean_tokens, clean, metric, patches_per_pass=per_pass)
        assert grid.info["cells_unchanged"] == grid.mean().numel() and grid.n_passes == 0
        assert torch.equal(grid.values, grid.baseline.expand_as(grid.values))
        unpatched = generic_patch_grid(tiny, pairs.clean_tokens, clean, metric, untouched, "z",
                                       axes, patches_per_pass=per_pass)
        assert torch.equal(grid.values, unpatched.values)
    assert hooks_attached(tiny) == 0


def test_grid_entries_equal_patching_one_head_at_a_time(setup):
    model, pairs, metric, clean = setup
    grid = patch_head_out_all_pos(model, pairs.corrupted_tokens, clean, metric,
                                  patches_per_pass=3)
    assert grid.shape == (2, 4) and grid.values.shape == (2, 4, 5)
    prefix = grid.info["prefix_reused"]  # the question's positions and after: checked once
    assert prefix == int(pairs.changed_positions().min()) and grid.n_passes == 3 + 1
    assert torch.allclose(grid.baseline, _full(model, pairs.corrupted_tokens, metric), atol=1e-5)
    for layer in range(2):
        for head in range(4):
            with patch_heads(model, clean, (layer, head)):
                by_hand = _full(model, pairs.corrupted_tokens, metric)
            assert torch.allclose(grid.values[layer, head], by_hand, atol=1e-5)
    tl = tl_patching.get_act_patch_attn_head_out_all_pos(
        model, pairs.corrupted_tokens, clean, lambda logits: metric(logits).mean())
    assert torch.allclose(grid.mean(), tl, atol=1e-5)


def test_skipping_blocks_and_reusing_the_prefix_change_nothing(tiny):
    """Each pass runs only the blocks from its first patched layer, and only the positions
    a patch changes (the shared prefix comes from a KV cache): the same numbers as whole
    passes, on every family (those whose caches do not support it fall back)."""
    from lens_possym.experiments._passes import blocks_from, layer_list

    pairs = binding_pairs(tiny, None, "swap_query", n_prompts=3, n_pairs=3)
    _, clean = tiny.run_with_cache(pairs.clean_tokens)
    metric = pairs.logit_diff
    fast = patch_head_out_by_pos(tiny, pairs.corrupted_tokens, clean, metric,
                                 patches_per_pass=6)
    slow = patch_head_out_by_pos(tiny, pairs.corrupted_tokens, clean, metric,
                                 patches_per_pass=6, reuse_prefix=False)
    torch.testing.assert_close(fast.values, slow.values, atol=1e-5, rtol=0, equal_nan=True)
    assert fast.info["cells_unchanged"] >= 2 * 4 * int(pairs.changed_positions().min())
    if fast.info["prefix_reused"]:
        assert fast.info["prefix_reused"] == int(pairs.changed_positions().min())
    tokens = pairs.corrupted_tokens
    with torch.no_grad():
        _, cache = tiny.run_with_cache(tokens, names_filter=["blocks.1.hook_resid_pre"])
        whole = tiny(cache["blocks.1.hook_resid_pre"], start_at_layer=1)
        with blocks_from(tiny, 1) as skipped:
            part = tiny(cache["blocks.1.hook_resid_pre"], start_at_layer=1)
    assert skipped and layer_list(tiny) is not None and fast.info["blocks_skipped"]
    assert torch.equal(part, whole)
    assert hooks_attached(tiny) == 0


@pytest.mark.parametrize("ours, theirs", [
    (patch_head_out_by_pos, tl_patching.get_act_patch_attn_head_out_by_pos),
    (patch_resid_pre, tl_patching.get_act_patch_resid_pre),
    (patch_attn_out, tl_patching.get_act_patch_attn_out),
    (patch_mlp_out, tl_patching.get_act_patch_mlp_out),
])
def test_every_named_grid_equals_transformer_lens(setup, ours, theirs):
    model, pairs, metric, clean = setup
    grid = ours(model, pairs.corrupted_tokens, clean, metric, patches_per_pass=11)
    tl = theirs(model, pairs.corrupted_tokens, clean, lambda logits: metric(logits).mean())
    assert grid.shape == tuple(tl.shape)
    assert torch.allclose(grid.mean(), tl, atol=1e-5)
    result = tl_patching.generic_activation_patch(  # per prompt, as TL keeps them
        model, pairs.corrupted_tokens, clean, metric, tl_patching.layer_pos_patch_setter,
        "resid_pre", index_axis_names=("layer", "pos"), reduce="none", baseline=True) \
        if ours is patch_resid_pre else None
    if result is not None:
        assert torch.allclose(grid.values, result.values, atol=1e-5)
        assert torch.allclose(grid.stderr(), result.stderr(), atol=1e-5)


def test_patching_every_layer_input_restores_the_clean_run(setup):
    model, pairs, metric, clean = setup
    grid = patch_resid_pre_all_pos(model, pairs.corrupted_tokens, clean, metric)
    assert grid.shape == (2,)
    assert torch.allclose(grid.values, _full(model, pairs.clean_tokens, metric).expand(2, -1),
                          atol=1e-5)
    assert torch.allclose(grid.mean(), torch.ones(2), atol=1e-5)


def test_frequency_grid_entries_equal_patching_one_frequency_at_a_time(setup):
    model, pairs, metric, clean = setup
    grid = patch_grid(model, pairs, site="frequencies", layers=[1], heads=[0, 3], freqs="0:3,7",
                      patches_per_pass=4)
    assert grid.shape == (2, 4, 8) and grid.axis_names == ["layer", "head_index", "freq"]
    finite = grid.mean().isfinite()
    assert finite.sum() == 8 and finite[1, [0, 3]][:, [0, 1, 2, 7]].all()
    for head in (0, 3):
        for freq in (0, 2, 7):
            with patch_frequencies(model, clean, {(1, head): [freq]}):
                by_hand = _full(model, pairs.corrupted_tokens, metric)
            assert torch.allclose(grid.values[1, head, freq], by_hand, atol=1e-5)
    keys = patch_grid(model, pairs, site="frequencies", side="k", layers=[0], freqs=[1])
    assert keys.shape == (2, 2, 8)  # KV heads, as TransformerLens counts heads for "k"


def test_patch_grid_directions_sites_and_the_result(setup, tmp_path):
    model, pairs, metric, clean = setup
    grid = patch_grid(model, pairs)
    direct = patch_head_out_all_pos(model, pairs.corrupted_tokens, clean, metric)
    assert torch.allclose(grid.values, direct.values, atol=1e-6)
    assert torch.allclose(grid.source_baseline.mean(), torch.tensor(1.0), atol=1e-5)
    noised = patch_grid(model, pairs, direction="noise", site="attn_out", per_position=True,
                        layers=[1])
    assert noised.shape == (2, pairs.clean_tokens.shape[1]) and noised.mean()[0].isnan().all()
    assert torch.allclose(noised.baseline.mean(), torch.tensor(1.0), atol=1e-5)
    by_pos = patch_grid(model, pairs, per_position=True, layers=[0], heads=[1])
    assert by_pos.shape == (2, pairs.clean_tokens.shape[1], 4)
    assert by_pos.mean().isfinite().sum() == pairs.clean_tokens.shape[1]
    # the result: statistics, TL's PatchingResult, files, tables
    unc = grid.uncertainty()
    assert torch.equal(unc.mean, grid.mean()) and torch.equal(unc.se, grid.stderr())
    tl = grid.to_patching_result()
    assert torch.allclose(tl.stderr(), grid.stderr().flatten())
    low, high = tl.bootstrap_ci(seed=0)
    ours_low, ours_high = grid.bootstrap_ci(seed=0)
    assert torch.equal(low, ours_low.flatten()) and torch.equal(high, ours_high.flatten())
    assert torch.allclose(tl.permutation_pvalue(), grid.permutation_pvalue().flatten().float())
    path = grid.save(tmp_path / "patch.json")
    again = PatchingGrid.load(path)
    assert torch.equal(again.values, grid.values) and again.config == grid.config
    assert again.info["pairs"]["corruption"] == "swap_query"
    frame = grid.to_dataframe()
    assert len(frame) == 8 and {"layer", "head", "value", "value_se", "se", "ci_low", "ci_high",
                                "effect"} <= set(frame)
    row = frame[(frame["layer"] == 1) & (frame["head"] == 2)].iloc[0]
    effect = grid.effect()[1, 2].double()
    assert row["effect"] == pytest.approx(float(effect.mean()), abs=1e-6)
    assert row["se"] == pytest.approx(float(effect.std() / 5 ** 0.5), abs=1e-6)
    assert row["value_se"] == pytest.approx(float(grid.stderr()[1, 2]), abs=1e-6)
    assert len(grid.to_dataframe(per_prompt=True)) == 40
    index, effect, se = grid.top(1)[0]
    assert effect == pytest.approx(float(grid.effect()[index].mean()))
    assert "PatchingGrid(values=[2, 4, 5] float32" in repr(grid) and len(repr(grid)) < 400
    assert grid.label((1, 2)) == "1.2" and by_pos.label((0, 3, 1)) == "0.1 pos 3"


def test_bad_grids(setup):
    model, pairs, metric, clean = setup
    with pytest.raises(InvalidSelectionError, match="one value per prompt"):
        patch_head_out_all_pos(model, pairs.corrupted_tokens, clean,
                               lambda logits: metric(logits).mean())
    with pytest.raises(InvalidSelectionError, match="source cache lacks blocks.0.attn.hook_z"):
        patch_head_out_all_pos(model, pairs.corrupted_tokens, {}, metric)
    with pytest.raises(InvalidSelectionError, match="source blocks.0.attn.hook_z has shape"):
        patch_head_out_all_pos(model, pairs.corrupted_tokens[:, :-1],
                               {k: v for k, v in clean.items()}, metric)
    with pytest.raises(InvalidSelectionError, match="unknown patch site 'neurons'"):
        PatchGridConfig(site="neurons")
    with pytest.raises(InvalidSelectionError, match="unknown direction"):
        PatchGridConfig(direction="backwards")
    with pytest.raises(InvalidSelectionError, match="freqs applies to site='frequencies'"):
        PatchGridConfig(freqs="low")
    with pytest.raises(InvalidSelectionError, match="patches_per_pass must be a positive"):
        generic_patch_grid(model, pairs.corrupted_tokens, clean, metric,
                           tl_patching.layer_head_vector_patch_setter, "z", ("layer", "head"),
                           patches_per_pass=0)
    with pytest.raises(InvalidSelectionError, match="first must be 'layer'"):
        generic_patch_grid(model, pairs.corrupted_tokens, clean, metric,
                           tl_patching.layer_head_vector_patch_setter, "z", ("head", "layer"))
