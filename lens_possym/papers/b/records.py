"""Paper B's record of one finished cell, on the result contract (:class:`ResultIO`): what
``docs/paper_b_results.json`` holds under ``"cells"``, one entry per cell.

The file is a JSON object ``{"verdicts": {...}, "cells": [...]}``
(:func:`~lens_possym.papers.b.pipeline.read_results`): ``"cells"`` is a list of
:meth:`CellRecord.to_dict` (no ``format`` tag per entry, so each entry reads as it always
did), ``"verdicts"`` the ``+levelled`` grids' verdicts with their margins
(:func:`~lens_possym.papers.b.pipeline.levelled_verdicts`). An entry's evaluation size and
standard errors are ``eval_size``, ``accuracy_se`` and ``ablation_se`` (``+levelled``
records; older ones were scored on their preset's ``analysis_size`` and keep no standard
error); its last-quarter gain is ``levelling["gain_last_quarter"]`` (``+levelled``) or, for
every record with a ``history``, :func:`~lens_possym.papers.b.verdicts.late_gain` of it
(exact: the same rule on the same evaluations, so it is not stored twice).
:func:`~lens_possym.papers.b.cells.cell_record`
makes a record from a cell's analysis, :mod:`.pipeline` merges records into the file, and
the verdicts (:mod:`.verdicts`, :mod:`.report`) read the records as plain mappings
(:func:`as_dicts`), so hand-made records in tests and the file's own entries are judged
alike.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from ...plugins import ResultIO

__all__ = ["CellRecord", "record_key", "as_dicts"]

#: the order of a record's keys in the file (optional ones left out when absent)
_ORDER = ("preset", "task", "scheme", "variant", "seed", "accuracy", "ablation",
          "ablation_kind", "ablation_grid", "ablation_official", "ablation_official_grid",
          "test_accuracy", "steps", "train_time_s", "probe", "history", "config", "eval_size",
          "accuracy_se", "ablation_se", "levelling", "note")
_OPTIONAL = ("ablation_official", "ablation_official_grid", "eval_size", "accuracy_se",
             "ablation_se", "levelling", "note")


@dataclass(repr=False)
class CellRecord(ResultIO):
    """One finished cell of paper B's grid.

    Attributes:
        preset, task, scheme, variant, seed: which cell (:attr:`key`).
        accuracy: accuracy on the cell's analysis sentences (a fraction).
        ablation: the per-head deposit summary
            (:func:`~lens_possym.papers.b.deposit.deposit_summary`: ``top_drop``,
            ``second_drop``, ``top_head``, ``heads_over_10``, ``deposit``, ...).
        ablation_kind: ``"per head"`` (``hook_z`` zeroed) or ``"official latent slice"``
            (faithful MLA records made before the per-head grid existed).
        ablation_grid: accuracy ``[n_layers][n_heads]`` with each head ablated alone.
        ablation_official, ablation_official_grid: faithful MLA's official latent-slice
            summary and grid, beside the per-head ones (``None`` elsewhere).
        test_accuracy: the training loop's last test accuracy; steps, train_time_s: its
            optimiser steps and wall time.
        probe: the positional probe (:func:`~lens_possym.papers.b.probe.positional_probe`)
            or ``None``; history: ``[[step, test accuracy], ...]``; config: the model's
            :class:`~lens_possym.papers.b.encoder.EncoderConfig` as a dict.
        eval_size, accuracy_se, ablation_se: the scoring sentences' count, the accuracy's
            binomial standard error and each head's paired drop standard error
            ``[n_layers][n_heads]`` (``+levelled`` cells, :mod:`.levelled`; ``None`` in older
            records, whose size is their preset's ``analysis_size``).
        levelling: the ``+levelled`` budget check (:func:`.levelled.levelling_summary`:
            cumulative steps, extensions, last-fifth and last-quarter gains, levelled).
        note: a remark written into the file by hand (``None``: none).
    """

    FORMAT = "lens-possym/paper-b-cell@1"
    UNTAGGED_OK = True          # the file's entries carry no tag

    preset: str
    task: str
    scheme: str
    variant: str
    seed: int
    accuracy: float
    ablation: dict[str, Any]
    ablation_kind: str = "per head"
    ablation_grid: list[list[float]] | None = None
    ablation_official: dict[str, Any] | None = None
    ablation_official_grid: list[list[float]] | None = None
    test_accuracy: float | None = None
    steps: int | None = None
    train_time_s: float | None = None
    probe: dict[str, Any] | None = None
    history: list[list[float]] | None = None
    config: dict[str, Any] | None = None
    eval_size: int | None = None
    accuracy_se: float | None = None
    ablation_se: list[list[float]] | None = None
    levelling: dict[str, Any] | None = None
    note: str | None = None

    @property
    def key(self) -> tuple[str, str, str, str, int]:
        """``(preset, task, variant, scheme, seed)``: what identifies a record."""
        return (self.preset, self.task, self.variant, self.scheme, self.seed)

    def to_dict(self) -> dict[str, Any]:
        """The file's entry: every field in the file's order, the optional ones
        (``ablation_official*``, ``note``) only when set."""
        return {name: getattr(self, name) for name in _ORDER
                if name not in _OPTIONAL or getattr(self, name) is not None}

    def summary(self) -> dict[str, Any]:
        return {"preset": self.preset, "task": self.task, "scheme": self.scheme,
                "variant": self.variant, "seed": self.seed, "accuracy": self.accuracy,
                "deposit": bool(self.ablation.get("deposit"))}

    def _headline(self) -> list[str]:
        return [f"deposit={bool(self.ablation.get('deposit'))}"]

    def _table(self):
        """One row per head: ``layer``, ``head``, ``score`` (``"ablated_accuracy"``) and
        ``value`` (the accuracy with that head ablated alone)."""
        import pandas as pd

        rows = [{"layer": layer, "head": head, "score": "ablated_accuracy", "value": value}
                for layer, row in enumerate(self.ablation_grid or [])
                for head, value in enumerate(row)]
        return pd.DataFrame.from_records(rows, columns=["layer", "head", "score", "value"])


def record_key(record: CellRecord | Mapping[str, Any]) -> tuple:
    """``(preset, task, variant, scheme, seed)``: what identifies a record (a
    :class:`CellRecord` or its mapping)."""
    if isinstance(record, CellRecord):
        return record.key
    return (record["preset"], record["task"], record["variant"], record["scheme"],
            record["seed"])


def as_dicts(records: Iterable[CellRecord | Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The records as the mappings the rules read (a :class:`CellRecord` by its
    :meth:`~CellRecord.to_dict`)."""
    return [r.to_dict() if isinstance(r, CellRecord) else dict(r) for r in records]
