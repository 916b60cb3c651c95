"""lens-possym on an accelerator: agreement checks and timings, in one run.

    python benchmarks/bench_device.py [--device cuda] [--weights auto|real|random]
        [--sizes 256 1024 2048] [--rerun-n 128] [--skip checks|timing|fused]
        [--long 8192 32768] [--dtype float32|bfloat16|float16] [--vocab 262144]

Nothing in the test suite needs a GPU (CI has none); this script is how we check that the
toolkit runs on one and how fast. On a CPU it runs too (``--device cpu``), more slowly.

1. **Checks on the device**, in float64, for every tiny family: exact vs re-run scores
   (token and block swaps, per head and per frequency), the device's exact scores against
   the CPU's (the compiled per-frequency loop runs only on the CPU; the device uses the
   tensor code), the frequency terms against the model's own pre-softmax scores, an empty
   frequency ablation leaving the logits bit-for-bit unchanged, and ``unrotate`` on every
   frequency making the heads of a layer exactly symbolic (re-run s_SYM = 1), and the
   profile's figures drawn from the device's results (``figs``: how many PNGs written).
2. **Timings** on a model of gemma-3-270m's shape: the real weights when its GGUF package
   is installed (``--weights auto``/``real``), else random weights of the same shape
   (``random``: 18 layers, 4 query heads on 1 KV head, d_head 256, sliding window 512,
   vocabulary 262,144). Costs depend on the shape, not the weights, so the random model
   times the same work; its scores mean nothing. For each ``--sizes`` n: one forward pass
   against the whole per-head and per-frequency profile (float64 scores, the default),
   medians of three; and exact vs re-run over *all* swaps of one layer at ``--rerun-n``.

The device is synchronised around every timed call. Compare figures from one run only.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import tempfile
import time

import torch

import lens_possym as lp
from lens_possym.capture import capture_attention_inputs
from lens_possym.interventions import ablate_frequencies, ablate_frequencies_hook
from lens_possym.scores import cross_logit_factors, exact_swap_scores, rerun_swap_scores, swap_set

PROMPT = "Alice likes red . Bob likes blue . Carol likes green . What color does"
SCORE_FIELDS = ("pos", "sym", "pos_freq", "sym_freq")


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _timed(fn, device: torch.device):
    _sync(device)
    start = time.perf_counter()
    out = fn()
    _sync(device)
    return out, time.perf_counter() - start


def _max_diff(a, b) -> float:
    """Largest |a - b| over score tensors (nan where a layer/head was not scored)."""
    a, b = a.detach().double().cpu(), b.detach().double().cpu()
    both = a.isfinite() & b.isfinite()
    if not torch.equal(a.isfinite(), b.isfinite()):
        return float("inf")
    return float((a[both] - b[both]).abs().max()) if both.any() else 0.0


def _worst(x, y) -> float:
    return max(_max_diff(getattr(x, f), getattr(y, f)) for f in SCORE_FIELDS)


# ---- 1. checks -------------------------------------------------------------------------------


def _tiny(family: str, device) -> object:
    extra = {"sliding_window": 8} if family == "gemma3" else {}
    return lp.tiny_model(family, dtype=torch.float64, device=device, **extra)


def _terms_error(model, tokens) -> float:
    """max |Σ terms - hook_attn_scores| (or |softmax - hook_pattern|) over layers and heads."""
    worst = 0.0
    for fl in lp.frequency_logits_all(model, tokens, query_positions=None, check=False).values():
        name = fl.spec.scores_hook or fl.spec.pattern_hook
        _, cache = model.run_with_cache(tokens, names_filter=[name])
        ours = fl.scores() if fl.spec.scores_hook else fl.pattern()
        worst = max(worst, float((ours - cache[name])[..., fl.mask].abs().max()))
    return worst


def _empty_ablation_is_identity(model, tokens) -> bool:
    """Ablating frequencies of no head leaves the logits bit-for-bit unchanged (an empty
    frequency list is refused outright: it is almost always a selection mistake)."""
    spec = lp.rope_spec(model, 0)
    clean = model(tokens)
    hooks = [(spec.q_hook, ablate_frequencies_hook(spec, [], "0:2", "zero"))]
    with model.hooks(fwd_hooks=hooks):
        return bool(torch.equal(model(tokens), clean))


def _unrotated_sym(model, tokens) -> float:
    """min re-run s_SYM of the last layer's heads with every frequency unrotated."""
    layer = len(lp.rope_specs(model)) - 1
    with ablate_frequencies(model, f"{layer}.*", "unrotate"):
        scores = lp.swap_scores(model, tokens, layers=[layer], method="rerun",
                                per_frequency=False, exclusion=False)
    return float(scores.sym[layer].min())


