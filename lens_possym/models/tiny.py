"""Tiny randomly initialised RoPE models of each family, booted offline through the bridge.

They exercise the real Hugging Face attention code and the real TransformerBridge hook
path (which hooks fire differs by family), at sizes where a forward pass takes
milliseconds. Tests and examples use them; nothing is downloaded.

Families and what each one covers:

=========  =============================================================================
family     geometry
=========  =============================================================================
llama      half-split pairs, full rotary, GQA (4 query heads on 2 KV heads)
qwen2      half-split pairs, full rotary, GQA, q/k/v biases
gemma3     q/k-norm before RoPE, base 1e4 on sliding layers and 1e6 on the full layer,
           sliding window 4, scale from ``query_pre_attn_scalar`` (not 1/sqrt(d_head))
neox       GPT-NeoX: partial rotary (half of d_head), non-rotated tail, no rotation hooks
gptj       GPT-J: adjacent pairs, partial rotary, no rotation hooks, no pre-softmax hook
=========  =============================================================================
"""

from __future__ import annotations

import tempfile
from typing import Any, Literal

import torch

from ..errors import InvalidSelectionError

__all__ = ["TINY_FAMILIES", "TinyFamily", "tiny_model", "tiny_tokenizer", "TINY_VOCAB"]

TinyFamily = Literal["llama", "qwen2", "gemma3", "neox", "gptj"]
TINY_FAMILIES: tuple[str, ...] = ("llama", "qwen2", "gemma3", "neox", "gptj")

_SPECIAL = ["<pad>", "<bos>", "<eos>", "<unk>"]
_NAMES = (
    "Alice Bob Carol Dave Eve Frank Grace Heidi Ivan Judy Mallory Oscar Peggy Rupert "
    "Sybil Trent Victor Walter Anna Ben Chloe Dan Emma Finn"
).split()
_COLORS = "red blue green yellow black white orange purple pink brown gray gold".split()
_FOODS = "apples bread cheese fish rice soup cake tea milk eggs".split()
_GLUE = (
    ". , ? ! : ; ' the a an and or of to in on is are was were has have does do did what "
    "which who color colour food like likes liked loves eats drinks owns sees The What "
    "Which Who Answer Question Q A : x y z"
).split()
_FILLER = [f"w{i}" for i in range(60)]
# Word-level vocabulary: every word is one token, so task builders can use any of them.
TINY_VOCAB: tuple[str, ...] = tuple(
    dict.fromkeys(_SPECIAL + _NAMES + _COLORS + _FOODS + _GLUE + _FILLER)
)


