"""Speed and memory of the positional/symbolic scores, measured in one run.

    python benchmarks/bench_scores.py [--model gemma-3-270m] [--layer 5]
        [--sizes 64 128 256] [--rerun-swaps 256] [--profile-n 256] [--memory-n 2048]

1. **Exact vs re-run** on one layer and one random-word prompt of n tokens, per head and
   per frequency (token swaps, tau 1e-4): the closed form over all n(n-1)/2 swaps against
   paper C's procedure (swap two rows of the layer input, re-run the block; batched, 64
   swaps per pass). Re-running every swap at n = 256 would take hours on a CPU, so the
   re-run is timed on a random subset of ``--rerun-swaps`` swaps (the whole set when it
   is smaller) and its time scaled by the number of swaps (each batch costs the same);
   both methods are run on that same subset to report their agreement. The ratio is
   (scaled re-run time) / (exact time over *all* swaps).
2. **Whole-model profile vs one forward pass** on the same ``--profile-n``-token prompt:
   ``swap_scores`` on every layer, head and frequency against ``model(tokens)``,
   alternated three times; medians and their ratio.
3. **Peak memory at n = ``--memory-n``**: one layer scored per head and per frequency,
   peak resident memory above the level before the call (sampled every 5 ms).

The machine is shared and noisy: compare figures from the same run only.
"""

from __future__ import annotations

import argparse
import ctypes
import statistics
import threading
import time

import torch

import lens_possym as lp
from lens_possym.capture import capture_attention_inputs
from lens_possym.scores import cross_logit_factors, exact_swap_scores, rerun_swap_scores, swap_set
from lens_possym.scores.swaps import SwapSet


def _timed(fn):
    start = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - start


def _rss_mb() -> float:
    with open("/proc/self/status") as handle:
        for line in handle:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def _peak_during(fn) -> tuple[object, float, float]:
    """Run ``fn``; return its result, seconds, and peak RSS above the start (MiB).

    Freed heap is first handed back to the system (glibc ``malloc_trim``), so memory the
    call allocates shows up in the resident size instead of reusing earlier free blocks.
    """
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass
    base, peak, done = _rss_mb(), [0.0], threading.Event()

    def sample():
        while not done.is_set():
            peak[0] = max(peak[0], _rss_mb())
            time.sleep(0.005)

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    try:
        out, seconds = _timed(fn)
    finally:
        done.set()
        thread.join()
    return out, seconds, max(peak[0], _rss_mb()) - base


def exact_vs_rerun(model, layer: int, sizes: list[int], rerun_swaps: int) -> None:
    print(f"\n1. exact vs re-run, layer {layer}, one prompt, all heads, per head and per frequency")
    print(f"{'n':>5} {'swaps':>7} {'exact s':>8} {'re-run s (timed on)':>24} {'ratio':>8} "
          f"{'max |Δ| head':>13} {'max |Δ| freq':>13}")
    heads = list(range(lp.rope_spec(model, layer).n_heads))
    for n in sizes:
        tokens = lp.random_token_prompts(model, n_prompts=1, n_tokens=n, seed=n)
        inputs = capture_attention_inputs(model, tokens, layer)[layer]
        factors = cross_logit_factors(inputs, heads)
        swaps = swap_set("token", factors.query_position, factors.visible, exclude_bos=True)
        exact_all, t_exact = _timed(lambda: exact_swap_scores(factors, swaps))
        k = min(rerun_swaps, swaps.n_swaps)
        pick = torch.randperm(swaps.n_swaps, generator=torch.Generator().manual_seed(0))[:k]
        subset = SwapSet("token", swaps.first[pick], swaps.second[pick], swaps.query_position)
        rerun, t_rerun = _timed(lambda: rerun_swap_scores(model, tokens, layer, heads, subset))
        exact = exact_swap_scores(factors, subset, kernel=False)
        scaled = t_rerun * swaps.n_swaps / k
        d_head = max(float((exact.pos - rerun.pos).abs().max()), float((exact.sym - rerun.sym).abs().max()))
        d_freq = max(float((exact.pos_freq - rerun.pos_freq).abs().max()),
                     float((exact.sym_freq - rerun.sym_freq).abs().max()))
        timed = f"{scaled:.1f} ({k} swaps: {t_rerun:.1f})"
        print(f"{n:>5} {swaps.n_swaps:>7} {t_exact:>8.2f} {timed:>24} {scaled / t_exact:>7.0f}x "
              f"{d_head:>13.1e} {d_freq:>13.1e}")
        del exact_all


def profile_vs_forward(model, n: int) -> None:
    print(f"\n2. whole-model profile vs one forward pass, one prompt of {n} tokens")
    tokens = lp.random_token_prompts(model, n_prompts=1, n_tokens=n, seed=1)
    lp.swap_scores(model, tokens[:, :16])  # compile the per-frequency loop once
    forwards, profiles = [], []
    for _ in range(3):
        with torch.no_grad():
            forwards.append(_timed(lambda: model(tokens))[1])
        scores, seconds = _timed(lambda: lp.swap_scores(model, tokens))
        profiles.append(seconds)
    spec = lp.rope_spec(model, 0)
    f, p = statistics.median(forwards), statistics.median(profiles)
    print(f"   forward pass      {f:6.2f} s   (runs: {', '.join(f'{x:.2f}' for x in forwards)})")
    print(f"   full profile      {p:6.2f} s   (runs: {', '.join(f'{x:.2f}' for x in profiles)}): "
          f"{len(scores.layers)} layers x {spec.n_heads} heads x {spec.n_freqs} frequencies, "
          f"{(n - 2) * (n - 3) // 2} swaps each")
    print(f"   profile / forward {p / f:6.2f}x   (target <= 2x)")


def peak_memory(model, layer: int, n: int) -> None:
    print(f"\n3. peak memory, one layer ({layer}) at n = {n}, per head and per frequency")
    tokens = lp.random_token_prompts(model, n_prompts=1, n_tokens=n, seed=2)
    scores, seconds, peak = _peak_during(lambda: lp.swap_scores(model, tokens, layers=[layer]))
    assert scores.pos_freq[layer].isfinite().all()
    spec = lp.rope_spec(model, layer)
    pairs = (n - 2) * (n - 3) // 2
    naive = pairs * spec.n_heads * spec.n_freqs * 8 / 2**20
    print(f"   {seconds:.1f} s, peak RSS +{peak:.0f} MiB (one float64 value per swap, head and "
          f"frequency would be {naive:,.0f} MiB)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="gemma-3-270m")
    parser.add_argument("--layer", type=int, default=5)
    parser.add_argument("--sizes", type=int, nargs="+", default=[64, 128, 256])
    parser.add_argument("--rerun-swaps", type=int, default=256)
    parser.add_argument("--profile-n", type=int, default=256)
    parser.add_argument("--memory-n", type=int, default=2048)
    parser.add_argument("--skip", nargs="*", default=[], choices=["rerun", "profile", "memory"])
    args = parser.parse_args()
    model = lp.load_model(args.model)
    print(f"{args.model}: {lp.rope_spec(model, args.layer).describe()}; torch threads "
          f"{torch.get_num_threads()}")
    if "rerun" not in args.skip:
        exact_vs_rerun(model, args.layer, args.sizes, args.rerun_swaps)
    if "profile" not in args.skip:
        profile_vs_forward(model, args.profile_n)
    if "memory" not in args.skip:
        peak_memory(model, args.layer, args.memory_n)


if __name__ == "__main__":
    main()
