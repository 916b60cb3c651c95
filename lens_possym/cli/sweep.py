"""``lens-possym sweep``: accuracy of frequency-restricted toy models against frequency id."""

from __future__ import annotations

from pathlib import Path

from ._toy_args import (
    add_model_args,
    add_task_args,
    add_train_args,
    apply_threads,
    make_task_from,
    model_kwargs_from,
    parse_ids,
    train_config_from,
)
from .profile import command_line


def register(sub) -> None:
    parser = sub.add_parser(
        "sweep",
        help="train one toy model per frequency id (or pair of ids) and compare",
        description="Train one toy model per frequency id (or per pair: --pair-with ID) on a "
        "canonical task and report test accuracy against frequency id and angle, accuracy by "
        "answer position, and the trained heads' positional/symbolic scores. Writes "
        "sweep.json, table.md, report.html, accuracy_vs_freq.png, accuracy_by_position.png and "
        "scores_vs_freq.png to --out.",
    )
    add_task_args(parser)
    parser.add_argument("--ids", default=None, metavar="IDS",
                        help="frequency ids to sweep, e.g. '0,2,4,8,16' or '0-16' "
                        "(default: every id)")
    parser.add_argument("--pair-with", type=int, default=None, metavar="ID",
                        help="give every run this id as well (e.g. the θ=0 id for "
                        "partial induction)")
    parser.add_argument("--seeds", default="0", help="comma-separated seeds (default 0)")
    parser.add_argument("--no-scores", action="store_true",
                        help="skip the positional/symbolic scores of the trained heads")
    add_model_args(parser)
    add_train_args(parser)
    parser.add_argument("--out", required=True, metavar="DIR", help="output folder")
    parser.set_defaults(func=run)


def run(args) -> int:
    with apply_threads(args):
        return _run(args)


def _run(args) -> int:
    from ..report import toy_sweep_report
    from ..synthetic import pairs_with, single_ids, sweep, toy_config_for
    from ..viz.synthetic import save_sweep_figures

    task = make_task_from(args)
    model_kwargs = model_kwargs_from(args)
    n_freqs = toy_config_for(task, **model_kwargs).n_freqs
    ids = parse_ids(args.ids) or list(range(n_freqs))
    sets = pairs_with(args.pair_with, ids) if args.pair_with is not None else single_ids(ids)
    seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
    print(f"task: {task.describe()}; {len(sets)} frequency set(s) × {len(seeds)} seed(s)")
    result = sweep(task, sets, seeds=seeds, train_config=train_config_from(args),
                   model_kwargs=model_kwargs, scores=not args.no_scores, out_dir=args.out,
                   log=print)
    print()
    print(result.table())
    paths = save_sweep_figures(result, args.out)
    toy_sweep_report(result, paths, command=command_line(args)).save(Path(args.out) / "report.html")
    print(f"\nwall time {result.wall_time_s:.1f} s; wrote {args.out}/sweep.json, table.md, "
          + ", ".join(p.name for p in paths) + ", report.html")
    return 0
