"""RoPE as a positional scheme: a thin view of :class:`lens_possym.rope.RopeSpec`.

Everything RoPE-specific (geometry, probes, tables, the per-frequency cross-logit factors)
stays in :mod:`lens_possym.rope` and :mod:`lens_possym.scores.crosslogits`, unchanged, so
RoPE results are bit for bit what they were; this class only answers the scheme questions.
RoPE on some dims only (partial rotary) is the spec's tail, a NoPE part with angle 0.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from torch import Tensor

from ..rope import RopeSpec
from .base import PositionalScheme

__all__ = ["Rope"]


@dataclass(frozen=True, eq=False)
class Rope(PositionalScheme):
    """RoPE on one layer; :attr:`spec` is its full geometry."""

    spec: RopeSpec = field(repr=False, default=None)
    name: str = "rope"
    site: str = "inside"

    @property
    def scale(self) -> float:  # type: ignore[override]
        return float(self.spec.scale)

    @property
    def window(self) -> int | None:  # type: ignore[override]
        return self.spec.window

    @property
    def has_frequencies(self) -> bool:
        return True

    def frequency_angles(self) -> Tensor:
        return self.spec.angles

    def cross_logits(self, q, k, query_position):  # noqa: D102
        raise NotImplementedError(
            "RoPE's cross-logits come from lens_possym.scores.crosslogits.cross_logit_factors "
            "(per frequency, with the model's own tables)")