def _figures_written(model, tokens, scores) -> tuple[int, int]:
    """The profile's PNGs drawn from results that live on the device: (written, promised)."""
    import matplotlib

    matplotlib.use("Agg")
    from lens_possym.report import save_profile_figures

    with tempfile.TemporaryDirectory() as folder:
        paths = save_profile_figures(model, scores, tokens, folder)
        return sum(p.exists() for p in paths.values()), len(paths)


def checks(device: torch.device) -> None:
    print(f"\n1. checks on {device}, float64, every tiny family (tolerance 1e-5)")
    print(f"{'family':<7} {'token ex-rr':>12} {'block ex-rr':>12} {'dev-cpu':>9} "
          f"{'terms':>9} {'no-op':>6} {'unrot sSYM':>11} {'figs':>5}")
    failures = []
    for family in lp.models.TINY_FAMILIES:
        model, cpu_model = _tiny(family, device), _tiny(family, "cpu")
        tokens = model.to_tokens(PROMPT)
        row = []
        for swap in ("token", "block"):
            kw = dict(swap=swap, n_blocks=4, tau=1e-2, exclude_bos=False)
            exact = lp.swap_scores(model, tokens, method="exact", **kw)
            rerun = lp.swap_scores(model, tokens, method="rerun", batch_size=17, **kw)
            row.append(_worst(exact, rerun))
            if swap == "token":
                on_cpu = lp.swap_scores(cpu_model, tokens.cpu(), method="exact", **kw)
                dev_cpu = _worst(exact, on_cpu)
                figures, promised = _figures_written(model, tokens, exact)
        terms = _terms_error(model, tokens)
        identity = _empty_ablation_is_identity(model, tokens)
        sym = _unrotated_sym(model, tokens)
        ok = (max(row + [dev_cpu]) <= 1e-5 and terms <= 1e-4 and identity and sym >= 1 - 1e-6
              and figures == promised > 0)
        failures += [] if ok else [family]
        print(f"{family:<7} {row[0]:>12.1e} {row[1]:>12.1e} {dev_cpu:>9.1e} {terms:>9.1e} "
              f"{'yes' if identity else 'NO':>6} {sym:>11.8f} {figures:>5}")
    print(f"   all checks {'pass' if not failures else 'FAIL for ' + ', '.join(failures)}")


# ---- 2. timings ------------------------------------------------------------------------------


#: the timing model's dtype and vocabulary (``--dtype``, ``--vocab``)
MODEL = {"dtype": torch.float32, "vocab": 262144}


def _gemma_shaped_random(device) -> object:
    """gemma-3-270m's architecture with random weights (and the tiny word tokenizer)."""
    pattern = (["sliding_attention"] * 5 + ["full_attention"]) * 3
    return lp.tiny_model(
        "gemma3", n_layers=18, d_model=640, n_heads=4, n_kv_heads=1, d_head=256, n_ctx=32768,
        init_range=0.02, device=device, sliding_window=512, layer_types=pattern,
        intermediate_size=2048, vocab_size=MODEL["vocab"], query_pre_attn_scalar=256,
        dtype=MODEL["dtype"],
    )


def _timing_model(weights: str, device):
    installed = any(m.name == "gemma-3-270m" and m.installed for m in lp.list_models())
    dtype = str(MODEL["dtype"]).removeprefix("torch.")
    if weights == "real" or (weights == "auto" and installed):
        return (lp.load_model("gemma-3-270m", device=device, dtype=MODEL["dtype"]),
                f"gemma-3-270m (real weights), {dtype}")
    return _gemma_shaped_random(device), f"gemma-3-270m's shape, random weights, {dtype}"


