"""Frequency bands: contiguous runs of frequency ids, fastest rotation first.

The one place frequency ids are split into bands: the selection grammar's band names
(``"high"``/``"mid"``/``"low"``, the thirds; ``"middle"`` is read as ``"mid"``), :func:`~lens_possym.interventions.band_sweep`,
:meth:`~lens_possym.PosSymScores.band_means` and the ``decompose`` command all use
:func:`band_partition`.
"""

from __future__ import annotations

import torch

from .errors import InvalidSelectionError

__all__ = ["BAND_NAMES", "BAND_ALIASES", "band_partition"]

BAND_NAMES = ("high", "mid", "low")
"""Names of the three bands of :func:`band_partition` ``(n, 3)``, fastest first."""

BAND_ALIASES = {"middle": "mid"}
"""Other spellings the grammar accepts for a band name."""


def band_partition(n_freqs: int, n_bands: int = 3) -> list[list[int]]:
    """Split frequency ids ``0..n_freqs-1`` into ``n_bands`` contiguous bands, fastest first.

    Band sizes differ by at most one (``torch.tensor_split``: the first ``n_freqs % n_bands``
    bands are one id longer); a partial-rotary tail (the last id) falls in the last,
    slowest band.

    Raises:
        InvalidSelectionError: ``n_bands`` outside ``1..n_freqs``.
    """
    if isinstance(n_bands, bool) or not isinstance(n_bands, int) or not 1 <= n_bands <= n_freqs:
        raise InvalidSelectionError(
            f"cannot split {n_freqs} frequency ids into {n_bands!r} bands; choose 1..{n_freqs}"
        )
    return [t.tolist() for t in torch.tensor_split(torch.arange(n_freqs), n_bands)]
