"""RoPE as a positional scheme: a thin view of :class:`lens_possym.rope.RopeSpec`.

Everything RoPE-specific (geometry, probes, tables, the per-frequency cross-logit factors)
stays in :mod:`lens_possym.rope` and :mod:`lens_possym.scores.crosslogits`; this class
answers the scheme questions, its :meth:`Rope.cross_logits` included (the matrix of the
same factors the score engine scores RoPE layers from).
RoPE on some dims only (partial rotary) is the spec's tail, a NoPE part with angle 0;
RoPE on some heads only is :class:`HeadwiseRope`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from jaxtyping import Float
from torch import Tensor

from ..rope import RopeSpec
from ..rope.geometry import cross_factors
from .base import PositionalScheme
from .base import causal_visible
from .mla import complex_pairs

__all__ = ["Rope", "HeadwiseRope"]


@dataclass(frozen=True, eq=False)
class Rope(PositionalScheme):
    """RoPE on one layer; :attr:`spec` is its full geometry."""

    spec: RopeSpec = field(repr=False, default=None)
    name: str = "rope"
    site: str = "inside"

    @property
    def scale(self) -> float:  # type: ignore[override]
        return float(self.spec.scale)

    @property
    def window(self) -> int | None:  # type: ignore[override]
        return self.spec.window

    @property
    def has_frequencies(self) -> bool:
        return True

    @property
    def has_factors(self) -> bool:
        return True

    def frequency_angles(self) -> Tensor:
        return self.spec.angles

    def cross_logits(self, q: Float[Tensor, "batch head_index d_head"],
                     k: Float[Tensor, "batch pos head_index d_head"], query_position: int,
                     dtype: torch.dtype = torch.float64
                     ) -> Float[Tensor, "batch head_index pos pos"]:
        r"""``C[b, h, p, c] = softcap(s·⟨R(n) q, R(p) k_c⟩)`` from the *un-rotated* query
        at ``n`` (``[b, h, d]``) and keys (``[b, pos, h, d]``), with the model's own tables
        (:func:`lens_possym.rope.geometry.cross_factors`, the factors
        :class:`~lens_possym.scores.CrossLogitFactors` holds: this is its ``head_full()``).

        The score engine does not call it: it keeps RoPE's factors (``O(pos · freq)``) and
        scores every frequency from them; this is the same ``C`` as a matrix, for anything
        that wants a scheme's cross-logits whatever the scheme."""
        spec = self.spec
        n_pos = k.shape[1]
        cos, sin, x, y = self._factors(q, k, query_position, dtype)
        tables = torch.cat([cos, sin], dim=-1)                              # [p, 2F]
        factors = torch.cat([x, y], dim=-1).transpose(-1, -2)               # [b, h, 2F, c]
        full = (tables @ factors).mul_(spec.scale)
        if spec.softcap:
            full = spec.softcap * torch.tanh(full / spec.softcap)
        visible = causal_visible(query_position, n_pos, self.window).to(full.device)
        return full.masked_fill_(~visible[:, None], float("-inf"))

    def frequency_cross_logits(self, q: Float[Tensor, "batch head_index d_head"],
                               k: Float[Tensor, "batch pos head_index d_head"],
                               query_position: int, dtype: torch.dtype = torch.float64
                               ) -> Float[Tensor, "batch head_index freq pos pos"]:
        r"""``C_f[b, h, f, p, c] = s(\cos_{pf} x_{cf} + \sin_{pf} y_{cf})``, one per
        frequency id (a partial-rotary tail last): they sum to :meth:`cross_logits` before
        its softcap. ``CrossLogitFactors.frequency_full()`` of the same factors."""
        cos, sin, x, y = self._factors(q, k, query_position, dtype)
        x, y = x.transpose(-1, -2)[..., None, :], y.transpose(-1, -2)[..., None, :]
        terms = (cos.T[:, :, None] * x + sin.T[:, :, None] * y) * self.spec.scale
        visible = causal_visible(query_position, k.shape[1], self.window).to(terms.device)
        return terms.masked_fill(~visible[:, None], float("-inf"))

    def split_logits(self, split: Any) -> Any:
        """One term per frequency id, in the Hadamard form (content product times the
        Toeplitz kernel ``e^{i(n−m)θ_f}``)."""
        return split.rope(self)

    def _factors(self, q: Tensor, k: Tensor, query_position: int, dtype: torch.dtype
                 ) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        position = torch.tensor([query_position], device=k.device)
        return cross_factors(q, k, self.spec, position, dtype)


@dataclass(frozen=True, eq=False)
class HeadwiseRope(PositionalScheme):
    r"""RoPE on only some heads of a layer; the others are NoPE.

    A NoPE head is a RoPE head whose every angle is 0, so one formula covers both: with
    :math:`\theta_{h,f} = \theta_f` on the rotated heads and 0 on the others,

    .. math::

        C_f[p, c] = s\,\mathrm{Re}\big[q_{n,f}\,\overline{k_{c,f}}\,e^{i(n-p)\theta_{h,f}}\big],
        \qquad C = \sum_f C_f,

    and the per-frequency ids are the same on every head (on a NoPE head each id is a 2-D
    content part, which scores symbolic). Works on un-rotated ``q``/``k`` a caller provides.

    Attributes:
        inv_freq: ``[F]`` angles per position of the pairs (``d_head = 2F``).
        rope_heads: the heads that rotate.
        pairing: ``"half"`` or ``"adjacent"``.
    """

    inv_freq: Tensor = None
    rope_heads: tuple[int, ...] = ()
    pairing: str = "half"
    scale: float = 1.0
    window: int | None = None
    name: str = "headwise-rope"
    site: str = "inside"

    @property
    def has_frequencies(self) -> bool:
        return True

    def frequency_angles(self) -> Tensor:
        return self.inv_freq.detach().double().cpu()

    def head_angles(self, n_heads: int) -> Tensor:
        """``[head_index, freq]``: :attr:`inv_freq` on the rotated heads, 0 elsewhere."""
        rotated = torch.zeros(n_heads, dtype=torch.bool)
        rotated[list(self.rope_heads)] = True
        return torch.where(rotated[:, None], self.frequency_angles()[None], 0.0)

    def frequency_cross_logits(self, q: Tensor, k: Tensor, query_position: int) -> Tensor:
        """``C_f[b, h, f, p, c]`` from un-rotated ``q`` (``[b, h, d]``) and ``k``
        (``[b, pos, h, d]``)."""

        n_pos, n_heads = k.shape[1], k.shape[2]
        product = complex_pairs(q, self.pairing)[:, :, None] * \
            complex_pairs(k, self.pairing).conj().transpose(1, 2)          # [b, h, c, F]
        offset = query_position - torch.arange(n_pos, dtype=torch.float64)  # n − p
        angle = offset[None, :, None] * self.head_angles(n_heads)[:, None]  # [h, p, F]
        kernel = torch.polar(torch.ones_like(angle), angle).to(product.device)
        terms = (product[:, :, None] * kernel[None, :, :, None]).real * self.scale
        terms = terms.permute(0, 1, 4, 2, 3)                                # [b, h, F, p, c]
        visible = causal_visible(query_position, n_pos, self.window).to(terms.device)
        return terms.masked_fill(~visible[:, None], float("-inf"))

    def cross_logits(self, q: Tensor, k: Tensor, query_position: int) -> Tensor:
        return self.frequency_cross_logits(q, k, query_position).sum(2)

    def split_logits(self, split: Any) -> Any:
        """No split read from a model yet (the hooks' q and k are rotated on some heads)."""
        return split.unsupported(self)
