"""Paper A's causal test on a real model: remove a frequency band of the most symbolic heads.

    python benchmarks/binding_frequency_ablation.py [--model gemma-3-270m] [--n-prompts 32]
        [--k 8] [--n-random 6] [--modes zero,mean,unrotate] [--out results.json]

Scores every head with ``swap_scores`` (token swaps at the last query) on the first
``--score-prompts`` binding prompts, takes the ``--k`` heads with the largest
``s_SYM − s_POS``, and ablates the ``low`` and the ``high`` third of the frequency ids of all
of them at once, in each mode; then the same for ``--n-random`` random sets of ``k`` heads
drawn from all heads. Prints the binding task's accuracy and logit difference per condition
(random sets: mean ± sd). ``mean`` takes its means over ``--n-prompts`` other binding
prompts (seed + 1000), pooled over positions.
"""

from __future__ import annotations

import argparse
import json
import time

import torch

import lens_possym as lp


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="gemma-3-270m")
    parser.add_argument("--n-prompts", type=int, default=32)
    parser.add_argument("--n-pairs", type=int, default=4)
    parser.add_argument("--score-prompts", type=int, default=16)
    parser.add_argument("--k", type=int, default=8)
    parser.add_argument("--n-random", type=int, default=6)
    parser.add_argument("--modes", default="zero,mean,unrotate")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", help="write the results as JSON here")
    args = parser.parse_args()

    start = time.perf_counter()
    model = lp.load_model(args.model)
    task = lp.binding_task(model, n_prompts=args.n_prompts, n_pairs=args.n_pairs, seed=args.seed)
    reference = lp.binding_task(model, n_prompts=args.n_prompts, n_pairs=args.n_pairs,
                                seed=args.seed + 1000).tokens
    scores = lp.swap_scores(model, task.tokens[: args.score_prompts], per_frequency=False,
                            exclusion=False)
    heads = scores.ranked_heads("sym-pos", k=args.k)
    comparison = lp.compare_with_random_heads(
        model, task.tokens, lp.interventions.binding_metrics(task), heads, bands=["low", "high"],
        modes=args.modes.split(","), n_random=args.n_random, seed=args.seed,
        reference=reference, progress=False)
    seconds = time.perf_counter() - start

    print(f"{args.model}: binding task, {task.n_prompts} prompts of {task.n_pairs} pairs "
          f"({task.tokens.shape[1]} tokens), seed {args.seed}")
    print(f"{args.k} most symbolic heads (s_SYM − s_POS on {args.score_prompts} prompts): "
          + ", ".join(f"{l}.{h} ({scores.sym[l, h]:.3f}/{scores.pos[l, h]:.3f})" for l, h in heads))
    print(f"random sets: {args.n_random} draws of {args.k} heads from all heads")
    print(comparison.table(["accuracy", "logit_diff"]))
    print(f"({seconds:.0f} s)")
    if args.out:
        payload = {"model": args.model, "args": vars(args), "seconds": seconds,
                   "sym": scores.sym.tolist(), "pos": scores.pos.tolist(),
                   **comparison.to_dict()}
        with open(args.out, "w") as handle:
            json.dump(payload, handle, indent=1)


if __name__ == "__main__":
    torch.set_grad_enabled(False)
    main()
