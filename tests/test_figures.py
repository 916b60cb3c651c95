"""Figures say what the docs say: red bars where the metric went down, titles inside the
figure, one θ axis per RoPE base."""

from __future__ import annotations

import torch
from matplotlib.colors import to_rgba
from matplotlib.figure import Figure

import lens_possym as lp
from lens_possym import viz


def test_effect_bars_are_red_where_the_metric_went_down():
    fig = Figure()
    ax = viz.plot_effects(["a", "b", "c"], [-1.0, 0.5, -0.2], baseline=0.0, sort=False,
                          ax=fig.subplots())
    colors = [bar.get_facecolor()[:3] for bar in ax.patches]
    red, blue = to_rgba("C3")[:3], to_rgba("C0")[:3]
    assert colors == [red, blue, red]
    ax = viz.plot_effects(["a", "b"], [-1.0, 0.5], ax=Figure().subplots())  # no baseline
    assert {bar.get_facecolor()[:3] for bar in ax.patches} == {blue}


def test_the_head_importance_title_fits_a_narrow_figure():
    from lens_possym.interventions import head_importance
    from lens_possym.tasks import ImportanceBatch

    model = lp.tiny_model("gemma3")
    batch = ImportanceBatch.from_binding(lp.binding_task(model, n_prompts=2, n_pairs=2))
    result = head_importance(model, batch, "logit_diff", progress=False)
    fig = Figure(figsize=(4.6, 2.5), constrained_layout=True)  # 4 heads, as gemma-3-270m
    ax = fig.subplots()
    viz.importance.plot_head_importance(result, ax=ax, title="gemma-3-270m, binding")
    fig.canvas.draw()
    box = ax.title.get_window_extent()
    assert box.x0 >= 0 and box.x1 <= fig.bbox.width


def test_the_usage_heatmap_has_one_theta_axis_per_rope_base():
    model = lp.tiny_model("gemma3")  # sliding layers base 1e4, the full layer 1e6
    norms = lp.frequency_norms(model, model.to_tokens("Alice likes red . Bob likes blue ."))
    assert not torch.allclose(norms.angles[0], norms.angles[-1])
    ax = viz.plot_usage_heatmap(norms, ax=Figure().subplots())
    tops = [child for child in ax.child_axes]
    labels = sorted(top.get_xlabel() for top in tops)
    assert len(tops) == 2 and all(label.startswith("θ (rad/token), layers") for label in labels)
    one = viz.plot_usage_heatmap(norms, ax=Figure().subplots(), layers=[0])
    assert [top.get_xlabel() for top in one.child_axes] == ["θ (rad/token)"]
