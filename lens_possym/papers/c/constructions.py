r"""Paper C's constructions (Thm 3.1, App F.2.1-2): **T_Index** and **T_Retrieval**, single
RoPE heads at one angle θ that set a one-layer
:class:`~lens_possym.training.toy.ToyTransformer` and solve one hop of Number and Letter.

Built with the core's plumbing of hand-built heads (:mod:`lens_possym.training.constructions`:
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
from ...training.constructions import (
    HeadConstruction,
    check_construction_site,
    frequency_pair,
    radius_for,
    reset_to_head,
    set_pair,
    write_copy_path,
)
from ...training.toy import ToyTransformer, toy_config_for
from .tasks import LetterTask, NumberTask

__all__ = ["build_t_index", "build_t_retrieval", "t_index_model", "t_retrieval_model",
           "t_index_chain_model", "t_retrieval_chain_model"]


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
    layer = check_construction_site(model, task, 0, 0)
    freq, dims, theta = frequency_pair(model, freq)
    A = float(amplitude) if amplitude is not None else _index_amplitude(
        model, theta, margin, max_length)
    r = radius_for(model, A)
    reset_to_head(model, layer, 0, [freq])
    _t_index_qk(model.blocks[layer].attn, task, dims, r, theta)
    write_copy_path(model, layer, 0, {s: s for s in task.answer_tokens}, task.answer_tokens,
                    readout)
    return HeadConstruction(model, "positional", layer, 0, [freq], [theta], {freq: A},
                            None if amplitude is not None else margin)


def _index_amplitude(model: ToyTransformer, theta: float, margin: float,
                     max_length: int | None) -> float:
    n0 = int(max_length or model.cfg.n_ctx)
    t = torch.arange(1, n0, dtype=torch.float64)
    gap = float((1 - torch.cos(t * theta)).min())
    if theta == 0 or gap <= 1e-12:
        raise InvalidSelectionError(
            f"θ = {theta:.4g} cannot tell {n0} positions apart (θ = 0 or an exact alias); "
            "T_Index needs an angle with 1 - cos(tθ) > 0 for every offset t")
    return margin / gap


def _t_index_qk(attn, task: NumberTask, dims: list[int], r: float, theta: float) -> None:
    """T_Index's query and key rows (F.2.1) on the token coordinates of one head."""
    with torch.no_grad():
        for tok in range(task.d_vocab):
            set_pair(attn.W_K[0], tok, dims, complex(r, 0.0))
        for letter in range(task.n_letters):
            set_pair(attn.W_Q[0], letter, dims, complex(r, 0.0))
        for sigma in range(1, task.max_offset + 1):
            set_pair(attn.W_Q[0], int(task.offset_token(torch.tensor(sigma))), dims,
                      _phasor(r, -sigma * theta))


def build_t_retrieval(model: ToyTransformer, task: LetterTask, freq: int = 0, *,
                      amplitude: float | None = None, margin: float = 10.0,
                      readout: float = 10.0) -> HeadConstruction:
    """T_Retrieval on frequency id ``freq`` of ``model`` (module docstring).

    ``amplitude`` defaults to ``margin / (1 - cos ω)``, the gap at θ = 0."""
    if not isinstance(task, LetterTask):
        raise InvalidSelectionError(f"build_t_retrieval needs a LetterTask, got {task.name!r}")
    layer = check_construction_site(model, task, 0, 0)
    freq, dims, theta = frequency_pair(model, freq)
    omega = 2 * math.pi / task.n_letters
    A = float(amplitude) if amplitude is not None else margin / (1 - math.cos(omega))
    r = radius_for(model, A)
    reset_to_head(model, layer, 0, [freq])
    _t_retrieval_qk(model.blocks[layer].attn, task, dims, r)
    write_copy_path(model, layer, 0, {s: s for s in task.answer_tokens}, task.answer_tokens,
                    readout)
    return HeadConstruction(model, "symbolic", layer, 0, [freq], [theta], {freq: A},
                            None if amplitude is not None else margin)


def _t_retrieval_qk(attn, task: LetterTask, dims: list[int], r: float) -> None:
    """T_Retrieval's query and key rows (F.2.2) on the token coordinates of one head."""
    omega = 2 * math.pi / task.n_letters
    with torch.no_grad():
        for left in range(task.n_letters):
            for d in range(1, task.n_digits + 1):
                tok = int(task.digit_token(torch.tensor(left), torch.tensor(d)))
                set_pair(attn.W_K[0], tok, dims, _phasor(r, left * omega))
                set_pair(attn.W_Q[0], tok, dims, _phasor(r, left * omega))
            for right in range(task.n_letters):
                tok = int(task.pair_token(torch.tensor(left), torch.tensor(right)))
                set_pair(attn.W_K[0], tok, dims, _phasor(r, left * omega))
                set_pair(attn.W_Q[0], tok, dims, _phasor(r, right * omega))


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


# ---- chains: one hop per layer ---------------------------------------------------------------

def _chain_config(task, theta: float, n_layers: int, n_ctx: int, n_heads: int = 1):
    """A toy config with ``n_layers`` layers of ``n_heads`` heads, one RoPE pair at
    ``theta``, a θ = 0 tail of one dim per answer token, and one *carry* coordinate per
    answer token after the task's vocabulary (ids ``d_vocab + i``)."""
    if n_layers < 1:
        raise InvalidSelectionError(f"n_layers must be >= 1, got {n_layers}")
    if isinstance(n_heads, bool) or not isinstance(n_heads, int) or n_heads < 1:
        raise InvalidSelectionError(f"n_heads must be an int >= 1, got {n_heads!r}")
    n_answers = len(task.answer_tokens)
    return toy_config_for(task, angles=[theta], nope_dims=n_answers, n_ctx=n_ctx,
                          n_layers=n_layers, n_heads=n_heads, d_vocab=task.d_vocab + n_answers)


