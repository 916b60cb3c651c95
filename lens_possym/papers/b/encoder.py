r"""Paper B's encoder family: one bidirectional transformer, every positional scheme.

:class:`SchemeEncoder` is a ``HookedRootModule`` with TransformerLens hook names, so every
analysis in lens-possym (swap scores at any site, head ablation, the Toeplitz view) runs on
it; it describes its own layers through ``lens_possym_schemes()``, built from
:mod:`lens_possym.positions` (the same objects that describe pretrained models). Its
classifier reads the mean over positions of the last residual stream; the logits
``[batch, pos, n_classes]`` hold that one prediction at every position, so the shared
training loop (which reads the last position) trains it unchanged.

One block ``blocks.{L}`` (pre-LN), residual ``x`` ``[batch, pos, d_model]``:

.. math::

    u = \mathrm{LN}_1(x),\quad q_h = u W_Q^h + b_Q^h,\quad k_h = s W_K^h + b_K^h,\quad
    v_h = s W_V^h + b_V^h,\\
    S_h[n, m] = \tfrac{1}{\sqrt{d}}\,\langle R_h(n) q_{h,n},\, R_h(m) k_{h,m}\rangle + B_h(n - m),
    \quad z_h = \mathrm{softmax}_m(S_h)\,v_h,\\
    x \leftarrow x + \textstyle\sum_h z_h W_O^h + b_O,\qquad
    x \leftarrow x + \mathrm{MLP}(\mathrm{LN}_2(x))

with ``s = u`` (the **intended** variant: keys and values from the current stream) or
``s = x_0``, the layer-0 input (the **faithful** variant: the official code's cross-attention
onto the embeddings). No causal mask. Pads are ordinary tokens (attended to and mean-pooled
over, as in the official ``trans.py`` / ``partialrope.py``) except where ``pad_mask`` is on:
then pad keys get a score of ``-inf`` and the pooled mean runs over real tokens only (the
official ``mla.py``, hence the default of faithful MLA).

The **faithful** variant computes what the official classes compute (a test transcribes
their forward passes and compares in float64, single-head ablations and padded batches
included): ReLU MLPs in the ``trans.py`` / ``partialrope.py`` models and GELU in MLA
(``activation``), MLA's pad mask and masked pooling, no bias on MLA's output projection,
and, as options, PyTorch's default initialisation of the official modules (``init="torch"``)
and the official dropout 0.1 (``dropout``). Intended models use GELU, no pad mask and
``init="normal"``.

Schemes (:data:`SCHEMES`): where position enters each, and what its faithful variant
changes, is the table of :mod:`lens_possym.papers.b.schemes`.

RoPE pairs dims ``f`` and ``f + d/2`` (``"half"``) in both variants; the official code pairs
adjacent dims, which is the same model up to a fixed permutation of the learned projections.

The scheme tables are :mod:`lens_possym.positions` objects (``AdditiveBias``, ``HeadwiseRope``,
``MLA``...): the model's own biases come from their ``bias`` method and its rotation angles
from ``HeadwiseRope.head_angles``, and the tests check that the closed-form cross-logits of
those objects reproduce the model's attention.

Hooks: ``hook_embed``, ``hook_pos_embed`` (input schemes), ``blocks.{L}.hook_resid_pre``,
``hook_attn_out``, ``hook_resid_mid``, ``hook_mlp_out``, ``hook_resid_post``;
``blocks.{L}.attn.hook_q``/``hook_k``/``hook_v`` ``[batch, pos, head_index, d_head]``
(un-rotated; MLA: content part then RoPE part), ``hook_rot_q``/``hook_rot_k`` (rotated),
``hook_attn_scores``/``hook_pattern`` ``[batch, head_index, query_pos, key_pos]``,
``hook_z`` ``[batch, pos, head_index, d_head]``, ``hook_result``
``[batch, pos, head_index, d_model]``; ``hook_pooled`` ``[batch, d_model]``.
"""

from __future__ import annotations

import math
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Iterator, Literal

import torch
from einops import einsum
from jaxtyping import Bool, Float, Int
from torch import Tensor, nn
from torch.nn import functional as F
from transformer_lens import HookedRootModule
from transformer_lens.hook_points import HookPoint

from ...plugins import JsonConfig, batched_token_ids, check_field_types
from ...errors import InvalidSelectionError, ToyConfigError
from ...positions import AdditiveBias, HeadwiseRope, LayerScheme, PositionalScheme, t5_bucket
from .schemes import (SCHEME_RULES, SCHEMES, Scheme, SchemeRules, faithful_mla_rotate,
                      sinusoidal_table)

if TYPE_CHECKING:
    from ...training.tasks import Task

__all__ = ["EncoderConfig", "SchemeEncoder", "SCHEMES", "VARIANTS", "encoder_config_for",
           "sinusoidal_table", "faithful_mla_rotate", "faithful_mla_ablation"]

