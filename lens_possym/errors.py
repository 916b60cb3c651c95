"""Exceptions raised by lens-possym.

Every error names the problem and what to do about it. Each class also derives from the
builtin exception a user would naturally catch (``ValueError``, ``ImportError``, ...), so
``except ValueError`` keeps working for code that does not know about lens-possym.
"""

from __future__ import annotations

__all__ = [
    "LensPossymError",
    "NotRopeModelError",
    "NoFrequenciesError",
    "UnsupportedModelError",
    "ModelNotInstalledError",
    "UnknownModelError",
    "CorruptModelFileError",
    "RopeGeometryError",
    "DecompositionMismatchError",
    "InvalidSelectionError",
    "ExactUnderHooksError",
    "NonFiniteResultError",
    "InsufficientMemoryError",
    "ClusterError",
    "ToyConfigError",
    "TaskConfigError",
    "TrainingError",
    "ResultsFileError",
    "OutputError",
    "UsageError",
    "PluginError",
]


class LensPossymError(Exception):
    """Base class of every error lens-possym raises on purpose."""


class NotRopeModelError(LensPossymError, ValueError):
    """The model has no rotary position embedding, so there is nothing to decompose."""


class NoFrequenciesError(LensPossymError, ValueError):
    """A per-frequency question about a head whose positional scheme has no frequencies
    (NoPE, absolute, ALiBi, T5 biases)."""


class UnsupportedModelError(LensPossymError, ValueError):
    """The model uses RoPE, but through an attention implementation lens-possym cannot read."""


class ModelNotInstalledError(LensPossymError, ImportError):
    """A known model's weights package is not installed."""


class UnknownModelError(LensPossymError, KeyError):
    """A model name that is not in the registry."""

    def __str__(self) -> str:  # KeyError would otherwise print the message in quotes
        return str(self.args[0]) if self.args else ""


class CorruptModelFileError(LensPossymError, OSError):
    """A model file (GGUF or cached conversion) exists but cannot be read."""


class RopeGeometryError(LensPossymError, RuntimeError):
    """The RoPE geometry read from the model disagrees with the tables the model used."""


class DecompositionMismatchError(LensPossymError, RuntimeError):
    """The per-frequency terms do not add up to the model's own attention scores."""


class InvalidSelectionError(LensPossymError, ValueError):
    """A layer, head, position or frequency outside the model's range, or an unusable input."""


class ExactUnderHooksError(LensPossymError, RuntimeError):
    """The closed-form scores cannot read what a hooked model computes (a hook that edits
    queries or keys by position, or mixes rows): score it with ``method="rerun"``."""


class NonFiniteResultError(LensPossymError, FloatingPointError):
    """A result that came out ``nan`` or ``inf`` where a number was due (non-finite
    weights or inputs, a setting the floats cannot hold)."""


class InsufficientMemoryError(LensPossymError, MemoryError):
    """An allocation the machine cannot make (a size setting too large for its memory)."""


class ClusterError(LensPossymError, ConnectionError):
    """A compute cluster (Ray) that cannot be reached or started."""


class ToyConfigError(LensPossymError, ValueError):
    """A toy-model configuration that cannot describe a model (sizes, angles, embedding)."""


class TaskConfigError(LensPossymError, ValueError):
    """A canonical-task setting that cannot generate valid prompts."""


class TrainingError(LensPossymError, RuntimeError):
    """A training or sweep setting that cannot run, or a checkpoint that cannot be read."""


class ResultsFileError(LensPossymError, ValueError):
    """A saved results file (e.g. ``scores.json``) that is not in lens-possym's format."""


class OutputError(LensPossymError, OSError):
    """An output folder or file that cannot be written where it was asked for."""


class UsageError(LensPossymError, ValueError):
    """A command line that does not parse (the ``lens-possym`` command answers it in one line)."""


class PluginError(LensPossymError, ImportError):
    """A plug-in (a paper's tasks, models and commands) that is malformed or cannot be
    imported, or two plug-ins that claim the same name."""
