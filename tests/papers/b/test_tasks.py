"""Paper B's distance and count tasks: labels correct by construction, seeded, disjoint."""

from __future__ import annotations

import pytest
import torch

from lens_possym.errors import TaskConfigError
from lens_possym.training.tasks import TASKS, make_task
from lens_possym.papers.b.tasks import CountTask, DistanceTask
from lens_possym.papers.b.tasks import PAD


def _distance_by_loop(row: list[int]) -> int:
    a = [i for i, t in enumerate(row) if t == DistanceTask.TRIGGER_A]
    b = [i for i, t in enumerate(row) if t == DistanceTask.TRIGGER_B]
    assert len(a) == 1 and len(b) == 1, "exactly one A and one B"
    return b[0] - a[0]


def test_distance_labels_correct_by_construction():
    task = DistanceTask(n_ctx=32, max_between=16, max_side=6, n_words=20, seed=3)
    batch = task.sample(400)
    assert batch.tokens.shape == (400, 32)
    for row, label in zip(batch.tokens.tolist(), batch.answers.tolist()):
        assert label == _distance_by_loop(row)
        first_pad = row.index(PAD) if PAD in row else len(row)
        assert all(t == PAD for t in row[first_pad:]), "pads only at the end"
        assert 3 <= first_pad <= 32
    assert set(batch.answers.tolist()) <= set(task.answer_tokens)
    assert batch.answers.min() >= 2 and batch.answers.max() <= task.n_classes - 1
    # every gap length occurs, and the label is |middle| + 1
    assert set(batch.answers.tolist()) == set(range(2, 18))


def test_distance_cut_to_max_len_keeps_trigger_b():
    task = DistanceTask(n_ctx=40, max_len=20, max_between=10, max_side=8, seed=1)
    batch = task.sample(300)
    nonpad = (batch.tokens != PAD).sum(1)
    assert int(nonpad.max()) <= 20 and (batch.tokens[:, 20:] == PAD).all()
    assert torch.equal(task.solve(batch.tokens)[0], batch.answers)


def test_trigger_copies_draw_fillers_as_the_official_code_and_keep_the_drawn_gap():
    kw = dict(n_ctx=32, max_between=16, max_side=6, n_words=6, seed=3)
    exact, copies = DistanceTask(**kw), DistanceTask(**kw, trigger_copies=True)
    assert "trigger_copies" not in exact.config() and copies.config()["trigger_copies"] is True
    a = exact._generate(2000, torch.Generator().manual_seed(9))
    b = copies._generate(2000, torch.Generator().manual_seed(9))
    # the same draws of left / middle / right: the label is the drawn gap, copies or not
    assert torch.equal(a.answers, b.answers) and torch.equal(a.answer_pos, b.answer_pos)
    assert torch.equal(a.tokens == PAD, b.tokens == PAD)
    for trigger in (DistanceTask.TRIGGER_A, DistanceTask.TRIGGER_B):
        assert ((b.tokens == trigger) >= (a.tokens == trigger)).all()  # the drawn ones stay
        assert ((a.tokens == trigger).sum(1) == 1).all()               # exact: one each
    words = b.tokens[b.tokens != PAD]
    assert words.min() >= 1 and words.max() == copies.d_vocab - 1     # never a pad inside
    many = ((b.tokens == 1).sum(1) > 1) | ((b.tokens == 2).sum(1) > 1)
    assert 0.5 < float(many.float().mean()) < 1.0        # 2 of 8 filler ids are triggers
    single = ~many                                       # one A and one B: tokens decide it
    assert torch.equal(copies.solve(b.tokens)[0][single], b.answers[single])
    assert (copies.solve(b.tokens)[0][many] != b.answers[many]).any()
    with pytest.raises(TaskConfigError, match="trigger_copies must be True or False"):
        DistanceTask(trigger_copies="yes")


def test_best_guess_is_the_label_without_copies_and_the_bayes_reading_with_them():
    kw = dict(n_ctx=32, max_between=16, max_side=6, n_words=6, seed=3)
    exact, copies = DistanceTask(**kw), DistanceTask(**kw, trigger_copies=True)
    a = exact._generate(500, torch.Generator().manual_seed(1))
    guess, prob = exact.best_guess(a.tokens)
    assert torch.equal(guess, a.answers) and bool((prob == 1).all())

    A, B, w = DistanceTask.TRIGGER_A, DistanceTask.TRIGGER_B, 5
    two_bs = torch.tensor([[w, A, w, B, w, B, w] + [PAD] * 25])   # gaps 2 and 4, both drawable
    guess, prob = copies.best_guess(two_bs)
    assert (int(guess), float(prob)) == (2, 0.5)                  # a tie goes to the shorter gap
    undrawable = torch.tensor([[A, w, B, w] + [PAD] * 28])        # no left side before A
    with pytest.raises(TaskConfigError, match="no \\(A, B\\) pair"):
        copies.best_guess(undrawable)

    # calibrated: its stated chance of being right is how often it is right, and no reading
    # of the tokens does better on average than the Bayes one (here: first A, first B)
    b = copies._generate(4000, torch.Generator().manual_seed(2))
    guess, prob = copies.best_guess(b.tokens)
    right = (guess == b.answers).double().mean().item()
    assert abs(right - prob.mean().item()) < 0.02
    assert right >= (copies.solve(b.tokens)[0] == b.answers).double().mean().item()
    assert prob.mean().item() < 0.95                               # a ceiling below 100 %


