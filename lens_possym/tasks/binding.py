r"""Entity-attribute binding prompts for language models (paper A, section on LLMs).

A prompt states ``n_pairs`` bindings and asks about one of them::

    <bos>Alice likes red. Bob likes blue. Carol likes green.
    Question: What color does Bob like?
    Answer: Bob likes            → " blue"

Every entity and attribute is **one token** in the model's tokenizer *where it stands in
the prompt* (see :func:`check_words`), so all prompts of a task have the same token length
and can be batched without padding (padding would shift RoPE positions). Entities within a
prompt are distinct; attributes are distinct when there are enough of them, else drawn
with replacement (the answer stays unique because the entity is). Which pair is queried is
drawn uniformly.

**Where a word is checked.** A word is tokenized inside a real two-statement prompt of the
template, in every slot it can fill: an entity in the first statement (for the default
template that is the start of the text, where " Bartholomew" — one token after a space —
is four), in a later statement and in the question; an attribute in the first and in a
later statement. A word that is not one token in a later statement or in the question is
*rejected*. An entity that is one token everywhere but at the start of the text is
*usable*, but never drawn into the first slot (the first slot takes the first entity of a
prompt's sample that can stand there, else a random one that can). The check is per word,
so the order of a list does not matter. From the built-in pools, names that can also start
the text are preferred while there are ``n_pairs`` of them: earlier versions used only
those, so their prompts are unchanged.

**Pools.** Passed pools (``entities=``, ``attributes=``) are taken as meant: a rejected word
is an error naming every rejected word and why (``unusable="drop"`` skips them instead,
listed in :attr:`BindingTask.skipped`). The built-in pools are larger than any tokenizer
needs and are filtered per tokenizer (skipped words listed the same way): entities from
:data:`DEFAULT_ENTITIES` (89 common first names; used alone while they suffice, so that
prompts of up to ~80 pairs are those of earlier versions) extended by
:data:`MORE_ENTITIES` (523 names in all; 256+ usable on gemma-3-270m's and smollm2-135m's
tokenizers), and attributes from the template's own pool.

**Templates** (:data:`BINDING_TEMPLATES`, pass the name or a :class:`BindingTemplate`):
``"color"`` (the default: "Alice likes red."), ``"city"`` ("Alice lives in Paris."),
``"animal"`` ("Alice feeds the horse.") and ``"object"`` ("Alice has the key.", 280+
single-token attributes, so that 256 pairs can have distinct attributes).

Choices, and why (paper A's exact template and vocabularies are unknown):

* the paper's question ("What color does Alice like?"), followed by ``Answer: Alice likes``
  so that the answer is the very next token: on gemma-3-270m and smollm2-135m this scored
  best of the templates we tried (bare question, ``Answer:`` alone, "favourite colour is");
* colours as attributes (the paper's example) and common first names as entities;
* a fixed seed: the same call gives the same prompts.

:func:`evaluate_binding` scores the model's next-token logits: accuracy (argmax over the
whole vocabulary), accuracy among the attributes present in the prompt, and the logit
difference ``logit(answer) − mean logit(other attributes in the prompt)``.
:func:`random_token_prompts` gives task-free prompts of ordinary word tokens.
"""

from __future__ import annotations

import logging
import random
from dataclasses import dataclass, field
from typing import Any, Literal, Sequence

import torch
from jaxtyping import Bool, Float, Int
from torch import Tensor

from .._checks import boundary
from .._inputs import as_tokens, check_count
from ..errors import InvalidSelectionError
from ..typing import HookedModel
from ..errors import NonFiniteResultError
from ..results_io import ResultIO
from .templates import (
    ANIMALS,
    BINDING_TEMPLATES,
    CITIES,
    DEFAULT_COLORS,
    DEFAULT_ENTITIES,
    MORE_ENTITIES,
    OBJECTS,
    BindingTemplate,
    binding_template,
)

