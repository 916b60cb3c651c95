"""Prompts and tasks: binding prompts for language models (:mod:`.binding`) and paper A's
canonical toy tasks (:mod:`.canonical`: Index, Retrieval, Partial Induction)."""

from .binding import (
    BindingResult,
    BindingTask,
    BindingTemplate,
    binding_logit_diff,
    binding_task,
    evaluate_binding,
    random_token_prompts,
)
from .canonical import (
    TASKS,
    CanonicalTask,
    IndexTask,
    PartialInductionTask,
    RetrievalTask,
    TaskBatch,
    make_task,
)
from .word_distance import (
    WordDistanceTask,
    evaluate_word_distance,
    word_distance_task,
)

__all__ = [
    "BindingTemplate",
    "BindingTask",
    "BindingResult",
    "binding_task",
    "evaluate_binding",
    "binding_logit_diff",
    "random_token_prompts",
    # canonical toy tasks
    "TASKS",
    "CanonicalTask",
    "IndexTask",
    "RetrievalTask",
    "PartialInductionTask",
    "TaskBatch",
    "make_task",
    # word-distance prompts (position-dependent answers)
    "WordDistanceTask",
    "word_distance_task",
    "evaluate_word_distance",
]
