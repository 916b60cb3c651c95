"""Number and Letter generators (paper C): answers correct by construction, hop counts and
paths, balance, proper inputs, splits, the length extension, bad settings."""

from __future__ import annotations

import pytest
import torch

from lens_possym.errors import TaskConfigError
from lens_possym.training.tasks import TASKS, make_task
from lens_possym.papers.c.tasks import FILLER_SUMMARIES, FILLERS, LetterTask, NumberTask

TASKS_UNDER_TEST = [NumberTask(), LetterTask(), NumberTask(n_letters=10, seed=3, max_hops=3),
                    LetterTask(n_letters=6, n_digits=3, seed=2), NumberTask(length=60),
                    LetterTask(length=45, seed=1), LetterTask(query_letter="filler"),
                    LetterTask(n_letters=5, query_letter="filler", seed=4, length=30),
                    *(cls(length=40, filler=f) for f in FILLERS[1:]
                      for cls in (NumberTask, LetterTask)),
                    *(LetterTask(length=60, filler=f, query_letter="filler", seed=7)
                      for f in FILLERS[1:]),
                    *(LetterTask(n_letters=6, n_digits=2, length=33, filler=f, seed=8)
                      for f in ("answer", "duplicates"))]


def _walk(task, row: list[int]) -> tuple[int, list[int]]:
    """An independent, loop-by-loop reading of one prompt from its token names:
    (answer token, positions visited from the query)."""
    names = task.token_names()
    words = [names[t] for t in row]
    pos, path = len(row) - 1, [len(row) - 1]
    for _ in range(task.max_hops):
        word = words[pos]
        if isinstance(task, NumberTask):
            assert word.isdigit()
            pos = pos - int(word)
        else:
            assert word[1].isalpha()
            hits = [i for i in range(pos) if words[i][0] == word[1]]
            assert len(hits) >= 1
            assert len({row[i] for i in hits}) == 1, "proper input: one token per left letter"
            pos = hits[-1]
        path.append(pos)
        is_answer = (not words[pos].isdigit()) if isinstance(task, NumberTask) \
            else words[pos][1].isdigit()
        if is_answer:
            return row[pos], path
    raise AssertionError("no answer within max_hops")


@pytest.mark.parametrize("task", TASKS_UNDER_TEST, ids=lambda t: t.describe())
def test_answers_hops_and_paths_are_correct_by_construction(task):
    gen = torch.Generator().manual_seed(0)
    batch, hops, path = task._generate_with_paths(300, gen)
    assert batch.tokens.shape == (300, task.length)
    for i in range(300):
        answer, walked = _walk(task, batch.tokens[i].tolist())
        assert answer == int(batch.answers[i])
        assert walked == [p for p in path[i].tolist() if p >= 0]
        assert len(walked) - 1 == int(hops[i])
        assert walked[-1] == int(batch.answer_pos[i])
    solver_hops, solver_path = task.hop_path(batch.tokens)
    assert torch.equal(solver_hops, hops) and torch.equal(solver_path, path)
    answers, answer_pos = task.solve(batch.tokens)
    assert torch.equal(answers, batch.answers) and torch.equal(answer_pos, batch.answer_pos)


@pytest.mark.parametrize("task", [NumberTask(), LetterTask()], ids=lambda t: t.name)
def test_hops_in_equal_shares_and_answers_balanced(task):
    batch, hops, path = task.sample_with_paths(8000, split="train")
    counts = torch.bincount(hops, minlength=task.max_hops + 1)[1:].float()
    assert counts.sum() == 8000 and (counts - 2000).abs().max() < 150
    for h in range(1, task.max_hops + 1):                      # within each hop class
        pos = torch.bincount(batch.answer_pos[hops == h] - task.target_start,
                             minlength=task.window).float()
        assert pos.min() > 0.75 * pos.mean(), pos
    values = torch.bincount(batch.answers, minlength=len(task.answer_tokens)).float()
    assert values.min() > 0.5 * values.mean() and values.max() < 1.5 * values.mean()
    # intermediate stops lie in the pre-target window, the answer in the target window
    inner = path[:, 1:-1]
    for k in range(1, task.max_hops):
        stops = path[hops > k, k]
        assert ((stops >= task.pre_start) & (stops < task.query_pos)).all()
    assert (batch.answer_pos < task.pre_start).all()


def test_paper_vocabularies_and_layout():
    number, letter = NumberTask(), LetterTask()
    assert (number.d_vocab, letter.d_vocab) == (136, 128)
    assert number.n_ctx == letter.n_ctx == 17
    names = number.token_names()
    assert names[:3] == ["a", "b", "c"] and names[26] == "aa" and names[119] == "dp"
    assert names[120:] == [str(i) for i in range(1, 17)]
    assert letter.token_names()[0] == "a1" and letter.token_names()[64] == "aa"
    assert TASKS["number"] is NumberTask and make_task("letter").name == "letter"


