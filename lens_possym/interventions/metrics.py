"""Metrics of a model's output for the sweeps: ``logits -> scalar``, by name.

:func:`band_sweep <lens_possym.interventions.band_sweep>` and
:func:`compare_with_random_heads <lens_possym.interventions.compare_with_random_heads>`
take one metric or ``{name: metric}``; :func:`binding_metrics` gives the binding task's.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping

import torch
from torch import Tensor

from ..errors import InvalidSelectionError

__all__ = ["Metric", "as_metrics", "evaluate_metrics", "binding_metrics"]

Metric = Callable[[Tensor], Any]
"""Logits ``[batch, pos, d_vocab]`` (or ``[batch, d_vocab]``) to a scalar."""


def as_metrics(metric: Metric | Mapping[str, Metric]) -> dict[str, Metric]:
    """``{name: metric}`` from one metric (named ``"metric"``) or a mapping of them."""
    metrics = dict(metric) if isinstance(metric, Mapping) else {"metric": metric}
    if not metrics:
        raise InvalidSelectionError("pass at least one metric")
    return metrics


def evaluate_metrics(metrics: Mapping[str, Metric], logits: Tensor) -> dict[str, float]:
    """Every metric on ``logits``, as floats.

    Raises:
        InvalidSelectionError: a metric that does not return a scalar.
    """
    out = {}
    for name, fn in metrics.items():
        value = torch.as_tensor(fn(logits))
        if value.numel() != 1:
            raise InvalidSelectionError(
                f"metric {name!r} must return a scalar, got shape {tuple(value.shape)}"
            )
        out[name] = float(value)
    return out


def binding_metrics(task: Any) -> dict[str, Metric]:
    """``logit_diff``, ``accuracy`` and ``candidate_accuracy`` of a binding task, as metrics.

    Each maps logits ``[batch, pos, d_vocab]`` (only the last position is read) to a
    scalar, averaged over the task's prompts (see :func:`lens_possym.tasks.evaluate_binding`).
    """
    from ..tasks.binding import binding_logit_diff

    def last(logits: Tensor) -> Tensor:
        return (logits[:, -1] if logits.ndim == 3 else logits).float()

    def logit_diff(logits: Tensor) -> Tensor:
        return binding_logit_diff(task, last(logits)).mean()

    def accuracy(logits: Tensor) -> Tensor:
        return (last(logits).argmax(-1) == task.answers.to(logits.device)).float().mean()

    def candidate_accuracy(logits: Tensor) -> Tensor:
        row = last(logits)
        mask = task.candidate_mask(row.shape[-1]).to(row.device)
        top = row.masked_fill(~mask, float("-inf")).argmax(-1)
        return (top == task.answers.to(row.device)).float().mean()

    return {"logit_diff": logit_diff, "accuracy": accuracy, "candidate_accuracy": candidate_accuracy}
