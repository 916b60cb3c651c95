"""Reading a model's RoPE geometry from the Hugging Face modules a TransformerBridge wraps:
:func:`rope_specs`, checked on a probe pass. What differs between families (pairing,
where the rotation's angles live, what is refused and why) is data, one file per family in
:mod:`lens_possym.rope.families`; this module reads what every family shares.

:func:`rope_specs` reads pairing, rotary dim, angles, scale, softcap, window and GQA from the
Hugging Face modules wrapped by the bridge,
never from ``bridge.cfg`` alone (its flags are wrong for some families), then runs one short
probe forward pass and checks the geometry against what the model actually did: the
``hook_cos``/``hook_sin`` tables where they fire, the rotated queries where ``hook_rot_q``
fires, the probe's own pre-softmax scores (which also fix the pairing where no rotation
hook fires, and the mask), and which score hooks are real pre-softmax scores. The result
is memoised per model and re-read by itself when the rotary buffers or the attention
settings change (a cheap fingerprint is compared on every call).

A model that is not a bridge describes itself by defining ``lens_possym_rope_specs()``
returning a list of :class:`RopeSpec` (paper A's toy model does).
"""

from __future__ import annotations

import math
import weakref
from typing import Any

import torch
from einops import einsum
from torch import Tensor

from .._inputs import as_layer
from .._mismatch import describe_mismatch
from .._precision import model_tolerance, table_tolerance
from .._hooks import forward_failed
from ..errors import (LensPossymError, NonFiniteResultError, NotRopeModelError,
                      RopeGeometryError, UnsupportedModelError)
from ..typing import HookedModel
from .families import family_of
from .geometry import (
    AngleRule,
    Pairing,
    QKLayout,
    RopeSpec,
    cos_sin,
    heads_view,
    rotate,
    visible_keys,
)

__all__ = ["rope_specs", "rope_spec"]

# ----------------------------------------------------------------------------------------
# Reading the geometry from a TransformerBridge

# model -> (fingerprint of what the geometry was read from, specs); weak, so it goes when
# the model goes.
_SPEC_MEMO: "weakref.WeakKeyDictionary[Any, tuple[tuple, list[RopeSpec]]]" = (
    weakref.WeakKeyDictionary())

_PROBE_TOKENS = 12


def rope_specs(model: HookedModel, *, refresh: bool = False) -> list[RopeSpec]:
    """The :class:`RopeSpec` of every layer of ``model``, checked on a probe input.

    The result is memoised per model object (weakly: it goes when the model goes) together
    with a fingerprint of what it was read from (the rotary module's buffers, the rotary
    config, each attention module's scale, window and softcap); a call whose fingerprint
    differs reads the geometry again, so editing the rotary buffers is noticed.
    ``refresh=True`` re-reads unconditionally.

    Input-dependent RoPE (LongRoPE, dynamic NTK): the specs describe a short input; use
    ``spec.at_length(n)`` for an input of ``n`` tokens (capture and decomposition do).

    Raises:
        NotRopeModelError: the model has no rotary position embedding.
        UnsupportedModelError: RoPE through an attention implementation we cannot read.
        RopeGeometryError: the geometry read from the modules disagrees with the model's
            own tables, rotated queries or scores on the probe input; the message names
            the layer, the attention class and the likely cause.
    """
    own = getattr(model, "lens_possym_rope_specs", None)
    if callable(own):
        return list(own())
    hf = _hf_model(model)
    if refresh:
        _ROTARY.pop(model, None)
    memo = None if refresh else _SPEC_MEMO.get(model)
    if memo is not None and memo[0] == _fingerprint(model, hf):
        return memo[1]
    specs = _specs_from_bridge(model)
    _SPEC_MEMO[model] = (_fingerprint(model, hf), specs)
    return specs


def rope_spec(model: HookedModel, layer: int) -> RopeSpec:
    """The :class:`RopeSpec` of one layer (negative indices count from the end)."""
    specs = rope_specs(model)
    return specs[as_layer(layer, len(specs))]


