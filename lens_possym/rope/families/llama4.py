"""Llama 4: refused."""

from . import Family

FAMILY = Family(attention=("Llama4TextAttention",), refused=(
    "Llama 4 mixes RoPE layers with NoPE layers that rescale queries by a position-dependent "
    "temperature and uses chunked attention; neither is read yet"))
