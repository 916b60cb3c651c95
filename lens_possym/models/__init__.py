"""Models: real RoPE LMs loaded offline from GGUF packages, and tiny random ones for tests."""

from .._lazy import lazy_attributes

# imported on first use (lens_possym._lazy), so importing a light submodule of this
# package (a command line's choices) imports nothing heavy
_EXPORTS = {
    "loading": ["from_gguf", "from_hf", "load_model"],
    "registry": ["DEFAULT_MODEL", "KNOWN_MODELS", "KnownModel", "ModelInfo", "list_models"],
    "tiny": ["TINY_FAMILIES", "tiny_hf_model", "tiny_model", "tiny_tokenizer"],
}
__getattr__, __dir__ = lazy_attributes(__name__, _EXPORTS)

__all__ = [name for names in _EXPORTS.values() for name in names]
