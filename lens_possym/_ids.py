"""The one grammar for lists of ids: frequency ids, layers, heads (library and CLI alike).

Written as text, a list is comma-separated items, each

* an integer, ``5``;
* a half-open range ``START:STOP`` as in Python (``0:3`` is 0, 1, 2; an empty end means
  the first or one past the last id, so ``:3`` and ``8:`` work);
* for frequency ids only, a band name: ``high``, ``mid`` (also ``middle``) or ``low``, the
  thirds of the ids, fastest rotation first (a partial-rotary tail, the last id, is in
  ``low``);
* or the whole list ``all``.

The inclusive dash form ``0-3`` is refused with a message that says to write ``0:4``: the
two forms differ by one id, and reading one as the other silently would change an
experiment. Frequency ids are names of frequencies and are never negative; layers may
count from the end (``-1`` is the last layer), as in Python and TransformerLens.

Besides text, every function here takes what Python code would naturally pass: an int, an
iterable of ints (list, tuple, 1-d integer tensor), a ``range`` or a ``slice``. Every
failure is an :class:`~lens_possym.errors.InvalidSelectionError` that names the valid range.
"""

from __future__ import annotations

import re
from typing import Any, Iterable, Union

import torch

from .bands import BAND_ALIASES, BAND_NAMES, band_partition
from .errors import InvalidSelectionError

__all__ = ["head_name", "BAND_NAMES", "BAND_ALIASES", "IdsLike", "band_partition", "read_ids", "as_int",
           "check_ids_text"]

IdsLike = Union[int, str, slice, range, Iterable[int], None]

# ASCII digits only: ``\d`` would also read "１" (a full-width one) or "٣" as digits
_INT = re.compile(r"^-?[0-9]+$")
_DASH_RANGE = re.compile(r"^(-?[0-9]+)\s*-\s*(-?[0-9]+)$")


def head_name(layer: int, head: int) -> str:
    """A head's one name, ``"L.H"`` (``"11.1"``): what every figure, table, label, report
    address and message writes, and what the head grammar reads back
    (:func:`lens_possym.interventions.parse_heads`; ``a:b`` there is a range)."""
    return f"{int(layer)}.{int(head)}"


def _int_item(text: str, what: str, whole: str, bands: bool) -> int:
    text = text.strip()
    if not _INT.match(text):
        raise InvalidSelectionError(
            f"cannot read {what}s {whole!r}: {what} {text!r} must be an integer; write ids "
            "like '5', '0:4' or '0:4,8'" + (", or a band high/mid/low" if bands else "")
        )
    return int(text)


def _parse_text(text: str, what: str, bands: bool) -> list[tuple]:
    """Syntax only, as items ``("id", k)``, ``("range", start|None, stop|None)``,
    ``("band", name)`` or ``("all",)``."""
    items: list[tuple] = []
    if text.strip().lower() == "all":
        return [("all",)]
    parts = [p.strip() for p in text.split(",")]
    if len(parts) > 1 and not all(parts):
        raise InvalidSelectionError(
            f"cannot read {what}s {text!r}: an empty item between commas; write ids like "
            "'0,1' or '0:4'")
    for part in parts:
        if not part:
            continue
        low = part.lower()
        dash = _DASH_RANGE.match(part)
        if dash:
            start, stop = int(dash.group(1)), int(dash.group(2))
            raise InvalidSelectionError(
                f"{what}s {part!r}: ranges are half-open START:STOP, as in Python; for "
                f"{start} through {stop} write '{start}:{stop + 1}'"
            )
        if bands and low in BAND_NAMES + tuple(BAND_ALIASES):
            items.append(("band", BAND_ALIASES.get(low, low)))
        elif ":" in part:
            if part.count(":") != 1:
                raise InvalidSelectionError(
                    f"cannot read {what}s {part!r}: a range is START:STOP (no step)")
            start_text, stop_text = part.split(":")
            start = _int_item(start_text, what, text, bands) if start_text.strip() else None
            stop = _int_item(stop_text, what, text, bands) if stop_text.strip() else None
            items.append(("range", start, stop))
        else:
            items.append(("id", _int_item(part, what, text, bands)))
    if not items:
        example = "'0:16' or 'low'" if bands else "'0:4' or '1,3'"
        raise InvalidSelectionError(f"no {what}s in {text!r}; write e.g. {example}")
    return items


def check_ids_text(text: str, *, what: str = "frequency id", bands: bool = True) -> str:
    """Check the syntax of a text id list (without knowing how many ids exist); return it.

    For command-line parsers: a typo is reported before any model is loaded.
    """
    _parse_text(text, what, bands)
    return text


def _range_message(what: str, n: int, where: str, from_end: bool, extra: str = "") -> str:
    """`` for layer 3: there are 5 frequency ids (0..4; ...)``, to follow "out of range"."""
    has = f" for {where}: it has" if where else ": there are"
    ends = "; negatives count from the end" if from_end else ""
    return f"{has} {n} {what}s (0..{n - 1}{ends}{extra})"


