"""Long contexts: with ``max_matrix_elements`` below the whole-head matrix, the scores are
computed in pieces (swaps, rows, frequencies) and equal the unchunked ones to 1e-12."""

from __future__ import annotations

import pytest
import torch

import lens_possym as lp
from lens_possym.capture import capture_attention_inputs
from lens_possym.errors import InvalidSelectionError
from lens_possym.scores import ScoreConfig
from lens_possym.scores.crosslogits import cross_logit_factors

FIELDS = ("pos", "sym", "pos_freq", "sym_freq", "exclusion_ratio", "positional_share",
          "exclusion_ratio_freq", "positional_share_freq")


@pytest.mark.parametrize("swap", ["token", "block"])
def test_chunked_scores_equal_unchunked(tiny_by_family, swap):
    g = torch.Generator().manual_seed(3)
    for family, model in tiny_by_family.items():
        tokens = torch.randint(1, 100, (2, 32), generator=g)
        whole = lp.swap_scores(model, tokens, swap=swap, n_blocks=12)
        # 2 prompts x 4 heads x 32 x 32 = 8,192 elements: held in pieces of 2,000
        pieces = lp.swap_scores(model, tokens, swap=swap, n_blocks=12,
                                max_matrix_elements=2000)
        for name in FIELDS:
            torch.testing.assert_close(getattr(pieces, name), getattr(whole, name), rtol=0,
                                       atol=1e-12, equal_nan=True, msg=f"{family} {name}")


def test_factors_in_pieces_read_the_same_entries(tiny_by_family):
    model = tiny_by_family["gemma3"]
    tokens = torch.randint(1, 100, (1, 30), generator=torch.Generator().manual_seed(4))
    inputs = capture_attention_inputs(model, tokens, [1], query_positions=-1)[1]
    whole = cross_logit_factors(inputs, [0, 1, 2, 3])
    pieces = cross_logit_factors(inputs, [0, 1, 2, 3], max_matrix_elements=50)
    assert whole.holds_full and not pieces.holds_full
    rows, cols = torch.randint(0, 30, (2, 7, 5), generator=torch.Generator().manual_seed(5))
    torch.testing.assert_close(pieces.head_at(rows, cols), whole.head_at(rows, cols),
                               rtol=0, atol=1e-12)
    torch.testing.assert_close(pieces.head_diagonal(), whole.head_diagonal(), rtol=0, atol=1e-12)
    first, second = torch.tensor([2, 3]), torch.tensor([10, 11])
    for a, b in zip(pieces.attention_after_swap(first, second),
                    whole.attention_after_swap(first, second)):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-12)
    with pytest.raises(InvalidSelectionError, match="more than max_matrix_elements = 50"):
        pieces.head_full()


def test_max_matrix_elements_is_validated_and_saved():
    with pytest.raises(InvalidSelectionError, match="max_matrix_elements must be an integer"):
        ScoreConfig(max_matrix_elements=0)
    config = ScoreConfig(max_matrix_elements=1 << 20)
    assert ScoreConfig.from_dict(config.to_dict()) == config
    assert ScoreConfig.from_dict({}).max_matrix_elements == 1 << 26   # files from before


@pytest.mark.parametrize("transpose", [False, True])
def test_whole_rows_by_one_product_read_the_same_entries(tiny_by_family, transpose):
    """A piece touching few rows (columns) is those rows (columns) of C by one matrix
    product; scattered pieces go entry by entry. Both read what the full matrix holds."""
    model = tiny_by_family["gemma3"]
    tokens = torch.randint(1, 100, (1, 30), generator=torch.Generator().manual_seed(6))
    inputs = capture_attention_inputs(model, tokens, [1], query_positions=-1)[1]
    whole = cross_logit_factors(inputs, [0, 1, 2, 3])
    # 4 heads x 30 x 30 = 3,600 > 1,000: not held; 3 rows of 4 x 30 = 360 fit one product
    pieces = cross_logit_factors(inputs, [0, 1, 2, 3], max_matrix_elements=1000)
    rows = torch.tensor([4, 17, 29])[:, None].expand(3, 30)
    cols = torch.arange(30)[None, :].expand(3, 30)
    if transpose:
        rows, cols = cols, rows
    got = pieces.head_at(rows, cols)
    torch.testing.assert_close(got, whole.head_at(rows, cols), rtol=0, atol=1e-12)
    assert got.isinf().any()       # masked positions (outside the window) on both paths


@pytest.mark.parametrize("query", [-1, 12, 3])
def test_a_windows_matrix_is_its_rows_only(tiny_by_family, query):
    """On a layer with a window, ``head_full`` computes only the visible rows (the span
    known on the host); every entry equals the matrix computed whole and masked."""
    from dataclasses import replace

    model = tiny_by_family["gemma3"]
    tokens = torch.randint(1, 100, (2, 30), generator=torch.Generator().manual_seed(7))
    inputs = capture_attention_inputs(model, tokens, [1], query_positions=query)[1]
    assert inputs.spec.window and inputs.spec.window < 30         # a window on layer 1
    factors = cross_logit_factors(inputs, [0, 1, 2, 3])
    span = factors.visible_span
    expected = torch.zeros(30, dtype=torch.bool)
    expected[span.start : span.stop] = True
    assert torch.equal(factors.visible, expected) and 0 < len(span) < 30
    whole = replace(factors, visible_span=None).head_full()
    torch.testing.assert_close(factors.head_full(), whole, rtol=0, atol=1e-12)


def test_per_frequency_tables_in_pieces_give_the_same_scores(tiny_by_family):
    """With ``max_elements`` below one ``[batch, head, pos, freq]`` table, the compiled loop
    and the exclusion take the frequencies in chunks (issue 27: memory the setting bounds):
    the same numbers, bit for bit (each frequency is computed on its own either way)."""
    model = tiny_by_family["llama"]
    tokens = torch.randint(1, 100, (2, 24), generator=torch.Generator().manual_seed(6))
    whole = lp.swap_scores(model, tokens)
    # 2 prompts x 4 heads x 24 positions = 192 per frequency: pieces of 2 and 1 frequencies
    for small in (400, 100):
        pieces = lp.swap_scores(model, tokens, max_elements=small)
        for name in ("pos_freq", "sym_freq", "exclusion_ratio_freq", "positional_share_freq"):
            torch.testing.assert_close(getattr(pieces, name), getattr(whole, name), rtol=0,
                                       atol=1e-12, equal_nan=True, msg=f"{small} {name}")


def test_token_swaps_are_read_in_pieces_without_the_whole_list():
    from lens_possym.scores import swap_set

    visible = torch.ones(40, dtype=torch.bool)
    visible[[5, 17]] = False
    swaps = swap_set("token", 39, visible, exclude_bos=True)
    assert swaps.lazy and swaps.n_swaps == 36 * 35 // 2
    keys = swaps.keys
    i, j = torch.triu_indices(len(keys), len(keys), offset=1)
    for sl in (slice(0, 7), slice(100, 331), slice(600, None), slice(629, 630)):
        first, second = swaps.pairs(sl)
        assert torch.equal(first[:, 0], keys[i][sl]) and torch.equal(second[:, 0], keys[j][sl])
    assert torch.equal(swaps.first[:, 0], keys[i]) and torch.equal(swaps.second[:, 0], keys[j])
    perm = swaps.permutation(3, 40)      # swap 3 is (keys[0], keys[4])
    assert perm[int(keys[0])] == keys[4] and perm[int(keys[4])] == keys[0]
    assert (perm != torch.arange(40)).sum() == 2