def test_length_sets_keep_the_frame_and_extend_in_front():
    base = NumberTask(seed=4)
    long = base.at_length(200)
    assert long.n_extra == 183 and long.config()["length"] == 200
    batch, hops, path = long.sample_with_paths(400)
    assert (batch.answer_pos >= long.target_start).all()
    assert (batch.answer_pos < long.target_start + long.window).all()
    # offsets in the pre-target window never reach into the extension
    offsets = batch.tokens[:, long.pre_start:] - long.n_letters + 1
    reach = torch.arange(long.pre_start, long.length) - offsets
    assert (reach >= long.n_extra).all()
    letter = LetterTask().at_length(850)
    b, _, _ = letter.sample_with_paths(64)
    assert b.tokens.shape == (64, 850)


@pytest.mark.parametrize("task", [NumberTask(), LetterTask()], ids=lambda t: t.name)
def test_splits_are_disjoint_and_seeded(task):
    train = task.sample(3000, split="train", seed=1)
    test = task.test_set(500)
    assert not task.is_test(train.tokens).any() and task.is_test(test.tokens).all()
    assert torch.equal(task.test_set(500).tokens, test.tokens)
    assert not torch.equal(task.sample(50, seed=2).tokens, task.sample(50, seed=3).tokens)


def test_accuracy_by_hops_counts_each_class():
    task = NumberTask()
    batch, hops, _ = task.sample_with_paths(400)
    predictions = batch.answers.clone()
    predictions[hops == 3] = -1
    assert task.accuracy_by_hops(predictions, batch) == [1.0, 1.0, 0.0, 1.0]


@pytest.mark.parametrize("kwargs, match", [
    (dict(cls=NumberTask, max_offset=8), "max_offset"),
    (dict(cls=NumberTask, length=10), "length must be >= 17"),
    (dict(cls=LetterTask, n_letters=5), "n_letters must be >= max_hops"),
    (dict(cls=LetterTask, n_letters=4, query_letter="filler"), "n_letters must be >= max_hops"),
    (dict(cls=LetterTask, query_letter="pool"), "query_letter must be one of"),
    (dict(cls=NumberTask, filler="letters"), "filler must be one of"),
    (dict(cls=NumberTask, max_hops=9), "max_hops"),
])
def test_bad_settings_are_refused(kwargs, match):
    cls = kwargs.pop("cls")
    with pytest.raises(TaskConfigError, match=match):
        cls(**kwargs)


def test_a_broken_path_is_reported():
    task = NumberTask()
    tokens = task.sample(4).tokens.clone()
    tokens[:, -1] = task.offset_token(torch.tensor(1))     # query points to position 15
    tokens[:, -2] = task.offset_token(torch.tensor(1))     # ... which points to 14, and so on
    tokens[:, 8:15] = task.offset_token(torch.tensor(1))
    with pytest.raises(TaskConfigError, match="more than 4 hops"):
        task.hop_path(tokens)


def test_the_query_letter_is_reserved_or_drawn_from_the_fillers_pool():
    """``reserved``: the query's left letter occurs nowhere else; ``filler`` (paper C's
    code): it is one of the off-chain letters the fillers use, so it usually recurs."""
    for mode, recurs in (("reserved", False), ("filler", True)):
        task = LetterTask(query_letter=mode)
        batch, hops, path = task.sample_with_paths(2000, split="train", seed=0)
        names = task.token_names()
        rows = [[names[t] for t in row] for row in batch.tokens.tolist()]
        left = [row[-1][0] for row in rows]
        chain = [{rows[i][p][0] for p in path[i].tolist()[1:] if p >= 0} for i in range(2000)]
        assert not any(left[i] in chain[i] for i in range(2000))
        elsewhere = [left[i] in {w[0] for w in rows[i][:-1]} for i in range(2000)]
        assert (sum(elsewhere) / 2000 > 0.9) if recurs else not any(elsewhere)
        # fillers draw from n_letters - h - 1 (reserved) or n_letters - h (filler) letters
        letters = [len({w[0] for w in rows[i][:-1]} - chain[i]) for i in range(2000)]
        most = [task.n_letters - int(hops[i]) - (mode == "reserved") for i in range(2000)]
        assert all(a <= b for a, b in zip(letters, most))
        assert any(a == b for a, b in zip(letters, most))


