"""Agreement of exact, re-run and paper C's own scoring on heads whose swaps drain.

    python benchmarks/bench_draining.py

Uses the draining tiny GPT-J heads and the transcription of paper C's ``lib/metrics.py``
from ``tests/scores/test_draining.py`` (see there). Prints, per model dtype and head kind,
the largest |exact − re-run| and |exact − paper C| per head and per frequency (token swaps,
tau 1e-4, BOS swapped as in paper C), and how far the scale-free cosine is from them.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "scores"))
import test_draining as drain  # noqa: E402

from lens_possym.scores import swap_scores  # noqa: E402


def _max_diff(a, b) -> float:
    return float((a - b).abs().max())


def main() -> None:
    print(f"{'dtype':8} {'heads':13} {'head: |exact-rerun|':>20} {'|exact-paperC|':>15} "
          f"{'freq: |exact-rerun|':>20} {'|exact-paperC|':>15} {'|scale_free-rerun|':>19}")
    for dtype in (torch.float64, torch.float32):
        for label, amplitude in drain.AMPLITUDES.items():
            model = drain.draining_gptj(dtype, amplitude)
            tokens = model.to_tokens(drain.PROMPT)
            swaps = drain._swaps(tokens.shape[1] - 1)
            reference = drain.paper_c_scores(drain.paper_c_attention(model, tokens, swaps),
                                             swaps)[0].double()
            kwargs = dict(exclude_bos=False, exclusion=False)
            exact = swap_scores(model, tokens, **kwargs)
            rerun = swap_scores(model, tokens, method="rerun", **kwargs)
            free = swap_scores(model, tokens, cosine="scale_free", **kwargs)
            head_rerun = max(_max_diff(exact.pos, rerun.pos), _max_diff(exact.sym, rerun.sym))
            head_ref = max(_max_diff(exact.pos, reference[..., 0]),
                           _max_diff(exact.sym, reference[..., 1]))
            freq_rerun = max(_max_diff(exact.pos_freq, rerun.pos_freq),
                             _max_diff(exact.sym_freq, rerun.sym_freq))
            freq_ref = 0.0
            for layer in exact.layers:
                attention = drain._paper_c_freq_attention(model, tokens, swaps, layer)
                ref = drain.paper_c_scores(attention, swaps)[0, 0].view(*exact.pos_freq.shape[1:], 2)
                freq_ref = max(freq_ref, _max_diff(exact.pos_freq[layer], ref[..., 0]),
                               _max_diff(exact.sym_freq[layer], ref[..., 1]))
            off = max(_max_diff(free.pos, rerun.pos), _max_diff(free.sym, rerun.sym),
                      _max_diff(free.pos_freq, rerun.pos_freq), _max_diff(free.sym_freq, rerun.sym_freq))
            print(f"{str(dtype)[6:]:8} {label:13} {head_rerun:>20.1e} {head_ref:>15.1e} "
                  f"{freq_rerun:>20.1e} {freq_ref:>15.1e} {off:>19.2f}")


if __name__ == "__main__":
    main()
