r"""Paper B's cells: one trained model of the grid, its analyses, and its record.

A **cell** is one trained model: a task (``"distance"`` or ``"count"``), a scheme label
(``"rope"``, ``"rope-k2"``, ``"mla"``...; :func:`~.presets.parse_label`), a variant
(``"intended"`` or ``"faithful"``) and a seed. :func:`train_cell` trains it through the
shared loop (:func:`lens_possym.training.loop.train`: checkpoints, ``metrics.json``,
resumable) into its own folder, or loads it when that folder already holds the finished
run; :func:`analyse_cell` computes and caches (``analysis.json``) what the docs report:

* **accuracy** on held-out sentences (:func:`analysis_batch`; argmax over the classes);
* the **per-head ablation grid** ``[n_layers, n_heads]`` and the **deposit** read from it
  (:mod:`.deposit`);
* the **positional probe** (:mod:`.probe`), for models with an input encoding;
* the **positional/symbolic profile** of every head (:mod:`.profile`).

Records (:class:`~.records.CellRecord`) are the entries of ``docs/paper_b_results.json``'s
``"cells"`` (:func:`cell_record`):
``preset``, ``task``, ``scheme``, ``variant``, ``seed``, ``accuracy`` (a fraction),
``ablation`` (the per-head deposit summary: ``top_drop``, ``second_drop``, ``top_head``,
``heads_over_10``, ``deposit``), ``probe``, the training history and the model config.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable

import torch

from ...errors import InvalidSelectionError
from ...plugins import JsonConfig, check_field_types, write_text_atomically
from ...training.loop import TrainResult, evaluate, train
from ...training.tasks import Task, TaskBatch
from .deposit import ablation_grid, deposit_summary
from .encoder import VARIANTS, SchemeEncoder, encoder_config_for
from .presets import TASK_NAMES, Preset, parse_label, preset_task
from .probe import positional_probe
from .profile import encoder_profile
from .records import CellRecord

__all__ = ["Cell", "make_model", "analysis_batch", "train_cell", "analyse_cell", "grid_cells",
           "cell_record"]


@dataclass(frozen=True)
class Cell(JsonConfig):
    """One model of the grid."""

    task: str
    label: str
    variant: str = "intended"
    seed: int = 0

    def __post_init__(self) -> None:
        check_field_types(self)
        if self.task not in TASK_NAMES:
            raise InvalidSelectionError(f"task must be one of {TASK_NAMES}, got {self.task!r}")
        if self.variant not in VARIANTS:
            raise InvalidSelectionError(f"variant must be one of {VARIANTS}, got {self.variant!r}")
        parse_label(self.label)

    @property
    def key(self) -> str:
        return f"{self.task}/{self.variant}/{self.label}/seed{self.seed}"


def make_model(preset: Preset, task: Task, label: str, variant: str, seed: int = 0
               ) -> SchemeEncoder:
    scheme, rope_heads = parse_label(label)
    extra = preset.faithful_model if variant == "faithful" else {}
    return SchemeEncoder(encoder_config_for(task, scheme, variant=variant, rope_heads=rope_heads,
                                            seed=seed, **preset.model, **extra))


def analysis_batch(preset: Preset, task: Task, seed: int) -> TaskBatch:
    """The held-out sentences a cell of ``seed`` is analysed on (accuracy, ablations, probe,
    the ``+copies`` ceiling): ``preset.analysis_size`` of ``task``'s test split, drawn with
    ``seed + 1``. Every reader of a cell's analysis draws them here, so they stay the same."""
    return task.test_set(preset.analysis_size, seed=seed + 1)


def train_cell(preset: Preset, cell: Cell, root: str | Path, *,
               log: Callable[[str], None] | None = None) -> tuple[SchemeEncoder, Task, TrainResult]:
    """Train ``cell`` into ``root/<cell.key>`` (resuming an interrupted run), or load it.

    A finished run is loaded through :func:`~lens_possym.training.train` too, which refuses
    a folder written with other settings (another step count, model or task) instead of
    returning it as this preset's cell."""
    out = Path(root) / cell.key
    task = preset_task(preset, cell.task, cell.seed)
    model = make_model(preset, task, cell.label, cell.variant, cell.seed)
    config = preset.train_config(cell.task, parse_label(cell.label)[0], cell.seed, str(out),
                                 epoch_size=getattr(task, "epoch_size", None))
    result = train(model, task, config, log=log, resume=True)
    return model.eval(), task, result


def _check_cached(data: dict[str, Any], preset: Preset, cell: Cell, path: Path) -> None:
    """Refuse an ``analysis.json`` written under another preset or step count (a preset whose
    steps changed after its cells ran), which would otherwise be reported as this one's."""
    # the fixed regime's steps follow from its sentence set (built only to train); its
    # name (``+fixed``) is what tells it apart
    steps = (preset.steps_for(cell.task, parse_label(cell.label)[0])
             if preset.data != "fixed" else data["steps"])
    if data.get("preset") != preset.name or data.get("steps") != steps:
        raise InvalidSelectionError(
            f"{path} holds preset {data.get('preset')!r} at {data.get('steps')} steps, not "
            f"{preset.name!r} at {steps}; move its folder aside (or pass another --root) to "
            "run this cell again")


