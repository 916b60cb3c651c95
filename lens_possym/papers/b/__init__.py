"""Paper B: the Toeplitz view of positional encodings and the deposit pattern.

Its synthetic side: the distance and count tasks (:mod:`.tasks`), the encoder with every
positional scheme (:mod:`.encoder`: NoPE, absolute, ALiBi, T5, RoPE, partial RoPE, MLA, the
hybrid; intended and faithful variants), and the experiments, laid out as paper C's:
:mod:`.presets` (sizes, schedules, data), :mod:`.cells` (one trained model, its analyses
and its record), the analyses :mod:`.deposit` (per-head ablation, the deposit rule),
:mod:`.probe` (positional probe) and :mod:`.profile` (positional/symbolic scores),
:mod:`.verdicts` (the claims' rules) and :mod:`.report` (docs/paper_b.md's block), and
the rules of 2026-11-29: :mod:`.levelled` (training until a cell levels off, scoring on
4,096 sentences with standard errors), :mod:`.margins` (every threshold in standard
errors, "undecided" verdicts) and :mod:`.report_margins` (their block); the
``lens-possym encoder`` command, and the reproduction pipeline (:mod:`.pipeline`: the grid
as queues, the report) as ``lens-possym paper-b run | queue | report | verdicts |
migrate-records | refresh-probe``. (The Toeplitz decomposition of a head's logits is the
core's: :mod:`lens_possym.toeplitz`.)
"""

from ...plugins import Plugin, lazy_attributes

PLUGIN = Plugin(
    name="paper-b",
    title="Positional encodings as Toeplitz kernels; the deposit pattern",
    tasks={"distance": "lens_possym.papers.b.tasks:DistanceTask",
           "count": "lens_possym.papers.b.tasks:CountTask"},
    models={"scheme-encoder": "lens_possym.papers.b.encoder:SchemeEncoder"},
    commands=("lens_possym.papers.b.cli", "lens_possym.papers.b.cli_grid"),
)

_EXPORTS = {
    "tasks": ["DistanceTask", "CountTask"],
    "encoder": ["EncoderConfig", "SchemeEncoder", "SCHEMES", "VARIANTS", "encoder_config_for"],
    "presets": ["Preset", "ENCODER_PRESETS", "TASK_NAMES", "PROBE_SCHEMES", "DATA_REGIMES",
                "PAPER_LENGTH_STEPS", "CLAIM_GRID", "MAIN", "ROPE_FAMILY", "NON_ROPE",
                "parse_label", "preset_task", "with_data", "with_steps",
                "with_trigger_copies", "with_trigger_copies_name"],
    "cells": ["Cell", "make_model", "analysis_batch", "train_cell", "analyse_cell",
              "grid_cells", "cell_record"],
    "records": ["CellRecord", "record_key", "as_dicts"],
    "deposit": ["ablation_grid", "deposit_summary"],
    "probe": ["positional_probe"],
    "profile": ["profile_site", "encoder_profile"],
    "verdicts": ["Claim", "CLAIMS", "judge", "seed_view", "deposit_table", "late_gain",
                 "LEVELLED"],
    "report": ["verdict_markdown", "copies_ceiling", "faithful_departures", "DISTANCE_CLAIMS"],
    "levelled": ["levelled_off", "reference_step", "rule_gain", "window_gain",
                 "levelling_summary", "train_levelled",
                 "score_cell", "scoring_batch", "analyse_levelled", "levelled_record",
                 "levelled_name"],
    "margins": ["Margin", "Claim2", "CLAIMS2", "judge_margins", "first_layer_deposit",
                "all_of", "any_of", "accuracy_se"],
    "report_margins": ["margins_markdown"],
    "report_levelled": ["levelled_reading_markdown"],
    "pipeline": ["read_records", "read_verdicts"],
}
__getattr__, __dir__ = lazy_attributes(__name__, _EXPORTS)
__all__ = ["PLUGIN", *(name for names in _EXPORTS.values() for name in names)]
