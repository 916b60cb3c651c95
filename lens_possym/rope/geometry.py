r"""RoPE geometry, layer by layer: :class:`RopeSpec`, and the rotation itself.

A rotary attention layer rotates each query and key, split into 2-D pairs, by an angle
proportional to the token's position, one angle per pair ("frequency"):

.. math::

    \tilde q^{(f)}_n = R(n\theta_f)\, q^{(f)}_n, \qquad
    \theta_f = \mathrm{base}^{-2f/R}, \quad f = 0, \dots, R/2 - 1,

so frequency id 0 is the fastest rotation (the papers' convention). Models differ in how
the pairs are laid out in ``d_head`` and in what surrounds the rotation:

* **pairing**: ``"half"`` pairs dim ``f`` with ``f + R/2`` (Hugging Face Llama, Qwen,
  Gemma, GPT-NeoX: ``rotate_half``); ``"adjacent"`` pairs ``2f`` with ``2f + 1`` (GPT-J,
  Cohere, GLM).
* **partial rotary**: only the first ``R = rotary_dim`` dims rotate (Pythia, GPT-J); the
  non-rotated tail is kept as one extra component with angle 0, the last frequency id.
* **scale** (``attn.scaling``; Gemma uses ``query_pre_attn_scalar``), **softcap**
  (Gemma 2, applied after the sum), **sliding window** and **base** per layer (Gemma 3).
* **GQA**: query head ``h`` reads KV head ``h // (n_heads // n_kv_heads)``.
* **input-dependent angles**: LongRoPE (Phi-3) switches from short to long factors once
  the input is longer than ``original_max_position_embeddings``; dynamic NTK (Llama
  ``rope_type="dynamic"``) recomputes the base for inputs longer than the context. A spec
  gives the angles of an input of ``n`` tokens through :meth:`RopeSpec.at_length`.

This module is the geometry alone; :mod:`lens_possym.rope.reading` reads it from a model
(:func:`~lens_possym.rope.reading.rope_specs`).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Callable, Literal

import torch
from einops import einsum
from jaxtyping import Bool, Float, Int
from torch import Tensor

from .._attention import kv_heads, visible_mask
from ..errors import InvalidSelectionError

__all__ = [
    "RopeSpec",
    "FrequencyIds",
    "cos_sin",
    "to_pairs",
    "from_pairs",
    "rotate",
    "visible_keys",
    "Pairing",
    "heads_view",
    "cross_factors",
]

Pairing = Literal["half", "adjacent"]
QKLayout = Literal["bphd", "bhpd", "flat"]
AngleRule = Callable[[int], "tuple[Tensor, float]"]


class FrequencyIds:
    """Frequency-id bookkeeping of a head with ``d_head`` dims, ``rotary_dim`` of them rotated.

    A mixin for anything with those two attributes (:class:`RopeSpec`, the toy models'
    config): ids ``0 .. R/2 - 1`` are the rotated pairs, and a partial-rotary head's
    non-rotated tail is one more id, the last.
    """

    d_head: int
    rotary_dim: int

    @property
    def n_rot(self) -> int:
        """Number of rotated pairs, ``R/2``."""
        return self.rotary_dim // 2

    @property
    def has_tail(self) -> bool:
        """Whether some dims are not rotated (partial rotary)."""
        return self.d_head > self.rotary_dim

    @property
    def n_freqs(self) -> int:
        """Number of frequency ids: ``R/2`` pairs, plus one for the tail if any."""
        return self.n_rot + int(self.has_tail)


@dataclass(frozen=True, eq=False)
class RopeSpec(FrequencyIds):
    """The rotary geometry of one attention layer, and where to read its queries and keys.

    Attributes:
        layer: layer index.
        n_heads, n_kv_heads, d_head: head counts (query and key/value) and head width.
        rotary_dim: number of rotated dims ``R`` (even); ``d_head - R`` dims form the tail.
        pairing: ``"half"`` or ``"adjacent"`` (see module docstring).
        inv_freq: ``[R/2]`` float32 angular frequencies exactly as the model multiplies
            them with positions (so rotation tables match the model's bit for bit).
        scale: factor on ``q·k`` (``attn.scaling``).
        attention_scaling: factor the model applies to its cos/sin tables (YaRN and
            similar; 1.0 for default RoPE).
        softcap: ``c`` in ``c·tanh(s/c)`` applied to the scaled scores, or ``None``.
        window: sliding window: query ``n`` sees keys ``j`` with ``n - j < window``.
        q_hook, k_hook: hooks giving the *un-rotated* query and key (after any q/k norm).
        qk_layout: ``"bphd"`` ([batch, pos, head, d_head]), ``"bhpd"`` or ``"flat"``
            ([batch, pos, head·d_head]: OLMo2's q/k-norm acts on the whole projection) for
            those hooks; :func:`heads_view` gives ``[batch, pos, head, d_head]`` from any.
        scores_hook: hook with the pre-softmax scores ``[batch, head, query_pos, key_pos]``
            (after softcap, masked entries at the dtype's minimum), or ``None`` where the
            family has none (GPT-J, where ``hook_attn_scores`` is the pattern).
        pattern_hook: hook with the softmax pattern.
        rot_hooks: whether ``hook_rot_q``/``hook_rot_k`` fire for this layer.
        layer_type: e.g. ``"sliding_attention"``/``"full_attention"`` for Gemma 3.
        family: the Hugging Face attention class (``"LlamaAttention"``, ...).
        rope_type: Hugging Face's ``rope_type`` (``"default"``, ``"llama3"``, ``"yarn"``,
            ``"longrope"``, ``"dynamic"``, ...).
        rotary_input_dtype: the dtype the model rounds the rotated dims of q and k to
            before rotating (``torch.float32`` where the bridge rotates adjacent pairs "in
            full precision": Cohere, GLM), ``None`` when it rotates them as they are.
        angle_rule: for input-dependent RoPE, ``n -> (inv_freq, attention_scaling)`` the
            model uses on an input of ``n`` tokens; ``None`` when the angles are fixed.
            Use :meth:`at_length` rather than calling it.
    """

    layer: int
    n_heads: int
    n_kv_heads: int
    d_head: int
    rotary_dim: int
    pairing: Pairing
    inv_freq: Tensor
    scale: float
    attention_scaling: float = 1.0
    softcap: float | None = None
    window: int | None = None
    q_hook: str = ""
    k_hook: str = ""
    qk_layout: QKLayout = "bphd"
    scores_hook: str | None = None
    pattern_hook: str = ""
    rot_hooks: bool = False
    layer_type: str | None = None
    family: str = ""
    extra: dict[str, Any] = field(default_factory=dict)
    rope_type: str = "default"
    rotary_input_dtype: torch.dtype | None = None
    angle_rule: AngleRule | None = field(default=None, repr=False)

    # ---- input-dependent angles ------------------------------------------------------

    @property
    def input_dependent(self) -> bool:
        """Whether the angles depend on the input's length (LongRoPE, dynamic NTK)."""
        return self.angle_rule is not None

    def at_length(self, n_pos: int) -> "RopeSpec":
        """The geometry the model uses on an input of ``n_pos`` tokens.

        ``self`` where the angles are fixed; otherwise a copy with the ``inv_freq`` and
        ``attention_scaling`` that the model's rotary module will use, computed with
        Hugging Face's own functions (bit for bit). For dynamic NTK this reads the rotary
        module's state at call time (its cache of the longest input seen so far), so call
        it right before the forward pass it describes.
        """
        if self.angle_rule is None:
            return self
        inv_freq, scaling = self.angle_rule(int(n_pos))
        if scaling == self.attention_scaling and torch.equal(inv_freq, self.inv_freq):
            return self
        return replace(self, inv_freq=inv_freq, attention_scaling=scaling)

    # ---- derived quantities --------------------------------------------------------

    @property
    def angles(self) -> Float[Tensor, "freq"]:
        """Angle per position of every frequency id, float64; the tail has angle 0."""
        theta = self.inv_freq.detach().to("cpu", torch.float64)
        if self.has_tail:
            theta = torch.cat([theta, theta.new_zeros(1)])
        return theta

    @property
    def group_size(self) -> int:
        return self.n_heads // self.n_kv_heads

    def kv_head(self, head: int) -> int:
        """The KV head that query head ``head`` reads (HF ``repeat_kv`` ordering)."""
        return int(kv_heads([head], self.n_heads, self.n_kv_heads)[0])

    def kv_index(self, heads: Tensor | list[int] | None = None) -> Tensor:
        """KV head of each query head in ``heads`` (all heads by default) as a long tensor."""
        return kv_heads(heads, self.n_heads, self.n_kv_heads)

    def dims_of(self, freq: int) -> list[int]:
        """Indices into ``d_head`` of frequency id ``freq`` (two dims, or the whole tail)."""
        if not 0 <= freq < self.n_freqs:
            raise InvalidSelectionError(
                f"frequency id {freq} out of range for layer {self.layer} "
                f"(it has {self.n_freqs} frequency ids: 0..{self.n_freqs - 1})"
            )
        if freq == self.n_rot:  # the tail
            return list(range(self.rotary_dim, self.d_head))
        if self.pairing == "half":
            return [freq, freq + self.n_rot]
        return [2 * freq, 2 * freq + 1]

    def round_rotary(self, x: Float[Tensor, "... d_head"]) -> Float[Tensor, "... d_head"]:
        """``x`` with its rotated dims rounded as the model rounds them before rotating.

        Identity unless :attr:`rotary_input_dtype` is set (and narrower than ``x``).
        """
        target = self.rotary_input_dtype
        if target is None or torch.finfo(target).bits >= torch.finfo(x.dtype).bits:
            return x
        r = self.rotary_dim
        return torch.cat([x[..., :r].to(target).to(x.dtype), x[..., r:]], dim=-1)

    def describe(self) -> str:
        tail = f" + tail of {self.d_head - self.rotary_dim} dims (θ=0)" if self.has_tail else ""
        base = _estimate_base(self.inv_freq, self.rotary_dim)
        extras = []
        if self.window:
            extras.append(f"window {self.window}")
        if self.softcap:
            extras.append(f"softcap {self.softcap}")
        if self.rope_type != "default":
            extras.append(f"rope_type {self.rope_type}")
        return (
            f"layer {self.layer}{f' ({self.layer_type})' if self.layer_type else ''}: "
            f"{self.n_heads} heads on {self.n_kv_heads} KV heads, d_head {self.d_head}, "
            f"{self.n_rot} {self.pairing}-split pairs{tail}, base≈{base:.4g}, "
            f"scale {self.scale:.4g}" + (", " + ", ".join(extras) if extras else "")
        )

    def with_(self, **changes: Any) -> "RopeSpec":
        """A copy with some fields changed (e.g. ``spec.with_(inv_freq=...)``)."""
        return replace(self, **changes)


def heads_view(tensor: Tensor, spec: RopeSpec) -> Float[Tensor, "batch pos head_index d_head"]:
    """A ``[batch, pos, head, d_head]`` view of a tensor from ``spec.q_hook``/``spec.k_hook``.

    A view (no copy) in every layout, so writing into it edits ``tensor``.
    """
    if spec.qk_layout == "bhpd":
        return tensor.transpose(1, 2)
    if spec.qk_layout == "flat":
        return tensor.unflatten(-1, (-1, spec.d_head))
    return tensor


def visible_keys(spec: RopeSpec, query_positions: Int[Tensor, "query_pos"],
                 key_positions: Int[Tensor, "key_pos"]) -> Bool[Tensor, "query_pos key_pos"]:
    """Keys each query may attend to: causal, and inside the layer's sliding window."""
    return visible_mask(query_positions, key_positions, spec.window or None)


def _estimate_base(inv_freq: Tensor, rotary_dim: int) -> float:
    if inv_freq.numel() < 2 or float(inv_freq[1]) <= 0:
        return float("nan")
    return float(inv_freq[1].double() ** (-rotary_dim / 2.0))


# ----------------------------------------------------------------------------------------
# Rotation arithmetic (the same operations, in the same order, as Hugging Face's code)


def cos_sin(spec: RopeSpec, positions: Int[Tensor, "*pos"]) -> tuple[Tensor, Tensor]:
    """The model's rotation tables at ``positions``: ``cos, sin`` of shape ``[*pos, R/2]``.

    Computed as Hugging Face does (float32 positions times float32 ``inv_freq``, then the
    ``attention_scaling`` factor), so they equal the layer's own tables exactly.
    """
    inv = spec.inv_freq.to(device=positions.device, dtype=torch.float32)
    freqs = positions[..., None].float() * inv
    cos, sin = freqs.cos(), freqs.sin()
    if spec.attention_scaling != 1.0:
        cos, sin = cos * spec.attention_scaling, sin * spec.attention_scaling
    return cos, sin


def to_pairs(x: Float[Tensor, "... d_head"], spec: RopeSpec
             ) -> tuple[Float[Tensor, "... n_rot 2"], Float[Tensor, "... tail"]]:
    """Split ``d_head`` into the rotated pairs ``[..., R/2, 2]`` and the tail ``[..., d_head-R]``."""
    r = spec.rotary_dim
    rot, tail = x[..., :r], x[..., r:]
    if spec.pairing == "half":
        pairs = torch.stack([rot[..., : r // 2], rot[..., r // 2:]], dim=-1)
    else:
        pairs = rot.unflatten(-1, (r // 2, 2))
    return pairs, tail


def from_pairs(pairs: Float[Tensor, "... n_rot 2"], tail: Float[Tensor, "... tail"],
               spec: RopeSpec) -> Float[Tensor, "... d_head"]:
    """Inverse of :func:`to_pairs`."""
    if spec.pairing == "half":
        rot = torch.cat([pairs[..., 0], pairs[..., 1]], dim=-1)
    else:
        rot = pairs.flatten(-2)
    return torch.cat([rot, tail], dim=-1)


def rotate_pairs(pairs: Float[Tensor, "... n_rot 2"], cos: Tensor, sin: Tensor
                 ) -> Float[Tensor, "... n_rot 2"]:
    """Rotate each pair ``(a, b)`` to ``(a cos - b sin, b cos + a sin)``.

    ``cos``/``sin`` broadcast against ``pairs[..., 0]``.
    """
    a, b = pairs[..., 0], pairs[..., 1]
    return torch.stack([a * cos - b * sin, b * cos + a * sin], dim=-1)


def rotate(x: Float[Tensor, "batch pos head_index d_head"], positions: Int[Tensor, "pos"],
           spec: RopeSpec) -> Float[Tensor, "batch pos head_index d_head"]:
    """Apply the layer's RoPE to un-rotated queries or keys at ``positions``."""
    x = spec.round_rotary(x)
    cos, sin = cos_sin(spec, positions.to(x.device))
    pairs, tail = to_pairs(x, spec)
    cos = cos.to(x.dtype)[None, :, None, :]
    sin = sin.to(x.dtype)[None, :, None, :]
    return from_pairs(rotate_pairs(pairs, cos, sin), tail, spec)


def cross_factors(q: Float[Tensor, "batch head_index d_head"],
                  k: Float[Tensor, "batch pos head_index d_head"], spec: RopeSpec,
                  query_position: Int[Tensor, "1"], dtype: torch.dtype
                  ) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    r"""The rank-2 factors of the cross-logit matrix of one query row, per frequency.

    ``q`` is the query at ``query_position``, ``k`` every key, both *un-rotated*, in the
    model's dtype. The query is rotated with the model's own table at its position and in
    its dtype (so the diagonal reproduces the model's scores to rounding); the rest is in
    ``dtype``. Returns ``(cos, sin, x, y)``: the tables ``[pos, freq]`` at every key
    position and the content factors ``[batch, head_index, pos, freq]`` with
    :math:`C_f[p, c] = s\,(\cos_{pf} x_{cf} + \sin_{pf} y_{cf})`; a partial-rotary tail is
    the last id (``cos = 1, sin = 0``, ``x`` its dot product, ``y = 0``). Used by
    :func:`lens_possym.scores.crosslogits.cross_logit_factors` and
    :meth:`lens_possym.positions.Rope.cross_logits`.
    """
    device = k.device
    n_pos = k.shape[1]
    q = q[:, None]                                                        # [b, 1, h, d]
    q_cos, q_sin = cos_sin(spec, query_position)
    q_pairs, q_tail = to_pairs(q, spec)
    q_rot = rotate_pairs(q_pairs, q_cos.to(q.dtype)[None, :, None, :],
                         q_sin.to(q.dtype)[None, :, None, :])[:, 0].to(dtype)  # [b, h, F, 2]
    k_pairs, k_tail = to_pairs(k.to(dtype), spec)                         # [b, p, h, F, 2]
    k_pairs = k_pairs.transpose(1, 2)                                     # [b, h, p, F, 2]
    qa, qb = q_rot[..., None, :, 0], q_rot[..., None, :, 1]               # [b, h, 1, F]
    ka, kb = k_pairs[..., 0], k_pairs[..., 1]
    x = qa * ka + qb * kb
    y = qb * ka - qa * kb

    positions = torch.arange(n_pos, device=device)
    cos, sin = (t.to(k.dtype).to(dtype) for t in cos_sin(spec, positions))
    if spec.has_tail:
        tail = einsum(q_tail[:, 0].to(dtype), k_tail.to(dtype),
                      "batch head_index tail, batch pos head_index tail -> batch head_index pos")
        x = torch.cat([x, tail[..., None]], dim=-1)
        y = torch.cat([y, torch.zeros_like(tail)[..., None]], dim=-1)
        cos = torch.cat([cos, cos.new_ones(n_pos, 1)], dim=-1)
        sin = torch.cat([sin, sin.new_zeros(n_pos, 1)], dim=-1)
    return cos, sin, x, y
