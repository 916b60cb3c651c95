"""What ``rope_specs`` costs on the real models: the first read (a probe forward pass and
its checks) and a memo hit (the fingerprint comparison every later call pays).

    PYTHONPATH=$PWD python benchmarks/bench_rope_specs.py [--model gemma-3-270m] [--repeat 200]
"""

from __future__ import annotations

import argparse
import time

import lens_possym as lp


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", action="append", help="known model names (default: both)")
    parser.add_argument("--repeat", type=int, default=200)
    args = parser.parse_args()
    for name in args.model or ["gemma-3-270m", "smollm2-135m"]:
        model = lp.load_model(name)
        start = time.perf_counter()
        lp.rope_specs(model, refresh=True)
        first = time.perf_counter() - start
        start = time.perf_counter()
        for _ in range(args.repeat):
            lp.rope_specs(model)
        hit = (time.perf_counter() - start) / args.repeat
        print(f"{name}: first read {first * 1e3:.0f} ms, memo hit {hit * 1e6:.0f} µs")


if __name__ == "__main__":
    main()
