r"""MLA (DeepSeek-V2/V3): a content part with no position plus a decoupled RoPE part.

Multi-head latent attention gives each head a query in two parts, :math:`q^C_h` (no
position) and :math:`q^R_h` (rotated), and keys :math:`k^C_{h,m}` per head plus one RoPE key
:math:`k^R_m` **shared by all heads**. The logit is

.. math::

    L_h(n, m) = s\,\big(q^C_{h,n}\cdot k^C_{h,m}
                + \langle R(n)\,q^R_{h,n},\; R(m)\,k^R_m\rangle\big),

so position enters inside the head (site ``"inside"``) and

.. math::

    C[p, c] = s\,q^C_n\cdot k^C_c + \sum_f C_f[p, c], \qquad
    C_f[p, c] = s\,\mathrm{Re}\big[q^R_{n,f}\,\overline{k^R_{c,f}}\,e^{i(n-p)\theta_f}\big].

Frequency ids follow the partial-rotary convention of :mod:`lens_possym.rope`: ids
``0 .. F-1`` are the RoPE part's pairs (fastest first), and the content part is the last id,
with kernel 1 (a NoPE part). Because :math:`k^R` is shared, ablating or swapping it acts on
every head at once; the scores here swap the *content* of a key row, i.e. both its
:math:`k^C` and its :math:`k^R`, as swapping rows of the layer input does.

DeepSeek-V2 (adjacent pairs) and DeepSeek-V3 (half pairs, after its interleave) are read
through the bridge's ``hook_q``/``hook_k`` (``[batch, head, pos, d_content + d_rope]``,
the RoPE part already rotated, the key's RoPE part the same in every head) and un-rotated
here (:meth:`MLA.unrotate`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Literal, NoReturn

import torch
from einops import einsum
from jaxtyping import Float
from torch import Tensor

from ..errors import InvalidSelectionError
from .base import PositionalScheme, causal_visible

__all__ = ["MLA", "complex_pairs", "mla_parts"]


def complex_pairs(x: Float[Tensor, "... d"], pairing: Literal["half", "adjacent"]
                  ) -> Tensor:
    """The ``d/2`` pairs of ``x`` as complex numbers (``"half"``: dim ``f`` with ``f + d/2``)."""
    if x.shape[-1] % 2:
        raise InvalidSelectionError(f"a RoPE part needs an even width, got {x.shape[-1]}")
    if pairing == "half":
        a, b = x.chunk(2, dim=-1)
    else:
        a, b = x[..., 0::2], x[..., 1::2]
    return torch.complex(a.double(), b.double())


@dataclass(frozen=True, eq=False)
class MLA(PositionalScheme):
    """MLA's scheme: ``inv_freq`` (``[F]``) of the RoPE part, its ``pairing``, the scale."""

    inv_freq: Tensor = None
    pairing: Literal["half", "adjacent"] = "half"
    scale: float = 1.0
    window: int | None = None
    name: str = "mla"
    site: str = "inside"

    @property
    def has_frequencies(self) -> bool:
        return True

    def frequency_angles(self) -> Float[Tensor, "freq"]:
        """Angles of the RoPE pairs, then 0 for the content part (the last id)."""
        theta = self.inv_freq.detach().double().cpu()
        return torch.cat([theta, theta.new_zeros(1)])

    def frequency_cross_logits(self, q_content: Float[Tensor, "batch head_index d_content"],
                               q_rope: Float[Tensor, "batch head_index d_rope"],
                               k_content: Float[Tensor, "batch pos head_index d_content"],
                               k_rope: Float[Tensor, "batch pos d_rope"], query_position: int
                               ) -> Float[Tensor, "batch head_index freq pos pos"]:
        """``C_f[b, h, f, p, c]`` for the RoPE pairs and, last, the content part
        (rows: position, columns: content; ``-inf`` where the query cannot see)."""
        n_pos = k_content.shape[1]
        zq = complex_pairs(q_rope, self.pairing)                          # [b, h, F]
        zk = complex_pairs(k_rope, self.pairing)                          # [b, c, F]
        product = zq[:, :, None, :] * zk.conj()[:, None]                  # [b, h, c, F]
        offset = query_position - torch.arange(n_pos, dtype=torch.float64)
        kernel = torch.polar(torch.ones(n_pos, len(self.inv_freq), dtype=torch.float64),
                             offset[:, None] * self.inv_freq.double().cpu()[None])  # [p, F]
        rope = (product[:, :, None] * kernel.to(product.device)[None, None, :, None]).real
        rope = rope.permute(0, 1, 4, 2, 3) * self.scale                   # [b, h, F, p, c]
        content = einsum(q_content.double(), k_content.double(),
                         "batch head_index d_content, batch content head_index d_content"
                         " -> batch head_index content")
        content = (content * self.scale)[:, :, None, None].expand(-1, -1, 1, n_pos, -1)
        terms = torch.cat([rope, content], dim=2)
        visible = causal_visible(query_position, n_pos, self.window).to(terms.device)
        return terms.masked_fill(~visible[:, None], float("-inf"))

    def unrotate(self, x: Float[Tensor, "... pos d_rope"], positions: Tensor
                  ) -> Float[Tensor, "... pos d_rope"]:
        """Undo the rotation of a RoPE part read *after* rotation at ``positions``
        (computed in float64 from :attr:`inv_freq`; the layout is kept)."""
        z = complex_pairs(x, self.pairing)
        angle = positions.double().cpu()[:, None] * self.inv_freq.double().cpu()[None]
        z = z * torch.polar(torch.ones_like(angle), -angle).to(z.device)
        a, b = z.real, z.imag
        if self.pairing == "half":
            return torch.cat([a, b], dim=-1)
        return torch.stack([a, b], dim=-1).flatten(-2)

    def mla_cross_logits(self, q_content, q_rope, k_content, k_rope, query_position: int
                         ) -> Float[Tensor, "batch head_index pos pos"]:
        """The whole ``C[b, h, p, c]``: the sum of :meth:`frequency_cross_logits` over ids."""
        return self.frequency_cross_logits(q_content, q_rope, k_content, k_rope,
                                           query_position).sum(2)

    def hook_cross_logits(self, q: Float[Tensor, "batch head_index pos d_head"],
                          k: Float[Tensor, "batch head_index pos d_head"], heads: list[int],
                          n_heads: int, query_position: int, dtype: torch.dtype
                          ) -> tuple[Float[Tensor, "batch head pos pos"],
                                     Callable[[], Tensor]]:
        """``(C, terms_of)`` from the bridge's ``hook_q``/``hook_k`` (``[b, h, pos, d]``,
        RoPE parts rotated, :func:`mla_parts`): :meth:`mla_cross_logits` in ``dtype`` and
        its per-frequency terms. The content width is what the RoPE pairs leave."""
        d_content = q.shape[-1] - 2 * len(self.inv_freq)
        parts = mla_parts(q[:, heads], k[:, heads], d_content, self, query_position)
        return (self.mla_cross_logits(*parts, query_position).to(dtype),
                lambda: self.frequency_cross_logits(*parts, query_position))

    def split_logits(self, split: Any) -> Any:
        """Its RoPE pairs' per-frequency terms, then its content part."""
        return split.mla(self)

    def cross_logits(self, q, k, query_position) -> NoReturn:  # noqa: D102
        raise InvalidSelectionError(
            "MLA's keys come in two parts (per-head content, shared RoPE): use "
            "mla_cross_logits(q_content, q_rope, k_content, k_rope, query_position)")


def mla_parts(q: Float[Tensor, "batch head_index pos d_head"],
              k: Float[Tensor, "batch head_index pos d_head"], d_content: int, scheme: MLA,
              query_position: int) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """``(q_content, q_rope, k_content, k_rope)`` for :meth:`MLA.mla_cross_logits` from the
    bridge's ``hook_q``/``hook_k`` (RoPE parts rotated; the key's the same in every head),
    un-rotated and in float64: ``[b, h, dc]``, ``[b, h, dr]``, ``[b, pos, h, dc]``,
    ``[b, pos, dr]``."""
    q, k = q.double(), k.double()
    n_pos = k.shape[2]
    q_row = q[:, :, query_position]
    q_rope = scheme.unrotate(q_row[:, :, None, d_content:].transpose(1, 2),
                             torch.tensor([query_position]))[:, 0]
    k_rope = scheme.unrotate(k[:, 0, :, d_content:], torch.arange(n_pos))
    return q_row[..., :d_content], q_rope, k[..., :d_content].transpose(1, 2), k_rope
