r"""The theory's hand-built heads as weight setters, and ``w_max`` along the answer position.

Each ``build_*_head`` writes one head of a one-hot
:class:`~lens_possym.training.toy.ToyTransformer` so that the model computes exactly
that head (every other head, layer and MLP output is zeroed; the head's gate is set to the
frequencies it uses), and returns a :class:`HeadConstruction` recording the logit
amplitudes it chose. Query and key live in one 2-D pair per frequency id, written as
complex numbers ``a + ib`` (pair dims from :meth:`RopeSpec.dims_of`; for the θ = 0 tail
its first two dims). With
``q = r_q e^{iα}`` at the query position ``n`` and ``k = r_k e^{iβ}`` at key position ``i``
the RoPE logit of that pair is

.. math::  \lambda_i = s\, r_q r_k \cos\big(\alpha - \beta + (n - i)\theta\big).

* :func:`build_index_head` (**H_POS**, Theorem 3): every symbol's key is the same vector,
  the marker ``IDX_j`` rotates the query so that ``λ_i = A cos((i - j)θ)``: a single-angle
  positional head, peaked at ``i = j``.
* :func:`build_retrieval_head` (**H_SYM**, Theorem 5): entity ``e`` sits at phase
  ``2πe/E`` in query and key, so on a θ = 0 (NoPE) channel ``λ_i = A cos(2π(e_i - e_q)/E)``,
  maximal exactly on the queried entity wherever it is. On a channel with θ > 0 the
  query phase is centred on the middle key, ``λ_match(i) = A cos((i - c)θ)``.
* :func:`build_partial_induction_head` (Theorem 6): the θ1 = 0 channel above plus a
  content-free θ2 channel whose logit increases monotonically with ``i`` (needs
  ``(n_pairs - 1)·θ2 < π``: θ2 "not too large"), so the last occurrence of ``e_q`` wins.

Values copy the answer: ``W_V`` maps a symbol (or a pair's attribute) to its own value dim,
``W_O`` that dim to the answer token's residual dim, and ``W_U`` reads only answer tokens.

``w_max``: :func:`w_max_by_position` measures the head's largest attention weight at the
query, averaged per answer position; :func:`w_max_positional` and
:func:`w_max_symbolic` are Theorem 7's closed forms (U-shaped for H_POS, an inverse U
for the simplified H_SYM, whose non-matching keys all have logit 0).
"""

from __future__ import annotations

import math
from typing import Sequence

import torch
from jaxtyping import Float
from torch import Tensor

from ...errors import InvalidSelectionError
from ...plugins import boundary
from ...training.constructions import (
    HeadConstruction,
    check_construction_site,
    frequency_pair,
    radius_for,
    reset_to_head,
    set_pair,
    write_copy_path,
)
from ...training.tasks import Task, TaskBatch
from ...training.toy import ToyTransformer
from .tasks import IndexTask, PairTask, PartialInductionTask, RetrievalTask

# HeadConstruction is the core's (lens_possym.training.constructions), as is the plumbing
# every construction uses (paper C's T_Index and T_Retrieval too)
__all__ = [
    "build_index_head",
    "build_retrieval_head",
    "build_partial_induction_head",
    "w_max_by_position",
    "w_max_positional",
    "w_max_symbolic",
]


# ----------------------------------------------------------------------------------------
# constructions


