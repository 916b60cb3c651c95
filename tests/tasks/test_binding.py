"""Binding prompts: correct by construction, batched without padding, scored right."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import lens_possym as lp
from lens_possym.errors import InvalidSelectionError
from lens_possym.tasks import (
    BINDING_TEMPLATES,
    BindingTemplate,
    binding_logit_diff,
    binding_task,
    evaluate_binding,
    random_token_prompts,
)
from lens_possym.tasks.binding import DEFAULT_ENTITIES, MORE_ENTITIES, OBJECTS, check_words


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


def test_unusable_words_in_a_passed_pool_are_named_or_dropped_on_request(llama):
    # "Zorblax" is unknown to the tiny word-level tokenizer: it would be <unk>
    pool = ["Zorblax", "Alice", "Bob", "Carol"]
    with pytest.raises(InvalidSelectionError, match=r"'Zorblax': unknown to the tokenizer"):
        binding_task(llama, n_prompts=3, n_pairs=2, seed=0, entities=pool)
    task = binding_task(llama, n_prompts=3, n_pairs=2, seed=0, entities=pool, unusable="drop")
    assert all("Zorblax" not in es for es in task.entities)
    # the rest skipped are built-in colours the tiny vocabulary lacks
    assert set(task.skipped) - set(BINDING_TEMPLATES["color"].attribute_pool) == {"Zorblax"}
    assert "unknown" in task.skipped["Zorblax"]
    _check_task(llama, task)


def test_bad_requests_are_clear_errors(llama):
    with pytest.raises(InvalidSelectionError, match="fewer than n_pairs=5"):
        binding_task(llama, n_pairs=5, entities=["Alice", "Bob", "Carol"])
    with pytest.raises(InvalidSelectionError, match="at least two"):
        binding_task(llama, n_pairs=2, attributes=["red"])
    with pytest.raises(InvalidSelectionError, match="n_prompts must be between 1 and"):
        binding_task(llama, n_prompts=0)
    with pytest.raises(InvalidSelectionError, match="give the answer away"):
        BindingTemplate(question="What does {entity} like? {attribute}")
    with pytest.raises(InvalidSelectionError, match="lacks"):
        BindingTemplate(statement="{entity} is here.")
    with pytest.raises(InvalidSelectionError, match="unknown binding template 'colour'"):
        binding_task(llama, template="colour")
    with pytest.raises(InvalidSelectionError, match="'raise' or 'drop'"):
        binding_task(llama, unusable="skip")


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


# ---- words checked where they stand: a BPE tokenizer whose long names are one token only
# after a space (as " Bartholomew" is for gemma-3-270m, and four tokens at the start) ----

_STARTERS = ["Alice", "Bob", "Kim", "Tom"]
_MID_ONLY = ["Bartholomew", "Maximilian"]


class _TokenizerOnly:
    """What ``binding_task`` needs of a model: a tokenizer and ``to_tokens`` (BOS first)."""

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer

    def to_tokens(self, text: str) -> torch.Tensor:
        ids = self.tokenizer.encode(text, add_special_tokens=False)
        return torch.tensor([[self.tokenizer.bos_token_id, *ids]])

    def to_str_tokens(self, tokens: torch.Tensor) -> list[str]:
        return [self.tokenizer.decode([int(t)]) for t in tokens]


@pytest.fixture(scope="module")
def bpe():
    """A byte-level BPE trained on binding prompts where the long names never start a line."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    colors = ["red", "blue", "green", "gold"]
    lines = [f"{s} likes {colors[(i + j) % 4]}. {m} likes {colors[j % 4]}.\nQuestion: What "
             f"color does {m} like?\nAnswer: {m} likes {colors[i]}"
             for i, s in enumerate(_STARTERS) for j, m in enumerate(_STARTERS + _MID_ONLY)]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(lines * 5, trainers.BpeTrainer(
        vocab_size=600, special_tokens=["<bos>"], show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    model = _TokenizerOnly(PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<bos>"))
    # the premise: one token after a space, several at the start of the text
    for name in _MID_ONLY:
        assert len(model.tokenizer.encode(" " + name)) == 1 < len(model.tokenizer.encode(name))
    return model


ISSUE_ORDER = ["Bartholomew", "Maximilian", "Alice", "Bob", "Kim", "Tom"]


@pytest.mark.parametrize("order", [ISSUE_ORDER, ISSUE_ORDER[::-1],
                                   ISSUE_ORDER[2:] + ISSUE_ORDER[:2]])
def test_entity_order_does_not_matter_and_long_names_are_used_after_a_space(bpe, order):
    task = binding_task(bpe, n_prompts=12, n_pairs=6, seed=0, entities=order,
                        attributes=["red", "blue", "green", "gold"])
    _check_task(bpe, task)
    assert task.skipped == {}
    assert all(set(es) == set(ISSUE_ORDER) for es in task.entities)  # nothing dropped
    assert all(es[0] in _STARTERS for es in task.entities)  # only those can start the text
    queried = {es[int(q)] for es, q in zip(task.entities, task.query_pair)}
    assert queried & set(_MID_ONLY)  # and the long names are asked about too


@settings(max_examples=25, deadline=None)
@given(st.permutations(ISSUE_ORDER + ["Zorblaxian"]))
def test_word_checks_are_per_word(bpe, words):
    checks = {c.word: c for c in check_words(bpe.tokenizer, words, BINDING_TEMPLATES["color"],
                                              "entity", "red")}
    assert {w for w, c in checks.items() if c.usable} == set(ISSUE_ORDER)
    assert {w for w, c in checks.items() if c.can_start} == set(_STARTERS)
    assert set(checks["Zorblaxian"].problems) == {"first statement", "later statement",
                                                   "question"}


def test_each_rejected_word_is_named_with_where_and_why(bpe):
    with pytest.raises(InvalidSelectionError) as info:
        binding_task(bpe, n_pairs=2, entities=["Zorblaxian", "Alice", "Bob", "Quuxley"],
                     attributes=["red", "blue"])
    message = str(info.value)
    for word in ("'Zorblaxian'", "'Quuxley'"):
        assert word in message
    assert "8 tokens ('Z', 'o'" in message and "after a space (in the later statement)" in message
    assert "at the start of the text (in the first statement)" in message
    assert "'Alice'" not in message and "'Bob'" not in message


def test_no_entity_that_can_start_the_text_is_a_clear_error(bpe):
    with pytest.raises(InvalidSelectionError, match="none of the 2 usable entities .* first "
                       "statement.*'Bartholomew': 3 tokens"):
        binding_task(bpe, n_pairs=2, entities=_MID_ONLY, attributes=["red", "blue"])
    # a preamble puts the first entity after a space: then they are fine
    template = BindingTemplate(preamble="Here is what everyone likes.")
    task = binding_task(bpe, n_prompts=3, n_pairs=2, entities=_MID_ONLY,
                        attributes=["red", "blue"], template=template)
    _check_task(bpe, task)


def test_built_in_templates_and_pools_are_consistent():
    for name, template in BINDING_TEMPLATES.items():
        pool = template.attribute_pool
        assert len(set(pool)) == len(pool) >= 20, name
        assert template.question.rstrip().endswith(template.statement.split("{attribute}")[0]
                                                   .replace("{entity}", "").rstrip()), name
    names = DEFAULT_ENTITIES + MORE_ENTITIES
    assert len(set(names)) == len(names) >= 500
    assert len(set(OBJECTS)) >= 256


def test_named_templates_build_correct_tasks(llama):
    # the tiny word-level vocabulary has colours but not the other pools' words
    for name in BINDING_TEMPLATES:
        task = binding_task(llama, n_prompts=3, n_pairs=3, seed=0, template=name,
                            attributes=["red", "blue", "green"])
        _check_task(llama, task)
        assert task.template is BINDING_TEMPLATES[name]
    with pytest.raises(InvalidSelectionError, match="only 0 of the attributes"):
        binding_task(llama, template="city")  # all its cities are <unk> here, so dropped


@pytest.mark.slow
@pytest.mark.parametrize("fixture", ["gemma", "smollm2"])
@pytest.mark.parametrize("template", list(BINDING_TEMPLATES))
def test_256_pairs_on_real_tokenizers(fixture, template, request):
    model = request.getfixturevalue(fixture)
    task = binding_task(model, n_prompts=2, n_pairs=256, seed=0, template=template)
    _check_task(model, task)
    if template == "object":
        assert all(len(set(attrs)) == 256 for attrs in task.attributes)


@pytest.mark.slow
def test_issue_entities_on_gemma(gemma):
    for order in (ISSUE_ORDER, ISSUE_ORDER[::-1]):
        task = binding_task(gemma, n_prompts=8, n_pairs=6, seed=0, entities=order)
        _check_task(gemma, task)
        assert all(set(es) == set(ISSUE_ORDER) for es in task.entities)
