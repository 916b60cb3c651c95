"""Band sweeps: every entry equals the ablation done by hand; shapes, bands, metrics."""

from __future__ import annotations

import pytest
import torch

import lens_possym as lp
from lens_possym.errors import InvalidSelectionError
from lens_possym.interventions import ablate_frequencies, band_sweep, binding_metrics, resolve_bands
from lens_possym.tasks import binding_task, evaluate_binding
from tests.helpers import hooks_attached


@pytest.fixture(scope="module")
def llama_task():
    model = lp.tiny_model("llama")
    return model, binding_task(model, n_prompts=4, n_pairs=3, seed=2)


def _by_hand(model, task, layer, head, ids, mode, **kwargs):
    metrics = binding_metrics(task)
    with torch.no_grad(), ablate_frequencies(model, {(layer, head): ids}, mode, **kwargs):
        logits = model(task.tokens)
    return {name: float(fn(logits)) for name, fn in metrics.items()}


@pytest.mark.parametrize("mode", ["zero", "unrotate"])
def test_every_entry_equals_the_ablation_by_hand(llama_task, mode):
    model, task = llama_task
    sweep = band_sweep(model, task.tokens, binding_metrics(task), mode=mode, progress=False)
    n_layers, n_heads = 2, 4
    for name in ("logit_diff", "accuracy", "candidate_accuracy"):
        assert sweep.values[name].shape == (n_layers, n_heads, 3)
    assert sweep.band_names == ["high", "mid", "low"]
    assert sweep.bands[1] == [[0, 1, 2], [3, 4, 5], [6, 7]]
    for layer in range(n_layers):
        for head in range(n_heads):
            for b, ids in enumerate(sweep.bands[layer]):
                expected = _by_hand(model, task, layer, head, ids, mode)
                for name, value in expected.items():
                    assert sweep.values[name][layer, head, b] == pytest.approx(value, abs=1e-5)
    base = evaluate_binding(model, task)
    assert sweep.baseline["logit_diff"] == pytest.approx(base.logit_diff, abs=1e-6)
    assert sweep.baseline["accuracy"] == pytest.approx(base.accuracy)
    assert torch.allclose(sweep.effect("logit_diff"),
                          sweep.values["logit_diff"] - base.logit_diff, atol=1e-5)
    assert hooks_attached(model) == 0


def test_a_partial_sweep_leaves_the_rest_nan_and_takes_any_bands(llama_task):
    model, task = llama_task
    metric = binding_metrics(task)["logit_diff"]
    sweep = band_sweep(model, task.tokens, metric, layers=[1], heads=[2],
                       bands={"fast": "0:2", "slow": [7]}, progress=False)
    values = sweep.values["metric"]
    assert torch.isnan(values[0]).all() and torch.isnan(values[1, [0, 1, 3]]).all()
    assert sweep.band_names == ["fast", "slow"]
    assert values[1, 2, 1] == pytest.approx(_by_hand(model, task, 1, 2, [7], "zero")["logit_diff"],
                                            abs=1e-5)
    top = sweep.top(2)
    assert len(top) == 2 and {t[:2] for t in top} == {(1, 2)}


def test_mean_mode_and_models_without_start_at_layer(llama_task):
    """A model that is not a bridge (here a proxy hiding it, as a toy model would be) gets
    full forward passes: same numbers."""
    model, task = llama_task
    reference = binding_task(model, n_prompts=4, n_pairs=3, seed=9).tokens
    specs = lp.rope_specs(model)

    class Toy:
        def __getattr__(self, name):
            if name == "original_model":
                raise AttributeError(name)
            return getattr(model, name)

        def lens_possym_rope_specs(self):
            return specs

        def __call__(self, *args, **kwargs):
            return model(*args, **kwargs)

    metric = binding_metrics(task)["logit_diff"]
    a = band_sweep(model, task.tokens, metric, layers=[1], mode="mean", reference=reference,
                   progress=False)
    b = band_sweep(Toy(), task.tokens, metric, layers=[1], mode="mean", reference=reference,
                   progress=False)
    assert torch.allclose(a.values["metric"][1], b.values["metric"][1], atol=1e-5)
    assert a.values["metric"][1, 0, 0] == pytest.approx(
        _by_hand(model, task, 1, 0, a.bands[1][0], "mean", reference=reference)["logit_diff"],
        abs=1e-5)


