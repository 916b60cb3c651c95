r"""Is the answer carried along the hop path? Paper C's decomposition
``f = Reflexive^{ℓ-h} ∘ Index^h`` (or ``Retrieval^h``) says the answer reaches stop ``p_k``
of an ``h``-hop prompt in layer ``h-1-k``; this module reads that off the residual stream
at every stop, per layer, two ways (the paper read Fig 3 off attention patterns only):

* :func:`chain_lens`, a **logit lens** per (stop, layer): the residual stream at stop
  ``p_k`` after ``j`` blocks (``j = 0``: the embeddings; ``j = n_layers``: the final
  stream) decoded through the model's final normalisation and unembedding
  (:func:`decode_residual`); ``decoded[h-1, j, k]`` is the share of ``h``-hop prompts
  whose decoded argmax (over the whole vocabulary, as the model's prediction) is the
  answer.
* :func:`chain_patching`, **residual-stream patching** at each stop: prompts whose answer
  token's value is changed (:func:`~lens_possym.papers.c.roles.corrupt_answers`: the path
  is unchanged) are run with the clean residual stream at ``p_k`` after ``j`` blocks
  patched in (one position per prompt, ``blocks.{j}.hook_resid_pre``, or the last block's
  ``hook_resid_post`` for ``j = n_layers``); ``restore[h-1, j, k]`` is the share of
  ``h``-hop prompts whose prediction becomes the clean answer. Unlike one head's output
  (:func:`~lens_possym.papers.c.roles.causal_roles`) the whole stream moves, so redundant
  heads that carry the answer together do not hide it.

On the exact chain (:func:`~lens_possym.papers.c.constructions.t_index_chain_model`) both
first succeed at ``j = h - k``: the schedule. :meth:`ChainLens.first_layer` and
:meth:`ChainPatching.first_layer` give the first ``j`` where a share reaches a threshold.

Index convention: ``j`` counts blocks applied, so "by layer ``ℓ + 1``" in the verdict
rules (docs/paper_c_rules.md, rule 10) is ``j <= ℓ + 1``, and stop ``p_{h-1-ℓ}`` on
schedule is ``j <= h - k``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from jaxtyping import Float
from torch import Tensor

from ...errors import InvalidSelectionError
from ...results_io import ResultIO
from ...training.tasks import TaskBatch
from .roles import corrupt_answers
from .tasks import MultiHopTask

__all__ = ["residual_names", "decode_residual", "ChainLens", "chain_lens", "ChainPatching",
           "chain_patching"]


def _n_layers(model) -> int:
    cfg = getattr(model, "cfg", None)
    n = getattr(cfg, "n_layers", None)
    if not isinstance(n, int) or n < 1:
        raise InvalidSelectionError(
            f"{type(model).__name__} has no cfg.n_layers; pass a TransformerBridge or a toy model")
    return n


def residual_names(model) -> list[str]:
    """Hook names of the residual stream after ``j = 0..n_layers`` blocks:
    ``blocks.{j}.hook_resid_pre`` then ``blocks.{n_layers-1}.hook_resid_post``."""
    n = _n_layers(model)
    return [f"blocks.{j}.hook_resid_pre" for j in range(n)] + [f"blocks.{n - 1}.hook_resid_post"]


def decode_residual(model, resid: Float[Tensor, "... d_model"]) -> Float[Tensor, "... d_vocab"]:
    """Logits of residual-stream vectors: the model's final normalisation (``ln_final``,
    when it has one) then its unembedding (``unembed``, or ``W_U`` for the toy model), so
    the final stream decodes to the model's own logits."""
    x = resid
    ln = getattr(model, "ln_final", None)
    if ln is not None:
        x = ln(x)
    unembed = getattr(model, "unembed", None)
    if unembed is not None:
        return unembed(x)
    W_U = getattr(model, "W_U", None)
    if isinstance(W_U, Tensor):
        return x @ W_U
    raise InvalidSelectionError(
        f"{type(model).__name__} has neither an unembed module nor W_U to decode with")


