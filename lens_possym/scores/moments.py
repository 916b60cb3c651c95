"""Per-entry moments of scores over prompts (count, mean, ``M2``), merged exactly across
shards: what a dataset profile (:mod:`.dataset`) keeps of each score."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from jaxtyping import Float
from torch import Tensor

__all__ = ["Moments"]


@dataclass
class Moments:
    """Count, mean and ``M2 = Σ (x - mean)²`` per entry over prompts (``nan`` values skipped).

    All three have the shape of one prompt's scores (``[n_layers, n_heads(, n_freqs)]``);
    ``mean`` is ``nan`` where the count is 0.
    """

    count: Tensor
    mean: Tensor
    m2: Tensor

    @classmethod
    def of(cls, values: Float[Tensor, "prompt ..."]) -> "Moments":
        """The moments of ``values`` over its first axis, two-pass (float64)."""
        values = values.double()
        finite = values.isfinite()
        count = finite.sum(0).double()
        zeroed = torch.where(finite, values, torch.zeros_like(values))
        mean = zeroed.sum(0) / count                                  # nan where count = 0
        dev = torch.where(finite, values - mean, torch.zeros_like(values))
        return cls(count, mean, (dev * dev).sum(0))

    def merge(self, other: "Moments") -> "Moments":
        """Chan et al.'s exact merge of two sets of moments (``self`` first)."""
        n = self.count + other.count
        a_empty, b_empty = self.count == 0, other.count == 0
        delta = other.mean - self.mean
        share = other.count / n
        mean = torch.where(a_empty, other.mean,
                           torch.where(b_empty, self.mean, self.mean + delta * share))
        m2 = torch.where(a_empty, other.m2, torch.where(
            b_empty, self.m2, self.m2 + other.m2 + delta * delta * self.count * share))
        return Moments(n, mean, m2)

    @property
    def std(self) -> Tensor:
        """Sample standard deviation over prompts (``nan`` where fewer than two)."""
        return torch.where(self.count > 1, (self.m2 / (self.count - 1).clamp(min=1)).sqrt(),
                           torch.full_like(self.m2, float("nan")))

    def to_dict(self) -> dict[str, Tensor]:
        return {"count": self.count, "mean": self.mean, "m2": self.m2}

    @classmethod
    def from_dict(cls, data: dict) -> "Moments":
        return cls(*(torch.as_tensor(data[k], dtype=torch.float64) for k in ("count", "mean", "m2")))
