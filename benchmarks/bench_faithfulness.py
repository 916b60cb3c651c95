"""A circuit's faithfulness curve in both scopes: every edge of the graph ablated outside
the circuit, or only the candidate edges.

    OMP_NUM_THREADS=1 nice -n 5 python benchmarks/bench_faithfulness.py [--model smollm2-135m]
        [--n-prompts 8] [--corruption swap_query] [--heads-top 6] [--figure PATH]

On binding counterfactual pairs (the normalised logit difference: 0 corrupted, 1 clean),
as ``lens-possym circuit`` does: the heads grid (``patch_grid(site="heads")``), its
``--heads-top`` heads, every edge among them, the embedding and the logits (no MLPs)
path-patched alone (the candidates, scored exactly), then the faithfulness curve over
circuit sizes 1, 2, 4, ... (top edges by |score|) with

* scope ``graph``: every other edge of the model's graph corrupted (the circuit must do
  the task alone; 0 edges = the corrupted model);
* scope ``candidates``: only the candidates outside the circuit corrupted, every edge that
  was never a candidate (the other heads, the MLPs) keeps its value (0 edges = every
  candidate corrupted, every candidate = the clean model).

Prints, per size, the metric (mean, standard error over prompts) in both scopes and the
candidate curve normalised between its own ends; ``--figure`` saves the two curves.
"""

from __future__ import annotations

import argparse

import torch
from _timing import add_binding_args, binding_setup, timed

from lens_possym import circuits
from lens_possym.interventions import patch_grid


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_binding_args(parser, n_prompts=8)
    parser.add_argument("--heads-top", type=int, default=6)
    parser.add_argument("--figure", help="save the curves here (PNG)")
    args = parser.parse_args()
    model, pairs, metric = binding_setup(args)
    clean, corr = pairs.clean_tokens, pairs.corrupted_tokens
    print(f"{args.model}: binding {args.corruption}, {clean.shape[0]} prompts of "
          f"{clean.shape[1]} tokens; torch threads {torch.get_num_threads()}")

    grid, t_grid = timed(lambda: patch_grid(model, pairs, metric=metric, site="heads",
                                            progress=False))
    effect = grid.effect().mean(-1)
    top = circuits.top_heads(effect, args.heads_top)
    print(f"heads by patching ({t_grid:.1f} s): "
          + ", ".join(f"{n.name} {float(effect[n.layer, n.head]):+.3f}" for n in top))
    edges = circuits.edges_among(
        model, [*top, circuits.Node("embed"), circuits.Node("logits")], mlps=False)
    scores, t_scores = timed(lambda: circuits.path_edge_scores(model, clean, corr, metric,
                                                              edges))
    print(f"{len(edges)} candidate edges path-patched in {t_scores:.1f} s")

    found = {}
    for scope in circuits.SCOPES:
        circ, t = timed(lambda: circuits.find_circuit(model, clean, corr, metric,
                                                     scores=scores, scope=scope))
        found[scope] = circ
        print(f"scope {scope}: curve in {t:.1f} s; clean {float(circ.clean.mean()):.3f}, "
              f"empty circuit {float(circ.ablated.mean()):.3f}")
    g, c = found["graph"], found["candidates"]
    ug, uc, norm = g.curve(), c.curve(), c.normalised()
    print(f"{'size':>5} | {'graph scope':>15} | {'candidate scope':>15} | candidate, normalised")
    for i, size in enumerate(g.sizes):
        print(f"{size:>5} | {float(ug.mean[i]):+.3f} ± {float(ug.se[i]):.3f} | "
              f"{float(uc.mean[i]):+.3f} ± {float(uc.se[i]):.3f} | {float(norm[i]):.3f}")
    print(f"candidate scope: chosen circuit {len(c.edges)} edges, nodes "
          f"{sorted(c.node_names())}")
    if args.figure:
        from matplotlib.figure import Figure

        fig = Figure(figsize=(6.4, 3.8), constrained_layout=True)
        ax = fig.subplots()
        for circ, u, label in ((g, ug, "graph scope: every other edge corrupted"),
                               (c, uc, "candidate scope: only other candidates corrupted")):
            m = u.mean.tolist()
            ax.errorbar(circ.sizes, m, yerr=[[a - b for a, b in zip(m, u.low.tolist())],
                                             [b - a for a, b in zip(m, u.high.tolist())]],
                        marker="o", capsize=3, label=label)
        ax.axhline(float(g.clean.mean()), color="grey", lw=0.8, ls="--", label="clean model")
        ax.axhline(float(c.ablated.mean()), color="grey", lw=0.8, ls=":",
                   label="every candidate corrupted")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("circuit size (top edges by |path-patching score|)")
        ax.set_ylabel("normalised logit difference")
        ax.set_title(f"{args.model}, binding {args.corruption}: faithfulness", fontsize=10)
        ax.legend(fontsize=7)
        fig.savefig(args.figure, dpi=120)
        print(f"wrote {args.figure}")


if __name__ == "__main__":
    main()
