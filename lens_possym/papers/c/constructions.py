r"""Paper C's constructions (Thm 3.1, App F.2.1-2): **T_Index** and **T_Retrieval**, single
RoPE heads at one angle θ that set a one-layer
:class:`~lens_possym.papers.a.toy.ToyTransformer` and solve one hop of Number and Letter.

Built with the plumbing of paper A's constructions (:mod:`lens_possym.papers.a.constructions`:
one-hot embeddings, every other weight zeroed, the head gated to one frequency id, query
and key written as complex numbers on that id's 2-D pair, values copied to the answer's
read-out). With ``q = r e^{iα}`` at the query ``n`` and ``k = r e^{iβ}`` at key ``j`` the
logit is ``A cos(α - β + (n - j)θ)``, ``A = s r²``.

* :func:`build_t_index` (F.2.1): every key is ``r·1`` (``β = 0``); a letter query has
  ``α = 0`` (logit ``A cos((n - j)θ)``, maximal at itself), an offset ``σ`` has
  ``α = -σθ`` (logit ``A cos((n - j - σ)θ)``, maximal at ``j = n - σ``). Values copy
  letters. θ must not alias two offsets (``1 - cos tθ > 0`` for every ``t`` in range).
  Purely positional: the logit never depends on the key's token.
* :func:`build_t_retrieval` (F.2.2): with ``φ`` the letter index and ``ω = 2π/|ALPH|``,
  the key of any pair has phase ``φ(left)·ω``, the query of a letter-letter pair
  ``φ(right)·ω`` (a letter-number pair: ``φ(left)·ω``), so the logit is
  ``A cos((φ(q) - φ(key))ω + (n - j)θ)``: the matching key's logit is ``A cos((n - j*)θ)``,
  any other's at most ``A cos(ω - (n - j)θ)``. For ``0 <= θ < ω / (2 n0)`` the match wins on
  every input of length ``<= n0``. Values copy the whole pair (``W_V = I`` on answers).

Both solve the **1-hop** task (``NumberTask(max_hops=1)``, ``LetterTask(max_hops=1)``) at
any length the toy model's ``n_ctx`` allows; :mod:`lens_possym.papers.c.discrepancy` measures
their logit gaps.
"""

from __future__ import annotations

import math

import torch

from ...errors import InvalidSelectionError
from ..a.constructions import (
    HeadConstruction,
    _check_model,
    _copy_path,
    _freq,
    _radius,
    _reset,
    _set_pair,
)
from ..a.toy import ToyTransformer, toy_config_for
from .tasks import LetterTask, NumberTask

__all__ = ["build_t_index", "build_t_retrieval", "t_index_model", "t_retrieval_model"]


def _phasor(r: float, phase: float) -> complex:
    return complex(r * math.cos(phase), r * math.sin(phase))


def build_t_index(model: ToyTransformer, task: NumberTask, freq: int = 0, *,
                  amplitude: float | None = None, margin: float = 10.0, max_length: int | None = None, readout: float = 10.0
                  ) -> HeadConstruction:
    """T_Index on frequency id ``freq`` of ``model`` (module docstring).

    ``amplitude`` defaults to ``margin / min_{1 <= t < max_length} (1 - cos tθ)``, so that
    every competing key sits ``margin`` nats below the target on inputs up to
    ``max_length`` tokens (default the model's ``n_ctx``).
    """
    if not isinstance(task, NumberTask):
        raise InvalidSelectionError(f"build_t_index needs a NumberTask, got {task.name!r}")
    layer = _check_model(model, task, 0, 0)
    freq, dims, theta = _freq(model, freq)
    n0 = int(max_length or model.cfg.n_ctx)
    t = torch.arange(1, n0, dtype=torch.float64)
    gap = float((1 - torch.cos(t * theta)).min())
    if theta == 0 or gap <= 1e-12:
        raise InvalidSelectionError(
            f"θ = {theta:.4g} cannot tell {n0} positions apart (θ = 0 or an exact alias); "
            "T_Index needs an angle with 1 - cos(tθ) > 0 for every offset t")
    A = float(amplitude) if amplitude is not None else margin / gap
    r = _radius(model, A)
    _reset(model, layer, 0, [freq])
    attn = model.blocks[layer].attn
    with torch.no_grad():
        for tok in range(task.d_vocab):
            _set_pair(attn.W_K[0], tok, dims, complex(r, 0.0))
        for letter in range(task.n_letters):
            _set_pair(attn.W_Q[0], letter, dims, complex(r, 0.0))
        for sigma in range(1, task.max_offset + 1):
            _set_pair(attn.W_Q[0], int(task.offset_token(torch.tensor(sigma))), dims,
                      _phasor(r, -sigma * theta))
    _copy_path(model, layer, 0, {s: s for s in task.answer_tokens}, task.answer_tokens, readout)
    return HeadConstruction(model, "positional", layer, 0, [freq], [theta], {freq: A},
                            None if amplitude is not None else margin)