def test_bad_sweeps(llama_task):
    model, task = llama_task
    metric = binding_metrics(task)["logit_diff"]
    spec = lp.rope_spec(model, 0)
    with pytest.raises(InvalidSelectionError, match="cannot split 8 frequency ids into 9 bands"):
        resolve_bands(spec, 9)
    with pytest.raises(InvalidSelectionError, match=r"head \[4\] out of range"):
        band_sweep(model, task.tokens, metric, heads=[4], progress=False)
    with pytest.raises(InvalidSelectionError, match="must return a scalar or one value per prompt"):
        band_sweep(model, task.tokens, lambda logits: logits[:, -1, :2], layers=[0],
                   progress=False)
    with pytest.raises(InvalidSelectionError, match="unknown ablation mode"):
        band_sweep(model, task.tokens, metric, mode="shuffle", layers=[0], progress=False)
    assert hooks_attached(model) == 0


def test_compare_with_random_heads_matches_by_hand(llama_task):
    from lens_possym.interventions import compare_with_random_heads

    model, task = llama_task
    reference = binding_task(model, n_prompts=4, n_pairs=3, seed=9).tokens
    result = compare_with_random_heads(model, task.tokens, binding_metrics(task), "1.0,1.2",
                                       bands=["low", "0:2"], modes=["zero", "mean"], n_random=2,
                                       seed=3, reference=reference, progress=False)
    assert result.heads == [(1, 0), (1, 2)]
    assert len(result.random_heads) == 2 and all(len(s) == 2 for s in result.random_heads)
    again = compare_with_random_heads(model, task.tokens, binding_metrics(task), "1.0,1.2",
                                      bands=["low"], modes=["zero"], n_random=2, seed=3,
                                      progress=False)
    assert again.random_heads == result.random_heads  # the seed fixes the draws
    for (band, mode), values in result.chosen.items():
        kwargs = {"reference": reference} if mode == "mean" else {}
        selection = {head: band for head in result.heads}
        with torch.no_grad(), ablate_frequencies(model, selection, mode, **kwargs):
            logits = model(task.tokens)
        assert values["logit_diff"] == pytest.approx(
            float(binding_metrics(task)["logit_diff"](logits)), abs=1e-5)
        draw = result.random_heads[1]
        with torch.no_grad(), ablate_frequencies(model, {h: band for h in draw}, mode, **kwargs):
            logits = model(task.tokens)
        assert result.random[(band, mode)][1]["accuracy"] == pytest.approx(
            float(binding_metrics(task)["accuracy"](logits)))
    rows = result.rows()
    assert rows[0]["condition"] == "baseline" and len(rows) == 1 + 2 * 2 * 2
    assert "±" in result.table()
    with pytest.raises(InvalidSelectionError, match="from a pool of 1"):
        compare_with_random_heads(model, task.tokens, binding_metrics(task), "1.0,1.2", pool="1.3",
                                  progress=False)


def test_mean_mode_defaults_to_the_inputs_own_means(llama_task):
    """compare_with_random_heads and band_sweep with their defaults work: mode='mean'
    without reference= takes the means over the input itself."""
    from lens_possym.interventions import compare_with_random_heads

    model, task = llama_task
    metric = binding_metrics(task)
    by_default = compare_with_random_heads(model, task.tokens, metric, "1.0", progress=False)
    assert set(by_default.modes) == {"zero", "mean"}
    explicit = compare_with_random_heads(model, task.tokens, metric, "1.0",
                                         reference=task.tokens, progress=False)
    assert by_default.chosen == explicit.chosen and by_default.random == explicit.random
    sweep = band_sweep(model, task.tokens, metric, mode="mean", layers=[1],
                       progress=False)
    again = band_sweep(model, task.tokens, metric, mode="mean", layers=[1],
                       reference=task.tokens, progress=False)
    torch.testing.assert_close(sweep.values["logit_diff"], again.values["logit_diff"],
                               rtol=0, atol=0, equal_nan=True)


# ---- the sweeps' configs ------------------------------------------------------------------------


