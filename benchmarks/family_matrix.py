"""The family table: every tiny RoPE family, read and checked in float64.

    PYTHONPATH=$PWD python benchmarks/family_matrix.py                  # print the table
    PYTHONPATH=$PWD python benchmarks/family_matrix.py --write-docs     # and update docs/families.md
    PYTHONPATH=$PWD python benchmarks/family_matrix.py --family phi3 --family olmo2

For each family of ``lens_possym.models.tiny`` (a tiny random model, built offline and
booted through the TransformerBridge in float64) it reports:

* whether lens-possym supports it, or the error the model gets (the bridge's, if it cannot
  boot the model; lens-possym's otherwise);
* ``max |terms - model|``: over every layer, head, query row and visible key of a prompt
  longer than any window (and, for input-dependent RoPE, on both sides of the length where
  the angles change), the largest difference between the softcapped sum of the
  per-frequency terms and the model's own pre-softmax scores (the pattern for GPT-J and
  CodeGen, which have no pre-softmax hook);
* ``max |exact - rerun|``: the largest difference between the closed-form swap scores
  (``s_POS`` and ``s_SYM``) and the re-run reference on the last query of the same prompt,
  every layer, ``tau = 1e-2``: per head with token and block swaps, and per frequency
  with block swaps (token swaps on windowed layers, where the window leaves no room for
  blocks but only a few token pairs). Per head the re-run goes through the model's own
  softmax, which Hugging Face computes in float32 even in a float64 model, so ~1e-7 is
  the floor there; per frequency both sides are float64.
"""

from __future__ import annotations

import argparse
import math
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import torch

import lens_possym as lp
from lens_possym.errors import LensPossymError
from lens_possym.models.tiny import ALL_TINY_FAMILIES, REFUSED_FAMILIES, describe_family

DOC = Path(__file__).resolve().parent.parent / "docs" / "families.md"
BEGIN, END = "<!-- family-table:begin -->", "<!-- family-table:end -->"
# 20 tokens: past every window (4), LongRoPE's original length and dynamic NTK's context (16)
LENGTHS = {"phi3-longrope": (12, 20), "llama-dynamic": (12, 20)}
DEFAULT_LENGTHS = (20,)


@dataclass
class Row:
    family: str
    attention: str
    status: str
    terms_error: float = float("nan")
    checked_against: str = ""
    rerun_error: float = float("nan")
    rerun_error_freq: float = float("nan")
    seconds: float = 0.0


def prompt_tokens(model, n_tokens: int) -> torch.Tensor:
    """A fixed prompt of ``n_tokens`` word tokens after BOS (no repeats within 20)."""
    vocab = int(model.cfg.d_vocab)
    tokens = (torch.arange(n_tokens) * 7 + 5) % vocab
    tokens[0] = 1  # <bos>
    return tokens[None]


