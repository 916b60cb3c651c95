"""What lens-possym knows about attention implementations, as data: one file per family.

The reader (:mod:`lens_possym.rope.reading`) reads what all RoPE attention shares from the
Hugging Face modules (rotary dim and angles from the rotary module, scale, softcap,
window, GQA, q/k norms) and checks it on a probe pass. A family needs a file here only
where the shared reading would be wrong or impossible:

* ``pairing``: the first guess of the pair layout (``"adjacent"``: ``2f`` with ``2f + 1``);
  the default is Hugging Face's ``rotate_half`` (``"half"``: ``f`` with ``f + R/2``). The
  probe settles the pairing from the model's own rotated queries or scores either way.
* ``angles``: where the rotation's angles live: ``"rotary_module"`` (a ``*RotaryEmbedding``
  module: the default) or ``"gptj_table"`` (GPT-J's sinusoidal ``embed_positions`` table
  in the attention module, or its model-level successor).
* ``refused``: why the family cannot be read (its scores are not rotations of fixed
  query and key vectors, say); such a model is refused with this reason.

A family file holds one :class:`Family`, named ``FAMILY``; this package finds every file
by itself, so adding a family is adding a file (``docs/families.md`` lists them).
"""

from __future__ import annotations

import importlib
import pkgutil
from dataclasses import dataclass
from typing import Literal

__all__ = ["Family", "DEFAULT", "family_of", "family_files", "FAMILIES"]


@dataclass(frozen=True)
class Family:
    """What differs, for the attention classes named in ``attention``, from the default."""

    attention: tuple[str, ...]
    pairing: Literal["half", "adjacent"] = "half"
    angles: Literal["rotary_module", "gptj_table"] = "rotary_module"
    refused: str | None = None
    note: str = ""


#: Llama, Qwen, Gemma, Mistral, Phi-3, OLMo, GPT-NeoX, ...: rotate_half and a rotary module.
DEFAULT = Family(attention=(), note="Hugging Face's rotate_half and a *RotaryEmbedding module")


def family_files() -> dict[str, Family]:
    """``{file name: its Family}`` for every file of this package."""
    return {info.name: importlib.import_module(f"{__name__}.{info.name}").FAMILY
            for info in pkgutil.iter_modules(__path__)}


def _discover() -> dict[str, Family]:
    found: dict[str, Family] = {}
    for family in family_files().values():
        found.update(dict.fromkeys(family.attention, family))   # tests: no name claimed twice
    return found


#: attention class name -> its :class:`Family` (every file of this package)
FAMILIES: dict[str, Family] = _discover()


def family_of(attention_class: str) -> Family:
    """The family of an attention class by its name (:data:`DEFAULT` when no file names it)."""
    return FAMILIES.get(attention_class, DEFAULT)
