"""Positional schemes: where position enters a head, and what a head's logits are made of.

See ``docs/positional_schemes.md``. :func:`schemes` reads a model's per-layer schemes;
:mod:`lens_possym.toeplitz` (beside :mod:`lens_possym.decompose`: it runs the model)
splits logits into content and position terms; its names are served here too.
"""

from .._lazy import lazy_attributes

# imported on first use (lens_possym._lazy), so importing a light submodule of this
# package (a command line's choices) imports nothing heavy
_EXPORTS = {
    "absolute": ["Absolute"],
    "base": ["PositionalScheme", "causal_visible"],
    "kinds": ["SWAP_SITES", "Site", "SwapSite"],
    "bias": ["AdditiveBias", "alibi_slopes", "t5_bucket"],
    "detect": ["LayerScheme", "positional_scheme", "schemes"],
    "mla": ["MLA"],
    "nope": ["NoPE"],
    "rope": ["HeadwiseRope", "Rope"],
    # served from the analysis layer (lens_possym.toeplitz runs the model)
    "..toeplitz": ["TermMagnitudes", "ToeplitzTerms", "rope_hadamard_terms", "toeplitz_magnitudes",
        "toeplitz_terms"],
}
__getattr__, __dir__ = lazy_attributes(__name__, _EXPORTS)

__all__ = [name for names in _EXPORTS.values() for name in names]
