"""The Toeplitz split (lens_possym.toeplitz): each scheme names its split, and every split
adds up to the model's logits.

Tiny random float64 models of every supported non-RoPE family (absolute: GPT-2, OPT,
GPT-Neo; ALiBi: Bloom, MPT; MLA: DeepSeek-V2/V3, built once per session in conftest),
plus a tiny RoPE model for the Hadamard form.
"""

from __future__ import annotations

import pytest
import torch

import lens_possym as lp
from lens_possym.capture import capture_attention_inputs
from lens_possym.decompose import decompose_inputs
from lens_possym.errors import InvalidSelectionError, UnsupportedModelError
from lens_possym.models.tiny_schemes import SCHEME_FAMILIES
from lens_possym.positions import MLA, Absolute, AdditiveBias, HeadwiseRope, NoPE, Rope
from lens_possym.resolved import resolve
from lens_possym.toeplitz import LayerSplit, rope_hadamard_terms, toeplitz_terms

PROMPT = "Alice likes red . Bob likes blue and Carol"
ABSOLUTE = ("gpt2", "opt", "gpt_neo")
MLA_MODELS = ("deepseek_v2", "deepseek_v3")


@pytest.fixture(scope="module")
def models(scheme_models):
    return scheme_models


@pytest.mark.parametrize("family", SCHEME_FAMILIES)
def test_toeplitz_terms_add_up_to_the_model(models, family):
    terms = toeplitz_terms(models[family], PROMPT, 0)  # raises if the sum misses the model
    assert terms.max_abs_error < 1e-6
    expected = ({"cc", "cp", "pc", "pp", "bias"} if family in ABSOLUTE
                else {"f0", "f1", "f2", "f3", "content"} if family in MLA_MODELS
                else {"content", "bias"})
    assert set(terms.terms) == expected
    # the random layer-norm and projection biases make every term count
    assert all(float(m.min()) > 0 for m in terms.magnitudes().values())


def test_toeplitz_refuses_deeper_absolute_layers(models):
    with pytest.raises(InvalidSelectionError, match="only at layer 0"):
        toeplitz_terms(models["gpt2"], PROMPT, 1)


def test_rope_hadamard_form_is_the_frequency_decomposition():
    model = lp.tiny_model("neox", dtype=torch.float64)   # partial rotary: a tail id too
    inputs = capture_attention_inputs(model, PROMPT, 1, query_positions=None)[1]
    heads = list(range(inputs.spec.n_heads))
    hadamard = rope_hadamard_terms(inputs, heads)
    relative = decompose_inputs(inputs, heads).terms           # [b, h, q, k, f]
    mask = inputs.mask()
    assert torch.allclose(hadamard[:, :, mask], relative[:, :, mask].to(hadamard), atol=1e-6)
    terms = toeplitz_terms(model, PROMPT, 1)
    assert len(terms.terms) == inputs.spec.n_freqs and terms.max_abs_error < 1e-5


# ---- the figure of term magnitudes --------------------------------------------------------

def test_term_magnitudes_and_figure(models):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from lens_possym import viz
    from lens_possym.positions import toeplitz_magnitudes  # served there too

    absolute = toeplitz_magnitudes(models["gpt2"], PROMPT)
    assert absolute.names == ["cc", "cp", "pc", "pp", "bias"]
    assert absolute.values[0].isfinite().all() and absolute.values[1].isnan().all()
    alibi = toeplitz_magnitudes(models["bloom"], PROMPT)
    assert alibi.values.isfinite().all()
    # ALiBi's bias does not depend on content: the same at every layer
    assert torch.allclose(alibi.values[0, :, 1], alibi.values[1, :, 1])
    axes = viz.plot_toeplitz_terms(absolute)
    assert [ax.get_title() for ax in axes] == absolute.names
    plt.close("all")




# ---- each scheme names its split ------------------------------------------------------------

class _Recording:
    """A split that records which form a scheme asks for."""

    def __getattr__(self, form):
        return lambda scheme: (form, scheme)


@pytest.mark.parametrize("scheme, form", [
    (Rope(spec=None), "rope"), (MLA(inv_freq=torch.ones(2)), "mla"),
    (Absolute(), "absolute"), (AdditiveBias.alibi(torch.ones(2)), "additive"),
    (NoPE(), "additive"), (HeadwiseRope(inv_freq=torch.ones(2)), "unsupported")])
def test_each_scheme_names_its_split(scheme, form):
    assert scheme.split_logits(_Recording()) == (form, scheme)


def test_a_scheme_with_no_split_is_refused_by_name(models):
    split = LayerSplit(resolve(models["bloom"]), torch.zeros(1, 4, dtype=torch.long),
                       lp.positions.schemes(models["bloom"])[0], [0])
    with pytest.raises(UnsupportedModelError, match="headwise-rope"):
        HeadwiseRope(inv_freq=torch.ones(2)).split_logits(split)
