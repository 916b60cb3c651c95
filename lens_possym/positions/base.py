r"""What a positional scheme is, as far as the analysis needs to know: :class:`PositionalScheme`.

Paper A's Definition 2 speaks of a logit function :math:`L(x_m, m, x_n, n)` with content
and position kept apart, whatever the encoding. A scheme answers three questions about one
attention layer:

* **where position enters** (:attr:`~PositionalScheme.site`): ``"inside"`` the head (RoPE,
  additive biases such as ALiBi or T5's, MLA's decoupled RoPE part, and NoPE, where it
  enters nowhere) or at the ``"input"`` (absolute encodings added to the token embedding).
  Inside, the layer input's rows *are* contents, and a layer-local row swap is Definition
  2's swap; at the input, a row carries its position with it (see ``docs/positional_schemes.md``).
* **the cross-logit matrix** :math:`C[p, c]`: the logit the query at :math:`n` gives the
  content of row :math:`c` placed at position :math:`p` (:meth:`~PositionalScheme.cross_logits`;
  its diagonal is the clean logit row). The closed-form swap scores need nothing else.
* **frequencies**: whether the logits split into per-frequency terms (RoPE, MLA's RoPE
  part); a scheme without them raises :class:`~lens_possym.errors.NoFrequenciesError`
  when asked for per-frequency anything.
"""

from __future__ import annotations

from typing import Any, Callable

import torch
from einops import einsum
from jaxtyping import Bool, Float, Int
from torch import Tensor

from .._attention import visible_mask
from .._checks import boundary
from ..errors import NoFrequenciesError
from ._bridge import keys_for_heads
from .kinds import SWAP_SITES, Site, SwapSite  # noqa: F401 - re-exported

__all__ = ["PositionalScheme", "Site", "SwapSite", "causal_visible"]



@boundary
def causal_visible(query_position: int, n_pos: int, window: int | None = None
                   ) -> Bool[Tensor, "pos"]:
    """Keys ``m`` the query at ``n`` sees: ``m <= n`` and, with a window, ``n - m < window``."""
    return visible_mask(torch.tensor([query_position]), torch.arange(n_pos), window)[0]


class PositionalScheme:
    """Base class of the schemes; subclasses set :attr:`name`, :attr:`site` and override
    :meth:`bias` (additive schemes) or :meth:`cross_logits` (multiplicative ones).

    Attributes:
        name: e.g. ``"nope"``, ``"alibi"``, ``"absolute"``, ``"rope"``.
        site: ``"inside"`` or ``"input"`` (module docstring).
        scale: factor on ``q·k``.
        window: sliding window of the layer, or ``None``.
    """

    name: str = "scheme"
    site: Site = "inside"
    scale: float = 1.0
    window: int | None = None

    @property
    def has_frequencies(self) -> bool:
        return False

    @property
    def has_factors(self) -> bool:
        """Whether the score engine reads this layer as rank-2 per-frequency factors from
        one capture pass (RoPE: :class:`~lens_possym.scores.CrossLogitFactors`) rather than
        as a cross-logit matrix (:meth:`hook_cross_logits`)."""
        return False

    def frequency_angles(self) -> Float[Tensor, "freq"]:
        """Angle per position of each frequency id; schemes without frequencies raise."""
        raise NoFrequenciesError(
            f"a {self.name} head has no frequencies, so there is nothing to score or ablate "
            f"per frequency; use whole-head scores (per_frequency=False)")

    def bias(self, query_positions: Int[Tensor, "query_pos"], key_positions: Int[Tensor, "key_pos"]
             ) -> Float[Tensor, "head_index query_pos key_pos"] | None:
        """The additive position term ``B[h, n, m]`` of the logits (Toeplitz up to a per-row
        constant), or ``None`` where position adds nothing inside the head."""
        return None

    def cross_logits(self, q: Float[Tensor, "batch head_index d_head"],
                     k: Float[Tensor, "batch pos head_index d_head"], query_position: int
                     ) -> Float[Tensor, "batch head_index pos pos"]:
        r"""``C[b, h, p, c] = s·⟨q_n, k_c⟩ + B[h, n, p]`` for un-positioned ``q``, ``k``
        (rows: position ``p``, columns: content ``c``); positions the query cannot see
        are ``-inf``.

        For an ``"input"``-site scheme this is the logit of a layer-input row ``c`` moved to
        ``p`` *with its position*: the layer-local swap (see :mod:`lens_possym.scores.sources`).
        """
        n_pos = k.shape[1]
        content = einsum(q, k, "batch head_index d_head, batch content head_index d_head"
                         " -> batch head_index content") * self.scale
        full = content[:, :, None, :].expand(-1, -1, n_pos, -1).clone()
        positions = torch.arange(n_pos)
        bias = self.bias(torch.tensor([query_position]), positions)
        if bias is not None:
            full = full + bias[:, 0, :, None].to(full)[None]
        visible = causal_visible(query_position, n_pos, self.window).to(full.device)
        return full.masked_fill(~visible[:, None], float("-inf"))

    def frequency_cross_logits(self, q: Float[Tensor, "batch head_index d_head"],
                               k: Float[Tensor, "batch pos head_index d_head"],
                               query_position: int
                               ) -> Float[Tensor, "batch head_index freq pos pos"]:
        """The per-frequency terms ``C_f[b, h, f, p, c]`` of :meth:`cross_logits` (they sum
        to it), for schemes with frequencies; the others raise. The score engine scores
        each as a head of its own (``per_frequency=True``)."""
        raise NoFrequenciesError(
            f"a {self.name} head has no frequencies, so there is nothing to score or ablate "
            f"per frequency; use whole-head scores (per_frequency=False)")

    def hook_cross_logits(self, q: Float[Tensor, "batch pos head_index d_head"],
                          k: Float[Tensor, "batch pos kv_head d_head"], heads: list[int],
                          n_heads: int, query_position: int, dtype: torch.dtype
                          ) -> tuple[Float[Tensor, "batch head pos pos"],
                                     Callable[[], Tensor] | None]:
        """``(C, terms_of)`` of ``heads`` for the query row at ``query_position``, from the
        layer's ``hook_q``/``hook_k`` as the bridge gives them (position not in them; ``k``
        with its key/value heads): :meth:`cross_logits` of ``q``, ``k`` in ``dtype``, and a
        function giving :meth:`frequency_cross_logits` (``None`` without frequencies)."""
        q_row = q[:, query_position][:, heads].to(dtype)
        keys = keys_for_heads(k, heads, n_heads).to(dtype)
        terms_of = None
        if self.has_frequencies:  # e.g. RoPE on some heads: one C_f per pair, on every head
            terms_of = lambda: self.frequency_cross_logits(q_row, keys, query_position)  # noqa
        return self.cross_logits(q_row, keys, query_position), terms_of

    def split_logits(self, split: Any) -> Any:
        """This layer's logits split into content and position terms: the scheme names
        its form and ``split`` (a :class:`lens_possym.toeplitz.LayerSplit`, which runs the
        model) computes it; :func:`lens_possym.toeplitz.toeplitz_terms` asks this. Here
        the additive form of :meth:`cross_logits`: ``s q·k`` plus :meth:`bias` where
        there is one (NoPE, ALiBi, T5, a bias table)."""
        return split.additive(self)

    def describe(self) -> str:
        where = "inside the head" if self.site == "inside" else "at the input"
        return f"{self.name} (position enters {where})"
