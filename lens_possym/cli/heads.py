"""``lens-possym heads``: ablate each attention head alone and rank the heads by importance.

::

    lens-possym heads --model gemma-3-270m --task binding --metric logit_diff --out DIR
    lens-possym heads --task distance --metric accuracy --mode mean --layers 0:9

For every layer and query head, the head's output (``hook_z``) is zeroed (``--mode zero``)
or replaced by its mean over reference prompts (``--mode mean``), and the task's metric is
measured; the command prints the baseline, the heads whose removal hurts most, and how
concentrated the effect is (the top head's share of the summed drops, the top-3 share, the
Gini coefficient; see ``docs/head_importance.md``), each drop with its standard error over
prompts. ``--out DIR`` writes ``heads.json`` (with per-prompt values, standard errors and
95% bootstrap intervals), the heatmap ``heads.png``, ``heads_top.png`` (the top heads'
drops with their intervals as error bars) and ``report.html``. Before the ablations it
prints whether the unablated model solves the prompts (the answer above every distractor,
against chance plus 0.1; a warning if not: lens_possym.tasks.check).

Tasks: ``binding`` (entity-attribute binding prompts) and ``distance`` (continue a listed
word sequence ``--distance`` words apart; lens_possym.tasks.word_distance), or your own
``--prompts FILE`` (text or JSONL, as ``dataset`` reads them; cut to the shortest one's
token length, each one's last token the answer; metric ``loss`` by default).
"""

from __future__ import annotations

import sys
from pathlib import Path

from .. import _ids, experiments, report, tasks, viz
from ..errors import InvalidSelectionError
from ._command import add_command
from ._model_args import add_model_args, load_from_args
from ._output import check_output_dir, staged_dir
from ._task_check import print_task_check
from ._prompts import add_prompts_args, add_task_args, equal_length, prompt_tokens
from ._types import layers_text, positions_text, positive_int
from .profile import command_line

METRICS = ("logit_diff", "accuracy", "loss")


HELP = "ablate each head alone and rank heads by their effect on a task"
DESCRIPTION = ("Zero- or mean-ablate every attention head alone and report the drop in a task "
               "metric per head, the most important head, and how concentrated the effect is.")


def register(sub) -> None:
    parser = add_command(sub, "heads", run, HELP, DESCRIPTION)
    add_model_args(parser)
    parser.add_argument("--task", default="binding", choices=["binding", "distance"])
    add_prompts_args(parser, "the prompts are cut to the shortest one's token length, and each "
                     "one's last token is the answer (metrics loss, the default, and accuracy)")
    parser.add_argument("--metric", choices=METRICS,
                        help="default logit_diff for the tasks, loss for --prompts")
    parser.add_argument("--mode", default="zero", choices=["zero", "mean"])
    parser.add_argument("--layers", type=layers_text,
                        help="layers whose heads are ablated: ids and half-open START:STOP ranges, "
                        "comma-separated (e.g. 0:4,7); default all")
    parser.add_argument("--positions", type=positions_text,
                        help="ablate only at these positions (e.g. -1 for the last; ids and "
                        "half-open START:STOP ranges); default all")
    add_task_args(parser, distance=True)
    parser.add_argument("--reference-prompts", type=positive_int, default=32,
                        help="--mode mean: prompts (seed + 1000) to take the means over")
    parser.add_argument("--heads-per-pass", type=positive_int, default=8,
                        help="ablations batched into one forward pass")
    parser.add_argument("--top", type=positive_int, default=5, help="heads to list")
    parser.add_argument("--out", metavar="DIR",
                        help="write heads.json, heads.png, heads_top.png and report.html here")
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bar")


def _batch(args, model, seed: int, n_prompts: int):
    if args.prompts:
        full, n = equal_length(prompt_tokens(model, args.prompts, args.field))
        batch = experiments.ImportanceBatch(tokens=full[:, :-1], answers=full[:, -1],
                                              name="prompts")
        return batch, (
            f"{full.shape[0]} prompts from {args.prompts}, cut to {n} tokens: the last one "
            f"predicted from the {n - 1} before it")
    if args.task == "binding":
        task = tasks.binding_task(model, n_prompts=n_prompts, n_pairs=args.n_pairs, seed=seed)
        return experiments.ImportanceBatch.from_binding(task), (
            f"binding task: {task.n_prompts} prompts of {task.n_pairs} pairs, "
            f"{task.tokens.shape[1]} tokens")
    task = tasks.word_distance_task(model, n_prompts=n_prompts, n_words=args.n_words,
                                    n_cue=args.n_cue, distance=args.distance, seed=seed)
    return task.importance_batch(), (
        f"word-distance task: {task.n_prompts} prompts, {task.n_words} words, cue "
        f"{task.n_cue}, distance {task.distance:+d}, {task.tokens.shape[1]} tokens "
        f"(chance accuracy {task.chance:.3f})")