VARIANTS = ("intended", "faithful")
ACTIVATIONS = ("gelu", "relu")
INITS = ("normal", "torch")
Variant = Literal["intended", "faithful"]


def _rotate_half(x: Float[Tensor, "batch pos head_index d"], cos: Tensor, sin: Tensor) -> Tensor:
    """RoPE with ``"half"`` pairs (dim ``f`` with ``f + d/2``); ``cos``/``sin``
    ``[pos, head_index, d/2]``: a rotation of each pair by its angle (norm-preserving)."""
    a, b = x.chunk(2, dim=-1)
    return torch.cat([a * cos - b * sin, a * sin + b * cos], dim=-1)


@dataclass(frozen=True)
class EncoderConfig(JsonConfig):
    """Configuration of a :class:`SchemeEncoder` (validated on creation).

    Attributes:
        d_vocab: input vocabulary size.
        n_classes: classifier outputs (the task's labels are class ids below this).
        n_ctx: positions ``0..n_ctx-1``.
        scheme: one of :data:`SCHEMES`.
        variant: ``"intended"`` (the paper's description) or ``"faithful"`` (the official
            code's quirks; module docstring).
        n_layers, n_heads, d_model, d_head, d_ff: sizes (paper: 6, 16, 256, 16, 512).
        rope_heads: ``scheme="rope"``: RoPE on heads ``0..rope_heads-1`` only
            (``None``: every head).
        rope_base: base of the RoPE and sinusoid schedules.
        d_latent: MLA's compressed width (official 128 = d_model/2; default d_model/2).
        d_rope: MLA's decoupled RoPE width (official = d_head; default d_head).
        t5_buckets, t5_max_distance: intended T5 bucketing (bidirectional).
        seed: seed of the initial weights (private generator) and of dropout's masks.
        activation: the MLP's ``"gelu"`` or ``"relu"`` (``None``: the variant's: ReLU for
            faithful models other than MLA, as the official ``trans.py`` /
            ``partialrope.py``; GELU for MLA and every intended model).
        pad_mask: mask pad keys (score ``-inf``) and mean-pool over real tokens only
            (``None``: on for faithful MLA, as the official ``mla.py``; off otherwise).
        pad_token: the id that ``pad_mask`` treats as padding.
        init: ``"normal"`` (matrices ``N(0, 1/fan_in)``, biases 0) or ``"torch"`` (PyTorch's
            defaults for the official modules: ``U(±1/√fan_in)`` for linear weights and
            biases, ``N(0, 1)`` embeddings, ``N(0, 0.02²)`` relative-bias table).
        dropout: the official dropout rate (0.1) or 0: on attention weights, attention
            output and MLP output (MLA: after the MLP's activation and on its output),
            in training mode only; masks come from a private generator seeded by ``seed``
            and a call counter kept in the state dict (the global RNG is not touched and
            a resumed run repeats the uninterrupted one).
    """

    d_vocab: int
    n_classes: int
    n_ctx: int
    scheme: Scheme = "rope"
    variant: Variant = "intended"
    n_layers: int = 3
    n_heads: int = 8
    d_model: int = 64
    d_head: int = 8
    d_ff: int = 128
    rope_heads: int | None = None
    rope_base: float = 10000.0
    d_latent: int | None = None
    d_rope: int | None = None
    t5_buckets: int = 32
    t5_max_distance: int = 128
    seed: int = 0
    activation: str | None = None
    pad_mask: bool | None = None
    pad_token: int = 0
    init: str = "normal"
    dropout: float = 0.0

    def __post_init__(self) -> None:
        check_field_types(self, error=ToyConfigError)
        for name in ("d_vocab", "n_classes", "n_ctx", "n_layers", "n_heads", "d_model",
                     "d_head", "d_ff", "t5_buckets", "t5_max_distance"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ToyConfigError(f"{name} must be a positive integer, got {value!r}")
        if self.scheme not in SCHEMES:
            raise ToyConfigError(f"unknown scheme {self.scheme!r}; choose one of {SCHEMES}")
        if self.variant not in VARIANTS:
            raise ToyConfigError(f"variant must be one of {VARIANTS}, got {self.variant!r}")
        if self.rope_heads is not None:
            if not self.rules.partial_heads:
                raise ToyConfigError(
                    f"rope_heads applies to scheme 'rope' only, not {self.scheme!r}")
            if not 0 <= self.rope_heads <= self.n_heads:
                raise ToyConfigError(
                    f"rope_heads must be in 0..{self.n_heads} (n_heads), got {self.rope_heads}")
        if self.rules.rotary and self.d_head % 2:
            raise ToyConfigError(f"RoPE needs an even d_head, got {self.d_head}")
        if self.d_model % 2:
            raise ToyConfigError(f"d_model must be even (sinusoids), got {self.d_model}")
        if self.d_latent is None:
            object.__setattr__(self, "d_latent", max(1, self.d_model // 2))
        if self.d_rope is None:
            object.__setattr__(self, "d_rope", self.d_head)
        if self.d_latent < 1 or self.d_rope < 2 or self.d_rope % 2:
            raise ToyConfigError(
                f"d_latent must be >= 1 and d_rope even and >= 2, got {self.d_latent}, "
                f"{self.d_rope}")
        if not self.rope_base > 1:
            raise ToyConfigError(f"rope_base must be > 1, got {self.rope_base}")
        if self.activation is None:
            object.__setattr__(self, "activation",
                               "relu" if self.faithful and not self.rules.latent else "gelu")
        if self.activation not in ACTIVATIONS:
            raise ToyConfigError(
                f"activation must be one of {ACTIVATIONS}, got {self.activation!r}")
        if self.pad_mask is None:
            object.__setattr__(self, "pad_mask", self.faithful and self.rules.latent)
        if not isinstance(self.pad_mask, bool):
            raise ToyConfigError(f"pad_mask must be True, False or None, got {self.pad_mask!r}")
        if not isinstance(self.pad_token, int) or isinstance(self.pad_token, bool) \
                or not 0 <= self.pad_token < self.d_vocab:
            raise ToyConfigError(
                f"pad_token must be an id in 0..{self.d_vocab - 1}, got {self.pad_token!r}")
        if self.init not in INITS:
            raise ToyConfigError(f"init must be one of {INITS}, got {self.init!r}")
        if not isinstance(self.dropout, (int, float)) or not 0 <= self.dropout < 1:
            raise ToyConfigError(f"dropout must be in [0, 1), got {self.dropout!r}")
        object.__setattr__(self, "dropout", float(self.dropout))

    # ---- derived ------------------------------------------------------------------------

    @property
    def rules(self) -> SchemeRules:
        """What the scheme decides about the model (:data:`~.schemes.SCHEME_RULES`)."""
        return SCHEME_RULES[self.scheme]

    @property
    def faithful(self) -> bool:
        return self.variant == "faithful"

    @property
    def scale(self) -> float:
        width = self.d_head + (self.d_rope if self.rules.latent else 0)
        return 1.0 / math.sqrt(width)

    @property
    def input_encoding(self) -> str | None:
        """What is added to the token embedding: ``"sinusoidal"``, ``"halves"`` (faithful
        RoPE), ``"learned"`` (also faithful MLA, zero-initialised) or ``None``."""
        return self.rules.input_encoding(self)

    @property
    def rotated_heads(self) -> tuple[int, ...]:
        return self.rules.rotated_heads(self)

    @property
    def label(self) -> str:
        """A short name: ``"rope"``, ``"rope-k2"``, ``"mla"``... (variant not included)."""
        return self.rules.label(self)

    # to_dict/from_dict and replace: JsonConfig


def _listened(*points: HookPoint) -> bool:
    """Whether any hook (forward, pre-forward or backward) is attached to ``points``."""
    return any(p._forward_hooks or p._forward_pre_hooks or p._backward_hooks
               or p.fwd_hooks or p.bwd_hooks for p in points)


def _fused_attention(rq: Tensor, rk: Tensor, v: Tensor, bias: Tensor | None,
                     key_mask: Tensor | None, scale: float
                     ) -> Float[Tensor, "batch pos head_index d_head"]:
    """``softmax(scale·rq·rkᵀ + bias, masked) v`` by ``scaled_dot_product_attention`` (a
    training step about 1.6x faster on a CPU core than with the written-out path, which runs whenever a hook reads
    the scores or the pattern; a test checks that both give the same logits and gradients)."""
    mask = None if bias is None else bias.to(rq.dtype)[None]
    if key_mask is not None:
        pads = torch.zeros(key_mask.shape, dtype=rq.dtype, device=rq.device)
        pads = pads.masked_fill(~key_mask, float("-inf"))[:, None, None, :]
        mask = pads if mask is None else mask + pads
    z = F.scaled_dot_product_attention(rq.transpose(1, 2), rk.transpose(1, 2),
                                       v.transpose(1, 2), attn_mask=mask, scale=scale)
    return z.transpose(1, 2)


class _Attention(nn.Module):
    """Multi-head attention with the layer's scheme (module docstring)."""

    def __init__(self, cfg: EncoderConfig, layer: int, scheme: PositionalScheme):
        super().__init__()
        self.cfg, self.layer, self.scheme = cfg, layer, scheme
        h, dm, dh = cfg.n_heads, cfg.d_model, cfg.d_head
        self.mla = cfg.rules.latent
        if self.mla:
            dl, dr = cfg.d_latent, cfg.d_rope
            self.W_DKV = nn.Parameter(torch.empty(dm, dl))
            self.W_DQ = nn.Parameter(torch.empty(dm, dl))
            self.W_UK = nn.Parameter(torch.empty(h, dl, dh))
            self.W_UV = nn.Parameter(torch.empty(h, dl, dh))
            self.W_UQ = nn.Parameter(torch.empty(h, dl, dh))
            self.W_KR = nn.Parameter(torch.empty(dm, dr))
            # intended: one RoPE query part per head; faithful: one shared by all heads
            self.W_QR = nn.Parameter(torch.empty(1 if cfg.faithful else h, dl, dr))
            self.hook_latent_q = HookPoint()
            self.hook_latent_kv = HookPoint()
        else:
            self.W_Q = nn.Parameter(torch.empty(h, dm, dh))
            self.W_K = nn.Parameter(torch.empty(h, dm, dh))
            self.W_V = nn.Parameter(torch.empty(h, dm, dh))
            self.b_Q = nn.Parameter(torch.zeros(h, dh))
            self.b_K = nn.Parameter(torch.zeros(h, dh))
            self.b_V = nn.Parameter(torch.zeros(h, dh))
        self.W_O = nn.Parameter(torch.empty(h, dh, dm))
        if self.mla and cfg.faithful:  # the official out_proj has no bias: a fixed zero
            self.register_buffer("b_O", torch.zeros(dm), persistent=False)
        else:
            self.b_O = nn.Parameter(torch.zeros(dm))
        positions = torch.arange(cfg.n_ctx)
        if cfg.rules.learned_bias:
            # bucket of every (query n, key m): T5's of m − n; faithful: one per exact offset
            buckets, max_distance = cfg.rules.buckets(cfg)
            self.t5_table = nn.Parameter(torch.zeros(h, buckets))
            index = t5_bucket(positions[None, :] - positions[:, None], bidirectional=True,
                              num_buckets=buckets, max_distance=max_distance)
            self.register_buffer("t5_index", index, persistent=False)
        elif isinstance(scheme, AdditiveBias):
            self.register_buffer("fixed_bias", scheme.bias(positions, positions),
                                 persistent=False)
        # fixed tables are kept in float64 and cast where used, so a float64 model is
        # float64 throughout (not float32 tables cast up)
        if isinstance(scheme, HeadwiseRope):
            angle = positions.double()[:, None, None] * scheme.head_angles(h)[None]  # [p,h,F]
            self.register_buffer("rot_cos", angle.cos(), persistent=False)
            self.register_buffer("rot_sin", angle.sin(), persistent=False)
        if self.mla and not cfg.faithful:
            angle = positions.double()[:, None] * scheme.inv_freq.double()[None]     # [p, F]
            self.register_buffer("rot_cos", angle.cos()[:, None], persistent=False)
            self.register_buffer("rot_sin", angle.sin()[:, None], persistent=False)
        for name in ("hook_q", "hook_k", "hook_v", "hook_rot_q", "hook_rot_k",
                     "hook_attn_scores", "hook_pattern", "hook_z", "hook_result"):
            setattr(self, name, HookPoint())

    def bias(self, n: int) -> Float[Tensor, "head_index pos pos"] | None:
        """The additive ``B_h(n - m)`` for ``n`` positions (``None``: none)."""
        if self.cfg.rules.learned_bias:
            return self.t5_table[:, self.t5_index[:n, :n]]
        if hasattr(self, "fixed_bias"):
            return self.fixed_bias[:, :n, :n]
        return None

    def _rotation(self, n: int, like: Tensor) -> tuple[Tensor, Tensor]:
        return self.rot_cos[:n].to(like.dtype), self.rot_sin[:n].to(like.dtype)

    def _qkv(self, u: Tensor, s: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
        """``(q, k, v, rot_q, rot_k)``, each ``[batch, pos, head_index, width]``."""
        project = "batch pos d_model, head_index d_model d_head -> batch pos head_index d_head"
        n, h = u.shape[1], self.cfg.n_heads
        if not self.mla:
            q = self.hook_q(einsum(u, self.W_Q, project) + self.b_Q)
            k = self.hook_k(einsum(s, self.W_K, project) + self.b_K)
            v = self.hook_v(einsum(s, self.W_V, project) + self.b_V)
            if hasattr(self, "rot_cos"):
                cos, sin = self._rotation(n, q)
                return q, k, v, self.hook_rot_q(_rotate_half(q, cos, sin)), \
                    self.hook_rot_k(_rotate_half(k, cos, sin))
            return q, k, v, self.hook_rot_q(q), self.hook_rot_k(k)
        latent = "batch pos d_latent, head_index d_latent d_head -> batch pos head_index d_head"
        c_q = self.hook_latent_q(u @ self.W_DQ)
        c_kv = self.hook_latent_kv(u @ self.W_DKV)
        q_c, k_c = einsum(c_q, self.W_UQ, latent), einsum(c_kv, self.W_UK, latent)
        v = self.hook_v(einsum(c_kv, self.W_UV, latent))
        q_r = einsum(c_q, self.W_QR, latent).expand(-1, -1, h, -1)      # [b, p, h, dr]
        k_r = (u @ self.W_KR)[:, :, None].expand(-1, -1, h, -1)         # shared key part
        q = self.hook_q(torch.cat([q_c, q_r], dim=-1))
        k = self.hook_k(torch.cat([k_c, k_r], dim=-1))
        if self.cfg.faithful:
            positions = torch.arange(n, device=u.device)
            rq_r = faithful_mla_rotate(q_r, positions, self.cfg.rope_base)
            rk_r = faithful_mla_rotate(k_r, positions, self.cfg.rope_base)
        else:
            cos, sin = self._rotation(n, q_r)
            rq_r, rk_r = _rotate_half(q_r, cos, sin), _rotate_half(k_r, cos, sin)
        rot_q = self.hook_rot_q(torch.cat([q_c, rq_r], dim=-1))
        rot_k = self.hook_rot_k(torch.cat([k_c, rk_r], dim=-1))
        return q, k, v, rot_q, rot_k

    def forward(self, u: Float[Tensor, "batch pos d_model"], s: Float[Tensor, "batch pos d_model"],
                key_mask: Bool[Tensor, "batch pos"] | None = None,
                drop: "_Dropout | None" = None) -> Float[Tensor, "batch pos d_model"]:
        return self._out(self.heads(u, s, key_mask, drop))

    def heads(self, u: Float[Tensor, "batch pos d_model"], s: Float[Tensor, "batch pos d_model"],
              key_mask: Bool[Tensor, "batch pos"] | None = None, drop: "_Dropout | None" = None
              ) -> Float[Tensor, "batch pos head_index d_head"]:
        """The heads' outputs ``z`` (what ``hook_z`` returns); :meth:`forward` is
        ``_out(heads(...))``."""
        n = u.shape[1]
        q, k, v, rq, rk = self._qkv(u, s)
        bias = self.bias(n)
        pattern_dropout = drop is not None and not self.mla  # official trans.py: on the weights
        if not pattern_dropout and not _listened(self.hook_attn_scores, self.hook_pattern):
            # nobody reads the scores or the pattern: one fused kernel, same function
            return self.hook_z(_fused_attention(rq, rk, v, bias, key_mask, self.cfg.scale))
        scores = einsum(rq * self.cfg.scale, rk, "batch query_pos head_index d, batch key_pos "
                        "head_index d -> batch head_index query_pos key_pos")
        if bias is not None:
            scores = scores + bias.to(scores)[None]
        if key_mask is not None:  # official mla.py: masked_fill(attention_mask == 0, -inf)
            scores = scores.masked_fill(~key_mask[:, None, None, :], float("-inf"))
        scores = self.hook_attn_scores(scores)
        pattern = self.hook_pattern(torch.softmax(scores, dim=-1))
        if pattern_dropout:
            pattern = drop(pattern)
        return self.hook_z(einsum(pattern, v, "batch head_index query_pos key_pos, batch key_pos "
                                  "head_index d_head -> batch query_pos head_index d_head"))

    def _out(self, z: Float[Tensor, "batch pos head_index d_head"]
             ) -> Float[Tensor, "batch pos d_model"]:
        if self.hook_result.fwd_hooks:  # per-head outputs only when someone listens
            result = self.hook_result(einsum(z, self.W_O, "batch pos head_index d_head, "
                                             "head_index d_head d_model -> batch pos head_index "
                                             "d_model"))
            return result.sum(dim=2) + self.b_O
        return einsum(z, self.W_O, "batch pos head_index d_head, head_index d_head d_model"
                      " -> batch pos d_model") + self.b_O


class _Dropout:
    """Dropout for one forward pass, from a private generator seeded by ``seed`` (the global
    RNG is not touched); each call draws the next mask."""

    def __init__(self, p: float, seed: int, device: torch.device):
        self.p = p
        self.gen = torch.Generator(device=device).manual_seed(seed)

    def __call__(self, x: Tensor) -> Tensor:
        keep = torch.empty_like(x).bernoulli_(1.0 - self.p, generator=self.gen)
        return x * keep.div_(1.0 - self.p)


class _Block(nn.Module):
    def __init__(self, cfg: EncoderConfig, layer: int, scheme: PositionalScheme):
        super().__init__()
        self.cfg = cfg
        self.ln1 = nn.LayerNorm(cfg.d_model)
        self.attn = _Attention(cfg, layer, scheme)
        self.ln2 = nn.LayerNorm(cfg.d_model)
        act = nn.ReLU() if cfg.activation == "relu" else nn.GELU()
        self.mlp = nn.Sequential(nn.Linear(cfg.d_model, cfg.d_ff), act,
                                 nn.Linear(cfg.d_ff, cfg.d_model))
        for name in ("hook_resid_pre", "hook_attn_out", "hook_resid_mid", "hook_mlp_out",
                     "hook_resid_post"):
            setattr(self, name, HookPoint())

    def _mlp(self, x: Tensor, drop: _Dropout | None) -> Tensor:
        hidden = self.mlp[1](self.mlp[0](x))
        if drop is not None and self.cfg.rules.latent:  # official mla.py: after the GELU
            hidden = drop(hidden)
        out = self.mlp[2](hidden)
        return out if drop is None else drop(out)

    def forward(self, x: Tensor, memory: Tensor, key_mask: Tensor | None = None,
                drop: _Dropout | None = None) -> Tensor:
        return self.finish(x, self.attn(*self._sources(x, memory), key_mask, drop), drop)

    def _sources(self, x: Tensor, memory: Tensor) -> tuple[Tensor, Tensor]:
        """``(u, s)``: the queries' input ``LN_1(x)`` and the keys' and values'."""
        u = self.ln1(x)
        # faithful (not MLA): K/V from the layer-0 input, not layer-normed (official trans.py)
        return u, memory if self.cfg.faithful and not self.cfg.rules.latent else u

    def heads(self, x: Tensor, memory: Tensor, key_mask: Tensor | None = None
              ) -> Float[Tensor, "batch pos head_index d_head"]:
        """The attention's ``z`` (``hook_z``) for the block input ``x`` (no dropout): what
        :meth:`forward` feeds ``attn._out`` and then :meth:`finish`."""
        return self.attn.heads(*self._sources(x, memory), key_mask)

    def finish(self, x: Tensor, attn_out: Tensor, drop: _Dropout | None = None) -> Tensor:
        """The rest of the block after the attention's output ``attn_out``: the residual
        adds and the MLP."""
        if drop is not None and not self.cfg.rules.latent:  # official trans.py: after out_linear
            attn_out = drop(attn_out)
        x = self.hook_resid_mid(x + self.hook_attn_out(attn_out))
        return self.hook_resid_post(x + self.hook_mlp_out(self._mlp(self.ln2(x), drop)))


class SchemeEncoder(HookedRootModule):
    """Paper B's bidirectional encoder with one positional scheme (module docstring).

    Example::

        task = DistanceTask()
        model = SchemeEncoder(encoder_config_for(task, scheme="alibi"))
        result = train(model, task, TrainConfig(steps=1000, lr=1e-3))
        lens_possym.swap_scores(model, task.test_set(8).tokens, per_frequency=False)
    """

    kind: ClassVar[str] = "scheme-encoder"

    def __init__(self, cfg: EncoderConfig):
        super().__init__()
        if not isinstance(cfg, EncoderConfig):
            raise ToyConfigError(f"expected an EncoderConfig, got {type(cfg).__name__}")
        self.cfg = cfg
        self._schemes = [self._layer_scheme(layer) for layer in range(cfg.n_layers)]
        self.W_E = nn.Parameter(torch.empty(cfg.d_vocab, cfg.d_model))
        encoding = cfg.input_encoding
        if encoding == "learned":
            self.W_pos = nn.Parameter(torch.empty(cfg.n_ctx, cfg.d_model))
        elif encoding is not None:
            layout = "halves" if encoding == "halves" else "interleaved"
            self.register_buffer("W_pos", sinusoidal_table(cfg.n_ctx, cfg.d_model, layout=layout,
                                                           base=cfg.rope_base,
                                                           dtype=torch.float64),
                                 persistent=False)
        self.hook_embed = HookPoint()
        self.hook_pos_embed = HookPoint()
        self.blocks = nn.ModuleList(_Block(cfg, L, s.scheme) for L, s in enumerate(self._schemes))
        # official trans.py has no final norm; MLA (intended and official) and intended do
        self.ln_final = nn.LayerNorm(cfg.d_model) if (not cfg.faithful or cfg.rules.latent) \
            else nn.Identity()
        self.hook_pooled = HookPoint()
        self.W_cls = nn.Parameter(torch.empty(cfg.d_model, cfg.n_classes))
        self.b_cls = nn.Parameter(torch.zeros(cfg.n_classes))
        if cfg.dropout > 0:  # training forwards so far: seeds the next dropout masks
            self.register_buffer("dropout_calls", torch.zeros((), dtype=torch.long))
        self.init_weights()
        self.setup()

    @classmethod
    def from_config(cls, data: dict) -> "SchemeEncoder":
        return cls(EncoderConfig.from_dict(data))

    # ---- construction ----------------------------------------------------------------

    def _layer_scheme(self, layer: int) -> LayerScheme:
        attn = f"blocks.{layer}.attn"
        return LayerScheme(layer, self.cfg.rules.positional(self.cfg), self.cfg.n_heads,
                           self.cfg.d_head,
                           f"{attn}.hook_q", f"{attn}.hook_k", f"{attn}.hook_pattern",
                           f"{attn}.hook_attn_scores",
                           d_content=self.cfg.d_head if self.cfg.rules.latent else None)

    def init_weights(self, seed: int | None = None) -> None:
        """Initial weights from a private generator (``seed``: default ``cfg.seed``).

        ``init="normal"``: token embeddings and the learned table ``N(0, 1)`` (as
        ``nn.Embedding``), matrices ``N(0, 1/fan_in)``, biases and bias tables 0, norms 1.
        ``init="torch"``: what PyTorch gives the official modules: ``nn.Linear`` weights and
        biases ``U(-1/√fan_in, 1/√fan_in)``, embeddings and the learned table ``N(0, 1)``,
        the relative-bias (T5) table ``N(0, 0.02²)``, norms 1 and 0. Faithful MLA's
        learned table is zero either way (the official ``zeros`` parameter).
        """
        cfg = self.cfg
        gen = torch.Generator().manual_seed(cfg.seed if seed is None else seed)
        zero_pos = cfg.rules.latent and cfg.faithful
        torch_init = cfg.init == "torch"
        bias_fan_in = {"b_Q": cfg.d_model, "b_K": cfg.d_model, "b_V": cfg.d_model,
                       "b_O": cfg.n_heads * cfg.d_head, "b_cls": cfg.d_model}

        def uniform(shape: torch.Size, fan_in: int) -> Tensor:
            return (torch.rand(shape, generator=gen, dtype=torch.float64) * 2 - 1) \
                / math.sqrt(fan_in)

        with torch.no_grad():
            for name, param in sorted(self.named_parameters()):
                leaf = name.rsplit(".", 1)[-1]
                if "ln" in name:
                    param.fill_(1.0 if leaf == "weight" else 0.0)
                elif leaf == "t5_table":
                    param.copy_(torch.randn(param.shape, generator=gen) * 0.02 if torch_init
                                else torch.zeros_like(param))
                elif leaf.startswith("b_") or leaf == "bias":
                    if not torch_init:
                        param.zero_()
                        continue
                    fan_in = (bias_fan_in[leaf] if leaf in bias_fan_in else
                              cfg.d_model if name.endswith("mlp.0.bias") else cfg.d_ff)
                    param.copy_(uniform(param.shape, fan_in))
                elif leaf in ("W_E", "W_pos"):
                    param.copy_(torch.zeros_like(param) if leaf == "W_pos" and zero_pos
                                else torch.randn(param.shape, generator=gen))
                else:
                    fan_in = (param.shape[-1] if leaf == "weight" else
                              param.shape[0] * param.shape[1] if leaf == "W_O" else param.shape[-2])
                    param.copy_(uniform(param.shape, fan_in) if torch_init else
                                torch.randn(param.shape, generator=gen) / math.sqrt(fan_in))

    # ---- what lens-possym asks of a model ------------------------------------------------

    def lens_possym_schemes(self) -> list[LayerScheme]:
        """One :class:`~lens_possym.positions.LayerScheme` per layer, with the model's current
        bias tables (T5: read from the weights now)."""
        if not self.cfg.rules.learned_bias:
            return list(self._schemes)
        out = []
        for ls, block in zip(self._schemes, self.blocks):
            old = ls.scheme
            scheme = AdditiveBias.t5(block.attn.t5_table.detach().double().cpu(),
                                     bidirectional=True, num_buckets=old.num_buckets,
                                     max_distance=old.max_distance, scale=old.scale)
            out.append(LayerScheme(**{**ls.__dict__, "scheme": scheme}))
        return out

    # ---- forward --------------------------------------------------------------------------

    def forward(self, tokens: Int[Tensor, "batch pos"], return_type: str | None = "logits",
                stop_at_layer: int | None = None) -> Tensor | None:
        """Logits ``[batch, pos, n_classes]`` (the pooled prediction at every position);
        ``return_type=None`` runs for the hooks; ``stop_at_layer`` returns the residual
        stream before that block."""
        if return_type not in ("logits", None):
            raise InvalidSelectionError(
                f"return_type must be 'logits' or None, got {return_type!r}")
        tokens = batched_token_ids(tokens, self.cfg.n_ctx, self.cfg.d_vocab)
        key_mask = self._key_mask(tokens)
        drop = None
        if self.training and self.cfg.dropout > 0:
            drop = _Dropout(self.cfg.dropout, self.cfg.seed * 1_000_003
                            + int(self.dropout_calls), tokens.device)
            self.dropout_calls += 1
        x = self._embed(tokens)
        memory = None
        stop = self.cfg.n_layers if stop_at_layer is None else stop_at_layer
        for block in self.blocks[:stop]:
            x = block.hook_resid_pre(x)
            memory = x if memory is None else memory
            x = block(x, memory, key_mask, drop)
        if stop_at_layer is not None:
            return x
        return self._readout(x, key_mask, return_type)

    def _key_mask(self, tokens: Int[Tensor, "batch pos"]) -> Bool[Tensor, "batch pos"] | None:
        """Which keys are real tokens (``pad_mask`` on), else ``None``."""
        if not self.cfg.pad_mask:
            return None
        key_mask = tokens != self.cfg.pad_token
        if not bool(key_mask.any(dim=1).all()):
            raise InvalidSelectionError(
                f"a prompt holds only pads (id {self.cfg.pad_token}); with pad_mask on it "
                "has no token to attend to or pool over: drop it or pass pad_mask=False")
        return key_mask

    def _embed(self, tokens: Int[Tensor, "batch pos"]) -> Float[Tensor, "batch pos d_model"]:
        """The stream entering block 0: token embeddings plus the input encoding."""
        x = self.hook_embed(self.W_E[tokens])
        if hasattr(self, "W_pos"):
            pos = self.W_pos[: tokens.shape[1]].to(x.dtype)
            x = x + self.hook_pos_embed(pos.expand(x.shape[0], -1, -1))
        return x

    def _readout(self, x: Float[Tensor, "batch pos d_model"],
                 key_mask: Bool[Tensor, "batch pos"] | None, return_type: str | None = "logits"
                 ) -> Tensor | None:
        """The final norm, the pooled mean and the classifier, from the last block's output."""
        n = x.shape[1]
        x = self.ln_final(x)
        if key_mask is None:
            pooled = x.mean(dim=1)
        else:  # official mla.py: the mean over real tokens
            weight = key_mask.to(x.dtype)[..., None]
            pooled = (x * weight).sum(dim=1) / weight.sum(dim=1)
        pooled = self.hook_pooled(pooled)
        if return_type is None:
            return None
        logits = pooled @ self.W_cls + self.b_cls
        return logits[:, None].expand(-1, n, -1)

    @property
    def device(self) -> torch.device:
        return self.W_E.device

    def extra_repr(self) -> str:
        c = self.cfg
        return (f"{c.label} ({c.variant}), {c.n_layers} layers × {c.n_heads} heads, d_model "
                f"{c.d_model}, d_head {c.d_head}, {c.n_classes} classes")


@contextmanager
def faithful_mla_ablation(model: SchemeEncoder, layer: int, head: int) -> Iterator[SchemeEncoder]:
    """The official MLA per-head ablation (``mlavis.py``), inside a ``with`` block.

    It zeroes ``W_UQ/W_UK/W_UV.weight[:, h·d_head:(h+1)·d_head]``; ``nn.Linear`` stores
    ``[out, in]``, so that is a ``d_head`` slice of the **latent** (input) dims, read by every
    head, not head ``h``'s output; for ``h·d_head >= d_latent`` the slice is empty and
    nothing changes. The decoupled RoPE path is never touched. Weights are restored on exit.
    """
    if not model.cfg.rules.latent:
        raise InvalidSelectionError("faithful_mla_ablation applies to MLA encoders only")
    if not 0 <= layer < model.cfg.n_layers or not 0 <= head < model.cfg.n_heads:
        raise InvalidSelectionError(
            f"head {layer}.{head} out of range ({model.cfg.n_layers} layers × "
            f"{model.cfg.n_heads} heads)")
    attn = model.blocks[layer].attn
    dh = model.cfg.d_head
    span = slice(head * dh, (head + 1) * dh)
    saved = [(w, w.data[:, span].clone()) for w in (attn.W_UQ, attn.W_UK, attn.W_UV)]
    try:
        with torch.no_grad():
            for w, _ in saved:
                w.data[:, span] = 0.0
        yield model
    finally:
        with torch.no_grad():
            for w, old in saved:
                w.data[:, span] = old


def encoder_config_for(task: "Task", scheme: Scheme = "rope", *, variant: Variant = "intended",
                       **overrides: Any) -> EncoderConfig:
    """An :class:`EncoderConfig` sized for ``task`` (vocabulary, context, classes)."""
    n_classes = getattr(task, "n_classes", None) or max(task.answer_tokens) + 1
    return EncoderConfig(d_vocab=task.d_vocab, n_classes=n_classes, n_ctx=task.n_ctx,
                         scheme=scheme, variant=variant, **overrides)
