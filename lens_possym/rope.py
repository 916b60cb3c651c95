r"""RoPE geometry of a model, layer by layer: :class:`RopeSpec`.

A rotary attention layer rotates each query and key, split into 2-D pairs, by an angle
proportional to the token's position, one angle per pair ("frequency"):

.. math::

    \tilde q^{(f)}_n = R(n\theta_f)\, q^{(f)}_n, \qquad
    \theta_f = \mathrm{base}^{-2f/R}, \quad f = 0, \dots, R/2 - 1,

so frequency id 0 is the fastest rotation (the papers' convention). Models differ in how
the pairs are laid out in ``d_head`` and in what surrounds the rotation:

* **pairing**: ``"half"`` pairs dim ``f`` with ``f + R/2`` (Hugging Face Llama, Qwen,
  Gemma, GPT-NeoX: ``rotate_half``); ``"adjacent"`` pairs ``2f`` with ``2f + 1`` (GPT-J).
* **partial rotary**: only the first ``R = rotary_dim`` dims rotate (Pythia, GPT-J); the
  non-rotated tail is kept as one extra component with angle 0, the last frequency id.
* **scale** (``attn.scaling``; Gemma uses ``query_pre_attn_scalar``), **softcap**
  (Gemma 2, applied after the sum), **sliding window** and **base** per layer (Gemma 3).
* **GQA**: query head ``h`` reads KV head ``h // (n_heads // n_kv_heads)``.

:func:`rope_specs` reads all of this from the Hugging Face modules wrapped by the bridge,
never from ``bridge.cfg`` alone (its flags are wrong for some families), then runs one short
probe forward pass and checks the geometry against what the model actually did: the
``hook_cos``/``hook_sin`` tables where they fire, the rotated queries where ``hook_rot_q``
fires, and which score hooks are real pre-softmax scores.

A model that is not a bridge can describe itself by defining ``lens_possym_rope_specs()``
returning a list of :class:`RopeSpec` (the toy models do).
"""

from __future__ import annotations

import math
import weakref
from dataclasses import dataclass, field, replace
from typing import Any, Literal

import torch
from jaxtyping import Bool, Float, Int
from torch import Tensor

from .errors import InvalidSelectionError, NotRopeModelError, RopeGeometryError, UnsupportedModelError

__all__ = [
    "RopeSpec",
    "FrequencyIds",
    "rope_specs",
    "rope_spec",
    "cos_sin",
    "to_pairs",
    "from_pairs",
    "rotate",
    "visible_keys",
    "Pairing",
]