def as_int(value: Any, what: str) -> int:
    if isinstance(value, bool):
        raise InvalidSelectionError(f"{what} must be an integer, got {value!r}")
    if isinstance(value, str):
        if not _INT.match(value.strip()):
            raise InvalidSelectionError(f"{what} must be an integer, got {value!r}")
        return int(value)
    if isinstance(value, torch.Tensor) and value.ndim == 0 and not value.is_floating_point() \
            and value.dtype != torch.bool:
        return int(value)
    if isinstance(value, int):
        return value
    try:  # numpy integers and other int-likes, but never a float
        import numbers

        if isinstance(value, numbers.Integral):
            return int(value)
    except TypeError:  # pragma: no cover
        pass
    raise InvalidSelectionError(f"{what} must be an integer, got {value!r}")


def read_ids(value: IdsLike, n: int, *, what: str = "frequency id", bands: bool = False,
             from_end: bool = False, where: str = "", extra: str = "") -> list[int]:
    """Ids in ``0..n-1`` from any accepted form, in the order given.

    Args:
        value: ``None``/``"all"`` (every id), an int, text in the grammar above, a
            ``range``/``slice`` (step 1), or an iterable of ints.
        n: how many ids exist.
        what: what an id is, for messages (``"frequency id"``, ``"layer"``, ``"head"``).
        bands: accept the band names (frequency ids).
        from_end: negative ids count from the end (layers); otherwise they are refused.
        where: context for messages, e.g. ``"layer 3"``.
        extra: a note appended to the valid range in messages (e.g. which id is the tail).

    Raises:
        InvalidSelectionError: an unreadable value, a dash range, or an id out of range
            (the message gives the valid range).
    """
    if value is None:
        return list(range(n))
    if isinstance(value, str):
        ids: list[int] = []
        for item in _parse_text(value, what, bands):
            if item[0] == "all":
                ids.extend(range(n))
            elif item[0] == "band":
                ids.extend(band_partition(n, 3)[BAND_NAMES.index(item[1])])
            elif item[0] == "range":
                ids.extend(_range(item[1], item[2], n, what, where, from_end, extra, repr(value)))
            else:
                ids.append(item[1])
    elif isinstance(value, (slice, range)):
        if value.step not in (None, 1):
            raise InvalidSelectionError(
                f"{what} ranges must have step 1, got {value!r}; list the ids instead")
        start = None if value.start is None else as_int(value.start, f"a {what} range's start")
        stop = None if value.stop is None else as_int(value.stop, f"a {what} range's stop")
        ids = _range(start, stop, n, what, where, from_end, extra, repr(value))
    elif isinstance(value, torch.Tensor) and value.ndim == 0:
        ids = [as_int(value, f"a {what}")]
    elif isinstance(value, (int, bool)) or not isinstance(value, Iterable):
        ids = [as_int(value, f"a {what}")]
    else:
        if isinstance(value, torch.Tensor) and (value.is_floating_point() or value.ndim != 1):
            raise InvalidSelectionError(
                f"{what}s as a tensor must be 1-d integers, got {value.dtype} of shape "
                f"{tuple(value.shape)}")
        ids = [as_int(v, f"each {what}") for v in value]
    bad = [i for i in ids if not (-n if from_end else 0) <= i < n]
    if bad:
        raise InvalidSelectionError(
            f"{what} {bad} out of range"
            + _range_message(what, n, where, from_end, extra))
    ids = [i % n for i in ids] if from_end else ids
    seen: set[int] = set()
    twice = sorted({i for i in ids if i in seen or seen.add(i)})
    if twice:
        raise InvalidSelectionError(
            f"{what}s {_shown(value)}: {twice} given more than once"
            + (" (counting negatives from the end)" if from_end else "")
            + f"; list each {what} once")
    return ids


def _shown(value: Any) -> str:
    text = repr(value) if isinstance(value, (str, range, slice)) else repr(
        value.tolist() if isinstance(value, torch.Tensor) else value)
    return text if len(text) <= 60 else text[:57] + "..."


def _range(start: int | None, stop: int | None, n: int, what: str, where: str,
           from_end: bool, extra: str, shown: str) -> list[int]:
    lo = 0 if start is None else start
    hi = n if stop is None else stop
    if from_end:
        lo, hi = (lo + n if lo < 0 else lo), (hi + n if hi < 0 else hi)
    if not 0 <= lo < hi <= n:
        raise InvalidSelectionError(
            f"{what}s {shown} out of range{_range_message(what, n, where, from_end, extra)}; "
            f"a range START:STOP is half-open and needs 0 <= START < STOP <= {n}"
        )
    return list(range(lo, hi))
