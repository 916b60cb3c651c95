"""Positional schemes: where position enters a head, and what a head's logits are made of.

See ``docs/positional_schemes.md``. :func:`schemes` reads a model's per-layer schemes;
:mod:`.toeplitz` splits logits into content and position terms.
"""

from .absolute import Absolute
from .base import SWAP_SITES, PositionalScheme, Site, SwapSite, causal_visible
from .bias import AdditiveBias, alibi_slopes, t5_bucket
from .detect import LayerScheme, positional_scheme, schemes
from .mla import MLA
from .nope import NoPE
from .rope import HeadwiseRope, Rope
from .toeplitz import (TermMagnitudes, ToeplitzTerms, rope_hadamard_terms, toeplitz_magnitudes,
                       toeplitz_terms)

__all__ = ["PositionalScheme", "Site", "SwapSite", "SWAP_SITES", "causal_visible", "NoPE", "MLA",
           "Absolute", "AdditiveBias", "alibi_slopes", "t5_bucket", "Rope", "HeadwiseRope",
           "LayerScheme",
           "schemes", "positional_scheme", "ToeplitzTerms", "toeplitz_terms",
           "rope_hadamard_terms", "TermMagnitudes", "toeplitz_magnitudes"]
