"""T_Index and T_Retrieval (paper C Thm 3.1): one RoPE head solves one hop of Number and
Letter at the training length and beyond; bad settings are refused."""

from __future__ import annotations

import math

import pytest

from lens_possym.errors import InvalidSelectionError
from lens_possym.papers.c.constructions import t_index_model, t_retrieval_model
from lens_possym.papers.c.tasks import LetterTask, NumberTask
from lens_possym.training.loop import evaluate

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.mark.parametrize("length", [17, 80])
def test_t_index_solves_one_hop_number(length):
    task = NumberTask(max_hops=1, length=length)
    model, built = t_index_model(task, 0.8)
    assert built.kind == "positional" and built.angles == pytest.approx([0.8])
    assert evaluate(model, task, task.test_set(256)).accuracy >= 0.99


@pytest.mark.parametrize("length, theta", [(17, 0.0027), (17, 0.0), (80, 0.0)])
def test_t_retrieval_solves_one_hop_letter(length, theta):
    task = LetterTask(max_hops=1, length=length)
    model, built = t_retrieval_model(task, theta)
    assert built.kind == "symbolic"
    assert evaluate(model, task, task.test_set(256)).accuracy >= 0.99


def test_t_index_refuses_an_aliasing_angle():
    with pytest.raises(InvalidSelectionError, match="cannot tell"):
        t_index_model(NumberTask(max_hops=1), 2 * math.pi / 4)
    with pytest.raises(InvalidSelectionError, match="needs a NumberTask"):
        from lens_possym.papers.c.constructions import build_t_index
        model, _ = t_retrieval_model(LetterTask(max_hops=1), 0.0)
        build_t_index(model, LetterTask(max_hops=1))
