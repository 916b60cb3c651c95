"""Selections: every accepted form, and clear errors for the rest."""

from __future__ import annotations

import pytest

import lens_possym as lp
from lens_possym.errors import InvalidSelectionError
from lens_possym.interventions import band_partition, parse_freqs, parse_heads, parse_selection


@pytest.fixture(scope="module")
def specs():
    return lp.rope_specs(lp.tiny_model("neox"))  # 2 layers, 4 heads, 4 pairs + a tail = 5 ids


def test_heads_forms(specs):
    assert parse_heads("1.0, 0.3", specs) == [(0, 3), (1, 0)]
    assert parse_heads("1.*", specs) == [(1, h) for h in range(4)]
    assert parse_heads((1, 2), specs) == [(1, 2)]
    assert parse_heads([(1, 2), "0.1"], specs) == [(0, 1), (1, 2)]
    for twice in ([(1, 2), (1, 2), "0.1"], "1.0,1.0", "1.*,1.2"):
        with pytest.raises(InvalidSelectionError, match="more than once"):
            parse_heads(twice, specs)
    with pytest.raises(InvalidSelectionError, match="empty item"):
        parse_heads("1.0,,0.1", specs)
    assert parse_heads({0: [1, 2], 1: None}, specs) == [(0, 1), (0, 2)] + [(1, h) for h in range(4)]
    assert parse_heads("-1.0", specs) == [(1, 0)]
    assert len(parse_heads(None, specs)) == 8


def test_freqs_forms(specs):
    spec = specs[0]
    assert parse_freqs("0:2,4", spec) == (0, 1, 4)
    assert parse_freqs(":2", spec) == (0, 1)
    assert parse_freqs("all", spec) == parse_freqs(None, spec) == (0, 1, 2, 3, 4)
    assert parse_freqs(range(1, 3), spec) == (1, 2)
    assert parse_freqs(slice(3, None), spec) == (3, 4)
    assert parse_freqs(3, spec) == (3,)
    assert parse_freqs([], spec, allow_empty=True) == ()
    with pytest.raises(InvalidSelectionError, match="no frequency ids"):
        parse_freqs([], spec)
    # thirds, fastest first; the tail (id 4) is in the slowest band
    assert [parse_freqs(b, spec) for b in ("high", "mid", "low")] == [(0, 1), (2, 3), (4,)]
    assert parse_freqs("middle", spec) == parse_freqs("MID", spec) == (2, 3)
    assert band_partition(5, 3) == [[0, 1], [2, 3], [4]]


def test_selection_forms(specs):
    assert parse_selection({"1.0": "0:2", (0, 3): [4]}, specs) == {0: {3: (4,)}, 1: {0: (0, 1)}}
    assert parse_selection("1.0,1.1", specs, freqs="low") == {1: {0: (4,), 1: (4,)}}
    normal = parse_selection({"1.0": "0:2", (0, 3): [4]}, specs)
    assert parse_selection(normal, specs) == normal  # the normalised form reads as itself
    assert parse_selection({1: [0, 2]}, specs, freqs=[3]) == {1: {0: (3,), 2: (3,)}}
    assert parse_selection({"1.0": [0], "1.*": [1]}, specs) == {
        1: {0: (0, 1), 1: (1,), 2: (1,), 3: (1,)}}


@pytest.mark.parametrize("heads, message", [
    ("1.4", "unknown head 1.4: layer 1 has 4 query heads"),
    ("2.0", "layer 2 out of range"),
    ("1", "write heads as LAYER.HEAD"),
    ("a.b", "must be an integer"),
    ("", "no heads selected"),
    ([(1, 2, 3)], "cannot read head"),
])
def test_bad_heads(specs, heads, message):
    with pytest.raises(InvalidSelectionError, match=message):
        parse_heads(heads, specs)


@pytest.mark.parametrize("freqs, message", [
    (5, r"frequency id \[5\] out of range for layer 0: it has 5 frequency ids .*id 4 the non-rotated tail"),
    ("0:6", "'0:6' out of range"),
    ("3:1", "out of range"),
    (slice(0, 4, 2), "step 1"),
    (2.5, "a frequency id must be an integer, got 2.5"),
    ("0-3", "write '0:4'"),
    (-1, r"frequency id \[-1\] out of range"),
    ("1:x", "frequency id 'x' must be an integer"),
    ("0:2:1", "no step"),
    ([1.0], "must be an integer"),
    (",", "empty item"),
    ("0,,1", "empty item"),
    ("\uff11", "must be an integer"),  # a full-width one
    ("0,0", "more than once"),
    ("high,0", "more than once"),
    ([True], "must be an integer"),
    ([], "no frequency ids"),
])
def test_bad_freqs(specs, freqs, message):
    with pytest.raises(InvalidSelectionError, match=message):
        parse_freqs(freqs, specs[0])


# ---- the id grammar, as a property --------------------------------------------------------

from hypothesis import given  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from lens_possym._ids import read_ids  # noqa: E402

N_IDS = 20
item = st.one_of(
    st.integers(0, N_IDS - 1).map(lambda i: (str(i), [i])),
    st.tuples(st.integers(0, N_IDS - 1), st.integers(1, N_IDS)).filter(lambda t: t[0] < t[1])
    .map(lambda t: (f"{t[0]}:{t[1]}", list(range(t[0], t[1])))),
)


@given(items=st.lists(item, min_size=1, max_size=5))
def test_text_reads_as_python_would(items):
    """``"a:b"`` is ``range(a, b)`` and ``"i"`` is ``[i]``, items concatenated in order;
    an id given twice is refused (issue 27: '1.0,1.0' was read as one head)."""
    text = ",".join(t for t, _ in items)
    expected = [i for _, ids in items for i in ids]
    if len(set(expected)) < len(expected):
        with pytest.raises(InvalidSelectionError, match="more than once"):
            read_ids(text, N_IDS)
    else:
        assert read_ids(text, N_IDS) == expected


@given(lo=st.integers(0, 50), hi=st.integers(0, 50))
def test_a_dash_range_is_refused_with_the_half_open_range_to_write(lo, hi):
    with pytest.raises(InvalidSelectionError, match=f"write '{lo}:{hi + 1}'"):
        read_ids(f"{lo}-{hi}", 60, bands=True)


@given(ids=st.lists(st.integers(-30, 30), min_size=1, max_size=4))
def test_an_id_outside_the_model_names_the_valid_range(ids):
    bad = [i for i in ids if not 0 <= i < N_IDS]
    if not bad:
        if len(set(ids)) < len(ids):
            with pytest.raises(InvalidSelectionError, match="more than once"):
                read_ids(ids, N_IDS)
        else:
            assert read_ids(ids, N_IDS) == ids
        return
    with pytest.raises(InvalidSelectionError, match=rf"\(0\.\.{N_IDS - 1}"):
        read_ids(ids, N_IDS)
