"""Per-head ablation importance: batched passes equal single hand-made ablations, the
concentration arithmetic, JSON round trips, bad input."""

from __future__ import annotations

import math

import pytest
import torch
from tests.helpers import hooks_attached
from hypothesis import given, settings
from hypothesis import strategies as st

import lens_possym as lp
from lens_possym.papers import a as paper_a
from lens_possym.errors import InvalidSelectionError, LensPossymError
from lens_possym.interventions import (
    HeadImportance,
    ImportanceBatch,
    ImportanceConfig,
    head_importance,
)
from lens_possym.tasks import binding_logit_diff, binding_task


@pytest.fixture(scope="module")
def llama64():
    return lp.tiny_model("llama", dtype=torch.float64, seed=2)


@pytest.fixture(scope="module")
def batch():
    gen = torch.Generator().manual_seed(3)
    return ImportanceBatch(tokens=torch.randint(5, 120, (4, 9), generator=gen),
                           answers=torch.randint(5, 120, (4,), generator=gen),
                           distractors=torch.randint(5, 120, (4, 2), generator=gen))


def _toy(n_layers=2, seed=0):
    cfg = paper_a.ToyConfig(d_vocab=16, n_ctx=12, n_layers=n_layers, n_heads=3, d_head=8,
                       d_mlp=8 if n_layers > 1 else None, seed=seed)
    return paper_a.ToyTransformer(cfg).double()


def _by_hand(model, batch, layer, head, metric):
    """The metric with one head zeroed by a plain hook written here, on a plain pass."""
    def zero(z, hook):
        z = z.clone()
        z[:, :, head] = 0
        return z

    with torch.no_grad():
        logits = model.run_with_hooks(batch.tokens,
                                      fwd_hooks=[(f"blocks.{layer}.attn.hook_z", zero)])
    last = logits[:, -1]
    if metric == "loss":
        return float(torch.nn.functional.cross_entropy(last, batch.answers))
    if metric == "accuracy":
        return float((last.argmax(-1) == batch.answers).double().mean())
    correct = last.gather(1, batch.answers[:, None])[:, 0]
    return float((correct - last.gather(1, batch.distractors).mean(-1)).mean())


@pytest.mark.parametrize("metric", ["logit_diff", "loss", "accuracy"])
@pytest.mark.parametrize("per_pass", [1, 3, 8])
def test_batched_sweep_equals_hand_ablation_on_a_bridge(llama64, batch, metric, per_pass):
    result = head_importance(llama64, batch, metric, heads_per_pass=per_pass)
    n_layers, n_heads = llama64.cfg.n_layers, llama64.cfg.n_heads
    assert result.ablated.shape == (n_layers, n_heads)
    assert result.n_passes == math.ceil(n_layers * n_heads / per_pass)
    for layer in range(n_layers):
        for head in range(n_heads):
            expected = _by_hand(llama64, batch, layer, head, metric)
            assert result.ablated[layer, head] == pytest.approx(expected, abs=1e-10)


def test_batched_sweep_equals_hand_ablation_on_the_toy_model():
    toy = _toy()
    gen = torch.Generator().manual_seed(4)
    data = ImportanceBatch(torch.randint(0, 16, (5, 12), generator=gen),
                           torch.randint(0, 16, (5,), generator=gen),
                           torch.randint(0, 16, (5,), generator=gen))
    result = head_importance(toy, data, "logit_diff", heads_per_pass=4)
    for layer in range(2):
        for head in range(3):
            assert result.ablated[layer, head] == pytest.approx(
                _by_hand(toy, data, layer, head, "logit_diff"), abs=1e-10)


def test_effect_is_ablated_minus_baseline_and_importance_follows_the_metric(llama64, batch):
    """The effect has one sign for every metric (ablated − baseline, as BandSweep's); the
    importance is > 0 where the head helps: baseline − ablated for logit_diff, ablated −
    baseline for the loss; top() ranks by importance."""
    for metric, sign in (("logit_diff", 1), ("loss", -1)):
        r = head_importance(llama64, batch, metric)
        torch.testing.assert_close(r.effect, r.ablated - r.baseline)
        torch.testing.assert_close(r.importance, sign * (r.baseline - r.ablated))
        torch.testing.assert_close(r.relative, r.effect / abs(r.baseline))
        layer, head, delta = r.top(1)[0]
        assert (layer, head) == r.top_head and delta == pytest.approx(r.top_effect)
        assert float(r.importance[layer, head]) == pytest.approx(
            float(torch.nan_to_num(r.importance, nan=-1e9).max()))
        assert r.top_relative == pytest.approx(float(r.importance[layer, head]) / abs(r.baseline))


