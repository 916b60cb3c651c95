"""``lens-possym circuit``: find a circuit between clean and corrupted prompts, check it,
and read it as positional or symbolic.

::

    lens-possym circuit --model smollm2-135m --task binding --out DIR
    lens-possym circuit --model gemma-3-270m --task distance --heads-top 8 --size 12

Builds counterfactual pairs (as ``lens-possym patch``), patches every head's output
(the batched grid) and keeps the ``--heads-top`` heads that move the normalised logit
difference most; every edge among them (the embedding and those heads as senders, their
queries, keys and values and the logits as receivers) is then path-patched alone (exact:
``lens_possym.circuits.path_patch``), the faithfulness curve of the top edges is run
(only the circuit's edges carry their clean value; ``--scope graph``: every other edge of
the model ablated, ``--scope candidates``: only the other path-patched edges), the circuit
chosen (``--size``,
``--threshold``, or the smallest size reaching 0.9), its heads scored (s_POS, s_SYM) and
its key edges split into positional and content pairs. ``--out DIR`` writes
``circuit.json`` (``Circuit.load`` reads it), the figures and
``report.html``.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from .. import circuits, interventions, report, scores
from ..errors import InvalidSelectionError
from ._command import add_command
from ._model_args import add_model_args, load_from_args
from ._output import check_output_dir, staged_dir
from ._prompts import add_pair_args, check_pair_args
from ._task_check import print_task_check
from ._types import positive_int
from .patch import pairs_from_args
from .profile import command_line

HELP = "find a circuit (edges between heads through q, k, v) and check its faithfulness"
DESCRIPTION = ("Circuit discovery on counterfactual prompt pairs: the heads that matter (the "
               "patching grid), every edge among them path-patched exactly, the faithfulness "
               "curve of the top edges, heads labelled s_POS/s_SYM and key edges by their "
               "positional share.")


def register(sub) -> None:
    parser = add_command(sub, "circuit", run, HELP, DESCRIPTION)
    add_model_args(parser)
    add_pair_args(parser)
    parser.add_argument("--heads-top", type=positive_int, default=6,
                        help="heads kept from the patching grid (default 6)")
    parser.add_argument("--size", type=positive_int, help="circuit size in edges")
    parser.add_argument("--threshold", type=float, help="keep edges with |score| >= this")
    parser.add_argument("--ablation", default="corrupted", choices=["corrupted", "mean"],  # circuits.ABLATIONS (not imported by --help)
                        help="what edges outside the circuit carry (default corrupted)")
    parser.add_argument("--scope", default="graph", choices=["graph", "candidates"],  # circuits.SCOPES
                        help="which edges outside the circuit are ablated: graph, every edge "
                        "of the model (the circuit must do the task alone; default), or "
                        "candidates, only the path-patched edges among the kept heads (the "
                        "rest of the model keeps its value)")
    parser.add_argument("--no-labels", action="store_true",
                        help="skip the s_POS/s_SYM scores and the key edges' positional share")
    parser.add_argument("--patches-per-pass", type=positive_int, default=16)
    parser.add_argument("--out", metavar="DIR",
                        help="write circuit.json, circuit_*.png, report.html")
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bar")


def run(args) -> int:
    check_pair_args(args)
    if args.size is not None and args.threshold is not None:
        raise InvalidSelectionError("give --size or --threshold, not both")
    if args.threshold is not None and not args.threshold >= 0:
        raise InvalidSelectionError(f"--threshold must be >= 0, got {args.threshold}")
    if args.out:
        check_output_dir(args.out)
    start = time.perf_counter()
    model = load_from_args(args)
    pairs = pairs_from_args(model, args)
    check = pairs.raw_metrics(model)
    metric = pairs.metric(model)
    print(f"{args.model} · {pairs.name}: {pairs.n_prompts} pairs of "
          f"{pairs.clean_tokens.shape[1]} tokens")
    print_task_check(check)
    grid = interventions.patch_grid(model, pairs, interventions.PatchGridConfig(
        site="heads", patches_per_pass=args.patches_per_pass), progress=not args.no_progress)
    effect = grid.effect().mean(-1)
    top = circuits.top_heads(effect, args.heads_top)
    print(f"heads by patching ({grid.seconds:.1f} s): "
          + ", ".join(f"{n.name} {float(effect[n.layer, n.head]):+.3f}" for n in top))
    edges = circuits.edges_among(
        model, [*top, circuits.Node("embed"), circuits.Node("logits")], mlps=False)
    labels = None
    if not args.no_labels:
        labels = scores.swap_scores(model, pairs.clean_tokens)
    circuit = circuits.find_circuit(
        model, pairs.clean_tokens, pairs.corrupted_tokens, metric, edges=edges,
        size=args.size, threshold=args.threshold, ablation=args.ablation, scope=args.scope,
        labels=labels,
        patches_per_pass=args.patches_per_pass,
        info={"model": args.model, "task": pairs.name, "heads": [n.name for n in top],
              "grid_seconds": round(grid.seconds, 3), "task_check": check})
    circuit.info["total_seconds"] = round(time.perf_counter() - start, 3)
    print(f"{len(edges)} edges path-patched in {circuit.info['scoring_seconds']:.1f} s; "
          f"faithfulness by size: " + ", ".join(
              f"{s}: {float(f):.3f}" for s, f in zip(circuit.sizes, circuit.normalised())))
    print(f"circuit ({len(circuit.edges)} edges): " + ", ".join(
        e + (f" [pos share {circuit.key_shares[e]:.2f}]" if e in circuit.key_shares else "")
        for e in circuit.edges))
    for name, lab in sorted(circuit.nodes.items()):
        print(f"  {name}: s_POS {lab['pos']:.3f}  s_SYM {lab['sym']:.3f}")
    print(f"total {circuit.info['total_seconds']:.1f} s")
    if args.out:
        out = Path(args.out)
        figures = report.circuits.circuit_figures(circuit, title=f"{args.model}, {pairs.name}")
        page = report.circuits.circuit_report(circuit, model=args.model,
                                              command=command_line(args), figures=figures)
        with staged_dir(out) as stage:  # every file, or none
            circuit.save(stage / "circuit.json")
            for name, fig in figures.items():
                fig.savefig(stage / f"{name}.png", dpi=120)
            page.save(stage / "report.html")
        print(f"wrote {out / 'circuit.json'}, {out / 'report.html'} and {out}/circuit_*.png",
              file=sys.stderr)
    return 0