def run(args) -> int:
    if args.metric is None:
        args.metric = "loss" if args.prompts else "logit_diff"
    if args.prompts and args.metric == "logit_diff":
        raise InvalidSelectionError(
            "--metric logit_diff needs distractor tokens, which --prompts do not have; use "
            "--metric loss or accuracy")
    if args.out:
        check_output_dir(args.out)
    model = load_from_args(args)
    batch, header = _batch(args, model, args.seed, args.n_prompts)
    check = tasks.batch_check(model, batch)
    config = experiments.ImportanceConfig(
        metric=args.metric, mode=args.mode, heads_per_pass=args.heads_per_pass,
        layers=None if args.layers is None else _ids.read_ids(
            args.layers, int(model.cfg.n_layers), what="layer", from_end=True),
        positions=None if args.positions is None else _ids.read_ids(
            args.positions, int(batch.tokens.shape[1]), what="position", from_end=True))
    reference = None
    if args.mode == "mean":  # your prompts: the means over them
        reference = batch.tokens if args.prompts else _batch(
            args, model, args.seed + 1000, args.reference_prompts)[0].tokens
    result = experiments.head_importance(model, batch, args.metric, config=config,
                                           reference=reference, progress=not args.no_progress)
    result.info.update({"model": args.model, "task": "prompts" if args.prompts else args.task,
                        "seed": args.seed, "description": header, "task_check": check})
    print(f"{args.model} · {header} (seed {args.seed})")
    print_task_check(check)
    print(f"{args.mode}-ablating each of {int(result.ablated.isfinite().sum())} heads alone: "
          f"{result.n_passes} passes, {result.seconds:.1f} s")
    print(f"baseline {args.metric}: {result.baseline:.3f}")
    print(f"  {'head':>6} {'Δ':>9} {'± SE':>7} {'Δ/|base|':>9} {'ablated':>9}")
    se = result.effect_se
    for layer, head, value in result.top(args.top):
        relative = float(result.relative[layer, head])
        print(f"  {f'{layer}.{head}':>6} {value:>+9.3f} {float(se[layer, head]):>7.3f} "
              f"{relative:>+9.2f} {float(result.ablated[layer, head]):>9.3f}")
    print(result.describe())
    if args.out:
        out = Path(args.out)
        from matplotlib.figure import Figure  # no pyplot: no global backend state

        n_layers, n_heads = result.ablated.shape
        fig = Figure(figsize=(max(5.5, 2.2 + 0.6 * n_heads), 2.2 + 0.32 * n_layers),
                     constrained_layout=True)
        viz.importance.plot_head_importance(result, ax=fig.subplots(),
                                            title=f"{args.model}, {result.info['task']}")
        top = _top_figure(result, args.top) if result.per_prompt is not None else None
        page = report.head_importance_report(
            result, model=args.model, command=command_line(args), task_check=check,
            figures={"heads": fig, "heads_top": top})
        with staged_dir(out) as stage:  # every file, or none
            (stage / "heads.json").write_text(result.to_json(indent=1, allow_nan=False))
            fig.savefig(stage / "heads.png", dpi=120)
            if top is not None:
                top.savefig(stage / "heads_top.png", dpi=120)
            page.save(stage / "report.html")
        print(f"wrote {out / 'heads.json'}, {out / 'heads.png'}"
              + (f", {out / 'heads_top.png'}" if top is not None else "")
              + f" and {out / 'report.html'}", file=sys.stderr)
    return 0


def _top_figure(result, k: int):
    """The ``k`` most important heads' Δ with 95% bootstrap intervals over prompts."""
    from matplotlib.figure import Figure

    unc = result.uncertainty()
    top = result.top(k)
    fig = Figure(figsize=(5.5, 1.3 + 0.3 * len(top)), constrained_layout=True)
    viz.plot_effects([f"{layer}.{head}" for layer, head, _ in top], [v for _, _, v in top],
                 [float(unc.low[layer, head]) for layer, head, _ in top],
                 [float(unc.high[layer, head]) for layer, head, _ in top], ax=fig.subplots(),
                 baseline=0.0, sort=False, xlabel=f"Δ {result.config.metric} (head ablated)",
                 title=f"most important heads, 95% bootstrap intervals over "
                       f"{result.n_prompts} prompts")
    return fig
