"""``lens-possym paper-b``: paper B's reproduction pipeline (:mod:`.pipeline`): train the
grid as queues that share it, and write docs/paper_b.md's tables from what they left."""

from __future__ import annotations

import argparse

from ...plugins import (add_command, non_negative_int, positive_float, positive_int,
                        with_threads)
from . import pipeline

HELP = "paper B's pipeline: train the grid of scheme encoders, write docs/paper_b.md's tables"
DESCRIPTION = ("Paper B reproduced. 'run' trains and analyses the cells of a preset's grid "
               "(resumable; queues started on one grid share it, each cell's record written "
               "into --records at once); 'queue N' is one queue of the paper-length grid and "
               "then claim 5's +copies grid (start one per free core); 'report' writes "
               "docs/paper_b.md's block of a preset (paper-length: from the committed records; "
               "cpu: from the records too, its head profiles from the runs under --root); "
               "'verdicts' recomputes every verdict from the committed files and checks the "
               "page against them; 'migrate-records' turns a records file of the old "
               "format (a list of cells) into today's (verdicts and cells); 'refresh-probe' "
               "recomputes the probe of every finished cell. Paths are "
               "relative to the working directory (run it from the repository's root).")

PRESETS = ("cpu", "paper-length", "paper")    # lens_possym.papers.b.presets.ENCODER_PRESETS
TASKS = ("distance", "count")
DATA = ("stream", "fixed")
RECORDS = "docs/paper_b_results.json"
LEVELLED_HELP = ("train each cell until it levels off (< 1 point gained over the last 20 %% of "
                 "its steps; 2,400-step extensions, cap 19,200) and score it on 4,096 "
                 "sentences with standard errors: preset <name>+levelled "
                 "(docs/paper_b_rules.md, 2026-11-29)")     # pipeline.RECORDS (named here: --help stays light)


def _grid_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--root", default="runs/paper_b",
                        help="where the cells' runs and analyses go (default runs/paper_b)")
    parser.add_argument("--records", default=RECORDS,
                        help="the JSON each finished cell's record is written into ('' for "
                        "none; default docs/paper_b_results.json)")
    parser.add_argument("--threads", type=non_negative_int, default=1,
                        help="torch CPU threads (default 1); 0 keeps torch's default")


def register(sub) -> None:
    parser = add_command(sub, "paper-b", _dispatch, HELP, DESCRIPTION)
    steps = parser.add_subparsers(dest="paper_b_command", metavar="STEP", required=True)
    r = steps.add_parser("run", help="train and analyse the cells of a preset's grid")
    r.add_argument("--preset", default="cpu", choices=PRESETS)
    r.add_argument("--seeds", type=non_negative_int, nargs="+", default=[0])
    r.add_argument("--tasks", nargs="+", default=list(TASKS), choices=TASKS)
    r.add_argument("--only", choices=["intended", "faithful", "k"])
    r.add_argument("--labels", nargs="+", default=None, help="only these schemes (rope-k2...)")
    r.add_argument("--no-profile", action="store_true")
    r.add_argument("--data", choices=DATA, default=None,
                   help="the training data regime (default: the preset's)")
    r.add_argument("--epochs", type=positive_int, default=None, help="with --data fixed")
    r.add_argument("--steps", type=positive_int, default=None,
                   help="another step count (the preset is renamed <preset>@<steps>)")
    r.add_argument("--batch-size", type=positive_int, default=None,
                   help="another batch size (the preset is renamed ...-b<size>)")
    r.add_argument("--lr", type=positive_float, default=None,
                   help="another learning rate (the preset is renamed ...-lr<lr>)")
    r.add_argument("--trigger-copies", action="store_true",
                   help="the distance task with the official filler draw (preset "
                        "<name>+copies: extra trigger copies, a ceiling below 100 %%; MAIN "
                        "schemes only)")
    r.add_argument("--shard", default=None, help="I/N: every N-th cell from the I-th")
    r.add_argument("--levelled", action="store_true", help=LEVELLED_HELP)
    _grid_args(r)
    q = steps.add_parser("queue", help="one queue of the paper-length grid, then claim 5's")
    q.add_argument("number", type=non_negative_int, help="the queue's number, for its log")
    q.add_argument("--levelled", action="store_true", help=LEVELLED_HELP)
    _grid_args(q)
    p = steps.add_parser("report", help="write docs/paper_b.md's block of a preset")
    p.add_argument("--preset", default="cpu", choices=PRESETS)
    p.add_argument("--root", default="runs/paper_b",
                   help="cpu: the folder whose cpu/ holds the cells' analysis.json, read "
                        "for the head profiles only (default runs/paper_b)")
    p.add_argument("--out", default="docs", help="the folder of paper_b.md (default docs)")
    p.add_argument("--records", default=RECORDS)
    p.add_argument("--no-figures", action="store_true",
                   help="cpu: write the tables only, not docs/figures/paper_b/*.png")
    p.add_argument("--seeds", type=non_negative_int, nargs="+", default=[0, 1, 2])
    p.add_argument("--levelled", action="store_true",
                   help="the <preset>+levelled grid's verdicts under the 2026-11-29 rules "
                        "(also written into --records' \"verdicts\")")
    v = steps.add_parser("verdicts", help="recompute every verdict from the committed files "
                         "and check docs/paper_b.md's blocks against them (exit 1 on a "
                         "difference)")
    v.add_argument("--preset", default="paper-length", choices=("paper-length",))
    v.add_argument("--out", default="docs", help="the folder of paper_b.md (default docs)")
    v.add_argument("--records", default=RECORDS)
    v.add_argument("--seeds", type=non_negative_int, nargs="+", default=[0, 1, 2])
    v.add_argument("--levelled", action="store_true",
                   help="the <preset>+levelled grids' verdicts and blocks")
    g = steps.add_parser("migrate-records", help="turn a records file of the old format (a "
                         "JSON list of cells) into today's ({\"verdicts\", \"cells\"}), every "
                         "cell kept as it is")
    g.add_argument("--records", default=RECORDS)
    k = steps.add_parser("kernels", help="does this machine retrain the committed records? one "
                         "cell to its first loop evaluation, beside the record's (exit 1 if "
                         "they differ)")
    k.add_argument("--cell", nargs=4, metavar=("TASK", "SCHEME", "VARIANT", "SEED"),
                   default=["distance", "rope", "intended", "0"],
                   help="a paper-length cell (default distance rope intended 0)")
    k.add_argument("--step", type=positive_int, default=None,
                   help="compare the record's loop evaluation at this step (default: its "
                        "first; a later one is a stronger check and costs more)")
    k.add_argument("--records", default=RECORDS)
    k.add_argument("--threads", type=non_negative_int, default=1,
                   help="torch CPU threads (default 1); 0 keeps torch's default")
    f = steps.add_parser("refresh-probe", help="recompute the probe of every finished cell")
    f.add_argument("--preset", default="cpu", choices=PRESETS)
    f.add_argument("--root", default="runs/paper_b")


@with_threads
def _threaded(args: argparse.Namespace) -> int | None:
    return {"run": pipeline.run, "queue": pipeline.queue,
            "kernels": pipeline.kernels}[args.paper_b_command](args)


def _dispatch(args: argparse.Namespace) -> int:
    if args.paper_b_command in ("run", "queue", "kernels"):
        return _threaded(args) or 0
    elif args.paper_b_command == "report":
        pipeline.report(args)
    elif args.paper_b_command == "verdicts":
        pipeline.verdicts(args)
    elif args.paper_b_command == "migrate-records":
        pipeline.migrate_records(args)
    else:
        pipeline.refresh_probe(args)
    return 0
