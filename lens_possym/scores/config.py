""":class:`ScoreConfig`: every setting of :func:`~lens_possym.scores.swap_scores`, frozen.

A config is validated when it is made, prints and saves as JSON, and is stored in the
result (:attr:`PosSymScores.config <lens_possym.scores.PosSymScores>`) with the run's
resolved values (``exclude_bos`` as ``True``/``False``, ``query_position`` as an index),
so a saved profile says exactly how it was computed and can be recomputed with
``swap_scores(model, tokens, scores.config)``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal

from typing import TYPE_CHECKING

from .._json import JsonConfig, check_field_types
from ..errors import InvalidSelectionError
from ..positions.kinds import SWAP_SITES

if TYPE_CHECKING:
    import torch

#: Default bound of a whole-head cross-logit matrix (elements): 2**26, 512 MiB in float64.
MAX_MATRIX_ELEMENTS = 1 << 26
#: Largest number of elements of one intermediate tensor of the closed form (2**21 float64 =
#: 16 MiB); the work is cut into chunks of frequencies and of swaps to stay below it.
MAX_ELEMENTS = 1 << 21
#: Most blocks of a block swap (each block holds at least one key position).
MAX_BLOCKS = 1 << 16
#: most intermediates of ``max_elements`` numbers alive at once in one layer's exact scores
#: (the per-frequency loop's tables: logits, attention, two scaled exponentials, the
#: factor rows and their chunks; the swaps' masses and cosines)
LIVE_INTERMEDIATES = 16
#: ``[batch, heads, pos, freq]`` tables held for a whole layer, whatever the settings (the
#: factors x and y, their stacked copy, the decomposition check's terms)
FACTOR_TABLES = 6

__all__ = ["ScoreConfig", "METHODS", "SWAPS", "COSINES", "SWAP_SITES"]

METHODS = ("exact", "rerun")
SWAPS = ("token", "block")
COSINES = ("clamped", "scale_free")
_DTYPES = ("float64", "float32")
# torch.finfo(dtype).tiny, written out so that this module needs no torch (a command's
# --help reads its choices)
_SMALLEST_NORMAL = {"float64": 2.0 ** -1022, "float32": 2.0 ** -126}


@dataclass(frozen=True)
class ScoreConfig(JsonConfig):
    """How positional and symbolic scores are computed (paper A; paper C's procedure).

    Attributes:
        method: ``"exact"`` (closed form, all swaps at once) or ``"rerun"`` (swap the
            layer input and re-run the block per swap: the reference, ~100-1000x slower).
        swap: ``"token"`` (paper C's single-token swaps over all pairs before the query)
            or ``"block"`` (paper A's swaps of ``n_blocks`` contiguous blocks).
        n_blocks: number of blocks for block swaps (at least 2).
        tau: temperature of the swap weights ``softmax(|a_1 - a_2| / tau)`` (paper C: 1e-4).
        cosine: ``"clamped"`` (paper C's torch cosine, norms clamped at 1e-8: a swap that
            drains both positions scores about (0, 0)) or ``"scale_free"`` (the direction
            of whatever mass is left); they differ only on draining swaps
            (``docs/scores.md`` section 2).
        exclude_bos: leave position 0 out of the swaps; ``"auto"``: when every prompt
            starts with the tokenizer's BOS (an attention sink).
        query_position: the query row (negative counts from the end).
        per_frequency: also score each frequency id as a 2-D head.
        exclusion: also compute Theorem 1's ``Var / bound`` and positional share.
        check: verify per layer that the frequency terms add up to the model's scores.
        dtype: computation dtype of the exact method, ``"float64"`` or ``"float32"``
            (a ``torch.dtype`` is accepted and stored by name).
        batch_size: swaps per re-run batch (``method="rerun"``).
        max_elements: memory bound of the exact method's intermediates.
        max_matrix_elements: the largest whole-head cross-logit matrix ``[batch, heads,
            pos, pos]`` a layer may hold (elements; default 2**26, 512 MiB in float64:
            n = 4096 for 4 heads). Longer contexts compute its entries in pieces (swaps,
            rows and frequencies in chunks) instead: the same scores, to rounding, with
            memory bounded by this and ``max_elements`` (long contexts: n = 8192 and more).
        swap_site: where a swap exchanges contents: ``"layer"`` (rows of the layer input:
            Definition 2 where position enters inside the head), ``"content"`` (token
            embeddings only, position embeddings kept: absolute-PE models) or ``"input"``
            (token ids, the model re-run); see ``docs/positional_schemes.md``.
        nonfinite: what a ``nan`` or ``inf`` score of a head that was scored does:
            ``"raise"`` (default: :class:`~lens_possym.errors.NonFiniteResultError`, which
            names the heads; a model with non-finite weights, a setting the floats cannot
            hold) or ``"keep"`` (return it). Undefined values are not errors: a positional share
            ``0/0`` is ``nan`` by definition, and unscored heads are ``nan``.
    """

    method: Literal["exact", "rerun"] = "exact"
    swap: Literal["token", "block"] = "token"
    n_blocks: int = 8
    tau: float = 1e-4
    cosine: Literal["clamped", "scale_free"] = "clamped"
    exclude_bos: bool | Literal["auto"] = "auto"
    query_position: int = -1
    per_frequency: bool = True
    exclusion: bool = True
    check: bool = True
    dtype: str = "float64"
    batch_size: int = 64
    max_elements: int = MAX_ELEMENTS
    max_matrix_elements: int = MAX_MATRIX_ELEMENTS
    swap_site: Literal["layer", "content", "input"] = "layer"
    nonfinite: Literal["raise", "keep"] = "raise"

    def __post_init__(self) -> None:
        _choice("method", self.method, METHODS)
        _choice("swap kind", self.swap, SWAPS)
        _choice("cosine", self.cosine, COSINES)
        _choice("swap site", self.swap_site, SWAP_SITES)
        if not isinstance(self.dtype, str):      # a torch.dtype is stored by its name
            object.__setattr__(self, "dtype", str(self.dtype).replace("torch.", ""))
        _choice("dtype", self.dtype, _DTYPES)
        _choice("nonfinite", self.nonfinite, ("raise", "keep"))
        if isinstance(self.tau, bool) or not (isinstance(self.tau, (int, float))
                                              and math.isfinite(self.tau) and self.tau > 0):
            raise InvalidSelectionError(
                f"tau must be a positive finite number (paper C: 1e-4), got {self.tau!r}")
        tiny = _SMALLEST_NORMAL[self.dtype]
        if self.tau < tiny:
            # the swap weights are |a_1 - a_2| / tau: below the smallest normal number its
            # reciprocal overflows and every score would be nan
            raise InvalidSelectionError(
                f"tau={self.tau!r} is below the smallest normal {self.dtype} ({tiny:.3g}): "
                f"the swap weights |a_1 - a_2| / tau overflow; use tau >= {tiny:.3g} (tau -> 0 "
                "weights only the swaps of largest |a_1 - a_2|; 1e-4 already does)")
        if not (self.exclude_bos == "auto" or isinstance(self.exclude_bos, bool)):
            raise InvalidSelectionError(
                f"exclude_bos must be True, False or 'auto', not {self.exclude_bos!r}")
        for name, low in (("n_blocks", 2), ("batch_size", 1), ("max_elements", 1),
                          ("max_matrix_elements", 1)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise InvalidSelectionError(f"{name} must be an integer >= {low}, got {value!r}")
        if self.n_blocks > MAX_BLOCKS:
            raise InvalidSelectionError(
                f"n_blocks={self.n_blocks} is more blocks than keys in any context (at most "
                f"{MAX_BLOCKS}: each block holds at least one key); paper A uses 8")
        if isinstance(self.query_position, bool) or not isinstance(self.query_position, int):
            raise InvalidSelectionError(
                f"query_position must be an integer, got {self.query_position!r}")
        for name in ("per_frequency", "exclusion", "check"):
            if not isinstance(getattr(self, name), bool):
                raise InvalidSelectionError(f"{name} must be True or False")
        # what the checks above leave open: a value of another type
        check_field_types(self)

    @property
    def torch_dtype(self) -> "torch.dtype":
        import torch   # not at the top: the command line reads this module's choices

        return getattr(torch, self.dtype)

    def memory_bound(self, *, batch: int, heads: int, n_pos: int, n_freqs: int
                     ) -> dict[str, int]:
        """Bytes the exact method may hold for one layer above the model and the forward
        pass (docs/scale.md, "Memory, by the settings"; ``benchmarks/bench_memory.py``
        measures against it).

        Returns ``{"settings": ..., "factors": ..., "total": ...}``: what the settings bound
        (``max_matrix_elements`` + :data:`LIVE_INTERMEDIATES` x ``max_elements``, never
        more than the whole ``[batch, heads, pos, pos]`` matrix needs) and what they do
        not (:data:`FACTOR_TABLES` tables of ``[batch, heads, pos, freq]``).
        """
        for name, value in (("batch", batch), ("heads", heads), ("n_pos", n_pos),
                            ("n_freqs", n_freqs)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise InvalidSelectionError(f"{name} must be an integer >= 0, got {value!r}")
        item = 8 if self.dtype == "float64" else 4
        matrix = min(self.max_matrix_elements, batch * heads * n_pos * n_pos)
        settings = item * (matrix + LIVE_INTERMEDIATES * self.max_elements)
        factors = item * FACTOR_TABLES * batch * heads * n_pos * n_freqs
        return {"settings": settings, "factors": factors, "total": settings + factors}

    @classmethod
    def from_settings(cls, settings: dict) -> "ScoreConfig":
        """A config from the ``settings`` dict of scores files written before 0.2."""
        known = {k: v for k, v in settings.items()
                 if k in ("method", "swap", "tau", "exclude_bos", "query_position",
                          "per_frequency", "dtype")}
        if settings.get("n_blocks"):
            known["n_blocks"] = settings["n_blocks"]
        return cls(**known)


def _choice(what: str, value: object, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise InvalidSelectionError(
            f"unknown {what} {value!r}; use {' or '.join(repr(a) for a in allowed)}")
