"""The report of one training run (:class:`~lens_possym.training.loop.TrainResult`), as
``lens-possym train`` writes it. A plug-in's own kinds of result add a function in the
plug-in that fills a :class:`~lens_possym.report.Report`, as paper A's
:func:`~lens_possym.papers.a.report.toy_sweep_report` does."""

from __future__ import annotations

from typing import Sequence

from .builder import Report
from ..viz.training import plot_training_curves

__all__ = ["train_report"]

def train_report(result, *, command: str = "", freq_ids: Sequence[int] | None = None) -> Report:
    """One training run (:class:`~lens_possym.training.loop.TrainResult`): the final
    accuracy, accuracy by answer position, the training curve and the settings."""
    from matplotlib.figure import Figure  # no pyplot: no global backend state


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
