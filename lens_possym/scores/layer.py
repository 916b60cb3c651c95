"""One layer's scores (:class:`LayerScores`) and their one assembly into :class:`PosSymScores`.

Every scored layer, whatever its positional scheme, swap site or method, comes out of the
engine (:mod:`.engine`) as a :class:`LayerScores` of per-prompt tensors for the heads it
scored; :func:`place_per_prompt` puts them in ``[n_prompts, n_layers, n_heads(, n_freqs)]``
tensors and :func:`mean_over_prompts` takes the mean over prompts, as paper C's
``scores.mean(axis=0)``. :func:`assemble` is the two in a row: the one place a
:class:`PosSymScores` is built from scores.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Sequence

import torch
from jaxtyping import Float
from torch import Tensor

from .config import ScoreConfig
from .results import PosSymScores

__all__ = ["LayerScores", "PER_PROMPT", "place_per_prompt", "mean_over_prompts", "assemble"]


@dataclass
class LayerScores:
    """One layer's scores, per prompt, for the heads scored (``None``: not computed).

    Per-head tensors are ``[n_prompts, len(heads)]``, per-frequency ones
    ``[n_prompts, len(heads), n_freqs]``; :func:`~lens_possym.scores.swap_scores` places
    every layer's into the ``[n_layers, n_heads(, n_freqs)]`` tensors of
    :class:`PosSymScores` at the end.
    """

    layer: int
    heads: list[int]
    angles: Float[Tensor, "freq"]
    pos: Float[Tensor, "prompt head"]
    sym: Float[Tensor, "prompt head"]
    pos_freq: Float[Tensor, "prompt head freq"] | None = None
    sym_freq: Float[Tensor, "prompt head freq"] | None = None
    exclusion_ratio: Float[Tensor, "prompt head"] | None = None
    exclusion_ratio_freq: Float[Tensor, "prompt head freq"] | None = None
    positional_share: Float[Tensor, "prompt head"] | None = None
    positional_share_freq: Float[Tensor, "prompt head freq"] | None = None


#: the per-prompt tensors of LayerScores, and whether a prompt's undefined value is left out
#: of the mean (a positional share 0/0 is undefined; a score never is)
PER_PROMPT = {f.name: f.name.startswith("positional_share") for f in fields(LayerScores)
              if f.name not in ("layer", "heads", "angles")}


def place_per_prompt(results: list[LayerScores], config: ScoreConfig, *, n_layers: int,
                     n_heads: int, n_freqs: int
                     ) -> tuple[dict[str, Tensor | None], Float[Tensor, "layer freq"]]:
    """Every layer's per-prompt scores placed in ``[n_prompts, n_layers, n_heads(, n_freqs)]``
    float64 tensors (``nan`` where not scored; ``None`` where not computed), and the angles
    ``[n_layers, n_freqs]``."""
    n_prompts = results[0].pos.shape[0]
    computed = {"pos": True, "sym": True, "pos_freq": config.per_frequency,
                "sym_freq": config.per_frequency, "exclusion_ratio": config.exclusion,
                "positional_share": config.exclusion,
                "exclusion_ratio_freq": config.exclusion and config.per_frequency,
                "positional_share_freq": config.exclusion and config.per_frequency}
    on_host = _to_host([getattr(r, name) for name in PER_PROMPT if computed[name]
                        for r in results])
    per_prompt: dict[str, Tensor | None] = {}
    for name in PER_PROMPT:
        if not computed[name]:
            per_prompt[name] = None
            continue
        shape = (n_prompts, n_layers, n_heads) + ((n_freqs,) if name.endswith("_freq") else ())
        full = torch.full(shape, float("nan"), dtype=torch.float64)
        for r in results:
            value = on_host.pop(0)
            if value is not None:  # a layer with fewer frequency ids fills the first ones
                freqs = (slice(value.shape[-1]),) * (value.ndim - 2)
                full[(slice(None), r.layer, r.heads) + freqs] = value
        per_prompt[name] = full
    angles = torch.full((n_layers, n_freqs), float("nan"), dtype=torch.float64)
    for r in results:
        angles[r.layer, : len(r.angles)] = r.angles.double().cpu()
    return per_prompt, angles


def _to_host(values: list[Tensor | None]) -> list[Tensor | None]:
    """``values`` as float64 CPU tensors, each device's moved in one copy (a copy per
    tensor makes a GPU wait for each)."""
    out: list[Tensor | None] = [None] * len(values)
    by_device: dict[torch.device, list[int]] = {}
    for i, value in enumerate(values):
        if value is not None:
            by_device.setdefault(value.device, []).append(i)
    for device, where in by_device.items():
        parts = [values[i].detach().double() for i in where]
        flat = torch.cat([p.reshape(-1) for p in parts]).cpu()
        for i, piece, part in zip(where, flat.split([p.numel() for p in parts]), parts):
            out[i] = piece.view(part.shape)
    return out


def mean_over_prompts(per_prompt: dict[str, Tensor | None], angles: Float[Tensor, "layer freq"],
                      config: ScoreConfig, *, layers: Sequence[int], n_tokens: int,
                      model_name: str = "") -> PosSymScores:
    """:class:`PosSymScores` from per-prompt scores (:func:`~lens_possym.scores.profile.per_prompt_scores`'
    first result; those of prompts of different lengths may be concatenated along the prompt
    axis): each score's mean over prompts, as :func:`~lens_possym.scores.swap_scores` takes
    it (a positional share that is undefined for a prompt is left out of its mean; a score
    never is)."""
    means = {name: None if per_prompt.get(name) is None else
             (per_prompt[name].nanmean(0) if skip_undefined else per_prompt[name].mean(0))
             for name, skip_undefined in PER_PROMPT.items()}
    return PosSymScores(**means, angles=angles, layers=list(layers),
                        pos_prompts=per_prompt["pos"], sym_prompts=per_prompt["sym"],
                        config=config, n_tokens=n_tokens, model_name=model_name)


def assemble(results: list[LayerScores], config: ScoreConfig, *, n_layers: int, n_heads: int,
             n_freqs: int, n_tokens: int, model_name: str) -> PosSymScores:
    """Every layer's scores placed in ``[n_layers, n_heads(, n_freqs)]`` tensors (``nan``
    where not scored), averaged over prompts."""
    per_prompt, angles = place_per_prompt(results, config, n_layers=n_layers, n_heads=n_heads,
                                          n_freqs=n_freqs)
    return mean_over_prompts(per_prompt, angles, config, layers=[r.layer for r in results],
                             n_tokens=n_tokens, model_name=model_name)
