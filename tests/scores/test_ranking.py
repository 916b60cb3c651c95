"""Rankings with meaning: saturated heads (scores at 1 to within float noise) are ordered
by the logits' positional share, so "the k most positional heads" is the same set
whichever of the two rankings that ask for it ("pos", or "sym-pos" ascending) is used."""

from __future__ import annotations

import pytest
import torch

import lens_possym as lp
from lens_possym.scores import PosSymScores


def _saturated_scores(seed: int = 0) -> PosSymScores:
    """12 positional and 12 symbolic heads saturated up to noise below 1e-3 (as at
    tau = 1e-4), 24 heads in between, and a positional share that follows the kind of
    head."""
    gen = torch.Generator().manual_seed(seed)
    n_layers, n_heads = 6, 8
    noise = lambda: torch.rand(n_layers, n_heads, generator=gen, dtype=torch.float64)  # noqa
    kind = torch.randperm(n_layers * n_heads, generator=gen).reshape(n_layers, n_heads) % 4
    pos = torch.where(kind == 0, 1 - 1e-4 * noise(), torch.where(kind == 1, 1e-4 * noise(),
                                                                  0.2 + 0.6 * noise()))
    sym = torch.where(kind == 0, 3e-3 * noise(), torch.where(kind == 1, 1 - 1e-4 * noise(),
                                                              0.2 + 0.6 * noise()))
    share = torch.where(kind == 0, 0.5 + 0.5 * noise(), torch.where(
        kind == 1, 0.5 * noise(), noise()))
    return PosSymScores(pos=pos, sym=sym, positional_share=share,
                        angles=torch.zeros(n_layers, 1),
                        layers=list(range(n_layers)))


@pytest.mark.parametrize("seed", range(5))
def test_top_k_of_saturated_heads_is_the_same_under_both_rankings(seed):
    scores = _saturated_scores(seed)
    for k in (3, 5, 8, 12):
        positional = scores.ranked_heads("pos", k)
        assert positional == scores.ranked_heads("sym-pos", k, descending=False)
        assert scores.ranked_heads("sym", k) == scores.ranked_heads("sym-pos", k)
        # the order is by positional share among them: positional heads higher first
        share = [float(scores.positional_share[lh]) for lh in positional]
        assert share == sorted(share, reverse=True)
    # the raw scores rank by noise: the two rankings disagree
    disagree = [set(scores.ranked_heads("pos", k, decimals=None))
                != set(scores.ranked_heads("sym-pos", k, descending=False, decimals=None))
                for k in (3, 5, 8)]
    assert any(disagree)


def test_without_positional_share_ties_go_to_the_other_score():
    scores = _saturated_scores()
    scores.positional_share = None
    top = scores.ranked_heads("pos", 5)
    sym = [float(scores.sym[lh]) for lh in top]
    assert sym == sorted(sym)


@pytest.mark.slow
def test_smollm2_top_heads_are_stable_and_distinct(smollm2):
    """smollm2-135m on 16 binding prompts of 8 pairs (the profile's defaults): 17 heads
    have s_POS >= 0.999 and 140 s_SYM >= 0.999. The top 8 (the report's tables) agree
    under both rankings and differ in the positional share that orders them."""
    from lens_possym.report.builder import format_value
    from lens_possym.report.profile import heads_rows

    task = lp.binding_task(smollm2, n_prompts=16, n_pairs=8)
    scores = lp.swap_scores(smollm2, task.tokens)
    assert int((scores.pos >= 0.999).sum()) >= 10 and int((scores.sym >= 0.999).sum()) >= 100
    for k in (3, 5, 8):
        assert scores.ranked_heads("pos", k) == scores.ranked_heads("sym-pos", k,
                                                                     descending=False)
        assert scores.ranked_heads("sym", k) == scores.ranked_heads("sym-pos", k)
    for by in ("pos", "sym"):
        rows = heads_rows(scores, by, 8)
        shown = [format_value(r["positional_share"]) for r in rows]  # as the report shows them
        assert len(set(shown)) == 8
        printed = [f"{r['positional_share']:.4f}" for r in rows]  # as the CLI prints them
        assert len(set(printed)) == 8