def build_t_retrieval(model: ToyTransformer, task: LetterTask, freq: int = 0, *,
                      amplitude: float | None = None, margin: float = 10.0,
                      readout: float = 10.0) -> HeadConstruction:
    """T_Retrieval on frequency id ``freq`` of ``model`` (module docstring).

    ``amplitude`` defaults to ``margin / (1 - cos ω)``, the gap at θ = 0."""
    if not isinstance(task, LetterTask):
        raise InvalidSelectionError(f"build_t_retrieval needs a LetterTask, got {task.name!r}")
    layer = _check_model(model, task, 0, 0)
    freq, dims, theta = _freq(model, freq)
    omega = 2 * math.pi / task.n_letters
    A = float(amplitude) if amplitude is not None else margin / (1 - math.cos(omega))
    r = _radius(model, A)
    _reset(model, layer, 0, [freq])
    attn = model.blocks[layer].attn
    letters = torch.arange(task.n_letters)
    with torch.no_grad():
        for left in range(task.n_letters):
            for d in range(1, task.n_digits + 1):
                tok = int(task.digit_token(torch.tensor(left), torch.tensor(d)))
                _set_pair(attn.W_K[0], tok, dims, _phasor(r, left * omega))
                _set_pair(attn.W_Q[0], tok, dims, _phasor(r, left * omega))
            for right in letters.tolist():
                tok = int(task.pair_token(torch.tensor(left), torch.tensor(right)))
                _set_pair(attn.W_K[0], tok, dims, _phasor(r, left * omega))
                _set_pair(attn.W_Q[0], tok, dims, _phasor(r, right * omega))
    _copy_path(model, layer, 0, {s: s for s in task.answer_tokens}, task.answer_tokens, readout)
    return HeadConstruction(model, "symbolic", layer, 0, [freq], [theta], {freq: A},
                            None if amplitude is not None else margin)


def t_index_model(task: NumberTask, theta: float, *, max_length: int | None = None,
                  **kwargs) -> tuple[ToyTransformer, HeadConstruction]:
    """A one-layer toy model with one RoPE pair at ``theta`` carrying T_Index, sized for
    inputs up to ``max_length`` tokens (default the task's length)."""
    n_ctx = int(max_length or task.n_ctx)
    model = ToyTransformer(toy_config_for(task, angles=[theta], nope_dims=0, n_ctx=n_ctx))
    return model, build_t_index(model, task, 0, max_length=n_ctx, **kwargs)


def t_retrieval_model(task: LetterTask, theta: float, *, max_length: int | None = None,
                      **kwargs) -> tuple[ToyTransformer, HeadConstruction]:
    """A one-layer toy model with one RoPE pair at ``theta`` (0 allowed: NoPE) carrying
    T_Retrieval, for inputs up to ``max_length`` tokens."""
    n_ctx = int(max_length or task.n_ctx)
    model = ToyTransformer(toy_config_for(task, angles=[theta], nope_dims=0, n_ctx=n_ctx))
    return model, build_t_retrieval(model, task, 0, **kwargs)