def _hf_model(model: HookedModel) -> Any:
    hf = getattr(model, "original_model", None)
    if hf is None:
        raise UnsupportedModelError(
            f"{type(model).__name__} is neither a TransformerLens TransformerBridge nor a model "
            "defining lens_possym_rope_specs(); load models with lens_possym.load_model, "
            "from_hf or from_gguf"
        )
    return hf


# model -> its rotary module: walking every module of a real model costs milliseconds,
# the whole fingerprint costs ~0.3 ms (``refresh=True`` looks again).
_ROTARY: "weakref.WeakKeyDictionary[Any, Any]" = weakref.WeakKeyDictionary()


def _rotary_of(model: HookedModel, hf: Any) -> Any | None:
    if model not in _ROTARY:
        _ROTARY[model] = _find_rotary_module(hf)
    return _ROTARY[model]


def _find_rotary_module(hf: Any) -> Any | None:
    """The model's rotary module: the shared one, else the first layer's own (GPT-OSS's
    bridge keeps the original only inside the layers; all layers share its config)."""
    found = [(name, module) for name, module in hf.named_modules()
             if type(module).__name__.endswith("RotaryEmbedding")]
    shared = [module for name, module in found if ".layers." not in name]
    return (shared or [module for _, module in found] or [None])[0]


# ---- the memo's fingerprint -------------------------------------------------------------


def _tensor_key(tensor: Tensor) -> tuple:
    """Cheap identity of a buffer's contents: its bytes when small, else a checksum."""
    t = tensor.detach()
    if t.numel() <= 65536:
        raw = t.cpu().contiguous().view(torch.uint8).numpy().tobytes()
        return (str(t.dtype), tuple(t.shape), hash(raw))
    return (str(t.dtype), tuple(t.shape), t.data_ptr(), t._version, float(t.double().sum()))


def _live_buffers(rotary: Any) -> set[str]:
    """Buffers the model itself rewrites during forward passes (input-dependent RoPE)."""
    types = getattr(rotary, "rope_type", "default")
    types = types.values() if isinstance(types, dict) else [types]
    if not any(t == "longrope" or "dynamic" in str(t) for t in types):
        return set()
    return {name for name, _ in rotary.named_buffers(recurse=False)
            if name.endswith("inv_freq") and not name.endswith("original_inv_freq")}


def _fingerprint(model: HookedModel, hf: Any) -> tuple:
    """What the geometry is read from, cheaply: equal fingerprints, equal geometry."""
    config = hf.config
    parts: list = [repr(getattr(config, "rope_parameters", None)),
                   getattr(config, "sliding_window", None),
                   tuple(getattr(config, "layer_types", None) or ()),
                   getattr(config, "attn_logit_softcapping", None)]
    rotary = _rotary_of(model, hf)
    if rotary is not None:
        live = _live_buffers(rotary)
        parts += [(name, _tensor_key(buf)) for name, buf in rotary.named_buffers(recurse=False)
                  if name not in live]
        parts += [(name, value) for name, value in vars(rotary).items()
                  if name.endswith("attention_scaling")]
    for block in getattr(model, "blocks", []):
        attn = block.attn.original_component
        parts.append(tuple(getattr(attn, name, None) for name in (
            "scaling", "sliding_window", "attn_logit_softcapping", "scale_attn", "rotary_dim")))
        table = getattr(attn, "embed_positions", None)
        if isinstance(table, Tensor):
            parts.append(_tensor_key(table))
    return tuple(repr(p) if isinstance(p, Tensor) else p for p in parts)


# ---- angles: fixed, or as a function of the input's length ------------------------------


def _float32_cpu(t: Tensor) -> Tensor:
    return t.detach().to("cpu", torch.float32).clone()


def _layer_prefix(rotary: Any, layer_type: str | None) -> str:
    """``"<layer_type>_"`` where the rotary module keeps per-layer-type buffers (Gemma 3)."""
    if layer_type is not None and hasattr(rotary, f"{layer_type}_inv_freq"):
        return f"{layer_type}_"
    return ""


