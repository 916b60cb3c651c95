"""Models: real RoPE LMs loaded offline from GGUF packages, and tiny random ones for tests."""

from .loading import from_gguf, from_hf, list_models, load_model
from .registry import DEFAULT_MODEL, KNOWN_MODELS, KnownModel, ModelInfo
from .tiny import TINY_FAMILIES, tiny_hf_model, tiny_model, tiny_tokenizer

__all__ = [
    "load_model",
    "from_gguf",
    "from_hf",
    "list_models",
    "tiny_model",
    "tiny_hf_model",
    "tiny_tokenizer",
    "TINY_FAMILIES",
    "KNOWN_MODELS",
    "KnownModel",
    "ModelInfo",
    "DEFAULT_MODEL",
]
