"""Which positional scheme each layer of a model uses: :func:`schemes`, :func:`positional_scheme`.

Hugging Face families are recognised by ``config.model_type``; anything else is asked for
its RoPE geometry (:func:`lens_possym.rope.rope_specs`), and a model that is neither gets
:class:`~lens_possym.errors.NotRopeModelError` naming its type. A model that is not a
bridge may describe itself with ``lens_possym_schemes()``.

Each :class:`LayerScheme` also says where to read the layer's queries and keys, since
the analysis reads them itself (``[batch, pos, head_index, d_head]`` from ``hook_q``/``hook_k``
on these families), and whether ``hook_attn_scores`` holds pre-softmax scores (GPT-2, Bloom,
MPT) or the pattern (OPT, GPT-Neo).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from .._inputs import as_layer
from ..errors import NotRopeModelError, UnsupportedModelError
from ..typing import HookedModel
from .absolute import Absolute
from .base import PositionalScheme
from .bias import AdditiveBias, alibi_slopes
from .rope import Rope
from ..rope import RopeSpec, rope_specs
from .mla import MLA

__all__ = ["LayerScheme", "schemes", "positional_scheme", "ABSOLUTE_FAMILIES", "ALIBI_FAMILIES",
           "MLA_FAMILIES"]

#: model_type -> whether ``hook_attn_scores`` is pre-softmax on the bridge
ABSOLUTE_FAMILIES = {"gpt2": True, "opt": False, "gpt_neo": False}
ALIBI_FAMILIES = {"bloom": "zero", "mpt": "last", "falcon": "zero"}
#: model_type -> how the RoPE part's pairs are laid out in hook_q/hook_k
MLA_FAMILIES = {"deepseek_v2": "adjacent", "deepseek_v3": "half"}


@dataclass(frozen=True)
class LayerScheme:
    """One layer's scheme and where its tensors are read."""

    layer: int
    scheme: PositionalScheme
    n_heads: int
    d_head: int
    q_hook: str
    k_hook: str
    pattern_hook: str
    scores_hook: str | None
    layout: str = "bphd"
    d_content: int | None = None


def _hf_config(model: HookedModel) -> Any:
    hf = getattr(model, "original_model", None)
    return getattr(hf, "config", None)


def _bridge_layer(layer: int, scheme: PositionalScheme, n_heads: int, d_head: int,
                  pre_softmax: bool) -> LayerScheme:
    attn = f"blocks.{layer}.attn"
    return LayerScheme(layer, scheme, n_heads, d_head, f"{attn}.hook_q", f"{attn}.hook_k",
                       f"{attn}.hook_pattern", f"{attn}.hook_attn_scores" if pre_softmax else None)


def schemes(model: HookedModel, *,
            specs: Callable[[], Sequence[RopeSpec]] | None = None) -> list[LayerScheme]:
    """The :class:`LayerScheme` of every layer of ``model``.

    Args:
        specs: what gives the model's RoPE specs if it turns out to be a RoPE model
            (:class:`~lens_possym.resolved.Resolved` passes its own, so they are read
            once); :func:`~lens_possym.rope.rope_specs` by default.

    Raises:
        UnsupportedModelError: MLA with angles other than default RoPE's.
        NotRopeModelError: a model with no recognised scheme.
    """
    own = getattr(model, "lens_possym_schemes", None)
    if callable(own):
        return list(own())
    config = _hf_config(model)
    kind = getattr(config, "model_type", None)
    if kind == "falcon" and not getattr(config, "alibi", False):
        kind = "falcon-rope"  # Falcon without ALiBi is a RoPE model
    if kind in MLA_FAMILIES:
        return _mla_layers(model, config, MLA_FAMILIES[kind])
    if kind in ABSOLUTE_FAMILIES or kind in ALIBI_FAMILIES:
        cfg = model.cfg
        n_heads, d_head = int(cfg.n_heads), int(cfg.d_head)
        out = []
        for layer in range(int(cfg.n_layers)):
            if kind in ALIBI_FAMILIES:
                scheme = AdditiveBias.alibi(_alibi_slopes(kind, config, n_heads),
                                            reference=ALIBI_FAMILIES[kind],
                                            scale=_scale(kind, config, d_head))
            else:
                scheme = Absolute(kind="learned", scale=_scale(kind, config, d_head),
                                  window=_window(kind, config, layer))
            out.append(_bridge_layer(layer, scheme, n_heads, d_head,
                                     ABSOLUTE_FAMILIES.get(kind, True)))
        return out

    try:
        layers = list(specs()) if specs is not None else rope_specs(model)
    except NotRopeModelError as error:
        raise NotRopeModelError(
            f"{error}; lens-possym knows the schemes of RoPE models, "
            f"{', '.join(sorted(ABSOLUTE_FAMILIES))} (absolute) and "
            f"{', '.join(sorted(ALIBI_FAMILIES))} (ALiBi; Falcon with alibi=True) and "
            f"{', '.join(sorted(MLA_FAMILIES))} (MLA)") from None
    return [LayerScheme(s.layer, Rope(spec=s), s.n_heads, s.d_head, s.q_hook, s.k_hook,
                        s.pattern_hook, s.scores_hook) for s in layers]