def _rope_type(rotary: Any, layer_type: str | None) -> str:
    types = getattr(rotary, "rope_type", "default")
    if isinstance(types, dict):
        return str(types.get(layer_type, "default"))
    return str(types)


def _layer_inv_freq(rotary: Any, layer_type: str | None) -> tuple[Tensor, float]:
    prefix = _layer_prefix(rotary, layer_type)
    inv = getattr(rotary, f"{prefix}inv_freq")
    return _float32_cpu(inv), _attention_scaling(rotary, prefix)


def _attention_scaling(rotary: Any, prefix: str) -> float:
    """The cos/sin factor of the rotary module (per layer type where it keeps one)."""
    default = getattr(rotary, "attention_scaling", 1.0)
    return float(getattr(rotary, f"{prefix}attention_scaling", default))


def _angle_rule(rotary: Any, layer_type: str | None) -> AngleRule | None:
    """``n -> (inv_freq, attention_scaling)`` for input-dependent RoPE, else ``None``.

    Mirrors ``transformers.modeling_rope_utils.dynamic_rope_update`` (the wrapper around
    every Hugging Face rotary forward), calling the same init functions with the same
    argument types, so the angles are bit-identical to the model's.
    """
    prefix = _layer_prefix(rotary, layer_type)
    typed = layer_type if prefix else None
    rope_type = _rope_type(rotary, typed)
    if rope_type != "longrope" and "dynamic" not in rope_type:
        return None
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    init = ROPE_INIT_FUNCTIONS[rope_type]
    module = weakref.ref(rotary)

    def longrope(n_pos: int) -> tuple[Tensor, float]:
        # Short factors up to original_max_position_embeddings, long factors beyond.
        mod = module()
        params = mod.config.rope_parameters[typed] if typed else mod.config.rope_parameters
        limit = params["original_max_position_embeddings"]
        original = getattr(mod, f"{prefix}original_inv_freq")
        if n_pos <= limit:
            return _float32_cpu(original), _attention_scaling(mod, prefix)
        long = getattr(mod, f"{prefix}long_inv_freq", None)
        if long is None:
            long, _ = init(mod.config, original.device, seq_len=limit + 1, layer_type=typed)
        return _float32_cpu(long), _attention_scaling(mod, prefix)

    def dynamic(n_pos: int) -> tuple[Tensor, float]:
        # Growth past the longest input seen recomputes the base for this length; a short
        # input after a long one resets to the original; otherwise the buffer stays.
        mod = module()
        cached = getattr(mod, f"{prefix}max_seq_len_cached", mod.max_seq_len_cached)
        live = getattr(mod, f"{prefix}inv_freq")
        if n_pos > cached:
            seq_len = torch.tensor(n_pos, dtype=torch.int64, device=live.device)
            inv, scaling = init(mod.config, live.device, seq_len=seq_len, layer_type=typed)
            return _float32_cpu(inv), float(scaling)
        if n_pos < mod.original_max_seq_len and cached > mod.original_max_seq_len:
            original = getattr(mod, f"{prefix}original_inv_freq")
            return _float32_cpu(original), _attention_scaling(mod, prefix)
        return _float32_cpu(live), _attention_scaling(mod, prefix)

    return longrope if rope_type == "longrope" else dynamic


def _gptj_inv_freq(attn: Any, d_head: int) -> tuple[int, Tensor]:
    rotary_dim = attn.rotary_dim or d_head
    # The formula of transformers' create_sinusoidal_positions (base 10000 is hard-coded
    # there); checked against the layer's embed_positions table on the probe.
    inv = 1.0 / (10000 ** (torch.arange(0, rotary_dim, 2, dtype=torch.int64) / rotary_dim))
    return rotary_dim, inv.to(torch.float32)


