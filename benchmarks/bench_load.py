"""Cold and warm load times of the real models, each in a fresh Python process.

    python benchmarks/bench_load.py [--model gemma-3-270m] [--model smollm2-135m]

"Cold" converts the GGUF file into an empty, temporary cache; "warm" then loads from that
cache in a new process, as a user's next session would. ``--cache DIR --repeat N`` uses an
existing cache folder instead (converting only if it is empty) and times N warm loads,
e.g. to compare two versions on the same machine without converting again. Each run
reports the time to import lens-possym (torch, transformers, TransformerLens) and the time
of the ``load_model`` call itself. Target: warm ``load_model`` of gemma-3-270m <= 10 s.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

CHILD = r"""
import json, sys, time
t0 = time.perf_counter()
import lens_possym
t1 = time.perf_counter()
model = lens_possym.load_model(sys.argv[1])
t2 = time.perf_counter()
text = model.generate(lens_possym.KNOWN_MODELS[sys.argv[1]].greedy_check[0], max_new_tokens=6,
                      do_sample=False, verbose=False)
print(json.dumps({"import_s": t1 - t0, "load_s": t2 - t1, "text": text}))
"""


def run_child(name: str, cache: str) -> dict:
    env = dict(os.environ, LENS_POSSYM_CACHE=cache, TQDM_DISABLE="1")
    out = subprocess.run([sys.executable, "-c", CHILD, name], env=env, capture_output=True,
                         text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def verify_s(name: str, cache_dir: str) -> float:
    """Seconds to check the cached entry's sizes and content digests (median of three)."""
    import time

    os.environ["LENS_POSSYM_CACHE"] = cache_dir
    from lens_possym.models import cache, loading, registry

    folder = cache.entry_dir(loading._known_sha256(registry.known_model(name)))
    times = []
    for _ in range(3):
        start = time.perf_counter()
        problem = cache.entry_problem(folder)
        times.append(time.perf_counter() - start)
        assert problem is None, problem
    return sorted(times)[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", action="append", help="model name (repeatable)")
    parser.add_argument("--cache", help="an existing cache folder: time warm loads from it")
    parser.add_argument("--repeat", type=int, default=3, help="warm loads with --cache")
    args = parser.parse_args()
    names = args.model or ["gemma-3-270m", "smollm2-135m"]
    print(f"{'model':<14} {'run':<5} {'import s':>9} {'load_model s':>13}  greedy text")
    if args.cache:
        for name in names:
            runs = [run_child(name, args.cache) for _ in range(args.repeat + 1)]
            for r in runs[1:]:  # the first may have converted
                print(f"{name:<14} {'warm':<5} {r['import_s']:>9.1f} {r['load_s']:>13.2f}  "
                      f"{r['text']!r}")
            loads = sorted(r["load_s"] for r in runs[1:])
            verify = verify_s(name, args.cache)
            print(f"{name:<14} median warm load_model: {loads[len(loads) // 2]:.2f} s; "
                  f"of it, verifying the entry's content digests: {verify:.2f} s")
        return
    for name in names:
        with tempfile.TemporaryDirectory(prefix="lens_possym_bench_") as cache:
            cold = run_child(name, cache)
            warm = run_child(name, cache)
        for label, r in (("cold", cold), ("warm", warm)):
            print(f"{name:<14} {label:<5} {r['import_s']:>9.1f} {r['load_s']:>13.1f}  {r['text']!r}")
        print(f"{name:<14} cold/warm load ratio: {cold['load_s'] / warm['load_s']:.1f}x; "
              f"warm target <= 10 s: {'met' if warm['load_s'] <= 10 else 'MISSED'}")


if __name__ == "__main__":
    main()
