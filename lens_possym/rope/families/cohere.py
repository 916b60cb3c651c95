"""Cohere (Command R) and Cohere 2: adjacent pairs (``rotate_half`` replaced by an
interleaved rotation, q and k upcast to float32 as the bridge does)."""

from . import Family

FAMILY = Family(attention=("CohereAttention", "Cohere2Attention"), pairing="adjacent")