def build_index_head(model: ToyTransformer, task: IndexTask, freq: int, *, layer: int = 0,
                     head: int = 0, amplitude: float | None = None, margin: float = 10.0,
                     readout: float = 10.0) -> HeadConstruction:
    r"""H_POS: a single-angle positional head that solves Index (paper A, Theorem 3).

    Keys of all symbols are the same vector ``r·1``; the query of ``IDX_j`` is
    ``r·e^{i(j-n)θ}``, so ``λ_i = A cos((i - j)θ)`` with ``A = s r²``, and the marker
    keys are 0. ``amplitude`` defaults to ``margin / min_{Δ≠0} (1 - cos Δθ)`` over the
    key offsets ``|Δ| < L``: every other key sits at least ``margin`` nats below the
    target. Raises if θ = 0 (a symbolic head cannot solve Index: Theorem 2) or if two
    offsets alias exactly.
    """
    if not isinstance(task, IndexTask):
        raise InvalidSelectionError(f"build_index_head needs an IndexTask, got {task.name!r}")
    layer = check_construction_site(model, task, layer, head)
    freq, dims, theta = frequency_pair(model, freq)
    offsets = torch.arange(1, task.length, dtype=torch.float64)
    gap = float((1 - torch.cos(offsets * theta)).min())
    if theta == 0 or gap <= 1e-12:
        raise InvalidSelectionError(
            f"frequency id {freq} (θ = {theta:.4g}) cannot tell the {task.length} positions "
            "apart (θ = 0, or a multiple of 2π between two offsets); a positional head needs "
            "0 < θ with no exact aliasing")
    A = float(amplitude) if amplitude is not None else margin / gap
    r = radius_for(model, A)
    n = task.length  # query position
    reset_to_head(model, layer, head, [freq])
    attn = model.blocks[layer].attn
    with torch.no_grad():
        for s in range(task.n_symbols):
            set_pair(attn.W_K[head], s, dims, complex(r, 0.0))
        for j in range(task.length):
            phase = (j - n) * theta
            set_pair(attn.W_Q[head], task.n_symbols + j, dims,
                      complex(r * math.cos(phase), r * math.sin(phase)))
    write_copy_path(model, layer, head, {s: s for s in range(task.n_symbols)}, task.answer_tokens,
               readout)
    return HeadConstruction(model, "positional", layer, head, [freq], [theta], {freq: A},
                            None if amplitude is not None else margin)


def _entity_phase(e: int, n_entities: int) -> float:
    return 2 * math.pi * e / n_entities


def _write_symbolic_channel(model: ToyTransformer, task: PairTask, layer: int, head: int,
                            dims: list[int], theta: float, A: float, center: float) -> None:
    """Entity phases on one pair; query phase centred so ``λ_match(i) = A cos((i - c)θ)``."""
    r = radius_for(model, A)
    n = task.n_pairs  # query position
    attn = model.blocks[layer].attn
    with torch.no_grad():
        for e in range(task.n_entities):
            phi = _entity_phase(e, task.n_entities)
            for a in range(task.n_attributes):
                tok = int(task.pair_token(torch.tensor(e), torch.tensor(a)))
                set_pair(attn.W_K[head], tok, dims, complex(r * math.cos(phi), r * math.sin(phi)))
            q_phase = phi + (center - n) * theta
            set_pair(attn.W_Q[head], int(task.query_token(torch.tensor(e))), dims,
                      complex(r * math.cos(q_phase), r * math.sin(q_phase)))


def _attribute_sources(task: PairTask) -> dict[int, int]:
    return {int(task.pair_token(torch.tensor(e), torch.tensor(a))):
            int(task.answer_token(torch.tensor(a)))
            for e in range(task.n_entities) for a in range(task.n_attributes)}


