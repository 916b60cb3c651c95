"""Tiny random models of the non-RoPE families (absolute PE, ALiBi, MLA), booted through the bridge.

The counterpart of :mod:`lens_possym.models.tiny` for :mod:`lens_possym.positions`: one
family key per Hugging Face family, sizes of a few thousand parameters, a word-level
tokenizer, nothing downloaded.

``random_affine=True`` (the default) gives every layer norm and projection bias random
values (Hugging Face initialises them to 1 and 0), so that the bias terms of a Toeplitz
split are not zero by accident.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from ..errors import InvalidSelectionError
from .tiny import TINY_VOCAB, tiny_tokenizer
from .loading import from_hf

if TYPE_CHECKING:
    from transformer_lens.model_bridge import TransformerBridge

__all__ = ["SCHEME_FAMILIES", "tiny_scheme_model"]

_TOKENS = dict(bos_token_id=1, eos_token_id=2)

_MLA = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4,
            intermediate_size=64, moe_intermediate_size=16, n_routed_experts=4,
            num_experts_per_tok=2, n_shared_experts=1, first_k_dense_replace=2,
            kv_lora_rank=16, qk_rope_head_dim=8, qk_nope_head_dim=8, v_head_dim=8,
            max_position_embeddings=64, **_TOKENS)

# family -> (config class, model class, config arguments at d_model 32, 4 heads, 2 layers)
_FAMILIES: dict[str, tuple[str, str, dict[str, Any]]] = {
    "gpt2": ("GPT2Config", "GPT2LMHeadModel",
             dict(n_embd=32, n_layer=2, n_head=4, n_positions=64, **_TOKENS)),
    "opt": ("OPTConfig", "OPTForCausalLM",
            dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, ffn_dim=64,
                 max_position_embeddings=64, word_embed_proj_dim=32, pad_token_id=0, **_TOKENS)),
    "gpt_neo": ("GPTNeoConfig", "GPTNeoForCausalLM",
                dict(hidden_size=32, num_layers=2, num_heads=4, max_position_embeddings=64,
                     attention_types=[[["global", "local"], 1]], window_size=4, **_TOKENS)),
    "bloom": ("BloomConfig", "BloomForCausalLM",
              dict(hidden_size=32, n_layer=2, n_head=4, **_TOKENS)),
    "mpt": ("MptConfig", "MptForCausalLM",
            dict(d_model=32, n_layers=2, n_heads=4, max_seq_len=64)),
    "falcon": ("FalconConfig", "FalconForCausalLM",
               dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, alibi=True,
                    new_decoder_architecture=False, multi_query=True, **_TOKENS)),
    # every layer dense: the MoE layers' grouped matmul does not run in float64 on the CPU
    "deepseek_v2": ("DeepseekV2Config", "DeepseekV2ForCausalLM", dict(_MLA, q_lora_rank=None)),
    "deepseek_v3": ("DeepseekV3Config", "DeepseekV3ForCausalLM",
                    dict(_MLA, q_lora_rank=16, n_group=1, topk_group=1)),
}
SCHEME_FAMILIES = tuple(_FAMILIES)


def tiny_scheme_model(family: str = "gpt2", *, seed: int = 0, dtype: torch.dtype = torch.float32,
                      random_affine: bool = True, init_range: float = 0.1) -> "TransformerBridge":
    """A tiny random ``family`` model (one of :data:`SCHEME_FAMILIES`) wrapped in a bridge."""
    import transformers


    if family not in _FAMILIES:
        raise InvalidSelectionError(
            f"unknown family {family!r}; use one of {', '.join(_FAMILIES)}")
    config_name, model_name, settings = _FAMILIES[family]
    config = getattr(transformers, config_name)(vocab_size=len(TINY_VOCAB),
                                                initializer_range=init_range, **settings)
    config.architectures = [model_name]
    with torch.random.fork_rng(devices=[]):  # leave the caller's RNG alone
        torch.manual_seed(seed)
        model = getattr(transformers, model_name)(config)
        if random_affine:
            with torch.no_grad():
                for name, param in model.named_parameters():
                    if name.endswith("bias") or "ln" in name or "norm" in name:
                        param.add_(torch.randn_like(param) * init_range)
    model = model.to(dtype=dtype).eval()
    return from_hf(model, tiny_tokenizer(), name=f"tiny-{family}")
