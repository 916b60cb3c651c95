"""The all-heads patching grid: lens-possym's batched grid against TransformerLens's.

    OMP_NUM_THREADS=1 python benchmarks/bench_patching.py [--model smollm2-135m]
        [--n-prompts 4] [--corruption swap_query] [--patches-per-pass 16]
        [--layers N] [--threads 1]

On binding prompts and their counterfactual pairs (``lp.tasks.binding_pairs``), patches
every query head's output (``hook_z``, all positions) from the clean run into the corrupted
run and measures the normalised logit difference, once with
``lens_possym.interventions.patch_head_out_all_pos`` and once with
``transformer_lens.patching.get_act_patch_attn_head_out_all_pos`` (one forward pass per
head), on the same prompts, cache and metric, in one process. Prints both times, their
ratio, the largest absolute difference between the two grids, and the cells with the
largest effects with their standard errors. ``--layers N`` runs both on the first N layers
only (a quick estimate; TransformerLens's cost is one pass per head).
"""

from __future__ import annotations

import argparse
import time

import pandas as pd
import torch
from _timing import add_binding_args, binding_setup
from transformer_lens import patching as tl_patching

from lens_possym.interventions import generic_patch_grid


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_binding_args(parser, n_prompts=4)
    parser.add_argument("--patches-per-pass", type=int, default=16)
    parser.add_argument("--layers", type=int, help="only the first N layers (both sides)")
    args = parser.parse_args()
    model, pairs, metric = binding_setup(args)
    n_layers = args.layers or int(model.cfg.n_layers)
    n_heads = int(model.cfg.n_heads)
    _, clean = model.run_with_cache(pairs.clean_tokens,
                                    names_filter=lambda name: name.endswith("attn.hook_z"))
    tokens = pairs.corrupted_tokens
    print(f"{args.model}: {pairs.name}, {pairs.n_prompts} prompts of {tokens.shape[1]} tokens "
          f"(changed positions {pairs.changed_positions().tolist()}); torch threads "
          f"{torch.get_num_threads()}")
    print(f"normalised logit difference: clean {float(metric.clean_baseline.mean()):+.3f} → 1, "
          f"corrupted {float(metric.corrupted_baseline.mean()):+.3f} → 0 (raw logit diffs)")
    with torch.no_grad():
        model(tokens)
        start = time.perf_counter()
        model(tokens)
        one_pass = time.perf_counter() - start
    print(f"one forward pass of the {pairs.n_prompts} corrupted prompts: {one_pass:.2f} s")

    cells = pd.DataFrame([(layer, head) for layer in range(n_layers) for head in range(n_heads)],
                         columns=["layer", "head"])
    start = time.perf_counter()
    grid = generic_patch_grid(model, tokens, clean, metric,
                              tl_patching.layer_head_vector_patch_setter, "z", index_df=cells,
                              patches_per_pass=args.patches_per_pass)
    ours = time.perf_counter() - start
    print(f"lens-possym patch_head_out_all_pos: {len(cells)} heads in {grid.n_passes} passes "
          f"of up to {args.patches_per_pass} patched copies, {ours:.1f} s "
          f"(prefix reused: positions 0..{grid.info['prefix_reused'] - 1}; blocks before each "
          f"pass's first layer skipped: {grid.info['blocks_skipped']})")

    def scalar(logits):
        return metric(logits).mean()

    start = time.perf_counter()
    if args.layers:
        tl = tl_patching.generic_activation_patch(
            model, tokens, clean, scalar, tl_patching.layer_head_vector_patch_setter, "z",
            index_df=cells).reshape(n_layers, n_heads)
    else:
        tl = tl_patching.get_act_patch_attn_head_out_all_pos(model, tokens, clean, scalar)
    theirs = time.perf_counter() - start
    print(f"transformer_lens get_act_patch_attn_head_out_all_pos: {len(cells)} passes, "
          f"{theirs:.1f} s ({theirs / len(cells):.2f} s per pass)")
    diff = float((grid.mean()[:n_layers] - tl.cpu()).abs().max())
    print(f"max |lens-possym − TransformerLens| over the grid: {diff:.2e} "
          f"(values up to {float(tl.abs().max()):.2f})")
    print(f"speed ratio: {theirs / ours:.1f}x")
    print("largest effects (normalised logit difference, ± standard error over prompts):")
    print(grid.describe(5))


if __name__ == "__main__":
    main()
