r"""Absolute positional encodings, added to the token embedding at the input.

GPT-2, OPT and GPT-Neo learn a table :math:`P` (OPT reads it at an offset of 2), the
original Transformer adds sinusoids; either way the first layer's input is
:math:`x_m = c_m + p_m` and every later layer's input mixes the two. Position therefore
enters at the *input* (:attr:`site` ``"input"``), not inside any head: inside, a head's
logit :math:`s\,q(x_n)\cdot k(x_m)` has no position argument, which is why a layer-local
swap of rows moves the position along with the content (see ``docs/positional_schemes.md``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from .base import PositionalScheme

__all__ = ["Absolute"]


@dataclass(frozen=True)
class Absolute(PositionalScheme):
    """An absolute encoding added at the input (``kind``: ``"learned"`` or ``"sinusoidal"``)."""

    kind: Literal["learned", "sinusoidal"] = "learned"
    scale: float = 1.0
    window: int | None = None
    name: str = "absolute"
    site: str = "input"

    def split_logits(self, split: Any) -> Any:
        """Token and position embedding apart, through the first layer's norm and
        projections: ``cc``, ``cp``, ``pc``, ``pp``, ``bias`` (layer 0 only)."""
        return split.absolute(self)
