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
from ..tasks.binding import binding_logit_diff

__all__ = ["Metric", "as_metrics", "evaluate_metrics", "evaluate_metrics_per_prompt",
           "binding_metrics"]

Metric = Callable[[Tensor], Any]
"""Logits ``[batch, pos, d_vocab]`` (or ``[batch, d_vocab]``) to a scalar, or to one value
per prompt (``[batch]``: averaged, and kept for standard errors and intervals)."""


def as_metrics(metric: Metric | Mapping[str, Metric]) -> dict[str, Metric]:
    """``{name: metric}`` from one metric (named ``"metric"``) or a mapping of them."""
    metrics = dict(metric) if isinstance(metric, Mapping) else {"metric": metric}
    if not metrics:
        raise InvalidSelectionError("pass at least one metric")
    for name, fn in metrics.items():
        if not callable(fn):
            raise InvalidSelectionError(
                f"metric {name!r} must be a function of the logits (logits -> scalar, e.g. "
                f"binding_metrics(task)['logit_diff']), got {fn!r} ({type(fn).__name__})")
    return metrics


def evaluate_metrics(metrics: Mapping[str, Metric], logits: Tensor) -> dict[str, float]:
    """Every metric on ``logits``, as floats (a per-prompt metric's mean).

    Raises:
        InvalidSelectionError: a metric that returns neither a scalar nor one value per
            prompt.
    """
    return evaluate_metrics_per_prompt(metrics, logits)[0]


def evaluate_metrics_per_prompt(metrics: Mapping[str, Metric], logits: Tensor
                                ) -> tuple[dict[str, float], dict[str, Tensor | None]]:
    """Every metric on ``logits``: ``({name: mean}, {name: [batch] per prompt or None})``.

    A metric may return a scalar (no per-prompt values) or one value per prompt
    (``[batch]``, averaged; kept for standard errors and intervals).
    """
    means, per_prompt = {}, {}
    n = logits.shape[0]
    for name, fn in metrics.items():
        value = torch.as_tensor(fn(logits)).detach()
        if value.numel() == 1 and value.ndim <= 1 and not (value.ndim == 1 and n == 1):
            means[name], per_prompt[name] = float(value), None
        elif value.ndim == 1 and value.shape[0] == n:
            value = value.double().cpu()
            means[name], per_prompt[name] = float(value.mean()), value
        else:
            raise InvalidSelectionError(
                f"metric {name!r} must return a scalar or one value per prompt ([{n}]), got "
                f"shape {tuple(value.shape)}"
            )
    return means, per_prompt


def binding_metrics(task: Any, per_prompt: bool = False) -> dict[str, Metric]:
    """``logit_diff``, ``accuracy`` and ``candidate_accuracy`` of a binding task, as metrics.

    Each maps logits ``[batch, pos, d_vocab]`` (only the last position is read) to a
    scalar, averaged over the task's prompts (see :func:`lens_possym.tasks.evaluate_binding`),
    or with ``per_prompt=True`` to one value per prompt (``[batch]``: the sweeps then keep
    them and give every effect a standard error and a bootstrap interval).
    """

    def last(logits: Tensor) -> Tensor:
        return (logits[:, -1] if logits.ndim == 3 else logits).float()

    def reduce(values: Tensor) -> Tensor:
        return values if per_prompt else values.mean()

    def logit_diff(logits: Tensor) -> Tensor:
        return reduce(binding_logit_diff(task, last(logits)))

    def accuracy(logits: Tensor) -> Tensor:
        return reduce((last(logits).argmax(-1) == task.answers.to(logits.device)).float())

    def candidate_accuracy(logits: Tensor) -> Tensor:
        row = last(logits)
        mask = task.candidate_mask(row.shape[-1]).to(row.device)
        top = row.masked_fill(~mask, float("-inf")).argmax(-1)
        return reduce((top == task.answers.to(row.device)).float())

    return {"logit_diff": logit_diff, "accuracy": accuracy, "candidate_accuracy": candidate_accuracy}