def _read_window(attn: Any, config: Any, layer_type: str | None) -> int | None:
    """The layer's sliding window, wherever the family keeps it.

    Gemma 2/3, Qwen2/3 and OLMo3 set ``attn.sliding_window`` (``None`` on full layers);
    Mistral, Mixtral, Phi-3 and Starcoder2 keep it only in ``config.sliding_window`` and
    build their mask from that; families with ``config.layer_types`` window only their
    ``"sliding_attention"`` layers.
    """
    if hasattr(attn, "sliding_window"):
        window = attn.sliding_window
    elif layer_type is not None:
        sliding = layer_type == "sliding_attention"
        window = getattr(config, "sliding_window", None) if sliding else None
    else:
        window = getattr(config, "sliding_window", None)
    return int(window) if window else None


# ---- the probe and the layer specs ------------------------------------------------------


def _specs_from_bridge(model: HookedModel) -> list[RopeSpec]:
    hf = _hf_model(model)
    blocks = getattr(model, "blocks", None)
    if blocks is None:
        raise UnsupportedModelError("the bridge has no `blocks`; lens-possym needs a decoder stack")
    rotary = _rotary_of(model, hf)
    kinds = {type(b.attn.original_component).__name__ for b in blocks if hasattr(b, "attn")}
    for kind in sorted(kinds):
        if family_of(kind).refused:
            raise UnsupportedModelError(
                f"{type(hf).__name__} ({kind}) is not supported: {family_of(kind).refused}")
    if rotary is None and not any(family_of(k).angles == "gptj_table" for k in kinds):
        raise NotRopeModelError(
            f"{type(hf).__name__} has no rotary position embedding (no *RotaryEmbedding module "
            "and no GPT-J rotary attention); lens-possym analyses RoPE models such as Llama, "
            "Qwen, Gemma, Mistral, Phi-3, OLMo2, Cohere, GPT-NeoX/Pythia and GPT-J"
        )
    for layer, block in enumerate(blocks):
        if not hasattr(block, "attn"):
            raise UnsupportedModelError(
                f"{type(hf).__name__}: layer {layer} has no attention block (a linear-attention "
                "or state-space layer); lens-possym reads models whose every layer is RoPE "
                "attention"
            )
    probe = _probe(model)
    positions = probe["positions"]
    specs = []
    for layer, block in enumerate(blocks):
        spec = _read_layer(layer, block.attn.original_component, rotary, hf.config, probe[layer],
                           getattr(model, "cfg", None))
        spec = _settle_on_probe(spec, probe[layer], block.attn.original_component, positions,
                                rotary)
        specs.append(spec)
    return specs