def build_retrieval_head(model: ToyTransformer, task: RetrievalTask, freq: int, *, layer: int = 0,
                         head: int = 0, amplitude: float | None = None, margin: float = 10.0,
                         center: float | None = None, readout: float = 10.0
                         ) -> HeadConstruction:
    r"""H_SYM: a symbolic head that solves Retrieval on a θ = 0 channel (Theorem 5).

    Entity ``e`` is the phase ``2πe/E`` of both its query ``e?`` and every pair key
    ``(e, a)``; on a NoPE channel ``λ_i = A cos(2π(e_i - e_q)/E)``. ``amplitude`` defaults
    to ``margin / (1 - cos(2π/E))``. On a channel with θ > 0 (the "wrong" frequency) the
    query phase is centred on key position ``center`` (default the middle,
    ``(n_pairs-1)/2``), so the match logit is ``A cos((i - center)θ)``: it falls off
    towards both ends, which is what makes ``w_max`` an inverse U.
    """
    if not isinstance(task, RetrievalTask):
        raise InvalidSelectionError(
            f"build_retrieval_head needs a RetrievalTask, got {task.name!r}")
    layer = check_construction_site(model, task, layer, head)
    freq, dims, theta = frequency_pair(model, freq)
    A = float(amplitude) if amplitude is not None else margin / (
        1 - math.cos(2 * math.pi / task.n_entities))
    c = (task.n_pairs - 1) / 2 if center is None else float(center)
    reset_to_head(model, layer, head, [freq])
    _write_symbolic_channel(model, task, layer, head, dims, theta, A, c)
    write_copy_path(model, layer, head, _attribute_sources(task), task.answer_tokens, readout)
    return HeadConstruction(model, "symbolic", layer, head, [freq], [theta], {freq: A},
                            None if amplitude is not None else margin)


def build_partial_induction_head(model: ToyTransformer, task: PartialInductionTask,
                                 freqs: Sequence[int], *, layer: int = 0, head: int = 0,
                                 margin: float = 10.0, readout: float = 10.0
                                 ) -> HeadConstruction:
    r"""A two-angle head with θ1 = 0 that solves Partial Induction (Theorem 6).

    ``freqs = (f1, f2)``: channel ``f1`` (angle θ1, 0 in the theorem) matches entities as
    in :func:`build_retrieval_head`; channel ``f2`` (θ2 > 0) gives every pair the same
    key and the query a phase such that its logit ``A2 cos(β + (n - i)θ2)`` rises
    monotonically with ``i`` across the prompt, centred on the steepest part. ``A2`` makes
    consecutive positions ``margin`` nats apart; ``A1`` makes a non-matching entity lose by
    ``margin`` nats more than the whole recency range. Needs ``(n_pairs - 1)·θ2 < π``.
    """
    if not isinstance(task, PartialInductionTask):
        raise InvalidSelectionError(
            f"build_partial_induction_head needs a PartialInductionTask, got {task.name!r}")
    if len(freqs) != 2:
        raise InvalidSelectionError(f"freqs must be two frequency ids (θ1, θ2), got {freqs}")
    layer = check_construction_site(model, task, layer, head)
    (f1, dims1, theta1), (f2, dims2, theta2) = (frequency_pair(model, f) for f in freqs)
    if f1 == f2:
        raise InvalidSelectionError("the two channels must be different frequency ids")
    L, n = task.n_pairs, task.n_pairs
    span = (L - 1) * theta2
    if not 0 < span < math.pi:
        raise InvalidSelectionError(
            f"θ2 = {theta2:.4g} (id {f2}): the recency channel needs 0 < (n_pairs-1)·θ2 < π "
            f"(here {span:.3g}) to rise monotonically over the prompt; pick a slower, nonzero "
            "frequency")
    c = (L - 1) / 2
    beta = math.pi / 2 - (n - c) * theta2          # phase π/2 at the centre key
    x = beta + (n - torch.arange(L, dtype=torch.float64)) * theta2
    recency = torch.cos(x)                           # increasing in i
    A2 = margin / float((recency[1:] - recency[:-1]).min())
    spread = A2 * float(recency.max() - recency.min())
    A1 = (margin + spread) / (1 - math.cos(2 * math.pi / task.n_entities))
    reset_to_head(model, layer, head, [f1, f2])
    _write_symbolic_channel(model, task, layer, head, dims1, theta1, A1, center=n)
    r2 = radius_for(model, A2)
    attn = model.blocks[layer].attn
    with torch.no_grad():
        for e in range(task.n_entities):
            for a in range(task.n_attributes):
                tok = int(task.pair_token(torch.tensor(e), torch.tensor(a)))
                set_pair(attn.W_K[head], tok, dims2, complex(r2, 0.0))
            set_pair(attn.W_Q[head], int(task.query_token(torch.tensor(e))), dims2,
                      complex(r2 * math.cos(beta), r2 * math.sin(beta)))
    write_copy_path(model, layer, head, _attribute_sources(task), task.answer_tokens, readout)
    return HeadConstruction(model, "partial-induction", layer, head, [f1, f2], [theta1, theta2],
                            {f1: A1, f2: A2}, margin)


