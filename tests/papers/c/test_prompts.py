"""1-hop Number and Letter prompts for language models: answers correct by construction."""

from __future__ import annotations

import pytest

from lens_possym.errors import TaskConfigError
from lens_possym.papers.c.prompts import EXAMPLES, hop_prompts


def _solve(task: str, sequence: str) -> str:
    *window, query = sequence.split()
    if task == "number":
        return window[len(window) - int(query)]
    hits = [w for w in window if w[0] == query[1]]
    assert len(hits) == 1
    return hits[0]


@pytest.mark.parametrize("task", ["number", "letter"])
@pytest.mark.parametrize("length", [12, 300])
def test_answers_are_correct_by_construction(task, length):
    prompts = hop_prompts(task, length, 30, seed=1)
    for p in prompts:
        assert len(p.sequence.split()) == length + 1
        assert _solve(task, p.sequence) == p.answer
        assert p.sequence.split()[p.answer_index] == p.answer
        assert p.text.endswith(f'Task: Input: "{p.sequence}" Output:')
    assert [p.text for p in hop_prompts(task, length, 30, seed=1)] == [p.text for p in prompts]


@pytest.mark.parametrize("task", ["number", "letter"])
def test_the_papers_examples_are_right(task):
    for sequence, answer in EXAMPLES[task]:
        assert _solve(task, sequence) == answer


def test_bad_requests_are_refused():
    with pytest.raises(TaskConfigError, match="'number' or 'letter'"):
        hop_prompts("index", 12, 3)
    with pytest.raises(TaskConfigError, match="length"):
        hop_prompts("number", 1, 3)
