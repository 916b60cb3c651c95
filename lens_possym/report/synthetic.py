"""Reports of the synthetic experiments: ``lens-possym train`` (one toy model) and
``lens-possym sweep`` (toy models per frequency).

Paper B and C experiments and training runs add a function here that fills a
:class:`~lens_possym.report.Report` from their result, like :func:`toy_sweep_report`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from ..synthetic.sweeps import SweepResult
from .builder import Report

__all__ = ["toy_sweep_report", "train_report"]

_CAPTIONS = {
    "accuracy_vs_freq": "Test accuracy of each trained model against the frequency id it was "
                        "given (angle θ on the top axis).",
    "accuracy_by_position": "Accuracy at each answer position: U-shaped curves mean the ends "
                            "of the prompt are easier.",
    "scores_vs_freq": "s_POS and s_SYM of the trained attention head against frequency id.",
}


def toy_sweep_report(result: SweepResult, figures: Sequence[Path] = (), *,
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


def train_report(result, *, command: str = "", freq_ids: Sequence[int] | None = None) -> Report:
    """One training run (:class:`~lens_possym.synthetic.training.TrainResult`): the final
    accuracy, accuracy by answer position, the training curve and the settings."""
    from matplotlib.figure import Figure  # no pyplot: no global backend state

    from ..viz.synthetic import plot_training_curves

    report = Report(f"lens-possym train: {result.task}", command=command, intro=(
        "A toy model trained on a canonical task"
        + ("" if freq_ids is None else f", its attention restricted to frequency ids "
           f"{', '.join(map(str, freq_ids))}") + "."))
    report.section("Result").key_values([
        ("test_accuracy", result.test_accuracy), ("steps run", result.steps_run),
        ("reached the target at step", result.reached_target_at),
        ("wall time (s)", round(result.train_time_s, 1))])
    report.section("Accuracy by answer position", caption="Test accuracy at each position "
                   "where the task asks for an answer.")
    report.table([{"answer position": p, "test_accuracy": a} for p, a in
                  zip(result.answer_positions, result.test_accuracy_by_position)])
    figure = Figure(figsize=(6.5, 3.5), constrained_layout=True)
    plot_training_curves(result, ax=figure.subplots())
    report.section("Training curve").image(figure, caption="Test accuracy at every "
                                           "evaluation.", alt="training curve")
    report.section("Settings").key_values(
        [*result.task_config.items(), *result.train_config.items()], explain=False)
    report.glossary(["test_accuracy", "frequency_id", "theta"])
    return report