def _stop_table(n_hops: int, n_res: int) -> Tensor:
    return torch.full((n_hops, n_res, n_hops + 1), float("nan"))


def _first(table: Tensor, h: int, k: int, threshold: float) -> int | None:
    col = table[h - 1, :, k]
    hit = (col >= threshold).nonzero()
    return int(hit[0]) if len(hit) else None


@dataclass(repr=False)
class ChainLens(ResultIO):
    """Logit lens per (hop count, blocks applied, stop) (module docstring).

    Attributes:
        task: the task's name.
        decoded: ``[max_hops (h-1), n_layers + 1 (j), max_hops + 1 (k)]`` share of
            ``h``-hop prompts whose decoded argmax at ``p_k`` after ``j`` blocks is the
            answer (``k = h``: the answer position itself; ``nan`` for ``k > h``).
        answer_prob: the same cells: mean probability of the answer (softmax of the
            decoded logits).
        counts: prompts per hop count.
    """

    task: str
    decoded: Tensor
    answer_prob: Tensor
    counts: list[int]

    FORMAT = "lens-possym/paper-c-chain-lens@1"

    @property
    def n_layers(self) -> int:
        return self.decoded.shape[1] - 1

    def first_layer(self, h: int, k: int, threshold: float = 0.5) -> int | None:
        """The first ``j`` (blocks applied) at which ``p_k`` of ``h``-hop prompts decodes
        the answer in at least ``threshold`` of them (``None``: never)."""
        return _first(self.decoded, h, k, threshold)

    def to_dict(self) -> dict:
        return {"task": self.task, "decoded": self.decoded, "answer_prob": self.answer_prob,
                "counts": self.counts}

    @classmethod
    def from_dict(cls, data: dict) -> "ChainLens":
        return cls(data["task"], torch.as_tensor(data["decoded"]).float(),
                   torch.as_tensor(data["answer_prob"]).float(), list(data["counts"]))

    def _table(self):
        return _chain_frame({"decoded": self.decoded, "answer_prob": self.answer_prob})

    def _headline(self) -> list[str]:
        return [f"task={self.task}", f"n_layers={self.n_layers}"]


@dataclass(repr=False)
class ChainPatching(ResultIO):
    """Residual-stream patching per (hop count, blocks applied, stop) (module docstring).

    Attributes:
        restore: ``[max_hops (h-1), n_layers + 1 (j), max_hops + 1 (k)]`` share of
            ``h``-hop prompts restored to the clean answer (``nan`` for ``k > h``).
        corrupted_accuracy: share of corrupted prompts predicting the clean answer unpatched.
        clean_accuracy: share of clean prompts answered correctly.
    """

    task: str
    restore: Tensor
    counts: list[int]
    corrupted_accuracy: float
    clean_accuracy: float

    FORMAT = "lens-possym/paper-c-chain-patching@1"

    @property
    def n_layers(self) -> int:
        return self.restore.shape[1] - 1

    def first_layer(self, h: int, k: int, threshold: float = 0.8) -> int | None:
        """The first ``j`` at which patching ``p_k`` restores at least ``threshold`` of
        the ``h``-hop prompts (``None``: never)."""
        return _first(self.restore, h, k, threshold)

    def to_dict(self) -> dict:
        return {"task": self.task, "restore": self.restore, "counts": self.counts,
                "corrupted_accuracy": self.corrupted_accuracy,
                "clean_accuracy": self.clean_accuracy}

    @classmethod
    def from_dict(cls, data: dict) -> "ChainPatching":
        return cls(data["task"], torch.as_tensor(data["restore"]).float(), list(data["counts"]),
                   float(data["corrupted_accuracy"]), float(data["clean_accuracy"]))

    def _table(self):
        return _chain_frame({"restore": self.restore})

    def _headline(self) -> list[str]:
        return [f"task={self.task}", f"clean_accuracy={self.clean_accuracy:.3g}"]