def _chain(model: ToyTransformer, task, kind: str, theta: float, A: float, margin,
           set_qk) -> list[HeadConstruction]:
    """Every layer: the hop's query/key rows on the token coordinates (``set_qk``); values
    copy answer tokens and carried answers into the carry coordinates, read out by
    ``W_U``; and on the θ = 0 tail a carried answer ``a`` gives query and key ``R e_a``
    with ``R² ≫ A``, so a position that carries an answer attends to the positions that
    carry the same one (itself included): the hop is made once, then kept (Reflexive)."""
    check_construction_site(model, task, 0, 0)
    freq, dims, _ = frequency_pair(model, 0)
    reset_to_head(model, 0, 0, [freq])
    model.set_frequencies(None)
    spec = model.lens_possym_rope_specs()[0]
    tail = spec.dims_of(model.cfg.n_freqs - 1)
    r = radius_for(model, A)
    r_tail = radius_for(model, 100.0 * A)
    with torch.no_grad():
        for block in model.blocks:
            attn = block.attn
            set_qk(attn, dims, r)
            for i, tok in enumerate(task.answer_tokens):
                carry = task.d_vocab + i
                attn.W_Q[0, carry, tail[i]] = r_tail
                attn.W_K[0, carry, tail[i]] = r_tail
                attn.W_V[0, tok, i] = 1.0
                attn.W_V[0, carry, i] = 1.0
                attn.W_O[0, i, carry] = 1.0
        for i, tok in enumerate(task.answer_tokens):
            model.W_U[task.d_vocab + i, tok] = 1.0
    return [HeadConstruction(model, kind, layer, 0, [freq, model.cfg.n_freqs - 1],
                             [theta, 0.0], {freq: A}, margin)
            for layer in range(model.cfg.n_layers)]


def t_index_chain_model(task: NumberTask, theta: float, *, n_layers: int | None = None,
                        max_length: int | None = None, margin: float = 30.0,
                        n_heads: int = 1) -> tuple[ToyTransformer, list[HeadConstruction]]:
    r"""A hand-built **chain** for multi-hop Number: T_Index in each of ``n_layers``
    layers (default ``task.max_hops``), paper C's decomposition
    ``Reflexive^{ℓ-h} ∘ Index^h`` made exact.

    Every layer's head is T_Index on the token coordinates (each stop ``p_k`` attends to
    ``p_{k+1}``, ``margin`` nats ahead of any other key); values copy the answer letter
    and whatever answer a position already carries into one carry coordinate per letter
    (added to the vocabulary), and the read-out reads only those. A position that carries
    an answer attends, on a θ = 0 channel of its own, to the positions carrying the same
    answer (itself included) and so keeps it (Reflexive) instead of hopping again. So the
    answer reaches stop ``p_k`` in layer ``h-1-k`` exactly: the residual stream after
    ``j`` blocks carries it at ``p_k`` iff ``j >= h-k``; patching the clean stream into a
    run with another answer value restores the clean answer exactly at ``j = h-k``; the
    model answers every ``h``-hop prompt with ``h <= n_layers``. ``margin`` is 30 nats
    (not 10): the carry channel amplifies what leaks past the hop (``e^{-margin}``).
    ``n_heads`` > 1 adds heads left at zero in every layer (head 0 is the built one): a
    circuit finder must leave them out."""
    if not isinstance(task, NumberTask):
        raise InvalidSelectionError(f"t_index_chain_model needs a NumberTask, got {task.name!r}")
    n_ctx = int(max_length or task.n_ctx)
    layers = task.max_hops if n_layers is None else n_layers
    model = ToyTransformer(_chain_config(task, theta, layers, n_ctx, n_heads))
    A = _index_amplitude(model, theta, margin, n_ctx)
    built = _chain(model, task, "positional", theta, A, margin,
                   lambda attn, dims, r: _t_index_qk(attn, task, dims, r, theta))
    return model, built


def t_retrieval_chain_model(task: LetterTask, theta: float = 0.0, *,
                            n_layers: int | None = None, max_length: int | None = None,
                            margin: float = 30.0
                            ) -> tuple[ToyTransformer, list[HeadConstruction]]:
    """The Letter twin of :func:`t_index_chain_model`: T_Retrieval in every layer (each
    pair attends to the earlier pair whose first letter is its second), values into carry
    coordinates; ``Reflexive^{ℓ-h} ∘ Retrieval^h`` made exact."""
    if not isinstance(task, LetterTask):
        raise InvalidSelectionError(
            f"t_retrieval_chain_model needs a LetterTask, got {task.name!r}")
    n_ctx = int(max_length or task.n_ctx)
    layers = task.max_hops if n_layers is None else n_layers
    model = ToyTransformer(_chain_config(task, theta, layers, n_ctx))
    A = margin / (1 - math.cos(2 * math.pi / task.n_letters))
    built = _chain(model, task, "symbolic", theta, A, margin,
                   lambda attn, dims, r: _t_retrieval_qk(attn, task, dims, r))
    return model, built
