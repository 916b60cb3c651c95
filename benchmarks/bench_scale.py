"""Past one batch and one machine: dataset profiles, Ray, long contexts (CPU).

    python benchmarks/bench_scale.py --cache DIR          # every section, then the table
    python benchmarks/bench_scale.py --cache DIR --only dataset_inprocess

Sections (each runs in a fresh process; its result is written to ``DIR/<section>.json``
as soon as it finishes, so an interrupted run continues where it stopped; the table at
the end prints every section, with the time each was measured):

1. ``dataset_inprocess`` / ``dataset_ray``: a dataset profile of gemma-3-270m over
   ``--prompts`` (1,000) prompts of mixed lengths (``--min-len``..``--max-len`` tokens,
   ordinary word tokens at random, BOS first, seed 0), every layer, head and frequency,
   shards of 125 prompts: in this process, then on a local 2-worker Ray cluster. Prompts
   per second, peak memory (resident memory of the process and all its children, sampled
   every 0.2 s) and the largest difference between the two profiles' means and spreads.
2. ``sweep_inprocess`` / ``sweep_ray``: a 16-model toy sweep (Index task, frequency ids
   0-15, seed 0, default TrainConfig on the CPU, scores of the trained heads), in process
   and on the 2-worker cluster: wall time, and whether the accuracies are identical.
3. ``long_<n>`` for n = 256, 2048, 8192: one prompt of n tokens (random word tokens, seed
   0): one forward pass, then a whole-model profile (every layer, head and frequency,
   exclusion and the decomposition check included), each timed once after a warm-up
   pass at n = 64; peak memory above the process's resident memory before scoring.

Torch threads: as the environment says (``OMP_NUM_THREADS=1`` gives one); the Ray workers use the
driver's count.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import threading
import time
from pathlib import Path

SECTIONS = ["dataset_inprocess", "dataset_ray", "sweep_inprocess", "sweep_ray", "long_256",
            "long_2048", "long_8192"]


class PeakMemory:
    """Peak resident memory of this process and its children (Ray workers included)."""

    def __init__(self, interval: float = 0.2):
        import psutil

        self.proc, self.interval, self.peak = psutil.Process(), interval, 0
        self._stop = threading.Event()

    def _rss(self) -> int:
        total = 0
        for p in [self.proc, *self.proc.children(recursive=True)]:
            try:
                total += p.memory_info().rss
            except Exception:  # noqa: BLE001 - a child that just exited
                pass
        return total

    def _run(self):
        while not self._stop.is_set():
            self.peak = max(self.peak, self._rss())
            time.sleep(self.interval)

    def __enter__(self):
        self.base = self._rss()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self.thread.join()
        self.peak = max(self.peak, self._rss())


def _prompts(args) -> list[list[int]]:
    import torch

    import lens_possym as lp
    from lens_possym.tasks.binding import _ordinary_token_ids

    model = lp.load_model("gemma-3-270m")
    pool = torch.tensor(_ordinary_token_ids(model.tokenizer))
    bos = model.tokenizer.bos_token_id
    g = torch.Generator().manual_seed(0)
    lengths = torch.randint(args.min_len, args.max_len + 1, (args.prompts,), generator=g)
    return [[bos] + pool[torch.randint(len(pool), (int(n) - 1,), generator=g)].tolist()
            for n in lengths]


def dataset(args, ray: bool) -> dict:
    import torch

    from lens_possym.execution import RayExecutor
    from lens_possym.scores.dataset import dataset_profile

    prompts = _prompts(args)
    out = Path(args.cache) / ("profile_ray" if ray else "profile_inprocess")
    executor = RayExecutor(num_cpus=2) if ray else None
    if executor is not None:
        executor.start()
    try:
        with PeakMemory() as mem:
            start = time.perf_counter()
            profile = dataset_profile("gemma-3-270m", prompts, shard_size=125, group_size=16,
                                      out_dir=out, executor=executor, n_prompts=len(prompts))
            wall = time.perf_counter() - start
    finally:
        if executor is not None:
            executor.shutdown()
    result = {"prompts": profile.n_prompts, "wall_s": wall,
              "prompts_per_s": profile.n_prompts / wall, "peak_mib": mem.peak / 2**20,
              "n_tokens": profile.n_tokens, "shards": profile.n_shards,
              "profile": str(out / "profile.json"),
              "torch_threads": torch.get_num_threads()}
    other = Path(args.cache) / ("profile_inprocess" if ray else "profile_ray") / "profile.json"
    if other.exists():
        from lens_possym.scores.dataset import DatasetProfile

        result["max_abs_diff_vs_other"] = _diff(profile, DatasetProfile.load(other))
    return result


def _diff(a, b) -> float:
    worst = 0.0
    for name, m in a.moments.items():
        for x, y in ((m.mean, b.moments[name].mean), (m.std, b.moments[name].std),
                     (m.count, b.moments[name].count)):
            both = x.isfinite() & y.isfinite()
            if not (x.isfinite() == y.isfinite()).all():
                return float("inf")
            if both.any():
                worst = max(worst, float((x[both] - y[both]).abs().max()))
    return worst


def sweep(args, ray: bool) -> dict:
    import torch

    from lens_possym.papers import a as paper_a
    from lens_possym import training
    from lens_possym.execution import RayExecutor

    executor = RayExecutor(num_cpus=2) if ray else None
    if executor is not None:
        executor.start()
    try:
        start = time.perf_counter()
        result = paper_a.frequency_sweep("index", paper_a.single_ids(range(16)), seeds=(0,),
                           train_config=training.TrainConfig(device="cpu"), executor=executor)
        wall = time.perf_counter() - start
    finally:
        if executor is not None:
            executor.shutdown()
    return {"models": len(result.runs), "wall_s": wall,
            "accuracies": [r.test_accuracy for r in result.runs],
            "s_pos": [r.pos_score for r in result.runs],
            "torch_threads": torch.get_num_threads()}


def long_context(args, n: int) -> dict:
    import torch

    import lens_possym as lp

    model = lp.load_model("gemma-3-270m")
    warm = lp.random_token_prompts(model, n_prompts=1, n_tokens=64, seed=1)
    model(warm)
    lp.swap_scores(model, warm)
    tokens = lp.random_token_prompts(model, n_prompts=1, n_tokens=n, seed=0)
    with torch.no_grad():
        start = time.perf_counter()
        model(tokens)
        forward = time.perf_counter() - start
    with PeakMemory() as mem:
        start = time.perf_counter()
        scores = lp.swap_scores(model, tokens)
        profile = time.perf_counter() - start
    return {"n": n, "forward_s": forward, "profile_s": profile, "ratio": profile / forward,
            "peak_above_mib": (mem.peak - mem.base) / 2**20,
            "layers": scores.n_layers, "heads": scores.n_heads,
            "n_freqs": scores.pos_freq.shape[-1], "swaps": (n - 2) * (n - 3) // 2,
            "torch_threads": torch.get_num_threads()}


def run_section(name: str, args) -> dict:
    if name.startswith("dataset"):
        out = dataset(args, ray=name.endswith("ray"))
    elif name.startswith("sweep"):
        out = sweep(args, ray=name.endswith("ray"))
    else:
        out = long_context(args, int(name.split("_")[1]))
    return out | {"measured_at": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
                  "load_average": os.getloadavg()}


def report(cache: Path) -> str:
    got = {s: json.loads((cache / f"{s}.json").read_text()) for s in SECTIONS
           if (cache / f"{s}.json").exists()}
    lines = ["1. dataset profile of gemma-3-270m (every layer, head and frequency)"]
    for s in ("dataset_inprocess", "dataset_ray"):
        r = got.get(s)
        if r is None:
            lines.append(f"   {s:18s} not measured")
            continue
        diff = r.get("max_abs_diff_vs_other")
        lines.append(
            f"   {s:18s} {r['prompts']} prompts ({r['n_tokens']['min']}-{r['n_tokens']['max']} "
            f"tokens, mean {r['n_tokens']['mean']:.1f}) in {r['wall_s']:.0f} s: "
            f"{r['prompts_per_s']:.2f} prompts/s, peak {r['peak_mib']:.0f} MiB"
            + ("" if diff is None else f", max |Δ| vs the other run {diff:.1e}")
            + f"  [{r['measured_at']}, load {r['load_average'][0]:.1f}]")
    lines.append("2. 16-model toy sweep (Index, ids 0-15, seed 0, default TrainConfig)")
    for s in ("sweep_inprocess", "sweep_ray"):
        r = got.get(s)
        if r is None:
            lines.append(f"   {s:18s} not measured")
            continue
        lines.append(f"   {s:18s} {r['models']} models in {r['wall_s']:.0f} s"
                     f"  [{r['measured_at']}, load {r['load_average'][0]:.1f}]")
    if "sweep_inprocess" in got and "sweep_ray" in got:
        same = got["sweep_inprocess"]["accuracies"] == got["sweep_ray"]["accuracies"]
        lines.append(f"   accuracies identical: {'yes' if same else 'NO'} "
                     f"({', '.join(f'{a:.3f}' for a in got['sweep_ray']['accuracies'])})")
    lines.append("3. whole-model profile vs one forward pass, one prompt, CPU")
    lines.append("       n       swaps  forward s  profile s     ratio  peak +MiB")
    for s in SECTIONS:
        if not s.startswith("long"):
            continue
        r = got.get(s)
        if r is None:
            lines.append(f"   {s[5:]:>5}  not measured")
            continue
        lines.append(f"   {r['n']:5d} {r['swaps']:11,d} {r['forward_s']:10.2f} "
                     f"{r['profile_s']:10.1f} {r['ratio']:8.2f}x {r['peak_above_mib']:10.0f}"
                     f"  [{r['measured_at']}, load {r['load_average'][0]:.1f}]")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cache", required=True, help="folder for each section's result")
    parser.add_argument("--only", nargs="*", choices=SECTIONS, help="run these sections only")
    parser.add_argument("--prompts", type=int, default=1000)
    parser.add_argument("--min-len", type=int, default=16)
    parser.add_argument("--max-len", type=int, default=48)
    parser.add_argument("--doc", help="also write the table into this Markdown file's section "
                        "'## 6. Measured' (docs/scale.md), with the command")
    parser.add_argument("--section", help=argparse.SUPPRESS)   # one section, in a child
    args = parser.parse_args()
    cache = Path(args.cache)
    cache.mkdir(parents=True, exist_ok=True)
    if args.section:
        result = run_section(args.section, args)
        (cache / f"{args.section}.json").write_text(json.dumps(result, indent=1))
        return
    import torch

    import lens_possym as lp

    print(f"lens-possym {lp.__version__}, torch {torch.__version__}, {platform.processor() or platform.machine()}, "
          f"{os.cpu_count()} cores, torch threads {torch.get_num_threads()}", flush=True)
    for name in args.only or SECTIONS:
        if (cache / f"{name}.json").exists():
            print(f"[{name}] cached", flush=True)
            continue
        print(f"[{name}] running ...", flush=True)
        start = time.perf_counter()
        child = [sys.executable, __file__, "--cache", str(cache), "--section", name,
                 "--prompts", str(args.prompts), "--min-len", str(args.min_len),
                 "--max-len", str(args.max_len)]
        rc = subprocess.call(child)
        print(f"[{name}] {'done' if rc == 0 else f'FAILED (exit {rc})'} in "
              f"{time.perf_counter() - start:.0f} s", flush=True)
    table = report(cache)
    print(table, flush=True)
    if args.doc:
        write_doc(Path(args.doc), table, cache)


def write_doc(path: Path, table: str, cache: Path) -> None:
    """Replace the body of ``## 6. Measured`` in ``path`` with the command and the table."""
    import torch

    head = "## 6. Measured"
    text = path.read_text()
    start = text.index(head)
    line_end = text.index("\n", start) + 1
    body = (f"\n`OMP_NUM_THREADS=1 python benchmarks/bench_scale.py --cache {cache} --doc {path}` "
            f"(one torch thread; the Ray sections use a 2-CPU local cluster, so both cores; "
            f"torch {torch.__version__}, {os.cpu_count()} cores; the 1-minute load average at "
            f"each section's end is printed beside it):\n\n```\n{table}\n```\n")
    path.write_text(text[:line_end] + body)


if __name__ == "__main__":
    main()