Pairing = Literal["half", "adjacent"]
QKLayout = Literal["bphd", "bhpd"]


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
        qk_layout: ``"bphd"`` ([batch, pos, head, d_head]) or ``"bhpd"`` for those hooks.
        scores_hook: hook with the pre-softmax scores ``[batch, head, query_pos, key_pos]``
            (after softcap, masked entries at the dtype's minimum), or ``None`` where the
            family has none (GPT-J, where ``hook_attn_scores`` is the pattern).
        pattern_hook: hook with the softmax pattern.
        rot_hooks: whether ``hook_rot_q``/``hook_rot_k`` fire for this layer.
        layer_type: e.g. ``"sliding_attention"``/``"full_attention"`` for Gemma 3.
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
        return head // self.group_size

    def kv_index(self, heads: Tensor | list[int] | None = None) -> Tensor:
        """KV head of each query head in ``heads`` (all heads by default) as a long tensor."""
        heads_t = torch.arange(self.n_heads) if heads is None else torch.as_tensor(heads)
        return heads_t // self.group_size

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

    def describe(self) -> str:
        tail = f" + tail of {self.d_head - self.rotary_dim} dims (θ=0)" if self.has_tail else ""
        base = _estimate_base(self.inv_freq, self.rotary_dim)
        extras = []
        if self.window:
            extras.append(f"window {self.window}")
        if self.softcap:
            extras.append(f"softcap {self.softcap}")
        return (
            f"layer {self.layer}{f' ({self.layer_type})' if self.layer_type else ''}: "
            f"{self.n_heads} heads on {self.n_kv_heads} KV heads, d_head {self.d_head}, "
            f"{self.n_rot} {self.pairing}-split pairs{tail}, base≈{base:.4g}, "
            f"scale {self.scale:.4g}" + (", " + ", ".join(extras) if extras else "")
        )

    def with_(self, **changes: Any) -> "RopeSpec":
        """A copy with some fields changed (e.g. ``spec.with_(inv_freq=...)``)."""
        return replace(self, **changes)


def visible_keys(spec: RopeSpec, query_positions: Int[Tensor, "query_pos"],
                 key_positions: Int[Tensor, "key_pos"]) -> Bool[Tensor, "query_pos key_pos"]:
    """Keys each query may attend to: causal, and inside the layer's sliding window."""
    qp = query_positions.to(key_positions.device)[:, None]
    kp = key_positions[None, :]
    allowed = kp <= qp
    if spec.window:
        allowed &= (qp - kp) < spec.window
    return allowed


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
    cos, sin = cos_sin(spec, positions.to(x.device))
    pairs, tail = to_pairs(x, spec)
    cos = cos.to(x.dtype)[None, :, None, :]
    sin = sin.to(x.dtype)[None, :, None, :]
    return from_pairs(rotate_pairs(pairs, cos, sin), tail, spec)


# ----------------------------------------------------------------------------------------
# Reading the geometry from a TransformerBridge

_SPEC_MEMO: "weakref.WeakKeyDictionary[Any, list[RopeSpec]]" = weakref.WeakKeyDictionary()


def rope_specs(model: Any, *, refresh: bool = False) -> list[RopeSpec]:
    """The :class:`RopeSpec` of every layer of ``model``, checked on a probe input.

    The result is memoised per model object (weakly: it goes when the model goes); pass
    ``refresh=True`` after changing the model's rotary buffers or attention settings.

    Raises:
        NotRopeModelError: the model has no rotary position embedding.
        UnsupportedModelError: RoPE through an attention implementation we cannot read.
        RopeGeometryError: the geometry read from the modules disagrees with the model's
            own tables or rotated queries on the probe input.
    """
    own = getattr(model, "lens_possym_rope_specs", None)
    if callable(own):
        return list(own())
    if not refresh and model in _SPEC_MEMO:
        return _SPEC_MEMO[model]
    specs = _specs_from_bridge(model)
    _SPEC_MEMO[model] = specs
    return specs


def rope_spec(model: Any, layer: int) -> RopeSpec:
    """The :class:`RopeSpec` of one layer (negative indices count from the end)."""
    specs = rope_specs(model)
    if not -len(specs) <= layer < len(specs):
        raise InvalidSelectionError(
            f"layer {layer} out of range: the model has {len(specs)} layers (0..{len(specs) - 1})"
        )
    return specs[layer]


def _hf_model(model: Any) -> Any:
    hf = getattr(model, "original_model", None)
    if hf is None:
        raise UnsupportedModelError(
            f"{type(model).__name__} is neither a TransformerLens TransformerBridge nor a model "
            "defining lens_possym_rope_specs(); load models with lens_possym.load_model, "
            "from_hf or from_gguf"
        )
    return hf


def _find_rotary_module(hf: Any) -> Any | None:
    for name, module in hf.named_modules():
        if type(module).__name__.endswith("RotaryEmbedding") and ".layers." not in name:
            return module
    return None


def _layer_inv_freq(rotary: Any, layer_type: str | None) -> tuple[Tensor, float]:
    if layer_type is not None and hasattr(rotary, f"{layer_type}_inv_freq"):
        inv = getattr(rotary, f"{layer_type}_inv_freq")
        scaling = getattr(rotary, f"{layer_type}_attention_scaling", 1.0)
    else:
        inv = rotary.inv_freq
        scaling = getattr(rotary, "attention_scaling", 1.0)
    return inv.detach().to("cpu", torch.float32).clone(), float(scaling)


def _gptj_inv_freq(attn: Any, d_head: int) -> tuple[int, Tensor]:
    rotary_dim = attn.rotary_dim or d_head
    # The formula of transformers' create_sinusoidal_positions (base 10000 is hard-coded
    # there); checked against the layer's embed_positions table on the probe.
    inv = 1.0 / (10000 ** (torch.arange(0, rotary_dim, 2, dtype=torch.int64) / rotary_dim))
    return rotary_dim, inv.to(torch.float32)


def _specs_from_bridge(model: Any) -> list[RopeSpec]:
    hf = _hf_model(model)
    config = hf.config
    blocks = getattr(model, "blocks", None)
    if blocks is None:
        raise UnsupportedModelError("the bridge has no `blocks`; lens-possym needs a decoder stack")
    rotary = _find_rotary_module(hf)
    if rotary is None and not any(
        type(b.attn.original_component).__name__ == "GPTJAttention" for b in blocks
    ):
        raise NotRopeModelError(
            f"{type(hf).__name__} has no rotary position embedding (no *RotaryEmbedding module "
            "and no GPT-J rotary attention); lens-possym analyses RoPE models such as Llama, "
            "Qwen2, Gemma, GPT-NeoX/Pythia and GPT-J"
        )
    probe = _probe(model)
    layer_types = getattr(config, "layer_types", None)
    specs = []
    for layer, block in enumerate(blocks):
        attn_bridge = block.attn
        attn = attn_bridge.original_component
        kind = type(attn).__name__
        prefix = f"blocks.{layer}.attn."
        seen = probe[layer]
        q_normed = prefix + "hook_q_normed" in seen
        q_hook = prefix + ("hook_q_normed" if q_normed else "hook_q")
        k_hook = prefix + ("hook_k_normed" if q_normed else "hook_k")
        layout: QKLayout = "bhpd" if q_normed else "bphd"
        if q_hook not in seen or k_hook not in seen:
            raise UnsupportedModelError(
                f"layer {layer} ({kind}): the hooks {q_hook} / {k_hook} did not fire, so the "
                "un-rotated queries and keys cannot be read"
            )
        q_shape, k_shape = seen[q_hook].shape, seen[k_hook].shape
        head_axis = 1 if layout == "bhpd" else 2
        n_heads, n_kv, d_head = q_shape[head_axis], k_shape[head_axis], q_shape[-1]
        layer_type = layer_types[layer] if layer_types else None
        if kind == "GPTJAttention":
            rotary_dim, inv = _gptj_inv_freq(attn, d_head)
            pairing: Pairing = "adjacent"
            scaling = 1.0
            scale = 1.0 / float(attn.scale_attn)
        elif rotary is not None:
            inv, scaling = _layer_inv_freq(rotary, layer_type)
            rotary_dim = 2 * inv.numel()
            pairing = "half"
            scale = float(getattr(attn, "scaling", 1.0 / math.sqrt(d_head)))
        else:
            raise UnsupportedModelError(f"layer {layer}: {kind} has no rotary embedding to read")
        if rotary_dim > d_head or rotary_dim % 2:
            raise RopeGeometryError(
                f"layer {layer}: rotary dim {rotary_dim} does not fit d_head {d_head}"
            )
        softcap = getattr(attn, "attn_logit_softcapping", None) or getattr(
            config, "attn_logit_softcapping", None
        )
        window = getattr(attn, "sliding_window", None)
        scores_hook = prefix + "hook_attn_scores"
        pattern_hook = prefix + "hook_pattern"
        pre_softmax = scores_hook in seen and not torch.allclose(
            seen[scores_hook].float(), seen[pattern_hook].float()
        )
        spec = RopeSpec(
            layer=layer, n_heads=n_heads, n_kv_heads=n_kv, d_head=d_head,
            rotary_dim=rotary_dim, pairing=pairing, inv_freq=inv, scale=scale,
            attention_scaling=scaling, softcap=float(softcap) if softcap else None,
            window=int(window) if window else None, q_hook=q_hook, k_hook=k_hook,
            qk_layout=layout, scores_hook=scores_hook if pre_softmax else None,
            pattern_hook=pattern_hook, rot_hooks=prefix + "hook_rot_q" in seen,
            layer_type=layer_type, family=kind,
        )
        _check_against_probe(spec, seen, attn, probe["positions"])
        specs.append(spec)
    return specs


def _probe(model: Any) -> dict:
    """Run a short input once and record every attention hook that fires, per layer."""
    n_layers = len(model.blocks)
    wanted = ("hook_q", "hook_k", "hook_q_normed", "hook_k_normed", "hook_rot_q", "hook_rot_k",
              "hook_cos", "hook_sin", "hook_attn_scores", "hook_pattern")
    seen: dict = {layer: {} for layer in range(n_layers)}

    def recorder(layer: int, name: str):
        # Keyed by the alias we asked for: hook.name is the canonical name on the bridge.
        def record(tensor, hook):
            seen[layer][name] = tensor.detach().clone()
            return tensor
        return record

    hook_dict = getattr(model, "hook_dict", {})
    fwd_hooks = [
        (name, recorder(layer, name))
        for layer in range(n_layers)
        for name in (f"blocks.{layer}.attn.{w}" for w in wanted)
        if name in hook_dict
    ]
    vocab = int(model.cfg.d_vocab)
    n_pos = 12
    tokens = (torch.arange(n_pos) * 7 + 3) % max(vocab, 1)
    bos = getattr(getattr(model, "tokenizer", None), "bos_token_id", None)
    if bos is not None:
        tokens[0] = bos
    device = next(model.parameters()).device
    with torch.no_grad():
        model.run_with_hooks(tokens[None].to(device), fwd_hooks=fwd_hooks, return_type=None)
    seen["positions"] = torch.arange(n_pos, device=device)
    return seen


def _check_against_probe(spec: RopeSpec, seen: dict, attn: Any, positions: Tensor) -> None:
    cos, sin = cos_sin(spec, positions)
    prefix = f"blocks.{spec.layer}.attn."
    if prefix + "hook_cos" in seen:
        expected = torch.cat([cos, cos], dim=-1) if spec.pairing == "half" else cos.repeat_interleave(2, -1)
        got = seen[prefix + "hook_cos"].reshape(-1, expected.shape[-1])[: len(positions)].float()
        got_sin = seen[prefix + "hook_sin"].reshape(-1, expected.shape[-1])[: len(positions)].float()
        exp_sin = torch.cat([sin, sin], dim=-1) if spec.pairing == "half" else sin.repeat_interleave(2, -1)
        if got.shape != expected.shape or not (
            torch.allclose(got, expected.to(got.device), atol=1e-5)
            and torch.allclose(got_sin, exp_sin.to(got.device), atol=1e-5)
        ):
            raise RopeGeometryError(
                f"layer {spec.layer}: the rotation tables computed from the model's rotary "
                f"module disagree with the tables the layer used (hook_cos {tuple(got.shape)} vs "
                f"expected {tuple(expected.shape)}); this RoPE variant is not supported yet"
            )
    table = getattr(attn, "embed_positions", None)
    if spec.family == "GPTJAttention" and table is not None:
        n = len(positions)
        expected = torch.cat([sin, cos], dim=-1)
        if not torch.allclose(table[:n].float().cpu(), expected.cpu(), atol=1e-6):
            raise RopeGeometryError(
                f"layer {spec.layer}: GPT-J's embed_positions table disagrees with base-10000 "
                "RoPE; this checkpoint uses a RoPE variant lens-possym does not read yet"
            )
    if spec.rot_hooks:
        q = seen[spec.q_hook].float()
        if spec.qk_layout == "bhpd":
            q = q.transpose(1, 2)
        ours = rotate(q, positions.to(q.device), spec)
        theirs = seen[prefix + "hook_rot_q"].float()
        if not torch.allclose(ours, theirs, atol=1e-4 * max(1.0, float(theirs.abs().max()))):
            raise RopeGeometryError(
                f"layer {spec.layer}: rotating {spec.q_hook} with the geometry read from the "
                f"model ({spec.pairing} pairs, rotary dim {spec.rotary_dim}) does not reproduce "
                "hook_rot_q; this attention variant is not supported yet"
            )
