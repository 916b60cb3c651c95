"""argparse ``type=`` checks shared by the subcommands, so that a malformed value is a usage
error (one line, exit 2) before any model is loaded.

Id lists (``--layers``, ``--freqs``, ``--freq-ids``, ``--ids``) are checked against the one
id grammar of :mod:`lens_possym._ids` here; whether the ids exist in the model is checked
once the model is known.
"""

from __future__ import annotations

import argparse
import math
from typing import Callable

from .. import _ids
from ..errors import InvalidSelectionError, LensPossymError


class ArgumentValueError(LensPossymError, argparse.ArgumentTypeError, ValueError):
    """A command-line value that does not read (argparse prints it as a usage error)."""

__all__ = ["ids_text", "freq_ids_text", "layers_text", "int_list", "positive_int_list",
           "positive_int", "non_negative_int", "positive_float", "checked_number"]


def ids_text(what: str, *, bands: bool) -> Callable[[str], str]:
    """A type that accepts text in the id grammar and returns it unchanged."""

    def check(text: str) -> str:
        try:
            return _ids.check_ids_text(text, what=what, bands=bands)
        except InvalidSelectionError as exc:
            raise ArgumentValueError(str(exc)) from None

    check.__name__ = f"{what}s"
    return check


freq_ids_text = ids_text("frequency id", bands=True)
layers_text = ids_text("layer", bands=False)
positions_text = ids_text("position", bands=False)


def int_list(text: str) -> list[int]:
    """``"0,1,2"`` → ``[0, 1, 2]``."""
    try:
        values = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise ArgumentValueError(
            f"expected comma-separated integers like '0,1,2', got {text!r}") from None
    if not values:
        raise ArgumentValueError(f"expected at least one integer, got {text!r}")
    return values


def positive_int_list(text: str) -> list[int]:
    """``"17,100,300"`` → ``[17, 100, 300]``: comma-separated, every one > 0 (lists on the
    command line are comma-separated everywhere)."""
    values = int_list(text)
    bad = [v for v in values if v <= 0]
    if bad:
        raise ArgumentValueError(f"expected positive integers, got {', '.join(map(str, bad))} "
                                 f"in {text!r}")
    return values


def checked_number(text: str, kind: type, test: Callable[[float], bool],
                   need: str) -> int | float:
    """``text`` read as ``kind`` (int or float), finite and passing ``test``; otherwise an
    :class:`ArgumentValueError` saying what was expected (``need``)."""
    try:
        value = kind(text)
    except ValueError:
        raise ArgumentValueError(f"expected {need}, got {text!r}") from None
    if not (math.isfinite(value) and test(value)):
        raise ArgumentValueError(f"expected {need}, got {text!r}")
    return value


def positive_int(text: str) -> int:
    return checked_number(text, int, lambda v: v >= 1, "a positive integer")


def non_negative_int(text: str) -> int:
    return checked_number(text, int, lambda v: v >= 0, "an integer >= 0")


def positive_float(text: str) -> float:
    return checked_number(text, float, lambda v: v > 0, "a positive number")
