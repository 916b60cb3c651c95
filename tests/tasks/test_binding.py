"""Binding prompts: correct by construction, batched without padding, scored right."""

from __future__ import annotations

import pytest
import torch

import lens_possym as lp
from lens_possym.errors import InvalidSelectionError
from lens_possym.tasks import (
    BindingTemplate,
    binding_logit_diff,
    binding_task,
    evaluate_binding,
    random_token_prompts,
)


@pytest.fixture(scope="module")
def llama():
    return lp.tiny_model("llama")


def _check_task(model, task):
    """Every recorded position holds the word it claims; the answer is the queried binding."""
    assert task.tokens.shape[0] == len(task.prompts)
    for b in range(task.n_prompts):
        words = model.to_str_tokens(task.tokens[b])
        for i in range(task.n_pairs):
            assert words[int(task.entity_positions[b, i])].strip() == task.entities[b][i]
            assert words[int(task.attribute_positions[b, i])].strip() == task.attributes[b][i]
            assert task.entity_positions[b, i] < task.attribute_positions[b, i]
        assert len(set(task.entities[b])) == task.n_pairs  # entities distinct
        q = int(task.query_pair[b])
        assert int(task.answers[b]) == int(task.tokens[b, task.answer_positions[b]])
        question = task.template.question.format(entity=task.entities[b][q])
        assert task.prompts[b].endswith(question)
        assert task.attributes[b][q] not in question


def test_tiny_task_is_correct_by_construction(llama):
    task = binding_task(llama, n_prompts=6, n_pairs=3, seed=1)
    _check_task(llama, task)
    assert task.tokens[:, 0].eq(llama.tokenizer.bos_token_id).all()


def test_same_seed_same_prompts_other_seed_other_prompts(llama):
    a = binding_task(llama, n_prompts=5, n_pairs=3, seed=7)
    b = binding_task(llama, n_prompts=5, n_pairs=3, seed=7)
    c = binding_task(llama, n_prompts=5, n_pairs=3, seed=8)
    assert a.prompts == b.prompts and torch.equal(a.tokens, b.tokens)
    assert a.prompts != c.prompts


def test_more_pairs_than_attributes_repeats_attributes_but_keeps_a_distractor(llama):
    task = binding_task(llama, n_prompts=4, n_pairs=3, seed=0, attributes=["red", "blue"])
    _check_task(llama, task)
    for attrs in task.attributes:
        assert set(attrs) == {"red", "blue"}


def test_words_that_are_not_single_tokens_are_dropped(llama):
    # "Zorblax" is unknown to the tiny word-level tokenizer: it would be <unk>
    task = binding_task(llama, n_prompts=3, n_pairs=2, seed=0,
                        entities=["Zorblax", "Alice", "Bob", "Carol"])
    assert all("Zorblax" not in es for es in task.entities)


def test_bad_requests_are_clear_errors(llama):
    with pytest.raises(InvalidSelectionError, match="fewer than n_pairs=5"):
        binding_task(llama, n_pairs=5, entities=["Alice", "Bob", "Carol"])
    with pytest.raises(InvalidSelectionError, match="at least two"):
        binding_task(llama, n_pairs=2, attributes=["red"])
    with pytest.raises(InvalidSelectionError, match="at least 1"):
        binding_task(llama, n_prompts=0)
    with pytest.raises(InvalidSelectionError, match="give the answer away"):
        BindingTemplate(question="What does {entity} like? {attribute}")
    with pytest.raises(InvalidSelectionError, match="lacks"):
        BindingTemplate(statement="{entity} is here.")


def test_custom_template_with_a_preamble(llama):
    template = BindingTemplate(statement="{entity} likes {attribute} .", preamble="Q : A :",
                               question=" What color does {entity} like ? {entity} likes")
    task = binding_task(llama, n_prompts=3, n_pairs=2, seed=3, template=template)
    _check_task(llama, task)


def test_evaluation_on_crafted_logits(llama):
    task = binding_task(llama, n_prompts=4, n_pairs=3, seed=2)
    d_vocab = llama.cfg.d_vocab
    logits = torch.zeros(4, task.tokens.shape[1], d_vocab)
    logits[torch.arange(4), -1, task.answers] = 5.0
    result = evaluate_binding(llama, task, logits=logits)
    assert result.accuracy == 1.0 and result.candidate_accuracy == 1.0
    assert result.logit_diff == pytest.approx(5.0)  # others at 0
    # the favourite is another attribute of the prompt: wrong both ways, negative diff
    wrong = task.attribute_ids.gather(1, ((task.query_pair + 1) % 3)[:, None])[:, 0]
    logits[torch.arange(4), -1, wrong] = 9.0
    result = evaluate_binding(llama, task, logits=logits)
    assert result.accuracy == 0.0 and result.candidate_accuracy == 0.0
    assert torch.allclose(result.logit_diffs, torch.full((4,), 5.0 - 9.0 / 2))
    # an out-of-prompt token on top: wrong over the vocabulary, right among candidates
    logits[torch.arange(4), -1, wrong] = 0.0
    logits[:, -1, 0] = 50.0
    result = evaluate_binding(llama, task, logits=logits)
    assert result.accuracy == 0.0 and result.candidate_accuracy == 1.0


def test_logit_diff_is_differentiable(llama):
    task = binding_task(llama, n_prompts=2, n_pairs=2, seed=0)
    logits = torch.randn(2, task.tokens.shape[1], llama.cfg.d_vocab, requires_grad=True)
    binding_logit_diff(task, logits).sum().backward()
    assert logits.grad[:, -1].abs().sum() > 0 and logits.grad[:, :-1].abs().sum() == 0


def test_model_evaluation_matches_manual(llama):
    task = binding_task(llama, n_prompts=5, n_pairs=3, seed=4)
    result = evaluate_binding(llama, task)
    logits = llama(task.tokens)[:, -1]
    assert result.accuracy == pytest.approx(float((logits.argmax(-1) == task.answers).float().mean()))


def test_random_token_prompts(llama):
    a = random_token_prompts(llama, n_prompts=3, n_tokens=9, seed=5)
    b = random_token_prompts(llama, n_prompts=3, n_tokens=9, seed=5)
    assert a.shape == (3, 9) and torch.equal(a, b)
    assert a[:, 0].eq(llama.tokenizer.bos_token_id).all()
    special = set(llama.tokenizer.all_special_ids)
    assert not any(int(t) in special for t in a[:, 1:].flatten())
    with pytest.raises(InvalidSelectionError):
        random_token_prompts(llama, n_tokens=1)
    with pytest.raises(InvalidSelectionError, match="context"):
        random_token_prompts(llama, n_tokens=llama.cfg.n_ctx + 1)


@pytest.mark.slow
@pytest.mark.parametrize("fixture", ["gemma", "smollm2"])
def test_real_tokenizers(fixture, request):
    model = request.getfixturevalue(fixture)
    task = binding_task(model, n_prompts=16, n_pairs=6, seed=0)
    _check_task(model, task)
    result = evaluate_binding(model, task)
    assert result.accuracy <= result.candidate_accuracy  # top-1 overall implies top-1 among candidates
    tokens = random_token_prompts(model, n_prompts=2, n_tokens=32)
    words = model.to_str_tokens(tokens[0])[1:]
    assert all(w[:1] in (" ", "Ġ") and w.strip().isalpha() for w in words), words
