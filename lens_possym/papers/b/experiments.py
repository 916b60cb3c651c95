r"""Paper B's experiments on the scheme encoders: presets, one cell of the grid, the analyses.

A **cell** is one trained model: a task (``"distance"`` or ``"count"``), a scheme label
(``"rope"``, ``"rope-k2"``, ``"mla"``...; :func:`parse_label`), a variant (``"intended"``
or ``"faithful"``) and a seed. :func:`train_cell` trains it through the shared loop
(:func:`lens_possym.training.loop.train`: checkpoints, ``metrics.json``, resumable) into
its own folder, or loads it when that folder already holds the finished run;
:func:`analyse_cell` computes and caches (``analysis.json``) what the docs report:

* **accuracy** on the task's test set (argmax over the classes);
* the **per-head ablation grid** ``[n_layers, n_heads]``: test accuracy with one head
  ablated. Intended: the head's ``hook_z`` row set to 0 (its output term removed, which is
  what the official scripts did by zeroing the head's value rows); faithful MLA: the
  official latent-slice ablation (:func:`~lens_possym.papers.b.encoder.faithful_mla_ablation`).
  The **deposit pattern** is read from the drops ``baseline − grid``
  (:func:`deposit_summary`);
* the **positional probe** (:func:`positional_probe`), for models with an input encoding;
* the **positional/symbolic profile** of every head (:func:`head_profile`), through
  :func:`lens_possym.swap_scores`.

Presets (:data:`PRESETS`): ``"cpu"`` (3 layers × 8 heads, ``d_model`` 64, 1,000 steps of 64
sentences; distance on 32 positions with gaps up to 16, count on 64 positions with up to
48 triggers: a harder count than the official 101 classes on 120 words, scaled down, so
that schemes can separate) and ``"paper"`` (6 × 16, ``d_model`` 256, ``d_head`` 16,
``d_ff`` 512, the official lengths, AdamW lr 1e-4 with betas (0.98, 0.9), weight decay 1e-5,
6 % warm-up then cosine, batch 512 for 100 epochs of the official 70 % training split;
MLA: batch 1024, 150 epochs), for GPU users.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Callable

import torch
from torch import Tensor

from ...errors import InvalidSelectionError
from ...interventions import ablate_heads
from .encoder import SCHEMES, VARIANTS, SchemeEncoder, encoder_config_for, faithful_mla_ablation
from ...training.runs import load_checkpoint
from .tasks import CountTask, DistanceTask
from ...training.tasks import Task, TaskBatch
from ...training.loop import TrainConfig, TrainResult, evaluate, train

__all__ = ["Preset", "PRESETS", "Cell", "parse_label", "make_task", "make_model",
           "train_cell", "analyse_cell", "ablation_grid", "deposit_summary",
           "positional_probe", "head_profile", "TASK_NAMES", "PROBE_SCHEMES"]

TASK_NAMES = ("distance", "count")
#: schemes with an encoding added at the input, where the probe has something to read
PROBE_SCHEMES = ("sinusoidal", "learned", "hybrid")


@dataclass(frozen=True)
class Preset:
    """Sizes and schedule of one preset (see the module docstring)."""

    name: str
    model: dict[str, Any]
    tasks: dict[str, dict[str, Any]]
    steps: dict[str, int]
    batch_size: int
    lr: float
    betas: tuple[float, float]
    weight_decay: float
    warmup_fraction: float = 0.06
    eval_size: int = 1024
    analysis_size: int = 512
    profile_prompts: int = 16
    mla_batch_size: int | None = None
    mla_steps: dict[str, int] | None = None

    def train_config(self, task: str, scheme: str, seed: int, out_dir: str | None
                     ) -> TrainConfig:
        mla = scheme == "mla"
        steps = (self.mla_steps or self.steps)[task] if mla else self.steps[task]
        return TrainConfig(
            steps=steps, batch_size=(self.mla_batch_size or self.batch_size) if mla
            else self.batch_size, lr=self.lr, betas=self.betas, weight_decay=self.weight_decay,
            warmup_steps=max(1, int(self.warmup_fraction * steps)), min_lr_ratio=0.0,
            grad_clip=1.0, seed=seed, eval_every=max(1, steps // 4), eval_size=self.eval_size,
            checkpoint_every=max(1, steps // 4) if out_dir else None, out_dir=out_dir,
            device="auto")


PRESETS: dict[str, Preset] = {
    "cpu": Preset(
        name="cpu",
        model=dict(n_layers=3, n_heads=8, d_model=64, d_head=8, d_ff=128, d_latent=32),
        tasks={"distance": dict(n_ctx=32, max_between=16, max_side=6, n_words=64),
               "count": dict(n_ctx=64, n_triggers=8, max_count=48, n_words=64)},
        steps={"distance": 1000, "count": 1000}, batch_size=64, lr=1e-3, betas=(0.9, 0.98),
        weight_decay=1e-5),
    "paper": Preset(
        name="paper",
        model=dict(n_layers=6, n_heads=16, d_model=256, d_head=16, d_ff=512, d_latent=128),
        tasks={"distance": dict(n_ctx=128, max_len=120, max_between=70, max_side=25,
                                n_words=570),
               "count": dict(n_ctx=128, max_len=120, n_triggers=30, max_count=100,
                             n_words=543)},
        # 100 epochs of the official 70 % split: 70,000 / 512 and 35,000 / 512 steps each
        steps={"distance": 100 * math.ceil(70_000 / 512),
               "count": 100 * math.ceil(35_000 / 512)},
        batch_size=512, lr=1e-4, betas=(0.98, 0.9), weight_decay=1e-5,
        eval_size=4096, analysis_size=4096, profile_prompts=32, mla_batch_size=1024,
        mla_steps={"distance": 150 * math.ceil(70_000 / 1024),
                   "count": 150 * math.ceil(35_000 / 1024)}),
}


def parse_label(label: str) -> tuple[str, int | None]:
    """``"rope-k2"`` → ``("rope", 2)``; ``"alibi"`` → ``("alibi", None)``."""
    if label.startswith("rope-k"):
        try:
            return "rope", int(label[len("rope-k"):])
        except ValueError:
            pass
    if label not in SCHEMES:
        raise InvalidSelectionError(
            f"unknown scheme {label!r}; choose one of {', '.join(SCHEMES)} or rope-k<N> "
            "(RoPE on the first N heads)")
    return label, None


@dataclass(frozen=True)
class Cell:
    """One model of the grid."""

    task: str
    label: str
    variant: str = "intended"
    seed: int = 0

    def __post_init__(self) -> None:
        if self.task not in TASK_NAMES:
            raise InvalidSelectionError(f"task must be one of {TASK_NAMES}, got {self.task!r}")
        if self.variant not in VARIANTS:
            raise InvalidSelectionError(f"variant must be one of {VARIANTS}, got {self.variant!r}")
        parse_label(self.label)

    @property
    def key(self) -> str:
        return f"{self.task}/{self.variant}/{self.label}/seed{self.seed}"


def make_task(preset: Preset, name: str, seed: int = 0) -> Task:
    """The preset's task ``name`` (its data seed is the cell's seed)."""
    cls = {"distance": DistanceTask, "count": CountTask}[name]
    return cls(**preset.tasks[name], seed=seed)


def make_model(preset: Preset, task: Task, label: str, variant: str, seed: int = 0
               ) -> SchemeEncoder:
    scheme, rope_heads = parse_label(label)
    return SchemeEncoder(encoder_config_for(task, scheme, variant=variant, rope_heads=rope_heads,
                                            seed=seed, **preset.model))


def train_cell(preset: Preset, cell: Cell, root: str | Path, *,
               log: Callable[[str], None] | None = None) -> tuple[SchemeEncoder, Task, TrainResult]:
    """Train ``cell`` into ``root/<cell.key>`` (resuming an interrupted run), or load it."""
    out = Path(root) / cell.key
    metrics = out / "metrics.json"
    if metrics.exists() and (out / "model.pt").exists():
        model, task, _ = load_checkpoint(out / "model.pt")
        return model.eval(), task, TrainResult.load(metrics)
    task = make_task(preset, cell.task, cell.seed)
    model = make_model(preset, task, cell.label, cell.variant, cell.seed)
    config = preset.train_config(cell.task, parse_label(cell.label)[0], cell.seed, str(out))
    result = train(model, task, config, log=log, resume=True)
    return model.eval(), task, result


# ---- analyses ----------------------------------------------------------------------------


@torch.no_grad()
def ablation_grid(model: SchemeEncoder, task: Task, batch: TaskBatch) -> Tensor:
    """Accuracy ``[n_layers, n_heads]`` on ``batch`` with each head ablated alone.

    Intended models and faithful non-MLA models: ``hook_z`` row zeroed (the official
    scripts zeroed the head's value rows and bias, which zeroes ``z`` identically). Faithful
    MLA: the official latent-slice ablation, which hits every head of the layer at once
    and is a no-op for heads ``h ≥ d_latent / d_head``.
    """
    cfg = model.cfg
    grid = torch.zeros(cfg.n_layers, cfg.n_heads)
    official_mla = cfg.scheme == "mla" and cfg.faithful
    for layer in range(cfg.n_layers):
        for head in range(cfg.n_heads):
            context = (faithful_mla_ablation(model, layer, head) if official_mla
                       else ablate_heads(model, [(layer, head)], mode="zero"))
            with context:
                grid[layer, head] = evaluate(model, task, batch).accuracy
    return grid


def deposit_summary(grid: Tensor, baseline: float) -> dict[str, Any]:
    """The drops ``baseline − grid`` read for the deposit pattern.

    Returns ``top_drop`` and ``second_drop`` (largest and second-largest single-head drop,
    accuracy points in [0, 1]), ``top_head`` ``[layer, head]``, ``top_relative`` (top drop as
    a share of the baseline: the paper's "about 60 %"), ``median_drop``, and ``deposit``:
    True when one head carries a task the model has learned: the baseline is at least 0.5,
    the top drop is at least 0.25 of the baseline **and** at least twice the second-largest
    drop (the thresholds are stated in the docs beside every verdict).
    """
    drops = (baseline - grid).flatten()
    order = torch.argsort(drops, descending=True)
    top, second = float(drops[order[0]]), float(drops[order[1]]) if len(drops) > 1 else 0.0
    n_heads = grid.shape[1]
    relative = top / baseline if baseline > 0 else 0.0
    return {"top_drop": top, "second_drop": second,
            "top_head": [int(order[0]) // n_heads, int(order[0]) % n_heads],
            "top_relative": relative, "median_drop": float(drops.median()),
            "deposit": bool(baseline >= 0.5 and relative >= 0.25
                           and top >= 2 * max(second, 1e-9))}


@torch.no_grad()
def positional_probe(model: SchemeEncoder, tokens: Tensor, *, rank: int | None = None
                     ) -> dict[str, Any] | None:
    r"""How much positional information the residual stream holds, per layer, and whether it
    still lies along the input encoding's directions.

    Let :math:`P \in \mathbb{R}^{n\times d}` be the encoding added at the input (rows are
    positions), :math:`x^{(L)}_{b,p}` the residual stream entering block ``L`` (the last
    entry: after the last block), and :math:`m_p = \mathbb{E}_b\,x^{(L)}_{b,p}` its
    **positional part** (the mean over prompts at each position, centred over positions).
    Per ``L``:

    * ``r2``: held-out :math:`R^2` of a least-squares linear readout of :math:`P_p` from
      :math:`x^{(L)}_{b,p}` (fit on half the prompts, scored on the other half, over all
      coordinates of :math:`P`): is position still *linearly decodable*?
    * ``pos_share``: :math:`\sum_p\|m_p\|^2` over the stream's total centred variance: how
      much of the stream is position at all.
    * ``aligned``: the share of the positional part's variance lying in the span of the
      top ``rank`` principal directions of :math:`P` (default: those holding 99 % of its
      variance): does position still live along the **additive positional directions**?
      ``chance = rank / d_model`` is what a random direction would give. "Displaced" means
      ``aligned`` falls towards ``chance`` while ``pos_share`` or ``r2`` stay up (position
      is carried, but elsewhere).

    Returns ``None`` for a model without an input encoding.
    """
    if not hasattr(model, "W_pos"):
        return None
    n = tokens.shape[1]
    P = model.W_pos[:n].double().cpu()
    _, S, Vh = torch.linalg.svd(P - P.mean(0), full_matrices=False)
    if rank is None:
        energy = (S ** 2).cumsum(0) / (S ** 2).sum().clamp_min(1e-30)
        rank = int((energy < 0.99).sum()) + 1
    basis = Vh[:rank].T                                            # [d_model, rank]
    names = [f"blocks.{L}.hook_resid_pre" for L in range(model.cfg.n_layers)]
    names.append(f"blocks.{model.cfg.n_layers - 1}.hook_resid_post")
    _, cache = model.run_with_cache(tokens, names_filter=lambda name: name in names)
    half = tokens.shape[0] // 2
    target = P[None].expand(tokens.shape[0], -1, -1)
    out: dict[str, Any] = {"r2": [], "pos_share": [], "aligned": [], "rank": rank,
                           "chance": rank / P.shape[1]}
    for name in names:
        x = cache[name].double().cpu()                             # [b, p, d]
        xa = torch.cat([x, torch.ones_like(x[..., :1])], dim=-1)
        fit = torch.linalg.lstsq(xa[:half].reshape(-1, xa.shape[-1]),
                                 target[:half].reshape(-1, P.shape[-1])).solution
        pred = xa[half:].reshape(-1, xa.shape[-1]) @ fit
        truth = target[half:].reshape(-1, P.shape[-1])
        sst = ((truth - truth.mean(0)) ** 2).sum()
        out["r2"].append(float(1 - ((pred - truth) ** 2).sum() / sst))
        total = ((x - x.mean((0, 1))) ** 2).sum() / x.shape[0]
        m = x.mean(0)
        m = m - m.mean(0)                                          # positional part [p, d]
        out["pos_share"].append(float((m ** 2).sum() / total))
        out["aligned"].append(float(((m @ basis) ** 2).sum() / (m ** 2).sum().clamp_min(1e-30)))
    return out


def profile_site(model: SchemeEncoder) -> tuple[str, str]:
    """``(swap_site, method)`` at which :func:`head_profile` scores a model.

    Definition 2 swaps contents and keeps positions. Intended models whose position enters
    inside the head: rows of each layer's input, in closed form (``"layer"``, ``"exact"``;
    MLA re-run). Models with an input encoding, and faithful models (whose keys come from
    the layer-0 embeddings, so a row swap at a deeper layer would move queries only): the
    token embeddings, positions kept, re-run (``"content"``, ``"rerun"``).
    """
    cfg = model.cfg
    if cfg.faithful or cfg.input_encoding is not None:
        return "content", "rerun"
    return "layer", "rerun" if cfg.scheme == "mla" else "exact"


def head_profile(model: SchemeEncoder, tokens: Tensor) -> dict[str, Any]:
    """``s_POS`` and ``s_SYM`` ``[n_layers, n_heads]`` of every head for the query at the last
    position (block swaps, 8 blocks; :func:`lens_possym.swap_scores`), at
    :func:`profile_site`'s site."""
    from ...scores import swap_scores

    site, method = profile_site(model)
    scores = swap_scores(model, tokens, swap="block", n_blocks=8, per_frequency=False,
                         exclusion=False, method=method, swap_site=site, exclude_bos=False)
    return {"pos": scores.pos.tolist(), "sym": scores.sym.tolist(), "site": site,
            "method": method}


def analyse_cell(preset: Preset, cell: Cell, root: str | Path, *, profile: bool = True,
                 log: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Train (or load) ``cell`` and compute its analyses; cached in ``analysis.json``."""
    out = Path(root) / cell.key
    cached = out / "analysis.json"
    if cached.exists():
        data = json.loads(cached.read_text())
        if data.get("profile") is not None or not profile:
            return data
    model, task, result = train_cell(preset, cell, root, log=log)
    batch = task.test_set(preset.analysis_size, seed=cell.seed + 1)
    baseline = evaluate(model, task, batch).accuracy
    grid = ablation_grid(model, task, batch)
    prompts = batch.tokens[: preset.profile_prompts]
    data = {
        "cell": asdict(cell), "preset": preset.name, "config": model.cfg.to_dict(),
        "test_accuracy": result.test_accuracy, "train_time_s": result.train_time_s,
        "steps": result.steps_run, "baseline": baseline, "ablation": grid.tolist(),
        "deposit": deposit_summary(grid, baseline),
        "probe": positional_probe(model, batch.tokens[:256]),
        "profile": head_profile(model, prompts) if profile else None,
        "history": [[h.step, h.test_accuracy] for h in result.history],
    }
    out.mkdir(parents=True, exist_ok=True)
    cached.write_text(json.dumps(data, indent=1))
    return data


def grid_cells(*, seeds: tuple[int, ...] = (0,), tasks: tuple[str, ...] = TASK_NAMES,
               k_values: tuple[int, ...] = (0, 1, 2, 3), n_heads: int = 8) -> list[Cell]:
    """The full grid in the order it is worth running: the main table (intended), then the
    faithful variants, then RoPE on k heads (both variants)."""
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


def with_steps(preset: Preset, steps: int) -> Preset:
    """The preset with every task's step count replaced (tests, quick looks)."""
    return replace(preset, steps={t: steps for t in preset.steps},
                   mla_steps={t: steps for t in preset.steps} if preset.mla_steps else None)


__all__ += ["grid_cells", "with_steps", "profile_site"]
