"""Frequency-controlled toy models and the theory's hand-built heads.

* :mod:`~lens_possym.toy.model`: :class:`ToyConfig`, :class:`ToyTransformer` (a
  ``HookedRootModule`` with the bridge's hook names and per-head frequency gates);
* :mod:`~lens_possym.toy.heads`: the constructions of paper A's theorems as weight setters,
  and the maximum attention weight along the answer position (Theorem 7).
"""

from .model import ToyConfig, ToyTransformer, rope_schedule

__all__ = ["ToyConfig", "ToyTransformer", "rope_schedule"]
