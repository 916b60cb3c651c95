"""Prompts and tasks: binding prompts for language models (:mod:`.binding`) and paper A's
canonical toy tasks (:mod:`.canonical`: Index, Retrieval, Partial Induction)."""

from .binding import (
    BINDING_TEMPLATES,
    BindingResult,
    BindingTask,
    BindingTemplate,
    binding_logit_diff,
    WordCheck,
    binding_task,
    check_words,
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

__all__ = [
    "BindingTemplate",
    "BINDING_TEMPLATES",
    "BindingTask",
    "BindingResult",
    "binding_task",
    "evaluate_binding",
    "binding_logit_diff",
    "random_token_prompts",
    "check_words",
    "WordCheck",
    # canonical toy tasks
    "TASKS",
    "CanonicalTask",
    "IndexTask",
    "RetrievalTask",
    "PartialInductionTask",
    "TaskBatch",
    "make_task",
]