__all__ = [
    "BindingTemplate",
    "BindingTask",
    "BindingResult",
    "ImportanceBatch",
    "WordCheck",
    "binding_task",
    "binding_task_from",
    "check_words",
    "evaluate_binding",
    "binding_logit_diff",
    "random_token_prompts",
    "single_token_words",
    "BINDING_TEMPLATES",
    "DEFAULT_ENTITIES",
    "MORE_ENTITIES",
    "DEFAULT_COLORS",
    "CITIES",
    "ANIMALS",
    "OBJECTS",
]

logger = logging.getLogger(__name__)

@dataclass
class BindingTask:
    """A batch of binding prompts of equal token length.

    Attributes:
        prompts: the texts.
        tokens: ``[batch, pos]`` token ids (BOS first when the model uses one).
        answers: ``[batch]`` token id of the queried entity's attribute.
        entity_ids, attribute_ids: ``[batch, n_pairs]`` token ids, in prompt order.
        entity_positions, attribute_positions: ``[batch, n_pairs]`` where they stand.
        query_pair: ``[batch]`` which pair is asked about.
        entities, attributes: the words used, per prompt.
        template, seed: how the task was made.
        skipped: ``{word: why}`` for pool words left out as not single tokens in context.
    """

    prompts: list[str]
    tokens: Int[Tensor, "batch pos"]
    answers: Int[Tensor, "batch"]
    entity_ids: Int[Tensor, "batch n_pairs"]
    attribute_ids: Int[Tensor, "batch n_pairs"]
    entity_positions: Int[Tensor, "batch n_pairs"]
    attribute_positions: Int[Tensor, "batch n_pairs"]
    query_pair: Int[Tensor, "batch"]
    entities: list[list[str]]
    attributes: list[list[str]]
    template: BindingTemplate = field(default_factory=BindingTemplate)
    seed: int = 0
    skipped: dict[str, str] = field(default_factory=dict)

    @property
    def n_prompts(self) -> int:
        return self.tokens.shape[0]

    @property
    def n_pairs(self) -> int:
        return self.entity_ids.shape[1]

    @property
    def answer_positions(self) -> Int[Tensor, "batch"]:
        """Where the answer's attribute stands in each prompt."""
        return self.attribute_positions.gather(1, self.query_pair[:, None])[:, 0]

    def candidate_mask(self, d_vocab: int) -> Bool[Tensor, "batch d_vocab"]:
        """``[batch, d_vocab]``: the attributes present in each prompt."""
        mask = torch.zeros(self.n_prompts, d_vocab, dtype=torch.bool)
        mask.scatter_(1, self.attribute_ids.cpu(), True)
        return mask

    def to(self, device: str | torch.device) -> "BindingTask":
        for name in ("tokens", "answers", "entity_ids", "attribute_ids", "entity_positions",
                     "attribute_positions", "query_pair"):
            setattr(self, name, getattr(self, name).to(device))
        return self


def _encode(tokenizer: Any, text: str) -> list[int]:
    return list(tokenizer.encode(text, add_special_tokens=False))


def _where(text: str, start: int) -> str:
    if start == 0:
        return "at the start of the text"
    before = text[start - 1]
    return {" ": "after a space", "\n": "after a newline"}.get(before, f"after {before!r}")


def _one_token_problem(tokenizer: Any, text: str, spans: Sequence[tuple[int, int]]
                       ) -> str | None:
    """Why the word at ``spans`` of ``text`` is not exactly one known token, or ``None``.

    The word may share its token only with the whitespace right before it (" Alice" is one
    token in GPT-2-style and SentencePiece vocabularies); a token that reaches into a
    neighbour means the word merges with it, so its length would depend on the neighbour.
    """
    enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    ids, offsets = list(enc["input_ids"]), list(enc["offset_mapping"])
    unknown = getattr(tokenizer, "unk_token_id", None)
    for start, end in spans:
        hits = [i for i, (a, b) in enumerate(offsets) if a < end and b > start]
        pieces = ", ".join(repr(text[offsets[i][0]:offsets[i][1]]) for i in hits)
        lead = start - 1 if start and text[start - 1].isspace() else start
        if len(hits) != 1:
            return f"{len(hits)} tokens ({pieces}) {_where(text, start)}"
        (i,) = hits
        if offsets[i][0] not in (start, lead) or offsets[i][1] != end:
            return f"merges with its neighbours into {pieces} {_where(text, start)}"
        if unknown is not None and ids[i] == unknown:
            return (f"unknown to the tokenizer (it becomes {tokenizer.unk_token!r}) "
                    f"{_where(text, start)}")
    return None


