"""The report of a frequency sweep (``lens-possym sweep``): one row per frequency set,
the settings and the sweep's figures."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from ...report.builder import Report
from .sweeps import FrequencySweep

__all__ = ["toy_sweep_report"]

_CAPTIONS = {
    "accuracy_vs_freq": "Test accuracy of each trained model against the frequency id it was "
                        "given (angle θ on the top axis).",
    "accuracy_by_position": "Accuracy at each answer position: U-shaped curves mean the ends "
                            "of the prompt are easier.",
    "scores_vs_freq": "s_POS and s_SYM of the trained attention head against frequency id.",
}


def toy_sweep_report(result: FrequencySweep, figures: Sequence[Path] = (), *,
                     command: str = "") -> Report:
    """The sweep's table, settings and figures (``figures``: PNGs from
    :func:`~lens_possym.viz.save_sweep_figures`)."""
    report = Report(f"lens-possym sweep: {result.task}", command=command, intro=(
        "One toy model was trained per frequency set and seed, with only those RoPE "
        "frequencies available to its attention; the table compares them."))
    report.section("Runs", caption="One row per frequency set: test accuracy per seed and "
                   "its mean; edges − middle > 0 means a U-shaped accuracy over answer "
                   "positions; s_POS/s_SYM of the trained head where scored.")
    pos, sym = result.scores()
    acc, shape = result.accuracy(), result.edge_minus_middle()
    rows = []
    for i, ids in enumerate(result.freq_sets):
        row = {"frequency ids": "+".join(map(str, ids)),
               "θ (rad/token)": ", ".join(f"{t:.3g}" for t in result.set_angles(ids)),
               "test_accuracy": float(acc[i].nanmean()),
               "edges_minus_middle": float(shape[i].nanmean())}
        if bool(pos.isfinite().any()):
            row["s_POS"], row["s_SYM"] = float(pos[i].nanmean()), float(sym[i].nanmean())
        rows.append(row)
    report.table(rows)
    report.section("Settings").key_values(
        [("task", result.task), *result.task_config.items(), ("seeds", result.seeds),
         ("wall time (s)", round(result.wall_time_s, 1))], explain=False)
    for path in figures:
        path = Path(path)
        report.section(path.stem.replace("_", " ")).image(
            path, caption=_CAPTIONS.get(path.stem, ""), alt=path.stem)
    report.glossary(["test_accuracy", "edges_minus_middle", "s_POS", "s_SYM", "frequency_id",
                     "theta"])
    return report