def _short(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
    return text if len(text) <= 400 else text[:397] + "..."


def max_score_difference(a: lp.PosSymScores, b: lp.PosSymScores,
                         names: tuple[str, ...] = ("pos", "sym")) -> float:
    """Largest |a - b| over the named scores (nan entries, i.e. layers not scored, skipped)."""
    worst = 0.0
    for name in names:
        x, y = getattr(a, name), getattr(b, name)
        if x is None or y is None:
            continue
        diff = (x - y).abs()
        diff = diff[~diff.isnan()]
        if diff.numel():
            worst = max(worst, float(diff.max()))
    return worst


def family_row(family: str, lengths: tuple[int, ...] | None = None) -> Row:
    start = time.perf_counter()
    try:
        model = lp.tiny_model(family, dtype=torch.float64)
    except Exception as exc:  # the bridge (or transformers) cannot build it: report why
        return Row(family, "", f"bridge cannot boot it: {_short(exc)}",
                   seconds=time.perf_counter() - start)
    attn = getattr(model.blocks[0], "attn", None)
    attention = type(attn.original_component).__name__ if attn is not None else ""
    try:
        lp.rope_specs(model)
    except LensPossymError as exc:
        return Row(family, attention, f"refused: {_short(exc)}", seconds=time.perf_counter() - start)
    except Exception as exc:  # the bridge fails on a forward pass
        return Row(family, attention, f"bridge fails on a forward pass: {_short(exc)}",
                   seconds=time.perf_counter() - start)
    terms, rerun, rerun_freq, against = 0.0, 0.0, 0.0, set()
    for n_tokens in lengths or LENGTHS.get(family, DEFAULT_LENGTHS):
        tokens = prompt_tokens(model, n_tokens)
        logits = lp.frequency_logits_all(model, tokens, query_positions=None, check=False)
        terms = max(terms, max(fl.max_abs_error for fl in logits.values()))
        against |= {fl.checked_against for fl in logits.values()}
        rerun_head, rerun_f = exact_vs_rerun(model, tokens)
        # nan (the closed form refuses the model) stays nan: max() would drop it
        rerun = rerun_head if math.isnan(rerun_head) else max(rerun, rerun_head)
        rerun_freq = rerun_f if math.isnan(rerun_f) else max(rerun_freq, rerun_f)
    return Row(family, attention, "supported", terms, "/".join(sorted(against)), rerun,
               rerun_freq, time.perf_counter() - start)


def exact_vs_rerun(model, tokens: torch.Tensor) -> tuple[float, float]:
    """``(per head, per frequency)`` largest |exact - rerun| (see the module docstring)."""
    specs = lp.rope_specs(model)
    n_tokens = tokens.shape[1]
    windowed = [s.layer for s in specs if s.window and s.window < n_tokens]
    open_layers = [s.layer for s in specs if s.layer not in windowed]
    runs = [dict(swap="token", per_frequency=False), dict(swap="token", per_frequency=True,
                                                          layers=windowed)]
    if open_layers:
        runs += [dict(swap="block", per_frequency=True, layers=open_layers)]
    head, freq = 0.0, 0.0
    if specs[0].extra.get("attention_sinks"):  # the closed form refuses sinks: nothing to compare
        return float("nan"), float("nan")
    for run in runs:
        if run.get("layers") == []:
            continue
        common = dict(n_blocks=4, tau=1e-2, exclusion=False, **run)
        exact = lp.swap_scores(model, tokens, method="exact", **common)
        again = lp.swap_scores(model, tokens, method="rerun", **common)
        head = max(head, max_score_difference(exact, again))
        if run["per_frequency"]:
            freq = max(freq, max_score_difference(exact, again, ("pos_freq", "sym_freq")))
    return head, freq


def table(rows: list[Row]) -> str:
    lines = ["| family | attention class | geometry | status | max \\|terms − model\\| | "
             "max \\|exact − rerun\\| per head | per frequency |", "|---|---|---|---|---|---|---|"]
    for row in rows:
        ok = row.status == "supported"
        terms = f"{row.terms_error:.1e}" + (f" ({row.checked_against})"
                                             if row.checked_against not in ("", "scores") else "")
        status = row.status.replace("|", "\\|")
        refused = "refused (sinks); re-run only"
        head = refused if math.isnan(row.rerun_error) else f"{row.rerun_error:.1e}"
        freq = refused if math.isnan(row.rerun_error_freq) else f"{row.rerun_error_freq:.1e}"
        lines.append(
            f"| `{row.family}` | {row.attention or '—'} | {describe_family(row.family)} | "
            f"{status} | {terms if ok else '—'} | {head if ok else '—'} | {freq if ok else '—'} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--family", action="append", help="only these families (repeatable)")
    parser.add_argument("--write-docs", action="store_true", help=f"update {DOC.name}")
    args = parser.parse_args()
    families = args.family or list(ALL_TINY_FAMILIES) + list(REFUSED_FAMILIES)
    torch.set_num_threads(1)  # tiny models: threads only add overhead
    rows = []
    for family in families:
        row = family_row(family)
        rows.append(row)
        print(f"{family:16s} {row.status[:60]:60s} terms {row.terms_error:.1e} "
              f"rerun {row.rerun_error:.1e} / {row.rerun_error_freq:.1e} ({row.seconds:.1f} s)",
              file=sys.stderr)
    text = table(rows)
    print(text)
    if args.write_docs:
        doc = DOC.read_text()
        block = f"{BEGIN}\n{text}\n{END}"
        DOC.write_text(re.sub(re.escape(BEGIN) + ".*?" + re.escape(END), lambda _: block, doc,
                              flags=re.S))
        print(f"wrote {DOC}", file=sys.stderr)


if __name__ == "__main__":
    main()
