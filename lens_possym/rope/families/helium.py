"""Helium (Kyutai): adjacent pairs."""

from . import Family

FAMILY = Family(attention=("HeliumAttention",), pairing="adjacent")
