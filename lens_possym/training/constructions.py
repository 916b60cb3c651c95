r"""Hand-set weights of a one-hot :class:`~lens_possym.training.toy.ToyTransformer`: the
plumbing every hand-built head uses (paper A's H_POS, H_SYM and partial induction, paper
C's T_Index and T_Retrieval; the constructions themselves stay in their papers).

Query and key live in one 2-D pair per frequency id, written as complex numbers
``a + ib`` (:func:`frequency_pair` gives the pair's dims and angle; :func:`set_pair` writes
one); with ``q = r_q e^{iα}`` at query position ``n`` and ``k = r_k e^{iβ}`` at key
position ``i`` the pair's RoPE logit is ``s r_q r_k cos(α - β + (n - i)θ)``, so
:func:`radius_for` gives ``r = sqrt(A / s)`` for amplitude ``A``. :func:`reset_to_head`
zeroes everything but one head (gated to the frequencies it uses) and
:func:`write_copy_path` makes its value/output path copy the attended token's answer.
:func:`check_construction_site` refuses a model or a site that cannot hold such a head.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
from torch import Tensor

from ..errors import InvalidSelectionError, ToyConfigError
from .tasks import Task
from .toy import ToyTransformer

__all__ = ["HeadConstruction", "check_construction_site", "frequency_pair", "reset_to_head",
           "set_pair", "write_copy_path", "radius_for"]


@dataclass
class HeadConstruction:
    """What a ``build_*_head`` call wrote.

    Attributes:
        kind: ``"positional"``, ``"symbolic"`` or ``"partial-induction"``.
        layer, head: where.
        freq_ids: the frequency ids the head uses (its gate).
        angles: their angles (rad/token).
        amplitudes: logit amplitude ``A`` (nats) of each channel, keyed by frequency id.
        margin: the logit margin (nats) the amplitudes were chosen for, or ``None`` if
            given explicitly.
    """

    model: ToyTransformer = field(repr=False)
    kind: str
    layer: int
    head: int
    freq_ids: list[int]
    angles: list[float]
    amplitudes: dict[int, float]
    margin: float | None


def check_construction_site(model: ToyTransformer, task: Task, layer: int, head: int) -> int:
    """The layer index (negatives counted from the end) once ``model`` can hold a hand-built
    head for ``task`` at ``(layer, head)``: a one-hot toy model, large enough, with a head
    wide enough to copy every answer."""
    if not isinstance(model, ToyTransformer):
        raise ToyConfigError(f"hand-built heads set ToyTransformer weights, got {type(model).__name__}")
    cfg = model.cfg
    if cfg.embedding != "onehot":
        raise ToyConfigError("hand-built heads need one-hot embeddings (embedding='onehot')")
    if cfg.d_vocab < task.d_vocab or cfg.n_ctx < task.n_ctx:
        raise ToyConfigError(
            f"the model (d_vocab {cfg.d_vocab}, n_ctx {cfg.n_ctx}) is too small for "
            f"{task.describe()}")
    if len(task.answer_tokens) > cfg.d_head:
        raise ToyConfigError(
            f"d_head {cfg.d_head} < {len(task.answer_tokens)} answer tokens: the value path "
            "cannot copy every answer; use a wider head")
    layer = model._check_layer(layer)
    model._check_head(head)
    return layer


def frequency_pair(model: ToyTransformer, freq: int) -> tuple[int, list[int], float]:
    """Frequency id → (id, its two dims (a, b), angle)."""
    n = model.cfg.n_freqs
    if not -n <= freq < n:
        raise InvalidSelectionError(
            f"frequency id {freq} out of range: the model has {n} ids (0..{n - 1})")
    freq %= n
    spec = model.lens_possym_rope_specs()[0]
    dims = spec.dims_of(freq)
    if len(dims) < 2:
        raise ToyConfigError(
            f"frequency id {freq} is a 1-dim tail; a hand-built channel needs 2 dims "
            "(give the model nope_dims >= 2)")
    return freq, dims[:2], float(model.angles[freq])


def reset_to_head(model: ToyTransformer, layer: int, head: int, freq_ids: list[int]) -> None:
    """Zero every weight that could add to the output, except the answer read-out."""
    with torch.no_grad():
        for block in model.blocks:
            for name in ("W_Q", "W_K", "W_V", "W_O"):
                getattr(block.attn, name).zero_()
            if block.mlp is not None:
                for p in block.mlp.parameters():
                    p.zero_()
        model.W_U.zero_()
    model.set_frequencies(None)
    model.set_frequencies(freq_ids, layer=layer, head=head)


def set_pair(weight: Tensor, token: int, dims: list[int], value: complex) -> None:
    """Write the complex number ``value`` into ``token``'s row of ``weight`` on one pair."""
    weight[token, dims[0]] = value.real
    weight[token, dims[1]] = value.imag


def write_copy_path(model: ToyTransformer, layer: int, head: int, sources: dict[int, int],
               answer_tokens: list[int], readout: float) -> None:
    """``W_V``: source token → value dim of its answer; ``W_O``, ``W_U``: dim → answer logit."""
    attn = model.blocks[layer].attn
    slot = {tok: i for i, tok in enumerate(answer_tokens)}
    with torch.no_grad():
        for src, answer in sources.items():
            attn.W_V[head, src, slot[answer]] = 1.0
        for tok, i in slot.items():
            attn.W_O[head, i, tok] = readout
            model.W_U[tok, tok] = 1.0


def radius_for(model: ToyTransformer, amplitude: float) -> float:
    """Radius ``r`` with ``s·r² = amplitude`` (query and key get the same radius)."""
    return math.sqrt(amplitude / model.cfg.scale)
