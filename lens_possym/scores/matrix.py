r"""The closed form for a layer that supplies its cross-logits as a matrix (any scheme).

A layer whose scheme has no per-frequency factors (ALiBi and other additive biases, NoPE,
absolute PE at a chosen site, MLA, RoPE on some heads) gives the score engine its
cross-logit matrix :math:`C[b, h, p, c]` (rows: position, columns: content), and per
frequency the terms :math:`C_f` where it has them (MLA: its RoPE pairs, then its content
part): a :class:`CrossLogitMatrix`. :func:`matrix_swap_scores` forms each swap's attention
row (the clean logits with the two groups' entries replaced by :math:`C[i, j]` and
:math:`C[j, i]`) with its softmax normaliser and compares the masses with the cosine the
re-run uses (``torch.nn.functional.cosine_similarity``), so exact and re-run agree to
rounding. RoPE layers give factors instead (:class:`~lens_possym.scores.CrossLogitFactors`,
whose ``head_full()`` is the same :math:`C`) and are scored by :mod:`.exact`'s kernel.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Callable

import torch
import torch.nn.functional as F
from jaxtyping import Bool, Float, Int
from torch import Tensor

from .config import ScoreConfig
from .exact import SwapScores
from .exclusion import Exclusion, exclusion_from_matrix
from .swaps import SwapSet, WeightedCosines

__all__ = ["CrossLogitMatrix", "matrix_swap_scores", "frequency_matrix_swap_scores",
           "add_swap_masses"]


@dataclass(eq=False)
class CrossLogitMatrix:
    """One layer's cross-logits as matrices, for chosen heads (``-inf`` where the query
    cannot see).

    Attributes:
        cross: ``[batch, head_index, pos, pos]`` whole-head :math:`C` (rows: position,
            columns: content), or ``None`` where only the frequency terms were asked for.
        visible: ``[pos]`` positions the query row may attend to.
        terms_of: computes the per-frequency terms ``[batch, head_index, freq, pos, pos]``
            when first asked (``None``: the scheme has none).
    """

    cross: Float[Tensor, "batch head_index pos pos"] | None
    visible: Bool[Tensor, "pos"]
    terms_of: Callable[[], Tensor] | None = None

    def head_full(self) -> Float[Tensor, "batch head_index pos pos"]:
        return self.cross

    @property
    def has_frequencies(self) -> bool:
        return self.terms_of is not None

    def frequency_full(self) -> Float[Tensor, "batch head_index freq pos pos"]:
        return self._terms

    @cached_property
    def _terms(self) -> Tensor:
        return self.terms_of()

    def swap_scores(self, swaps: SwapSet, config: ScoreConfig) -> SwapScores:
        """Every swap scored in closed form by :func:`matrix_swap_scores` (per frequency
        with ``config.per_frequency``: each term as a head of its own)."""
        pos, sym = matrix_swap_scores(self.head_full(), swaps, tau=config.tau)
        if not config.per_frequency:
            return SwapScores(pos, sym)
        return SwapScores(pos, sym, *frequency_matrix_swap_scores(self.frequency_full(), swaps,
                                                                   tau=config.tau))

    def exclusion(self, keys: Int[Tensor, "key"] | range, config: ScoreConfig
                  ) -> tuple[Exclusion, Exclusion | None]:
        """Theorem 1 over ``keys`` from the matrices' ``keys × keys`` blocks, per head and
        (``config.per_frequency``, where the scheme has terms) per frequency."""
        if isinstance(keys, range):
            keys = torch.arange(keys.start, keys.stop)
        block = (..., keys[:, None], keys[None, :])
        head = exclusion_from_matrix(self.head_full()[block])
        if not (config.per_frequency and self.has_frequencies):
            return head, None
        return head, exclusion_from_matrix(self.frequency_full()[block])


def matrix_swap_scores(cross: Float[Tensor, "batch head_index pos pos"], swaps: SwapSet, *,
                       tau: float = 1e-4, chunk: int = 256
                       ) -> tuple[Float[Tensor, "batch head_index"],
                                  Float[Tensor, "batch head_index"]]:
    """``(s_POS, s_SYM)`` of every head from its cross-logit matrix, all swaps at once.

    Each swap's attention row is the softmax of the clean logits with the two groups' entries
    replaced by ``C[first, second]`` and ``C[second, first]``; the masses on the groups (block
    means) are compared with the clean ones by cosine, as the re-run does.
    """
    logits = torch.diagonal(cross, dim1=-2, dim2=-1)                      # [b, h, p]
    clean = torch.softmax(logits, -1)
    acc = WeightedCosines()
    for start in range(0, swaps.n_swaps, chunk):
        first, second = swaps.pairs(slice(start, start + chunk))
        rows = logits[..., None, :].repeat(1, 1, len(first), 1)           # [b, h, s, p]
        index = torch.arange(len(first))[:, None]
        rows[..., index, first] = cross[..., first, second]
        rows[..., index, second] = cross[..., second, first]
        add_swap_masses(acc, torch.softmax(rows, -1), clean, first, second, tau)
    return acc.result()


def frequency_matrix_swap_scores(cross: Float[Tensor, "batch head_index freq pos pos"],
                                 swaps: SwapSet, *, tau: float = 1e-4
                                 ) -> tuple[Float[Tensor, "batch head_index freq"],
                                            Float[Tensor, "batch head_index freq"]]:
    """Per-frequency scores: each id's ``C_f`` scored as a head of its own (its own softmax),
    as RoPE's per-frequency scores are. E.g. MLA's RoPE pairs and its content part."""
    b, h, f = cross.shape[:3]
    pos, sym = matrix_swap_scores(cross.flatten(1, 2), swaps, tau=tau)
    return pos.view(b, h, f), sym.view(b, h, f)


def add_swap_masses(acc: WeightedCosines, after: Tensor, clean: Tensor, first: Tensor,
                    second: Tensor, tau: float) -> None:
    """Add each swap's weighted cosines to ``acc``, from the groups' mean attention:
    ``after`` ``[..., swap, pos]`` the attention rows after each swap, ``clean``
    ``[..., pos]`` before (torch's ``cosine_similarity``, as the re-run of any scheme)."""
    def mass(rows: Tensor, groups: Tensor) -> Tensor:                     # -> [..., swap]
        index = groups.to(rows.device).expand(*rows.shape[:-1], groups.shape[-1])
        return torch.gather(rows, -1, index).mean(-1)

    new = torch.stack([mass(after, first), mass(after, second)], -1)
    d1, d2 = clean[..., first].mean(-1), clean[..., second].mean(-1)
    pos = F.cosine_similarity(new, torch.stack([d1, d2], -1), dim=-1)
    sym = F.cosine_similarity(new, torch.stack([d2, d1], -1), dim=-1)
    acc.add((d1 - d2).abs() / tau, pos, sym)
