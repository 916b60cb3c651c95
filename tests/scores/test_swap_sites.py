"""One meaning per swap site (issue 39): for every tiny family, site and layer, the exact
method and the re-run compute the same quantity for the same config (to 1e-6 in float64),
or the exact method refuses the combination and says why.

Before: ``swap_site="content"`` past layer 0 of a RoPE model was the layer site for the
exact method and a swap of ``hook_embed`` rows re-running every earlier layer for the
re-run (tiny llama layer 1: 0.596 apart). For a scheme where position enters inside the
head the layer input is all content, so the content site *is* the layer site
(``scores.sources.effective_site``); only an absolute-PE layer swaps token embeddings
apart from position embeddings.
"""

from __future__ import annotations

import pytest
import torch

import lens_possym as lp
from lens_possym.errors import InvalidSelectionError
from lens_possym.models.tiny_schemes import tiny_scheme_model
from lens_possym.scores import swap_scores
from lens_possym.scores.sources import effective_site

PROMPT = "Alice likes red . Bob likes blue . Carol"
SITES = ("layer", "content", "input")
SCHEME_FAMILIES = ("gpt2", "opt", "gpt_neo", "bloom", "mpt", "falcon", "deepseek_v2")
FAMILIES = tuple(lp.models.TINY_FAMILIES) + SCHEME_FAMILIES
TOL = 1e-6


def _model(family):
    if family in SCHEME_FAMILIES:
        return tiny_scheme_model(family, dtype=torch.float64)
    return lp.tiny_model(family, dtype=torch.float64)


def _scores(model, tokens, method, site, layer):
    return swap_scores(model, tokens, method=method, swap_site=site, layers=[layer],
                       per_frequency=False, exclusion=False, tau=1e-2, exclude_bos=False)


@pytest.mark.parametrize("family", FAMILIES)
def test_exact_equals_rerun_at_every_site_and_layer_or_refuses(family):
    """And for a scheme inside the head, both methods' content site past layer 0 is the
    layer site (the same numbers), not the input site, which swaps before every earlier
    layer (the test can fail: llama and bloom's input site is > 1e-3 away)."""
    model = _model(family)
    tokens = model.to_tokens(PROMPT)
    outcomes, found = {}, {}
    for site in SITES:
        for layer in (0, 1):
            rerun = _scores(model, tokens, "rerun", site, layer)
            found["rerun", site, layer] = rerun
            assert rerun.pos[layer].isfinite().all()
            assert rerun.config.swap_site == site
            try:
                exact = _scores(model, tokens, "exact", site, layer)
            except InvalidSelectionError as exc:
                assert "method='rerun'" in str(exc)
                outcomes[site, layer] = "refused"
                continue
            found["exact", site, layer] = exact
            diff = max(float((exact.pos - rerun.pos)[layer].abs().max()),
                       float((exact.sym - rerun.sym)[layer].abs().max()))
            assert diff <= TOL, (family, site, layer, diff)
            outcomes[site, layer] = "equal"
    # every site has a closed form at layer 0; past it, the input site never does
    assert all(outcomes[site, 0] == "equal" for site in SITES), outcomes
    assert outcomes["input", 1] == "refused" and outcomes["layer", 1] == "equal"
    absolute = family in ("gpt2", "opt", "gpt_neo")
    assert outcomes["content", 1] == ("refused" if absolute else "equal"), outcomes
    if absolute:
        return
    for method in ("exact", "rerun"):
        content, layer = found[method, "content", 1], found[method, "layer", 1]
        assert torch.allclose(content.pos[1], layer.pos[1], atol=1e-12, rtol=0), method
    if family in ("llama", "bloom"):
        inputs = found["rerun", "input", 1]
        assert float((inputs.pos - found["rerun", "layer", 1].pos)[1].abs().max()) > 1e-3


def test_effective_site():
    from lens_possym.positions.absolute import Absolute
    from lens_possym.positions.base import PositionalScheme

    assert effective_site(None, "content") == "layer"
    assert effective_site(None, "input") == "input"
    assert effective_site(object.__new__(Absolute), "content") == "content"
    assert PositionalScheme  # imported for the annotation's sake