def single_token_words(tokenizer: Any, words: Sequence[str], contexts: Sequence[str]) -> list[str]:
    """The words that are exactly one known token in every context (each with ``{w}``).

    Each word is checked on its own (no reference word), so the result does not depend on
    the order of ``words``; the order of the survivors is kept.
    """
    ok = []
    for word in dict.fromkeys(words):
        for ctx in contexts:
            head, *rest = ctx.split("{w}")
            spans, at = [], len(head)
            for tail in rest:
                spans.append((at, at + len(word)))
                at += len(word) + len(tail)
            if _one_token_problem(tokenizer, ctx.replace("{w}", word), spans) is not None:
                break
        else:
            ok.append(word)
    return ok


@dataclass
class ImportanceBatch:
    """Prompts of equal length and what the built-in metrics compare at the last position.

    A prompt set, not an intervention: the tasks build one (:meth:`from_binding`,
    :meth:`~lens_possym.tasks.WordDistanceTask.importance_batch`) and
    :func:`~lens_possym.interventions.head_importance` reads it.

    Attributes:
        tokens: ``[batch, pos]``.
        answers: ``[batch]`` the correct next token (accuracy, logit_diff, loss).
        distractors: ``[batch]`` or ``[batch, n_distractors]`` tokens the answer is compared
            with by ``logit_diff`` (their mean logit).
        name: what the prompts are (for reports).
    """

    tokens: Int[Tensor, "batch pos"]
    answers: Int[Tensor, "batch"] | None = None
    distractors: Int[Tensor, "batch"] | Int[Tensor, "batch n_distractors"] | None = None
    name: str = ""

    def __post_init__(self) -> None:
        tokens = self.tokens
        if not isinstance(tokens, Tensor) or tokens.ndim != 2 or tokens.is_floating_point():
            raise InvalidSelectionError("ImportanceBatch.tokens must be integer ids [batch, pos]")
        n = self.tokens.shape[0]
        if self.answers is not None:
            self.answers = torch.as_tensor(self.answers).reshape(-1)
            if self.answers.shape[0] != n:
                raise InvalidSelectionError(
                    f"{self.answers.shape[0]} answers for {n} prompts; give one per prompt")
        if self.distractors is not None:
            d = torch.as_tensor(self.distractors)
            d = d[:, None] if d.ndim == 1 else d
            if d.ndim != 2 or d.shape[0] != n or d.shape[1] == 0:
                raise InvalidSelectionError(
                    f"distractors must be [batch] or [batch, k] with batch {n}, got "
                    f"{tuple(torch.as_tensor(self.distractors).shape)}")
            self.distractors = d

    @property
    def n_prompts(self) -> int:
        return self.tokens.shape[0]

    @classmethod
    def from_binding(cls, task: Any) -> "ImportanceBatch":
        """A binding task's prompts; distractors are the prompt's other attributes, so that
        ``logit_diff`` equals :func:`~lens_possym.tasks.binding_logit_diff` (distinct
        attributes)."""
        keep = torch.ones_like(task.attribute_ids, dtype=torch.bool)
        keep.scatter_(1, task.query_pair[:, None], False)
        others = task.attribute_ids[keep].reshape(task.n_prompts, task.n_pairs - 1)
        return cls(tokens=task.tokens, answers=task.answers,
                   distractors=others if task.n_pairs > 1 else None,
                   name=f"binding ({task.n_pairs} pairs)")


