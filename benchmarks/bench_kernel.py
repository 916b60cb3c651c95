"""The compiled CPU loop of the per-frequency token-swap scores, alone: nanoseconds per swap.

    OMP_NUM_THREADS=1 python benchmarks/bench_kernel.py [--keys 254] [--rows 4] [--freqs 128]

The loop (``lens_possym/scores/_kernel.py``) is most of a whole-model profile on the CPU
(``benchmarks/profile_stages.py``: the ``freq`` stage). It has two pair loops: rows where
torch's cosine clamp cannot act, and rows that need the post-swap normaliser (a second
exponential and a division per swap). Both are timed here on random tables of one layer's
shape (``rows`` = heads, all pairs of ``keys`` positions), each once after a compiling
call, on this process's CPU time with one thread. A figure well above ~10 ns (plain rows)
on an AVX2 machine says the loop stopped vectorising (docs/scale.md §6).
"""

from __future__ import annotations

import argparse

import numba
import numpy as np

from _timing import timed
from lens_possym.scores._kernel import token_swap_freq_scores


def tables(rows: int, freqs: int, keys: int, seed: int = 0) -> dict:
    """Random inputs of :func:`token_swap_freq_scores` (positions 0..keys+1, keys 1..keys)."""
    rng = np.random.default_rng(seed)
    n_pos = keys + 2
    att = rng.random((rows, freqs, n_pos))
    return dict(cos=rng.normal(size=(freqs, n_pos)), sin=rng.normal(size=(freqs, n_pos)),
                x=rng.normal(size=(rows, freqs, n_pos)), y=rng.normal(size=(rows, freqs, n_pos)),
                attention=att / att.sum(-1, keepdims=True),
                keys=np.arange(1, n_pos - 1, dtype=np.int64), scale=1.0, tau=1e-4,
                e1=rng.random((rows, freqs, n_pos)), e2=rng.random((rows, freqs, n_pos)),
                log_units=rng.normal(size=(rows, freqs, 3)),
                sums=rng.random((rows, freqs, 3)) + 3.0,
                top=np.zeros((rows, freqs), np.int64), runner_up=np.ones((rows, freqs), np.int64))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--keys", type=int, default=254, help="key positions (n - 2)")
    parser.add_argument("--rows", type=int, default=4, help="heads of the layer")
    parser.add_argument("--freqs", type=int, default=128, help="frequency ids")
    args = parser.parse_args()
    numba.set_num_threads(1)
    inputs = tables(args.rows, args.freqs, args.keys)
    swaps = args.rows * args.freqs * args.keys * (args.keys - 1) // 2
    print(f"numba {numba.__version__}, one thread; {args.rows} rows x {args.freqs} frequencies "
          f"x {args.keys * (args.keys - 1) // 2:,} swaps = {swaps:,} per call")
    # eps decides which pair loop runs: 1e-300 keeps every row out of the clamp's reach,
    # 0.5 puts every row in it
    for eps, name in ((1e-300, "plain rows"), (0.5, "rows with the normaliser")):
        token_swap_freq_scores(**inputs, eps=eps)                      # compiles / loads
        _, seconds = timed(lambda: token_swap_freq_scores(**inputs, eps=eps))
        print(f"{name:26s} {seconds * 1e3:8.1f} ms   {seconds / swaps * 1e9:6.2f} ns per swap")


if __name__ == "__main__":
    main()
