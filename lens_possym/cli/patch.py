"""``lens-possym patch``: activation patching between clean and corrupted prompts.

::

    lens-possym patch --model gemma-3-270m --task binding --corruption swap_query --out DIR
    lens-possym patch --model smollm2-135m --task distance --patch heads --per-position
    lens-possym patch --patch frequencies --layers 5 --heads 0,1 --freqs low
    lens-possym patch --prompts pairs.jsonl --patch resid_pre --per-position

Builds counterfactual pairs (a task and a named corruption, or ``--prompts``: a JSONL file
with ``clean``, ``corrupted``, ``clean_answer``, ``corrupted_answer`` per line), patches
every cell of the chosen grid (head outputs, RoPE frequency pairs of chosen heads, or a
layer's residual/attention/MLP output) from one run into the other, several cells per
forward pass, and measures the normalised logit difference on every prompt. Prints the
baselines and the cells that move it most, each with its standard error; ``--out DIR``
writes ``patch.json`` (per-prompt values, mean, standard error, bootstrap interval per
cell; ``PatchingGrid.load`` reads it), ``patch_grid.png``, ``patch_top.png`` and
``report.html``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from .. import _ids, experiments, report, tasks
from ..errors import InvalidSelectionError
from ._command import add_command
from ._model_args import add_model_args, load_from_args
from ._output import check_output_dir, staged_dir
from ._prompts import add_pair_args, check_pair_args
from ._task_check import print_task_check
from ._types import freq_ids_text, ids_text, layers_text, positive_int
from .profile import command_line

SITES = ("heads", "frequencies", "resid_pre", "attn_out", "mlp_out")


HELP = "patch heads, frequencies or layer outputs between clean and corrupted prompts"
DESCRIPTION = ("Activation patching on counterfactual prompt pairs: every head (or RoPE frequency "
               "of chosen heads, or layer component) patched alone from one run into the other, "
               "with per-prompt values, standard errors and bootstrap intervals.")


def register(sub) -> None:
    parser = add_command(sub, "patch", run, HELP, DESCRIPTION)
    add_model_args(parser)
    add_pair_args(parser)
    parser.add_argument("--patch", default="heads", choices=SITES,
                        help="what each cell patches (default heads: hook_z)")
    parser.add_argument("--per-position", action="store_true",
                        help="heads and layer components: one cell per position")
    parser.add_argument("--direction", default="denoise", choices=["denoise", "noise"],
                        help="denoise: clean activations into the corrupted run (default); "
                        "noise: corrupted into clean")
    parser.add_argument("--layers", type=layers_text, help="layers (default all)")
    parser.add_argument("--heads", type=ids_text("head", bands=False),
                        help="heads of every layer, e.g. 0,3 (heads and frequencies)")
    parser.add_argument("--freqs", type=freq_ids_text, help="--patch frequencies: ids (default all)")
    parser.add_argument("--side", default="q", choices=["q", "k"],
                        help="--patch frequencies: query pairs (q) or key pairs of KV heads (k)")
    parser.add_argument("--patches-per-pass", type=positive_int, default=16)
    parser.add_argument("--top", type=positive_int, default=10, help="cells to list")
    parser.add_argument("--out", metavar="DIR",
                        help="write patch.json, patch_grid.png, patch_top.png, report.html")
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bar")


def _read_pairs(model, path: str):
    rows = []
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise InvalidSelectionError(f"cannot read --prompts {path}: {exc.strerror or exc}") from None
    keys = ("clean", "corrupted", "clean_answer", "corrupted_answer")
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise InvalidSelectionError(f"{path}:{number} is not JSON ({exc.msg})") from None
        missing = [k for k in keys if not isinstance(row, dict) or k not in row]
        if missing:
            raise InvalidSelectionError(f"{path}:{number} lacks {', '.join(missing)}; each line "
                                        f"needs {', '.join(keys)}")
        rows.append(row)
    if not rows:
        raise InvalidSelectionError(f"{path} holds no pairs")
    return tasks.prompt_pairs(model, [r["clean"] for r in rows], [r["corrupted"] for r in rows],
                        [r["clean_answer"] for r in rows], [r["corrupted_answer"] for r in rows],
                        name=Path(path).name)


def pairs_from_args(model, args):
    """The counterfactual pairs the command line asks for (--task/--corruption or --prompts:
    ``_prompts.add_pair_args``)."""
    if args.prompts:
        return _read_pairs(model, args.prompts)
    if args.task == "binding":
        return tasks.binding_pairs(model, None, args.corruption,
                                   corruption_seed=args.corruption_seed, n_prompts=args.n_prompts,
                                   n_pairs=args.n_pairs, seed=args.seed)
    return tasks.word_distance_pairs(model, None, args.corruption,
                                     corruption_seed=args.corruption_seed,
                                     n_prompts=args.n_prompts, n_words=args.n_words,
                                     n_cue=args.n_cue, distance=args.distance, seed=args.seed)


def run(args) -> int:
    check_pair_args(args)
    if args.out:
        check_output_dir(args.out)
    model = load_from_args(args)
    pairs = pairs_from_args(model, args)
    check = pairs.raw_metrics(model)
    n_layers, n_heads = int(model.cfg.n_layers), int(model.cfg.n_heads)
    config = experiments.PatchGridConfig(
        site=args.patch, per_position=args.per_position, direction=args.direction,
        layers=None if args.layers is None else _ids.read_ids(args.layers, n_layers,
                                                              what="layer", from_end=True),
        heads=None if args.heads is None else _ids.read_ids(args.heads, n_heads, what="head"),
        freqs=args.freqs, side=args.side,
        patches_per_pass=args.patches_per_pass)
    grid = experiments.patch_grid(model, pairs, config, progress=not args.no_progress)
    grid.info.update({"model": args.model, "task_check": check})
    print(f"{args.model} · {pairs.name}: {pairs.n_prompts} pairs of {pairs.clean_tokens.shape[1]} "
          f"tokens (positions changed: {pairs.changed_positions().tolist()})")
    print_task_check(check)
    print(f"patching {config.activation_label} ({args.direction}): {grid.shape} cells × "
          f"{grid.n_prompts} prompts in {grid.n_passes} passes, {grid.seconds:.1f} s")
    print(grid.describe(args.top))
    if args.out:
        out = Path(args.out)
        figures = report.patching.patching_figures(grid, title=f"{args.model}, {pairs.name}")
        page = report.patching.patching_report(grid, model=args.model,
                                               command=command_line(args), figures=figures)
        with staged_dir(out) as stage:  # every file, or none
            grid.save(stage / "patch.json")
            for name, fig in figures.items():
                fig.savefig(stage / f"{name}.png", dpi=120)
            page.save(stage / "report.html")
        print(f"wrote {out / 'patch.json'}, {out / 'report.html'} and {out}/patch_*.png",
              file=sys.stderr)
    return 0