@dataclass(frozen=True)
class WordCheck:
    """How one word tokenizes in each slot a template can put it in.

    Attributes:
        word: the word.
        role: ``"entity"`` or ``"attribute"``.
        problems: ``{slot: why it is not one token there}`` for the slots where it fails;
            slots are ``"first statement"``, ``"later statement"`` and ``"question"``.
    """

    word: str
    role: Literal["entity", "attribute"]
    problems: dict[str, str]

    @property
    def usable(self) -> bool:
        """Can appear in a prompt: an entity only needs the later slots (see module doc)."""
        if self.role == "entity":
            return not (self.problems.keys() - {"first statement"})
        return not self.problems

    @property
    def can_start(self) -> bool:
        """Can fill the first statement's slot."""
        return "first statement" not in self.problems

    def reason(self) -> str:
        return "; ".join(f"{why} (in the {slot})" for slot, why in self.problems.items())


def check_words(tokenizer: Any, words: Sequence[str], template: BindingTemplate,
                role: Literal["entity", "attribute"], filler: str) -> list[WordCheck]:
    """Check each of ``words`` in every slot of ``template`` that ``role`` fills.

    Each word is tokenized in a two-statement prompt where it fills both statements'
    ``role`` slots (and, for entities, the question), with ``filler`` in the other slots.
    Duplicates are checked once; the order of ``words`` is kept.
    """
    checks = []
    for word in dict.fromkeys(words):
        if role == "entity":
            text, spans, _ = template.prompt([word, word], [filler, filler], 1)
            question = template.question.format(entity=word)
            slots = {"first statement": [spans[0]], "later statement": [spans[1]],
                     "question": template.question_spans(word, len(text) - len(question))}
        else:
            text, _, spans = template.prompt([filler, filler], [word, word], 0)
            slots = {"first statement": [spans[0]], "later statement": [spans[1]]}
        problems = {}
        for slot, slot_spans in slots.items():
            problem = _one_token_problem(tokenizer, text, slot_spans) if word.strip() else \
                "empty"
            if problem is not None:
                problems[slot] = problem
        checks.append(WordCheck(word, role, problems))
    return checks


def _rejected(checks: Sequence[WordCheck]) -> list[WordCheck]:
    return [c for c in checks if not c.usable]


def _reject_message(what: str, rejected: Sequence[WordCheck]) -> str:
    listed = "; ".join(f"{c.word!r}: {c.reason()}" for c in rejected)
    return (f"{len(rejected)} {what} are not single tokens where the template puts them, for "
            f"this tokenizer: {listed}. Remove them, or pass unusable='drop' to skip them")


def _usable_words(tokenizer: Any, pools: Sequence[Sequence[str]], template: BindingTemplate,
                  role: Literal["entity", "attribute"], filler: str, needed: int,
                  unusable: str, what: str) -> tuple[list[WordCheck], dict[str, str]]:
    """The usable words of the first pool with at least ``needed`` of them (else the last).

    Returns the usable checks and ``{skipped word: reason}``; raises on any unusable word
    when ``unusable == "raise"``.
    """
    for pool in pools:
        checks = check_words(tokenizer, pool, template, role, filler)
        rejected = _rejected(checks)
        if rejected and unusable == "raise":
            raise InvalidSelectionError(_reject_message(what, rejected))
        usable = [c for c in checks if c.usable]
        if len(usable) >= needed:
            break
    skipped = {c.word: c.reason() for c in rejected}
    if skipped:
        logger.debug("binding_task skipped %d %s: %s", len(skipped), what, skipped)
    return usable, skipped


def _draw_entities(rng: random.Random, ents: list[str], starters: set[str], n_pairs: int
                   ) -> list[str]:
    """``n_pairs`` distinct entities, the first one that can start a prompt.

    When every entity can start (the usual case), this is ``rng.sample(ents, n_pairs)``
    exactly, so such prompts are those of earlier versions.
    """
    chosen = rng.sample(ents, n_pairs)
    if chosen[0] not in starters:
        swap = next((i for i, e in enumerate(chosen) if e in starters), None)
        if swap is not None:
            chosen[0], chosen[swap] = chosen[swap], chosen[0]
        else:
            chosen[0] = rng.choice([e for e in ents if e in starters and e not in chosen])
    return chosen


