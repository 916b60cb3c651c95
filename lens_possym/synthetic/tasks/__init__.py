"""Synthetic tasks: the :class:`Task` protocol and base class (:mod:`.base`), paper A's
canonical tasks (:mod:`.canonical`: Index, Retrieval, Partial Induction), and the
registry :data:`TASKS` that checkpoints and the CLI rebuild tasks from.

A new task is a module beside :mod:`.canonical` whose classes satisfy :class:`Task`, and
one line in :data:`TASKS`.
"""

from __future__ import annotations

from ...errors import TaskConfigError
from .base import Split, SyntheticTask, Task, TaskBatch
from .canonical import IndexTask, PartialInductionTask, RetrievalTask
from .paper_b import CountTask, DistanceTask

__all__ = [
    "Task",
    "TaskBatch",
    "SyntheticTask",
    "Split",
    "IndexTask",
    "RetrievalTask",
    "PartialInductionTask",
    "TASKS",
    "make_task",
    "DistanceTask",
    "CountTask",
]

TASKS: dict[str, type[Task]] = {
    "index": IndexTask,
    "retrieval": RetrievalTask,
    "partial-induction": PartialInductionTask,
    "distance": DistanceTask,
    "count": CountTask,
}


def make_task(name: str, **kwargs) -> Task:
    """A task by its registry name (``"index"``, ``"retrieval"``, ``"partial-induction"``)."""
    key = name.replace("_", "-").lower()
    if key not in TASKS:
        raise TaskConfigError(f"unknown task {name!r}; choose one of {sorted(TASKS)}")
    return TASKS[key](**kwargs)

# paper C's multi-hop tasks
from .multihop import LetterTask, MultiHopTask, NumberTask  # noqa: E402

__all__ += ["MultiHopTask", "NumberTask", "LetterTask"]
TASKS.update({"number": NumberTask, "letter": LetterTask})
