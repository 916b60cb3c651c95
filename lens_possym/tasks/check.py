"""Does the model solve the prompts? The raw metric of the unedited run, judged against
chance, before any intervention's effect is read.

An effect (a patch that restores, an ablation that hurts) measures how the model does the
task; on prompts the model does not solve, the same table of effects is confident and
meaningless. :func:`task_check` takes an accuracy, its chance level and the raw metrics of
the unedited run and says whether the model solves the prompts: accuracy at least
``chance + margin`` (:data:`SOLVED_MARGIN`, 0.1 by default), with a warning sentence
otherwise. ``lens-possym patch``, ``heads`` and ``ablate`` print it first and store it
(``"task_check"`` in their JSON, a section of their report).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from ..errors import UsageError

if TYPE_CHECKING:
    from ..typing import HookedModel
    from .binding import ImportanceBatch

__all__ = ["SOLVED_MARGIN", "task_check", "batch_check"]

#: how far above chance the unedited model's accuracy must be for it to "solve" the prompts
SOLVED_MARGIN = 0.1


def task_check(accuracy: float, chance: float | None, *, what: str = "accuracy",
               margin: float = SOLVED_MARGIN, **raw: Any) -> dict[str, Any]:
    """The verdict on the unedited run, as a JSON-ready dict.

    Args:
        accuracy: share of prompts answered right (in ``[0, 1]``), as ``what`` counts it.
        chance: that accuracy for a model that guesses (``None``: unknown, no verdict).
        what: what ``accuracy`` counts (e.g. ``"clean answer above corrupted answer"``).
        margin: the model solves the prompts when ``accuracy >= chance + margin``.
        raw: the raw metrics to keep beside it (``logit_diff``, ``loss``, ...).

    Returns:
        ``{"accuracy", "accuracy_counts", "chance", "margin", "solves_task", **raw}``, with a
        ``"warning"`` sentence when the model does not solve them (``solves_task`` is
        ``None`` when ``chance`` is unknown).
    """
    for name, value in (("accuracy", accuracy), ("chance", chance), ("margin", margin)):
        if value is None and name == "chance":
            continue
        if (isinstance(value, bool) or not isinstance(value, (int, float))
                or not 0.0 <= float(value) <= 1.0):
            raise UsageError(f"task_check's {name} must be a share in [0, 1], got {value!r}")
    if not isinstance(what, str):
        raise UsageError(f"task_check's what must be a string naming what accuracy counts, "
                         f"got {what!r}")
    out: dict[str, Any] = {"accuracy": float(accuracy), "accuracy_counts": what}
    if chance is None:
        out["solves_task"] = None
    else:
        needed = min(1.0, float(chance) + margin)
        out.update({"chance": float(chance), "margin": margin,
                    "solves_task": bool(float(accuracy) >= needed - 1e-9)})
        if not out["solves_task"]:
            out["warning"] = (
                f"the model does not solve these prompts: {what} {float(accuracy):.1%}, below "
                f"chance {float(chance):.1%} + margin {margin:.0%}; the effects measure a task "
                "the model does not do, read them with care")
    out.update({k: float(v) if hasattr(v, "__float__") else v for k, v in raw.items()})
    return out


def batch_check(model: "HookedModel", batch: "ImportanceBatch", *,
                margin: float = SOLVED_MARGIN) -> dict[str, Any]:
    """:func:`task_check` of prompts with answers (what ``head_importance`` and ``ablate``
    read), from one unedited forward pass.

    The verdict's accuracy is the candidate accuracy, the share of prompts whose answer's
    logit is above every distractor's (chance ``1 / (1 + n_distractors)``; binding: one over
    the prompt's attributes); without distractors (your own prompts) it is the top-1
    accuracy over the vocabulary, with no chance level and no verdict. Also kept:
    ``top1_accuracy``, ``logit_diff`` (answer − mean distractor, as the metric) and
    ``loss`` (cross-entropy of the answer), means over prompts.
    """
    kwargs = {"logits_to_keep": 1} if hasattr(model, "original_model") else {}
    with torch.no_grad():
        logits = model(batch.tokens, **kwargs)
    last = logits[:, -1].double().cpu()
    answers = batch.answers.reshape(-1).cpu()
    correct = last.gather(1, answers[:, None])[:, 0]
    raw: dict[str, Any] = {
        "top1_accuracy": float((last.argmax(-1) == answers).double().mean()),
        "loss": float(torch.nn.functional.cross_entropy(last, answers))}
    if batch.distractors is None:
        return task_check(raw["top1_accuracy"], None, what="top-1 accuracy", margin=margin,
                          **raw)
    others = batch.distractors.cpu()
    others = others[:, None] if others.ndim == 1 else others
    distractor_logits = last.gather(1, others)
    raw["logit_diff"] = float((correct - distractor_logits.mean(-1)).mean())
    candidate = (correct[:, None] > distractor_logits).all(-1).double().mean()
    return task_check(float(candidate), 1.0 / (1 + others.shape[1]),
                      what="answer above every distractor", margin=margin,
                      candidate_accuracy=float(candidate), **raw)
