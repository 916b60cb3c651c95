"""Typed contracts: what lens-possym needs of a model, and what a hook function is.

lens-possym reads a model through TransformerLens's hook surface only, so any model that
offers it takes part: a ``TransformerBridge`` (every loader of :mod:`lens_possym.models`),
a ``HookedRootModule`` such as the toy :class:`~lens_possym.training.toy.ToyTransformer`, or
anything else with the same members. :class:`HookedModel` states that surface as a
``runtime_checkable`` Protocol (checked by presence, like TransformerLens's own
``transformer_lens.model_protocol.TransformerLensModel``; that one also asks for
``to_tokens``, which hooked modules without a tokenizer lack, so it is not reused as is).
The RoPE geometry is read by :func:`lens_possym.rope_specs` (from a bridge's Hugging Face
modules, or from the model's own ``lens_possym_rope_specs()``).

Hook functions are typed the way TransformerLens types them
(``transformer_lens.hook_points.HookFunction``): ``fn(tensor, *, hook) -> tensor | None``;
every hook lens-possym builds accepts ``hook`` by keyword or position and returns the
(edited) tensor.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Any, Protocol, Sequence, runtime_checkable

from transformer_lens.hook_points import HookFunction

__all__ = ["HookedModel", "HookFn", "FwdHooks"]

HookFn = HookFunction
"""A TransformerLens forward hook: ``fn(tensor, *, hook: HookPoint) -> Tensor | None``."""

FwdHooks = list[tuple[str, HookFn]]
"""``[(hook name, hook fn)]``, the ``fwd_hooks`` of ``model.hooks``/``run_with_hooks``."""


@runtime_checkable
class HookedModel(Protocol):
    """A model lens-possym can read: TransformerLens's hook surface (members by presence).

    * ``cfg``: the model's config (``n_layers``, ``model_name``, ...);
    * ``hook_dict``: hook points by name (``blocks.{L}.attn.hook_q``, ...);
    * ``hooks(fwd_hooks=...)``: a context manager that attaches hooks and removes them;
    * ``run_with_hooks``/``run_with_cache``: one forward pass with hooks / keeping
      activations.
    """

    @property
    def cfg(self) -> Any: ...

    @property
    def hook_dict(self) -> dict[str, Any]: ...

    def hooks(self, fwd_hooks: Sequence[tuple[str, HookFn]] = ..., *args: Any, **kwargs: Any
              ) -> AbstractContextManager[Any]: ...

    def run_with_hooks(self, *args: Any, **kwargs: Any) -> Any: ...

    def run_with_cache(self, *args: Any, **kwargs: Any) -> Any: ...
