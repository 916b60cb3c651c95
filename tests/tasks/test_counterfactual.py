"""Counterfactual pairs: what each corruption changes, both answers, the normalised metric."""

from __future__ import annotations

import pytest
import torch

import lens_possym as lp
from lens_possym.errors import InvalidSelectionError
from lens_possym.tasks import (CORRUPTIONS, NormalizedLogitDiff, binding_pairs, binding_task,
                               counterfactual_pairs, prompt_pairs, word_distance_pairs)


@pytest.fixture(scope="module")
def llama():
    return lp.tiny_model("llama")


@pytest.fixture(scope="module")
def task(llama):
    return binding_task(llama, n_prompts=6, n_pairs=3, seed=2)


def test_swap_query_changes_only_the_question(llama, task):
    pairs = binding_pairs(llama, task, "swap_query", corruption_seed=1)
    bad = pairs.corrupted_task
    assert bad.entities == task.entities and bad.attributes == task.attributes
    assert (bad.query_pair != task.query_pair).all()
    assert pairs.corrupted_answers.tolist() == bad.answers.tolist()
    question = (pairs.clean_tokens != pairs.corrupted_tokens).any(0).nonzero().flatten()
    assert question.min() > task.attribute_positions.max()  # only the question's entity
    assert pairs.name == "binding/swap_query" and pairs.changed_positions().tolist() == \
        question.tolist()


def test_swap_attribute_changes_one_token(llama, task):
    pairs = binding_pairs(llama, task, "swap_attribute")
    diff = pairs.clean_tokens != pairs.corrupted_tokens
    assert (diff.sum(1) == 1).all()
    assert torch.equal(diff.nonzero()[:, 1], task.answer_positions.cpu())
    for clean, bad, q in zip(task.attributes, pairs.corrupted_task.attributes,
                             task.query_pair.tolist()):
        assert bad[q] not in clean and [a for i, a in enumerate(bad) if i != q] == \
            [a for i, a in enumerate(clean) if i != q]


def test_shuffle_order_moves_every_entity_and_keeps_the_tokens(llama, task):
    pairs = binding_pairs(llama, task, "shuffle_order")
    bad = pairs.corrupted_task
    assert bad.attributes == task.attributes
    for b in range(task.n_prompts):
        assert sorted(bad.entities[b]) == sorted(task.entities[b])
        assert all(x != y for x, y in zip(bad.entities[b], task.entities[b]))
        assert bad.entities[b][bad.query_pair[b]] == task.entities[b][task.query_pair[b]]
    assert torch.equal(pairs.clean_tokens.sort(1).values, pairs.corrupted_tokens.sort(1).values)
    assert (pairs.clean_answers != pairs.corrupted_answers).all()


def test_the_metric_is_0_on_the_corrupted_and_1_on_the_clean_run(llama, task):
    for corruption in CORRUPTIONS["binding"]:
        pairs = binding_pairs(llama, task, corruption)
        with torch.no_grad():
            clean, corrupted = llama(pairs.clean_tokens), llama(pairs.corrupted_tokens)
        metric = pairs.metric(llama)
        assert float(metric(clean).mean()) == pytest.approx(1.0, abs=1e-5)
        assert float(metric(corrupted).mean()) == pytest.approx(0.0, abs=1e-5)
        per_prompt = pairs.metric(llama, per_prompt=True)
        # Each prompt is divided by its own clean-minus-corrupted gap (0.007 on some tiny-model
        # prompts), so float32 noise of 1e-7 in the logits is amplified by 1 / gap.
        noise = 1e-6 / per_prompt.scale.abs()
        assert ((per_prompt(clean) - 1).abs() <= noise).all()
        assert (per_prompt(corrupted).abs() <= noise).all()
        raw = pairs.logit_diff(clean)  # logit(clean answer) − logit(corrupted answer)
        last = clean[:, -1]
        rows = torch.arange(6)
        assert torch.allclose(raw, last[rows, pairs.clean_answers] - last[rows,
                              pairs.corrupted_answers])


def test_word_distance_shift_cue(llama):
    pairs = word_distance_pairs(llama, None, "shift_cue", n_prompts=5, n_words=4, n_cue=1)
    clean, bad = pairs.clean_task, pairs.corrupted_task
    assert bad.words == clean.words and (bad.cue_starts != clean.cue_starts).all()
    assert pairs.changed_positions().tolist() == [int(clean.tokens.shape[1]) - 1]  # the cue
    assert (pairs.clean_answers != pairs.corrupted_answers).all()


@pytest.mark.slow
def test_every_corruption_on_a_real_tokenizer(smollm2):
    for task in ("binding", "distance"):
        for corruption in CORRUPTIONS[task]:
            pairs = counterfactual_pairs(smollm2, task, corruption, n_prompts=4)
            assert pairs.clean_tokens.shape == pairs.corrupted_tokens.shape
            assert (pairs.clean_answers != pairs.corrupted_answers).all()
            if corruption == "swap_answer":
                diff = pairs.clean_tokens != pairs.corrupted_tokens
                assert (diff.sum(1) == 1).all()


def test_given_prompts_and_bad_inputs(llama, task):
    pairs = prompt_pairs(llama, task.prompts[:2], task.prompts[:2][::-1],
                         task.answers[:2].tolist(), task.answers[:2].tolist()[::-1])
    assert pairs.task == "prompts" and pairs.n_prompts == 2
    with pytest.raises(InvalidSelectionError, match="same clean and corrupted answer"):
        prompt_pairs(llama, task.prompts[:1], task.prompts[1:2], [3], [3])
    with pytest.raises(InvalidSelectionError, match="as many clean prompts"):
        prompt_pairs(llama, task.prompts[:2], task.prompts[:1], [3, 4], [5, 6])
    with pytest.raises(InvalidSelectionError, match="unknown binding corruption 'swap'"):
        binding_pairs(llama, task, "swap")
    with pytest.raises(InvalidSelectionError, match="unknown task 'ioi'"):
        counterfactual_pairs(llama, "ioi")
    with pytest.raises(InvalidSelectionError, match="one pair cannot be corrupted"):
        binding_pairs(llama, None, n_prompts=2, n_pairs=1)
    flat = torch.zeros(3)
    with pytest.raises(InvalidSelectionError, match="same mean logit difference"):
        NormalizedLogitDiff(torch.tensor([1, 2, 3]), torch.tensor([4, 5, 6]), flat, flat)
    with pytest.raises(InvalidSelectionError, match=r"prompt\(s\) \[1\]"):
        NormalizedLogitDiff(torch.tensor([1, 2, 3]), torch.tensor([4, 5, 6]),
                            torch.tensor([1.0, 0.0, 2.0]), flat, per_prompt=True)