def profile_vs_forward(model, device, n: int) -> None:
    tokens = lp.random_token_prompts(model, n_prompts=1, n_tokens=n, seed=n).to(device)
    forwards, profiles = [], []
    for _ in range(3):
        with torch.no_grad():
            forwards.append(_timed(lambda: model(tokens), device)[1])
        profiles.append(_timed(lambda: lp.swap_scores(model, tokens), device)[1])
    f, p = statistics.median(forwards), statistics.median(profiles)
    peak = ""
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
        base = torch.cuda.memory_allocated(device)
        lp.swap_scores(model, tokens)
        peak = f"{(torch.cuda.max_memory_allocated(device) - base) / 2**20:>9,.0f}"
    print(f"{n:>6} {(n - 2) * (n - 3) // 2:>9,} {f:>10.3f} {p:>10.3f} {p / f:>8.2f}x {peak}")


def exact_vs_rerun(model, device, n: int, layer: int = 5) -> None:
    tokens = lp.random_token_prompts(model, n_prompts=1, n_tokens=n, seed=7).to(device)
    heads = list(range(lp.rope_spec(model, layer).n_heads))

    def exact():
        inputs = capture_attention_inputs(model, tokens, layer)[layer]
        factors = cross_logit_factors(inputs, heads)
        swaps = swap_set("token", factors.query_position, factors.visible, exclude_bos=True)
        return exact_swap_scores(factors, swaps), swaps

    (ex, swaps), t_exact = _timed(exact, device)
    rr, t_rerun = _timed(lambda: rerun_swap_scores(model, tokens, layer, heads, swaps), device)
    diff = max(_max_diff(ex.pos_freq, rr.pos_freq), _max_diff(ex.sym_freq, rr.sym_freq),
               _max_diff(ex.pos, rr.pos), _max_diff(ex.sym, rr.sym))
    print(f"   layer {layer}, n = {n}, all {swaps.n_swaps:,} swaps, per head and frequency: "
          f"exact {t_exact:.3f} s, re-run {t_rerun:.2f} s, ratio {t_rerun / t_exact:,.0f}x, "
          f"max |Δ| {diff:.1e} (model dtype {next(model.parameters()).dtype})")


def timings(device: torch.device, weights: str, sizes: list[int], rerun_n: int) -> None:
    model, label = _timing_model(weights, device)
    print(f"\n2. timings on {device}: {label}")
    warm = lp.random_token_prompts(model, n_prompts=1, n_tokens=32).to(device)
    lp.swap_scores(model, warm)  # first-call costs (kernels, caches) out of the figures
    mem = "  peak MiB" if device.type == "cuda" else ""
    print(f"{'n':>6} {'swaps':>9} {'forward s':>10} {'profile s':>10} {'ratio':>9}{mem}")
    for n in sizes:
        profile_vs_forward(model, device, n)
    exact_vs_rerun(model, device, rerun_n)


# ---- 3. the fused per-frequency kernel, and long contexts ----------------------------------


