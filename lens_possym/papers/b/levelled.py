r"""Paper B's ``+levelled`` cells: trained until the loop accuracy levels off, scored on 4,096
held-out sentences with standard errors (docs/paper_b_rules.md, addendum of 2026-11-29).

* **Training** (:func:`train_levelled`): the cell's base-preset run first
  (:func:`~lens_possym.papers.b.cells.train_cell`, in ``<root>/<base>/<cell>``: an existing
  folder is resumed or loaded as it is), then, while the run has not levelled off
  (:func:`levelled_off`: less than :data:`LEVEL_GAIN` gained on the loop's evaluations
  since the reference step, :func:`reference_step`: the end of the latest earlier run at or
  before ``(1 -`` :data:`LEVEL_WINDOW` ``) T``, else the last evaluation there; addendum of
  2026-12-07 22:01 UTC: a window that starts inside an extension's first fall reads the
  recovery, not whether the model still learns), extensions of
  :data:`EXTENSION_STEPS` steps from the last model, each a fresh AdamW with warm-up and a
  cosine decay to zero from :data:`EXTENSION_LR_SCALE` x the preset's peak learning rate
  (addendum of 2026-12-07: at the full rate every extension knocked the model out and the
  rule measured the relearning, not convergence), on the data stream seeded
  ``seed + 1000 k``, in ``<root>/<base>+levelled/<cell>/ext<k>`` (resumable from its
  checkpoints), up to :data:`STEP_CAP` cumulative steps.
* **Scoring** (:func:`score_cell`): the accuracy (the one any rule reads) and the per-head
  ablation grid on ``SCORING_SIZE`` sentences (``task.test_set(4096, seed=seed + 1)``),
  with the binomial standard error of the accuracy and the paired one of every head's drop,
  ``sqrt(var(c_i - a_i) / n)``.
* :func:`analyse_levelled` does both and caches ``analysis.json``; :func:`levelled_record`
  makes its :class:`~lens_possym.papers.b.records.CellRecord`.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any, Callable, Sequence

import torch
from torch import Tensor

from ...errors import InvalidSelectionError
from ...plugins import write_text_atomically
from ...training.kernels import cpu_kernels
from ...training.loop import train
from ...training.tasks import Task, TaskBatch
from .cells import Cell, cell_record, train_cell
from .deposit import ablation_grid, deposit_summary, single_head_ablations
from .encoder import SchemeEncoder
from .presets import Preset, parse_label
from .probe import positional_probe
from .records import CellRecord

__all__ = ["LEVEL_GAIN", "LEVEL_WINDOW", "EXTENSION_STEPS", "EXTENSION_EVALS",
           "EXTENSION_LR_SCALE", "EXTENSION_RULE_DATE", "WINDOW_RULE_DATE", "LEVELLING_RULE",
           "STEP_CAP", "SCORING_SIZE", "SUFFIX", "levelled_name", "window_gain",
           "reference_step", "rule_gain", "levelled_off", "levelling_summary",
           "scoring_batch", "train_levelled", "score_cell", "analyse_levelled",
           "levelled_record"]

#: levelled off: less than this gained (1 point) ...
LEVEL_GAIN = 0.01
#: ... over this share of the cumulative steps (the last 20 %)
LEVEL_WINDOW = 0.2
#: steps of one extension, and its evaluations (every 240 steps)
EXTENSION_STEPS = 2400
EXTENSION_EVALS = 10
#: an extension's peak learning rate, as a share of the preset's (docs/paper_b_rules.md,
#: addendum of 2026-12-07: at 1.0 a fresh AdamW warmed up to 2e-3 took a model at 99.7 % to
#: 37 % at the extension's first evaluation; at 0.1 its lowest was 92 % and it went on)
EXTENSION_LR_SCALE = 0.1
#: when that rate was fixed (the addendum's heading)
EXTENSION_RULE_DATE = "2026-12-07 19:59 UTC"
#: when the levelling window was made to start at a run's end (the addendum's heading)
WINDOW_RULE_DATE = "2026-12-07 22:01 UTC"
#: cumulative steps at most (4 x the base run's 4,800)
STEP_CAP = 19_200
#: sentences a cell is scored on
SCORING_SIZE = 4096
SUFFIX = "+levelled"

#: the rule as a record's ``levelling["rule"]`` names it
LEVELLING_RULE = (f"gain from the latest run end at or before {1 - LEVEL_WINDOW:g} T (else "
                  f"the last evaluation there) to T < {LEVEL_GAIN * 100:g} point, cap "
                  f"{STEP_CAP} steps, extensions at {EXTENSION_LR_SCALE:g}x the peak learning "
                  f"rate (addendum of {WINDOW_RULE_DATE})")


def levelled_name(base: str) -> str:
    """The levelled grid's name: ``paper-length`` -> ``paper-length+levelled``,
    ``paper-length+copies`` -> ``paper-length+levelled+copies``."""
    if base.endswith("+copies"):
        return base[: -len("+copies")] + SUFFIX + "+copies"
    return base + SUFFIX


def window_gain(history: list[list[float]], window: float) -> float | None:
    """Loop accuracy gained over the last ``window`` of the steps: the last evaluation minus
    the last one at or before ``(1 - window) T`` (``T``: the last evaluation's step);
    ``None`` with no evaluation that early. ``history``: ``[[step, accuracy], ...]``."""
    if len(history) < 2:
        return None
    last_step, last = history[-1]
    before = [acc for step, acc in history if step <= (1 - window) * last_step]
    return None if not before else float(last - before[-1])


def reference_step(history: list[list[float]], segment_ends: Sequence[int] = ()
                   ) -> int | None:
    """Where the rule's window starts, for the last evaluation's step ``T``: the latest of
    ``segment_ends`` (the steps at which earlier runs ended: the base run, then each
    extension) at or before ``(1 -`` :data:`LEVEL_WINDOW` ``) T``, else the step of the last
    evaluation at or before it; ``None`` with neither."""
    if len(history) < 2:
        return None
    start = (1 - LEVEL_WINDOW) * history[-1][0]
    ends = [e for e in segment_ends if e <= start]
    if ends:
        return int(max(ends))
    before = [step for step, _ in history if step <= start]
    return int(before[-1]) if before else None


def rule_gain(history: list[list[float]], segment_ends: Sequence[int] = ()) -> float | None:
    """Loop accuracy gained from the :func:`reference_step` to the last evaluation (the
    accuracy at the reference step: the last evaluation at or before it)."""
    since = reference_step(history, segment_ends)
    if since is None:
        return None
    return float(history[-1][1] - [acc for step, acc in history if step <= since][-1])


def levelled_off(history: list[list[float]], segment_ends: Sequence[int] = ()) -> bool:
    """The rule: less than :data:`LEVEL_GAIN` gained since the :func:`reference_step`. With
    no ``segment_ends`` (a base run), the last :data:`LEVEL_WINDOW` of the evaluations."""
    gain = rule_gain(history, segment_ends)
    return gain is not None and gain < LEVEL_GAIN


def levelling_summary(history: list[list[float]], extensions: int,
                      segment_ends: Sequence[int] = ()) -> dict[str, Any]:
    """What the budget check prints for a cell: cumulative ``steps``, ``extensions``, the
    ``segment_ends`` (steps at which its earlier runs ended), the rule's reference step
    ``since`` and ``gain_rule``, ``gain_last_fifth``, ``gain_last_quarter``, ``levelled``
    and ``capped`` (at :data:`STEP_CAP` without levelling off)."""
    steps = int(history[-1][0]) if history else 0
    levelled = levelled_off(history, segment_ends)
    return {"steps": steps, "extensions": extensions,
            "segment_ends": [int(e) for e in segment_ends],
            "since": reference_step(history, segment_ends),
            "gain_rule": rule_gain(history, segment_ends),
            "gain_last_fifth": window_gain(history, LEVEL_WINDOW),
            "gain_last_quarter": window_gain(history, 0.25), "levelled": levelled,
            "capped": (not levelled) and steps >= STEP_CAP, "rule": LEVELLING_RULE}


def scoring_batch(task: Task, seed: int, size: int | None = None) -> TaskBatch:
    """The cell's scoring sentences: ``size`` (default :data:`SCORING_SIZE`) of the test
    split drawn with ``seed + 1`` (the loop's evaluations draw theirs with the task's seed:
    other sentences)."""
    return task.test_set(SCORING_SIZE if size is None else size, seed=seed + 1)


def train_levelled(base: Preset, cell: Cell, root: str | Path, *,
                   log: Callable[[str], None] | None = None
                   ) -> tuple[SchemeEncoder, Task, dict[str, Any]]:
    """Train ``cell`` until it levels off (module docstring): ``(model, task, info)``,
    ``info`` = :func:`levelling_summary` plus ``history`` (cumulative ``[[step, loop
    accuracy], ...]``), ``train_time_s`` (all segments) and ``cpu_kernels`` (this
    process's, :func:`~lens_possym.training.kernels.cpu_kernels`: the kernels that trained
    what was left of the cell and scored it, kept in the record's ``levelling``)."""
    root = Path(root)
    model, task, result = train_cell(base, cell, root / base.name, log=log)
    history = [[h.step, h.test_accuracy] for h in result.history]
    total, seconds, ext = result.steps_run, result.train_time_s, 0
    scheme = parse_label(cell.label)[0]
    ends: list[int] = []
    while not levelled_off(history, ends) and total < STEP_CAP:
        ends.append(total)
        ext += 1
        steps = min(EXTENSION_STEPS, STEP_CAP - total)
        out = root / levelled_name(base.name) / cell.key / f"ext{ext}"
        config = replace(base.train_config(cell.task, scheme, cell.seed, str(out),
                                           epoch_size=getattr(task, "epoch_size", None)),
                         steps=steps, lr=base.lr * EXTENSION_LR_SCALE,
                         warmup_steps=max(1, int(base.warmup_fraction * steps)),
                         eval_every=max(1, steps // EXTENSION_EVALS),
                         checkpoint_every=max(1, steps // 4), seed=cell.seed + 1000 * ext)
        part = train(model, task, config, log=log, resume=True)
        history += [[total + h.step, h.test_accuracy] for h in part.history]
        total, seconds = total + part.steps_run, seconds + part.train_time_s
    info = levelling_summary(history, ext, ends)
    info.update(history=history, train_time_s=seconds, cpu_kernels=cpu_kernels())
    return model.eval(), task, info


@torch.no_grad()
def _correct(model: SchemeEncoder, batch: TaskBatch, chunk: int = 512) -> tuple[Tensor, Tensor]:
    """``(clean [n], ablated [n_layers, n_heads, n])`` bool: the argmax of the last
    position's logits equals the answer (as :func:`~lens_possym.training.loop.evaluate`
    counts accuracy), clean and with each head's ``hook_z`` zeroed alone
    (:func:`~lens_possym.papers.b.deposit.single_head_ablations`: the
    numbers ``ablate_heads`` gives, bit for bit, at about half the cost), in chunks of
    ``chunk`` sentences."""
    clean, ablated = [], []
    for start in range(0, len(batch), chunk):
        part = batch[start: start + chunk]
        logits, heads = single_head_ablations(model, part.tokens)
        clean.append(logits.argmax(dim=-1) == part.answers)
        ablated.append(heads.argmax(dim=-1) == part.answers)
    return torch.cat(clean), torch.cat(ablated, dim=-1)


@torch.no_grad()
def score_cell(model: SchemeEncoder, batch: TaskBatch) -> dict[str, Any]:
    """Accuracy and the per-head (``hook_z`` zeroed) ablation grid on ``batch``, with
    standard errors.

    Returns ``eval_size`` ``n``, ``accuracy`` ``p``, ``accuracy_se`` ``sqrt(p (1 - p) / n)``,
    ``ablation_grid`` ``[n_layers][n_heads]`` (accuracy with that head ablated alone) and
    ``ablation_se`` ``[n_layers][n_heads]``: the paired standard error of the head's drop,
    ``sqrt(var_i(c_i - a_i) / n)`` (``c_i``, ``a_i``: sentence ``i`` right without / with
    the ablation; population variance)."""
    was_training = model.training
    model.eval()
    try:
        right, right_ablated = _correct(model, batch)
    finally:
        model.train(was_training)
    clean = right.double()
    n = len(clean)
    shape = (model.cfg.n_layers, model.cfg.n_heads)
    grid, se = torch.zeros(shape, dtype=torch.float64), torch.zeros(shape, dtype=torch.float64)
    for layer in range(shape[0]):
        for head in range(shape[1]):
            ablated = right_ablated[layer, head].double()
            grid[layer, head] = ablated.mean()
            se[layer, head] = math.sqrt(float((clean - ablated).var(unbiased=False)) / n)
    p = float(clean.mean())
    return {"eval_size": n, "accuracy": p, "accuracy_se": math.sqrt(p * (1 - p) / n),
            "ablation_grid": grid.tolist(), "ablation_se": se.tolist()}


def analyse_levelled(base: Preset, cell: Cell, root: str | Path, *,
                     log: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Train ``cell`` until it levels off and score it; cached in
    ``<root>/<base>+levelled/<cell>/analysis.json``. The data carry
    :func:`~lens_possym.papers.b.cells.analyse_cell`'s keys (``baseline``: the scoring
    accuracy; ``ablation``: the per-head grid; ``deposit``: the 2026-11-25 summary) and
    ``score`` (:func:`score_cell`) and ``levelling`` (:func:`levelling_summary`)."""
    name = levelled_name(base.name)
    cached = Path(root) / name / cell.key / "analysis.json"
    if cached.exists():
        data = json.loads(cached.read_text())
        if data.get("preset") != name:
            raise InvalidSelectionError(f"{cached} holds preset {data.get('preset')!r}, not "
                                        f"{name!r}; move its folder aside")
        return data
    model, task, info = train_levelled(base, cell, root, log=log)
    batch = scoring_batch(task, cell.seed)
    score = score_cell(model, batch)
    official = (ablation_grid(model, task, batch, official=True).tolist()
                if model.cfg.scheme == "mla" and model.cfg.faithful else None)
    history = info.pop("history")
    data = {"cell": asdict(cell), "preset": name, "config": model.cfg.to_dict(),
            "test_accuracy": history[-1][1] if history else None,
            "train_time_s": info.pop("train_time_s"), "steps": info["steps"],
            "baseline": score["accuracy"], "ablation": official or score["ablation_grid"],
            "ablation_heads": score["ablation_grid"] if official else None,
            "deposit": deposit_summary(torch.tensor(score["ablation_grid"]), score["accuracy"]),
            "probe": positional_probe(model, batch.tokens[:256]), "history": history,
            "score": score, "levelling": info}
    write_text_atomically(cached, json.dumps(data, indent=1))
    return data


def levelled_record(data: dict[str, Any]) -> CellRecord:
    """The committed record of a levelled cell: :func:`~.cells.cell_record`'s fields plus
    ``eval_size``, ``accuracy_se``, ``ablation_se`` and ``levelling``."""
    record = cell_record(data)
    score = data["score"]
    return replace(record, eval_size=score["eval_size"], accuracy_se=score["accuracy_se"],
                   ablation_se=score["ablation_se"], levelling=data["levelling"])
