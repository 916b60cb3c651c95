r"""A small RoPE transformer whose heads may be restricted to chosen frequencies.

:class:`ToyTransformer` is a ``HookedRootModule`` with the hook names of the
TransformerLens bridge, so every analysis in lens-possym (``frequency_logits``,
``frequency_norms``, the positional/symbolic scores, interventions) runs on it unchanged.
It describes its own RoPE geometry through ``lens_possym_rope_specs()``.

One block (``blocks.{L}``), with ``x`` the residual stream ``[batch, pos, d_model]``:

.. math::

    q = g \odot (x W_Q), \quad k = g \odot (x W_K), \quad v = x W_V, \qquad
    s_{nj} = \mathrm{scale}\cdot \langle R(n\theta)\,q_n,\; R(j\theta)\,k_j\rangle
    \ (j \le n), \qquad
    x \leftarrow x + \sum_h \mathrm{softmax}_j(s)\,v\,W_O \;(+\ \mathrm{MLP})

``g`` is the per-head **frequency gate** ``[n_heads, n_freqs]`` expanded to ``d_head``
(pair ``f`` of the rotated dims, or the whole non-rotated tail for the last id). It is
applied to q and k *before* ``hook_q``/``hook_k`` fire, so those hooks carry q and k
exactly as attention uses them, and the per-frequency terms of
:func:`lens_possym.frequency_logits` add up to ``hook_attn_scores``. Term ``f`` is scaled
by ``g_f^2``: a 0/1 gate switches a frequency exactly off or on.

Design choices (see ``docs/canonical_tasks.md``):

* no positional embedding and no normalisation: the only way a head can see position is
  RoPE, and the model matches the theory's one-layer head (identity-like value, linear
  read-out) as closely as a trainable model can;
* ``embedding="onehot"`` fixes ``W_E`` to the identity (``d_model = d_vocab``), the
  theory's one-hot setting; ``"learned"`` trains a ``[d_vocab, d_model]`` table;
* angles: an explicit list (``angles=``; zeros allowed, ids are list indices) or the
  standard schedule ``θ_k = base^{-2k/R}`` (id 0 fastest), plus ``d_head - R`` non-rotated
  dims that form the last frequency id with angle 0;
* masked scores are ``-inf`` in ``hook_attn_scores``;
* position tables broadcast over the batch, so a hook on ``blocks.{L}.hook_resid_pre`` may
  return a larger batch than the input (the scores module re-runs a block that way).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Literal, Sequence

import torch
from einops import einsum
from jaxtyping import Float, Int
from torch import Tensor, nn
from transformer_lens import HookedRootModule
from transformer_lens.hook_points import HookPoint

from .._checks import boundary
from .._json import JsonConfig, check_field_types
from ..errors import InvalidSelectionError, ToyConfigError
from ..rope import FrequencyIds, RopeSpec, cos_sin, from_pairs, rotate_pairs, to_pairs
from .models import batched_token_ids

if TYPE_CHECKING:
    from .tasks import Task

__all__ = ["ToyConfig", "ToyTransformer", "rope_schedule", "toy_config_for"]

Embedding = Literal["onehot", "learned"]


@boundary
def rope_schedule(n_freqs: int, base: float = 10000.0) -> list[float]:
    """The standard RoPE angles ``θ_k = base^(-2k/R)`` for ``k < n_freqs`` (``R = 2·n_freqs``).

    Computed in float32 exactly as Hugging Face builds ``inv_freq``, fastest first.
    """
    if n_freqs < 1:
        raise ToyConfigError(f"n_freqs must be >= 1, got {n_freqs}")
    exps = torch.arange(0, 2 * n_freqs, 2, dtype=torch.int64).float() / (2 * n_freqs)
    return (1.0 / (base ** exps)).tolist()


@dataclass(frozen=True)
class ToyConfig(JsonConfig, FrequencyIds):
    """Configuration of a :class:`ToyTransformer` (validated on creation).

    Attributes:
        d_vocab: vocabulary size.
        n_ctx: longest input (positions ``0..n_ctx-1``).
        n_layers, n_heads: blocks and heads per block.
        d_head: width of each head's q, k and v (rotated dims first, then the tail).
        rotary_dim: rotated dims ``R`` (even, ``<= d_head``); default ``2·len(angles)``
            when ``angles`` is given, else ``d_head``.
        angles: explicit angle (rad/token) of each rotated pair, ``R/2`` of them, zeros
            allowed; ``None`` for the standard schedule ``rope_base^(-2k/R)``.
        rope_base: base of the standard schedule.
        embedding: ``"onehot"`` (``W_E`` = identity, ``d_model = d_vocab``) or ``"learned"``.
        d_model: residual width; must be ``None`` or ``d_vocab`` for one-hot embeddings,
            required for learned ones.
        d_mlp: MLP width (GELU) after attention in every block; ``None`` = attention-only.
        attn_scale: factor on ``q·k``; default ``1/sqrt(d_head)``.
        init_std: standard deviation of the initial weights; default ``1/sqrt(d_model)``.
        seed: seed of the initial weights (a private generator: global RNG untouched).
    """

    d_vocab: int
    n_ctx: int
    n_layers: int = 1
    n_heads: int = 1
    d_head: int = 32
    rotary_dim: int | None = None
    angles: tuple[float, ...] | None = None
    rope_base: float = 10000.0
    embedding: Embedding = "onehot"
    d_model: int | None = None
    d_mlp: int | None = None
    attn_scale: float | None = None
    init_std: float | None = None
    seed: int = 0

    def __post_init__(self) -> None:
        check_field_types(self, error=ToyConfigError)
        for name in ("d_vocab", "n_ctx", "n_layers", "n_heads", "d_head"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ToyConfigError(f"{name} must be a positive integer, got {value!r}")
        if self.angles is not None:
            object.__setattr__(self, "angles", tuple(float(a) for a in self.angles))
            if not self.angles:
                raise ToyConfigError("angles is empty; give at least one angle or None for "
                                     "the standard schedule")
            if any(not math.isfinite(a) for a in self.angles):
                raise ToyConfigError(f"angles must be finite numbers, got {self.angles}")
            if self.rotary_dim is None:
                object.__setattr__(self, "rotary_dim", 2 * len(self.angles))
            elif self.rotary_dim != 2 * len(self.angles):
                raise ToyConfigError(
                    f"rotary_dim {self.rotary_dim} does not match {len(self.angles)} angles "
                    f"(one 2-D pair per angle: rotary_dim = {2 * len(self.angles)})"
                )
        if self.rotary_dim is None:
            object.__setattr__(self, "rotary_dim", self.d_head)
        if self.rotary_dim < 2 or self.rotary_dim % 2 or self.rotary_dim > self.d_head:
            raise ToyConfigError(
                f"rotary_dim must be even, >= 2 and <= d_head ({self.d_head}); got "
                f"{self.rotary_dim}"
            )
        if not self.rope_base > 1.0:
            raise ToyConfigError(f"rope_base must be > 1, got {self.rope_base}")
        if self.embedding not in ("onehot", "learned"):
            raise ToyConfigError(f"embedding must be 'onehot' or 'learned', got {self.embedding!r}")
        if self.embedding == "onehot":
            if self.d_model not in (None, self.d_vocab):
                raise ToyConfigError(
                    f"one-hot embeddings need d_model == d_vocab ({self.d_vocab}), got "
                    f"{self.d_model}; leave d_model unset or use embedding='learned'"
                )
            object.__setattr__(self, "d_model", self.d_vocab)
        elif self.d_model is None or self.d_model < 1:
            raise ToyConfigError("learned embeddings need a positive d_model")
        if self.d_mlp is not None and self.d_mlp < 1:
            raise ToyConfigError(f"d_mlp must be None (attention-only) or >= 1, got {self.d_mlp}")
        if self.attn_scale is not None and not self.attn_scale > 0:
            raise ToyConfigError(f"attn_scale must be > 0, got {self.attn_scale}")
        if self.init_std is not None and not self.init_std > 0:
            raise ToyConfigError(f"init_std must be > 0, got {self.init_std}")

    # ---- derived --------------------------------------------------------------------

    @property
    def scale(self) -> float:
        return self.attn_scale if self.attn_scale is not None else 1.0 / math.sqrt(self.d_head)

    def angle_list(self) -> list[float]:
        """Angle of every rotated pair (the tail, if any, is not in this list)."""
        if self.angles is not None:
            return list(self.angles)
        return rope_schedule(self.n_rot, self.rope_base)

    # to_dict and replace: JsonConfig

    @classmethod
    def from_dict(cls, data: dict) -> "ToyConfig":
        data = dict(data)
        data.pop("extra", None)  # an always-empty field that checkpoints of 0.1.0 carry
        return super().from_dict(data)


class _Attention(nn.Module):
    def __init__(self, cfg: ToyConfig, layer: int, inv_freq: Tensor):
        super().__init__()
        self.cfg, self.layer = cfg, layer
        h, dm, dh = cfg.n_heads, cfg.d_model, cfg.d_head
        self.W_Q = nn.Parameter(torch.empty(h, dm, dh))
        self.W_K = nn.Parameter(torch.empty(h, dm, dh))
        self.W_V = nn.Parameter(torch.empty(h, dm, dh))
        self.W_O = nn.Parameter(torch.empty(h, dh, dm))
        self.register_buffer("inv_freq", inv_freq.clone(), persistent=False)
        future = torch.ones(cfg.n_ctx, cfg.n_ctx, dtype=torch.bool).triu(1)
        self.register_buffer("future", future, persistent=False)
        self.hook_q = HookPoint()
        self.hook_k = HookPoint()
        self.hook_v = HookPoint()
        self.hook_rot_q = HookPoint()
        self.hook_rot_k = HookPoint()
        self.hook_attn_scores = HookPoint()
        self.hook_pattern = HookPoint()
        self.hook_z = HookPoint()
        self.hook_result = HookPoint()
        self.spec: RopeSpec | None = None  # set by the model

    def set_spec(self, spec: RopeSpec) -> None:
        """Attach the layer's geometry and cache its rotation tables for ``n_ctx`` positions.

        The tables come from :func:`lens_possym.rope.cos_sin`, and :meth:`_rotate` applies
        them with :func:`~lens_possym.rope.rotate_pairs`: bit for bit what
        :func:`lens_possym.rope.rotate` computes, without rebuilding the tables every call.
        """
        self.spec = spec
        cos, sin = cos_sin(spec, torch.arange(self.cfg.n_ctx))
        self.register_buffer("rot_cos", cos[None, :, None, :], persistent=False)
        self.register_buffer("rot_sin", sin[None, :, None, :], persistent=False)

    def _rotate(self, x: Float[Tensor, "batch pos head_index d_head"]) -> Tensor:
        n = x.shape[1]
        pairs, tail = to_pairs(x, self.spec)
        cos, sin = self.rot_cos[:, :n].to(x.dtype), self.rot_sin[:, :n].to(x.dtype)
        return from_pairs(rotate_pairs(pairs, cos, sin), tail, self.spec)

    def forward(self, x: Float[Tensor, "batch pos d_model"], gate: Float[Tensor, "head_index d_head"]
                ) -> Float[Tensor, "batch pos d_model"]:
        n = x.shape[1]
        project = "batch pos d_model, head_index d_model d_head -> batch pos head_index d_head"
        q = self.hook_q(einsum(x, self.W_Q, project) * gate)
        k = self.hook_k(einsum(x, self.W_K, project) * gate)
        v = self.hook_v(einsum(x, self.W_V, project))
        rq = self.hook_rot_q(self._rotate(q))
        rk = self.hook_rot_k(self._rotate(k))
        scores = einsum(rq, rk, "batch query_pos head_index d_head, "
                        "batch key_pos head_index d_head -> batch head_index query_pos key_pos")
        scores = scores * self.cfg.scale
        scores = self.hook_attn_scores(scores.masked_fill(self.future[:n, :n], float("-inf")))
        pattern = self.hook_pattern(torch.softmax(scores, dim=-1))
        z = self.hook_z(einsum(pattern, v, "batch head_index query_pos key_pos, batch key_pos "
                               "head_index d_head -> batch query_pos head_index d_head"))
        result = self.hook_result(einsum(z, self.W_O, "batch pos head_index d_head, head_index "
                                         "d_head d_model -> batch pos head_index d_model"))
        return result.sum(dim=2)


class _MLP(nn.Module):
    def __init__(self, cfg: ToyConfig):
        super().__init__()
        self.W_in = nn.Parameter(torch.empty(cfg.d_model, cfg.d_mlp))
        self.b_in = nn.Parameter(torch.zeros(cfg.d_mlp))
        self.W_out = nn.Parameter(torch.empty(cfg.d_mlp, cfg.d_model))
        self.b_out = nn.Parameter(torch.zeros(cfg.d_model))
        self.hook_pre = HookPoint()
        self.hook_post = HookPoint()

    def forward(self, x: Tensor) -> Tensor:
        pre = self.hook_pre(x @ self.W_in + self.b_in)
        post = self.hook_post(nn.functional.gelu(pre))
        return post @ self.W_out + self.b_out


class _Block(nn.Module):
    def __init__(self, cfg: ToyConfig, layer: int, inv_freq: Tensor):
        super().__init__()
        self.attn = _Attention(cfg, layer, inv_freq)
        self.mlp = _MLP(cfg) if cfg.d_mlp else None
        self.hook_resid_pre = HookPoint()
        self.hook_attn_out = HookPoint()
        self.hook_resid_post = HookPoint()
        if self.mlp is not None:
            self.hook_resid_mid = HookPoint()
            self.hook_mlp_out = HookPoint()

    def forward(self, x: Tensor, gate: Tensor) -> Tensor:
        x = self.hook_resid_pre(x)
        x = x + self.hook_attn_out(self.attn(x, gate))
        if self.mlp is not None:
            x = self.hook_resid_mid(x)
            x = x + self.hook_mlp_out(self.mlp(x))
        return self.hook_resid_post(x)


class ToyTransformer(HookedRootModule):
    """Attention-only (optionally with MLPs) RoPE transformer with per-head frequency gates.

    Hooks (TransformerLens names): ``hook_embed``; per block ``blocks.{L}.hook_resid_pre``,
    ``hook_attn_out``, ``hook_resid_post`` (``hook_resid_mid``, ``hook_mlp_out``,
    ``mlp.hook_pre``, ``mlp.hook_post`` with MLPs); per attention layer
    ``blocks.{L}.attn.hook_q``/``hook_k``/``hook_v`` ``[batch, pos, head_index, d_head]``
    (un-rotated, gated), ``hook_rot_q``/``hook_rot_k`` (rotated), ``hook_attn_scores``
    ``[batch, head_index, query_pos, key_pos]`` (pre-softmax, masked at ``-inf``),
    ``hook_pattern`` (same shape), ``hook_z`` ``[batch, pos, head_index, d_head]`` and
    ``hook_result`` ``[batch, pos, head_index, d_model]``.

    Example::

        cfg = ToyConfig(d_vocab=32, n_ctx=17, d_head=34, rotary_dim=32)
        model = ToyTransformer(cfg)
        model.set_frequencies([3])            # every head may use frequency id 3 only
        logits, cache = model.run_with_cache(tokens)
        lens_possym.frequency_logits(model, tokens, layer=0).max_abs_error   # ~1e-7
    """

    kind: ClassVar[str] = "toy"

    def __init__(self, cfg: ToyConfig):
        super().__init__()
        if not isinstance(cfg, ToyConfig):
            raise ToyConfigError(f"expected a ToyConfig, got {type(cfg).__name__}")
        self.cfg = cfg
        inv_freq = torch.tensor(cfg.angle_list(), dtype=torch.float32)
        if cfg.embedding == "onehot":
            self.register_buffer("W_E", torch.eye(cfg.d_vocab), persistent=False)
        else:
            self.W_E = nn.Parameter(torch.empty(cfg.d_vocab, cfg.d_model))
        self.hook_embed = HookPoint()
        self.blocks = nn.ModuleList(_Block(cfg, layer, inv_freq) for layer in range(cfg.n_layers))
        self.W_U = nn.Parameter(torch.empty(cfg.d_model, cfg.d_vocab))
        self.register_buffer("freq_gate", torch.ones(cfg.n_layers, cfg.n_heads, cfg.n_freqs))
        self._specs = [self._make_spec(layer, inv_freq) for layer in range(cfg.n_layers)]
        index = torch.empty(cfg.d_head, dtype=torch.long)  # frequency id of every d_head dim
        for f in range(cfg.n_freqs):
            index[self._specs[0].dims_of(f)] = f
        self.register_buffer("_gate_index", index, persistent=False)
        for block, spec in zip(self.blocks, self._specs):
            block.attn.set_spec(spec)
        self.init_weights()
        self.setup()

    @classmethod
    def from_config(cls, data: dict) -> "ToyTransformer":
        """The model a checkpoint's ``model_config`` describes (weights drawn afresh)."""
        return cls(ToyConfig.from_dict(data))

    # ---- construction ----------------------------------------------------------------

    def _make_spec(self, layer: int, inv_freq: Tensor) -> RopeSpec:
        cfg = self.cfg
        prefix = f"blocks.{layer}.attn."
        return RopeSpec(
            layer=layer, n_heads=cfg.n_heads, n_kv_heads=cfg.n_heads, d_head=cfg.d_head,
            rotary_dim=cfg.rotary_dim, pairing="half", inv_freq=inv_freq, scale=cfg.scale,
            q_hook=prefix + "hook_q", k_hook=prefix + "hook_k", qk_layout="bphd",
            scores_hook=prefix + "hook_attn_scores", pattern_hook=prefix + "hook_pattern",
            rot_hooks=True, family="toy",
        )

    def init_weights(self, seed: int | None = None) -> None:
        """Re-draw all weights from ``N(0, init_std²)`` with a private generator."""
        cfg = self.cfg
        std = cfg.init_std if cfg.init_std is not None else 1.0 / math.sqrt(cfg.d_model)
        gen = torch.Generator().manual_seed(cfg.seed if seed is None else seed)
        with torch.no_grad():
            for name, param in sorted(self.named_parameters()):
                if name.endswith(("b_in", "b_out")):
                    param.zero_()
                else:
                    param.copy_(torch.randn(param.shape, generator=gen) * std)

    # ---- the lens-possym geometry hook ------------------------------------------------

    def lens_possym_rope_specs(self) -> list[RopeSpec]:
        """One :class:`~lens_possym.rope.RopeSpec` per layer (read by ``lens_possym.rope_specs``)."""
        return list(self._specs)

    @property
    def angles(self) -> Float[Tensor, "freq"]:
        """Angle of every frequency id, float64 (the tail, if any, last with angle 0)."""
        return self._specs[0].angles

    # ---- frequency gates ----------------------------------------------------------------

    def gate_dims(self, layer: int) -> Float[Tensor, "head_index d_head"]:
        """The gate of ``layer`` expanded from frequency ids to the dims of ``d_head``."""
        return self.freq_gate[layer][:, self._gate_index]

    def set_frequencies(self, freq_ids: Sequence[int] | None, *, layer: int | None = None,
                        head: int | None = None) -> "ToyTransformer":
        """Let heads use only ``freq_ids`` (gate 1 on them, 0 elsewhere); ``None`` = all.

        ``layer``/``head`` restrict the change to one layer and/or head (all by default).
        Returns the model, for chaining.
        """
        n_freqs = self.cfg.n_freqs
        row = torch.ones(n_freqs)
        if freq_ids is not None:
            ids = [int(f) for f in ([freq_ids] if isinstance(freq_ids, int) else freq_ids)]
            bad = [f for f in ids if not -n_freqs <= f < n_freqs]
            if bad or not ids:
                raise InvalidSelectionError(
                    f"frequency ids {bad or freq_ids} out of range: the model has {n_freqs} "
                    f"frequency ids (0..{n_freqs - 1}, the last is "
                    f"{'the θ=0 tail' if self.cfg.has_tail else 'the slowest rotation'})"
                )
            row = torch.zeros(n_freqs)
            row[[f % n_freqs for f in ids]] = 1.0
        layers = range(self.cfg.n_layers) if layer is None else [self._check_layer(layer)]
        heads = range(self.cfg.n_heads) if head is None else [self._check_head(head)]
        with torch.no_grad():
            for L in layers:
                for h in heads:
                    self.freq_gate[L, h] = row.to(self.freq_gate)
        return self

    def _check_layer(self, layer: int) -> int:
        if not -self.cfg.n_layers <= layer < self.cfg.n_layers:
            raise InvalidSelectionError(
                f"layer {layer} out of range: the model has {self.cfg.n_layers} layers")
        return layer % self.cfg.n_layers

    def _check_head(self, head: int) -> int:
        if not 0 <= head < self.cfg.n_heads:
            raise InvalidSelectionError(
                f"head {head} out of range: the model has {self.cfg.n_heads} heads per layer")
        return head

    # ---- forward --------------------------------------------------------------------------

    def forward(self, tokens: Int[Tensor, "batch pos"], return_type: str | None = "logits",
                stop_at_layer: int | None = None
                ) -> Float[Tensor, "batch pos d_vocab"] | Float[Tensor, "batch pos d_model"] | None:
        """Run the model.

        Args:
            tokens: ``[batch, pos]`` (or ``[pos]``) token ids, ``pos <= n_ctx``.
            return_type: ``"logits"`` or ``None`` (run for the hooks only).
            stop_at_layer: stop before block ``stop_at_layer`` and return the residual
                stream there (``None`` runs every block).
        """
        if return_type not in ("logits", None):
            raise InvalidSelectionError(
                f"return_type must be 'logits' or None, got {return_type!r}")
        tokens = batched_token_ids(tokens, self.cfg.n_ctx)
        x = self.hook_embed(self.W_E[tokens])
        stop = self.cfg.n_layers if stop_at_layer is None else stop_at_layer
        for layer, block in enumerate(self.blocks[:stop]):
            x = block(x, self.gate_dims(layer))
        if stop_at_layer is not None:
            return x
        if return_type is None:
            return None
        return x @ self.W_U

    # ---- conveniences ---------------------------------------------------------------------

    @property
    def device(self) -> torch.device:
        return self.W_U.device

    def extra_repr(self) -> str:
        c = self.cfg
        return (f"{c.n_layers} layer(s) × {c.n_heads} head(s), d_head {c.d_head}, "
                f"{c.n_rot} rotated pairs{' + θ=0 tail' if c.has_tail else ''}, "
                f"{c.embedding} embeddings, d_model {c.d_model}"
                f"{f', MLP {c.d_mlp}' if c.d_mlp else ', attention-only'}")


