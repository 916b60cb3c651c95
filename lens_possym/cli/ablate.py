"""``lens-possym ablate``: take RoPE frequencies away from heads and measure a task.

Two forms::

    lens-possym ablate --model gemma-3-270m --heads 12.0,13.1 --freqs 0:16 --mode zero --out DIR
    lens-possym ablate --model gemma-3-270m --sweep bands --out DIR

The first ablates the chosen frequency ids of the chosen heads together and reports the
binding task's accuracy and logit difference before and after (``DIR/ablate.json``). The
second ablates each band of each head alone over the whole model (or ``--layers``) and
writes ``DIR/sweep.json`` and one heatmap per metric (``DIR/sweep_<metric>.png``).
``--prompts FILE`` uses your own prompts instead of the binding task (cut to the shortest
one's token length; the metrics are the accuracy and the loss of predicting each prompt's
last token). ``--model`` also takes a ``.gguf`` file or a Hugging Face folder;
``--model tiny-<family>`` uses a tiny random model (for smoke tests); ``--device``
picks where the model runs. Every effect is ablated − baseline.
"""

from __future__ import annotations

import time
from pathlib import Path

from .. import experiments, interventions, report, resolved, tasks, viz
from .._json import dumps
from ..errors import InvalidSelectionError, UsageError
from ..interventions.modes import MODES, SIDES
from ._command import add_command
from ._model_args import add_model_args, load_from_args
from ._output import check_output_dir, staged_dir
from ._task_check import print_task_check
from ._prompts import add_prompts_args, add_task_args, equal_length, prompt_tokens
from ._types import freq_ids_text, layers_text, positive_int
from .profile import command_line


HELP = "ablate RoPE frequencies of heads and measure the binding task"
DESCRIPTION = ("Ablate chosen RoPE frequencies of chosen heads (or sweep every band of every head)"
               " and report binding-task accuracy and logit difference before and after.")


def register(sub) -> None:
    parser = add_command(sub, "ablate", run, HELP, DESCRIPTION)
    add_model_args(parser)
    parser.add_argument("--task", default="binding", choices=["binding"])
    add_prompts_args(parser, "the prompts are cut to the shortest one's token length and the "
                     "metrics are the accuracy and loss of predicting each one's last token")
    parser.add_argument("--heads", help="heads as LAYER.HEAD, comma-separated (e.g. 12.0,13.1; "
                        "12.* for a whole layer)")
    parser.add_argument("--freqs", default="all", type=freq_ids_text,
                        help="frequency ids, comma-separated: ids, half-open START:STOP ranges "
                        "(0:4 = 0,1,2,3), or high/mid/low (thirds, id 0 = fastest rotation); "
                        "default all")
    parser.add_argument("--mode", default="zero", choices=MODES)
    parser.add_argument("--side", choices=SIDES,
                        help="which side to edit (default q for zero/mean, qk for unrotate)")
    parser.add_argument("--sweep", choices=["bands"],
                        help="ablate each band of each head alone over the model")
    parser.add_argument("--bands", type=positive_int, default=3, help="number of bands for --sweep")
    parser.add_argument("--layers", type=layers_text,
                        help="layers to sweep: ids and half-open START:STOP ranges, "
                        "comma-separated (default all)")
    add_task_args(parser)
    parser.add_argument("--reference-prompts", type=positive_int, default=32,
                        help="prompts (another seed) to take the means over for --mode mean")
    parser.add_argument("--per-position", action="store_true",
                        help="--mode mean: one mean per position instead of pooled")
    parser.add_argument("--out", metavar="DIR", help="write JSON (and the sweep's heatmaps) here")
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bar")


_LABELS = {"accuracy": "accuracy", "candidate_accuracy": "candidate accuracy",
           "logit_diff": "logit difference", "loss": "loss"}
_SHORT = {"logit_diff": "logit diff", "loss": "loss"}


