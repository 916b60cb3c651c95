"""Reports of ``lens-possym ablate``: one ablation (before/after) and the band sweep."""

from __future__ import annotations

import html
from typing import Any, Mapping

from ..experiments.sweep import BandSweep
from .builder import Report
from ..interventions.selection import freqs_label
from ..viz.patching import plot_effects

__all__ = ["ablation_report", "band_sweep_report", "head_importance_report", "task_check_section"]


def ablation_report(*, model: str, selection: Mapping[str, list[int]], mode: str,
                    side: str | None, before: Mapping[str, float], after: Mapping[str, float],
                    task: Mapping[str, Any], command: str = "",
                    change: Mapping[str, Mapping[str, float]] | None = None,
                    task_check: Mapping[str, Any] | None = None) -> Report:
    """Before/after of one ablation on the binding task.

    Args:
        model: the model's name.
        selection: ``{"layer.head": [frequency ids]}`` taken away.
        mode, side: how (``zero``/``mean``/``unrotate``; ``q``/``k``/``qk``).
        before, after: ``{metric: value}`` without and with the ablation.
        task: the prompts (``n_prompts``, ``n_pairs``, ``seed``, ...).
        change: ``{metric: {mean, se, ci_low, ci_high}}`` of the per-prompt change
            (after − before), shown with error bars.
        task_check: whether the unablated model solves the prompts
            (:func:`lens_possym.tasks.check.task_check`), shown first.
    """

    name = task.get("name", "binding")
    report = Report(f"lens-possym ablate: {model}", command=command, intro=(
        f"Chosen RoPE frequency ids of chosen heads were ablated together, and the {name} "
        "task was evaluated on the same prompts without and with the ablation."))
    if task_check:
        task_check_section(report, task_check)
    report.section("What was ablated")
    report.table([{"head": head, "frequency ids": freqs_label(ids), "count": len(ids)}
                  for head, ids in selection.items()])
    report.key_values([("mode", mode), ("side", side or "default")])
    report.section(f"The {name} task before and after", caption=(
        "change = after − before (the effect of the ablation, the sign convention of every "
        "effect in lens-possym); a drop in accuracy or logit difference, or a rise in loss, "
        "means the ablated frequencies carried what the task needs."))
    rows = [{"metric": key, "before": before[key], "after": after[key],
             "change": after[key] - before[key]} for key in before]
    if change:
        for row in rows:
            c = change.get(row["metric"], {})
            row.update({"change_se": c.get("se"), "ci_low": c.get("ci_low"),
                        "ci_high": c.get("ci_high")})
    report.table(rows)
    if change:
        report.image(_change_figure(rows), alt="change with intervals", caption=(
            "Change per metric (after − before, per prompt, averaged) with its 95% bootstrap "
            "interval over prompts; a paired difference, so the interval is about the "
            "ablation, not about how the prompts differ."))
    report.section("Prompts").key_values(list(task.items()))
    report.glossary(["accuracy", "candidate_accuracy", "logit_diff", "loss", "effect", "mode",
                     "side", "frequency_id", "band"] + (["change_se", "bootstrap_interval"]
                                                        if change else []))
    return report


def _change_figure(rows: list[dict]):
    from matplotlib.figure import Figure


    fig = Figure(figsize=(5.5, 1.3 + 0.35 * len(rows)), constrained_layout=True)
    plot_effects([r["metric"] for r in rows], [r["change"] for r in rows],
                 [r["ci_low"] for r in rows], [r["ci_high"] for r in rows],
                 ax=fig.subplots(), baseline=0.0, xlabel="change (after − before)", sort=False)
    return fig