def test_a_silent_head_has_zero_effect(llama64, batch):
    o_proj = llama64.blocks[0].attn.o.original_component
    saved = o_proj.weight.detach().clone()
    d = llama64.cfg.d_head
    try:
        with torch.no_grad():
            o_proj.weight[:, d:2 * d] = 0
        for mode in ("zero", "mean"):
            r = head_importance(llama64, batch, mode=mode, reference=batch.tokens)
            assert abs(float(r.effect[0, 1])) < 1e-12
            assert r.effect.abs().max() > 1e-4
    finally:
        with torch.no_grad():
            o_proj.weight.copy_(saved)


def test_mean_ablation_with_the_eval_batch_as_reference_is_neutral_in_mean():
    """One attention layer, linear read-out, and a metric that is a linear function of the
    batch-mean last logits (logit_diff with the same answer and distractors for every
    prompt): with per-position means of the evaluated batch at the last position, every
    head's effect is 0 (see test_heads for the reason); zero ablation is not neutral."""
    toy = _toy(n_layers=1, seed=5)
    gen = torch.Generator().manual_seed(5)
    data = ImportanceBatch(torch.randint(0, 16, (6, 12), generator=gen),
                           torch.full((6,), 3), torch.tensor([[1, 7, 9]]).repeat(6, 1))
    mean = head_importance(toy, data, mode="mean", reference=data.tokens, per_position=True,
                           positions=[-1])
    assert mean.effect.abs().max() < 1e-12
    zero = head_importance(toy, data, mode="zero", positions=[-1])
    assert zero.effect.abs().max() > 1e-6


def test_binding_logit_diff_is_the_binding_tasks_own():
    model = lp.tiny_model("llama", dtype=torch.float64)
    task = binding_task(model, n_prompts=6, n_pairs=3, seed=1)
    r = head_importance(model, task, "logit_diff", layers=[0])
    with torch.no_grad():
        expected = float(binding_logit_diff(task, model(task.tokens)).mean())
    assert r.baseline == pytest.approx(expected, abs=1e-12)
    assert torch.isnan(r.ablated[1]).all() and torch.isfinite(r.ablated[0]).all()


def _result(ablated, baseline=1.0, metric="logit_diff", top_k=2):
    return HeadImportance(config=ImportanceConfig(metric=metric, top_k=top_k), baseline=baseline,
                          ablated=torch.tensor(ablated, dtype=torch.float64), n_prompts=1)


def test_concentration_arithmetic():
    # drops (baseline − ablated = the importance): 0.6, 0.2, 0.2, 0, and one head that
    # helps when removed; the effects (ablated − baseline) are their negatives
    r = _result([[0.4, 0.8, 1.2], [0.8, 1.0, float("nan")]])
    assert r.top_head == (0, 0)
    assert r.top_effect == pytest.approx(-0.6) and r.top_relative == pytest.approx(0.6)
    assert r.top_share == pytest.approx(0.6)
    assert r.top_k_share == pytest.approx(0.8)
    drops = torch.tensor([0.6, 0.2, 0.0, 0.2, 0.0], dtype=torch.float64)
    gini = (drops[:, None] - drops[None]).abs().sum() / (2 * 5 * drops.sum())
    assert r.gini == pytest.approx(float(gini))
    assert r.carried_by_one_head() and not r.carried_by_one_head(share=0.7)
    top = r.top(2)
    assert top[0][:2] == (0, 0) and top[0][2] == pytest.approx(-0.6)
    assert top[1][:2] in ((0, 1), (1, 0)) and top[1][2] == pytest.approx(-0.2)


def test_concentration_extremes():
    one = _result([[0.0, 1.0, 1.0, 1.0]])
    assert one.top_share == 1 and one.gini == pytest.approx(3 / 4)
    flat = _result([[0.5, 0.5, 0.5, 0.5]])
    assert flat.top_share == pytest.approx(1 / 4) and flat.gini == pytest.approx(0)
    none = _result([[1.0, 1.5]])
    assert math.isnan(none.top_share) and math.isnan(none.gini)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.floats(-2, 2), min_size=2, max_size=12))
