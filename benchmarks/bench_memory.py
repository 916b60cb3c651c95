"""Peak memory of one layer's swap scores against what ``ScoreConfig`` bounds (issue 27).

    python benchmarks/bench_memory.py                       # gemma-3-270m, n = 4096, layer 5
    python benchmarks/bench_memory.py --model tiny-llama --n 256 --layer 1   # a quick check

Loads the model, makes one prompt of ``--n`` random word tokens (seed 0), and measures
resident memory (sampled every millisecond) above the loaded model:

1. the forward pass alone (the capture of the layer's queries and keys): the model's own
   attention, which no setting of lens-possym bounds;
2. ``swap_scores`` of the layer (every head and frequency, exclusion and check included)
   for each ``--bounds`` value of ``max_matrix_elements`` (powers of two), with
   ``max_elements`` at its default;

and prints each peak next to ``ScoreConfig.memory_bound`` (what the
settings allow plus the factor tables they do not cover) plus the forward pass's own peak,
and their ratio. The claim (docs/scores.md, "Memory"): the ratio is at most 1.5.
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import os
import threading
import time


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _trim() -> None:
    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except OSError:  # pragma: no cover - not glibc
        pass


class Peak:
    """Peak resident memory above the level at entry, sampled every millisecond."""

    def __enter__(self) -> "Peak":
        _trim()
        self.base = self.peak = _rss()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        self.start = time.perf_counter()
        return self

    def _sample(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, _rss())
            time.sleep(0.001)

    def __exit__(self, *exc) -> None:
        self.seconds = time.perf_counter() - self.start
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, _rss())
        self.above = self.peak - self.base


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="gemma-3-270m")
    parser.add_argument("--n", type=int, default=4096)
    parser.add_argument("--layer", type=int, default=5)
    parser.add_argument("--bounds", default="16,20,26",
                        help="log2 of max_matrix_elements, comma-separated")
    args = parser.parse_args()

    import torch

    import lens_possym as lp
    from lens_possym.scores import ScoreConfig

    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    start = time.perf_counter()
    model = (lp.tiny_model(args.model[5:], n_ctx=max(256, args.n))
             if args.model.startswith("tiny-") else lp.load_model(args.model, device="cpu"))
    tokens = lp.random_token_prompts(model, n_prompts=1, n_tokens=args.n, seed=0)
    spec = lp.rope_spec(model, args.layer)
    print(f"{args.model}: loaded in {time.perf_counter() - start:.0f} s; layer {spec.layer}, "
          f"{spec.n_heads} heads, {spec.n_freqs} frequency ids, n = {args.n}, "
          f"torch threads {torch.get_num_threads()}")
    lp.swap_scores(model, tokens[:, :64], layers=[spec.layer])  # warm-up: numba's compile
    with Peak() as forward:
        lp.capture_attention_inputs(model, tokens, spec.layer)
    print(f"forward pass to layer {spec.layer} (the model's own attention): peak "
          f"+{forward.above / 2**20:.0f} MiB in {forward.seconds:.1f} s")
    print(f"{'max_matrix_elements':>20} {'peak above model':>17} {'bound':>10} "
          f"{'bound+forward':>14} {'ratio':>6} {'time':>7}")
    worst = 0.0
    for log2 in (int(b) for b in args.bounds.split(",")):
        config = ScoreConfig(max_matrix_elements=1 << log2)
        with Peak() as scoring:
            scores = lp.swap_scores(model, tokens, config, layers=[spec.layer])
        assert scores.pos[spec.layer].isfinite().all()
        bound = config.memory_bound(batch=1, heads=spec.n_heads, n_pos=args.n,
                                    n_freqs=spec.n_freqs)["total"]
        allowed = bound + forward.above
        ratio = scoring.above / allowed
        worst = max(worst, ratio)
        print(f"{'2^' + str(log2):>20} {scoring.above / 2**20:>13.0f} MiB "
              f"{bound / 2**20:>6.0f} MiB {allowed / 2**20:>10.0f} MiB {ratio:>6.2f} "
              f"{scoring.seconds:>6.0f}s")
    print(f"largest ratio of peak to (bound + forward pass): {worst:.2f} (claim: <= 1.5)")


if __name__ == "__main__":
    main()
