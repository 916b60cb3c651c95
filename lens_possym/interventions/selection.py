"""Which (layer, head, frequency ids) an intervention acts on: parsing and validation.

Every public intervention takes its target in one of a few forms and turns it into the
same normalised selection, ``{layer: {head: (freq ids...)}}`` with sorted, distinct ids,
checked against the model's geometry so that a bad head, layer or frequency id fails
before any hook is attached, with a message naming it.

Accepted forms:

* heads: ``"12.0,13.1"``, ``[(12, 0), (13, 1)]``, ``{12: [0, 3]}``, ``(12, 0)``; a ``*``
  or ``None`` head means every query head of the layer (``"12.*"``, ``(12, None)``);
* frequency ids: an int, an iterable of ints, a ``range``/``slice``, or text in the one
  grammar of :mod:`lens_possym._ids` (``"5"``, half-open ``"0:16"``, ``"0:16,40"``,
  ``"all"``, the bands ``"high"``/``"mid"``/``"low"``: the thirds of the ids, fastest
  rotation first, the tail if any in ``"low"``; ``"0-3"`` is refused: write ``"0:4"``);
* a selection (heads with their frequency ids): a mapping from a head (any form above)
  to frequency ids, e.g. ``{"12.0": "0:16", (13, 1): "low"}``.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping, Sequence, Union

import torch

from .._ids import as_int, read_ids
from ..bands import BAND_NAMES, band_partition
from ..errors import InvalidSelectionError
from ..rope import FrequencyIds, RopeSpec

__all__ = [
    "HeadsLike",
    "FreqsLike",
    "Selection",
    "BAND_NAMES",
    "parse_heads",
    "parse_freqs",
    "parse_selection",
    "band_partition",
    "heads_label",
    "freqs_label",
]

HeadsLike = Union[str, tuple, Sequence[tuple], Mapping[int, Any], None]
FreqsLike = Union[int, str, slice, range, Iterable[int], None]
# normalised: {layer: {head: (freq ids, sorted)}}
Selection = dict[int, dict[int, tuple[int, ...]]]


def _layer_count_error(layer: int, n_layers: int) -> InvalidSelectionError:
    return InvalidSelectionError(
        f"layer {layer} out of range: the model has {n_layers} layers (0..{n_layers - 1})"
    )


def _check_head(layer: int, head: int, specs: Sequence[RopeSpec]) -> None:
    if not 0 <= layer < len(specs):
        raise _layer_count_error(layer, len(specs))
    n_heads = specs[layer].n_heads
    if not 0 <= head < n_heads:
        raise InvalidSelectionError(
            f"unknown head {layer}.{head}: layer {layer} has {n_heads} query heads "
            f"(0..{n_heads - 1})"
        )


def _parse_head_token(token: Any, specs: Sequence[RopeSpec]) -> list[tuple[int, int]]:
    """One head given as ``"L.H"``, ``"L.*"``, ``(L, H)`` or ``(L, None)``."""
    if isinstance(token, str):
        text = token.strip()
        if text.count(".") != 1:
            raise InvalidSelectionError(
                f"cannot read head {token!r}: write heads as LAYER.HEAD, e.g. '12.0' "
                "(or '12.*' for every head of layer 12)"
            )
        layer_text, head_text = text.split(".")
        layer = as_int(layer_text, f"the layer in head {token!r}")
        head: Any = (None if head_text.strip() == "*"
                     else as_int(head_text, f"the head in {token!r}"))
    elif isinstance(token, (tuple, list)) and len(token) == 2:
        layer = as_int(token[0], f"the layer in head {tuple(token)!r}")
        star = token[1] is None or (isinstance(token[1], str) and token[1].strip() == "*")
        head = None if star else as_int(token[1], "a head index")
    else:
        raise InvalidSelectionError(
            f"cannot read head {token!r}: pass 'LAYER.HEAD' or (layer, head)"
        )
    n_layers = len(specs)
    if layer < 0:
        layer += n_layers
    if not 0 <= layer < n_layers:
        raise _layer_count_error(layer, n_layers)
    if head is None:
        return [(layer, h) for h in range(specs[layer].n_heads)]
    _check_head(layer, head, specs)
    return [(layer, head)]


def parse_heads(heads: HeadsLike, specs: Sequence[RopeSpec]) -> list[tuple[int, int]]:
    """Query heads as a sorted list of distinct ``(layer, head)`` pairs.

    Raises:
        InvalidSelectionError: a layer or head out of range, or an unreadable head.
    """
    if heads is None:
        return [(layer, h) for layer, spec in enumerate(specs) for h in range(spec.n_heads)]
    if isinstance(heads, str):
        tokens: list[Any] = [t for t in heads.split(",") if t.strip()]
        if len(tokens) != len(heads.split(",")) and heads.strip():
            raise InvalidSelectionError(
                f"cannot read heads {heads!r}: an empty item between commas; write heads "
                "like '12.0,13.1'")
    elif isinstance(heads, Mapping):
        tokens = []
        for layer, hs in heads.items():
            if hs is None or (isinstance(hs, str) and hs == "*"):
                hs_list: list[Any] = [None]
            elif isinstance(hs, Iterable) and not isinstance(hs, (str, bytes)):
                hs_list = list(hs)
            else:
                hs_list = [hs]
            tokens.extend((layer, h) for h in hs_list)
    elif isinstance(heads, tuple) and len(heads) == 2 and not isinstance(heads[0], (tuple, list, str)):
        tokens = [heads]
    elif isinstance(heads, Iterable) and not isinstance(heads, (bytes, torch.Tensor)):
        tokens = list(heads)
    else:
        raise InvalidSelectionError(
            f"cannot read heads {heads!r}: pass 'LAYER.HEAD,...', (layer, head) pairs or "
            "{layer: [heads]}")
    if not tokens:
        raise InvalidSelectionError("no heads selected; pass e.g. '12.0,13.1' or [(12, 0)]")
    out: list[tuple[int, int]] = []
    for token in tokens:
        out.extend(_parse_head_token(token, specs))
    twice = sorted({h for h in out if out.count(h) > 1})
    if twice:
        raise InvalidSelectionError(
            f"heads {heads!r}: {', '.join(f'{l}.{h}' for l, h in twice)} given more than "
            "once; list each head once")
    return sorted(out)


def parse_freqs(freqs: FreqsLike, spec: FrequencyIds, *, allow_empty: bool = False
                ) -> tuple[int, ...]:
    """Frequency ids of one layer, sorted and distinct (see the module docstring for forms).

    ``spec`` is anything with the frequency-id bookkeeping (:class:`~lens_possym.rope.RopeSpec`,
    a toy model's config). An empty selection (``[]``) is refused: an intervention on no
    frequency changes nothing, silently (``allow_empty=True`` accepts it, for callers that
    mean "none").

    Raises:
        InvalidSelectionError: an id out of ``0..n_freqs-1``, a dash range, an id given
            twice, an empty selection or an unreadable value.
    """
    n, layer = spec.n_freqs, getattr(spec, "layer", None)
    extra = ("; id 0 is the fastest rotation"
             + (f", id {n - 1} the non-rotated tail" if spec.has_tail else ""))
    ids = read_ids(freqs, n, what="frequency id", bands=True,
                   where="" if layer is None else f"layer {layer}", extra=extra)
    if not ids and not allow_empty:
        raise InvalidSelectionError(
            f"no frequency ids in {freqs!r}" + ("" if layer is None else f" for layer {layer}")
            + ": an intervention on no frequency would change nothing; pass ids such as "
            "'0:4' or 'low' (or leave the head out)")
    return tuple(sorted(set(ids)))


def parse_selection(selection: Any, specs: Sequence[RopeSpec], freqs: FreqsLike = None
                    ) -> Selection:
    """Normalise a selection to ``{layer: {head: (freq ids...)}}``.

    ``selection`` is a mapping ``{head: freqs}`` (heads in any form of
    :func:`parse_heads`, each key one head or ``"L.*"``), the normalised form itself
    (``{layer: {head: freqs}}``), or heads alone, in which case every head gets ``freqs``
    (all ids by default; ``{layer: [heads]}`` is heads alone).
    """
    out: Selection = {}
    if isinstance(selection, Mapping) and selection and all(
        isinstance(k, int) and isinstance(v, Mapping) for k, v in selection.items()
    ):  # the normalised form {layer: {head: freqs}}
        items = [((layer, head), ids) for layer, heads in selection.items()
                 for head, ids in heads.items()]
    elif isinstance(selection, Mapping) and not all(isinstance(k, int) for k in selection):
        items = list(selection.items())
    else:
        items = [(selection, freqs)]
    for head_key, head_freqs in items:
        for layer, head in parse_heads(head_key if not isinstance(head_key, tuple) or
                                       len(head_key) != 2 else [head_key], specs):
            ids = parse_freqs(head_freqs, specs[layer])
            merged = set(out.setdefault(layer, {}).get(head, ())) | set(ids)
            out[layer][head] = tuple(sorted(merged))
    return {layer: dict(sorted(heads.items())) for layer, heads in sorted(out.items())}


# ---- writing selections back in the grammar --------------------------------------------------


def freqs_label(freqs: FreqsLike) -> str:
    """Frequency ids written in the selection grammar, without a model.

    Strings (``"0:16,40"``, ``"low"``, ``"all"``) are kept as written (spaces dropped);
    ``None`` is ``"all"``; ids, ranges and slices become sorted, distinct items with runs as
    half-open ranges: ``[0, 1, 2, 7]`` → ``"0:3,7"``. :func:`parse_freqs` reads the result
    back to the same ids.
    """
    if freqs is None:
        return "all"
    if isinstance(freqs, str):
        return ",".join(p.strip() for p in freqs.split(",") if p.strip())
    if isinstance(freqs, slice):
        if freqs.step not in (None, 1):
            raise InvalidSelectionError("frequency slices must have step 1")
        return f"{'' if freqs.start is None else freqs.start}:{'' if freqs.stop is None else freqs.stop}"
    if isinstance(freqs, torch.Tensor):
        freqs = freqs.flatten().tolist()
    if isinstance(freqs, int) and not isinstance(freqs, bool):
        return str(freqs)
    try:
        ids = sorted({as_int(f, "a frequency id") for f in freqs})  # type: ignore[union-attr]
    except TypeError:
        raise InvalidSelectionError(
            f"cannot read frequency ids {freqs!r}: pass ids, a range, '0:16' or 'low'"
        ) from None
    items: list[str] = []
    start = 0
    for i in range(1, len(ids) + 1):
        if i == len(ids) or ids[i] != ids[i - 1] + 1:
            run = ids[start:i]
            items.append(str(run[0]) if len(run) == 1 else f"{run[0]}:{run[-1] + 1}")
            start = i
    return ",".join(items)


def heads_label(heads: Any) -> str:
    """Heads written in the selection grammar (``"12.0,13.*"``), without a model.

    Accepts a ``"L.H"`` string (kept, spaces dropped), a ``(layer, head)`` pair (``None``
    or ``"*"`` for every head) or a list of them; :func:`parse_heads` reads the result.
    """
    if isinstance(heads, str):
        return ",".join(p.strip() for p in heads.split(",") if p.strip())
    if isinstance(heads, (tuple, list)) and len(heads) == 2 and not isinstance(
            heads[0], (tuple, list, str)):
        layer = as_int(heads[0], f"the layer in head {tuple(heads)!r}")
        head = heads[1]
        return f"{layer}.{'*' if head is None or head == '*' else as_int(head, 'a head index')}"
    if isinstance(heads, (tuple, list)) and heads:
        return ",".join(heads_label(h) for h in heads)
    raise InvalidSelectionError(
        f"cannot read heads {heads!r}: pass 'LAYER.HEAD' or (layer, head)"
    )