@boundary
def binding_task(
    model: HookedModel,
    *,
    n_prompts: int = 32,
    n_pairs: int = 4,
    seed: int = 0,
    entities: Sequence[str] | None = None,
    attributes: Sequence[str] | None = None,
    template: BindingTemplate | str | None = None,
    unusable: Literal["raise", "drop"] | None = None,
) -> BindingTask:
    """Build ``n_prompts`` binding prompts of ``n_pairs`` bindings each for ``model``.

    Args:
        model: a bridge (its tokenizer and ``to_tokens`` are used).
        n_prompts, n_pairs: batch size and bindings per prompt.
        seed: the prompts are a function of the seed (Python's ``random.Random``).
        entities, attributes: candidate words (default: the built-in pools, see the module
            docstring; attributes default to the template's ``attribute_pool``).
        template: a :class:`BindingTemplate` or a name in :data:`BINDING_TEMPLATES`
            (default ``"color"``).
        unusable: what to do with a word that is not one token where the template puts
            it: ``"raise"`` (the default for pools you pass) or ``"drop"`` (the default
            for the built-in pools); dropped words are listed in ``task.skipped``.

    Raises:
        InvalidSelectionError: an unusable word in a passed pool (each named, with why),
            too few usable entities for ``n_pairs``, no entity that can stand in the first
            statement, fewer than two usable attributes, or a non-positive count.
    """
    template = binding_template(template)
    check_count("n_prompts", n_prompts)
    check_count("n_pairs", n_pairs, high=1000)
    if unusable not in (None, "raise", "drop"):
        raise InvalidSelectionError(f"unusable must be 'raise' or 'drop', got {unusable!r}")
    tokenizer = model.tokenizer
    entity_pools = [entities] if entities is not None else [
        DEFAULT_ENTITIES, DEFAULT_ENTITIES + MORE_ENTITIES]
    attribute_pool = template.attribute_pool if attributes is None else attributes
    if not entity_pools[0] or not attribute_pool:
        raise InvalidSelectionError("the entity and attribute pools must not be empty")
    usable_e, skipped_e = _usable_words(
        tokenizer, entity_pools, template, "entity", attribute_pool[0], n_pairs,
        unusable or ("raise" if entities is not None else "drop"), "entities")
    usable_a, skipped_a = _usable_words(
        tokenizer, [attribute_pool], template, "attribute", entity_pools[0][0], 2,
        unusable or ("raise" if attributes is not None else "drop"), "attributes")
    if entities is None and sum(c.can_start for c in usable_e) >= n_pairs:
        # built-in pools: names that can also start the text, while they suffice (this
        # keeps the prompts of earlier versions, which used only those)
        usable_e = [c for c in usable_e if c.can_start]
    ents = [c.word for c in usable_e]
    attrs = [c.word for c in usable_a]
    starters = {c.word for c in usable_e if c.can_start}
    n_given = len(set(entity_pools[-1]))
    if len(ents) < n_pairs:
        raise InvalidSelectionError(
            f"only {len(ents)} of the {n_given} entities are single tokens for this "
            f"tokenizer, fewer than n_pairs={n_pairs}; lower n_pairs or pass more entities"
        )
    if not starters:
        examples = "; ".join(f"{c.word!r}: {c.problems['first statement']}" for c in usable_e[:3])
        raise InvalidSelectionError(
            f"none of the {len(ents)} usable entities is one token in the first statement "
            f"({examples}); add one that is, or use a template with a preamble"
        )
    if len(attrs) < 2:
        raise InvalidSelectionError(
            f"only {len(attrs)} of the attributes are single tokens for this tokenizer; "
            "pass at least two that are"
        )
    rng = random.Random(seed)
    chosen_e, chosen_a, queries = [], [], []
    for _ in range(n_prompts):
        es = _draw_entities(rng, ents, starters, n_pairs)
        if n_pairs <= len(attrs):
            as_ = rng.sample(attrs, n_pairs)
        else:
            as_ = [rng.choice(attrs) for _ in range(n_pairs)]
        q = rng.randrange(n_pairs)
        if n_pairs > 1 and all(a == as_[q] for a in as_):  # keep at least one distractor
            as_[(q + 1) % n_pairs] = next(a for a in attrs if a != as_[q])
        chosen_e.append(es)
        chosen_a.append(as_)
        queries.append(q)
    task = binding_task_from(model, chosen_e, chosen_a, queries, template=template, seed=seed)
    task.skipped = {**skipped_e, **skipped_a}
    return task


