r"""Swap scores under any positional scheme, at a chosen *swap site*: :func:`site_swap_scores`.

The sites and the cross-logit matrix each gives are described in :mod:`.sources` (the
engine's per-layer protocol); the closed form for matrices is :mod:`.matrix`, the re-run
reference :mod:`.rerun`. :func:`site_swap_scores` is the score engine (:mod:`.engine`)
with the config as given: it is :func:`~lens_possym.scores.swap_scores` without the
default that drops per-frequency scores a model does not have.
"""

from __future__ import annotations

from typing import Any, Sequence

from .._inputs import ModelInput
from ..resolved import Resolved, resolve
from ..typing import HookedModel
from .config import ScoreConfig
from .engine import per_frequency_available, score_model
from .matrix import add_swap_masses, frequency_matrix_swap_scores, matrix_swap_scores  # noqa: F401
from .rerun import rerun_site_scores
from .results import PosSymScores
from .sources import site_cross_logits

#: the name tests/positions/test_schemes.py recomputes swaps with
_add = add_swap_masses

__all__ = ["per_frequency_available", "site_swap_scores", "site_cross_logits",
           "matrix_swap_scores", "frequency_matrix_swap_scores", "rerun_site_scores"]


def site_swap_scores(model: HookedModel | Resolved, input: ModelInput,
                     config: ScoreConfig | None = None, *,
                     layers: int | Sequence[int] | None = None,
                     heads: int | Sequence[int] | None = None, progress: bool = False,
                     **settings: Any) -> PosSymScores:
    """:func:`~lens_possym.scores.swap_scores` for any positional scheme and swap site,
    with ``config`` taken as it is.

    ``config.swap_site`` picks the site (:mod:`.sources`). Whole-head scores (and
    Theorem 1's exclusion ratio where a closed form exists); per-frequency scores at the
    ``"layer"`` site for RoPE layers and, in closed form, MLA layers (its RoPE pairs, then
    its content part as the last id).

    Raises:
        NoFrequenciesError: ``per_frequency=True`` on a layer whose scheme has no frequencies.
        InvalidSelectionError: ``per_frequency=True`` at a site other than ``"layer"``;
            ``method="exact"`` where the site has no closed form; other bad settings.
    """
    config = ScoreConfig.coerce(config, **settings)
    return score_model(resolve(model), input, config, layers, heads, progress)
