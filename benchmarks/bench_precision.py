"""A model in bfloat16 / float16 / float64 against the same model in float32.

    PYTHONPATH=$PWD OMP_NUM_THREADS=1 python benchmarks/bench_precision.py [--no-real]

For the five core tiny families (4 random-word prompts of 24 tokens) and smollm2-135m
in bfloat16 (4 binding prompts of 4 pairs, 31 tokens), every layer and head, default
settings (tau 1e-4, token swaps, exact method): how far ``frequency_logits``,
``swap_scores`` and ``ablate_frequencies`` land from the float32 model's. The columns
are the keys of ``tests/precision_agreement.agreement`` (see there); ``tests/test_precision.py``
asserts the bounds that docs/families.md states. About 30 s, plus ~40 s for smollm2.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import lens_possym as lp  # noqa: E402
from tests.precision_agreement import agreement  # noqa: E402

COLUMNS = [("terms", "terms", ".1e"), ("terms_check", "check", ".1e"),
           ("pos_median", "med|ΔsPOS|", ".0e"), ("sym_median", "med|ΔsSYM|", ".0e"),
           ("pos_freq_median", "med|Δ|freq", ".0e"),
           ("heads_within_0.01", "≤0.01", ".0%"), ("pos_max", "max|ΔsPOS|", ".2f"),
           ("sym_max", "max|ΔsSYM|", ".2f"), ("logits", "logits", ".1e"),
           ("zero", "zero", ".1e"), ("unrotate", "unrotate", ".1e"),
           ("zero_corr", "r(zero)", ".3f"), ("unrotate_corr", "r(unrot)", ".3f")]


def _row(label: str, dtype: torch.dtype, result: dict) -> str:
    cells = [f"{result[key]:{fmt}}".rjust(max(len(head), 7)) for key, head, fmt in COLUMNS]
    return f"{label:14} {str(dtype).removeprefix('torch.'):9} " + " ".join(cells)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-real", action="store_true", help="tiny models only")
    args = parser.parse_args()
    torch.set_num_threads(1)
    print(f"{'model':14} {'dtype':9} "
          + " ".join(head.rjust(max(len(head), 7)) for _, head, _ in COLUMNS))
    start = time.perf_counter()
    for family in lp.models.TINY_FAMILIES:
        ref = lp.tiny_model(family)
        tokens = lp.random_token_prompts(ref, n_prompts=4, n_tokens=24, seed=0)
        for dtype in (torch.bfloat16, torch.float16, torch.float32, torch.float64):
            low = lp.tiny_model(family, dtype=dtype)
            print(_row(f"tiny-{family}", dtype, agreement(low, ref, tokens)), flush=True)
    print(f"(tiny models: {time.perf_counter() - start:.0f} s)")
    if not args.no_real:
        ref = lp.load_model("smollm2-135m")
        low = lp.load_model("smollm2-135m", dtype=torch.bfloat16)
        tokens = lp.binding_task(ref, n_prompts=4, n_pairs=4).tokens
        print(_row("smollm2-135m", torch.bfloat16, agreement(low, ref, tokens)), flush=True)


if __name__ == "__main__":
    main()