def _read_layer(layer: int, attn: Any, rotary: Any, config: Any, seen: dict,
                bridge_cfg: Any = None) -> RopeSpec:
    """The geometry of one layer as read from its modules (pairing still a first guess)."""
    kind = type(attn).__name__
    prefix = f"blocks.{layer}.attn."
    q_normed = prefix + "hook_q_normed" in seen
    q_hook = prefix + ("hook_q_normed" if q_normed else "hook_q")
    k_hook = prefix + ("hook_k_normed" if q_normed else "hook_k")
    if q_hook not in seen or k_hook not in seen or prefix + "hook_q" not in seen:
        raise UnsupportedModelError(
            f"layer {layer} ({kind}): the hooks {q_hook} / {k_hook} did not fire, so the "
            "un-rotated queries and keys cannot be read"
        )
    # Per-head shapes from hook_q/hook_k ([batch, pos, head, d_head] on every bridge);
    # the normed hooks are per head ([batch, head, pos, d_head]) or, where the norm acts
    # on the whole projection (OLMo2, OLMo3), flat [batch, pos, head·d_head].
    q_shape, k_shape = seen[prefix + "hook_q"].shape, seen[prefix + "hook_k"].shape
    if len(q_shape) != 4 or len(k_shape) != 4:
        raise UnsupportedModelError(
            f"layer {layer} ({kind}): hook_q/hook_k have shapes {tuple(q_shape)} / "
            f"{tuple(k_shape)}, not [batch, pos, head, d_head]; this attention is not supported"
        )
    n_heads, n_kv, d_head = q_shape[2], k_shape[2], q_shape[3]
    layout: QKLayout = "bphd"
    if q_normed:
        layout = "flat" if seen[q_hook].ndim == 3 else "bhpd"
    layer_types = getattr(config, "layer_types", None)
    layer_type = layer_types[layer] if layer_types else None
    rope_type, rule = "default", None
    family = family_of(kind)
    if family.angles == "gptj_table":
        rotary_dim, inv = _gptj_inv_freq(attn, d_head)
        scaling = 1.0
        # transformers >= 5.24 keeps the scale as `scaling`; earlier releases as `scale_attn`
        scale = float(attn.scaling) if hasattr(attn, "scaling") else 1.0 / float(attn.scale_attn)
    elif rotary is not None:
        inv, scaling = _layer_inv_freq(rotary, layer_type)
        rule = _angle_rule(rotary, layer_type)
        rope_type = _rope_type(rotary, layer_type if _layer_prefix(rotary, layer_type) else None)
        if rule is not None:  # the live buffer may hold a longer input's angles: use the probe's
            inv, scaling = rule(_PROBE_TOKENS)
        if not getattr(attn, "use_rope", True):  # SmolLM3's NoPE layers: all dims are tail
            inv = inv[:0]
        rotary_dim = 2 * inv.numel()
        scale = float(getattr(attn, "scaling", 1.0 / math.sqrt(d_head)))
    else:
        raise UnsupportedModelError(f"layer {layer}: {kind} has no rotary embedding to read")
    if rotary_dim > d_head or rotary_dim % 2:
        raise RopeGeometryError(
            f"layer {layer} ({kind}): rotary dim {rotary_dim} does not fit d_head {d_head}"
        )
    softcap = getattr(attn, "attn_logit_softcapping", None) or getattr(
        config, "attn_logit_softcapping", None
    )
    scores_hook = prefix + "hook_attn_scores"
    pattern_hook = prefix + "hook_pattern"
    pre_softmax = scores_hook in seen and not torch.allclose(
        seen[scores_hook].float(), seen[pattern_hook].float()
    )
    # The bridge rotates adjacent pairs with q and k upcast to float32 (GLM, ERNIE:
    # rotary_adjacent_pairs; Cohere: rotary_interleaved_cos_sin), as HF's Cohere does.
    bridge_adjacent = any(getattr(bridge_cfg, flag, False)
                          for flag in ("rotary_adjacent_pairs", "rotary_interleaved_cos_sin"))
    adjacent = bridge_adjacent or family.pairing == "adjacent"
    return RopeSpec(
        layer=layer, n_heads=n_heads, n_kv_heads=n_kv, d_head=d_head,
        rotary_dim=rotary_dim, pairing="adjacent" if adjacent else "half",
        rotary_input_dtype=torch.float32 if bridge_adjacent else None,
        inv_freq=inv, scale=scale, attention_scaling=scaling,
        softcap=float(softcap) if softcap else None,
        window=_read_window(attn, config, layer_type), q_hook=q_hook, k_hook=k_hook,
        qk_layout=layout, scores_hook=scores_hook if pre_softmax else None,
        pattern_hook=pattern_hook, rot_hooks=prefix + "hook_rot_q" in seen,
        layer_type=layer_type, family=kind, rope_type=rope_type, angle_rule=rule,
        # GPT-OSS: a learned per-head "sink" logit joins the softmax; the scores are still
        # the sum of the terms, but the pattern is not their softmax alone.
        extra={"attention_sinks": True} if isinstance(getattr(attn, "sinks", None), Tensor) else {},
    )


