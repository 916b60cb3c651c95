"""Word-distance prompts: the answer is the word at the stated offset, batched without padding."""

from __future__ import annotations

import pytest
import torch

import lens_possym as lp
from lens_possym.errors import TaskConfigError
from lens_possym.tasks import evaluate_word_distance, word_distance_task

WORDS = [f"w{i}" for i in range(30)]


@pytest.fixture(scope="module")
def llama():
    return lp.tiny_model("llama")


@pytest.mark.parametrize("distance, n_cue", [(1, 2), (2, 2), (-1, 3), (3, 1)])
def test_answer_is_the_word_at_the_offset(llama, distance, n_cue):
    task = word_distance_task(llama, n_prompts=12, n_words=8, n_cue=n_cue, distance=distance,
                              seed=distance, words=WORDS)
    for b in range(task.n_prompts):
        words = task.words[b]
        strs = [s.strip() for s in llama.to_str_tokens(task.tokens[b])]
        # the list words stand where recorded, and the cue repeats words `distance` apart
        assert [strs[int(p)] for p in task.word_positions[b]] == words
        cue = strs[-n_cue:]
        at = [words.index(w) for w in cue]
        assert all(j - i == distance for i, j in zip(at, at[1:]))
        answer = int(task.answer_index[b])
        assert answer - at[-1] == distance
        assert llama.to_str_tokens(task.answers[b:b + 1])[0].strip() == words[answer]
        others = {s.strip() for s in llama.to_str_tokens(task.distractors[b])}
        assert others == set(words) - {words[answer]}
    assert task.chance == 1 / 8


def test_same_seed_same_prompts_and_equal_lengths(llama):
    a = word_distance_task(llama, n_prompts=6, seed=3, words=WORDS)
    b = word_distance_task(llama, n_prompts=6, seed=3, words=WORDS)
    c = word_distance_task(llama, n_prompts=6, seed=4, words=WORDS)
    assert a.prompts == b.prompts != c.prompts
    assert a.tokens.shape == (6, 1 + 8 + 1 + 2)  # bos, list, separator, cue


def test_scoring_and_importance_batch(llama):
    task = word_distance_task(llama, n_prompts=5, words=WORDS)
    logits = torch.zeros(5, 1, llama.cfg.d_vocab)
    logits[torch.arange(5), 0, task.answers] = 1.0
    logits[0, 0, task.answers[0]] = -1.0  # prompt 0 wrong; another vocab word wins
    result = evaluate_word_distance(llama, task, logits=logits)
    assert result.accuracy == pytest.approx(0.8) and result.candidate_accuracy == pytest.approx(0.8)
    batch = task.importance_batch()
    assert torch.equal(batch.answers, task.answers) and batch.distractors.shape == (5, 7)


@pytest.mark.parametrize("kwargs, match", [
    (dict(distance=0), "non-zero"),
    (dict(n_words=4, n_cue=2, distance=2), "spans 5"),
    (dict(n_prompts=0), "n_prompts"),
    (dict(words=["w1", "w2", "zzz-not-a-word"]), "single tokens"),
])
def test_bad_settings(llama, kwargs, match):
    kwargs.setdefault("words", WORDS)
    with pytest.raises(TaskConfigError, match=match):
        word_distance_task(llama, **kwargs)


@pytest.mark.slow
def test_gemma_solves_distance_one_and_not_two(gemma):
    """The documented choice of setting: distance 1 far above chance, distance 2 not."""
    one = evaluate_word_distance(gemma, word_distance_task(gemma, n_prompts=32, distance=1))
    two = evaluate_word_distance(gemma, word_distance_task(gemma, n_prompts=32, distance=2))
    assert one.accuracy > 5 * one.chance
    assert two.accuracy < 2 * two.chance
