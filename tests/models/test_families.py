"""The family matrix: every tiny RoPE family, in float64, read and checked end to end.

For each family of ``lens_possym.models.tiny`` (a tiny random model booted through the
bridge) on a prompt longer than any window (and, for input-dependent RoPE, on both sides
of the length where the angles change):

* the per-frequency terms add up to the model's own pre-softmax scores, every layer, head,
  query row and visible key;
* the model hides exactly the keys the geometry's mask hides (windows are respected), and
  a softcap is applied where the family has one;
* the closed-form swap scores equal the re-run (token and block swaps, per head and per
  frequency).

``benchmarks/family_matrix.py`` prints the same checks as the table in docs/families.md.
"""

from __future__ import annotations

import pytest
import torch

import lens_possym as lp
from lens_possym.errors import UnsupportedModelError
from lens_possym.models.tiny import ALL_TINY_FAMILIES

pytestmark = pytest.mark.usefixtures("one_torch_thread")

# Families where part of the model's own arithmetic is float32 even in a float64 model,
# so "terms = model" holds to float32 rounding: the rotation (ERNIE 4.5 rotates entirely in
# float32), or the softmax that the pattern check goes through (GPT-J and CodeGen have no
# pre-softmax hook).
FLOAT32_INSIDE = {"ernie4.5", "gptj", "codegen"}
LENGTHS = {"phi3-longrope": (12, 20), "llama-dynamic": (12, 20)}  # both sides of 16
TERMS_TOL, FLOAT32_TOL = 1e-12, 1e-6
# Per head, the re-run reads the model's softmax, which HF computes in float32.
HEAD_TOL, FREQ_TOL = 1e-6, 1e-12


def _tokens(n: int) -> torch.Tensor:
    tokens = (torch.arange(n) * 7 + 5) % len(lp.models.tiny.TINY_VOCAB)
    tokens[0] = 1  # <bos>
    return tokens[None]


def _max_diff(a: lp.PosSymScores, b: lp.PosSymScores, names: tuple[str, ...]) -> float:
    worst = 0.0
    for name in names:
        diff = (getattr(a, name) - getattr(b, name)).abs()
        diff = diff[~diff.isnan()]  # layers not scored in this run
        worst = max(worst, float(diff.max()) if diff.numel() else 0.0)
    return worst


@pytest.mark.parametrize("family", ALL_TINY_FAMILIES)
def test_family(family):
    model = lp.tiny_model(family, dtype=torch.float64)
    specs = lp.rope_specs(model)
    for n in LENGTHS.get(family, (20,)):
        tokens = _tokens(n)
        logits = lp.frequency_logits_all(model, tokens, query_positions=None)
        tol = FLOAT32_TOL if family in FLOAT32_INSIDE else TERMS_TOL
        for layer, fl in logits.items():
            assert fl.max_abs_error <= tol, (family, n, layer, fl.max_abs_error)
            if fl.checked_against != "scores":
                continue
            hidden = fl.model_scores <= torch.finfo(fl.model_scores.dtype).min / 2
            assert torch.equal(hidden, (~fl.mask).expand_as(hidden)), (family, layer)
            if fl.spec.window and fl.spec.window < n:
                assert (~fl.mask).any(), "a prompt longer than the window hides keys"
            if fl.spec.softcap:  # the cap is applied after the sum, and it matters here
                visible = fl.mask.expand_as(hidden)
                uncapped = (fl.scores() - fl.model_scores)[visible].abs().max()
                assert uncapped > 1e3 * tol, (family, layer)

        windowed = [s.layer for s in specs if s.window and s.window < n]
        open_layers = [s.layer for s in specs if s.layer not in windowed]
        runs = [dict(swap="token", per_frequency=False)]
        if windowed:  # a window leaves no room for blocks, but only a few token pairs
            runs.append(dict(swap="token", per_frequency=True, layers=windowed))
        if open_layers:
            runs.append(dict(swap="block", per_frequency=True, layers=open_layers))
        if specs[0].extra.get("attention_sinks"):  # see test_gpt_oss_sinks
            continue
        for run in runs:
            common = dict(n_blocks=4, tau=1e-2, exclusion=False, **run)
            exact = lp.swap_scores(model, tokens, method="exact", **common)
            rerun = lp.swap_scores(model, tokens, method="rerun", **common)
            if run["per_frequency"]:
                assert _max_diff(exact, rerun, ("pos_freq", "sym_freq")) <= FREQ_TOL, (family, run)
            assert _max_diff(exact, rerun, ("pos", "sym")) <= HEAD_TOL, (family, run)


def test_gpt_oss_sinks_are_flagged_and_the_closed_form_refuses_them():
    """GPT-OSS's sink logits join the softmax: its scores still split per frequency, but the
    closed-form swap scores have no term for the sinks, so they refuse; the re-run works."""
    model = lp.tiny_model("gpt-oss", dtype=torch.float64)
    specs = lp.rope_specs(model)
    assert all(spec.extra.get("attention_sinks") for spec in specs)
    assert not lp.rope_specs(lp.tiny_model("llama"))[0].extra.get("attention_sinks")
    tokens = model.to_tokens("Alice likes red . Bob likes blue . What color")
    with pytest.raises(UnsupportedModelError, match="attention sinks.*method='rerun'"):
        lp.swap_scores(model, tokens, layers=[0], per_frequency=False)
    rerun = lp.swap_scores(model, tokens, layers=[0], method="rerun", per_frequency=False)
    assert rerun.pos[0].isfinite().all()


@pytest.mark.parametrize("family", ["olmo2", "phi3-longrope"])
def test_interventions_on_new_layouts_and_angles(family):
    """Zero ablation edits OLMo2's flat q/k-norm layout; unrotate ablation uses LongRoPE's
    long angles on a long input (the ablated terms then carry no rotation at all)."""
    model = lp.tiny_model(family, dtype=torch.float64)
    tokens = _tokens(20)
    with lp.ablate_frequencies(model, {"1.0": "0:2", "1.3": [1]}, "zero"):
        fl = lp.frequency_logits(model, tokens, 1, query_positions=None)
    assert torch.all(fl.terms[:, 0, ..., :2] == 0) and torch.all(fl.terms[:, 3, ..., 1] == 0)
    assert fl.terms[:, 1].abs().sum() > 0  # other heads untouched
    # unrotate pre-applies R(-p·θ): the model's own rotation then cancels, leaving the
    # content term scale·s²·<q_f, k_f> at every offset (s: the tables' attention_scaling),
    # iff the angles are the ones the model uses on this input.
    clean = lp.capture_attention_inputs(model, tokens, 1, query_positions=None)[1]
    q, k = clean.q[:, :, 0], clean.k_for_heads([0])[:, :, 0]
    # (both heads of KV group 0, so the keys themselves are edited, not recomputed)
    with lp.ablate_frequencies(model, {"1.0": "0:2", "1.1": "0:2"}, "unrotate"):
        fl = lp.frequency_logits(model, tokens, 1, heads=0, query_positions=None)
    for f in (0, 1):
        dims = clean.spec.dims_of(f)
        content = torch.einsum("bqd,bkd->bqk", q[..., dims], k[..., dims]) * clean.spec.scale
        content = content * clean.spec.attention_scaling**2  # LongRoPE's cos/sin factor stays
        assert torch.allclose(fl.terms[:, 0, ..., f], content, atol=1e-6), (family, f)
