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


def _pairs_checks(model, task):
    from lens_possym.papers.c.prompts import hop_pairs

    pairs = hop_pairs(model, task, 12, 4, seed=2)
    assert pairs.name == f"hop-{task}/" + ("shift_offset" if task == "number" else "swap_target")
    assert pairs.clean_tokens.shape == pairs.corrupted_tokens.shape
    for clean, bad in zip(pairs.clean_task, pairs.corrupted_task):
        assert _solve(task, clean.sequence) == clean.answer
        assert _solve(task, bad.sequence) == bad.answer != clean.answer
        # only the query changes
        assert clean.sequence.split()[:-1] == bad.sequence.split()[:-1]
    changed = pairs.changed_positions()
    assert changed.min() >= pairs.clean_tokens.shape[1] - 6  # the query, near the end
    assert (pairs.clean_answers != pairs.corrupted_answers).all()
    return pairs


@pytest.mark.slow
@pytest.mark.parametrize("task", ["number", "letter"])
def test_counterfactual_pairs_change_the_query_only(smollm2, task):
    import torch

    pairs = _pairs_checks(smollm2, task)
    metric = pairs.metric(smollm2)
    with torch.no_grad():
        assert float(metric(smollm2(pairs.clean_tokens)).mean()) == pytest.approx(1, abs=1e-5)
        assert float(metric(smollm2(pairs.corrupted_tokens)).mean()) == pytest.approx(0, abs=1e-5)


def test_counterfactual_pairs_on_a_tiny_tokenizer_and_bad_input():
    import lens_possym as lp
    from lens_possym.papers.c.prompts import hop_pairs

    model = lp.tiny_model("llama")  # its tokenizer does not know the letters
    with pytest.raises(TaskConfigError, match="differ in their tokens"):
        hop_pairs(model, "letter", 12, 4)
    with pytest.raises(TaskConfigError, match="unknown number corruption 'swap_target'"):
        hop_pairs(model, "number", corruption="swap_target")
    with pytest.raises(TaskConfigError, match="task must be 'number' or 'letter'"):
        hop_pairs(model, "index")
    with pytest.raises(TaskConfigError, match="n_prompts must be a positive integer"):
        hop_pairs(model, "number", n_prompts=0)