def _probe(model: HookedModel) -> dict:
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
    tokens = (torch.arange(_PROBE_TOKENS) * 7 + 3) % max(vocab, 1)
    bos = getattr(getattr(model, "tokenizer", None), "bos_token_id", None)
    if bos is not None:
        tokens[0] = bos
    device = next(model.parameters()).device
    with torch.no_grad():
        try:
            model.run_with_hooks(tokens[None].to(device), fwd_hooks=fwd_hooks, return_type=None)
        except (RuntimeError, ValueError, IndexError, TypeError) as exc:
            if isinstance(exc, LensPossymError):
                raise
            raise forward_failed(model, exc) from exc
    for layer in range(n_layers):
        bad = sorted(name for name, t in seen[layer].items()
                     if t.is_floating_point() and not bool(t.isfinite().all())
                     and not name.endswith(("hook_attn_scores", "hook_pattern")))
        if bad:
            raise NonFiniteResultError(
                f"layer {layer}: the model computes nan/inf on a probe input ({bad[0]}); its "
                "weights (or a hook attached to it) hold nan/inf: load it again or check "
                "what was changed")
    seen["positions"] = torch.arange(_PROBE_TOKENS, device=device)
    return seen


def _settle_on_probe(
    spec: RopeSpec, seen: dict, attn: Any, positions: Tensor, rotary: Any = None
) -> RopeSpec:
    """Check ``spec`` against everything the probe recorded; settle the pairing.

    The tables (``hook_cos``/``hook_sin``, GPT-J's ``embed_positions``) check the angles;
    the pairing is the one of ``"half"``/``"adjacent"`` (first guess first) that reproduces
    ``hook_rot_q`` where it fires and the probe's scores (or pattern).
    """
    _check_tables(spec, seen, _gptj_table(attn, rotary), positions)
    other: Pairing = "half" if spec.pairing == "adjacent" else "adjacent"
    first_problem = None
    for candidate in (spec, spec.with_(pairing=other)):
        problem = _probe_disagreement(candidate, seen, positions)
        if problem is None:
            return candidate
        first_problem = first_problem or problem
    raise RopeGeometryError(
        f"layer {spec.layer} ({spec.family}): the geometry read from the model "
        f"({spec.describe()}) does not reproduce what it computed on a probe input: "
        f"{first_problem}. lens-possym cannot read this attention variant yet; please report it "
        "with the model's class name"
    )


def _gptj_table(attn: Any, rotary: Any) -> Tensor | None:
    """GPT-J's sinusoidal ``embed_positions`` table: on the attention module up to
    transformers 5.23, on the model's shared ``GPTJRotaryEmbedding`` from 5.24."""
    for owner in (attn, rotary):
        table = getattr(owner, "embed_positions", None)
        if isinstance(table, Tensor):
            return table
    return None


