"""``lens-possym sweep``: accuracy of frequency-restricted toy models against frequency id."""

from __future__ import annotations

from ...plugins import (
    add_command, check_output_dir, freq_ids_text, int_list, non_negative_int, staged_dir,
    with_threads,
)
from ...cli.profile import command_line
from ...training import toy
from . import _toy_args, figures, report, sweeps


HELP = "train one toy model per frequency id (or pair of ids) and compare"
DESCRIPTION = ("Train one toy model per frequency id (or per pair: --pair-with ID) on a canonical "
               "task and report test accuracy against frequency id and angle, accuracy by answer "
               "position, and the trained heads' positional/symbolic scores. Writes sweep.json, "
               "table.md, report.html, accuracy_vs_freq.png, accuracy_by_position.png and "
               "scores_vs_freq.png to --out.")


def register(sub) -> None:
    parser = add_command(sub, "sweep", run, HELP, DESCRIPTION)
    _toy_args.add_task_args(parser)
    parser.add_argument("--ids", default=None, metavar="IDS", type=freq_ids_text,
                        help="frequency ids to sweep: ids, half-open START:STOP ranges or "
                        "high/mid/low, comma-separated, e.g. '0,2,4,8,16' or '0:17' "
                        "(default: every id)")
    parser.add_argument("--pair-with", type=non_negative_int, default=None, metavar="ID",
                        help="give every run this id as well (e.g. the θ=0 id for "
                        "partial induction)")
    parser.add_argument("--seeds", default=[0], type=int_list,
                        help="comma-separated seeds (default 0)")
    parser.add_argument("--no-scores", action="store_true",
                        help="skip the positional/symbolic scores of the trained heads")
    _toy_args.add_toy_model_args(parser)
    _toy_args.add_train_args(parser)
    parser.add_argument("--out", required=True, metavar="DIR", help="output folder")


@with_threads
def run(args) -> int:
    task = _toy_args.task_from_args(args)
    model_kwargs = _toy_args.toy_model_kwargs(args)
    check_output_dir(args.out)
    config = toy.toy_config_for(task, **model_kwargs)
    ids = _toy_args.parse_ids(args.ids, config) or list(range(config.n_freqs))
    if args.pair_with is not None:
        _toy_args.parse_ids(str(args.pair_with), config)  # in range, before any run starts
    sets = (sweeps.pairs_with(args.pair_with, ids) if args.pair_with is not None
            else sweeps.single_ids(ids))
    seeds = args.seeds
    print(f"task: {task.describe()}; {len(sets)} frequency set(s) × {len(seeds)} seed(s)")
    with staged_dir(args.out) as stage:
        result = sweeps.frequency_sweep(task, sets, seeds=seeds,
                              train_config=_toy_args.train_config_from(args),
                              model_kwargs=model_kwargs, scores=not args.no_scores,
                              out_dir=stage, log=print)
        paths = figures.save_sweep_figures(result, stage)
        report.toy_sweep_report(result, paths, command=command_line(args)).save(
            stage / "report.html")
    print()
    print(result.table())
    print(f"\nwall time {result.wall_time_s:.1f} s; wrote {args.out}/sweep.json, table.md, "
          + ", ".join(p.name for p in paths) + ", report.html")
    return 0
