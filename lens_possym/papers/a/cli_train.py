"""``lens-possym train``: train one frequency-restricted toy model on a canonical task."""

from __future__ import annotations

from ... import report, training
from ...plugins import add_command, check_output_dir, freq_ids_text, staged_dir, with_threads
from ...cli.profile import command_line
from ...training import toy
from . import _toy_args


HELP = "train a toy RoPE model on index / retrieval / partial-induction"
DESCRIPTION = ("Train a one-layer, one-head, attention-only toy RoPE model whose head may use only"
               " the given frequency ids, on a canonical task. Writes metrics.json (accuracy "
               "overall and by answer position at every evaluation) and model.pt to --out.")


def register(sub) -> None:
    parser = add_command(sub, "train", run, HELP, DESCRIPTION)
    _toy_args.add_task_args(parser)
    parser.add_argument("--freq-ids", default=None, metavar="IDS", type=freq_ids_text,
                        help="frequency ids the head may use: ids, half-open START:STOP ranges "
                        "or high/mid/low, comma-separated, e.g. '3', '16,4' or '0:4' "
                        "(default: all). Id 0 is the fastest rotation; the last id is the "
                        "θ=0 (NoPE) tail")
    _toy_args.add_toy_model_args(parser)
    _toy_args.add_train_args(parser)
    parser.add_argument("--seed", type=int, default=0, help="weights and data seed")
    parser.add_argument("--out", required=True, metavar="DIR", help="output folder")


@with_threads
def run(args) -> int:
    check_output_dir(args.out)
    task = _toy_args.task_from_args(args)
    model = toy.ToyTransformer(toy.toy_config_for(task, seed=args.seed,
                                                  **_toy_args.toy_model_kwargs(args)))
    ids = _toy_args.parse_ids(args.freq_ids, model.cfg)
    model.set_frequencies(ids)
    angles = model.angles
    print(f"task: {task.describe()}")
    print(f"model: {model.extra_repr()}")
    print("head may use: " + ("all frequencies" if ids is None else ", ".join(
        f"id {f} (θ={float(angles[f]):.4g})" for f in ids)))
    with staged_dir(args.out) as stage:
        config = _toy_args.train_config_from(args, seed=args.seed, out_dir=str(stage))
        result = training.train(model, task, config, log=print if args.verbose_train else None)
        result.train_config["out_dir"] = str(args.out)  # where the files end up
        result.save(stage / "metrics.json")
        report.train_report(result, command=command_line(args), freq_ids=ids).save(
            stage / "report.html")
    print(f"test accuracy {result.test_accuracy:.4f} after {result.steps_run} steps "
          f"({result.train_time_s:.1f} s on {next(model.parameters()).device})")
    print("by answer position: " + " ".join(
        f"{p}:{a:.2f}" for p, a in zip(result.answer_positions, result.test_accuracy_by_position)))
    print(f"wrote {args.out}/metrics.json, {args.out}/model.pt and {args.out}/report.html")
    return 0