def test_concentration_bounds(values):
    r = _result([values], baseline=0.5, top_k=2)
    drops = [max(0.5 - v, 0.0) for v in values]
    if sum(drops) <= 0:
        assert math.isnan(r.top_share)
        return
    n = len(values)
    assert 1 / n - 1e-12 <= r.top_share <= 1 + 1e-12
    assert r.top_share - 1e-12 <= r.top_k_share <= 1 + 1e-12
    assert -1e-12 <= r.gini <= (n - 1) / n + 1e-12


def test_json_round_trip(llama64, batch):
    for metric in ("loss", "logit_diff"):
        r = head_importance(llama64, batch, metric, layers=[1], heads_per_pass=2)
        text = r.to_json(allow_nan=False)  # standard JSON: nan written as null
        back = HeadImportance.from_json(text)
        assert back.config == r.config and back.baseline == r.baseline
        torch.testing.assert_close(back.ablated, r.ablated, equal_nan=True)
        assert back.top_head == r.top_head
        assert back.top_share == pytest.approx(r.top_share, nan_ok=True)
    cfg = ImportanceConfig(metric="accuracy", mode="mean", positions=(-1, 2), per_position=True)
    assert ImportanceConfig.from_json(cfg.to_json()) == cfg
    with pytest.raises(AttributeError):
        cfg.mode = "zero"  # frozen


def test_custom_metric_and_hooks_removed(llama64, batch):
    before = hooks_attached(llama64)

    def top_logit(logits, data):
        return logits[:, -1].max(-1).values.mean()

    r = head_importance(llama64, batch.tokens, top_logit, heads_per_pass=5)
    assert r.config.metric == "top_logit" and torch.isfinite(r.ablated).all()

    def broken(logits, data):
        if logits.shape[0] > data.n_prompts:  # never: each copy is scored on its own
            raise AssertionError
        raise RuntimeError("metric fails")

    with pytest.raises(RuntimeError):
        head_importance(llama64, batch, broken)
    assert hooks_attached(llama64) == before


@pytest.mark.parametrize("kwargs, match", [
    (dict(mode="unrotate"), "unknown head ablation mode"),
    (dict(heads_per_pass=0), "heads_per_pass"),
    (dict(metric="loss", higher_is_better=True), "lower"),
    (dict(per_position=True), "mode='mean' only"),
    (dict(positions=[]), "positions"),
])
def test_bad_configs(kwargs, match):
    with pytest.raises(InvalidSelectionError, match=match):
        ImportanceConfig(**kwargs)


@pytest.mark.parametrize("args, kwargs, match", [
    (("bleu",), {}, "unknown metric"),
    (("logit_diff",), dict(colour="red"), "unknown setting"),
    (("logit_diff",), dict(mode="mean"), "needs reference"),
    (("logit_diff",), dict(layers=[7]), "layer 7 out of range"),
    (("logit_diff",), dict(positions=[40]), "out of range"),
    ((42,), {}, "callable"),
])
def test_bad_calls(llama64, batch, args, kwargs, match):
    with pytest.raises(LensPossymError, match=match):
        head_importance(llama64, batch, *args, **kwargs)


def test_builtin_metrics_need_answers(llama64, batch):
    with pytest.raises(InvalidSelectionError, match="needs the batch's answers"):
        head_importance(llama64, ImportanceBatch(batch.tokens), "accuracy")
    # raw tokens: each prompt's last token is the answer (test_loss_and_accuracy_take_raw...)
    with pytest.raises(InvalidSelectionError, match="distractors"):
        head_importance(llama64, ImportanceBatch(batch.tokens, batch.answers), "logit_diff")
    with pytest.raises(InvalidSelectionError, match="answers for 4 prompts"):
        ImportanceBatch(batch.tokens, torch.tensor([1, 2]))


