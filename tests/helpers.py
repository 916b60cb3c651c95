"""Helpers the test modules share (import them: ``from tests.helpers import PROMPT``).

``tests`` is a package, so ``python -m pytest`` from the repository root finds it; fixtures
stay in ``conftest.py``.
"""

from __future__ import annotations

__all__ = ["PROMPT", "hooks_attached"]

PROMPT = "Alice likes red . Bob likes blue . Carol likes green . What color does Bob like ?"


def hooks_attached(model) -> int:
    """Number of forward hooks currently registered on the model's hook points."""
    return sum(len(hp._forward_hooks) for hp in model.hook_dict.values())
