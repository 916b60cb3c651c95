"""Half precision: models in bfloat16 / float16 are read, checked, decomposed, scored and
intervened on, and land within stated bounds of the same model in float32.

The bounds are those of docs/families.md ("Half precision"); the figures they bound are
printed by ``benchmarks/bench_precision.py``. Each compares one checkpoint loaded in two
dtypes (the half model's weights are the float32 ones rounded), with
``tests/precision_agreement.agreement``.
"""

from __future__ import annotations

import pytest
import torch

import lens_possym as lp
from lens_possym._precision import compute_dtype, model_tolerance, table_tolerance
from lens_possym.errors import RopeGeometryError

from .precision_agreement import agreement

# max over the tiny families of each figure (docs/families.md, "Half precision"):
# terms, change of the logits under zero/unrotate: max |Δ| / max |reference|;
# scores: |Δ s_POS|, |Δ s_SYM| per head (median and max); r: correlation of the changes.
TINY_BOUNDS = {
    torch.bfloat16: dict(terms=0.05, median=2e-3, max=0.1, change=0.15, r=0.99),
    torch.float16: dict(terms=5e-3, median=5e-4, max=0.02, change=0.02, r=0.999),
}
FAMILIES = lp.models.TINY_FAMILIES


@pytest.fixture(scope="module")
def float32_models():
    out = {}
    for family in FAMILIES:
        model = lp.tiny_model(family)
        out[family] = model, lp.random_token_prompts(model, n_prompts=4, n_tokens=24, seed=0)
    return out


@pytest.mark.parametrize("dtype", list(TINY_BOUNDS), ids=str)
@pytest.mark.parametrize("family", FAMILIES)
def test_half_precision_agrees_with_float32(family, dtype, float32_models):
    ref, tokens = float32_models[family]
    bound = TINY_BOUNDS[dtype]
    got = agreement(lp.tiny_model(family, dtype=dtype), ref, tokens)
    assert got["terms"] <= bound["terms"]
    assert max(got["pos_median"], got["sym_median"]) <= bound["median"]
    assert max(got["pos_max"], got["sym_max"]) <= bound["max"]
    assert max(got["zero"], got["unrotate"]) <= bound["change"]
    assert min(got["zero_corr"], got["unrotate_corr"]) >= bound["r"]
    # the half model's own decomposition check ran at its dtype's tolerance
    assert got["terms_check"] > 0


@pytest.mark.parametrize("family", FAMILIES)
def test_float32_against_itself_is_exact(family, float32_models):
    ref, tokens = float32_models[family]
    got = agreement(lp.tiny_model(family), ref, tokens)
    for key in ("terms", "pos_max", "sym_max", "logits", "zero", "unrotate"):
        assert got[key] == 0.0, key


def test_float64_model_agrees_with_float32(float32_models):
    ref, tokens = float32_models["llama"]
    got = agreement(lp.tiny_model("llama", dtype=torch.float64), ref, tokens)
    assert got["terms"] <= 1e-5 and max(got["pos_max"], got["sym_max"]) <= 1e-5
    assert max(got["zero"], got["unrotate"]) <= 1e-4


@pytest.mark.slow
def test_smollm2_in_bfloat16(smollm2):
    low = lp.load_model("smollm2-135m", dtype=torch.bfloat16)
    tokens = lp.binding_task(smollm2, n_prompts=4, n_pairs=4).tokens
    got = agreement(low, smollm2, tokens)
    assert got["terms"] <= 0.1
    assert max(got["pos_median"], got["sym_median"]) <= 1e-3
    assert got["heads_within_0.01"] >= 0.85
    assert min(got["zero_corr"], got["unrotate_corr"]) >= 0.9


# ---- the tolerances themselves -------------------------------------------------------


def test_tolerances_follow_the_dtype():
    assert model_tolerance(torch.float64) == model_tolerance(torch.float32) == 1e-4
    assert model_tolerance(torch.bfloat16) == pytest.approx(3 * 2.0 ** -7)
    assert model_tolerance(torch.float16) == pytest.approx(3 * 2.0 ** -10)
    assert model_tolerance(torch.float32, torch.bfloat16) == model_tolerance(torch.bfloat16)
    assert table_tolerance(torch.float32) == 1e-5
    assert table_tolerance(torch.bfloat16, 2.0) == pytest.approx(2 * 2.0 ** -7)
    assert compute_dtype(torch.bfloat16) == compute_dtype(torch.float16) == torch.float32
    assert compute_dtype(torch.float64) == torch.float64


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
def test_a_wrong_table_is_still_refused_in_half_precision(dtype):
    """The looser half-precision tolerance still catches tables that are really off: a
    shift of 4 units of the dtype's eps in layer 0's cos table is refused."""
    model = lp.tiny_model("llama", dtype=dtype)
    lp.rope_specs(model)  # reads fine as it is
    shift = 4 * torch.finfo(dtype).eps

    def off(cos, hook):
        return cos + shift

    with model.hooks(fwd_hooks=[("blocks.0.attn.hook_cos", off)]):
        with pytest.raises(RopeGeometryError, match="rotation tables"):
            lp.rope_specs(model, refresh=True)


# ---- other positional schemes (absolute, ALiBi, MLA), scored by scores/sites.py ----------

SCHEME_BOUNDS = {torch.bfloat16: 0.05, torch.float16: 0.005}


@pytest.mark.parametrize("dtype", list(SCHEME_BOUNDS), ids=str)
def test_other_schemes_in_half_precision(dtype):
    """Their check against the model's pattern is at the dtype's rounding too, and the
    scores stay within the bound of the float32 model's (measured: 0.0061 / 0.00093)."""
    from lens_possym.models.tiny_schemes import SCHEME_FAMILIES, tiny_scheme_model

    prompt = "Alice likes red . Bob likes blue . What color does Bob like ?"
    for family in SCHEME_FAMILIES:
        ref = lp.swap_scores(tiny_scheme_model(family), prompt)
        low = lp.swap_scores(tiny_scheme_model(family, dtype=dtype), prompt)
        worst = torch.maximum((low.pos - ref.pos).abs(), (low.sym - ref.sym).abs())
        assert float(worst.max()) <= SCHEME_BOUNDS[dtype], family
