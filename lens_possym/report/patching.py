"""Report of ``lens-possym patch``: a patching grid with its uncertainty."""

from __future__ import annotations

from typing import Any, Mapping

from .builder import Report
from .interventions import task_check_section
from ..viz.patching import plot_patching_grid, plot_patching_top
from ..experiments.uncertainty import uncertainty

__all__ = ["patching_report", "patching_figures"]


def patching_figures(grid, *, title: str = "") -> dict[str, Any]:
    """``{"patch_grid": Figure, "patch_top": Figure}`` (matplotlib, no pyplot)."""
    from matplotlib.figure import Figure


    shape = grid.shape
    if len(shape) == 1:
        size = (6.0, 1.2 + 0.28 * shape[0])
    elif len(shape) == 2:
        size = (2.4 + min(0.55 * shape[1], 14), 1.6 + min(0.3 * shape[0], 18))
    else:
        n_rows = int(grid.mean().isfinite().any(-1).sum())
        size = (2.4 + min(0.4 * shape[-1], 14), 1.6 + min(0.26 * n_rows, 18))
    heat = Figure(figsize=size, constrained_layout=True)
    plot_patching_grid(grid, ax=heat.subplots(), title=title or None)
    k = min(15, int(grid.mean().isfinite().sum()))
    top = Figure(figsize=(6.5, 1.2 + 0.3 * k), constrained_layout=True)
    plot_patching_top(grid, k, ax=top.subplots())
    return {"patch_grid": heat, "patch_top": top}


def patching_report(grid, *, model: str, command: str = "",
                    figures: Mapping[str, Any] | None = None) -> Report:
    """The grid's settings, prompts, baselines, heatmap, top cells with intervals."""
    pairs: Mapping[str, Any] = grid.info.get("pairs", {})
    config = grid.config
    direction = config.direction if config is not None else "denoise"
    what = config.activation_label if config is not None else grid.activation_name
    report = Report(f"lens-possym patch: {model}", command=command, intro=(
        f"Each cell patches {what} of one "
        + ("/".join(a.replace("_index", "") for a in grid.axis_names))
        + " from the "
        + ("clean run into the corrupted run (denoising): 1 = the patch alone restores the "
           "clean answer, 0 = it does nothing" if direction == "denoise" else
           "corrupted run into the clean run (noising): 0 = the patch alone destroys the "
           "clean answer, 1 = it does nothing")
        + ". Every prompt is measured; means come with standard errors and 95% bootstrap "
        "intervals over the prompts."))
    if grid.info.get("task_check"):
        task_check_section(report, grid.info["task_check"])
    report.section("Prompts and corruption")
    rows = [(k, v) for k, v in pairs.items() if not k.startswith("example")]
    report.key_values(rows)
    if "example_clean" in pairs:
        report.table([{"run": "clean", "prompt": pairs["example_clean"]},
                      {"run": "corrupted", "prompt": pairs["example_corrupted"]}])
    report.section("Baselines and settings", caption=(
        "The metric on the two unpatched runs (mean ± standard error over prompts)."))

    base = uncertainty(grid.baseline[None], allow_nan=True)
    kv = [("metric", grid.metric), ("patched run", base.label(0))]
    if grid.source_baseline is not None:
        kv.append(("source run", uncertainty(grid.source_baseline[None], allow_nan=True).label(0)))
    if config is not None:
        kv += [("patch_per_position" if key == "per_position" else key, value)
               for key, value in config.to_dict().items() if value is not None]
    kv += [("n_prompts", grid.n_prompts), ("forward passes", grid.n_passes),
           ("seconds", round(grid.seconds, 2))]
    report.key_values(kv)
    figures = figures or patching_figures(grid)
    report.section("The grid", caption=(
        "Mean over prompts of each cell; white = the unpatched run's mean (the patch changed "
        "nothing)."))
    report.image(figures["patch_grid"], alt="patching grid")
    report.section("Largest effects", caption=(
        "The cells whose patch moves the metric most: the effect (patched − unpatched, per "
        "prompt, averaged) with its 95% percentile bootstrap interval over prompts (error bars; "
        "ci_low/ci_high below). The effect is a paired difference, so its interval is "
        "narrower than the spread of the values themselves. p = sign-flip permutation "
        "p-value that the mean effect is 0."))
    report.image(figures["patch_top"], alt="largest effects with intervals")
    unc, eff = grid.uncertainty(), grid.uncertainty(of_effect=True)
    pvalues = grid.permutation_pvalue()
    table = []
    for index, effect, se in grid.top(15):
        table.append({"cell": grid.label(index), "value": float(unc.mean[index]),
                      "standard_error": float(unc.se[index]), "effect": effect,
                      "effect_standard_error": se, "ci_low": float(eff.low[index]),
                      "ci_high": float(eff.high[index]), "p_value": float(pvalues[index])})
    report.table(table)
    report.glossary(["normalized_logit_diff", "denoise", "noise", "effect", "standard_error",
                     "bootstrap_interval", "p_value", "n_prompts"])
    return report
