"""Where a whole-model profile's time, operators and host-device synchronisations go, per
stage of the score engine (``torch.profiler``; ``lens_possym/scores/stages.py``).

    python benchmarks/profile_stages.py [--device cpu|cuda] [--n 256] [--layers 18]
        [--vocab 32768] [--dtype float32] [--gpu-path]

One whole-model profile (``lp.swap_scores``: every layer, head and frequency, exclusion
and the decomposition check) of a model of gemma-3-270m's shape with random weights
(4 query heads on 1 KV head, d_head 256, sliding window 512 on five layers of six; a
smaller vocabulary by default: the capture stops before the unembedding, so it changes
nothing scored), after one warm-up call, under ``torch.profiler``. Printed per stage:
the ``torch.profiler`` ranges, the operators called from Python (each one kernel launch
or more on a GPU), the operators that synchronise a GPU with the host (a value read back,
a data-dependent shape), both per scored layer, and the stage's CPU time. On a GPU the
CUDA time per stage is printed too. Figures are from this one run.
"""

from __future__ import annotations

import argparse
import time

import torch

import lens_possym as lp
from lens_possym.scores.stages import format_stage_table, stage_table


def gemma_shaped(n_layers: int, vocab: int, device: str, dtype: torch.dtype):
    """gemma-3-270m's attention shape with random weights (``n_layers`` layers, one global
    layer in six)."""
    pattern = (["sliding_attention"] * 5 + ["full_attention"]) * (n_layers // 6 + 1)
    return lp.tiny_model(
        "gemma3", n_layers=n_layers, d_model=640, n_heads=4, n_kv_heads=1, d_head=256,
        n_ctx=32768, init_range=0.02, device=device, sliding_window=512,
        layer_types=pattern[:n_layers], intermediate_size=2048, vocab_size=vocab,
        query_pre_attn_scalar=256, dtype=dtype)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--n", type=int, default=256)
    parser.add_argument("--layers", type=int, default=18)
    parser.add_argument("--vocab", type=int, default=32768)
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    parser.add_argument("--gpu-path", action="store_true",
                        help="on the CPU, score per frequency with the GPU's fused function "
                        "(run eagerly) instead of the CPU loop: the operators a GPU would launch")
    args = parser.parse_args()
    if args.gpu_path:
        import functools

        from lens_possym.scores import engine, exact

        engine.exact_swap_scores = functools.partial(exact.exact_swap_scores, fused=True)
    dtype = getattr(torch, args.dtype)
    model = gemma_shaped(args.layers, args.vocab, args.device, dtype)
    tokens = lp.random_token_prompts(model, n_prompts=1, n_tokens=args.n, seed=0).to(args.device)
    lp.swap_scores(model, tokens)                                  # warm-up (compiles, caches)
    activities = [torch.profiler.ProfilerActivity.CPU]
    if args.device.startswith("cuda"):
        activities.append(torch.profiler.ProfilerActivity.CUDA)
        torch.cuda.synchronize()
    start = time.perf_counter()
    with torch.profiler.profile(activities=activities) as prof:
        lp.swap_scores(model, tokens)
        if args.device.startswith("cuda"):
            torch.cuda.synchronize()
    wall = time.perf_counter() - start
    print(f"lens-possym {lp.__version__}, torch {torch.__version__}, {args.device}, "
          f"torch threads {torch.get_num_threads()}; gemma-3-270m's shape ({args.layers} layers, "
          f"vocabulary {args.vocab:,}), {args.dtype} model, n = {args.n}, one prompt; "
          f"profiled call {wall:.2f} s (under the profiler)"
          + ("; per-frequency scores by the GPU's fused function, eagerly" if args.gpu_path
             else ""))
    table = stage_table(prof.events())
    print(format_stage_table(table, args.layers))
    if args.device.startswith("cuda"):
        print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=25))


if __name__ == "__main__":
    main()
