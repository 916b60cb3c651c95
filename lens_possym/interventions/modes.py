"""The words of interventions: ablation modes and the sides (queries, keys) they edit.

Written once here and used by the hook factories, the sweeps, the
:class:`~lens_possym.interventions.Intervention` specs and the ``ablate`` command.
"""

from __future__ import annotations

from typing import Literal, Sequence

from ..errors import InvalidSelectionError

__all__ = ["MODES", "SIDES", "AblationMode", "Side", "check_mode", "check_side", "resolve_side"]

AblationMode = Literal["zero", "mean", "unrotate"]
Side = Literal["q", "k", "qk"]
MODES: tuple[str, ...] = ("zero", "mean", "unrotate")
SIDES: tuple[str, ...] = ("q", "k", "qk")
# unrotate needs both sides: the angle (j - n)θ of a score only vanishes when both turn back
_DEFAULT_SIDE = {"zero": "q", "mean": "q", "unrotate": "qk"}


def check_mode(mode: str) -> str:
    """``mode`` itself if it is an ablation mode; else a clear error."""
    if mode not in MODES:
        raise InvalidSelectionError(
            f"unknown ablation mode {mode!r}; choose one of {', '.join(MODES)}"
        )
    return mode


def check_side(side: str, allowed: Sequence[str] = SIDES) -> str:
    """``side`` itself if it is one of ``allowed``; else a clear error."""
    if side not in allowed:
        raise InvalidSelectionError(
            f"unknown side {side!r}; choose one of {', '.join(allowed)} (q: queries, k: keys)"
        )
    return side


def resolve_side(mode: str, side: str | None) -> str:
    """The side a ``mode`` ablation edits: ``side``, or the mode's default (q; qk for unrotate).

    Raises:
        InvalidSelectionError: an unknown mode or side, or ``unrotate`` on one side only.
    """
    side = check_side(_DEFAULT_SIDE[check_mode(mode)] if side is None else side)
    if mode == "unrotate" and side != "qk":
        raise InvalidSelectionError(
            "mode='unrotate' acts on queries and keys together (side='qk'): the angle "
            "(j - n)θ of a score only vanishes when both are rotated back"
        )
    return side