def test_heatmap_marks_the_top_head():
    from matplotlib.figure import Figure
    from matplotlib.patches import Rectangle

    from lens_possym.viz.importance import plot_head_importance

    r = _result([[0.9, 0.2, 1.0], [1.1, 0.95, float("nan")]])  # top head 0.1
    ax = plot_head_importance(r, ax=Figure().subplots(), title="t")
    boxes = [p for p in ax.patches if isinstance(p, Rectangle)]
    assert [(b.get_x() + 0.5, b.get_y() + 0.5) for b in boxes] == [(1, 0)]
    # share: 0.8 / (0.1 + 0.8 + 0.05)
    assert "0.1" in ax.get_title() and "share of summed drop 0.84" in ax.get_title()
    shown = ax.images[0].get_array()  # the effect, ablated − baseline: red where it drops
    assert shown.mask[1, 2] and float(shown[0, 1]) == pytest.approx(-0.8)
    assert ax.images[0].get_cmap().name == "RdBu"
    none = plot_head_importance(_result([[1.5, 2.0]]), ax=Figure().subplots())
    assert "no head's ablation hurts" in none.get_title()


def test_config_metric_is_used_when_no_metric_is_passed(llama64, batch):
    cfg = ImportanceConfig(metric="loss", layers=(0,), heads_per_pass=2)
    r = head_importance(llama64, batch, config=cfg)
    assert r.config == cfg
    assert r.baseline == pytest.approx(head_importance(llama64, batch, "loss", layers=[0]).baseline)


def test_every_head_effect_has_a_standard_error_and_interval(llama64, batch, tmp_path):
    result = head_importance(llama64, batch, "logit_diff", heads_per_pass=3)
    assert result.per_prompt.shape == (2, 4, 4) and result.baseline_per_prompt.shape == (4,)
    torch.testing.assert_close(result.per_prompt.mean(-1), result.ablated)
    layer, head = 1, 2

    def zero(z, hook):
        z = z.clone()
        z[:, :, head] = 0
        return z

    with torch.no_grad():
        last = llama64.run_with_hooks(batch.tokens, fwd_hooks=[
            (f"blocks.{layer}.attn.hook_z", zero)])[:, -1]
    by_hand = last.gather(1, batch.answers[:, None])[:, 0] - last.gather(
        1, batch.distractors).mean(-1)
    torch.testing.assert_close(result.per_prompt[layer, head], by_hand, atol=1e-10, rtol=0)
    effect = result.per_prompt - result.baseline_per_prompt  # ablated − baseline
    unc = result.uncertainty()
    torch.testing.assert_close(unc.mean, result.effect)
    torch.testing.assert_close(result.effect_se, effect.std(-1) / 2)
    assert ((unc.low <= unc.mean + 1e-12) & (unc.mean <= unc.high + 1e-12)).all()
    frame = result.to_dataframe()
    assert len(frame) == 8 and {"effect", "se", "ci_low", "ci_high"} <= set(frame)
    back = HeadImportance.from_json(result.to_json())
    torch.testing.assert_close(back.effect_se, result.effect_se)
    loaded = HeadImportance.load(result.save(tmp_path / "heads.json"))
    torch.testing.assert_close(loaded.per_prompt, result.per_prompt)
    assert "±" in result.describe() and "HeadImportance(" in repr(result)
    scalar = head_importance(llama64, batch, lambda logits, b: logits[:, -1, 0].mean(),
                             layers=[0])
    assert scalar.per_prompt is None and torch.isnan(scalar.effect_se).all()
    with pytest.raises(InvalidSelectionError, match="no per-prompt values"):
        scalar.uncertainty()


def test_loss_and_accuracy_take_raw_tokens_as_the_command_line_does():
    """Raw tokens: each prompt's last token is the answer (lens-possym heads --prompts)."""
    from lens_possym.interventions import ImportanceBatch, head_importance

    model = lp.tiny_model("llama")
    tokens = lp.random_token_prompts(model, n_prompts=3, n_tokens=10, seed=1)
    by_hand = ImportanceBatch(tokens=tokens[:, :-1], answers=tokens[:, -1])
    for metric in ("loss", "accuracy"):
        raw = head_importance(model, tokens, metric, progress=False)
        made = head_importance(model, by_hand, metric, progress=False)
        assert raw.n_prompts == 3 and torch.equal(raw.ablated, made.ablated)
    with pytest.raises(lp.errors.InvalidSelectionError, match="distractor"):
        head_importance(model, tokens, "logit_diff", progress=False)
