"""Tolerances set by a model's dtype, and the dtype the arithmetic around it is done in.

A model in bfloat16 or float16 computes its rotation tables, scores and patterns in that
dtype; lens-possym redoes the same steps to check itself against the model, so how close
the two can be is a property of the model's dtype, not a constant. Everything that
compares a recomputation with the model's own tensors asks here:

* :func:`model_tolerance` — for one step recomputed from the model's own (captured)
  inputs: the model rounds its output once or twice to its dtype, so the agreement is a few
  units of that dtype's rounding, relative to the largest magnitude compared.
* :func:`table_tolerance` — for the cos/sin tables, which the layer casts from float32 to
  its dtype: half a unit in the last place of the largest entry, with margin.
* :func:`compute_dtype` — the dtype lens-possym's own arithmetic is done in: the model's,
  at least float32 (a bfloat16 sum over 128 frequencies would lose the terms it sums).
"""

from __future__ import annotations

import torch

__all__ = ["model_tolerance", "table_tolerance", "compute_dtype", "is_half"]

_HALF = (torch.float16, torch.bfloat16)

#: floor for float32 and wider: Hugging Face computes softmax (and some rotations) in
#: float32 even in a float64 model.
_FLOOR = 1e-4


def is_half(dtype: torch.dtype | None) -> bool:
    """Whether ``dtype`` is a 16-bit float (bfloat16 or float16)."""
    return dtype in _HALF


def model_tolerance(*dtypes: torch.dtype | None) -> float:
    """Relative tolerance for a step the model computed in the narrowest of ``dtypes``.

    ``max(1e-4, 3·eps)``: 1e-4 in float32 and float64, 2.3e-2 in bfloat16 (eps = 2^-7),
    2.9e-3 in float16 (eps = 2^-10). Multiply by the largest magnitude compared (at least 1).
    """
    eps = max((torch.finfo(d).eps for d in dtypes if d is not None and d.is_floating_point),
              default=torch.finfo(torch.float32).eps)
    return max(_FLOOR, 3.0 * eps)


def table_tolerance(dtype: torch.dtype, scale: float = 1.0) -> float:
    """Absolute tolerance for cos/sin tables held in ``dtype`` (entries up to ``|scale|``).

    1e-5 in float32 and wider (the tables are computed in float32), the dtype's eps
    (twice its rounding of an entry near 1) in half precision.
    """
    eps = torch.finfo(dtype).eps if dtype.is_floating_point else 0.0
    return max(1e-5, eps) * max(1.0, abs(float(scale)))


def compute_dtype(dtype: torch.dtype | None) -> torch.dtype:
    """The model's dtype, at least float32: what lens-possym's own sums are done in."""
    if dtype is None or not dtype.is_floating_point:
        return torch.float32
    return torch.promote_types(dtype, torch.float32)