def test_sweep_configs_round_trip_validate_and_are_stored(llama_task, tmp_path):
    from lens_possym.interventions import BandSweepConfig, HeadSetConfig, compare_with_random_heads

    config = BandSweepConfig(bands={"fast": "0:2", "slow": [6, 7]}, mode="unrotate", layers=[1])
    assert config.bands == (("fast", "0:2"), ("slow", "6:8")) and config.layers == (1,)
    assert BandSweepConfig.from_json(config.to_json()) == config
    assert BandSweepConfig(bands=[[0, 1], "low"]).bands == (("band 0", "0:2"), ("low", "low"))
    for bad, message in [(dict(mode="shuffle"), "unknown ablation mode"),
                         (dict(mode="unrotate", side="q"), "side='qk'"),
                         (dict(bands=0), "at least 1"), (dict(layers=["a"]), "integers"),
                         (dict(per_position=True), "mode='mean' only")]:
        with pytest.raises(InvalidSelectionError, match=message):
            BandSweepConfig(**bad)
    heads = HeadSetConfig(bands=("low", [0, 1]), modes="zero", pool=[(1, None)])
    assert heads.bands == ("low", "0:2") and heads.modes == ("zero",) and heads.pool == "1.*"
    assert HeadSetConfig.from_json(heads.to_json()) == heads
    with pytest.raises(InvalidSelectionError, match="n_random"):
        HeadSetConfig(n_random=-1)

    model, task = llama_task
    metric = binding_metrics(task)["logit_diff"]
    sweep = band_sweep(model, task.tokens, metric, config, heads=[3], progress=False)
    assert sweep.config == config.replace(heads=(3,)) and sweep.mode == "unrotate"
    assert sweep.to_dict()["config"]["bands"] == [["fast", "0:2"], ["slow", "6:8"]]
    result = compare_with_random_heads(model, task.tokens, metric, "1.0", heads, seed=1,
                                       n_random=1, progress=False)
    assert result.config == heads.replace(seed=1, n_random=1)
    assert all(layer == 1 for layer, _ in result.random_heads[0])  # drawn from the pool
    spec = result.intervention("0:2", "zero", draw=0)
    with torch.no_grad(), spec.apply(model):
        replayed = float(metric(model(task.tokens)))
    assert replayed == pytest.approx(result.random[("0:2", "zero")][0]["metric"], abs=1e-6)


def test_per_prompt_metrics_give_every_cell_a_standard_error_and_interval(llama_task, tmp_path):
    model, task = llama_task
    sweep = band_sweep(model, task.tokens, binding_metrics(task, per_prompt=True), layers=[1],
                       heads=[0, 2], progress=False)
    plain = band_sweep(model, task.tokens, binding_metrics(task), layers=[1], heads=[0, 2],
                       progress=False)
    for name in plain.metrics:  # the same means as the scalar metrics
        torch.testing.assert_close(sweep.values[name], plain.values[name], equal_nan=True)
        assert sweep.baseline[name] == pytest.approx(plain.baseline[name], abs=1e-6)
    per_prompt = sweep.per_prompt["logit_diff"]
    assert per_prompt.shape == (2, 4, 3, task.n_prompts)
    by_hand = _by_hand_per_prompt(model, task, 1, 2, sweep.bands[1][0])
    torch.testing.assert_close(per_prompt[1, 2, 0], by_hand, atol=1e-5, rtol=0)
    unc = sweep.uncertainty("logit_diff")
    effect = per_prompt - sweep.baseline_per_prompt["logit_diff"]
    torch.testing.assert_close(unc.mean, effect.mean(-1), equal_nan=True)
    torch.testing.assert_close(unc.se, effect.std(-1) / task.n_prompts ** 0.5, equal_nan=True)
    assert ((unc.low <= unc.mean) & (unc.mean <= unc.high))[1, [0, 2]].all()
    frame = sweep.to_dataframe()
    assert {"se", "ci_low", "ci_high"} <= set(frame) and len(frame) == 3 * 2 * 3
    again = lp.interventions.BandSweep.load(sweep.save(tmp_path / "sweep.json"))
    torch.testing.assert_close(again.effect_se("accuracy"), sweep.effect_se("accuracy"),
                               equal_nan=True)
    assert torch.isnan(plain.effect_se()).all()
    with pytest.raises(InvalidSelectionError, match="no per-prompt values"):
        plain.uncertainty()


def _by_hand_per_prompt(model, task, layer, head, ids):
    from lens_possym.tasks import binding_logit_diff

    with torch.no_grad(), ablate_frequencies(model, {(layer, head): ids}, "zero"):
        return binding_logit_diff(task, model(task.tokens)).double()