def _chain_frame(tensors: dict[str, Tensor]):
    """Long format: ``hops, layer (blocks applied), stop, score, value``."""
    import pandas as pd

    rows = []
    for score, t in tensors.items():
        for (h, j, k) in torch.isfinite(t).nonzero().tolist():
            rows.append({"hops": h + 1, "layer": j, "stop": k, "score": score,
                         "value": float(t[h, j, k])})
    return pd.DataFrame.from_records(rows, columns=["hops", "layer", "stop", "score", "value"])


def _paths(task: MultiHopTask, batch: TaskBatch) -> tuple[Tensor, Tensor]:
    if not isinstance(task, MultiHopTask):
        raise InvalidSelectionError(
            f"the chain analyses read Number or Letter tasks, got {getattr(task, 'name', task)!r}")
    return task.hop_path(batch.tokens)


@torch.no_grad()
def chain_lens(model, task: MultiHopTask, batch: TaskBatch) -> ChainLens:
    """The logit lens at every stop of every prompt's hop path, after every block."""
    hops, path = _paths(task, batch)
    names = residual_names(model)
    H, rows = task.max_hops, torch.arange(len(batch))
    _, cache = model.run_with_cache(batch.tokens, names_filter=names)
    decoded, prob = _stop_table(H, len(names)), _stop_table(H, len(names))
    answers = batch.answers.to(cache[names[0]].device)
    for j, name in enumerate(names):
        resid = cache[name]
        for h in range(1, H + 1):
            on = rows[hops == h]
            if not len(on):
                continue
            for k in range(h + 1):
                logits = decode_residual(model, resid[on, path[on, k]][:, None])[:, 0].float()
                decoded[h - 1, j, k] = float((logits.argmax(-1) == answers[on]).float().mean())
                p = logits.softmax(-1).gather(-1, answers[on][:, None])
                prob[h - 1, j, k] = float(p.mean())
    counts = [int((hops == h).sum()) for h in range(1, H + 1)]
    return ChainLens(task.name, decoded, prob, counts)


@torch.no_grad()
def chain_patching(model, task: MultiHopTask, batch: TaskBatch, *, seed: int = 0
                   ) -> ChainPatching:
    """Patch the clean residual stream at each stop, after each number of blocks, into
    runs whose answer value was changed (module docstring)."""
    hops, path = _paths(task, batch)
    names = residual_names(model)
    H, rows = task.max_hops, torch.arange(len(batch))
    clean_logits, cache = model.run_with_cache(batch.tokens, names_filter=names)
    device = clean_logits.device
    answers = batch.answers.to(device)
    clean_acc = float((clean_logits[:, -1].argmax(-1) == answers).float().mean())
    corrupted = corrupt_answers(task, batch, seed=seed)
    base = model(corrupted.tokens)[:, -1].argmax(-1)
    restore = _stop_table(H, len(names))
    for h in range(1, H + 1):
        on = rows[hops == h]
        if not len(on):
            continue
        tokens = corrupted.tokens[on]
        for k in range(h + 1):
            where = path[on, k].to(device)
            local = torch.arange(len(on), device=device)
            for j, name in enumerate(names):
                source = cache[name][on.to(device), where]

                def patch(resid, hook, source=source, where=where, local=local):
                    resid = resid.clone()
                    resid[local, where] = source.to(resid.dtype)
                    return resid

                pred = model.run_with_hooks(tokens, fwd_hooks=[(name, patch)])[:, -1].argmax(-1)
                restore[h - 1, j, k] = float((pred == answers[on.to(device)]).float().mean())
    counts = [int((hops == h).sum()) for h in range(1, H + 1)]
    return ChainPatching(task.name, restore, counts,
                         float((base == answers).float().mean()), clean_acc)
