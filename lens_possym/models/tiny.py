"""Tiny randomly initialised RoPE models of each family, booted offline through the bridge.

They exercise the real Hugging Face attention code and the real TransformerBridge hook
path (which hooks fire differs by family), at sizes where a forward pass takes
milliseconds. Tests and examples use them; nothing is downloaded.

One family key per distinct geometry (:data:`ALL_TINY_FAMILIES`; ``describe_family(f)``
says what each covers). Windows are 4 tokens, so any prompt of the tests is longer than
the window. :data:`TINY_FAMILIES` are the five core families (llama, qwen2, gemma3, neox,
gptj) that the test suite runs every analysis on; the others are checked by the family
matrix (``tests/models/test_families.py``, ``benchmarks/family_matrix.py``), which keeps
the suite's time in bounds.

:data:`REFUSED_FAMILIES` build too, but lens-possym or the bridge refuses them; they are
kept so that the family table can show the error each one gets.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch

from .._inputs import resolve_device
from ..errors import InvalidSelectionError
from .loading import float_dtype, from_hf

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase
    from transformer_lens.model_bridge import TransformerBridge

__all__ = ["TINY_FAMILIES", "ALL_TINY_FAMILIES", "REFUSED_FAMILIES", "TinyFamily", "tiny_model",
           "tiny_hf_model", "tiny_tokenizer", "describe_family", "TINY_VOCAB"]

TinyFamily = str

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


def tiny_tokenizer() -> "PreTrainedTokenizerBase":
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




@dataclass(frozen=True)
class _Family:
    """How to build one tiny family: its HF classes, sizes style and settings."""

    config: str                      # transformers config class
    model: str                       # transformers causal-LM class
    geometry: str                    # one line for the docs
    settings: dict[str, Any] = field(default_factory=dict)
    style: str = "llama"             # how the config names its sizes: llama / neox / gptj
    n_kv_heads: int | None = 2       # None: no grouped-query attention (n_kv = n_heads)
    n_layers: int = 2
    moe: bool = False                # experts run in eager mode (grouped_mm has no float64)


def _rope(rope_type: str, **params: Any) -> dict[str, Any]:
    return {"rope_parameters": {"rope_type": rope_type, "rope_theta": 10000.0, **params}}


_WINDOW = 4
_FAMILIES: dict[str, _Family] = {
    # ---- the core five (configs unchanged: results on them are kept bit for bit) ----
    "llama": _Family("LlamaConfig", "LlamaForCausalLM",
                     "half-split pairs, full rotary, GQA (4 query heads on 2 KV heads)",
                     {"rope_theta": 10000.0}),
    "qwen2": _Family("Qwen2Config", "Qwen2ForCausalLM",
                     "half-split pairs, full rotary, GQA, q/k/v biases", {"rope_theta": 10000.0}),
    "gemma3": _Family("Gemma3TextConfig", "Gemma3ForCausalLM",
                      "q/k-norm before RoPE, base 1e4 on sliding layers and 1e6 on the full "
                      "layer, window 4, scale from query_pre_attn_scalar",
                      {"sliding_window": _WINDOW}, n_kv_heads=1, n_layers=3),
    "neox": _Family("GPTNeoXConfig", "GPTNeoXForCausalLM",
                    "GPT-NeoX: partial rotary (half of d_head), non-rotated tail, "
                    "no rotation hooks",
                    {"rotary_pct": 0.5}, style="neox", n_kv_heads=None),
    "gptj": _Family("GPTJConfig", "GPTJForCausalLM",
                    "GPT-J: adjacent pairs, partial rotary, no rotation hooks, no pre-softmax hook",
                    {}, style="gptj", n_kv_heads=None),
    # ---- Llama rope_scaling variants ----
    "llama-llama3": _Family("LlamaConfig", "LlamaForCausalLM", "Llama 3.1 frequency scaling",
                            _rope("llama3", factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
                                  original_max_position_embeddings=32)),
    "llama-linear": _Family("LlamaConfig", "LlamaForCausalLM", "linear position interpolation",
                            _rope("linear", factor=4.0)),
    "llama-yarn": _Family("LlamaConfig", "LlamaForCausalLM",
                          "YaRN: ramped frequencies and a cos/sin attention factor",
                          _rope("yarn", factor=4.0, original_max_position_embeddings=64)),
    "llama-dynamic": _Family("LlamaConfig", "LlamaForCausalLM",
                             "dynamic NTK: the base grows with inputs longer than the context "
                             "(16 tokens here)",
                             {**_rope("dynamic", factor=2.0), "max_position_embeddings": 16}),
    # ---- other families ----
    "mistral": _Family("MistralConfig", "MistralForCausalLM", "Mistral, no sliding window",
                       {"sliding_window": None}),
    "mistral-window": _Family("MistralConfig", "MistralForCausalLM",
                              "Mistral, window 4 passed at call time (config.sliding_window)",
                              {"sliding_window": _WINDOW}),
    "mixtral": _Family("MixtralConfig", "MixtralForCausalLM", "Mixtral MoE, window 4",
                       {"sliding_window": _WINDOW, "num_local_experts": 2,
                        "num_experts_per_tok": 1}, moe=True),
    "qwen2-moe": _Family("Qwen2MoeConfig", "Qwen2MoeForCausalLM", "Qwen2-MoE",
                         {"num_experts": 2, "num_experts_per_tok": 1, "moe_intermediate_size": 32,
                          "shared_expert_intermediate_size": 32}, moe=True),
    "qwen3": _Family("Qwen3Config", "Qwen3ForCausalLM", "per-head q/k-norm before RoPE"),
    "qwen3-moe": _Family("Qwen3MoeConfig", "Qwen3MoeForCausalLM", "Qwen3-MoE, per-head q/k-norm",
                         {"num_experts": 2, "num_experts_per_tok": 1, "moe_intermediate_size": 32},
                         moe=True),
    "gemma": _Family("GemmaConfig", "GemmaForCausalLM", "Gemma 1"),
    "gemma2": _Family("Gemma2Config", "Gemma2ForCausalLM",
                      "attention softcap 50, window 4 on alternate layers",
                      {"sliding_window": _WINDOW}),
    "phi": _Family("PhiConfig", "PhiForCausalLM", "Phi-2: partial rotary (half of d_head)",
                   {"partial_rotary_factor": 0.5}),
    "phi3": _Family("Phi3Config", "Phi3ForCausalLM",
                    "Phi-3: partial rotary (half), window 4 passed at call time, no rotation hooks",
                    {"partial_rotary_factor": 0.5, "sliding_window": _WINDOW}),
    "phi3-longrope": _Family("Phi3Config", "Phi3ForCausalLM",
                             "LongRoPE: short factors up to 16 tokens, long factors beyond",
                             {**_rope("longrope", long_factor=[1.0 + 0.5 * i for i in range(8)],
                                      short_factor=[1.0 + 0.1 * i for i in range(8)]),
                              "max_position_embeddings": 64,
                              "original_max_position_embeddings": 16}),
    "olmo": _Family("OlmoConfig", "OlmoForCausalLM", "OLMo"),
    "olmo2": _Family("Olmo2Config", "Olmo2ForCausalLM",
                     "q/k-norm over the whole projection "
                     "(hook_q_normed is [batch, pos, heads*d_head])"),
    "olmo3": _Family("Olmo3Config", "Olmo3ForCausalLM",
                     "OLMo2's q/k-norm, window 4 on sliding layers",
                     {"sliding_window": _WINDOW}),
    "olmoe": _Family("OlmoeConfig", "OlmoeForCausalLM", "OLMoE, q/k-norm over the whole projection",
                     {"num_experts": 2, "num_experts_per_tok": 1}, moe=True),
    "cohere": _Family("CohereConfig", "CohereForCausalLM",
                      "adjacent pairs, interleaved tables, q/k layer-norm, rotation in float32",
                      {"use_qk_norm": True}),
    "cohere2": _Family("Cohere2Config", "Cohere2ForCausalLM",
                       "adjacent pairs, window 4 on sliding layers",
                       {"sliding_window": _WINDOW}),
    "glm": _Family("GlmConfig", "GlmForCausalLM",
                   "adjacent pairs over half of d_head, rotation in float32"),
    "glm4": _Family("Glm4Config", "Glm4ForCausalLM", "GLM-4: adjacent pairs, partial rotary"),
    "stablelm": _Family("StableLmConfig", "StableLmForCausalLM",
                        "partial rotary (a quarter of d_head)",
                        {"partial_rotary_factor": 0.25}),
    "granite": _Family("GraniteConfig", "GraniteForCausalLM",
                       "scale from attention_multiplier (0.3)",
                       {"attention_multiplier": 0.3}),
    "granite-moe": _Family("GraniteMoeConfig", "GraniteMoeForCausalLM", "Granite MoE",
                           {"num_local_experts": 2, "num_experts_per_tok": 1}, moe=True),
    "starcoder2": _Family("Starcoder2Config", "Starcoder2ForCausalLM",
                          "window 4 passed at call time",
                          {"sliding_window": _WINDOW}),
    "nemotron": _Family("NemotronConfig", "NemotronForCausalLM", "partial rotary (half)",
                        {"partial_rotary_factor": 0.5}),
    "smollm3": _Family("SmolLM3Config", "SmolLM3ForCausalLM",
                       "NoPE every 4th layer (layer 3 has no rotation: one tail id)",
                       n_layers=4),
    "exaone4": _Family("Exaone4Config", "Exaone4ForCausalLM",
                       "q/k-norm, window 4 on sliding layers",
                       {"sliding_window": _WINDOW}),
    "ernie4.5": _Family("Ernie4_5Config", "Ernie4_5ForCausalLM",
                        "adjacent pairs rotated entirely in float32 (1e-7 off in a float64 model)"),
    "seed-oss": _Family("SeedOssConfig", "SeedOssForCausalLM", "Seed-OSS"),
    "arcee": _Family("ArceeConfig", "ArceeForCausalLM", "Arcee (AFM)"),
    "apertus": _Family("ApertusConfig", "ApertusForCausalLM", "Apertus: llama3 scaling by default"),
    "bitnet": _Family("BitNetConfig", "BitNetForCausalLM", "BitNet"),
    "ministral3": _Family("Ministral3Config", "Ministral3ForCausalLM",
                          "Ministral 3: YaRN by default"),
    "gpt-oss": _Family("GptOssConfig", "GptOssForCausalLM",
                       "attention sinks (spec.extra['attention_sinks']; the closed-form "
                       "swap scores refuse them: use the re-run), window 4 on sliding layers",
                       {"num_local_experts": 2, "num_experts_per_tok": 1,
                        "sliding_window": _WINDOW},
                       moe=True),
    "codegen": _Family("CodeGenConfig", "CodeGenForCausalLM", "CodeGen: GPT-J's rotary table",
                       {}, style="gptj", n_kv_heads=None),
}
_REFUSED_FAMILIES: dict[str, _Family] = {
    "hunyuan": _Family("HunYuanDenseV1Config", "HunYuanDenseV1ForCausalLM", "q/k-norm after RoPE"),
    "llama4": _Family("Llama4TextConfig", "Llama4ForCausalLM",
                      "NoPE layers with temperature, chunks",
                      {"num_local_experts": 2, "num_experts_per_tok": 1,
                       "intermediate_size_mlp": 64}, moe=True),
    "jetmoe": _Family("JetMoeConfig", "JetMoeForCausalLM", "mixture of attention heads",
                      {"num_local_experts": 2, "num_experts_per_tok": 1}),
    "deepseek-v3": _Family("DeepseekV3Config", "DeepseekV3ForCausalLM",
                           "multi-head latent attention",
                           {"n_routed_experts": 2, "num_experts_per_tok": 1, "q_lora_rank": 16,
                            "kv_lora_rank": 16, "qk_rope_head_dim": 8, "qk_nope_head_dim": 8,
                            "v_head_dim": 16, "first_k_dense_replace": 2}, moe=True),
    "qwen3-next": _Family("Qwen3NextConfig", "Qwen3NextForCausalLM", "hybrid linear attention",
                          {"num_experts": 2, "num_experts_per_tok": 1}, moe=True),
    "phimoe": _Family("PhimoeConfig", "PhimoeForCausalLM", "Phi-3.5-MoE",
                      {"num_local_experts": 2, "num_experts_per_tok": 1}, moe=True),
}

ALL_TINY_FAMILIES: tuple[str, ...] = tuple(_FAMILIES)
TINY_FAMILIES: tuple[str, ...] = ("llama", "qwen2", "gemma3", "neox", "gptj")
REFUSED_FAMILIES: tuple[str, ...] = tuple(_REFUSED_FAMILIES)


def describe_family(family: str) -> str:
    """One line on the geometry a tiny family covers."""
    return _family(family).geometry


def _family(family: str) -> _Family:
    found = _FAMILIES.get(family) or _REFUSED_FAMILIES.get(family)
    if found is None:
        raise InvalidSelectionError(
            f"unknown tiny-model family {family!r}; choose one of {', '.join(ALL_TINY_FAMILIES)}"
        )
    return found


def _hf_config(family: str, *, n_layers: int, d_model: int, n_heads: int, n_kv_heads: int,
               d_head: int, n_ctx: int, init_range: float, overrides: dict[str, Any]):
    import transformers

    spec = _family(family)
    vocab = len(TINY_VOCAB)
    cls = getattr(transformers, spec.config)
    if spec.style == "neox":
        cfg = cls(vocab_size=vocab, hidden_size=d_model, num_hidden_layers=n_layers,
                  num_attention_heads=n_heads, intermediate_size=2 * d_model,
                  max_position_embeddings=n_ctx, initializer_range=init_range,
                  bos_token_id=1, eos_token_id=2, **spec.settings)
    elif spec.style == "gptj":
        cfg = cls(vocab_size=vocab, n_embd=d_model, n_layer=n_layers, n_head=n_heads,
                  n_positions=n_ctx, rotary_dim=d_head // 2, n_inner=2 * d_model,
                  initializer_range=init_range, bos_token_id=1, eos_token_id=2, **spec.settings)
    else:
        sizes = dict(vocab_size=vocab, hidden_size=d_model, num_hidden_layers=n_layers,
                     num_attention_heads=n_heads, num_key_value_heads=n_kv_heads,
                     head_dim=d_head, intermediate_size=2 * d_model,
                     max_position_embeddings=n_ctx, initializer_range=init_range,
                     bos_token_id=1, eos_token_id=2, pad_token_id=0)
        settings = dict(spec.settings)
        if family == "gemma3":
            sliding = ["sliding_attention"] * max(n_layers - 1, 0)
            settings["layer_types"] = sliding + ["full_attention"]
        cfg = cls(**{**sizes, **settings})
    if spec.moe:
        cfg._experts_implementation = "eager"
    for key, value in overrides.items():
        setattr(cfg, key, value)
    return cfg


#: the largest size of each kind a tiny model may have (past them a typo would build for
#: hours or exhaust memory instead of being refused)
TINY_LIMITS = {"n_layers": 64, "d_model": 4096, "n_heads": 256, "n_kv_heads": 256,
               "d_head": 1024, "n_ctx": 1 << 17}


def tiny_model(
    family: str = "llama",
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
) -> "TransformerBridge":
    """Build a tiny random model of one RoPE family and wrap it in a ``TransformerBridge``.

    Args:
        family: one of :data:`ALL_TINY_FAMILIES` (or :data:`REFUSED_FAMILIES`, to see the
            error such a model gets).
        seed: seed for the weights; the same seed gives the same model.
        n_layers: defaults to 3 for gemma3 (two sliding layers, one full), 4 for smollm3
            (the fourth is NoPE) and 2 otherwise.
        n_kv_heads: defaults to 2 (GQA), 1 for gemma3, ``n_heads`` for the families
            without GQA (GPT-NeoX, GPT-J, CodeGen).
        init_range: std of the random weights; larger than HF's 0.02 default so that
            attention patterns are far from uniform.
        dtype: e.g. ``torch.float64`` for tests that compare two exact computations, or
            ``torch.bfloat16``.
        device: the CPU by default (unlike the loaders of real models, which default to
            ``"auto"``): tiny models are for tests and examples, where a forward pass
            takes milliseconds.
        **config_overrides: set on the Hugging Face config before the model is built.

    Returns:
        A ``transformer_lens.model_bridge.TransformerBridge`` with a word-level tokenizer
        over :data:`TINY_VOCAB` (``model.to_tokens("Alice likes red .")`` works).
        :func:`tiny_hf_model` gives the Hugging Face model and tokenizer it wraps.
    """

    hf_model, tokenizer = tiny_hf_model(
        family, seed=seed, n_layers=n_layers, d_model=d_model, n_heads=n_heads,
        n_kv_heads=n_kv_heads, d_head=d_head, n_ctx=n_ctx, init_range=init_range, dtype=dtype,
        device=device, **config_overrides)
    return from_hf(hf_model, tokenizer, name=f"tiny-{family}", device=device)


def tiny_hf_model(
    family: str = "llama",
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
) -> tuple[Any, Any]:
    """The Hugging Face model and tokenizer that :func:`tiny_model` wraps (same arguments).

    For what needs the plain model: saving it as a Hugging Face folder
    (``hf_model.save_pretrained(folder); tokenizer.save_pretrained(folder)``, which
    ``load_model(folder)`` and ``--model folder`` read back), or analysing it outside
    TransformerLens (docs/outside_transformerlens.md).
    """
    import transformers

    spec = _family(family)
    for name, value in (("n_heads", n_heads), ("d_head", d_head), ("d_model", d_model),
                        ("n_ctx", n_ctx), ("n_kv_heads", n_kv_heads), ("n_layers", n_layers)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                                  or value < 1):
            raise InvalidSelectionError(f"{name} must be a positive integer, got {value!r}")
        if value is not None and value > TINY_LIMITS[name]:
            raise InvalidSelectionError(
                f"{name}={value} is past what a tiny model may have ({TINY_LIMITS[name]}); "
                "a tiny model is for tests and examples (load a real one with load_model)")
    layers = spec.n_layers if n_layers is None else n_layers
    if layers * d_model * max(d_model, n_heads * d_head) > 1 << 26:
        raise InvalidSelectionError(
            f"{layers} layers of width {d_model} ({n_heads} heads of {d_head}) are past what "
            "a tiny model may have (n_layers x d_model x max(d_model, n_heads x d_head) at "
            "most 2^26, a few GB of weights); make it smaller")
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise InvalidSelectionError(f"seed must be an integer, got {seed!r}")
    dtype = float_dtype(dtype)
    device = resolve_device(device)
    if n_kv_heads is not None and n_heads % n_kv_heads:
        raise InvalidSelectionError(
            f"n_heads ({n_heads}) must be a multiple of n_kv_heads ({n_kv_heads})")
    if d_head % 2:
        raise InvalidSelectionError(f"d_head must be even (RoPE rotates pairs), got {d_head}")
    if n_layers is None:
        n_layers = spec.n_layers
    no_gqa = spec.n_kv_heads is None
    if n_kv_heads is None:
        n_kv_heads = n_heads if no_gqa else spec.n_kv_heads
    if no_gqa and n_kv_heads != n_heads:
        raise InvalidSelectionError(
            f"{family} has no grouped-query attention; leave n_kv_heads unset")
    if spec.style in ("neox", "gptj") and d_model != n_heads * d_head:
        raise InvalidSelectionError(
            f"{family} derives d_head from d_model / n_heads; pass d_model={n_heads * d_head}"
        )
    try:
        config = _hf_config(family, n_layers=n_layers, d_model=d_model, n_heads=n_heads,
                            n_kv_heads=n_kv_heads, d_head=d_head, n_ctx=n_ctx,
                            init_range=init_range, overrides=config_overrides)
    except Exception as exc:  # noqa: BLE001 - Hugging Face validates configs with its own errors
        raise InvalidSelectionError(
            f"these sizes do not make a {family} model: {' '.join(str(exc).split())}") from exc
    config.architectures = [spec.model]
    cls = getattr(transformers, spec.model)
    with torch.random.fork_rng(devices=[]):  # leave the caller's global RNG untouched
        torch.manual_seed(seed)
        hf_model = cls(config)
    return hf_model.to(dtype=dtype, device=resolve_device(device)).eval(), tiny_tokenizer()
