"""Attribution patching against the real patching grid, on the same pairs, cells and metric.

    OMP_NUM_THREADS=1 nice -n 5 python benchmarks/bench_attribution.py [--model smollm2-135m]
        [--task binding|distance] [--n-prompts 8] [--corruption swap_query] [--freq-layer L]
        [--threads 1]

On binding counterfactual pairs (``lp.tasks.binding_pairs``; ``--task distance``: the
word-distance pairs ``lp.tasks.word_distance_pairs(model, None, "shift_cue", n_prompts=...)``
instead, ``--corruption`` and ``--n-pairs`` then unused; the normalised logit difference,
clean patched into corrupted):

1. every head's output (``hook_z``) at every position: the real grid
   (``patch_grid(site="heads", per_position=True)``, batched, 16 cells a pass) against
   ``attribution_patch(site="heads", per_position=True)`` (three passes);
2. every head, all positions at once (``[layer, head]``), the same two;
3. every frequency pair of every head's query (and of every KV head's key) of one layer
   (``--freq-layer``; default: the layer holding the head of largest real effect in 2):
   the real frequency grid against the linear and the AtP* query-key-fixed estimates;
4. attribution alone for every layer's pairs (the same three passes, no grid: its cost).

With ``--all-layers`` (instead of 1-4): for the query and then the key side, the real
frequency grid of every layer (``patch_grid(site="frequencies", layers=[L])``, one batched
grid per layer as for one layer, printed as each ends: its time, its batched passes and its
time in plain forward passes) against attribution over every layer's pairs at once (one
call, the same three passes); the comparison over every cell, and beside it the same for
layer ``--freq-layer`` (default 24) and ``--early-layer`` (default 0, where the grid re-runs
the most of the model), each against attribution called for that layer alone. The grid's
total is the sum of the per-layer grids; each per-layer call also pays one caching pass and
one check pass of two cells (printed, so the saving of one call over every layer can be
read off).

Prints for each: Spearman over the cells whose |real effect| is above 1% of the largest,
Pearson and Spearman over every cell, the overlap of the top-20 cells, both times (this
process's CPU seconds, one torch thread: the machine is shared) and their ratio, and both
in units of one plain forward pass of the batch (the grid's time in those units bounds the
speed-up of any method that runs the prompts forward even once); and, for frequencies,
the grid's batched passes, the cells where the linear and QK-fixed estimates disagree and
the saturated heads.
"""

from __future__ import annotations

import argparse
import sys

import torch
from _timing import add_binding_args, binding_setup, timed

from lens_possym.circuits.attribution import attribution_patch, compare_to_grid
from lens_possym.errors import LensPossymError
from lens_possym.interventions import patch_grid


def report(name: str, estimate: torch.Tensor, grid, t_grid: float, t_attr: float,
           t_pass: float | None = None) -> None:
    c = compare_to_grid(estimate, grid, share=0.01, k=20)
    print(f"{name}: {c['n_cells']} cells ({c['n_large']} with |effect| > 1% of the largest)")
    print(f"  Spearman (large cells) {c['spearman_large']:.3f} | Pearson {c['pearson']:.3f} | "
          f"Spearman (all) {c['spearman']:.3f} | top-{c['top_k']} overlap {c['top_overlap']}")
    print(f"  time: grid {t_grid:.1f} s, attribution {t_attr:.2f} s, "
          f"attribution {t_grid / t_attr:.0f}x faster")
    if t_pass:
        print(f"  in forward passes of the batch ({t_pass:.2f} s each): grid "
              f"{t_grid / t_pass:.1f}, attribution {t_attr / t_pass:.1f}; any method that "
              f"runs the prompts forward once is at most {t_grid / t_pass:.0f}x faster than "
              f"this grid")


def one_pass(model, tokens) -> float:
    """CPU seconds of one plain forward pass of the batch (the least of three)."""
    times = []
    for _ in range(3):
        with torch.no_grad():
            times.append(timed(lambda: model(tokens))[1])
    return min(times)


