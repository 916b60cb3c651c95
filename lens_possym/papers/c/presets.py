r"""Paper C's experiment in one place: presets that pair a multi-hop task with a GPT-J and
training settings, and :func:`train_multihop`, which trains (or resumes) one run.

Training goes through the shared loop :func:`lens_possym.training.loop.train`, not the
Hugging Face Trainer: it already trains on the last token only, writes resumable
checkpoints every ``checkpoint_every`` steps (weights, optimiser, data stream), keeps the
test split disjoint by construction and runs on CPU or GPU; the Trainer would add a second
checkpoint format and nothing the analyses need. The model is still a plain
``GPTJForCausalLM`` (``model.hf``), so ``model.hf.save_pretrained`` gives a Hugging Face
checkpoint when one is wanted.

Presets (paper_c.md §3; the paper gives no optimiser settings, so these are ours):

========  ==========================================================================
``cpu``   12 layers × 1 head, ``d_model = d_head = 64`` (full rotary: 32 frequencies),
          MLP 256 (``gelu_new``), no dropout; the Letter query's left letter is the
          reserved letter (``LetterTask``'s default, not the paper's data); AdamW lr 1e-3, batch 128, warm-up 100, cosine to 2,000
          steps (both tasks pass 99 % well before: the rest shows the heads settle),
          evaluation and checkpoint every 100 steps.
          Learns both tasks on 2 CPU cores in minutes (docs/paper_c.md gives the budget).
``paper`` 12 layers × 1 head × 128 (full rotary: 64 frequencies), MLP 512 with exact GELU,
          dropout 0.1 on the residual and attention, none on the embeddings (the code's
          ``embed_pdrop`` typo); AdamW lr 1e-4, betas (0.95, 0.999), weight decay 1e-4 on
          weight matrices only (Hugging Face Trainer's rule), batch 64, warm-up 750,
          then a **linear** decay to 0 at 7,000 steps (hard-coded in the paper's
          ``symbolic_exp.py``: ``lr_scheduler_type="linear"``; its ``schemas.py`` is a
          reconstruction), checkpoint every 100 steps; the Letter query's left letter
          drawn from the fillers' pool (``query_letter="filler"``, as the paper's
          ``symbolic_dataset.py``). About 45-50 CPU-minutes per run on one thread.
          Departures from the code that remain (docs/paper_c.md): float32, not fp16
          mixed precision; the final checkpoint, not ``load_best_model_at_end``; our
          loop, not the Trainer (same loss on the last token, same schedule).
``tiny``  2 layers × 1 head × 16, 60 steps: for tests and notebooks (learns nothing).
========  ==========================================================================
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable

from ...plugins import JsonConfig, check_field_types
from ...errors import TrainingError
from .gptj import GPTJTaskConfig, GPTJTaskModel
from ...training.runs import latest_checkpoint
from ...training.tasks import make_task
from .tasks import MultiHopTask
from ...training.loop import TrainConfig, TrainResult, train

__all__ = ["MultiHopPreset", "MULTIHOP_PRESETS", "preset", "build_run", "run_configs",
           "train_multihop"]

MULTIHOP_TASKS = ("number", "letter")


@dataclass(frozen=True)
class MultiHopPreset(JsonConfig):
    """Model sizes and training settings of one preset; ``task`` holds per-task settings
    (``{"letter": {...}}``), passed to the task's constructor."""

    name: str
    model: dict
    train: dict
    task: dict[str, dict] = field(default_factory=dict)

    def __post_init__(self) -> None:
        check_field_types(self, error=TrainingError)
        if not self.name:
            raise TrainingError("a preset needs a name")
        # ``betas`` as a tuple whether given in code or read from JSON (a round trip is equal)
        object.__setattr__(self, "train", {k: tuple(v) if isinstance(v, list) else v
                                           for k, v in self.train.items()})


