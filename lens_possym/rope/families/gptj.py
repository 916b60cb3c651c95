"""GPT-J and CodeGen: adjacent pairs, and the angles in a sinusoidal table
(``embed_positions``) rather than a rotary module (transformers >= 5.24 moved it to one
model-level module, which the reader also finds)."""

from . import Family

FAMILY = Family(attention=("GPTJAttention", "CodeGenAttention"), pairing="adjacent",
                angles="gptj_table")