def binding_task_from(model: HookedModel, entities: Sequence[Sequence[str]],
                      attributes: Sequence[Sequence[str]], query_pair: Sequence[int], *,
                      template: BindingTemplate | str | None = None, seed: int = 0
                      ) -> BindingTask:
    """The binding task of given bindings: prompt ``b`` binds ``entities[b][i]`` to
    ``attributes[b][i]`` and asks about pair ``query_pair[b]`` (what :func:`binding_task`
    draws; counterfactual prompts are built from edited lists).

    Raises:
        InvalidSelectionError: lists of different lengths, a query out of range, or a
            word that is not one token where it stands (prompts must also tokenize to one
            length).
    """
    template = binding_template(template)
    entities, attributes = [list(e) for e in entities], [list(a) for a in attributes]
    queries = [int(q) for q in query_pair]
    if not (len(entities) == len(attributes) == len(queries)) or not entities:
        raise InvalidSelectionError(
            f"give one entity list, attribute list and query per prompt (got {len(entities)}, "
            f"{len(attributes)}, {len(queries)})")
    n_pairs = len(entities[0])
    for b, (es, as_, q) in enumerate(zip(entities, attributes, queries)):
        if len(es) != n_pairs or len(as_) != n_pairs or not 0 <= q < n_pairs:
            raise InvalidSelectionError(
                f"prompt {b}: {len(es)} entities, {len(as_)} attributes and query {q}; every "
                f"prompt needs {n_pairs} of each and a query in 0..{n_pairs - 1}")
    prompts, spans = [], []
    for es, as_, q in zip(entities, attributes, queries):
        text, e_spans, a_spans = template.prompt(es, as_, q)
        prompts.append(text)
        spans.append((e_spans, a_spans))
    tokens = as_tokens(model, prompts)
    e_pos, a_pos = _locate(model.tokenizer, tokens.cpu(), prompts, spans)
    cpu = tokens.cpu()
    entity_ids, attribute_ids = cpu.gather(1, e_pos), cpu.gather(1, a_pos)
    query = torch.tensor(queries)
    return BindingTask(
        prompts=prompts, tokens=tokens,
        answers=attribute_ids.gather(1, query[:, None])[:, 0].to(tokens.device),
        entity_ids=entity_ids.to(tokens.device), attribute_ids=attribute_ids.to(tokens.device),
        entity_positions=e_pos.to(tokens.device), attribute_positions=a_pos.to(tokens.device),
        query_pair=query.to(tokens.device), entities=entities, attributes=attributes,
        template=template, seed=seed,
    )


