"""Hand-built heads (Theorems 3, 5, 6) and w_max along the answer position (Theorem 7)."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from lens_possym.errors import InvalidSelectionError, ToyConfigError
from lens_possym.papers.a.constructions import (
    build_index_head,
    build_partial_induction_head,
    build_retrieval_head,
    w_max_by_position,
    w_max_positional,
    w_max_symbolic,
)
from lens_possym.training.toy import ToyTransformer, toy_config_for
from lens_possym.papers.a.tasks import IndexTask, PartialInductionTask, RetrievalTask
from lens_possym.training.loop import evaluate
from lens_possym.training.trajectories import head_scores

NOPE = 16  # the θ = 0 tail of the default toy (16 rotating ids)


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def toy(task, **kw):
    return ToyTransformer(toy_config_for(task, **kw))


@pytest.fixture(scope="module")
def index_task():
    return IndexTask()


@pytest.fixture(scope="module")
def retrieval_task():
    return RetrievalTask()


@pytest.fixture(scope="module")
def pi_task():
    return PartialInductionTask()


# ---- accuracy with the right angle -----------------------------------------------------------


@pytest.mark.parametrize("freq", [0, 2, 3, 5])
def test_positional_head_solves_index(index_task, freq):
    model = toy(index_task)
    built = build_index_head(model, index_task, freq)
    assert built.kind == "positional" and built.freq_ids == [freq]
    result = evaluate(model, index_task)
    assert result.accuracy >= 0.99
    assert min(result.accuracy_by_position) >= 0.97


def test_nope_symbolic_head_solves_retrieval(retrieval_task):
    model = toy(retrieval_task)
    build_retrieval_head(model, retrieval_task, NOPE)
    assert model.angles[NOPE] == 0.0
    assert evaluate(model, retrieval_task).accuracy >= 0.99


@pytest.mark.parametrize("theta2_id", [3, 4, 7])
def test_two_angle_head_solves_partial_induction(pi_task, theta2_id):
    model = toy(pi_task)
    built = build_partial_induction_head(model, pi_task, (NOPE, theta2_id))
    assert built.angles[0] == 0.0 and built.angles[1] > 0
    assert evaluate(model, pi_task).accuracy >= 0.99


def test_only_the_built_head_and_its_gate_are_active(index_task):
    model = toy(index_task, n_heads=2)
    build_index_head(model, index_task, 3, head=1)
    assert model.freq_gate[0, 1].nonzero().flatten().tolist() == [3]
    assert model.blocks[0].attn.W_O[0].abs().sum() == 0          # the other head is silent
    assert evaluate(model, index_task).accuracy >= 0.99


# ---- the theory's negative results as refusals or failures --------------------------------


def test_index_head_on_theta_zero_is_refused(index_task):
    with pytest.raises(InvalidSelectionError, match="cannot tell"):
        build_index_head(toy(index_task), index_task, NOPE)


def test_partial_induction_needs_theta2_not_too_large(pi_task):
    with pytest.raises(InvalidSelectionError, match="rise monotonically"):
        build_partial_induction_head(toy(pi_task), pi_task, (NOPE, 0))   # 7 rad > π
    with pytest.raises(InvalidSelectionError, match="rise monotonically"):
        build_partial_induction_head(toy(pi_task), pi_task, (3, NOPE))   # θ2 = 0


def test_symbolic_head_alone_fails_partial_induction(pi_task):
    """Corollary 1: a purely symbolic head cannot pick the last occurrence."""
    model = toy(pi_task)
    build_retrieval_head(model, RetrievalTask(), NOPE)   # same vocabulary, NoPE matcher
    acc = evaluate(model, pi_task).accuracy
    assert acc < 0.7


def test_retrieval_head_on_a_fast_angle_fails(retrieval_task):
    model = toy(retrieval_task)
    build_retrieval_head(model, retrieval_task, 0)        # θ = 1: the match rotates away
    assert evaluate(model, retrieval_task).accuracy < 0.8


@pytest.mark.parametrize("bad", [
    lambda t: build_index_head(toy(t, embedding="learned", d_model=8), t, 2),
    lambda t: build_index_head(toy(t), RetrievalTask(), 2),
    lambda t: build_index_head(toy(t), t, 40),
    lambda t: build_index_head(toy(t, n_freqs=4, nope_dims=0, d_head=8), t, 2),
    lambda t: build_index_head(ToyTransformer(toy_config_for(IndexTask(4, 4))), t, 2),
])
def test_bad_constructions_are_refused(index_task, bad):
    with pytest.raises((ToyConfigError, InvalidSelectionError)):
        bad(index_task)


def test_a_one_dim_tail_cannot_carry_a_channel(retrieval_task):
    model = toy(retrieval_task, nope_dims=1, n_freqs=4, d_head=9)
    with pytest.raises(ToyConfigError, match="1-dim tail"):
        build_retrieval_head(model, retrieval_task, 4)


# ---- scores of the hand-built heads -------------------------------------------------------------


def test_positional_head_scores_positional(index_task):
    """All keys equal: the head is exactly positional (paper A, Definition 2)."""
    model = toy(index_task)
    build_index_head(model, index_task, 2)
    scores = head_scores(model, index_task.test_set(16).tokens)
    assert scores.pos == pytest.approx(1.0, abs=1e-5)
    assert scores.sym < 0.5


def test_nope_head_scores_symbolic(retrieval_task):
    """A NoPE head is exactly symbolic."""
    model = toy(retrieval_task)
    build_retrieval_head(model, retrieval_task, NOPE)
    scores = head_scores(model, retrieval_task.test_set(16).tokens)
    assert scores.sym == pytest.approx(1.0, abs=1e-5)
    assert scores.pos < 0.5


# ---- w_max (Theorem 7) --------------------------------------------------------------------


def test_measured_w_max_of_the_positional_head_is_the_closed_form(index_task):
    model = toy(index_task)
    built = build_index_head(model, index_task, 6, amplitude=800.0)
    measured = w_max_by_position(model, index_task)
    exact = w_max_positional(built.angles[0], index_task.length, 800.0)
    assert torch.allclose(measured.double(), exact, atol=2e-3)


def test_positional_w_max_is_u_shaped(index_task):
    model = toy(index_task)
    build_index_head(model, index_task, 7, amplitude=1500.0)
    w = w_max_by_position(model, index_task)
    n = len(w)
    middle = w[n // 2 - 2: n // 2 + 2].mean()
    assert w[0] > middle + 0.1 and w[-1] > middle + 0.1
    assert torch.allclose(w, w.flip(0), atol=0.02)                     # symmetric
    half = w[: n // 2]
    assert torch.all(half[1:] <= half[:-1] + 1e-3)                     # falls towards the middle


def test_symbolic_w_max_is_an_inverse_u(retrieval_task):
    model = toy(retrieval_task)
    build_retrieval_head(model, retrieval_task, 4)                    # θ = 0.1, not low enough
    w = w_max_by_position(model, retrieval_task)
    assert w[3:5].mean() > w[0] + 0.02 and w[3:5].mean() > w[-1] + 0.02
    acc = evaluate(model, retrieval_task).accuracy_by_position
    flat = toy(retrieval_task)
    build_retrieval_head(flat, retrieval_task, NOPE)                  # θ = 0: flat
    w0 = w_max_by_position(flat, retrieval_task)
    assert w0.max() - w0.min() < 0.02 and len(acc) == 8


@settings(max_examples=40, deadline=None)
@given(theta=st.floats(1e-3, 0.5), n=st.integers(4, 24), amplitude=st.floats(1.0, 500.0))
def test_closed_form_w_max_shapes(theta, n, amplitude):
    """Theorem 7 in its regime: no key offset wraps past π, i.e. (n-1)·θ <= π."""
    pos = w_max_positional(theta, n, amplitude, query_logit=None)
    assert torch.allclose(pos, pos.flip(0), atol=1e-12)               # symmetric
    if (n - 1) * theta <= math.pi:
        half = pos[: (n + 1) // 2]
        assert torch.all(half[1:] <= half[:-1] + 1e-12)               # U: falls to the middle
        sym = w_max_symbolic(theta, n, amplitude)
        half = sym[: (n + 1) // 2]
        assert torch.all(half[1:] >= half[:-1] - 1e-12)               # inverse U: rises
        assert torch.allclose(sym, sym.flip(0), atol=1e-12)
    flat = w_max_symbolic(0.0, n, amplitude)
    assert torch.allclose(flat, flat[0].expand_as(flat))


def test_closed_forms_at_known_values():
    # a single key: all weight on it (no self key)
    assert w_max_positional(0.3, 1, 5.0, query_logit=None).item() == pytest.approx(1.0)
    # θ = 0: every key ties with the target
    w = w_max_positional(0.0, 5, 3.0, query_logit=None)
    assert torch.allclose(w, torch.full((5,), 0.2, dtype=torch.float64))
    sym = w_max_symbolic(0.0, 4, math.log(3.0), query_logit=None)      # e^A = 3 vs 3 × 1
    assert torch.allclose(sym, torch.full((4,), 0.5, dtype=torch.float64))