def distance_setup(args: argparse.Namespace):
    """``(model, pairs, metric)``: word-distance ``shift_cue`` pairs of ``--n-prompts``
    prompts (``lp.tasks.word_distance_pairs``) and their normalised logit difference; torch
    runs on ``--threads`` threads."""
    import lens_possym as lp
    from lens_possym.tasks import word_distance_pairs

    torch.set_num_threads(args.threads)
    model = lp.load_model(args.model)
    pairs = word_distance_pairs(model, None, "shift_cue", n_prompts=args.n_prompts)
    return model, pairs, pairs.metric(model)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_binding_args(parser, n_prompts=8)
    parser.add_argument("--task", choices=("binding", "distance"), default="binding",
                        help="binding pairs (default) or word-distance 'shift_cue' pairs")
    parser.add_argument("--freq-layer", type=int)
    parser.add_argument("--skip-positions", action="store_true",
                        help="skip the per-position grid (the slow one)")
    parser.add_argument("--all-layers", action="store_true",
                        help="frequency attribution over every layer against the real "
                             "frequency grid of every layer (instead of the other sections)")
    parser.add_argument("--early-layer", type=int, default=0,
                        help="with --all-layers: the early layer reported beside --freq-layer")
    parser.add_argument("--sides", default="qk",
                        help="with --all-layers: the sides to run, 'q', 'k' or 'qk'")
    args = parser.parse_args()
    if args.task == "binding":
        model, pairs, metric = binding_setup(args)
        kind = f"binding {args.corruption}"
    else:
        model, pairs, metric = distance_setup(args)
        kind = "word distance shift_cue"
    tokens = pairs.corrupted_tokens
    print(f"{args.model}: {kind}, {tokens.shape[0]} prompts of "
          f"{tokens.shape[1]} tokens; {model.cfg.n_layers} layers x {model.cfg.n_heads} heads; "
          f"torch threads {torch.get_num_threads()}")
    attribution_patch(model, pairs, metric=metric)  # warm up (allocations, lazy imports)
    t_pass = one_pass(model, tokens)
    print(f"one forward pass of the batch: {t_pass:.2f} s", flush=True)
    if args.all_layers:
        all_layers(model, pairs, metric, t_pass, args)
        return

    if not args.skip_positions:
        grid, t_grid = timed(lambda: patch_grid(model, pairs, metric=metric, site="heads",
                                                per_position=True, progress=False))
        attr, t_attr = timed(lambda: attribution_patch(model, pairs, metric=metric,
                                                       site="heads", per_position=True))
        report("heads x positions [layer, pos, head]", attr.effect(), grid, t_grid, t_attr,
               t_pass)

    grid, t_grid = timed(lambda: patch_grid(model, pairs, metric=metric, site="heads",
                                            progress=False))
    attr, t_attr = timed(lambda: attribution_patch(model, pairs, metric=metric, site="heads"))
    report("heads, all positions [layer, head]", attr.effect(), grid, t_grid, t_attr, t_pass)
    real = grid.effect().mean(-1)
    top = torch.nonzero(real.abs() == real.abs().max())[0].tolist()
    layer = args.freq_layer if args.freq_layer is not None else int(top[0])
    print(f"  largest real head effect: L{top[0]}H{top[1]} {float(real[tuple(top)]):+.3f}; "
          f"largest estimated: {attr.top(1)}")

    for side in ("q", "k"):
        fgrid, t_grid = timed(lambda: patch_grid(model, pairs, metric=metric,
                                                 site="frequencies", side=side,
                                                 layers=[layer], progress=False))
        fattr, t_attr = timed(lambda: attribution_patch(model, pairs, metric=metric,
                                                        site="frequencies", side=side,
                                                        layers=[layer]))
        sl = (layer,)
        print(f"frequency grid, layer {layer}, side {side}: {fgrid.n_passes} batched passes "
              f"({fgrid.config.patches_per_pass} cells x {tokens.shape[0]} prompts a pass, "
              f"from layer {layer} on); attribution {fattr.n_passes} passes (source forward, "
              f"run forward, backward)")
        report(f"frequencies, layer {layer}, side {side}: linear", fattr.linear.mean(-1)[sl],
               fgrid.effect().mean(-1)[sl], t_grid, t_attr, t_pass)
        report(f"frequencies, layer {layer}, side {side}: QK-fixed", fattr.effect()[sl],
               fgrid.effect().mean(-1)[sl], t_grid, t_attr, t_pass)
        bad = fattr.unreliable(0.1)
        sat = fattr.saturation[layer]
        print(f"  cells where linear and QK-fixed differ by > 10% of the largest: {len(bad)}"
              + (f" (largest gap: {bad[0]})" if bad else ""))
        print(f"  saturated rows (max weight > 0.99) per head: "
              + ", ".join(f"H{h} {float(s):.2f}" for h, s in enumerate(sat)))

    # the cost does not grow with the cells: every layer's pairs in the same three passes
    for side in ("q", "k"):
        every, t_every = timed(lambda: attribution_patch(model, pairs, metric=metric,
                                                         site="frequencies", side=side))
        n_cells = int((~torch.isnan(every.linear[..., 0])).sum())
        print(f"frequencies, every layer, side {side}: {n_cells} cells (linear and QK-fixed) "
              f"in {t_every:.2f} s, {every.n_passes} passes")


