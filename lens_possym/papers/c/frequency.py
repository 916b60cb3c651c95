r"""Which RoPE frequencies each trained layer uses: paper C's Table 1 / Fig 8 (App G).

For each layer ``ℓ`` (one head per layer in paper C) and frequency ID ``k = 1..n_freqs``
(angle :math:`\theta_k = \mathrm{base}^{-2(k-1)/d}`, ID 1 the fastest), the attention
logit of the last-token query splits exactly into one term per frequency
(:func:`lens_possym.decompose.frequency_logits_all`, checked against the model's own
scores):

.. math::

    s_{nj} = \sum_k \lambda^{(k)}_{nj}, \qquad
    v_k = \operatorname{mean}_{\text{prompts}} \max_{j \le n} \lambda^{(k)}_{nj}

``v_k`` is the "max logit per frequency" of Fig 4C (the largest logit term frequency ``k``
gives any visible key), averaged over prompts: the per-layer **profile** of Fig 8
(``profile[ℓ, k-1]``, with its standard deviation over prompts). The **weighted-average
ID** of Table 1 is read as the centroid :math:`\sum_k k\,v_k^+ / \sum_k v_k^+` over the
positive part :math:`v_k^+ = \max(v_k, 0)` (paper_c.md §8: "[INFER] the centroid ... of the
max logit per frequency"; a negative maximum means the frequency only pushes attention
away, and counts as unused), and its angle :math:`\theta` at the rounded ID (Table 1's
"freq" row). :data:`TABLE_1` holds the paper's IDs for comparison.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch
from torch import Tensor

from ...decompose import frequency_logits_all
from ...errors import InvalidSelectionError
from ...results_io import ResultIO
from .tasks import MultiHopTask

__all__ = ["TABLE_1", "FrequencyProfile", "frequency_profile", "weighted_id"]

#: Table 1 (paper_c.md §8): weighted-average frequency ID per layer L0..L11
TABLE_1 = {"number": [1, 2, 2, 2, 10, 39, 38, 38, 38, 37, 37, 38],
           "letter": [18, 32, 42, 37, 40, 38, 41, 38, 41, 39, 38, 40]}


def weighted_id(profile: Tensor) -> Tensor:
    """``[..., n_freqs] -> [...]``: :math:`\\sum_k k v_k^+ / \\sum_k v_k^+` (IDs 1-based;
    ``nan`` where no frequency has a positive value)."""
    pos = profile.clamp(min=0)
    ids = torch.arange(1, profile.shape[-1] + 1, dtype=profile.dtype)
    total = pos.sum(-1)
    return torch.where(total > 0, (pos * ids).sum(-1) / total.clamp(min=1e-30),
                       torch.full_like(total, float("nan")))


@dataclass(repr=False)
class FrequencyProfile(ResultIO):
    """The per-layer frequency profile of one trained model (module docstring).

    Attributes:
        task: ``"number"`` or ``"letter"``.
        profile, spread: ``[n_layers][n_freqs]``: mean and standard deviation over prompts
            of the max logit term per frequency (head 0 of each layer).
        weighted: ``[n_layers]`` weighted-average frequency ID (1-based).
        angles: ``[n_freqs]`` the angle of each ID.
        n_prompts: prompts averaged (training length, last-token query).
        max_abs_error: the largest |sum of terms - model scores| over layers.
    """

    task: str
    profile: list[list[float]]
    spread: list[list[float]]
    weighted: list[float]
    angles: list[float]
    n_prompts: int
    max_abs_error: float

    FORMAT = "lens-possym/paper-c-frequency-profile@1"

    def to_dict(self) -> dict:
        return {"task": self.task, "profile": self.profile, "spread": self.spread,
                "weighted": self.weighted, "angles": self.angles, "n_prompts": self.n_prompts,
                "max_abs_error": self.max_abs_error}

    @classmethod
    def from_dict(cls, data: dict) -> "FrequencyProfile":
        return cls(**{k: data[k] for k in ("task", "profile", "spread", "weighted", "angles",
                                           "n_prompts", "max_abs_error")})

    def weighted_angle(self) -> list[float]:
        """The angle at each layer's rounded weighted ID (Table 1's "freq" row)."""
        return [self.angles[min(len(self.angles), max(1, round(w))) - 1]
                if w == w else float("nan") for w in self.weighted]

    def summary(self) -> dict:
        return {"task": self.task, "weighted": [round(w, 1) for w in self.weighted],
                "n_prompts": self.n_prompts, "max_abs_error": self.max_abs_error}

    def _table(self):
        """One row per (layer, frequency ID): ``layer``, ``freq_id``, ``angle``, ``value``,
        ``spread``."""
        import pandas as pd

        rows = [{"layer": layer, "freq_id": k + 1, "angle": self.angles[k], "value": v,
                 "spread": self.spread[layer][k]}
                for layer, row in enumerate(self.profile) for k, v in enumerate(row)]
        return pd.DataFrame.from_records(rows)


@torch.no_grad()
def frequency_profile(model, task: MultiHopTask, *, n_prompts: int = 100, seed: int = 1,
                      layers: Sequence[int] | None = None, chunk: int = 25
                      ) -> FrequencyProfile:
    """The profile of a :class:`~lens_possym.papers.c.gptj.GPTJTaskModel` on ``n_prompts``
    test prompts (``task.test_set(n_prompts, seed=seed)``, training length, last-token
    query), every layer by default; head 0 of each layer (paper C has one head per layer).
    """
    if n_prompts < 1:
        raise InvalidSelectionError(f"n_prompts must be >= 1, got {n_prompts}")
    bridge = model.bridge()
    tokens = task.test_set(n_prompts, seed=seed).tokens
    n_layers = model.cfg.n_layers
    chosen = list(range(n_layers)) if layers is None else [int(x) for x in layers]
    per_layer: dict[int, list[Tensor]] = {layer: [] for layer in chosen}
    worst, angles = 0.0, None
    for i in range(0, len(tokens), chunk):
        part = frequency_logits_all(bridge, tokens[i: i + chunk], chosen, heads=[0],
                                    query_positions=-1)
        for layer, fl in part.items():
            terms = fl.terms[:, 0, 0].float()                 # [batch, key, freq]
            visible = fl.mask[0].to(terms.device)[None, :, None]
            terms = terms.masked_fill(~visible, float("-inf"))
            per_layer[layer].append(terms.max(dim=1).values.cpu())   # [batch, freq]
            worst = max(worst, float(fl.max_abs_error))
            angles = fl.angles
    stacked = {layer: torch.cat(v) for layer, v in per_layer.items()}
    profile = torch.stack([stacked[layer].mean(0) for layer in chosen])
    spread = torch.stack([stacked[layer].std(0, unbiased=False) for layer in chosen])
    return FrequencyProfile(task.name, profile.tolist(), spread.tolist(),
                            weighted_id(profile).tolist(),
                            [float(a) for a in angles], int(len(tokens)), worst)
