"""The task check the intervention commands print first (``patch``, ``heads``, ``ablate``):
the unedited model's raw metrics on the prompts, and a warning on stderr when it does not
solve them (:func:`lens_possym.tasks.check.task_check`)."""

from __future__ import annotations

import sys
from typing import Any, Mapping

__all__ = ["print_task_check", "LABELS"]

LABELS = {"clean_logit_diff": "clean logit diff", "corrupted_logit_diff": "corrupted logit diff",
          "clean_accuracy": "clean top-1 accuracy", "corrupted_accuracy": "corrupted top-1 "
          "accuracy", "logit_diff": "logit diff", "loss": "loss",
          "top1_accuracy": "top-1 accuracy", "candidate_accuracy": "candidate accuracy"}


def print_task_check(check: Mapping[str, Any]) -> None:
    """One line of the raw metrics (stdout); the warning, if any, on stderr."""
    parts = []
    for key, label in LABELS.items():
        if key in check:
            value = f"{check[key]:.3f}"
            if f"{key}_se" in check and check[f"{key}_se"] == check[f"{key}_se"]:
                value += f" ± {check[f'{key}_se']:.3f}"
            parts.append(f"{label} {value}")
    verdict = ""
    if check.get("solves_task") is not None:
        verdict = (f"; {check['accuracy_counts']}: {check['accuracy']:.1%} (chance "
                   f"{check['chance']:.1%}, solved from {check['chance'] + check['margin']:.1%})")
    print("unedited model: " + ", ".join(parts) + verdict)
    if check.get("warning"):
        print(f"lens-possym: warning: {check['warning']}", file=sys.stderr)