def analyse_cell(preset: Preset, cell: Cell, root: str | Path, *, profile: bool | None = None,
                 log: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Train (or load) ``cell`` and compute its analyses; cached in ``analysis.json``.

    ``profile`` (default: the preset's) adds the heads' swap-score profile. Faithful MLA
    also gets ``ablation_heads``: the per-head (``hook_z``) grid beside the official
    latent-slice one in ``ablation``.
    """
    profile = preset.profile if profile is None else profile
    out = Path(root) / cell.key
    cached = out / "analysis.json"
    if cached.exists():
        data = json.loads(cached.read_text())
        _check_cached(data, preset, cell, cached)
        if data.get("profile") is not None or not profile:
            return data
    model, task, result = train_cell(preset, cell, root, log=log)
    batch = analysis_batch(preset, task, cell.seed)
    baseline = evaluate(model, task, batch).accuracy
    grid = ablation_grid(model, task, batch)
    prompts = batch.tokens[: preset.profile_prompts]
    data = {
        "cell": asdict(cell), "preset": preset.name, "config": model.cfg.to_dict(),
        "test_accuracy": result.test_accuracy, "train_time_s": result.train_time_s,
        "steps": result.steps_run, "baseline": baseline, "ablation": grid.tolist(),
        "deposit": deposit_summary(grid, baseline),
        "ablation_heads": (ablation_grid(model, task, batch, official=False).tolist()
                           if model.cfg.scheme == "mla" and model.cfg.faithful else None),
        "probe": positional_probe(model, batch.tokens[:256]),
        "profile": encoder_profile(model, prompts) if profile else None,
        "history": [[h.step, h.test_accuracy] for h in result.history],
    }

    write_text_atomically(cached, json.dumps(data, indent=1))
    return data


def grid_cells(*, seeds: tuple[int, ...] = (0,), tasks: tuple[str, ...] = TASK_NAMES,
               k_values: tuple[int, ...] = (0, 1, 2, 3), n_heads: int = 8,
               preset: Preset | None = None) -> list[Cell]:
    """The grid in the order it is worth running.

    With a ``preset`` that names its ``grid`` (``paper-length``, ``paper``): those labels,
    seed by seed, intended then faithful, tasks alternating. Otherwise the default grid:
    the main table (intended), then the faithful variants, then RoPE on k heads (both
    variants).
    """
    if preset is not None and preset.grid is not None:
        return [Cell(t, label, variant, seed) for seed in seeds
                for variant in VARIANTS for label in preset.grid[variant] for t in tasks]
    main = ("nope", "sinusoidal", "learned", "alibi", "t5", "rope", "mla", "hybrid")
    faithful = ("nope", "sinusoidal", "learned", "alibi", "t5", "rope", "mla")
    cells: list[Cell] = []
    for seed in seeds:
        cells += [Cell(t, s, "intended", seed) for t in tasks for s in main]
        cells += [Cell(t, s, "faithful", seed) for t in tasks for s in faithful]
        ks = [k for k in k_values if 0 < k < n_heads]       # k=0 is NoPE, k=all is rope
        cells += [Cell(t, f"rope-k{k}", "intended", seed) for t in tasks for k in ks]
        cells += [Cell(t, f"rope-k{k}", "faithful", seed) for t in tasks
                  for k in sorted({*k_values, n_heads})]
    return cells


def cell_record(data: dict[str, Any]) -> CellRecord:
    """The committed record of one finished cell (one of ``docs/paper_b_results.json``'s cells),
    from its :func:`analyse_cell` data.

    ``ablation`` summarises the **per-head** grid (``hook_z`` zeroed) of every scheme, the
    one the deposit rule reads (:func:`deposit_summary`; ``heads_over_10`` counts heads whose
    ablation alone costs more than 10 points); faithful MLA's official latent-slice grid is
    summarised beside it in ``ablation_official`` (records made before that per-head grid
    existed say ``ablation_kind: "official latent slice"``). Accuracies are fractions in
    [0, 1].
    """
    cell, baseline = data["cell"], data["baseline"]
    heads = data.get("ablation_heads") or data["ablation"]
    official_only = (cell["label"] == "mla" and cell["variant"] == "faithful"
                     and not data.get("ablation_heads"))
    record = {
        "preset": data["preset"], "task": cell["task"], "scheme": cell["label"],
        "variant": cell["variant"], "seed": cell["seed"], "accuracy": baseline,
        "ablation": deposit_summary(torch.tensor(heads), baseline),
        "ablation_kind": "official latent slice" if official_only else "per head",
        "ablation_grid": heads,
    }
    if data.get("ablation_heads"):
        record["ablation_official"] = deposit_summary(torch.tensor(data["ablation"]), baseline)
        record["ablation_official_grid"] = data["ablation"]
    record.update({"test_accuracy": data["test_accuracy"], "steps": data["steps"],
                   "train_time_s": data["train_time_s"], "probe": data.get("probe"),
                   "history": data.get("history"), "config": data.get("config")})
    return CellRecord.from_dict(record)