@pytest.mark.parametrize("cls", [NumberTask, LetterTask], ids=lambda c: c.name)
def test_filler_readings_change_only_the_extension(cls):
    """Every reading keeps the training-length tokens, path and answer (``"reach"``: the
    path and the effective target window; only off-path pre-target offsets change);
    ``target`` is the generator as it was (bit for bit) and stays out of the
    configuration; a reading that coincides with another (``same_as``) gives its tokens."""
    base = cls(length=60)
    assert "filler" not in base.config() and base.filler == "target"
    ref, ref_hops, ref_path = base._generate_with_paths(200, torch.Generator().manual_seed(5))
    names = base.token_names()
    e = base.n_extra
    for filler in FILLERS:
        task = base.at_length(60, filler=filler)
        assert task.filler == filler and task.at_length(80).filler == filler
        assert ("filler" in task.config()) == (filler != "target")
        batch, hops, path = task._generate_with_paths(200, torch.Generator().manual_seed(5))
        assert torch.equal(path, ref_path) and torch.equal(batch.answers, ref.answers)
        if task.same_as() == "target":
            assert torch.equal(batch.tokens, ref.tokens), filler
            continue
        if filler == "reach":                                    # Number only
            keep = e + task.window
            assert torch.equal(batch.tokens[:, :keep], ref.tokens[:, :keep])
            pos = torch.arange(task.pre_start, task.length)
            dest = pos - (batch.tokens[:, task.pre_start:] - task.n_letters + 1)
            assert bool((dest >= 0).all()) and bool((dest < e).any())
            ref_dest = pos - (ref.tokens[:, task.pre_start:] - task.n_letters + 1)
            assert bool((ref_dest >= e).all())          # other readings: inside the frame
            continue
        assert torch.equal(batch.tokens[:, e:], ref.tokens[:, e:])
        ext = [[names[t] for t in row] for row in batch.tokens[:, :e].tolist()]
        if cls is NumberTask:
            offsets = [w.isdigit() for row in ext for w in row]
        else:
            offsets = [w[1].isalpha() for row in ext for w in row]      # letter-letter pairs
        share = sum(offsets) / len(offsets)
        expected = {"pretarget": (1.0, 1.0), "mixed": (0.4, 0.6), "repeat": (0.0, 0.0),
                    "answer": (0.0, 0.0),
                    "duplicates": (0.4, 0.6) if cls is NumberTask else (0.01, 0.3)}[filler]
        assert expected[0] <= share <= expected[1], (filler, share)
        if filler == "repeat":
            window = batch.tokens[:, e: e + task.window]
            for i in range(e):
                assert torch.equal(batch.tokens[:, i], window[:, (i - e) % task.window])


def test_answer_copies_and_proper_duplicates_in_letters_extension():
    """Letter ``answer``: about 1/(off-chain letters + 1) of the extension is the answer
    token itself (about 16 % with the ``paper`` preset's task), never another token with
    the answer's letter; ``duplicates``: every letter's extra tokens are one identical
    token per sequence, chain letters' the frame's own (answer, path pairs)."""
    task = LetterTask(query_letter="filler", length=217)
    e = task.n_extra
    for filler, low, high in (("answer", 0.13, 0.19), ("duplicates", 0.08, 0.14)):
        long = task.at_length(217, filler=filler)
        batch, hops, path = long._generate_with_paths(400, torch.Generator().manual_seed(2))
        ext = batch.tokens[:, :e]
        share = float((ext == batch.answers[:, None]).float().mean())
        assert low <= share <= high, (filler, share)
        same_letter = (ext < task.n_pairs) & (ext // task.n_digits
                                              == (batch.answers // task.n_digits)[:, None])
        assert torch.equal(same_letter, ext == batch.answers[:, None])
        if filler == "duplicates":
            left = torch.where(batch.tokens >= task.n_pairs,
                               (batch.tokens - task.n_pairs) // task.n_letters,
                               batch.tokens // task.n_digits)
            for i in range(50):
                row, lt = batch.tokens[i], left[i]
                for letter in lt[:e].unique():
                    assert len(row[:e][lt[:e] == letter].unique()) == 1
                for k in range(1, int(hops[i])):                 # path pairs copied
                    at = int(path[i, k])
                    hits = (lt[:e] == lt[at]).nonzero().flatten()
                    assert bool((row[hits] == row[at]).all())


def test_same_as_names_the_coinciding_reading():
    assert NumberTask().same_as("answer") == "target"
    assert LetterTask().same_as("reach") == "target"
    assert LetterTask(filler="answer").same_as() == "answer"
    with pytest.raises(TaskConfigError, match="filler must be one of"):
        NumberTask().same_as("letters")


def test_every_reading_has_a_summary_that_names_what_it_coincides_with():
    """The report lists the readings from FILLER_SUMMARIES: every reading has a line, and a
    line says "Task: = `other`" exactly where that task's same_as says so."""
    assert set(FILLER_SUMMARIES) == set(FILLERS)
    for cls, name in ((NumberTask, "Number"), (LetterTask, "Letter")):
        for reading in FILLERS:
            same = cls().same_as(reading)
            says = f"{name}: = `{same}`" in FILLER_SUMMARIES[reading]
            assert says == (same != reading), (cls.__name__, reading, FILLER_SUMMARIES[reading])
            assert f"{name}: =" not in FILLER_SUMMARIES[reading] or same != reading