def _locate(tokenizer: Any, tokens: Tensor, prompts: list[str], spans: list) -> tuple[Tensor, Tensor]:
    """Token positions of each entity and attribute, from the tokenizer's character offsets.

    Raises if a word does not occupy exactly one token of the model's tokens.
    """
    e_pos = torch.empty(len(prompts), len(spans[0][0]), dtype=torch.long)
    a_pos = torch.empty_like(e_pos)
    for b, (text, (e_spans, a_spans)) in enumerate(zip(prompts, spans)):
        enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
        shift = tokens.shape[1] - len(enc["input_ids"])  # prepended BOS
        if shift < 0 or tokens[b, shift:].tolist() != list(enc["input_ids"]):
            raise InvalidSelectionError(
                f"the model's tokens of prompt {b} differ from its tokenizer's; cannot locate "
                "the bindings"
            )
        ends = {end: i for i, (_, end) in enumerate(enc["offset_mapping"])}
        for out, word_spans in ((e_pos, e_spans), (a_pos, a_spans)):
            for i, (start, end) in enumerate(word_spans):
                index = ends.get(end)
                token_start = enc["offset_mapping"][index][0] if index is not None else None
                if index is None or token_start not in (start, start - 1) or (
                    index > 0 and enc["offset_mapping"][index - 1][1] > start
                ):
                    raise InvalidSelectionError(
                        f"{text[start:end]!r} is not a single token in prompt {text!r}; "
                        "the template tokenizes differently from its parts"
                    )
                out[b, i] = index + shift
    return e_pos, a_pos


@dataclass(repr=False)
class BindingResult(ResultIO):
    """How a model does on a :class:`BindingTask`.

    Attributes:
        accuracy: share of prompts whose top next token (whole vocabulary) is the answer.
        candidate_accuracy: share whose top token *among the prompt's attributes* is it.
        logit_diff: mean over prompts of ``logit(answer) − mean logit(other attributes)``.
        correct, candidate_correct: ``[batch]`` per prompt.
        logit_diffs: ``[batch]`` per prompt.
    """

    accuracy: float
    candidate_accuracy: float
    logit_diff: float
    correct: Bool[Tensor, "batch"]
    candidate_correct: Bool[Tensor, "batch"]
    logit_diffs: Float[Tensor, "batch"]

    FORMAT = "lens-possym/binding-result@1"

    def as_dict(self) -> dict[str, float]:
        return {"accuracy": self.accuracy, "candidate_accuracy": self.candidate_accuracy,
                "logit_diff": self.logit_diff}

    def summary(self) -> dict[str, Any]:
        return {**self.as_dict(), "n_prompts": len(self.correct)}

    def _table(self):
        """One row per prompt: ``prompt``, ``correct``, ``candidate_correct``,
        ``logit_diff``."""
        import pandas as pd

        return pd.DataFrame({"prompt": range(len(self.correct)),
                             "correct": self.correct.cpu().numpy(),
                             "candidate_correct": self.candidate_correct.cpu().numpy(),
                             "logit_diff": self.logit_diffs.double().cpu().numpy()})


def binding_logit_diff(task: BindingTask, logits: Float[Tensor, "batch pos d_vocab"]
                       ) -> Float[Tensor, "batch"]:
    """``logit(answer) − mean logit(other distinct attributes in the prompt)`` per prompt.

    Differentiable, so it also serves as a patching metric
    (``lambda logits: binding_logit_diff(task, logits).mean()``).
    """
    last = logits[:, -1] if logits.ndim == 3 else logits
    mask = task.candidate_mask(last.shape[-1]).to(last.device)
    mask.scatter_(1, task.answers[:, None].to(last.device), False)
    correct = last.gather(1, task.answers[:, None].to(last.device))[:, 0]
    others = (last * mask).sum(-1) / mask.sum(-1).clamp(min=1)
    return correct - others


def last_position_logits(model: HookedModel, tokens: Int[Tensor, "batch pos"],
                         logits: Float[Tensor, "batch pos d_vocab"] | None = None, *,
                         last_only: bool = False) -> Float[Tensor, "batch d_vocab"]:
    """The float logits at the last position: of ``logits`` when given (``[batch, pos,
    d_vocab]``, or already ``[batch, d_vocab]``), else of ``model`` run on ``tokens`` without
    gradients (``last_only``: a bridge unembeds the last position only)."""
    if logits is None:
        with torch.no_grad():
            kwargs = {"logits_to_keep": 1} if last_only and hasattr(model, "original_model") else {}
            logits = model(tokens, **kwargs)
    return (logits[:, -1] if logits.ndim == 3 else logits).detach().float()