# ----------------------------------------------------------------------------------------
# w_max (Theorem 7)


@torch.no_grad()
def w_max_by_position(model: ToyTransformer, task: Task, batch: TaskBatch | None = None,
                      *, layer: int = 0, head: int = 0) -> Float[Tensor, "answer_pos"]:
    """Mean over prompts of the head's largest attention weight at the query, per answer position.

    Returns ``[len(task.answer_positions)]`` (``nan`` where no prompt has that answer
    position). ``batch`` defaults to the task's test set.
    """
    layer = model._check_layer(layer)
    model._check_head(head)
    batch = (batch if batch is not None else task.test_set()).to(model.device)
    name = f"blocks.{layer}.attn.hook_pattern"
    store: dict[str, Tensor] = {}

    def keep(pattern: Tensor, hook) -> Tensor:
        store["p"] = pattern[:, head, -1].detach()
        return pattern

    model.run_with_hooks(batch.tokens, fwd_hooks=[(name, keep)], return_type=None,
                         stop_at_layer=layer + 1 if layer + 1 < model.cfg.n_layers else None)
    top = store["p"].max(dim=-1).values
    out = []
    for p in task.answer_positions:
        at = batch.answer_pos == p
        out.append(top[at].mean() if at.any() else torch.tensor(float("nan")))
    return torch.stack(out).cpu()


def _softmax_weight(target: Tensor, others: Tensor) -> Tensor:
    """``e^target / (e^target + Σ e^others)``, stably; ``others`` [..., m]."""
    logits = torch.cat([target[..., None], others], dim=-1)
    return torch.softmax(logits, dim=-1)[..., 0]


@boundary
def w_max_positional(theta: float, n_keys: int, amplitude: float, *,
                     query_logit: float | None = 0.0) -> Float[Tensor, "answer_pos"]:
    r"""Theorem 7 for H_POS: ``w_max(j) = e^A / (Σ_i e^{A cos((i-j)θ)} [+ e^{λ_self}])``.

    Keys ``i = 0..n_keys-1``; ``query_logit`` is the logit of the query's own key
    (0 for :func:`build_index_head`; ``None`` leaves it out). U-shaped in ``j``: a target
    in the middle has close competitors on both sides. Float64, ``[n_keys]``.
    """
    i = torch.arange(n_keys, dtype=torch.float64)
    logits = amplitude * torch.cos((i[None, :] - i[:, None]) * theta)     # [j, i]
    if query_logit is not None:
        logits = torch.cat([logits, torch.full((n_keys, 1), float(query_logit),
                                               dtype=torch.float64)], dim=1)
    return torch.softmax(logits, dim=-1).diagonal()


@boundary
def w_max_symbolic(theta: float, n_keys: int, amplitude: float, *, center: float | None = None,
                   query_logit: float | None = 0.0) -> Float[Tensor, "answer_pos"]:
    r"""Theorem 7 for the simplified H_SYM: match logit ``A cos((j - c)θ)``, all others 0.

    ``w_max(j) = e^{A cos((j-c)θ)} / (e^{A cos((j-c)θ)} + (n_keys - 1) [+ e^{λ_self}])``
    with ``c`` the middle key by default. An inverse U in ``j`` for θ > 0 (flat at θ = 0).
    """
    j = torch.arange(n_keys, dtype=torch.float64)
    c = (n_keys - 1) / 2 if center is None else float(center)
    match = amplitude * torch.cos((j - c) * theta)
    n_other = n_keys - 1 + (0 if query_logit is None else 1)
    others = torch.zeros(n_keys, n_other, dtype=torch.float64)
    if query_logit is not None:
        others[:, -1] = float(query_logit)
    return _softmax_weight(match, others)
