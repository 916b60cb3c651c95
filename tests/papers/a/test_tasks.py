"""Canonical task generators: answers correct by construction, disjoint splits, seeding."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from lens_possym.errors import TaskConfigError
from lens_possym.papers.a.tasks import IndexTask, PartialInductionTask, RetrievalTask
from lens_possym.training.tasks import TaskBatch, make_task

TASKS = [IndexTask(), RetrievalTask(), PartialInductionTask(),
         IndexTask(n_symbols=5, length=7, seed=3), RetrievalTask(12, 4, 6, seed=2),
         PartialInductionTask(4, 3, 10, max_occurrences=3, seed=5)]


def _brute_force(task, row: list[int]) -> tuple[int, int]:
    """An independent, loop-by-loop reading of one prompt: (answer token, answer position)."""
    names = task.token_names()
    if isinstance(task, IndexTask):
        j = int(names[row[-1]][3:])
        return row[j], j
    query = names[row[-1]][:-1]                     # "E3?" -> "E3"
    hits = [i for i, tok in enumerate(row[:-1]) if names[tok].split("a")[0] == query]
    if isinstance(task, RetrievalTask):
        assert len(hits) == 1
    i = hits[-1]
    attribute = "a" + names[row[i]].split("a")[1]
    return names.index(attribute), i


@pytest.mark.parametrize("task", TASKS, ids=lambda t: t.describe())
def test_answers_are_correct_by_construction(task):
    batch = task.sample(300, seed=11)
    assert batch.tokens.shape == (300, task.n_ctx)
    assert batch.tokens.max() < task.d_vocab and batch.tokens.min() >= 0
    for row, answer, pos in zip(batch.tokens.tolist(), batch.answers.tolist(),
                                batch.answer_pos.tolist()):
        assert (answer, pos) == _brute_force(task, row)
    answers, positions = task.solve(batch.tokens)
    assert torch.equal(answers, batch.answers) and torch.equal(positions, batch.answer_pos)
    assert set(batch.answers.tolist()) <= set(task.answer_tokens)
    assert set(batch.answer_pos.tolist()) <= set(task.answer_positions)


@pytest.mark.parametrize("task", TASKS, ids=lambda t: t.describe())
def test_splits_are_disjoint(task):
    train = task.sample(2000, split="train", seed=1)
    test = task.test_set(500)
    assert not task.is_test(train.tokens).any() and task.is_test(test.tokens).all()
    seen = {tuple(r) for r in train.tokens.tolist()}
    assert seen.isdisjoint(tuple(r) for r in test.tokens.tolist())
    stream = task.train_batches(64, seed=4)
    for _ in range(5):
        assert not task.is_test(next(stream).tokens).any()


@pytest.mark.parametrize("task", TASKS[:3], ids=lambda t: t.name)
def test_test_split_size_follows_test_fraction(task):
    raw = task._generate(20000, torch.Generator().manual_seed(0))
    share = task.is_test(raw.tokens).float().mean().item()
    assert share == pytest.approx(task.test_fraction, abs=0.015)


@pytest.mark.parametrize("task", TASKS[:3], ids=lambda t: t.name)
def test_every_answer_position_is_covered_evenly(task):
    counts = torch.bincount(task.test_set(2048).answer_pos, minlength=task.n_ctx)
    used = counts[task.answer_positions].float()
    assert (used > 0).all()
    assert used.max() / used.min() < 1.6
    others = [p for p in range(task.n_ctx) if p not in task.answer_positions]
    assert counts[others].sum() == 0


def test_sampling_is_seeded_and_leaves_the_global_rng_alone():
    task = RetrievalTask(seed=4)
    state = torch.get_rng_state()
    a, b = task.test_set(100), task.test_set(100)
    c = task.sample(100, seed=5)
    assert torch.equal(state, torch.get_rng_state())
    assert torch.equal(a.tokens, b.tokens)
    assert not torch.equal(a.tokens, c.tokens)
    s1, s2 = task.train_batches(32, seed=1), task.train_batches(32, seed=1)
    assert torch.equal(next(s1).tokens, next(s2).tokens)
    assert not torch.equal(next(s1).tokens, task.train_batches(32, seed=2).__next__().tokens)


def test_retrieval_entities_are_unique():
    task = RetrievalTask(10, 3, 7)
    batch = task.sample(500)
    entity = batch.tokens[:, :-1] // task.n_attributes
    assert all(len(set(r)) == 7 for r in entity.tolist())


def test_partial_induction_structure():
    task = PartialInductionTask(6, 5, 9, max_occurrences=4)
    batch = task.sample(1000)
    entity = batch.tokens[:, :-1] // task.n_attributes
    attribute = batch.tokens[:, :-1] % task.n_attributes
    query = batch.tokens[:, -1] - task.n_entities * task.n_attributes
    counts = []
    for e, a, q, p in zip(entity.tolist(), attribute.tolist(), query.tolist(),
                          batch.answer_pos.tolist()):
        hits = [i for i, x in enumerate(e) if x == q]
        counts.append(len(hits))
        assert 2 <= len(hits) <= 4 and hits[-1] == p          # repeated; answer = last
        assert a[p] not in {a[i] for i in hits[:-1]}          # earlier bindings differ
    assert set(counts) == {2, 3, 4}


@settings(max_examples=30, deadline=None)
@given(n_symbols=st.integers(2, 20), length=st.integers(2, 20), seed=st.integers(0, 10**6))
def test_index_answer_is_the_symbol_at_the_marked_position(n_symbols, length, seed):
    task = IndexTask(n_symbols, length, seed=seed)
    batch = task.sample(64)
    j = batch.tokens[:, -1] - n_symbols
    assert torch.equal(j, batch.answer_pos)
    assert torch.equal(batch.tokens[torch.arange(64), j], batch.answers)
    assert (batch.tokens[:, :-1] < n_symbols).all()           # markers only at the end


def test_decode_and_names():
    task = RetrievalTask(3, 2, 3)
    assert task.token_names()[:2] == ["E0a0", "E0a1"]
    assert task.token_names()[6] == "E0?" and task.token_names()[-1] == "a1"
    assert task.decode(torch.tensor([0, 3, 4, 7])) == "E0a0 E1a1 E2a0 E1?"
    assert IndexTask(3, 2).token_names() == ["s0", "s1", "s2", "IDX0", "IDX1"]


def test_batches_index_and_concatenate():
    b = IndexTask().sample(10)
    both = TaskBatch.cat([b[:4], b[4:]])
    assert torch.equal(both.tokens, b.tokens) and len(both) == 10


@pytest.mark.parametrize("make, match", [
    (lambda: IndexTask(1, 5), "n_symbols >= 2"),
    (lambda: RetrievalTask(4, 4, 5), "distinct entities"),
    (lambda: PartialInductionTask(4, 2, 6, max_occurrences=3), "n_attributes"),
    (lambda: PartialInductionTask(4, 4, 3, max_occurrences=4), "max_occurrences"),
    (lambda: IndexTask(test_fraction=1.0), "test_fraction"),
    (lambda: make_task("copy"), "unknown task"),
    (lambda: IndexTask().sample(0), "n must be"),
    (lambda: IndexTask().sample(5, split="dev"), "split"),
])
def test_bad_settings_are_refused(make, match):
    with pytest.raises(TaskConfigError, match=match):
        make()


def test_a_task_too_small_for_its_test_split_says_so():
    task = IndexTask(2, 2, test_fraction=1e-6)
    everything = torch.tensor([[a, b, 2 + j] for a in range(2) for b in range(2) for j in range(2)])
    assert not task.is_test(everything).any()                 # no sequence is in the test split
    with pytest.raises(TaskConfigError, match="too few distinct sequences"):
        task.test_set(4)


def test_make_task_accepts_names_and_settings():
    task = make_task("partial_induction", n_pairs=6)
    assert isinstance(task, PartialInductionTask) and task.n_ctx == 7
    assert make_task("Index").name == "index"
