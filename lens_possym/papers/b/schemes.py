r"""Paper B's positional schemes, one small class per scheme: where position enters an
encoder, and what that decides about the model (the encoder asks its scheme's entry of
:data:`SCHEME_RULES`, never the scheme's name).

==============  ===========================================================================
``nope``        nowhere
``sinusoidal``  input: fixed interleaved sinusoids added to the token embedding
``learned``     input: a learned table ``[n_ctx, d_model]``
``alibi``       inside: ``B_h(δ) = -m_h|δ|``; intended slopes ``2^{-8(h+1)/H}``, faithful
                ``e^{-h/H}`` (the official ones)
``t5``          inside: a learned ``B_h`` per bucket; intended T5 log buckets, faithful one
                bucket per exact offset (the official "relative" table)
``rope``        inside: RoPE on the first ``rope_heads`` heads (all by default), NoPE on
                the rest; faithful with ``rope_heads=None`` also **adds** the absolute
                ``cat(sin, cos)`` encoding (official ``trans.py``), faithful with an explicit
                ``rope_heads`` does not (official ``partialrope.py``)
``mla``         inside: content part ``q^C_h·k^C_h`` from a compressed latent plus a
                decoupled RoPE part whose key ``k^R`` is shared by all heads; faithful: the
                query's RoPE part is shared too, the "rotation" is the official one (not
                norm-preserving), and a zero-initialised learned absolute table is added
``hybrid``      input and inside: sinusoids at the input and RoPE on every head
==============  ===========================================================================

Each :class:`SchemeRules` says: the input encoding (:meth:`~SchemeRules.input_encoding`),
the heads RoPE rotates (:meth:`~SchemeRules.rotated_heads`), the
:mod:`lens_possym.positions` object that describes a layer
(:meth:`~SchemeRules.positional`), and three flags: ``latent`` (MLA's attention, and the
official ``mla.py`` quirks that come with it), ``learned_bias`` (a trained bias table: T5),
``rotary`` (needs an even ``d_head``) and ``partial_heads`` (takes ``rope_heads``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Protocol

import torch
from jaxtyping import Float
from torch import Tensor

from ...positions import (
    MLA,
    Absolute,
    AdditiveBias,
    HeadwiseRope,
    NoPE,
    PositionalScheme,
    alibi_slopes,
)

__all__ = ["SCHEMES", "SCHEME_RULES", "SchemeRules", "Scheme", "sinusoidal_table",
           "faithful_mla_rotate"]

Scheme = Literal["nope", "sinusoidal", "learned", "alibi", "t5", "rope", "mla", "hybrid"]


class EncoderConfig(Protocol):
    """What the rules read of a :class:`~lens_possym.papers.b.encoder.EncoderConfig`."""

    n_ctx: int
    n_heads: int
    d_head: int
    d_rope: int
    rope_heads: int | None
    rope_base: float
    t5_buckets: int
    t5_max_distance: int

    @property
    def faithful(self) -> bool: ...

    @property
    def scale(self) -> float: ...


def _inv_freq(base: float, width: int) -> Float[Tensor, "freq"]:
    """``base^{-2i/width}`` for ``i < width/2`` (float64)."""
    return 1.0 / base ** (torch.arange(0, width, 2, dtype=torch.float64) / width)


@dataclass(frozen=True)
class SchemeRules:
    """What one scheme decides about an encoder (the default: position enters nowhere)."""

    name: str
    latent: bool = False          # MLA's latent attention
    learned_bias: bool = False    # a trained additive bias table (T5)
    rotary: bool = False          # RoPE on some head: d_head must be even
    partial_heads: bool = False   # takes rope_heads (RoPE on the first k heads only)

    def input_encoding(self, cfg: EncoderConfig) -> str | None:
        """What is added to the token embedding: ``"sinusoidal"``, ``"halves"``,
        ``"learned"`` or ``None``."""
        return None

    def rotated_heads(self, cfg: EncoderConfig) -> tuple[int, ...]:
        return ()

    def positional(self, cfg: EncoderConfig) -> PositionalScheme:
        """The :mod:`lens_possym.positions` object of one layer (scale ``cfg.scale``)."""
        return NoPE(scale=cfg.scale)

    def label(self, cfg: EncoderConfig) -> str:
        return self.name


@dataclass(frozen=True)
class _Absolute(SchemeRules):
    def input_encoding(self, cfg: EncoderConfig) -> str | None:
        return "learned" if self.name == "learned" else "sinusoidal"

    def positional(self, cfg: EncoderConfig) -> PositionalScheme:
        return Absolute(kind=self.name, scale=cfg.scale)


@dataclass(frozen=True)
class _ALiBi(SchemeRules):
    def positional(self, cfg: EncoderConfig) -> PositionalScheme:
        slopes = (torch.exp(-torch.arange(cfg.n_heads, dtype=torch.float64) / cfg.n_heads)
                  if cfg.faithful else alibi_slopes(cfg.n_heads))
        return AdditiveBias.alibi(slopes, symmetric=True, scale=cfg.scale)


@dataclass(frozen=True)
class _T5(SchemeRules):
    def buckets(self, cfg: EncoderConfig) -> tuple[int, int]:
        """``(buckets, max_distance)``: faithful one bucket per exact offset."""
        return ((4 * cfg.n_ctx, cfg.n_ctx) if cfg.faithful
                else (cfg.t5_buckets, cfg.t5_max_distance))

    def positional(self, cfg: EncoderConfig) -> PositionalScheme:
        buckets, max_distance = self.buckets(cfg)
        return AdditiveBias.t5(torch.zeros(cfg.n_heads, buckets), bidirectional=True,
                               num_buckets=buckets, max_distance=max_distance, scale=cfg.scale)


@dataclass(frozen=True)
class _RoPE(SchemeRules):
    """RoPE on the first ``rope_heads`` heads (``rope``), or on every head with sinusoids at
    the input (``hybrid``)."""

    def input_encoding(self, cfg: EncoderConfig) -> str | None:
        if self.name == "hybrid":
            return "sinusoidal"
        return "halves" if cfg.faithful and cfg.rope_heads is None else None

    def rotated_heads(self, cfg: EncoderConfig) -> tuple[int, ...]:
        if self.name == "hybrid" or cfg.rope_heads is None:
            return tuple(range(cfg.n_heads))
        return tuple(range(cfg.rope_heads))

    def positional(self, cfg: EncoderConfig) -> PositionalScheme:
        return HeadwiseRope(inv_freq=_inv_freq(cfg.rope_base, cfg.d_head),
                            rope_heads=self.rotated_heads(cfg), pairing="half", scale=cfg.scale)

    def label(self, cfg: EncoderConfig) -> str:
        return f"rope-k{cfg.rope_heads}" if cfg.rope_heads is not None else self.name


@dataclass(frozen=True)
class _MLA(SchemeRules):
    def input_encoding(self, cfg: EncoderConfig) -> str | None:
        return "learned" if cfg.faithful else None

    def positional(self, cfg: EncoderConfig) -> PositionalScheme:
        return MLA(inv_freq=_inv_freq(cfg.rope_base, cfg.d_rope), pairing="half",
                   scale=cfg.scale)


#: one entry per scheme, in the order of :data:`SCHEMES`
SCHEME_RULES: dict[str, SchemeRules] = {
    "nope": SchemeRules("nope"),
    "sinusoidal": _Absolute("sinusoidal"),
    "learned": _Absolute("learned"),
    "alibi": _ALiBi("alibi"),
    "t5": _T5("t5", learned_bias=True),
    "rope": _RoPE("rope", rotary=True, partial_heads=True),
    "mla": _MLA("mla", latent=True),
    "hybrid": _RoPE("hybrid", rotary=True),
}
SCHEMES = tuple(SCHEME_RULES)


def sinusoidal_table(n_ctx: int, d_model: int, *, layout: str = "interleaved",
                     base: float = 10000.0, dtype: torch.dtype = torch.float32
                     ) -> Float[Tensor, "pos d_model"]:
    r"""Absolute sinusoids: ``"interleaved"`` (``P[p, 2i] = sin(p ω_i)``, ``P[p, 2i+1] =
    cos(p ω_i)``, ``ω_i = base^{-2i/d}``, Vaswani et al.) or ``"halves"`` (``cat(sin, cos)``,
    the official "RoPE" model's additive encoding)."""
    omega = 1.0 / base ** (torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)
    angle = torch.arange(n_ctx, dtype=torch.float64)[:, None] * omega[None]
    if layout == "halves":
        return torch.cat([angle.sin(), angle.cos()], dim=-1)[:, :d_model].to(dtype)
    table = torch.zeros(n_ctx, d_model, dtype=torch.float64)
    table[:, 0::2] = angle.sin()
    table[:, 1::2] = angle.cos()[:, : d_model // 2]
    return table.to(dtype)


def faithful_mla_rotate(x: Float[Tensor, "batch pos ... d"], positions: Tensor,
                        base: float = 10000.0) -> Tensor:
    r"""The official MLA "rotation" (``mla.py``'s ``RotaryEmbedding``), copied as written.

    Its table is ``cat(sin(p ω), cos(p ω))`` (``d/2`` frequencies); it then takes
    ``sin = table[..., ::2]`` and ``cos = table[..., 1::2]``, which pairs the sine of one
    frequency with the sine (or cosine) of another, and returns
    ``cat(x_even·cos − x_odd·sin, x_even·sin + x_odd·cos)``. Since ``sin² + cos² ≠ 1``
    for those pairs, the map is not a rotation: norms change, and the logits of fixed
    ``q``, ``k`` are not Toeplitz (companion_code.md: ``‖R(p)q‖/‖q‖ = 0.84–0.92``).
    """
    d = x.shape[-1]
    omega = 1.0 / base ** (torch.arange(0, d, 2, dtype=torch.float64, device=x.device) / d)
    freqs = positions.to(x.device).double()[:, None] * omega[None]
    table = torch.cat([freqs.sin(), freqs.cos()], dim=-1).to(x.dtype)      # [pos, d]
    shape = [1] * x.dim()
    shape[1], shape[-1] = table.shape[0], d // 2
    sin, cos = table[:, ::2].reshape(shape), table[:, 1::2].reshape(shape)
    even, odd = x[..., ::2], x[..., 1::2]
    return torch.cat([even * cos - odd * sin, even * sin + odd * cos], dim=-1)
