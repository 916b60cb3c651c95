"""A model read once at the public boundary: :class:`Resolved` and :func:`resolve`.

Every public function that takes a ``model`` turns it into a :class:`Resolved` first
(``resolve(model)``) and passes that down; the layers below read ``.specs`` (every layer's
:class:`~lens_possym.rope.RopeSpec`) and ``.schemes`` (every layer's
:class:`~lens_possym.positions.LayerScheme`) from it instead of reading the model again.
Besides the readers' own one-layer forms (``rope_spec``, ``positional_scheme``), this is
the one place that calls :func:`~lens_possym.rope.rope_specs` and
:func:`~lens_possym.positions.schemes` on a model (``READERS`` in
``tests/test_layering.py`` lists them). Each is read on first use, then kept: a function
that needs only the schemes of an ALiBi model never asks for RoPE specs (which would
raise), and a RoPE model's schemes are made from the specs read here.

``resolve`` of a :class:`Resolved` is itself, so a public function calling another passes
what it resolved and nothing is read twice. A ``Resolved`` belongs to one call: hooks or
edits a caller makes to the model's rotary buffers between calls are seen by the next
call's ``resolve`` (``rope_specs`` notices them through its fingerprint).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any

from .positions.detect import LayerScheme, schemes
from .rope.geometry import RopeSpec
from .rope.reading import rope_specs
from .typing import HookedModel

__all__ = ["Resolved", "resolve", "model_of"]


@dataclass(frozen=True, eq=False)
class Resolved:
    """``model`` with what the analysis reads from it, each read on first use.

    Attributes:
        model: the model itself (a bridge, or any :class:`~lens_possym.typing.HookedModel`).
        specs: ``[n_layers]`` RoPE geometry (:func:`~lens_possym.rope.rope_specs`);
            raises :class:`~lens_possym.errors.NotRopeModelError` on a model without RoPE.
        schemes: ``[n_layers]`` positional schemes (:func:`~lens_possym.positions.schemes`).
        all_rope: whether every layer is RoPE: its scheme supplies per-frequency factors
            (``has_factors``, the per-frequency path of the scores).
    """

    model: HookedModel

    @cached_property
    def specs(self) -> list[RopeSpec]:
        return rope_specs(self.model)

    @cached_property
    def schemes(self) -> list[LayerScheme]:
        # a RoPE model's schemes are views of its specs: read them once, here
        return schemes(self.model, specs=lambda: self.specs)

    @cached_property
    def all_rope(self) -> bool:
        if callable(getattr(self.model, "lens_possym_rope_specs", None)):
            return True
        return all(layer.scheme.has_factors for layer in self.schemes)

    def __repr__(self) -> str:
        name = getattr(getattr(self.model, "cfg", None), "model_name", type(self.model).__name__)
        return f"Resolved({name})"


def resolve(model: HookedModel | Resolved) -> Resolved:
    """``model`` as a :class:`Resolved` (a ``Resolved`` is returned as it is)."""
    return model if isinstance(model, Resolved) else Resolved(model)


def model_of(model: Any) -> Any:
    """The model itself, whether given raw or :class:`Resolved`."""
    return model.model if isinstance(model, Resolved) else model
