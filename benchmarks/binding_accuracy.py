"""Binding accuracy of a real model as the number of pairs grows (paper A used 256).

    python benchmarks/binding_accuracy.py [--model gemma-3-270m] [--n-prompts 32]
        [--n-pairs 8 --n-pairs 256] [--template color]

Prints, per ``n_pairs``: the prompt length, top-1 accuracy over the whole vocabulary,
accuracy among the prompt's attributes, the mean logit difference (answer minus the mean of
the other attributes in the prompt) and the chance level among the attributes present
(1 / distinct attributes per prompt). Prompts run in batches of ``--batch``.
"""

from __future__ import annotations

import argparse
import time

import torch

import lens_possym as lp
from lens_possym.tasks import binding_task, evaluate_binding


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="gemma-3-270m")
    parser.add_argument("--n-prompts", type=int, default=32)
    parser.add_argument("--n-pairs", type=int, action="append")
    parser.add_argument("--template", default="color")
    parser.add_argument("--batch", type=int, default=1)  # full logits: 1 GB per 1k tokens
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    model = lp.load_model(args.model)
    print(f"{args.model}, template {args.template!r}, {args.n_prompts} prompts, seed {args.seed}")
    print(f"{'n_pairs':>7} {'tokens':>6} {'accuracy':>9} {'among attrs':>12} {'logit diff':>11} "
          f"{'chance':>7} {'s':>6}")
    for n_pairs in args.n_pairs or [8, 256]:
        start = time.perf_counter()
        task = binding_task(model, n_prompts=args.n_prompts, n_pairs=n_pairs, seed=args.seed,
                            template=args.template)
        with torch.no_grad():
            # clone: a slice would keep each batch's full [batch, pos, d_vocab] logits alive
            logits = torch.cat([model(task.tokens[i:i + args.batch])[:, -1:].clone()
                                for i in range(0, task.n_prompts, args.batch)])
        result = evaluate_binding(model, task, logits=logits)
        chance = sum(1 / len(set(a)) for a in task.attributes) / task.n_prompts
        print(f"{n_pairs:>7} {task.tokens.shape[1]:>6} {result.accuracy:>9.1%} "
              f"{result.candidate_accuracy:>12.1%} {result.logit_diff:>11.2f} {chance:>7.1%} "
              f"{time.perf_counter() - start:>6.0f}")


if __name__ == "__main__":
    main()