def _table(rows: list[tuple[str, float, float, dict | None]]) -> str:
    lines = [f"  {'':<20} {'before':>8} {'after':>8} {'change':>8} {'± SE':>7}  95% interval"]
    for label, before, after, change in rows:
        line = f"  {label:<20} {before:>8.3f} {after:>8.3f} {after - before:>+8.3f}"
        if change:
            line += (f" {change['se']:>7.3f}  [{change['ci_low']:+.3f}, "
                     f"{change['ci_high']:+.3f}]")
        lines.append(line)
    return "\n".join(lines)


def _change(before: dict, after: dict) -> dict[str, dict[str, float]]:
    """Per metric with per-prompt values: the mean change over prompts (after − before,
    paired), its standard error and 95% bootstrap interval."""
    out = {}
    for name, values in before.items():
        if values is None or after.get(name) is None:
            continue
        out[name] = experiments.uncertainty((after[name] - values)[None],
                                            allow_nan=True).item()
    return out


def _task(model, args):
    """``(tokens, metrics, main metric, header, task info, reference tokens)`` of the
    binding task or of ``--prompts``."""
    if args.prompts:
        full, n = equal_length(prompt_tokens(model, args.prompts, args.field))
        batch = experiments.ImportanceBatch(tokens=full[:, :-1], answers=full[:, -1],
                                              name="prompts")
        metric = experiments.importance.importance_metric
        metrics = {name: (lambda logits, fn=metric(name, per_prompt=True): fn(logits, batch))
                   for name in ("accuracy", "loss")}
        header = (f"{args.model} · {batch.n_prompts} prompts from {args.prompts}, cut to {n} "
                  f"tokens: the last one predicted from the {n - 1} before it")
        info = {"name": "prompts", "file": str(args.prompts), "n_prompts": batch.n_prompts,
                "n_tokens": n - 1}
        info["task_check"] = tasks.batch_check(model, batch)
        # mean ablation: the means over the prompts themselves
        return batch.tokens, metrics, "loss", header, info, batch.tokens
    task = tasks.binding_task(model, n_prompts=args.n_prompts, n_pairs=args.n_pairs, seed=args.seed)
    reference = None
    if args.mode == "mean":
        reference = tasks.binding_task(model, n_prompts=args.reference_prompts,
                                       n_pairs=args.n_pairs, seed=args.seed + 1000).tokens
    header = (f"{args.model} · binding task: {task.n_prompts} prompts of {task.n_pairs} pairs, "
              f"{task.tokens.shape[1]} tokens (seed {args.seed})")
    info = {"name": "binding", "n_prompts": task.n_prompts, "n_pairs": task.n_pairs,
            "n_tokens": int(task.tokens.shape[1]), "seed": args.seed,
            "task_check": tasks.batch_check(model, experiments.ImportanceBatch.from_binding(task))}
    return (task.tokens, experiments.binding_metrics(task, per_prompt=True), "logit_diff",
            header, info, reference)


