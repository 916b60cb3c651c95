"""How far a model loaded in half precision is from the same model in float32.

Shared by ``tests/test_precision.py`` (which asserts the bounds stated in
docs/families.md) and ``benchmarks/bench_precision.py`` (which prints the figures).
Both models are the same checkpoint loaded in two dtypes (the half model's weights are
the float32 weights rounded), so the figures are what a researcher gets by loading in
bf16 instead of float32: the model's own rounding and lens-possym's, together.
"""

from __future__ import annotations

import torch

import lens_possym as lp

__all__ = ["agreement", "ABLATIONS"]

#: the interventions compared, on every head of layer 0: the slowest third of the
#: frequency ids removed from the query (``zero``), the fastest third made position-free
#: (``unrotate``, queries and keys; the slow ids barely rotate over a short prompt, so
#: unrotating them changes the logits by about the half model's own rounding).
ABLATIONS = {"zero": {"0.*": "low"}, "unrotate": {"0.*": "high"}}


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    """max |a − b| over max |b| (b the float32 reference), over finite entries."""
    a, b = a.double(), b.double()
    keep = a.isfinite() & b.isfinite()
    scale = float(b[keep].abs().max()) if keep.any() else 0.0
    return float((a[keep] - b[keep]).abs().max()) / max(scale, 1e-30) if keep.any() else 0.0


def _diff(a: torch.Tensor | None, b: torch.Tensor | None) -> torch.Tensor:
    keep = a.isfinite() & b.isfinite()
    return (a[keep].double() - b[keep].double()).abs()


def agreement(low, ref, tokens: torch.Tensor, *, tau: float = 1e-4) -> dict[str, float]:
    """The agreement of ``low`` (a half-precision model) with ``ref`` (float32) on ``tokens``.

    Keys:

    * ``terms``: frequency_logits of every layer (last query), max |Δ| / max |terms|;
    * ``terms_check``: the half model's own decomposition check (max |Σ terms − scores|);
    * ``pos_max``/``sym_max``, ``pos_median``/``sym_median``: |Δ s_POS|, |Δ s_SYM| per head;
    * ``pos_freq_median``/``sym_freq_median``: the same per head and frequency (median);
    * ``heads_within_0.01``: the share of heads whose s_POS and s_SYM both moved ≤ 0.01;
    * ``logits``: the last position's logits, max |Δ| / max |logits| (the model's own
      disagreement, for scale);
    * ``zero``/``unrotate``: ablate_frequencies(ABLATIONS[mode]): the change in the last
      position's logits (ablated − clean), max |Δ| / max |change|; ``zero_corr`` /
      ``unrotate_corr``: the Pearson correlation of the two changes over the vocabulary.
    """
    out: dict[str, float] = {}
    low_fl = lp.frequency_logits_all(low, tokens)
    ref_fl = lp.frequency_logits_all(ref, tokens)
    out["terms"] = max(_rel(low_fl[layer].terms, ref_fl[layer].terms) for layer in ref_fl)
    out["terms_check"] = max(fl.max_abs_error for fl in low_fl.values())
    s_low = lp.swap_scores(low, tokens, tau=tau)
    s_ref = lp.swap_scores(ref, tokens, tau=tau)
    worst = torch.maximum((s_low.pos - s_ref.pos).abs(), (s_low.sym - s_ref.sym).abs())
    out["heads_within_0.01"] = float((worst[worst.isfinite()] <= 0.01).double().mean())
    for name in ("pos", "sym"):
        d = _diff(getattr(s_low, name), getattr(s_ref, name))
        out[f"{name}_max"], out[f"{name}_median"] = float(d.max()), float(d.median())
        out[f"{name}_freq_median"] = float(
            _diff(getattr(s_low, f"{name}_freq"), getattr(s_ref, f"{name}_freq")).median())
    last = tokens
    with torch.no_grad():
        clean = {m: m(last)[:, -1].double() for m in (low, ref)}
        out["logits"] = _rel(clean[low], clean[ref])
        for mode, selection in ABLATIONS.items():
            effect = {}
            for m in (low, ref):
                with lp.ablate_frequencies(m, selection, mode=mode):
                    effect[m] = m(last)[:, -1].double() - clean[m]
            out[mode] = _rel(effect[low], effect[ref])
            out[f"{mode}_corr"] = float(torch.corrcoef(
                torch.stack([effect[low].flatten(), effect[ref].flatten()]))[0, 1])
    return out