def _check_tables(spec: RopeSpec, seen: dict, table: Tensor | None, positions: Tensor) -> None:
    cos, sin = cos_sin(spec, positions)
    prefix = f"blocks.{spec.layer}.attn."
    if spec.rotary_dim == 0:  # a NoPE layer: the shared tables are other layers' business
        return
    if prefix + "hook_cos" in seen and prefix + "hook_sin" in seen:
        got_cos = seen[prefix + "hook_cos"]
        got_cos = got_cos.reshape(-1, got_cos.shape[-1])[: len(positions)].float()
        got_sin = seen[prefix + "hook_sin"]
        got_sin = got_sin.reshape(-1, got_sin.shape[-1])[: len(positions)].float()
        # Hugging Face lays the table out as [θ, θ] (cat), θ0 θ0 θ1 θ1 (interleaved,
        # Cohere) or once (GPT-OSS) whatever the pairing; each carries the same angles.
        layouts = [lambda t: torch.cat([t, t], dim=-1), lambda t: t.repeat_interleave(2, -1),
                   lambda t: t]
        # The layer casts its float32 tables to the model's dtype: compare at that dtype's
        # rounding (half an ulp of the largest entry), not at float32's.
        atol = table_tolerance(seen[prefix + "hook_cos"].dtype, spec.attention_scaling)
        ok = any(
            got_cos.shape == lay(cos).shape
            and torch.allclose(got_cos, lay(cos).to(got_cos.device), atol=atol, rtol=0)
            and torch.allclose(got_sin, lay(sin).to(got_sin.device), atol=atol, rtol=0)
            for lay in layouts
        )
        if not ok:
            raise RopeGeometryError(
                f"layer {spec.layer} ({spec.family}): the rotation tables computed from the "
                f"model's rotary module (rope_type {spec.rope_type!r}, {spec.n_rot} angles) "
                f"disagree with the tables the layer used (hook_cos has shape "
                f"{tuple(got_cos.shape)}, expected ({len(positions)}, {spec.rotary_dim})"
                + ("" if got_cos.shape[-1] != spec.rotary_dim else
                   f", same shape, values apart by more than {atol:.2g}, the rounding of the "
                   f"tables' dtype {str(seen[prefix + 'hook_cos'].dtype).removeprefix('torch.')}")
                + "); this RoPE variant is not supported yet"
            )
    if family_of(spec.family).angles == "gptj_table" and table is not None:
        n = len(positions)
        expected = torch.cat([sin, cos], dim=-1)
        atol = table_tolerance(table.dtype, 1.0)
        if not torch.allclose(table[:n].float().cpu(), expected.cpu(), atol=atol, rtol=0):
            raise RopeGeometryError(
                f"layer {spec.layer}: GPT-J's embed_positions table disagrees with base-10000 "
                "RoPE; this checkpoint uses a RoPE variant lens-possym does not read yet"
            )


def _probe_disagreement(spec: RopeSpec, seen: dict, positions: Tensor) -> str | None:
    """``None`` if ``spec`` reproduces the probe's rotated queries and scores, else why not."""
    prefix = f"blocks.{spec.layer}.attn."
    q = heads_view(seen[spec.q_hook], spec)
    k = heads_view(seen[spec.k_hook], spec)
    if spec.rot_hooks:
        # rotated in the model's dtype, as the model rotates them
        ours = rotate(q, positions.to(q.device), spec).float()
        theirs = seen[prefix + "hook_rot_q"]
        tolerance = model_tolerance(q.dtype, theirs.dtype)
        theirs = theirs.float()
        if theirs.shape != ours.shape:
            theirs = theirs.transpose(1, 2)
        if theirs.shape != ours.shape or not torch.allclose(
            ours, theirs, atol=tolerance * max(1.0, float(theirs.abs().max())), rtol=0
        ):
            return (f"rotating {spec.q_hook} with {spec.pairing} pairs does not reproduce "
                    "hook_rot_q. Likely cause: angles or pairing")
    kpos = positions.to(q.device)
    qr = rotate(q, kpos, spec).double()
    kr = rotate(k, kpos, spec).double()[:, :, spec.kv_index().to(k.device)]
    scores = einsum(qr, kr, "batch query_pos head_index d_head, batch key_pos head_index d_head"
                    " -> batch head_index query_pos key_pos") * spec.scale
    if spec.softcap:
        scores = spec.softcap * torch.tanh(scores / spec.softcap)
    mask = visible_keys(spec, kpos, kpos)
    if spec.scores_hook is not None and spec.scores_hook in seen:
        model = seen[spec.scores_hook]
        visible = model.double()[..., mask] if mask.any() else model.new_zeros(1)
        tolerance = model_tolerance(q.dtype, model.dtype) * max(1.0, float(visible.abs().max()))
        return describe_mismatch(scores, model, mask, kpos, kpos, tolerance, window=spec.window)
    if spec.pattern_hook in seen:
        pattern = torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1)
        worst = float((pattern - seen[spec.pattern_hook].double()).abs().max())
        if worst > model_tolerance(q.dtype, seen[spec.pattern_hook].dtype):
            return (f"the attention pattern implied by the scores differs from hook_pattern "
                    f"by {worst:.3g}. Likely cause: angles, pairing, scale or mask")
    return None
