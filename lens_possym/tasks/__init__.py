"""Task generators: canonical toy tasks (:mod:`.canonical`) and, alongside, prompts for LLMs.

Kept minimal and import-safe: each task family is its own module, imported on use.
"""

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
    "TASKS",
    "CanonicalTask",
    "IndexTask",
    "PartialInductionTask",
    "RetrievalTask",
    "TaskBatch",
    "make_task",
]
