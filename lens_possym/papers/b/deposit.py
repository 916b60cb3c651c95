r"""Paper B's deposit pattern: each head ablated alone, and the drops read for one head that
carries the task (the deposit rule: :func:`deposit_summary`)."""

from __future__ import annotations

from typing import Any

import torch
from jaxtyping import Float, Int
from torch import Tensor

from ...errors import InvalidSelectionError
from ...experiments.importance import importance_metric
from ...interventions import ImportanceBatch, head_importance
from ...plugins import batched_token_ids
from ...training.loop import evaluate
from ...training.tasks import Task, TaskBatch
from .encoder import SchemeEncoder, faithful_mla_ablation

__all__ = ["ablation_grid", "deposit_summary", "single_head_ablations"]

#: sentences per forward pass of the official MLA grid's evaluations: the accuracy of one
#: pass bit for bit, about 1.5x faster on a CPU core (``TrainConfig.eval_batch``)
FORWARD_BATCH = 64


@torch.no_grad()
def ablation_grid(model: SchemeEncoder, task: Task, batch: TaskBatch, *,
                  official: bool = True) -> Tensor:
    """Accuracy ``[n_layers, n_heads]`` on ``batch`` with each head ablated alone.

    Every model: the head's ``hook_z`` row zeroed (its output term removed; the official
    scripts zeroed the head's value rows and bias, which zeroes ``z`` identically; a test
    checks the equality against a transcription of ``transvis.py``), by the core's
    :func:`~lens_possym.interventions.head_importance`, one head per pass, in eval mode, as
    :func:`~lens_possym.training.evaluate` measures accuracy. Faithful MLA with
    ``official=True``: the official latent-slice ablation instead (``mlavis.py``), which
    hits every head of the layer at once and is a no-op for heads ``h ≥ d_latent / d_head``.
    """
    cfg = model.cfg
    if official and cfg.scheme == "mla" and cfg.faithful:
        return _latent_slice_grid(model, task, batch)
    was_training = model.training
    model.eval()
    try:
        result = head_importance(
            model, ImportanceBatch(tokens=batch.tokens, answers=batch.answers),
            importance_metric("accuracy"),  # one number per head, as evaluate() computes it
            mode="zero", heads_per_pass=1)   # one head per pass: the batch as evaluated
    finally:
        model.train(was_training)
    return result.ablated.to(torch.float32)


@torch.no_grad()
def single_head_ablations(model: SchemeEncoder, tokens: Int[Tensor, "batch pos"]
                          ) -> tuple[Float[Tensor, "batch n_classes"],
                                     Float[Tensor, "n_layers n_heads batch n_classes"]]:
    """The clean last-position logits of ``model`` (in eval mode) and those with each head's
    ``hook_z`` row zeroed alone: ``(clean [batch, n_classes], ablated [n_layers, n_heads,
    batch, n_classes])``.

    The same numbers, bit for bit, as ``model(tokens)[:, -1]`` and, per head, the same
    under ``ablate_heads(model, [(layer, head)], mode="zero")`` (a test checks it), at
    about half their cost: the clean pass keeps each block's input ``x_L`` and its heads'
    ``z_L``, and head ``(L, h)`` runs from there (``z_L`` with row ``h`` zeroed, then the
    output projection, the rest of block ``L`` and the blocks after it), so the blocks
    below ``L`` and block ``L``'s attention are not computed again."""
    if model.training:
        raise InvalidSelectionError("single_head_ablations runs in eval mode: call "
                                    "model.eval() first")
    cfg = model.cfg
    tokens = batched_token_ids(tokens, cfg.n_ctx, cfg.d_vocab)
    key_mask = model._key_mask(tokens)
    x, memory, inputs, heads = model._embed(tokens), None, [], []
    for block in model.blocks:
        x = block.hook_resid_pre(x)
        memory = x if memory is None else memory
        z = block.heads(x, memory, key_mask)
        inputs.append(x)
        heads.append(z)
        x = block.finish(x, block.attn._out(z))
    clean = model._readout(x, key_mask)[:, -1]
    ablated = clean.new_empty((cfg.n_layers, cfg.n_heads) + clean.shape)
    for layer, block in enumerate(model.blocks):
        for head in range(cfg.n_heads):
            z = heads[layer].clone()
            z[:, :, head] = 0
            x = block.finish(inputs[layer], block.attn._out(z))
            for later in model.blocks[layer + 1:]:
                x = later(later.hook_resid_pre(x), memory, key_mask)
            ablated[layer, head] = model._readout(x, key_mask)[:, -1]
    return clean, ablated


def _latent_slice_grid(model: SchemeEncoder, task: Task, batch: TaskBatch) -> Tensor:
    """The official MLA ablation (``faithful_mla_ablation``) of each (layer, head)."""
    grid = torch.zeros(model.cfg.n_layers, model.cfg.n_heads)
    for layer in range(model.cfg.n_layers):
        for head in range(model.cfg.n_heads):
            with faithful_mla_ablation(model, layer, head):
                grid[layer, head] = evaluate(model, task, batch,
                                             forward_batch=FORWARD_BATCH).accuracy
    return grid


#: the deposit rule of 2026-11-25 (docs/paper_b_rules.md): a model that learned its task
#: (accuracy at least DEPOSIT_LEARNED), a top single-head drop of at least DEPOSIT_RELATIVE
#: of the accuracy and at least DEPOSIT_RATIO times the second-largest drop
DEPOSIT_LEARNED, DEPOSIT_RELATIVE, DEPOSIT_RATIO = 0.5, 0.25, 2.0
#: ``heads_over_10``: heads whose ablation alone costs more than this (accuracy, not points)
HEADS_OVER = 0.10


def deposit_summary(grid: Tensor, baseline: float) -> dict[str, Any]:
    """The drops ``baseline − grid`` read for the deposit pattern.

    Returns ``top_drop`` and ``second_drop`` (largest and second-largest single-head drop,
    accuracy points in [0, 1]), ``top_head`` ``[layer, head]``, ``top_relative`` (top drop as
    a share of the baseline: the paper's "about 60 %"), ``median_drop``, ``heads_over_10``
    (heads whose ablation alone costs more than 10 points), and ``deposit``:
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
            "heads_over_10": int((drops > HEADS_OVER).sum()),
            "deposit": bool(baseline >= DEPOSIT_LEARNED and relative >= DEPOSIT_RELATIVE
                           and top >= DEPOSIT_RATIO * max(second, 1e-9))}
