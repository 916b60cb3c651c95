"""Attribution patching: equal to the gradient times the difference, equal to real patching
where the model is linear after the patch (and, with the query-key fix, where only the
softmax is not), and bad inputs refused."""

from __future__ import annotations

import pytest
import torch

import lens_possym as lp
from lens_possym.circuits.attribution import (Attribution, AttributionConfig, attribute,
                                              compare_to_grid, spearman, top_overlap)
from lens_possym.errors import InvalidSelectionError
from lens_possym.interventions import patch_frequencies_hook, patch_heads_hooks
from lens_possym.resolved import resolve

pytestmark = [pytest.mark.usefixtures("one_torch_thread"),
              # freezing a norm's scale takes the bridge's reconstructed path (it says so)
              pytest.mark.filterwarnings("ignore:A forward hook edited hook_scale")]


def _pair(model, seed=1, batch=3, pos=7):
    g = torch.Generator().manual_seed(seed)
    clean = torch.randint(1, model.cfg.d_vocab, (batch, pos), generator=g)
    corr = clean.clone()
    corr[:, 2] = torch.randint(1, model.cfg.d_vocab, (batch,), generator=g)
    corr[:, 4] = torch.randint(1, model.cfg.d_vocab, (batch,), generator=g)
    return clean, corr


def _metric(logits):
    return logits[:, -1, 3] - logits[:, -1, 5]


def test_heads_equal_gradient_times_difference(tiny):
    """Each cell equals d/dε metric(z_run + ε Δ_cell) at 0, by autograd on a scalar ε per
    cell (an implementation sharing nothing with the module's)."""
    clean, corr = _pair(tiny)
    result = attribute(tiny, corr, clean, _metric, per_position=True)
    assert result.axis_names == ["layer", "pos", "head"]
    assert result.n_passes == 3
    _, cache = tiny.run_with_cache(clean)
    specs = resolve(tiny).specs
    for layer, pos, head in [(0, 2, 1), (0, 5, 0), (tiny.cfg.n_layers - 1, 6, 2)]:
        name = f"blocks.{layer}.attn.hook_z"
        for b in range(clean.shape[0]):
            eps = torch.zeros((), requires_grad=True)

            def hook(z, hook=None):
                out = z.clone()
                delta = (cache[name][b, pos, head] - z[b, pos, head]).detach()
                out[b, pos, head] = z[b, pos, head] + eps * delta
                return out

            with torch.enable_grad(), tiny.hooks(fwd_hooks=[(name, hook)]):
                value = _metric(tiny(corr))[b]
                (grad,) = torch.autograd.grad(value, eps)
            got = float(result.linear[layer, pos, head, b])
            assert got == pytest.approx(float(grad), rel=1e-4, abs=1e-5), (layer, pos, head, b)
    # all-position cells are the per-position cells summed
    whole = attribute(tiny, corr, clean, _metric)
    torch.testing.assert_close(whole.linear, result.linear.sum(1), rtol=1e-4, atol=1e-5)
    assert specs  # resolved once more: nothing left attached
    assert not any(h.fwd_hooks for h in tiny.hook_dict.values() if hasattr(h, "fwd_hooks"))


def _freeze_after(model, corr):
    """Hooks freezing, at the corrupted run's values, every norm scale of the last layer
    and the final norm, and the last MLP's output: after the last layer's attention
    pattern the model is then affine, and the logit-difference metric linear."""
    last = model.cfg.n_layers - 1
    names = [n for n in model.hook_dict
             if (n.startswith(f"blocks.{last}.") and n.endswith("hook_scale")
                 and "q_norm" not in n and "k_norm" not in n and ".ln1." not in n)
             or n == "ln_final.hook_scale" or n == f"blocks.{last}.hook_mlp_out"]
    with torch.no_grad():
        _, cache = model.run_with_cache(corr, names_filter=names)
    return [(n, (lambda act, hook=None, n=n: cache[n].clone())) for n in names]


def test_linear_estimate_equals_patching_where_the_model_is_linear(tiny):
    """With everything after the last layer's heads frozen affine, patching a last-layer
    head's output changes the metric by exactly the linear estimate."""
    clean, corr = _pair(tiny)
    last = tiny.cfg.n_layers - 1
    freeze = _freeze_after(tiny, corr)
    _, cache = tiny.run_with_cache(clean)
    with tiny.hooks(fwd_hooks=freeze):
        result = attribute(tiny, corr, clean, _metric, layers=[last])
        with torch.no_grad():
            base = _metric(tiny(corr))
        for head in range(tiny.cfg.n_heads):
            hooks = patch_heads_hooks(tiny, cache, [f"{last}.{head}"])
            with torch.no_grad(), tiny.hooks(fwd_hooks=hooks):
                real = _metric(tiny(corr)) - base
            torch.testing.assert_close(result.linear[last, head], real, rtol=1e-4, atol=1e-5)
    assert torch.isnan(result.linear[:last]).all()  # layers not asked for


