"""``lens-possym paper-c``: paper C's reproduction pipeline (:mod:`.pipeline`): train the
runs as queues, analyse every finished run, measure the length grid, write docs/paper_c.md
and recompute its verdicts from the committed files; and the one-setting-at-a-time
ablation (:mod:`.settings_ablation`)."""

from __future__ import annotations

import argparse
from pathlib import Path

from ...plugins import add_command, non_negative_int, positive_int, with_threads
from . import pipeline, report, settings_ablation, stages, workspace

HELP = ("paper C's pipeline: train the runs, analyse them, the length grid, write "
        "docs/paper_c.md")
DESCRIPTION = ("Paper C reproduced, one cached stage at a time. 'kernels' checks in a minute "
               "that this machine retrains the committed runs; 'train' trains (or resumes) a "
               "run per task; 'queue N' is one of the two training queues (start one per "
               "core); 'analyse' runs every analysis (dynamics, roles, discrepancy, lengths, "
               "masking, frequency) of every finished run, each cell cached; 'grid' measures "
               "run x reading x length into docs/paper_c_results.json; 'report' writes "
               "docs/paper_c.md from the records and the cache; 'verdicts' recomputes every "
               "verdict from the committed files; 'stamp' gives files and cells written by "
               "older code their run's identity; 'ablate-settings' changes one setting at a "
               "time. Runs go to --runs ($PAPER_C_RUNS or out/paper_c/runs), analyses to "
               "--cache ($PAPER_C_CACHE or out/paper_c/cache); paths are relative to the "
               "working directory (run it from the repository's root).")

# named here so that --help imports no torch (tests keep them equal to the modules')
TASKS = ("number", "letter")                  # workspace.TASKS
PRESETS = ("cpu", "paper", "tiny")            # presets.MULTIHOP_PRESETS
FILLERS = ("target", "answer", "duplicates", "pretarget", "mixed", "repeat", "reach")
ANALYSES = ("dynamics", "roles", "discrepancy", "lengths", "masking", "frequency")
LM_LENGTHS = (12, 48, 100, 300, 32, 200, 24, 64, 16, 80, 150)   # workspace.LM_LENGTHS
MASK_LENGTHS = (100, 300, 850)                # workspace.MASK_LENGTHS
GRID_LENGTHS = (17, 50, 100, 200, 300, 500, 850, 1000)
VARIANTS = ("base", "dropout", "width", "lr_schedule", "steps")   # settings_ablation.VARIANTS

#: each step, its help line, and the step-specific options it takes (besides the common ones)
STEPS = {
    "kernels": ("does this machine retrain the committed runs? each --tasks run of (--preset, "
                "--seed) to its record's first evaluation (or --step); exit 1 on a "
                "difference", ("step",)),
    "train": ("train (or resume) one run per task of (--preset, --seed)", ()),
    "queue": ("training queue N (0: Number, 1: Letter): paper seeds 0-2, then cpu", ()),
    "analyse": ("every analysis of every finished run (--presets, --seeds, --tasks)",
                ("analyses", "partial")),
    "analyse-queue": ("analyse and report every --poll s until --until runs are finished",
                      ("analyses", "partial")),
    "dynamics": ("scores, entropy and accuracy per hop at every checkpoint", ("partial",)),
    "timing": ("exact scoring of every checkpoint against re-run", ("force",)),
    "roles": ("roles, causal roles, logit lens, residual patching", ()),
    "discrepancy": ("constructions, Theorem 3.2, trained heads' gaps", ()),
    "lengths": ("accuracy at lengths 17..850 under every filler reading", ()),
    "masking": ("the extension hidden from layers 0-3, and at trained-range positions", ()),
    "frequency": ("Table 1 / Fig 8: each layer's frequency profile", ()),
    "grid": ("every finished run x reading x length into docs/paper_c_results.json",
             ("grid",)),
    "lm": ("gemma-3-270m and smollm2-135m on the 1-hop prompts", ("lm",)),
    "report": ("docs/paper_c.md, docs/paper_c_results.json, docs/figures/paper_c/", ()),
    "verdicts": ("recompute every verdict from the committed files; exit 1 on a difference",
                 ()),
    "stamp": ("stamp the --cache files and grid cells older code wrote with their run's "
              "identity, where it can be shown (idempotent)", ()),
    "time-cell": ("CPU seconds of one grid cell (planning the grid)", ("grid",)),
    "all": ("train, every analysis, report", ("analyses", "partial")),
}


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--tasks", nargs="+", default=list(TASKS), choices=TASKS)
    p.add_argument("--preset", default="cpu", choices=PRESETS)
    p.add_argument("--seed", type=non_negative_int, default=0)
    p.add_argument("--device", default="cpu")
    p.add_argument("--threads", type=non_negative_int, default=1,
                   help="torch CPU threads (default 1); 0 keeps torch's default")
    p.add_argument("--runs", type=Path, default=None,
                   help="folder of the run folders (default $PAPER_C_RUNS or out/paper_c/runs)")
    p.add_argument("--cache", type=Path, default=None,
                   help="folder of the cached stage results (default $PAPER_C_CACHE or "
                        "out/paper_c/cache)")
    p.add_argument("--presets", nargs="+", default=["paper", "cpu"],
                   help="analyse/grid/report: the presets to read (default paper cpu)")
    p.add_argument("--seeds", nargs="+", type=non_negative_int, default=[0, 1, 2],
                   help="analyse/grid/report: the seeds to read (default 0 1 2)")
    p.add_argument("--docs", type=Path, default=Path("docs"),
                   help="where the records (paper_c_runs/), the report, the results and "
                        "the figures go (default docs/)")


