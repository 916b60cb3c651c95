"""``lens-possym ablate``: take RoPE frequencies away from heads and measure a task.

Two forms::

    lens-possym ablate --model gemma-3-270m --heads 12.0,13.1 --freqs 0:16 --mode zero --out DIR
    lens-possym ablate --model gemma-3-270m --sweep bands --out DIR

The first ablates the chosen frequency ids of the chosen heads together and reports the
binding task's accuracy and logit difference before and after (``DIR/ablate.json``). The
second ablates each band of each head alone over the whole model (or ``--layers``) and
writes ``DIR/sweep.json`` and one heatmap per metric (``DIR/sweep_<metric>.png``).
``--model tiny-<family>`` uses a tiny random model (for smoke tests); ``--device``
picks where the model runs.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from .._json import dumps
from ..interventions.modes import MODES, SIDES
from ._model_args import add_model_args, load_from_args
from ._output import check_output_dir, staged_dir
from ._types import freq_ids_text, layers_text, positive_int
from .profile import command_line


def register(sub) -> None:
    parser = sub.add_parser(
        "ablate",
        help="ablate RoPE frequencies of heads and measure the binding task",
        description="Ablate chosen RoPE frequencies of chosen heads (or sweep every band of "
        "every head) and report binding-task accuracy and logit difference before and after.",
    )
    add_model_args(parser)
    parser.add_argument("--task", default="binding", choices=["binding"])
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
    parser.add_argument("--n-prompts", type=positive_int, default=16)
    parser.add_argument("--n-pairs", type=positive_int, default=4)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--reference-prompts", type=positive_int, default=32,
                        help="prompts (another seed) to take the means over for --mode mean")
    parser.add_argument("--per-position", action="store_true",
                        help="--mode mean: one mean per position instead of pooled")
    parser.add_argument("--out", metavar="DIR", help="write JSON (and the sweep's heatmaps) here")
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    parser.set_defaults(func=run)


def _table(rows: list[tuple[str, float, float, dict]]) -> str:
    lines = [f"  {'':<20} {'before':>8} {'after':>8} {'change':>8} {'± SE':>7}  95% interval"]
    for label, before, after, change in rows:
        lines.append(f"  {label:<20} {before:>8.3f} {after:>8.3f} {after - before:>+8.3f} "
                     f"{change['se']:>7.3f}  [{change['ci_low']:+.3f}, {change['ci_high']:+.3f}]")
    return "\n".join(lines)


def _change(before, after) -> dict[str, dict[str, float]]:
    """Per metric: the mean change over prompts (after − before, paired), its standard error
    and 95% bootstrap interval."""
    import torch

    from ..interventions.uncertainty import uncertainty

    pairs = {"accuracy": ("correct",), "candidate_accuracy": ("candidate_correct",),
             "logit_diff": ("logit_diffs",)}
    out = {}
    for metric, (field,) in pairs.items():
        diff = getattr(after, field).double() - getattr(before, field).double()
        out[metric] = uncertainty(diff[None]).item()
        out[metric]["mean"] = float(getattr(after, metric) - getattr(before, metric))
    return out


def _task_info(task, args) -> dict:
    return {"n_prompts": task.n_prompts, "n_pairs": task.n_pairs,
            "n_tokens": int(task.tokens.shape[1]), "seed": args.seed}


def run(args) -> int:
    import torch

    from ..errors import InvalidSelectionError
    from ..interventions import Intervention, band_sweep, binding_metrics, parse_selection
    from ..rope import rope_specs
    from ..tasks import binding_task, evaluate_binding

    if (args.sweep is None) == (args.heads is None):
        raise InvalidSelectionError("pass either --heads (with --freqs) or --sweep bands")
    if args.out:
        check_output_dir(args.out)
    model = load_from_args(args)
    task = binding_task(model, n_prompts=args.n_prompts, n_pairs=args.n_pairs, seed=args.seed)
    reference = None
    if args.mode == "mean":
        reference = binding_task(model, n_prompts=args.reference_prompts, n_pairs=args.n_pairs,
                                 seed=args.seed + 1000).tokens
    out = Path(args.out) if args.out else None
    header = (f"{args.model} · binding task: {task.n_prompts} prompts of {task.n_pairs} pairs, "
              f"{task.tokens.shape[1]} tokens (seed {args.seed})")
    per_position = args.per_position and args.mode == "mean"

    if args.sweep is None:
        specs = rope_specs(model)
        selection = parse_selection(args.heads, specs, args.freqs)
        spec = Intervention("ablate_frequencies", selection, mode=args.mode, side=args.side,
                            per_position=per_position)
        with torch.no_grad():
            before = evaluate_binding(model, task)
            with spec.apply(model, reference=reference):
                after = evaluate_binding(model, task, logits=model(task.tokens))
        heads = [f"{layer}.{head}" for layer, hs in selection.items() for head in hs]
        change = _change(before, after)
        print(header)
        print(f"{args.mode}-ablating frequency ids {args.freqs} of heads {', '.join(heads)}")
        print(_table([("accuracy", before.accuracy, after.accuracy, change["accuracy"]),
                      ("candidate accuracy", before.candidate_accuracy, after.candidate_accuracy,
                       change["candidate_accuracy"]),
                      ("logit difference", before.logit_diff, after.logit_diff,
                       change["logit_diff"])]))
        if out:
            payload = {
                "model": args.model, "task": "binding", "mode": args.mode, "side": args.side,
                "n_prompts": task.n_prompts, "n_pairs": task.n_pairs, "seed": args.seed,
                "selection": {f"{layer}.{head}": list(ids) for layer, hs in selection.items()
                              for head, ids in hs.items()},
                "intervention": spec.to_dict(),
                "before": {"accuracy": before.accuracy,
                           "candidate_accuracy": before.candidate_accuracy,
                           "logit_diff": before.logit_diff},
                "after": {"accuracy": after.accuracy,
                          "candidate_accuracy": after.candidate_accuracy,
                          "logit_diff": after.logit_diff},
                "change": change,
            }
            from ..report import ablation_report

            report = ablation_report(
                model=args.model, selection=payload["selection"], mode=args.mode, side=args.side,
                before=payload["before"], after=payload["after"], task=_task_info(task, args),
                command=command_line(args), change=change)
            with staged_dir(out) as stage:  # both files, or neither
                (stage / "ablate.json").write_text(json.dumps(payload, indent=1))
                report.save(stage / "report.html")
            print(f"wrote {out / 'ablate.json'} and {out / 'report.html'}")
        return 0

    start = time.perf_counter()
    sweep = band_sweep(model, task.tokens, binding_metrics(task, per_prompt=True), bands=args.bands,
                       mode=args.mode, side=args.side, per_position=per_position, layers=args.layers,
                       reference=reference, progress=not args.no_progress)
    seconds = time.perf_counter() - start
    print(header)
    print(f"{args.mode}-ablating each of {len(sweep.band_names)} bands of each head alone "
          f"({sum(len(h) for h in sweep.heads.values()) * len(sweep.band_names)} passes, "
          f"{seconds:.0f} s)")
    print(f"baseline: accuracy {sweep.baseline['accuracy']:.3f}, logit difference "
          f"{sweep.baseline['logit_diff']:.3f}")
    print("largest drops in logit difference:")
    print(f"  {'head':>6} {'band':>8} {'Δ logit diff':>13} {'± SE':>7} {'Δ accuracy':>11}")
    acc, se = sweep.effect("accuracy"), sweep.effect_se("logit_diff")
    for layer, head, band, value in sweep.top(10, "logit_diff"):
        b = sweep.band_names.index(band)
        print(f"  {f'{layer}.{head}':>6} {band:>8} {value:>+13.3f} {float(se[layer, head, b]):>7.3f} "
              f"{float(acc[layer, head, b]):>+11.3f}")
    mean_effect = sweep.effect("logit_diff")[sweep.layers].nanmean(dim=(0, 1))
    print("mean Δ logit difference per band: " + ", ".join(
        f"{name} {float(v):+.3f}" for name, v in zip(sweep.band_names, mean_effect)))
    if out:
        payload = {"format": sweep.FORMAT,  # BandSweep.load reads it
                   "model": args.model, "task": "binding", "n_prompts": task.n_prompts,
                   "n_pairs": task.n_pairs, "seed": args.seed, "seconds": seconds,
                   **sweep.to_dict()}
        from matplotlib.figure import Figure  # no pyplot: no global backend state

        from ..viz import plot_band_sweep

        n_layers = len(sweep.layers)
        from ..report import band_sweep_report

        with staged_dir(out) as stage:  # every file, or none
            (stage / "sweep.json").write_text(dumps(payload, indent=1))
            for metric in ("logit_diff", "accuracy"):
                fig = Figure(figsize=(2.0 + 2.2 * len(sweep.band_names), 1.2 + 0.28 * n_layers),
                             constrained_layout=True)
                axes = fig.subplots(1, len(sweep.band_names), sharey=True, squeeze=False)[0]
                plot_band_sweep(sweep, metric, axes=axes)
                fig.savefig(stage / f"sweep_{metric}.png", dpi=120)
            band_sweep_report(sweep, model=args.model, task=_task_info(task, args),
                              seconds=seconds, command=command_line(args)
                              ).save(stage / "report.html")
        print(f"wrote {out / 'sweep.json'}, {out / 'report.html'} and {out}/sweep_*.png")
    return 0