def run(args) -> int:
    import torch

    if (args.sweep is None) == (args.heads is None):
        raise InvalidSelectionError("pass either --heads (with --freqs) or --sweep bands")
    if args.per_position and args.mode != "mean":
        raise UsageError(f"lens-possym ablate: error: --per-position takes one mean per "
                         f"position, for --mode mean only (got --mode {args.mode}); leave it "
                         "out or pass --mode mean")
    if args.out:
        check_output_dir(args.out)
    model = load_from_args(args)
    tokens, metrics, main, header, info, reference = _task(model, args)
    check = info.pop("task_check")
    out = Path(args.out) if args.out else None
    per_position = args.per_position

    if args.sweep is None:
        geometry = resolved.resolve(model)       # once: the selection and the hooks read it
        selection = interventions.parse_selection(args.heads, geometry.specs, args.freqs)
        spec = interventions.Intervention("ablate_frequencies", selection, mode=args.mode,
                                          side=args.side, per_position=per_position)
        with torch.no_grad():
            before, before_prompts = experiments.metrics.evaluate_metrics_per_prompt(
                metrics, model(tokens))
            with spec.apply(geometry, reference=reference):
                after, after_prompts = experiments.metrics.evaluate_metrics_per_prompt(
                    metrics, model(tokens))
        change = _change(before_prompts, after_prompts)
        heads = [f"{layer}.{head}" for layer, hs in selection.items() for head in hs]
        print(header)
        print_task_check(check)
        print(f"{args.mode}-ablating frequency ids {args.freqs} of heads {', '.join(heads)}")
        print(_table([(_LABELS.get(name, name), before[name], after[name], change.get(name))
                      for name in before]))
        if out:
            payload = {
                "model": args.model, "task": info["name"], "mode": args.mode, "side": args.side,
                **{k: v for k, v in info.items() if k != "name"},
                "selection": {f"{layer}.{head}": list(ids) for layer, hs in selection.items()
                              for head, ids in hs.items()},
                "intervention": spec.to_dict(), "before": before, "after": after,
                "change": change, "task_check": check,
            }
            page = report.ablation_report(
                model=args.model, selection=payload["selection"], mode=args.mode, side=args.side,
                before=before, after=after, task=info, command=command_line(args),
                change=change, task_check=check)
            with staged_dir(out) as stage:  # both files, or neither
                (stage / "ablate.json").write_text(dumps(payload, indent=1))
                page.save(stage / "report.html")
            print(f"wrote {out / 'ablate.json'} and {out / 'report.html'}")
        return 0

    start = time.perf_counter()
    sweep = experiments.band_sweep(model, tokens, metrics, bands=args.bands,
                       mode=args.mode, side=args.side, per_position=per_position, layers=args.layers,
                       reference=reference, progress=not args.no_progress)
    seconds = time.perf_counter() - start
    print(header)
    print_task_check(check)
    print(f"{args.mode}-ablating each of {len(sweep.band_names)} bands of each head alone "
          f"({sum(len(h) for h in sweep.heads.values()) * len(sweep.band_names)} passes, "
          f"{seconds:.0f} s)")
    print("baseline: " + ", ".join(f"{_LABELS.get(name, name)} {value:.3f}"
                                   for name, value in sweep.baseline.items()))
    rises = main == "loss"
    print(f"largest {'rises' if rises else 'drops'} in {_LABELS[main]} (effect = ablated − "
          "baseline):")
    print(f"  {'head':>6} {'band':>8} {'Δ ' + _SHORT[main]:>13} {'± SE':>7} {'Δ accuracy':>11}")
    acc, se = sweep.effect("accuracy"), sweep.effect_se(main)
    for layer, head, band, value in sweep.top(10, main, raise_=rises):
        b = sweep.band_names.index(band)
        print(f"  {f'{layer}.{head}':>6} {band:>8} {value:>+13.3f} {float(se[layer, head, b]):>7.3f} "
              f"{float(acc[layer, head, b]):>+11.3f}")
    mean_effect = sweep.effect(main)[sweep.layers].nanmean(dim=(0, 1))
    print(f"mean Δ {_LABELS[main]} per band: " + ", ".join(
        f"{name} {float(v):+.3f}" for name, v in zip(sweep.band_names, mean_effect)))
    if out:
        payload = {"format": sweep.FORMAT,  # BandSweep.load reads it
                   "model": args.model, "task": info["name"],
                   **{k: v for k, v in info.items() if k != "name"}, "seconds": seconds,
                   "task_check": check,
                   **sweep.to_dict()}
        from matplotlib.figure import Figure  # no pyplot: no global backend state

        n_layers = len(sweep.layers)
        with staged_dir(out) as stage:  # every file, or none
            (stage / "sweep.json").write_text(dumps(payload, indent=1))
            for metric in sweep.metrics:
                fig = Figure(figsize=(2.0 + 2.2 * len(sweep.band_names), 1.2 + 0.28 * n_layers),
                             constrained_layout=True)
                axes = fig.subplots(1, len(sweep.band_names), sharey=True, squeeze=False)[0]
                viz.plot_band_sweep(sweep, metric, axes=axes)
                fig.savefig(stage / f"sweep_{metric}.png", dpi=120)
            report.band_sweep_report(sweep, model=args.model, task=info, seconds=seconds,
                                     command=command_line(args),
                                     task_check=check).save(stage / "report.html")
        print(f"wrote {out / 'sweep.json'}, {out / 'report.html'} and {out}/sweep_*.png")
    return 0
