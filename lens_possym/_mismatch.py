r"""Say *why* scores computed from a geometry disagree with the model's own scores.

Used by the probe in :func:`lens_possym.rope.rope_specs` and by
:meth:`lens_possym.decompose.FrequencyLogits.check`. The diagnosis rests on three facts:

* the model marks hidden keys with the dtype's minimum (or ``-inf``), so comparing which
  entries it hid with the causal/window mask read from the model finds a **mask/window**
  error without looking at any value;
* at zero offset (key position = query position) RoPE's rotation cancels,
  :math:`\langle R(n\theta)q, R(n\theta)k\rangle = \langle q, k\rangle`, so scores that agree
  there but not elsewhere point at the **angles** (frequencies, pairing, or their
  dependence on the input's length);
* scores off by one common factor point at the **scale**.
"""

from __future__ import annotations

import torch
from jaxtyping import Bool, Float, Int
from torch import Tensor

__all__ = ["model_hidden", "describe_mismatch"]


def model_hidden(scores: Tensor) -> Tensor:
    """Entries the model masked out: ``-inf`` or within a factor 2 of the dtype's minimum."""
    if not scores.is_floating_point():
        return torch.zeros_like(scores, dtype=torch.bool)
    return scores <= torch.finfo(scores.dtype).min / 2


def _rows(where: Tensor, qpos: Tensor) -> str:
    """The query rows (positions) where ``where`` ``[batch, head, query, key]`` holds."""
    rows = qpos[where.any(dim=(0, 1, 3))].tolist()
    if len(rows) > 6:
        return f"{len(rows)} query rows ({rows[0]}, {rows[1]}, ..., {rows[-1]})"
    return f"query row{'s' if len(rows) > 1 else ''} {', '.join(map(str, rows))}"


def describe_mismatch(
    ours: Float[Tensor, "batch head_index query_pos key_pos"],
    model: Float[Tensor, "batch head_index query_pos key_pos"],
    mask: Bool[Tensor, "query_pos key_pos"],
    query_positions: Int[Tensor, "query_pos"],
    key_positions: Int[Tensor, "key_pos"],
    tolerance: float,
    heads: list[int] | None = None,
    window: int | None = None,
) -> str | None:
    """``None`` if ``ours`` (unmasked, softcapped) matches ``model`` on the visible keys
    and both hide the same keys; otherwise one sentence: what disagrees, where, how much,
    and the likely cause (mask/window, angles, scale, or the q/k read).

    ``tolerance`` is absolute; ``heads`` names the query heads along ``head_index``.
    """
    mask = mask.to(ours.device)
    model = model.to(ours.device)
    hidden = model_hidden(model)
    visible = mask[None, None].expand_as(hidden)
    heads = heads if heads is not None else list(range(ours.shape[1]))
    qpos, kpos = query_positions.to(ours.device), key_positions.to(ours.device)

    extra_hidden = hidden & visible      # the model hides keys we count as visible
    extra_shown = ~hidden & ~visible     # the model shows keys we count as hidden
    if extra_hidden.any() or extra_shown.any():
        shown_offsets = (qpos[:, None] - kpos[None, :]).expand_as(hidden)[~hidden]
        reach = int(shown_offsets.max()) + 1 if shown_offsets.numel() else 0
        where = extra_hidden if extra_hidden.any() else extra_shown
        b, h, i, j = (int(x) for x in where.nonzero()[0])
        return (
            f"the model hides {int(extra_hidden.sum())} entries that the mask read from it "
            f"shows and shows {int(extra_shown.sum())} that it hides, in "
            f"{_rows(extra_hidden | extra_shown, qpos)} (first at query {int(qpos[i])}, "
            f"key {int(kpos[j])}, head {heads[h]}); the keys the model lets a query see reach "
            f"back at most {reach} positions, the window read is "
            f"{window if window else 'none'}. Likely cause: mask/window (a sliding window "
            "not read from the model, or one it applies differently)"
        )

    o, m = ours.double(), model.to(torch.float64)
    diff = (o - m).abs().masked_fill(~visible, 0.0)
    worst = float(diff.max()) if diff.numel() else 0.0
    if not worst > tolerance:
        return None
    bad = diff > tolerance
    b, h, i, j = (int(x) for x in (diff == diff.max()).nonzero()[0])
    zero_offset = (qpos[:, None] == kpos[None, :])[None, None].expand_as(visible) & visible
    diag_ok = bool((diff[zero_offset] <= tolerance).all()) if zero_offset.any() else False
    ov, mv = o[visible], m[visible]
    factor = float((ov * mv).sum() / (ov * ov).sum()) if float((ov * ov).sum()) > 0 else 1.0
    rescaled_ok = float((factor * ov - mv).abs().max()) <= tolerance if ov.numel() else False
    if rescaled_ok and abs(factor - 1.0) > 1e-3:
        cause = (f"scale (the model's scores are {factor:.6g} times the sum of the terms: the "
                 "layer's scale factor is read wrong)")
    elif diag_ok:
        cause = ("angles (scores agree at zero offset, where the rotation cancels, but not "
                 "elsewhere: the frequencies, their pairing, or their dependence on the "
                 "input length differ from what the model used)")
    else:
        cause = ("the q/k read (scores disagree even at zero offset, where no rotation acts: "
                 "the un-rotated q/k hooks, the scale or a step between them and the scores, "
                 "such as a softcap or norm, is not what the model does)")
    return (
        f"they differ by up to {worst:.3g} (tolerance {tolerance:.3g}) at "
        f"{int(bad.sum())} of {int(visible.sum())} visible entries, in {_rows(bad, qpos)} "
        f"(worst at query "
        f"{int(qpos[i])}, key {int(kpos[j])}, head {heads[h]}, prompt {b}). Likely cause: {cause}"
    )