def test_count_labels_correct_by_construction():
    task = CountTask(n_ctx=40, max_len=36, n_triggers=5, max_count=30, n_words=12, seed=2)
    batch = task.sample(300)
    for row, label in zip(batch.tokens.tolist(), batch.answers.tolist()):
        assert label == sum(1 <= t <= 5 for t in row)
        assert sum(t != PAD for t in row[:36]) == 36 and all(t == PAD for t in row[36:])
    assert batch.answers.min() >= 1, "the zero class never occurs (the official loss ignores it)"
    assert batch.answers.max() <= 30 and task.n_classes == 31
    # shuffled: triggers are not all at the front
    first = (batch.tokens[:, :1] <= 5).float().mean()
    assert 0.05 < float(first) < 0.95


@pytest.mark.parametrize("cls", [DistanceTask, CountTask])
def test_seeded_and_disjoint_splits(cls):
    task = cls(seed=5)
    a, b = task.sample(64, seed=11), task.sample(64, seed=11)
    assert torch.equal(a.tokens, b.tokens)
    assert not torch.equal(a.tokens, task.sample(64, seed=12).tokens)
    train = {tuple(r) for r in task.sample(2000).tokens.tolist()}
    test = {tuple(r) for r in task.test_set(300).tokens.tolist()}
    assert not train & test
    assert task.is_test(task.test_set(50).tokens).all()


def test_registry_and_config_round_trip():
    assert TASKS["distance"] is DistanceTask and TASKS["count"] is CountTask
    for name in ("distance", "count"):
        task = make_task(name, seed=4)
        again = make_task(name, **task.config())
        assert torch.equal(task.test_set(20).tokens, again.test_set(20).tokens)


@pytest.mark.parametrize("build", [
    lambda: DistanceTask(n_ctx=16, max_between=16),
    lambda: DistanceTask(n_ctx=32, max_len=40),
    lambda: DistanceTask(max_side=0),
    lambda: CountTask(n_ctx=16, max_count=20),
    lambda: CountTask(n_triggers=0),
    lambda: DistanceTask(n_sentences=1),
    lambda: CountTask(n_sentences=100, train_share=1.0),
])
def test_bad_configs_raise(build):
    with pytest.raises(TaskConfigError):
        build()


@pytest.mark.parametrize("cls", [DistanceTask, CountTask])
def test_official_regime_fixed_set_split_70_30(cls):
    task = cls(n_sentences=400, seed=3)
    train, test = task.fixed_split()
    rows = torch.cat([train.tokens, test.tokens]).long()
    assert len(torch.unique(rows, dim=0)) == len(rows), "duplicates dropped, parts disjoint"
    assert len(train) == int(0.7 * len(rows)) and len(rows) > 380
    answers, _ = task.solve(train.tokens.long())
    assert torch.equal(answers, train.answers)
    again = make_task(task.name, **task.config())                # rebuilt from its config
    assert torch.equal(again.fixed_split()[1].tokens, test.tokens)
    assert task.config()["n_sentences"] == 400 and "n_sentences" not in cls().config()
    held_out = {tuple(r) for r in test.tokens.tolist()}
    assert {tuple(r) for r in task.test_set(50).tokens.tolist()} <= held_out
    assert {tuple(r) for r in task.sample(50).tokens.tolist()} <= {
        tuple(r) for r in train.tokens.tolist()}
    with pytest.raises(TaskConfigError, match="fixed set"):
        task.test_set(len(test) + 1)
    with pytest.raises(TaskConfigError, match="fresh stream"):
        cls().fixed_split()
    assert cls().epoch_size is None and task.epoch_size == len(train)


def test_official_regime_walks_epochs():
    task = DistanceTask(n_sentences=100, seed=1)
    n = task.epoch_size                                          # 70
    batches = [task.train_batch(step, 32, seed=5) for step in range(6)]   # 3 per epoch
    assert [len(b) for b in batches] == [32, 32, 6, 32, 32, 6]
    train = {tuple(r) for r in task.fixed_split()[0].tokens.tolist()}
    for epoch in (batches[:3], batches[3:]):
        seen = [tuple(r) for b in epoch for r in b.tokens.tolist()]
        assert len(seen) == n and set(seen) == train, "each sentence once per epoch"
    assert not torch.equal(batches[0].tokens, batches[3].tokens), "a new shuffle per epoch"
    assert torch.equal(task.train_batch(4, 32, seed=5).tokens, batches[4].tokens)
    assert batches[0].tokens.dtype == torch.long
