"""Trainable models for synthetic experiments: the :class:`TrainableModel` protocol
(:mod:`.base`), the frequency-controlled toy RoPE transformer (:mod:`.toy`), and the
registry :data:`MODELS` that checkpoints rebuild models from.

A new model (paper B's scheme encoders, GPT-J) is a module beside :mod:`.toy` whose class
satisfies :class:`TrainableModel`, and one line in :data:`MODELS`.
"""

from __future__ import annotations

from .base import ModelConfig, TrainableModel
from .toy import ToyConfig, ToyTransformer, rope_schedule, toy_config_for
from .encoder import EncoderConfig, SchemeEncoder, encoder_config_for

__all__ = [
    "TrainableModel",
    "ModelConfig",
    "ToyConfig",
    "ToyTransformer",
    "rope_schedule",
    "toy_config_for",
    "MODELS",
    "EncoderConfig",
    "SchemeEncoder",
    "encoder_config_for",
]

MODELS: dict[str, type[TrainableModel]] = {
    ToyTransformer.kind: ToyTransformer,
    SchemeEncoder.kind: SchemeEncoder,
}

# paper C's GPT-J through transformers
from .gptj import GPTJTaskConfig, GPTJTaskModel, gptj_config_for  # noqa: E402

__all__ += ["GPTJTaskConfig", "GPTJTaskModel", "gptj_config_for"]
MODELS[GPTJTaskModel.kind] = GPTJTaskModel
