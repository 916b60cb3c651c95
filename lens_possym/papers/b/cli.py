"""``lens-possym encoder``: train, evaluate and ablate one of paper B's scheme encoders."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from ... import training
from ...plugins import (
    ArgumentValueError, add_command, check_output_dir, non_negative_int, positive_int, staged_dir,
    with_threads,
)
from ...errors import InvalidSelectionError
from . import cells, deposit, presets


def scheme_text(text: str) -> str:
    """A scheme label (``rope``, ``rope-k2``, ``alibi``...), checked before any work."""
    try:
        presets.parse_label(text)
    except InvalidSelectionError as error:
        raise ArgumentValueError(str(error)) from None
    return text


HELP = "train / evaluate / ablate one of paper B's scheme encoders"
DESCRIPTION = ("Train a bidirectional encoder with one positional scheme on paper B's distance or "
               "count task (through the shared training loop), then report its test accuracy and, "
               "with --ablate, the accuracy with each head ablated (the deposit pattern). With "
               "--load DIR an earlier run is evaluated instead of training. Writes metrics.json, "
               "model.pt and analysis.json to --out.")


def register(sub) -> None:
    parser = add_command(sub, "encoder", run, HELP, DESCRIPTION)
    parser.add_argument("--task", required=True, choices=["distance", "count"])
    parser.add_argument("--scheme", required=True, type=scheme_text, metavar="SCHEME",
                        help="nope, sinusoidal, learned, alibi, t5, rope, mla, hybrid, or "
                        "rope-k<N> (RoPE on the first N heads only)")
    parser.add_argument("--variant", default="intended", choices=["intended", "faithful"],
                        help="intended (the paper's description, default) or faithful (the "
                        "official code's quirks)")
    parser.add_argument("--preset", default="cpu", choices=["cpu", "paper"],
                        help="sizes and schedule: cpu (3x8 heads, d_model 64, minutes on a CPU) "
                        "or paper (6x16, d_model 256, the paper's schedule; for a GPU)")
    parser.add_argument("--steps", type=positive_int, default=None,
                        help="optimiser steps (default: the preset's)")
    parser.add_argument("--seed", type=non_negative_int, default=0, help="weights and data seed")
    parser.add_argument("--ablate", action="store_true",
                        help="also ablate every head alone and print the accuracy drops")
    parser.add_argument("--load", metavar="DIR", default=None,
                        help="evaluate the model an earlier run wrote to DIR instead of training")
    parser.add_argument("--device", default="auto", help="auto (GPU if present), cpu, cuda")
    parser.add_argument("--threads", type=non_negative_int, default=1,
                        help="torch CPU threads (default 1); 0 keeps torch's default")
    parser.add_argument("--out", required=True, metavar="DIR", help="output folder")


@with_threads
def run(args) -> int:
    check_output_dir(args.out)
    preset = presets.ENCODER_PRESETS[args.preset]
    if args.steps is not None:
        preset = presets.with_steps(preset, args.steps)
    cell = cells.Cell(args.task, args.scheme, args.variant, args.seed)
    with staged_dir(args.out) as stage:
        if args.load:
            path = Path(args.load) / "model.pt"
            if not path.exists():
                raise InvalidSelectionError(
                    f"{args.load} holds no model.pt; pass a folder an earlier "
                    "'lens-possym encoder' run wrote")
            model, task, _ = training.load_checkpoint(path)
            model.eval()
            if getattr(model, "kind", None) != "scheme-encoder":
                raise InvalidSelectionError(f"{path} is not a scheme encoder")
        else:
            task = presets.preset_task(preset, args.task, args.seed)
            model = cells.make_model(preset, task, args.scheme, args.variant, args.seed)
            config = replace(preset.train_config(args.task, model.cfg.scheme, args.seed,
                                                 str(stage)), device=args.device)
            print(f"task: {task.describe()}")
            print(f"model: {model.extra_repr()}")
            result = training.train(model, task, config)
            result.train_config["out_dir"] = str(args.out)
            result.save(stage / "metrics.json")
            print(f"trained {result.steps_run} steps in {result.train_time_s:.1f} s")
            model.eval()
        batch = cells.analysis_batch(preset, task, args.seed)
        accuracy = training.evaluate(model, task, batch).accuracy
        print(f"test accuracy {accuracy:.4f} ({len(batch)} held-out sentences)")
        analysis = {"cell": cell.__dict__, "config": model.cfg.to_dict(), "baseline": accuracy}
        if args.ablate:
            grid = deposit.ablation_grid(model, task, batch)
            summary = deposit.deposit_summary(grid, accuracy)
            analysis.update(ablation=grid.tolist(), deposit=summary)
            print("accuracy drop (points) with one head ablated, rows = layers:")
            for layer, row in enumerate((accuracy - grid) * 100):
                print(f"  L{layer}: " + " ".join(f"{v:5.1f}" for v in row.tolist()))
            top = summary["top_head"]
            print(f"top head {top[0]}.{top[1]} costs {100 * summary['top_drop']:.1f} points, the "
                  f"next {100 * summary['second_drop']:.1f}; deposit pattern: "
                  f"{'yes' if summary['deposit'] else 'no'}")
        (stage / "analysis.json").write_text(json.dumps(analysis, indent=1))
    print(f"wrote {args.out}/analysis.json" + ("" if args.load else
                                                f", {args.out}/metrics.json and model.pt"))
    return 0
