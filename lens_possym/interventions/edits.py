r"""Pair edits: what an intervention does to one head's un-rotated query or key pairs.

Each edit is a :class:`~lens_possym.interventions.engine.PairEdit`,
``(x [batch, pos, d_head], head, positions) -> x'``, for the dims of some frequency ids;
:func:`~lens_possym.interventions.engine.compile_selection` turns edits into hooks.

* :func:`zero_edit`: ``q_f ← 0``;
* :func:`replace_edit`: ``q_f ← table[..., head, f]`` (a reference mean, or a source run);
* :func:`unrotate_edit`: ``q_f(p) ← R(-pθ_f) q_f(p)``, so that the model's own rotation
  lands at angle 0 (see :mod:`lens_possym.interventions.frequency`).
"""

from __future__ import annotations

from typing import Sequence

from torch import Tensor

from .._hooks import declare_hook
from .._precision import compute_dtype
from ..errors import InvalidSelectionError
from ..rope import RopeSpec, cos_sin
from .engine import PairEdit

__all__ = ["zero_edit", "replace_edit", "unrotate_edit"]


def _dims(spec: RopeSpec, freqs: Sequence[int]) -> list[int]:
    return [d for f in freqs for d in spec.dims_of(f)]


def zero_edit(spec: RopeSpec, freqs: Sequence[int]) -> PairEdit:
    dims = _dims(spec, freqs)

    def edit(x: Tensor, head: int, positions: Tensor) -> Tensor:
        out = x.clone()
        out[..., dims] = 0
        return out
    return declare_hook(edit, "position_free")


def replace_edit(spec: RopeSpec, freqs: Sequence[int], table: Tensor, what: str) -> PairEdit:
    """Replace the pairs by ``table[..., head, dims]``: ``table`` is ``[batch|1, pos|1, head, d]``."""
    dims = _dims(spec, freqs)

    def edit(x: Tensor, head: int, positions: Tensor) -> Tensor:
        source = table[:, :, head]
        n_pos = x.shape[1]
        if source.shape[1] not in (1, n_pos):
            if source.shape[1] > n_pos and what == "mean":
                source = source[:, :n_pos]
            else:
                raise InvalidSelectionError(
                    f"layer {spec.layer}: the {what} has {source.shape[1]} positions but this "
                    f"run has {n_pos}; "
                    + ("use a reference at least as long, or pooled means (per_position=False)"
                       if what == "mean" else "patch between runs of the same length")
                )
        if source.shape[0] not in (1, x.shape[0]):
            raise InvalidSelectionError(
                f"layer {spec.layer}: the {what} has batch {source.shape[0]} but this run has "
                f"batch {x.shape[0]}; use the same batch size or a single source prompt"
            )
        out = x.clone()
        out[..., dims] = source[..., dims].to(device=x.device, dtype=x.dtype).expand(
            x.shape[0], x.shape[1], len(dims))
        return out
    # one value for every position (pooled means) edits every row the same way; a table
    # per position (per-position means, a source run) edits each row by its position
    return declare_hook(edit, "position_free" if table.shape[1] == 1 else "rowwise")


def unrotate_edit(spec: RopeSpec, freqs: Sequence[int]) -> PairEdit:
    """Pre-apply ``R(-pθ_f)`` so that the model's own rotation lands at angle 0.

    The tail (θ = 0) is left as it is: it is never rotated.
    """
    rotated = [f for f in freqs if f < spec.n_rot]
    if spec.pairing == "half":
        dims_a, dims_b = rotated, [f + spec.n_rot for f in rotated]
    else:
        dims_a, dims_b = [2 * f for f in rotated], [2 * f + 1 for f in rotated]

    def edit(x: Tensor, head: int, positions: Tensor) -> Tensor:
        if not rotated:
            return x
        # This input's angles (LongRoPE / dynamic NTK depend on its length), unscaled.
        unit = spec.at_length(len(positions)).with_(attention_scaling=1.0)
        cos, sin = cos_sin(unit, positions)
        # in float32 or wider, rounded to the model's dtype once at the end
        dtype = compute_dtype(x.dtype)
        cos = cos[:, rotated].to(dtype)  # [pos, n] broadcast over batch
        sin = sin[:, rotated].to(dtype)
        a, b = x[..., dims_a].to(dtype), x[..., dims_b].to(dtype)
        out = x.clone()
        out[..., dims_a] = (a * cos + b * sin).to(x.dtype)
        out[..., dims_b] = (b * cos - a * sin).to(x.dtype)
        return out
    return declare_hook(edit, "rowwise" if rotated else "observe")
