"""Training, the wing every paper uses: tasks with known answers and trainable models as
protocols with registries (filled by plug-ins, :mod:`lens_possym.plugins`), one training
loop, runs and checkpoints on disk, and scores over a run's checkpoints.

* :mod:`.tasks`: the :class:`Task` protocol, :class:`SyntheticTask` (seeded generation,
  hash-disjoint splits), :data:`TASKS` / :func:`make_task` / :func:`register_task`.
* :mod:`.models`: the :class:`TrainableModel` protocol, :data:`MODELS` /
  :func:`register_model`.
* :mod:`.loop`: :func:`train` (resumable), :func:`resume`, :func:`evaluate`,
  :class:`TrainConfig` (warm-up then a cosine or linear decay).
* :mod:`.kernels`: which CPU vector kernels this process runs, and the note a training
  command prints when they are not the ones a paper's committed runs were trained with;
  :func:`evaluation_at` retrains a run to its first evaluation, to check a new machine.
* :mod:`.runs`: checkpoints (written atomically) and ``metrics.json`` in a run folder;
  :func:`checkpoint_paths`, the one checkpoint listing.
* :mod:`.trajectories`: a head's scores, its q/k over training, scores at every checkpoint
  through an :class:`~lens_possym.execution.Executor`.
* :mod:`.toy`: the frequency-controlled toy RoPE transformer (:class:`ToyTransformer`,
  model kind ``"toy"``) papers A and C train and hand-build; :mod:`.constructions`: the
  plumbing of a hand-built head on it (:class:`HeadConstruction`, ...).

The papers' own tasks and models (paper B's encoders, paper C's GPT-J) live in their
plug-ins under ``lens_possym/papers``.
"""

from .._lazy import lazy_attributes

# imported on first use (lens_possym._lazy), so that a command line's choices, and a
# plug-in's command module that names this package at its top, import nothing heavy
_EXPORTS = {
    "loop": ["EvalRecord", "EvalResult", "TrainConfig", "TrainResult", "evaluate", "resume",
        "train"],
    "kernels": ["AVX2_KERNELS", "AVX512_KERNELS", "cpu_kernels", "kernels_note",
        "evaluation_at", "RecordCheck"],
    "models": ["MODELS", "ModelConfig", "TrainableModel", "register_model"],
    "runs": ["Checkpoint", "checkpoint_paths", "latest_checkpoint", "load_checkpoint",
        "read_checkpoint", "save_checkpoint"],
    "tasks": ["TASKS", "Split", "SyntheticTask", "Task", "TaskBatch", "make_task",
        "register_task"],
    "trajectories": ["CheckpointScores", "HeadScores", "QKTrajectory", "checkpoint_scores",
        "head_scores"],
    "toy": ["ToyConfig", "ToyTransformer", "rope_schedule", "toy_config_for"],
    "constructions": ["HeadConstruction", "check_construction_site", "frequency_pair",
        "radius_for", "reset_to_head", "set_pair", "write_copy_path"],
}
__getattr__, __dir__ = lazy_attributes(__name__, _EXPORTS)

__all__ = [name for names in _EXPORTS.values() for name in names]