MULTIHOP_PRESETS: dict[str, MultiHopPreset] = {
    "cpu": MultiHopPreset(
        "cpu",
        model=dict(n_layers=12, n_heads=1, d_model=64, d_mlp=256, dropout=0.0),
        train=dict(steps=2000, batch_size=128, lr=1e-3, weight_decay=1e-4,
                   betas=(0.9, 0.98), warmup_steps=100, min_lr_ratio=0.1, grad_clip=1.0,
                   eval_every=100, eval_size=2048, checkpoint_every=100)),
    "paper": MultiHopPreset(
        "paper",
        model=dict(n_layers=12, n_heads=1, d_model=128, d_mlp=512, dropout=0.1,
                   embedding_dropout=0.0, activation="gelu"),
        train=dict(steps=7000, batch_size=64, lr=1e-4, weight_decay=1e-4, decay="matrices",
                   betas=(0.95, 0.999), warmup_steps=750, schedule="linear", min_lr_ratio=0.0,
                   grad_clip=1.0, eval_every=100, eval_size=2048, checkpoint_every=100),
        task={"letter": {"query_letter": "filler"}}),
    "tiny": MultiHopPreset(
        "tiny",
        model=dict(n_layers=2, n_heads=1, d_model=16, d_mlp=32, dropout=0.0),
        train=dict(steps=60, batch_size=32, lr=3e-3, warmup_steps=5, eval_every=20,
                   eval_size=128, checkpoint_every=20)),
}


def preset(name: str) -> MultiHopPreset:
    if name not in MULTIHOP_PRESETS:
        raise TrainingError(f"unknown multihop preset {name!r}; choose one of "
                            f"{sorted(MULTIHOP_PRESETS)}")
    return MULTIHOP_PRESETS[name]


def build_run(task_name: str, preset_name: str = "cpu", *, seed: int = 0,
              out_dir: str | Path | None = None, device: str = "auto", **train_overrides
              ) -> tuple[GPTJTaskModel, MultiHopTask, TrainConfig]:
    """The task, the untrained model and the training settings of one run.

    ``seed`` seeds the weights, the data stream and the test set.
    """
    task, model_config, config = run_configs(task_name, preset_name, seed=seed,
                                             out_dir=out_dir, device=device, **train_overrides)
    return GPTJTaskModel(model_config), task, config


def run_configs(task_name: str, preset_name: str = "cpu", *, seed: int = 0,
                out_dir: str | Path | None = None, device: str = "auto", **train_overrides
                ) -> tuple[MultiHopTask, GPTJTaskConfig, TrainConfig]:
    """What :func:`build_run` builds, without the model's weights: the task, the model's
    config and the training settings (milliseconds; :mod:`.identity` compares a run's
    record with them)."""
    if task_name not in MULTIHOP_TASKS:
        raise TrainingError(f"task must be one of {MULTIHOP_TASKS}, got {task_name!r}")
    p = preset(preset_name)
    task = make_task(task_name, seed=seed, **p.task.get(task_name, {}))
    model_config = GPTJTaskConfig(d_vocab=task.d_vocab, n_ctx=max(128, task.n_ctx),
                                  seed=seed, **p.model)
    settings = {**p.train, **train_overrides}
    if out_dir is None:
        settings.pop("checkpoint_every", None)
    config = TrainConfig(seed=seed, out_dir=None if out_dir is None else str(out_dir),
                         device=device, **settings)
    return task, model_config, config


def train_multihop(task_name: str, preset_name: str = "cpu", *, seed: int = 0,
                   out_dir: str | Path | None = None, device: str = "auto",
                   log: Callable[[str], None] | None = None, **train_overrides
                   ) -> tuple[GPTJTaskModel, MultiHopTask, TrainResult]:
    """Train one run (resuming from ``out_dir``'s latest checkpoint when it has one)."""
    model, task, config = build_run(task_name, preset_name, seed=seed, out_dir=out_dir,
                                    device=device, **train_overrides)
    resume = out_dir is not None and latest_checkpoint(out_dir) is not None
    result = train(model, task, config, log=log, resume=resume)
    return model, task, result


def with_overrides(p: MultiHopPreset, **model) -> MultiHopPreset:
    """A copy of ``p`` with model sizes changed."""
    return replace(p, model={**p.model, **model})