@pytest.mark.parametrize("side", ["q", "k"])
def test_qk_fix_equals_patching_when_only_the_softmax_is_nonlinear(tiny, side):
    """Past the last layer's pattern the model is frozen affine: the QK-fixed estimate of
    patching one frequency pair of a query head (of a KV head's key, as the grid patches
    it) equals real patching; the linear one does not in general."""
    clean, corr = _pair(tiny)
    last = tiny.cfg.n_layers - 1
    spec = resolve(tiny).specs[last]
    freeze = _freeze_after(tiny, corr)
    hook = spec.q_hook if side == "q" else spec.k_hook
    _, cache = tiny.run_with_cache(clean, names_filter=[hook])
    n = spec.n_heads if side == "q" else spec.n_kv_heads
    worst_linear = 0.0
    with tiny.hooks(fwd_hooks=freeze):
        result = attribute(tiny, corr, clean, _metric, site="frequencies", side=side,
                           layers=[last])
        assert result.qk_fixed is not None
        with torch.no_grad():
            base = _metric(tiny(corr))
        for head in sorted({0, n - 1}):  # a few cells: each is a forward pass
            for f in sorted({0, spec.n_freqs // 2, spec.n_freqs - 1}):
                # the grid's cell: a KV head's key pair for every query head of its group
                hooks = [(hook, patch_frequencies_hook(spec, cache[hook], head, [f], side=side))]
                with torch.no_grad(), tiny.hooks(fwd_hooks=hooks):
                    real = _metric(tiny(corr)) - base
                torch.testing.assert_close(result.qk_fixed[last, head, f], real,
                                           rtol=1e-4, atol=2e-5)
                worst_linear = max(worst_linear,
                                   float((result.linear[last, head, f] - real).abs().max()))
    assert worst_linear > 1e-4  # the softmax is not linear: the fix is doing something
    assert result.saturation.shape == (tiny.cfg.n_layers, tiny.cfg.n_heads)
    assert ((result.saturation[last] >= 0) & (result.saturation[last] <= 1)).all()


def test_result_round_trips_and_compares(tmp_path):
    model = lp.tiny_model("llama")
    clean, corr = _pair(model)
    result = attribute(model, corr, clean, _metric, site="frequencies")
    back = Attribution.load(result.save(tmp_path / "a.json"))
    torch.testing.assert_close(back.qk_fixed, result.qk_fixed, equal_nan=True)
    assert back.config == result.config
    assert isinstance(result.to_dataframe().shape[0], int)
    same = compare_to_grid(result.effect(), result.effect(), k=5)
    assert same["spearman_large"] == pytest.approx(1.0) and same["top_overlap"] == 5
    assert spearman(torch.tensor([1., 2, 3]), torch.tensor([3., 2, 1])) == pytest.approx(-1.0)
    assert top_overlap(torch.tensor([5., 0, -4]), torch.tensor([1., 0, 2]), 2) == 2
    with pytest.raises(InvalidSelectionError, match="differ"):
        compare_to_grid(result.effect(), result.effect()[0])


def test_bad_inputs_refused():
    model = lp.tiny_model("llama")
    clean, corr = _pair(model)
    with pytest.raises(InvalidSelectionError, match="differ in shape"):
        attribute(model, corr, clean[:, :5], _metric)
    with pytest.raises(InvalidSelectionError, match="one value per prompt"):
        attribute(model, corr, clean, lambda l: _metric(l).mean())
    with pytest.raises(InvalidSelectionError, match="no gradient"):
        attribute(model, corr, clean, lambda l: _metric(l).detach())
    with pytest.raises(InvalidSelectionError, match="unknown attribution site"):
        AttributionConfig(site="mlp")
    with pytest.raises(InvalidSelectionError, match="per_position"):
        AttributionConfig(site="frequencies", per_position=True)
    with pytest.raises(InvalidSelectionError, match="saturation_threshold"):
        AttributionConfig(saturation_threshold=1.5)
    with pytest.raises(InvalidSelectionError, match="direction"):
        AttributionConfig(direction="sideways")
    with pytest.raises(InvalidSelectionError, match="no setting"):
        attribute(model, corr, clean, _metric, sites="heads")
