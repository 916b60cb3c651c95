""":class:`PosSymScores`: every head's place on the positional-symbolic plane, and a summary.

Per-head tensors are ``[n_layers, n_heads]`` and per-frequency ones
``[n_layers, n_heads, n_freqs]`` over *all* the model's layers, as in
``transformer_lens.head_detector``; layers or heads that were not scored hold ``nan``.
Layers with fewer frequency ids than others (none of the shipped models) are padded with
``nan``. Everything saves to and loads from one JSON file (``nan`` written as ``null``),
with the :class:`~lens_possym.scores.ScoreConfig` the scores were computed with.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import torch
from jaxtyping import Float
from torch import Tensor

from .._checks import boundary
from .._json import tensor_from_json, to_jsonable
from ..bands import band_partition
from ..errors import InvalidSelectionError, NonFiniteResultError, ResultsFileError
from ..results_io import ResultIO, head_frame, number
from .config import ScoreConfig

__all__ = ["PosSymScores", "pearson_r"]

_TENSORS = ("pos", "sym", "pos_freq", "sym_freq", "angles", "exclusion_ratio",
            "exclusion_ratio_freq", "positional_share", "positional_share_freq", "pos_prompts",
            "sym_prompts")
FORMAT = "lens-possym/scores@1"
#: tensors renamed since files were first written: old name -> name now (``balance`` said
#: nothing of which way it points; it is 1 for a positional head)
RENAMED = {"balance": "positional_share", "balance_freq": "positional_share_freq"}


def current_names(named: dict[str, Any]) -> dict[str, Any]:
    """``named`` with the keys of :data:`RENAMED` under their names now (a file written
    before the rename reads as one written after it; a key given both ways keeps the new)."""
    out = {RENAMED.get(k, k): v for k, v in named.items() if k not in RENAMED}
    for old, new in RENAMED.items():
        if old in named and new not in named:
            out[new] = named[old]
    return out


@boundary
def pearson_r(a: Tensor, b: Tensor, *, undefined: str = "raise") -> float:
    """Pearson correlation over the entries where both are finite.

    Undefined (fewer than two finite pairs, or one side constant): a
    :class:`~lens_possym.errors.NonFiniteResultError` saying why, or ``nan`` with
    ``undefined="nan"`` (for summaries that print it as such).
    """
    if undefined not in ("raise", "nan"):
        raise InvalidSelectionError(f"undefined must be 'raise' or 'nan', got {undefined!r}")
    keep = a.isfinite() & b.isfinite()
    x, y = a[keep].double(), b[keep].double()
    why = None
    if len(x) < 2:
        why = f"{len(x)} finite pair(s); it needs at least two"
    else:
        x, y = x - x.mean(), y - y.mean()
        denom = (x.norm() * y.norm()).item()
        if denom > 0:
            return (x @ y).item() / denom
        why = "one side is constant (no spread to correlate)"
    if undefined == "nan":
        return math.nan
    raise NonFiniteResultError(f"pearson_r is undefined here: {why}; pass "
                               "undefined='nan' to get nan instead")


@dataclass(repr=False)
class PosSymScores(ResultIO):
    """Positional and symbolic scores of a model's heads on a set of prompts.

    Attributes:
        pos, sym: ``[n_layers, n_heads]`` s_POS and s_SYM, means over prompts.
        pos_freq, sym_freq: ``[n_layers, n_heads, n_freqs]`` the same for each frequency id
            scored as a 2-D head, or ``None``.
        angles: ``[n_layers, n_freqs]`` angle per position of each frequency id (the tail,
            if any, has angle 0).
        exclusion_ratio: ``[n_layers, n_heads]`` Theorem 1's ``Var(λ) / bound``, mean over
            prompts (see :mod:`lens_possym.scores.exclusion`); ``exclusion_ratio_freq`` per
            frequency.
        positional_share: ``[n_layers, n_heads]`` ``S_sym / (S_pos + S_sym)`` of Theorem 1's
            sums, mean over prompts: 1 for logits that depend on position only, 0 for
            content only, so it points the way s_POS does (``S_sym`` sums how far the
            logits move when a key keeps its content and moves position, which only a
            position-dependent logit does); ``positional_share_freq`` per frequency. Files
            written before it was named so hold it as ``balance``; :meth:`load` reads them.
        pos_prompts, sym_prompts: ``[n_prompts, n_layers, n_heads]`` per-prompt scores.
        layers: the layers scored.
        config: how the scores were computed (:class:`~lens_possym.scores.ScoreConfig`,
            resolved: ``exclude_bos`` a bool, ``query_position`` an index).
        n_tokens: the prompts' length in tokens.
        task: task results on the same prompts (e.g. binding accuracy), if any.
        model_name: the model's name.
    """

    pos: Float[Tensor, "layer head_index"]
    sym: Float[Tensor, "layer head_index"]
    angles: Float[Tensor, "layer freq"]
    layers: list[int]
    pos_freq: Float[Tensor, "layer head_index freq"] | None = None
    sym_freq: Float[Tensor, "layer head_index freq"] | None = None
    exclusion_ratio: Float[Tensor, "layer head_index"] | None = None
    exclusion_ratio_freq: Float[Tensor, "layer head_index freq"] | None = None
    positional_share: Float[Tensor, "layer head_index"] | None = None
    positional_share_freq: Float[Tensor, "layer head_index freq"] | None = None
    pos_prompts: Float[Tensor, "prompt layer head_index"] | None = None
    sym_prompts: Float[Tensor, "prompt layer head_index"] | None = None
    config: ScoreConfig = field(default_factory=ScoreConfig)
    n_tokens: int = 0
    task: dict[str, Any] | None = None
    model_name: str = ""

    FORMAT = FORMAT

    @property
    def n_layers(self) -> int:
        return self.pos.shape[0]

    @property
    def n_heads(self) -> int:
        return self.pos.shape[1]

    @property
    def n_prompts(self) -> int:
        return 0 if self.pos_prompts is None else self.pos_prompts.shape[0]

    # ---- reading ------------------------------------------------------------------------

    def ranked_heads(self, by: str = "sym", k: int | None = None, *,
                     descending: bool = True, decimals: int | None = 2) -> list[tuple[int, int]]:
        """``(layer, head)`` pairs ordered by a score (``"pos"``, ``"sym"`` or ``"sym-pos"``),
        ties broken by the logits' :attr:`positional_share`.

        At the default ``tau = 1e-4`` the swap weights are nearly an argmax, so many heads
        saturate (s_POS or s_SYM at 1 on every prompt) and differ only in digits that say
        how nearly one-hot their attention is, not how positional they are. So the score
        is compared to ``decimals`` places (two: a hundredth, finer than one prompt's flip
        in a hundred prompts), and heads equal to that precision are ordered by
        :meth:`tie_break`: the positional share ``S_sym / (S_pos + S_sym)`` of Theorem 1's sums
        (1: the logits depend on position only, 0: on content only), for ``"pos"``
        higher first, for ``"sym"`` and ``"sym-pos"`` lower first. It is continuous, it
        is computed from every permutation of the keys (not from the one swap the weights
        pick), and it is what the scores measure, at the level of the logits (it
        correlates with s_POS at r = 0.81 over smollm2's heads, 0.90 over gemma-3-270m's).
        Without the positional share (``exclusion=False``) ties are broken by the other score (lower
        first). ``decimals=None`` compares the raw scores. Unscored heads are left out;
        ``descending=False`` reverses the whole order.
        """
        values = {"pos": self.pos, "sym": self.sym, "sym-pos": self.sym - self.pos}.get(by)
        if values is None:
            raise InvalidSelectionError(f"rank by 'pos', 'sym' or 'sym-pos', not {by!r}")
        flat = values.flatten().double()
        primary = flat if decimals is None else torch.round(flat * 10.0 ** decimals)
        second = self.tie_break(by).flatten().double()
        keep = (flat.isfinite()).nonzero().flatten()
        second = torch.where(second.isfinite(), second, torch.full_like(second, -math.inf))
        # lexicographic: sort by the tie-break, then (stably) by the score
        order = keep[torch.argsort(second[keep], descending=descending, stable=True)]
        order = order[torch.argsort(primary[order], descending=descending, stable=True)]
        pairs = [(int(i) // self.n_heads, int(i) % self.n_heads) for i in order]
        return pairs if k is None else pairs[:k]

    def tie_break(self, by: str = "sym") -> Float[Tensor, "layer head_index"]:
        """What :meth:`ranked_heads` orders equal scores by, larger first: the
        :attr:`positional_share` for ``"pos"``, ``1 − positional_share`` for ``"sym"`` and
        ``"sym-pos"``
        (without the positional share: ``−s_SYM`` for ``"pos"``, ``−s_POS`` otherwise)."""
        if by not in ("pos", "sym", "sym-pos"):
            raise InvalidSelectionError(f"rank by 'pos', 'sym' or 'sym-pos', not {by!r}")
        if self.positional_share is not None:
            return self.positional_share if by == "pos" else 1.0 - self.positional_share
        return -self.sym if by == "pos" else -self.pos

    def band_means(self, n_bands: int = 3) -> dict[str, Tensor]:
        """Per-head mean scores over frequency bands (ids split into ``n_bands`` equal runs,
        fastest first): ``{"pos": [n_layers, n_heads, n_bands], "sym": ...}``."""
        if self.pos_freq is None or self.sym_freq is None:
            raise InvalidSelectionError(
                "these scores have no per-frequency part (per_frequency=False); compute them "
                "with per_frequency=True")
        bands = band_partition(self.pos_freq.shape[-1], n_bands)
        return {name: torch.stack([t[..., idx].nanmean(-1) for idx in bands], -1)
                for name, t in (("pos", self.pos_freq), ("sym", self.sym_freq))}

    def summary(self) -> dict[str, Any]:
        """The headline numbers of paper A's LLM analysis, for these scores.

        * median s_POS and s_SYM over the heads of the first and the second half of the
          scored layers (paper A: 0.83 vs 0.56 for s_POS on gemma-2-2b-it);
        * Pearson r between s_POS and s_SYM over heads (paper A: -0.91);
        * the low- vs high-frequency contrast: mean over heads of s_SYM on the slowest
          third of frequency ids minus the fastest third, and the same for s_POS.
        """
        half = len(self.layers) // 2
        first, second = self.layers[:half], self.layers[half:]
        out: dict[str, Any] = {
            "n_heads_scored": int(self.pos.isfinite().sum()),
            "first_half_layers": [first[0], first[-1]] if first else [],
            "second_half_layers": [second[0], second[-1]] if second else [],
            "median_pos_first_half": _median(self.pos[first]),
            "median_pos_second_half": _median(self.pos[second]),
            "median_sym_first_half": _median(self.sym[first]),
            "median_sym_second_half": _median(self.sym[second]),
            "pearson_pos_sym": pearson_r(self.pos.flatten(), self.sym.flatten(),
                                         undefined="nan"),
        }
        if self.pos_freq is not None:
            bands = self.band_means(3)
            out["sym_low_minus_high_freq"] = _nanmean(bands["sym"][..., 2] - bands["sym"][..., 0])
            out["pos_low_minus_high_freq"] = _nanmean(bands["pos"][..., 2] - bands["pos"][..., 0])
        if self.exclusion_ratio is not None:
            out["median_exclusion_ratio"] = _median(self.exclusion_ratio)
        if self.task:
            out["task"] = self.task
        return out

    # ---- saving -------------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"format": FORMAT, "model_name": self.model_name,
                                "layers": list(self.layers), "config": self.config.to_dict(),
                                "n_prompts": self.n_prompts, "n_tokens": self.n_tokens,
                                "task": self.task}
        return to_jsonable(data | {name: getattr(self, name) for name in _TENSORS})

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "PosSymScores":
        """Read :meth:`to_dict`'s output (files with the older ``settings``, or with
        ``balance`` for :attr:`positional_share`, too)."""
        if data.get("format") != FORMAT:
            raise ResultsFileError(
                f"not a lens-possym scores file (format {data.get('format')!r}); load a "
                "scores.json that PosSymScores.save wrote")
        data = current_names(data)
        tensors = {name: None if data.get(name) is None else tensor_from_json(data[name])
                   for name in _TENSORS}
        if "config" in data:
            config = ScoreConfig.from_dict(data["config"])
        else:
            config = ScoreConfig.from_settings(data.get("settings") or {})
        n_tokens = data.get("n_tokens", (data.get("settings") or {}).get("n_tokens", 0))
        _check_shapes(tensors, data.get("layers"))
        return cls(layers=list(data["layers"]), config=config, n_tokens=n_tokens,
                   task=data.get("task"), model_name=data.get("model_name", ""), **tensors)

    # ``save``/``load`` (one JSON file), ``to_dataframe`` and the repr: ResultIO

    def _table(self):
        """Long format: ``pos``/``sym``/``exclusion_ratio``/``positional_share`` per head (no
        frequency), ``pos_freq``/``sym_freq``/``exclusion_ratio_freq``/``positional_share_freq``
        per frequency (``score`` names the tensor)."""
        names = ("pos", "sym", "exclusion_ratio", "positional_share", "pos_freq", "sym_freq",
                 "exclusion_ratio_freq", "positional_share_freq")
        return head_frame({name: getattr(self, name) for name in names}, self.angles)

    def _headline(self) -> list[str]:
        n_freqs = 0 if self.pos_freq is None else self.pos_freq.shape[-1]
        r = pearson_r(self.pos.flatten(), self.sym.flatten(), undefined="nan")
        out = [f"heads={int(self.pos.isfinite().sum())} of {self.n_layers}x{self.n_heads}",
               f"n_freqs={n_freqs}", f"n_prompts={self.n_prompts}",
               f"median_pos={number(_median(self.pos))}",
               f"median_sym={number(_median(self.sym))}",
               f"r(pos,sym)={number(r)}"]
        return out


def _damaged(what: str) -> ResultsFileError:
    return ResultsFileError(f"a damaged scores file: {what}; load a file that "
                            "PosSymScores.save wrote (or compute the scores again)")


def _check_shapes(tensors: dict[str, Tensor | None], layers: Any) -> None:
    """A loaded file's tensors must fit together: ``pos``/``sym`` ``[L, H]``, the
    per-frequency ones ``[L, H, F]`` with ``angles`` ``[L, F]``, per-prompt ones
    ``[P, L, H]``, and ``layers`` distinct indices below ``L``."""
    pos, sym = tensors.get("pos"), tensors.get("sym")
    if pos is None or sym is None:
        raise _damaged("it has no " + ("pos" if pos is None else "sym") + " scores")
    if pos.ndim != 2:
        raise _damaged(f"pos has shape {tuple(pos.shape)}, expected [n_layers, n_heads]")
    grid = tuple(pos.shape)
    n_layers = grid[0]
    for name in ("sym", "exclusion_ratio", "positional_share"):
        t = tensors.get(name)
        if t is not None and tuple(t.shape) != grid:
            raise _damaged(f"{name} has shape {tuple(t.shape)}, pos {grid}")
    angles = tensors.get("angles")
    if angles is None or angles.ndim != 2 or angles.shape[0] != n_layers:
        raise _damaged(f"angles has shape {None if angles is None else tuple(angles.shape)}, "
                   f"expected [{n_layers}, n_freqs]")
    for name in ("pos_freq", "sym_freq", "exclusion_ratio_freq", "positional_share_freq"):
        t = tensors.get(name)
        if t is not None and tuple(t.shape) != grid + (angles.shape[1],):
            raise _damaged(f"{name} has shape {tuple(t.shape)}, expected "
                       f"{list(grid + (angles.shape[1],))}")
    prompts = [tensors.get(n) for n in ("pos_prompts", "sym_prompts")]
    if (prompts[0] is None) != (prompts[1] is None):
        raise _damaged("it has per-prompt scores for one of pos and sym only")
    for name, t in zip(("pos_prompts", "sym_prompts"), prompts):
        if t is not None and (t.ndim != 3 or tuple(t.shape[1:]) != grid
                              or t.shape != prompts[0].shape):
            raise _damaged(f"{name} has shape {tuple(t.shape)}, expected [n_prompts, {grid[0]}, "
                       f"{grid[1]}]")
    if not isinstance(layers, list) or not all(
            isinstance(x, int) and not isinstance(x, bool) for x in layers):
        raise _damaged(f"layers is {layers!r}, expected a list of layer indices")
    if any(not 0 <= x < n_layers for x in layers) or len(set(layers)) != len(layers):
        raise _damaged(f"layers {layers} do not fit its {n_layers} layers (0..{n_layers - 1}, "
                   "each once)")


def _median(t: Tensor) -> float:
    finite = t[t.isfinite()]
    return float(finite.median()) if finite.numel() else math.nan


def _nanmean(t: Tensor) -> float:
    finite = t[t.isfinite()]
    return float(finite.mean()) if finite.numel() else math.nan
