r"""RoPE in lens-possym: the geometry of a rotary layer, and how it is read from a model.

* :mod:`.geometry`: :class:`RopeSpec` (one layer: pairing, rotary dim, angles, scale,
  softcap, window, GQA, the hooks its q/k are read from), the rotation itself
  (:func:`cos_sin`, :func:`to_pairs`, :func:`rotate`, ...) and :class:`FrequencyIds`;
  nothing here reads a model.
* :mod:`.reading`: :func:`rope_specs` reads every layer's spec from the Hugging Face modules
  a TransformerBridge wraps and checks it on a probe pass (memoised per model).
* :mod:`.families`: what differs between attention implementations, as data, one file
  per family (adding a family is adding a file).

A model that is not a bridge describes itself by defining ``lens_possym_rope_specs()``
(paper A's toy model does).
"""

from .geometry import (
    FrequencyIds,
    Pairing,
    RopeSpec,
    cos_sin,
    from_pairs,
    heads_view,
    rotate,
    rotate_pairs,
    to_pairs,
    visible_keys,
)
from .reading import rope_spec, rope_specs

__all__ = [
    "RopeSpec",
    "FrequencyIds",
    "rope_specs",
    "rope_spec",
    "cos_sin",
    "to_pairs",
    "from_pairs",
    "rotate_pairs",
    "rotate",
    "visible_keys",
    "Pairing",
    "heads_view",
]
