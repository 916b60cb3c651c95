"""GLM and GLM-4: adjacent pairs on a partial rotary dim."""

from . import Family

FAMILY = Family(attention=("GlmAttention", "Glm4Attention"), pairing="adjacent")