def _specific(p: argparse.ArgumentParser, group: str) -> None:
    if group == "analyses":
        p.add_argument("--analyses", nargs="+", default=list(ANALYSES), choices=ANALYSES,
                       help="which analyses, in this order (default: all)")
    elif group == "partial":
        p.add_argument("--partial", action="store_true",
                       help="dynamics: score the complete 10-checkpoint chunks of a run still "
                            "training (cached for later)")
    elif group == "force":
        p.add_argument("--force", action="store_true", help="measure the timing again")
    elif group == "step":
        p.add_argument("--step", type=positive_int, default=None,
                       help="compare the record's evaluation at this step (default: its "
                            "first; a later one is a stronger check and costs more)")
    elif group == "lm":
        p.add_argument("--lm-lengths", type=positive_int, nargs="+", default=list(LM_LENGTHS))
        p.add_argument("--lm-prompts", type=positive_int, default=10)
    elif group == "grid":
        p.add_argument("--readings", nargs="+", default=None, choices=FILLERS,
                       metavar="READING",
                       help="the readings of the extra symbols (default: every one)")
        p.add_argument("--grid-lengths", type=positive_int, nargs="+",
                       default=list(GRID_LENGTHS),
                       help="the lengths (default 17 50 100 200 300 500 850 1000)")
        p.add_argument("--mask-lengths", type=positive_int, nargs="*",
                       default=list(MASK_LENGTHS),
                       help="the masking diagnostic's lengths (default 100 300 850)")
        p.add_argument("--grid-prompts", type=positive_int, default=1000,
                       help="prompts per cell (default 1000)")


#: the options of each group, by their attribute names
_DESTS = {"analyses": ("analyses",), "partial": ("partial",), "force": ("force",),
          "step": ("step",),
          "lm": ("lm_lengths", "lm_prompts"),
          "grid": ("readings", "grid_lengths", "mask_lengths", "grid_prompts")}
#: what a step that does not take an option reads instead
_DEFAULTS = {"analyses": list(ANALYSES), "partial": False, "force": False, "step": None,
             "lm_lengths": list(LM_LENGTHS), "lm_prompts": 10, "readings": None,
             "grid_lengths": list(GRID_LENGTHS), "mask_lengths": list(MASK_LENGTHS),
             "grid_prompts": 1000}


