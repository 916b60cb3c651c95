"""The score engine's stages, named for ``torch.profiler``, and what a profile of them says.

:func:`stage` wraps a part of :func:`~lens_possym.scores.engine.score_layers` in a
``torch.profiler.record_function`` range named ``lens_possym.<stage>`` (a no-op costing
about a microsecond when no profiler runs). :func:`stage_table` reads a finished profile
and counts, per stage:

* ``ops``: the operators called from Python (the top-level ``aten::`` calls inside the
  stage, children of composite operators not counted twice). On a GPU each is one kernel
  launch or more, plus the Python between them: what costs time when the arithmetic is
  small.
* ``syncs``: the operators that make a GPU wait for the host: reading a value back
  (``.item()``, ``float(t)``, ``int(t)``, ``bool(t)``: ``aten::_local_scalar_dense`` /
  ``aten::is_nonzero``), data-dependent shapes (``nonzero``, boolean indexing,
  ``unique``, ``masked_select``) and whole-tensor comparisons (``torch.equal``). A
  ``.cpu()`` / ``.tolist()`` of a tensor already on the CPU is no operator and is not
  counted here (the engine has none inside its per-layer loop on a GPU; see
  docs/scale.md).
* ``cpu_ms``: the stage's own CPU time (the ranges' durations).

The stages: ``capture`` (the forward pass that keeps q and k), ``check`` (the
decomposition check), ``factors`` (the cross-logit factors), ``swaps`` (whole-head swap
scores), ``freq`` (per-frequency scores), ``exclusion``, ``finish`` (the checks gathered
over layers, read once) and ``assembly`` (the result's tensors).
"""

from __future__ import annotations

from collections import Counter
from contextlib import AbstractContextManager
from typing import Any, Iterable

import torch

__all__ = ["STAGES", "SYNC_OPS", "stage", "stage_table", "format_stage_table"]

STAGES = ("capture", "check", "factors", "swaps", "freq", "exclusion", "finish", "assembly")
PREFIX = "lens_possym."

#: operators that make a GPU stream wait for the host (a value read back, a shape that
#: depends on data)
SYNC_OPS = frozenset({
    "aten::_local_scalar_dense", "aten::is_nonzero", "aten::nonzero", "aten::nonzero_static",
    "aten::_unique2", "aten::unique_dim", "aten::unique_consecutive", "aten::masked_select",
    "aten::equal", "aten::repeat_interleave",
})


def stage(name: str) -> AbstractContextManager:
    """A ``torch.profiler`` range named ``lens_possym.<name>`` (``name`` in :data:`STAGES`)."""
    return torch.profiler.record_function(PREFIX + name)


def _stage_of(event: Any) -> str | None:
    parent = event
    while parent is not None:
        if parent.name.startswith(PREFIX):
            return parent.name[len(PREFIX):]
        parent = parent.cpu_parent
    return None


def stage_table(events: Iterable[Any]) -> dict[str, dict[str, float]]:
    """Per stage: ``calls`` (ranges), ``ops``, ``syncs``, ``cpu_ms`` (see the module
    docstring), from ``torch.profiler.profile(...).events()`` (a profile of the CPU)."""
    table: dict[str, Counter] = {}
    for event in events:
        name = event.name
        if name.startswith(PREFIX):
            row = table.setdefault(name[len(PREFIX):], Counter())
            row["calls"] += 1
            row["cpu_ms"] += event.time_range.elapsed_us() / 1e3
            continue
        if not name.startswith("aten::"):
            continue
        where = _stage_of(event)
        if where is None:
            continue
        row = table.setdefault(where, Counter())
        parent = event.cpu_parent
        if parent is None or not parent.name.startswith("aten::"):
            row["ops"] += 1                              # called from Python
        if name in SYNC_OPS and not (parent is not None and parent.name in SYNC_OPS):
            row["syncs"] += 1
    return {s: {k: table[s].get(k, 0) for k in ("calls", "ops", "syncs", "cpu_ms")}
            for s in list(STAGES) + sorted(set(table) - set(STAGES)) if s in table}


def format_stage_table(table: dict[str, dict[str, float]], n_layers: int) -> str:
    """The table as text: one row per stage, with ops and syncs per scored layer."""
    lines = [f"{'stage':<10} {'ranges':>6} {'ops':>7} {'ops/layer':>9} {'syncs':>6} "
             f"{'syncs/layer':>11} {'cpu ms':>9}"]
    for name, row in table.items():
        lines.append(f"{name:<10} {row['calls']:>6} {row['ops']:>7} "
                     f"{row['ops'] / n_layers:>9.1f} {row['syncs']:>6} "
                     f"{row['syncs'] / n_layers:>11.1f} {row['cpu_ms']:>9.1f}")
    total = {k: sum(r[k] for r in table.values()) for k in ("ops", "syncs", "cpu_ms")}
    lines.append(f"{'total':<10} {'':>6} {total['ops']:>7} {total['ops'] / n_layers:>9.1f} "
                 f"{total['syncs']:>6} {total['syncs'] / n_layers:>11.1f} "
                 f"{total['cpu_ms']:>9.1f}")
    return "\n".join(lines)