def _sweep_figure(sweep: BandSweep, metric: str):
    """Layer × head heatmaps of the effect of each band (one panel per band), interactive."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    effect = sweep.effect(metric)[sweep.layers]
    limit = float(effect.nan_to_num(0).abs().max()) or 1.0
    fig = make_subplots(rows=1, cols=len(sweep.band_names), shared_yaxes=True,
                        subplot_titles=[f"band {b}" for b in sweep.band_names],
                        horizontal_spacing=0.03)
    for b, name in enumerate(sweep.band_names):
        z = [[None if v != v else round(v, 4) for v in row] for row in effect[..., b].tolist()]
        text = [[f"head {layer}.{h}, band {name}" for h in range(effect.shape[1])]
                for layer in sweep.layers]
        fig.add_trace(go.Heatmap(
            z=z, y=[str(layer) for layer in sweep.layers], zmin=-limit, zmax=limit,
            colorscale="RdBu", text=text, showscale=b == len(sweep.band_names) - 1,
            hovertemplate="%{text}<br>Δ " + metric + " %{z:.3f}<extra></extra>",
            colorbar=dict(title=f"Δ {metric}", thickness=12)), row=1, col=b + 1)
        fig.update_xaxes(title_text="head", dtick=1, row=1, col=b + 1)
    fig.update_yaxes(title_text="layer", autorange="reversed", type="category", row=1, col=1)
    fig.update_layout(height=max(300, 90 + 18 * len(sweep.layers)),
                      margin=dict(l=50, r=10, t=40, b=45))
    return fig


def band_sweep_report(sweep: BandSweep, *, model: str, task: Mapping[str, Any],
                      seconds: float | None = None, command: str = "",
                      task_check: Mapping[str, Any] | None = None) -> Report:
    """The band sweep: whether the unablated model solves the prompts (``task_check``),
    baseline, effect heatmaps per metric, largest drops, band means."""
    report = Report(f"lens-possym ablate --sweep bands: {model}", command=command, intro=(
        f"Each of the {len(sweep.band_names)} frequency bands of each head was "
        f"{sweep.mode}-ablated alone, and the {task.get('name', 'binding')} task evaluated "
        "each time: one forward pass per (layer, head, band). Effect = with the band ablated "
        "− baseline; red cells: the ablation lowered the metric, blue: raised it."))
    if task_check:
        task_check_section(report, task_check)
    bands = next(iter(sweep.bands.values()), [])
    report.section("Bands", caption="Frequency ids of each band (id 0 = fastest rotation).")

    report.table([{"band": name, "frequency ids": freqs_label(ids)}
                  for name, ids in zip(sweep.band_names, bands)])
    settings = [("mode", sweep.mode), ("side", sweep.config.side or "default")]
    if sweep.mode == "mean":
        settings.append(("per_position", sweep.config.per_position))
    report.section("Baseline and settings").key_values(
        [*sweep.baseline.items(), *settings, *task.items()]
        + ([("seconds", round(seconds, 1))] if seconds is not None else []))
    for metric in sweep.metrics:
        report.section(f"Effect on {metric} of ablating each band of each head",
                       caption=f"Δ {metric} = with the band ablated − baseline; hover a cell "
                       "for its head and value.")
        report.plotly(_sweep_figure(sweep, metric), div_id=f"sweep-{metric}")
    first = next((m for m in ("logit_diff", "loss") if m in sweep.metrics), sweep.metrics[0])
    rises = first == "loss"
    report.section(f"Largest {'rises' if rises else 'drops'} in {first}")
    rows, bars = [], []
    unc = sweep.uncertainty(first) if first in sweep.per_prompt else None
    for layer, head, band, value in sweep.top(10, first, raise_=rises):
        row = {"head": f"{layer}.{head}", "band": band, f"Δ {first}": value}
        b = sweep.band_names.index(band)
        if unc is not None:
            row.update({"standard_error": float(unc.se[layer, head, b]),
                        "ci_low": float(unc.low[layer, head, b]),
                        "ci_high": float(unc.high[layer, head, b])})
            bars.append((f"{layer}.{head} {band}", value, row["ci_low"], row["ci_high"]))
        for other in sweep.metrics:
            if other != first:
                row[f"Δ {other}"] = float(sweep.effect(other)[layer, head, b])
        rows.append(row)
    report.table(rows)
    if bars:
        from matplotlib.figure import Figure


        fig = Figure(figsize=(5.5, 1.3 + 0.3 * len(bars)), constrained_layout=True)
        labels, means, lows, highs = zip(*bars)
        plot_effects(labels, means, lows, highs, ax=fig.subplots(), baseline=0.0, sort=False,
                     xlabel=f"Δ {first} (band ablated − baseline)")
        report.image(fig, alt="largest drops with intervals", caption=(
            f"The largest {'rises' if rises else 'drops'} in {first} with their 95% bootstrap "
            f"intervals over the {sweep.per_prompt[first].shape[-1]} prompts (paired: the same "
            "prompt with and without the ablation)."))
    mean = sweep.effect(first)[sweep.layers].nanmean(dim=(0, 1))
    report.section(f"Mean Δ {first} per band, over heads").table(
        [{"band": name, f"mean Δ {first}": float(v)} for name, v in zip(sweep.band_names, mean)])
    report.glossary(["accuracy", "candidate_accuracy", "logit_diff", "loss", "effect", "band",
                     "mode", "side", "frequency_id"] + (["standard_error", "bootstrap_interval"]
                                                        if sweep.per_prompt else []))
    return report


def head_importance_report(result: Any, *, model: str, command: str = "",
                           figures: Mapping[str, Any] | None = None,
                           task_check: Mapping[str, Any] | None = None) -> Report:
    """``lens-possym heads``: the task on the unablated model, every head ablated alone
    (heatmap), the most important heads with standard errors and intervals, and how
    concentrated the effect is.

    Args:
        result: a :class:`~lens_possym.interventions.HeadImportance`.
        figures: ``{"heads": Figure, "heads_top": Figure}`` (matplotlib) to embed.
        task_check: the unablated model's raw metrics on the prompts (what
            ``lens-possym heads`` prints first: accuracy, chance, whether it solves them).
    """
    metric = result.config.metric
    info = dict(result.info)
    report = Report(f"lens-possym heads: {model}", command=command, intro=(
        f"Every attention head's output (hook_z) was {result.config.mode}-ablated alone, and "
        f"the task's {metric} measured on the same {result.n_prompts} prompts. Effect Δ = "
        "ablated − baseline; the most important heads are those whose removal hurts most."))
    if task_check:
        task_check_section(report, task_check)
    report.section("Summary").key_values(
        [(k, v) for k, v in result.summary().items() if not isinstance(v, dict)])
    report.text(result.describe())
    if figures and "heads" in figures:
        report.section("Every head ablated alone", caption=(
            f"Δ {metric} per layer and head (red: the metric went down)."))
        report.image(figures["heads"], alt="head importance heatmap")
    report.section("The most important heads")
    rows = []
    unc = result.uncertainty() if result.per_prompt is not None else None
    for layer, head, value in result.top(15):
        row = {"head": f"{layer}.{head}", "effect": value,
               "ablated": float(result.ablated[layer, head])}
        if unc is not None:
            row.update({"effect_standard_error": float(unc.se[layer, head]),
                        "ci_low": float(unc.low[layer, head]),
                        "ci_high": float(unc.high[layer, head])})
        rows.append(row)
    report.table(rows)
    if figures and figures.get("heads_top") is not None:
        report.image(figures["heads_top"], alt="most important heads with intervals")
    report.section("Prompts and settings").key_values(
        [(k, v) for k, v in info.items() if not isinstance(v, dict)]
        + [(k, v) for k, v in result.config.to_dict().items() if v is not None])
    report.glossary([metric, "effect", "mode", "n_prompts"]
                    + (["effect_standard_error", "bootstrap_interval"] if unc is not None
                       else []))
    return report


def task_check_section(report: Report, check: Mapping[str, Any]) -> None:
    """The unablated (clean) run's raw metrics, and a warning when the model does not solve
    the prompts (accuracy below chance plus the margin)."""
    report.section("Does the model solve the task?", caption=(
        "The raw metrics on the unpatched, unablated prompts. Effects are only meaningful "
        "where the model does the task: an intervention cannot take away what is not there."))
    if check.get("solves_task") is False:
        report.raw("<p class='warning' style='color:#b00;font-weight:bold'>"
                   f"{html.escape(str(check.get('warning', 'the model does not solve the task')))}"
                   "</p>")
    report.key_values([(k, v) for k, v in check.items() if k != "warning"])
