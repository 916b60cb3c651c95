r"""What the training loop needs from a model: the :class:`TrainableModel` protocol.

The loop (:func:`lens_possym.training.loop.train`) reads the logits at the last
position, steps the parameters with AdamW and writes checkpoints; the run files rebuild a
model from ``(kind, config)``. Anything that satisfies this protocol and is known to
:data:`MODELS` (the core's toy RoPE transformer, :mod:`.toy`; a plug-in's ``models``
table; or :func:`register_model`) trains, checkpoints and resumes without a change to the
loop: the toy model (papers A and C), paper B's scheme encoders, paper C's GPT-J.
"""

from __future__ import annotations

from typing import ClassVar, Iterator, Protocol, runtime_checkable

import torch
from jaxtyping import Float, Int
from torch import Tensor

from ..errors import InvalidSelectionError, TrainingError
from ..registry import Registry

__all__ = ["TrainableModel", "ModelConfig", "batched_token_ids", "MODELS", "register_model"]


@runtime_checkable
class ModelConfig(Protocol):
    """A model's settings: sizes the loop checks against a task, and a plain-dict form."""

    d_vocab: int
    n_ctx: int

    def to_dict(self) -> dict: ...


@runtime_checkable
class TrainableModel(Protocol):
    """A ``torch.nn.Module`` mapping token ids ``[batch, pos]`` to logits
    ``[batch, pos, d_vocab]``, described by ``cfg`` and rebuilt by ``from_config``.

    ``kind`` keys :data:`~lens_possym.training.models.MODELS`; a checkpoint stores it with
    ``cfg.to_dict()`` and the ``state_dict`` (which must hold everything that is not a
    weight but changes what the model computes, e.g. the toy model's frequency gates).
    """

    kind: ClassVar[str]
    cfg: ModelConfig

    def __call__(self, tokens: Int[Tensor, "batch pos"]) -> Float[Tensor, "batch pos d_vocab"]: ...

    @classmethod
    def from_config(cls, data: dict) -> "TrainableModel": ...

    def parameters(self) -> Iterator[torch.nn.Parameter]: ...

    def state_dict(self) -> dict: ...


def batched_token_ids(tokens: Tensor, n_ctx: int,
                      d_vocab: int | None = None) -> Int[Tensor, "batch pos"]:
    """``tokens`` as ``[batch, pos]`` integer ids (a ``[pos]`` input gains a batch axis),
    checked against the model's context (``pos <= n_ctx``) and, if given, its vocabulary
    (ids in ``0..d_vocab-1``). The trainable models' ``forward`` starts here.

    Raises:
        InvalidSelectionError: floating-point or wrongly shaped ids, too many positions, an
            id outside the vocabulary.
    """
    if tokens.ndim == 1:
        tokens = tokens[None]
    if tokens.ndim != 2 or tokens.is_floating_point():
        raise InvalidSelectionError(
            f"tokens must be integer ids [batch, pos], got {tuple(tokens.shape)} "
            f"{tokens.dtype}")
    if tokens.shape[1] > n_ctx:
        raise InvalidSelectionError(
            f"the input has {tokens.shape[1]} positions but n_ctx is {n_ctx}")
    if d_vocab is not None and (int(tokens.max()) >= d_vocab or int(tokens.min()) < 0):
        raise InvalidSelectionError(
            f"token ids must be in 0..{d_vocab - 1} (d_vocab), got "
            f"{int(tokens.min())}..{int(tokens.max())}")
    return tokens


MODELS = Registry("model", lambda plugin: plugin.models, TrainingError,
                  builtin={"toy": "lens_possym.training.toy:ToyTransformer"})


def register_model(cls: type, *, replace: bool = False) -> type:
    """Make ``cls`` (a :class:`TrainableModel` class) known under ``cls.kind``, so that
    checkpoints of it can be read back (``replace``: allow a new class for a known kind)."""
    kind = getattr(cls, "kind", None)
    if not isinstance(kind, str):
        raise TrainingError(f"{getattr(cls, '__qualname__', cls)!r} has no string `kind`; a "
                            "TrainableModel names its kind in a class attribute")
    return MODELS.register(kind, cls, replace=replace)