def toy_config_for(task: "Task", *, n_freqs: int = 16, rope_base: float = 10000.0,
                   nope_dims: int = 2, angles: Sequence[float] | None = None,
                   **overrides: Any) -> ToyConfig:
    """A :class:`ToyConfig` sized for ``task``: one layer, one head, one-hot embeddings.

    The head has ``n_freqs`` rotated pairs on the standard schedule (``base^(-2k/R)``,
    ids ``0..n_freqs-1``, fastest first) plus ``nope_dims`` non-rotated dims that form the
    last id, ``n_freqs``, with angle 0 (``nope_dims=0`` drops it). ``d_head`` is at least
    the number of answer tokens, so the value/output path can copy every answer.
    ``angles`` replaces the schedule by an explicit list. Other fields via ``overrides``.
    """
    if angles is not None:
        n_freqs = len(angles)
    if nope_dims < 0:
        raise ToyConfigError(f"nope_dims must be >= 0, got {nope_dims}")
    rotary_dim = 2 * n_freqs
    d_head = max(rotary_dim + nope_dims, len(task.answer_tokens))
    settings: dict[str, Any] = dict(d_vocab=task.d_vocab, n_ctx=task.n_ctx, d_head=d_head,
                                    rotary_dim=rotary_dim, rope_base=rope_base,
                                    angles=tuple(angles) if angles is not None else None)
    settings.update(overrides)
    return ToyConfig(**settings)