def fused_vs_tensor(device: torch.device, weights: str, sizes: list[int], layer: int = 5) -> None:
    """One layer's per-frequency token-swap scores three ways: the fused kernel of
    scores/_fused.py (torch.compile on CUDA), the tensor code, and the CPU loop (the
    reference for the differences)."""
    model, label = _timing_model(weights, device)
    print(f"\n3. per-frequency scores of layer {layer} on {device} ({label}): fused kernel vs "
          "tensor code; max |Δ| against the CPU loop")
    print(f"{'n':>6} {'swaps':>11} {'fused s':>9} {'tensor s':>9} {'speed-up':>9} "
          f"{'|Δ| fused':>10} {'|Δ| tensor':>10}")
    heads = list(range(lp.rope_spec(model, layer).n_heads))
    for n in sizes:
        tokens = lp.random_token_prompts(model, n_prompts=1, n_tokens=n, seed=n).to(device)
        inputs = capture_attention_inputs(model, tokens, layer)[layer]
        factors = cross_logit_factors(inputs, heads)
        swaps = swap_set("token", factors.query_position, factors.visible, exclude_bos=True)
        exact_swap_scores(factors, swaps)                                  # compile once
        fused, t_fused = _timed(lambda: exact_swap_scores(factors, swaps), device)
        tensor, t_tensor = _timed(lambda: exact_swap_scores(factors, swaps, kernel=False),
                                  device)
        cpu_factors = dataclasses.replace(factors, cos=factors.cos.cpu(), sin=factors.sin.cpu(),
                                          x=factors.x.cpu(), y=factors.y.cpu(),
                                          visible=factors.visible.cpu())
        cpu_swaps = swap_set("token", cpu_factors.query_position, cpu_factors.visible,
                             exclude_bos=True)
        loop = exact_swap_scores(cpu_factors, cpu_swaps)
        d_fused = max(_max_diff(fused.pos_freq, loop.pos_freq), _max_diff(fused.sym_freq, loop.sym_freq))
        d_tensor = max(_max_diff(tensor.pos_freq, loop.pos_freq),
                       _max_diff(tensor.sym_freq, loop.sym_freq))
        print(f"{n:>6} {swaps.n_swaps:>11,} {t_fused:>9.3f} {t_tensor:>9.3f} "
              f"{t_tensor / t_fused:>8.1f}x {d_fused:>10.1e} {d_tensor:>10.1e}")


def long_profiles(device: torch.device, weights: str, sizes: list[int]) -> None:
    """A whole-model profile at long contexts, with its peak memory (the whole-head cross
    logits are computed in pieces above ScoreConfig.max_matrix_elements)."""
    model, label = _timing_model(weights, device)
    print(f"\n4. long contexts on {device} ({label}): whole-model profile, one prompt")
    # compile the fused kernel before timing: run alone (--skip checks timing fused), the
    # first long profile would include torch.compile's cold start
    lp.swap_scores(model, lp.random_token_prompts(model, n_prompts=1, n_tokens=64).to(device))
    for n in sizes:
        tokens = lp.random_token_prompts(model, n_prompts=1, n_tokens=n, seed=n).to(device)
        with torch.no_grad():
            _, forward = _timed(lambda: model(tokens), device)
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)
            base = torch.cuda.memory_allocated(device)
        _, profile = _timed(lambda: lp.swap_scores(model, tokens), device)
        peak = ((torch.cuda.max_memory_allocated(device) - base) / 2**20
                if device.type == "cuda" else float("nan"))
        print(f"   n = {n:,}: forward {forward:.2f} s, profile {profile:.1f} s "
              f"({profile / forward:.1f}x), peak {peak:,.0f} MiB above the model")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--weights", choices=["auto", "real", "random"], default="auto")
    parser.add_argument("--sizes", type=int, nargs="+", default=[256, 1024, 2048])
    parser.add_argument("--rerun-n", type=int, default=128)
    parser.add_argument("--fused-sizes", type=int, nargs="*", default=[256, 2048])
    parser.add_argument("--long", type=int, nargs="*", default=[],
                        help="also profile these context lengths (e.g. 32768 on a GPU)")
    parser.add_argument("--skip", nargs="*", default=[], choices=["checks", "timing", "fused"])
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"],
                        help="the timing model's dtype (scores are float64 whatever it is)")
    parser.add_argument("--vocab", type=int, default=262144,
                        help="the random timing model's vocabulary (gemma-3-270m: 262,144)")
    args = parser.parse_args()
    MODEL.update(dtype=getattr(torch, args.dtype), vocab=args.vocab)
    device = torch.device(args.device)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU"
    print(f"lens-possym {lp.__version__}, torch {torch.__version__}, {name}")
    if "checks" not in args.skip:
        checks(device)
    if "timing" not in args.skip:
        timings(device, args.weights, args.sizes, args.rerun_n)
    if "fused" not in args.skip and args.fused_sizes:
        fused_vs_tensor(device, args.weights, args.fused_sizes)
    if args.long:
        long_profiles(device, args.weights, args.long)


if __name__ == "__main__":
    main()
