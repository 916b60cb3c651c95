"""Synthetic experiments: tasks with known answers, trainable models, one training loop,
runs on disk, sweeps, and the analyses and constructions of paper A's theory.

* :mod:`.tasks`: the :class:`Task` protocol and base class; paper A's Index, Retrieval and
  Partial Induction (:mod:`.tasks.canonical`); the registry ``TASKS``.
* :mod:`.models`: the :class:`TrainableModel` protocol; the frequency-controlled toy RoPE
  transformer (:mod:`.models.toy`); the registry ``MODELS``.
* :mod:`.training`: :func:`train` (resumable), :func:`resume`, :func:`evaluate`.
* :mod:`.runs`: checkpoints and ``metrics.json`` in a run folder.
* :mod:`.sweeps`: one model per frequency set and seed (:func:`sweep`).
* :mod:`.trajectories`: a trained head's scores, its q/k over training.
* :mod:`.constructions`: the hand-built heads of Theorems 3, 5 and 6, and ``w_max``.

Paper B's scheme encoders and tasks, and paper C's GPT-J and tasks, are new modules under
:mod:`.models` and :mod:`.tasks` with one registry line each; the loop, the runs and the
sweeps take them unchanged. Prompts for pretrained language models live in
:mod:`lens_possym.tasks`, not here.
"""

from .constructions import (
    HeadConstruction,
    build_index_head,
    build_partial_induction_head,
    build_retrieval_head,
    w_max_by_position,
    w_max_positional,
    w_max_symbolic,
)
from .models import MODELS, ToyConfig, ToyTransformer, TrainableModel, rope_schedule, toy_config_for
from .runs import latest_checkpoint, load_checkpoint
from .sweeps import SweepResult, SweepRun, pairs_with, single_ids, sweep
from .tasks import (
    TASKS,
    IndexTask,
    PartialInductionTask,
    RetrievalTask,
    SyntheticTask,
    Task,
    TaskBatch,
    make_task,
)
from .training import EvalRecord, EvalResult, TrainConfig, TrainResult, evaluate, resume, train
from .trajectories import HeadScores, QKTrajectory, head_scores
from .models import (
    EncoderConfig,
    GPTJTaskConfig,
    GPTJTaskModel,
    SchemeEncoder,
    encoder_config_for,
    gptj_config_for,
)
from .tasks import CountTask, DistanceTask, LetterTask, MultiHopTask, NumberTask
from .trajectories import CheckpointScores, checkpoint_scores

__all__ = [
    # tasks
    "Task",
    "TaskBatch",
    "SyntheticTask",
    "IndexTask",
    "RetrievalTask",
    "PartialInductionTask",
    "TASKS",
    "make_task",
    # models
    "TrainableModel",
    "ToyConfig",
    "ToyTransformer",
    "rope_schedule",
    "toy_config_for",
    "MODELS",
    # training and runs
    "TrainConfig",
    "TrainResult",
    "EvalRecord",
    "EvalResult",
    "train",
    "resume",
    "evaluate",
    "load_checkpoint",
    "latest_checkpoint",
    # sweeps and analyses
    "sweep",
    "SweepResult",
    "SweepRun",
    "single_ids",
    "pairs_with",
    "head_scores",
    "HeadScores",
    "QKTrajectory",
    # constructions
    "HeadConstruction",
    "build_index_head",
    "build_retrieval_head",
    "build_partial_induction_head",
    "w_max_by_position",
    "w_max_positional",
    "w_max_symbolic",
    # paper B
    "DistanceTask",
    "CountTask",
    "EncoderConfig",
    "SchemeEncoder",
    "encoder_config_for",
    # paper C (dynamics, roles, constructions, discrepancy, lengths: in their modules)
    "NumberTask",
    "LetterTask",
    "MultiHopTask",
    "GPTJTaskModel",
    "GPTJTaskConfig",
    "gptj_config_for",
    # work that fans out (lens_possym.execution)
    "checkpoint_scores",
    "CheckpointScores",
]