def register(sub) -> None:
    parser = add_command(sub, "paper-c", _dispatch, HELP, DESCRIPTION)
    steps = parser.add_subparsers(dest="paper_c_command", metavar="STEP", required=True)
    for name, (help_line, groups) in STEPS.items():
        p = steps.add_parser(name, help=help_line, description=help_line)
        if name == "queue":
            p.add_argument("number", type=int, choices=(0, 1),
                           help="the queue: 0 (Number runs) or 1 (Letter runs)")
        _common(p)
        for group in groups:
            _specific(p, group)
        if name == "analyse-queue":
            p.add_argument("--poll", type=positive_int, default=600,
                           help="seconds between two rounds (default 600)")
            p.add_argument("--until", type=positive_int, default=12,
                           help="stop once this many runs are finished (default 12: both "
                                "presets x three seeds x both tasks)")
        taken = {dest for group in groups for dest in _DESTS[group]}
        p.set_defaults(**{k: v for k, v in _DEFAULTS.items() if k not in taken})
    _ablation(steps)


def _ablation(steps) -> None:
    p = steps.add_parser("ablate-settings", help="why Letter fails at length: one setting at "
                         "a time from a base preset, diagnostics tracked over training",
                         description="Each variant is the base preset with exactly one "
                         "setting changed to the paper preset's value; accuracy per length, "
                         "the masking diagnostic and the early heads' gaps are tracked at "
                         "every --track-every steps (lens_possym.papers.c.settings_ablation).")
    p.add_argument("--base", default="cpu", choices=PRESETS,
                   help="the preset the variants change")
    p.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=VARIANTS)
    p.add_argument("--tasks", nargs="+", default=["letter"], choices=TASKS)
    p.add_argument("--seed", type=non_negative_int, default=0)
    p.add_argument("--track-every", type=positive_int, default=500)
    p.add_argument("--lengths", type=positive_int, nargs="+", default=[17, 100, 300, 850])
    p.add_argument("--mask-lengths", type=positive_int, nargs="+", default=[300, 850])
    p.add_argument("--n-prompts", type=positive_int, default=256)
    p.add_argument("--gap-inputs", type=positive_int, default=64)
    p.add_argument("--out", type=Path, default=Path("out") / "paper_c" / "ablate")
    p.add_argument("--preset-runs", type=Path, default=None,
                   help="where the presets' own runs are (default $PAPER_C_RUNS or "
                        "out/paper_c/runs); the base variant reads its run there when the "
                        "settings are the same")
    p.add_argument("--record", type=Path, default=None,
                   help="also write the summary here (the committed record the report "
                        "reads: docs/paper_c_ablate.json)")
    p.add_argument("--threads", type=non_negative_int, default=1,
                   help="torch CPU threads (default 1); 0 keeps torch's default")


@with_threads
def _dispatch(args: argparse.Namespace) -> int:
    step = args.paper_c_command
    if step == "ablate-settings":
        if args.preset_runs is None:
            args.preset_runs = workspace.default_runs()
        settings_ablation.run(args)
        return 0
    args.runs = args.runs if args.runs is not None else workspace.default_runs()
    args.cache = args.cache if args.cache is not None else workspace.default_cache()
    if args.readings is None:
        args.readings = list(FILLERS)
    run_step(step, args)
    return 0


def run_step(step: str, args: argparse.Namespace) -> None:
    """Run pipeline step ``step`` with the parsed (and path-resolved) ``args``."""
    table = {"kernels": pipeline.stage_kernels, "train": pipeline.stage_train,
             "queue": pipeline.queue, "analyse": pipeline.stage_analyse,
             "analyse-queue": pipeline.analyse_queue,
             "dynamics": stages.stage_dynamics, "timing": stages.stage_timing,
             "roles": stages.stage_roles, "discrepancy": stages.stage_discrepancy,
             "lengths": stages.stage_lengths, "masking": stages.stage_masking,
             "frequency": stages.stage_frequency, "grid": pipeline.stage_grid,
             "lm": pipeline.stage_lm, "report": report.write_report,
             "verdicts": pipeline.stage_verdicts, "stamp": pipeline.stage_stamp,
             "time-cell": pipeline.stage_time_cell,
             "all": pipeline.stage_all}
    table[step](args)
