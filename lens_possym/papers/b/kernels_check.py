"""Does this machine retrain paper B's committed cells? One cell to its first loop evaluation.

The ``+levelled`` grid retrains every base run whose folder is gone (tens of CPU-hours), and
a retrained run is the committed one only under the CPU kernels that trained the records
(:data:`.presets.REFERENCE_KERNELS`, :mod:`lens_possym.training.kernels`). Before starting
the queues on a new machine, :func:`first_evaluation_check` trains one committed cell with its
preset's own schedule, stops at the loop's first evaluation (a few CPU-minutes) and compares
that accuracy with the record's first history entry (or the one at ``--step``): unequal, the
machine trains other runs; equal, it retrains the records (evidence, not proof: a record
keeps no loss, and two kernels may agree for a while; a later step is a stronger check).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from ...errors import InvalidSelectionError
from ...training.kernels import RecordCheck, cpu_kernels, evaluation_at
from .cells import Cell, make_model, preset_task
from .presets import ENCODER_PRESETS, parse_label

__all__ = ["first_evaluation_check"]


def first_evaluation_check(cells: list[dict[str, Any]], cell: Cell,
                           preset: str = "paper-length", step: int | None = None
                           ) -> RecordCheck:
    """Train ``cell`` of ``preset`` (its committed record is in ``cells``, the records file's
    ``"cells"``) to the step of the record's history entry at ``step`` (``None``: its first
    one), in memory, one run."""
    found = [c for c in cells if c["preset"] == preset and c["task"] == cell.task
             and c["scheme"] == cell.label and c["variant"] == cell.variant
             and c["seed"] == cell.seed and c.get("history")]
    if not found:
        raise InvalidSelectionError(f"no committed {preset} record with a history for "
                                    f"{cell.task}/{cell.label}/{cell.variant}/seed {cell.seed}; "
                                    "name a cell of docs/paper_b_results.json")
    history = found[0]["history"]
    at = [h for h in history if step is None or int(h[0]) == step]
    if not at:
        raise InvalidSelectionError(f"the record has no loop evaluation at step {step}; pass "
                                    f"one of {[int(h[0]) for h in history]}")
    first_step, first_accuracy = at[0]
    base = ENCODER_PRESETS[preset]
    task = preset_task(base, cell.task, cell.seed)
    model = make_model(base, task, cell.label, cell.variant, cell.seed)
    config = replace(base.train_config(cell.task, parse_label(cell.label)[0], cell.seed, None,
                                       epoch_size=getattr(task, "epoch_size", None)),
                     checkpoint_every=None)
    here = evaluation_at(model, task, config, int(first_step)).accuracy
    return RecordCheck(run=f"{preset} {cell.task}/{cell.label}/{cell.variant}/s{cell.seed}",
                       step=int(first_step), record={"accuracy": float(first_accuracy)},
                       here={"accuracy": float(here)}, kernels=cpu_kernels())