def all_layers(model, pairs, metric, t_pass: float, args) -> None:
    """Frequency attribution over every layer against the real grid of every layer."""
    n_layers = int(model.cfg.n_layers)
    late = args.freq_layer if args.freq_layer is not None else min(24, n_layers - 1)
    chosen = [args.early_layer, late]
    for side in args.sides:
        real, times, passes = None, {}, {}
        for layer in range(n_layers):
            fgrid, t_grid = timed(lambda: patch_grid(model, pairs, metric=metric,
                                                     site="frequencies", side=side,
                                                     layers=[layer], progress=False))
            effect = fgrid.effect().mean(-1)
            real = effect if real is None else torch.where(torch.isnan(effect), real, effect)
            times[layer], passes[layer] = t_grid, fgrid.n_passes
            print(f"  grid side {side}, layer {layer}: {t_grid:.1f} s, {fgrid.n_passes} "
                  f"batched passes (one of them the check), {t_grid / t_pass:.1f} plain "
                  f"passes", flush=True)
        every, t_every = timed(lambda: attribution_patch(model, pairs, metric=metric,
                                                         site="frequencies", side=side))
        t_total = sum(times.values())
        print(f"frequencies, every layer, side {side}: grid {t_total:.1f} s in all "
              f"({sum(passes.values())} batched passes over {n_layers} per-layer grids; "
              f"each grid also ran one caching pass, ~{n_layers * t_pass:.0f} s in all); "
              f"attribution {every.n_passes} passes")
        report(f"frequencies, every layer, side {side}: linear", every.linear.mean(-1), real,
               t_total, t_every, t_pass)
        report(f"frequencies, every layer, side {side}: QK-fixed", every.effect(), real,
               t_total, t_every, t_pass)
        for layer in chosen:
            one, t_one = timed(lambda: attribution_patch(model, pairs, metric=metric,
                                                         site="frequencies", side=side,
                                                         layers=[layer]))
            sl = (layer,)
            for kind, est in (("linear", one.linear.mean(-1)[sl]),
                              ("QK-fixed", one.effect()[sl])):
                report(f"frequencies, layer {layer}, side {side}: {kind}", est, real[sl],
                       times[layer], t_one, t_pass)
        print("  per layer (grid in plain passes | Spearman large, QK-fixed | top-20):")
        for layer in range(n_layers):
            sl = (layer,)
            try:
                c = compare_to_grid(every.effect()[sl], real[sl], share=0.01, k=20)
                fig = f"{c['spearman_large']:.3f} | {c['top_overlap']}"
            except LensPossymError as err:  # a layer with fewer than two cells
                fig = f"({err})"
            print(f"    L{layer}: {times[layer] / t_pass:.1f} | {fig}")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