def tiny_tokenizer():
    """A word-level tokenizer over :data:`TINY_VOCAB` that prepends ``<bos>``.

    It is written to a temporary folder and loaded back, because the bridge needs a
    tokenizer that was loaded from disk (one built only in memory has no ``name_or_path``).
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    vocab = {word: i for i, word in enumerate(TINY_VOCAB)}
    core = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.Whitespace()
    core.decoder = decoders.WordPiece(prefix="##")  # joins words with spaces
    fast = PreTrainedTokenizerFast(
        tokenizer_object=core,
        bos_token="<bos>",
        eos_token="<eos>",
        pad_token="<pad>",
        unk_token="<unk>",
    )
    with tempfile.TemporaryDirectory(prefix="lens_possym_tok_") as folder:
        fast.save_pretrained(folder)
        tokenizer = AutoTokenizer.from_pretrained(folder, add_bos_token=True)
    return tokenizer


def _hf_config(family: str, *, n_layers: int, d_model: int, n_heads: int, n_kv_heads: int,
               d_head: int, n_ctx: int, init_range: float, overrides: dict[str, Any]):
    import transformers

    vocab = len(TINY_VOCAB)
    ids = dict(bos_token_id=1, eos_token_id=2, pad_token_id=0)
    if family in ("llama", "qwen2"):
        cls = transformers.LlamaConfig if family == "llama" else transformers.Qwen2Config
        cfg = cls(vocab_size=vocab, hidden_size=d_model, num_hidden_layers=n_layers,
                  num_attention_heads=n_heads, num_key_value_heads=n_kv_heads, head_dim=d_head,
                  intermediate_size=2 * d_model, max_position_embeddings=n_ctx,
                  initializer_range=init_range, rope_theta=10000.0, **ids)
    elif family == "gemma3":
        types = ["sliding_attention"] * max(n_layers - 1, 0) + ["full_attention"]
        cfg = transformers.Gemma3TextConfig(
            vocab_size=vocab, hidden_size=d_model, num_hidden_layers=n_layers,
            num_attention_heads=n_heads, num_key_value_heads=n_kv_heads, head_dim=d_head,
            intermediate_size=2 * d_model, max_position_embeddings=n_ctx, sliding_window=4,
            layer_types=types, initializer_range=init_range, **ids)
    elif family == "neox":
        cfg = transformers.GPTNeoXConfig(
            vocab_size=vocab, hidden_size=d_model, num_hidden_layers=n_layers,
            num_attention_heads=n_heads, intermediate_size=2 * d_model,
            max_position_embeddings=n_ctx, rotary_pct=0.5, initializer_range=init_range,
            bos_token_id=1, eos_token_id=2)
    elif family == "gptj":
        cfg = transformers.GPTJConfig(
            vocab_size=vocab, n_embd=d_model, n_layer=n_layers, n_head=n_heads,
            n_positions=n_ctx, rotary_dim=d_head // 2, n_inner=2 * d_model,
            initializer_range=init_range, bos_token_id=1, eos_token_id=2)
    else:
        raise InvalidSelectionError(
            f"unknown tiny-model family {family!r}; choose one of {', '.join(TINY_FAMILIES)}"
        )
    for key, value in overrides.items():
        setattr(cfg, key, value)
    return cfg


_HF_CLASSES = {
    "llama": "LlamaForCausalLM",
    "qwen2": "Qwen2ForCausalLM",
    "gemma3": "Gemma3ForCausalLM",
    "neox": "GPTNeoXForCausalLM",
    "gptj": "GPTJForCausalLM",
}


def tiny_model(
    family: TinyFamily = "llama",
    *,
    seed: int = 0,
    n_layers: int | None = None,
    d_model: int = 64,
    n_heads: int = 4,
    n_kv_heads: int | None = None,
    d_head: int = 16,
    n_ctx: int = 256,
    init_range: float = 0.1,
    dtype: torch.dtype = torch.float32,
    device: str | torch.device = "cpu",
    **config_overrides: Any,
):
    """Build a tiny random model of one RoPE family and wrap it in a ``TransformerBridge``.

    Args:
        family: one of :data:`TINY_FAMILIES`.
        seed: seed for the weights; the same seed gives the same model.
        n_layers: defaults to 3 for gemma3 (two sliding layers, one full) and 2 otherwise.
        n_kv_heads: defaults to 2 for llama/qwen2 (GQA), 1 for gemma3, ``n_heads`` otherwise
            (GPT-NeoX and GPT-J have no GQA).
        init_range: std of the random weights; larger than HF's 0.02 default so that
            attention patterns are far from uniform.
        dtype: e.g. ``torch.float64`` for tests that compare two exact computations.
        **config_overrides: set on the Hugging Face config before the model is built.

    Returns:
        A ``transformer_lens.model_bridge.TransformerBridge`` with a word-level tokenizer
        over :data:`TINY_VOCAB` (``model.to_tokens("Alice likes red .")`` works).
    """
    import transformers

    from .loading import from_hf

    if family not in TINY_FAMILIES:
        raise InvalidSelectionError(
            f"unknown tiny-model family {family!r}; choose one of {', '.join(TINY_FAMILIES)}"
        )
    if n_layers is None:
        n_layers = 3 if family == "gemma3" else 2
    if n_kv_heads is None:
        n_kv_heads = {"llama": 2, "qwen2": 2, "gemma3": 1}.get(family, n_heads)
    if family in ("neox", "gptj") and n_kv_heads != n_heads:
        raise InvalidSelectionError(f"{family} has no grouped-query attention; leave n_kv_heads unset")
    if family in ("neox", "gptj") and d_model != n_heads * d_head:
        raise InvalidSelectionError(
            f"{family} derives d_head from d_model / n_heads; pass d_model={n_heads * d_head}"
        )
    config = _hf_config(family, n_layers=n_layers, d_model=d_model, n_heads=n_heads,
                        n_kv_heads=n_kv_heads, d_head=d_head, n_ctx=n_ctx,
                        init_range=init_range, overrides=config_overrides)
    config.architectures = [_HF_CLASSES[family]]
    cls = getattr(transformers, _HF_CLASSES[family])
    with torch.random.fork_rng(devices=[]):  # leave the caller's global RNG untouched
        torch.manual_seed(seed)
        hf_model = cls(config)
    hf_model = hf_model.to(dtype=dtype, device=device).eval()
    return from_hf(hf_model, tiny_tokenizer(), name=f"tiny-{family}", device=device)