def _mla_layers(model: HookedModel, config: Any, pairing: str) -> list[LayerScheme]:

    hf = model.original_model
    rotary = hf.model.rotary_emb
    rope_type = getattr(rotary, "rope_type", "default")
    if rope_type != "default" or float(getattr(rotary, "attention_scaling", 1.0)) != 1.0:
        raise UnsupportedModelError(
            f"MLA with rope_type {rope_type!r} is not supported yet: only default RoPE angles "
            f"are read")
    inv_freq = rotary.inv_freq.detach().double().cpu()
    n_heads = int(config.num_attention_heads)
    d_content = int(config.qk_nope_head_dim)
    out = []
    for layer, block in enumerate(hf.model.layers):
        attn = block.self_attn
        attn = getattr(attn, "_original_component", None) or attn
        scheme = MLA(inv_freq=inv_freq, pairing=pairing, scale=float(attn.scaling))
        base = _bridge_layer(layer, scheme, n_heads, d_content + int(config.qk_rope_head_dim),
                             True)
        out.append(LayerScheme(**{**base.__dict__, "layout": "bhpd", "d_content": d_content}))
    return out


def positional_scheme(model: HookedModel, layer: int) -> PositionalScheme:
    """The scheme of one layer (negative indices count from the end)."""
    layers = schemes(model)
    return layers[as_layer(layer, len(layers))].scheme


def _scale(kind: str, config: Any, d_head: int) -> float:
    if kind == "gpt_neo":
        return 1.0  # GPT-Neo does not scale q·k
    if kind == "falcon":
        return 1 / math.sqrt(config.hidden_size // config.num_attention_heads)
    if kind == "mpt":
        scale = (getattr(config, "attn_config", None) and config.attn_config.softmax_scale)
        return float(scale) if scale else 1 / math.sqrt(d_head)
    return 1 / math.sqrt(d_head)


def _window(kind: str, config: Any, layer: int) -> int | None:
    if kind == "gpt_neo" and config.attention_layers[layer] == "local":
        return int(config.window_size)
    return None


def _alibi_slopes(kind: str, config: Any, n_heads: int):
    if kind == "falcon":
        # Falcon (eager attention, as the bridge runs it) adds slope·m/√d_head twice: once
        # folded into the causal mask and once in (q·k + slope·m)/√d_head. The slopes here are
        # what the model adds; swap_scores checks them against its attention every time.
        d_head = config.hidden_size // config.num_attention_heads
        return alibi_slopes(n_heads) * 2 / math.sqrt(d_head)
    if kind == "mpt":
        import torch

        bias_max = float(config.attn_config.alibi_bias_max)
        # MPT: 1 / 2^(bias_max·h/H') over the next power of two H', then interleaved
        pow2 = 2 ** math.ceil(math.log2(n_heads))
        slopes = torch.tensor([1 / 2 ** (bias_max * (h + 1) / pow2) for h in range(pow2)],
                              dtype=torch.float64)
        if pow2 != n_heads:
            slopes = torch.cat([slopes[1::2], slopes[::2]])[:n_heads]
        return slopes
    return alibi_slopes(n_heads)