@boundary
def evaluate_binding(model: HookedModel, task: BindingTask,
                     logits: Float[Tensor, "batch pos d_vocab"] | None = None) -> BindingResult:
    """Score ``model`` on ``task`` (or score ``logits`` already computed, e.g. under hooks).

    Raises:
        NonFiniteResultError: the logits hold ``nan``/``inf`` (an argmax over them would
            report a made-up accuracy).
    """
    last = last_position_logits(model, task.tokens, logits)
    n_prompts = task.tokens.shape[0]
    d_vocab = getattr(getattr(model, "cfg", None), "d_vocab", None)
    if last.ndim != 2 or last.shape[0] != n_prompts or (d_vocab and last.shape[1] != d_vocab):
        raise InvalidSelectionError(
            f"logits of shape {tuple(logits.shape)} do not fit the task's {n_prompts} prompts "
            f"and the model's {d_vocab} tokens; pass model(task.tokens) (or leave logits out)")
    if not bool(last.isfinite().all()):

        rows = (~last.isfinite()).any(-1).nonzero().flatten().tolist()
        raise NonFiniteResultError(
            f"the logits of prompts {rows[:8]}{' ...' if len(rows) > 8 else ''} hold nan/inf, "
            "so no accuracy can be read from them; check the model's weights and any hooks "
            "that produced them")
    answers = task.answers.to(last.device)
    correct = last.argmax(-1) == answers
    cand = task.candidate_mask(last.shape[-1]).to(last.device)
    cand_correct = last.masked_fill(~cand, float("-inf")).argmax(-1) == answers
    diffs = binding_logit_diff(task, last)
    return BindingResult(
        accuracy=float(correct.float().mean()), candidate_accuracy=float(cand_correct.float().mean()),
        logit_diff=float(diffs.mean()), correct=correct.cpu(), candidate_correct=cand_correct.cpu(),
        logit_diffs=diffs.detach().cpu(),
    )


def _ordinary_token_ids(tokenizer: Any) -> list[int]:
    """Ids of whole-word tokens: a word-start marker then 2+ ASCII letters.

    Tokenizers without word-start markers (word-level ones) take plain words instead.
    """
    special = set(getattr(tokenizer, "all_special_ids", []) or [])
    vocab = {t: i for t, i in tokenizer.get_vocab().items() if i not in special}
    marked = {t[1:]: i for t, i in vocab.items() if t[:1] in ("\u2581", "\u0120")}  # ▁, Ġ
    pool = marked if len(marked) >= 100 else vocab
    return sorted(i for word, i in pool.items()
                  if len(word) >= 2 and word.isascii() and word.isalpha())


@boundary
def random_token_prompts(model: HookedModel, *, n_prompts: int = 8, n_tokens: int = 64,
                         seed: int = 0) -> Int[Tensor, "batch pos"]:
    """Task-free prompts: ``n_tokens`` ordinary word tokens drawn at random, BOS first.

    ``n_tokens`` counts the BOS (when the model's tokenizer has one), so the result is
    ``[n_prompts, n_tokens]``.

    Raises:
        InvalidSelectionError: ``n_prompts`` outside 1..``MAX_PROMPTS``, ``n_tokens``
            below 2 or past the model's context, more than 10^8 ids in all.
    """
    check_count("n_prompts", n_prompts)
    check_count("n_tokens", n_tokens, low=2, high=10 ** 8 // n_prompts)  # context: as_tokens
    tokenizer = model.tokenizer
    pool = torch.tensor(_ordinary_token_ids(tokenizer))
    if len(pool) < 2:
        raise InvalidSelectionError("the tokenizer has no ordinary word tokens to sample from")
    gen = torch.Generator().manual_seed(seed)
    bos = getattr(tokenizer, "bos_token_id", None)
    n_body = n_tokens - (bos is not None)
    body = pool[torch.randint(len(pool), (n_prompts, n_body), generator=gen)]
    if bos is not None:
        body = torch.cat([torch.full((n_prompts, 1), bos), body], dim=1)
    return as_tokens(model, body)
