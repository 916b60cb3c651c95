r"""Entity-attribute binding prompts for language models (paper A, section on LLMs).

A prompt states ``n_pairs`` bindings and asks about one of them::

    <bos>Alice likes red. Bob likes blue. Carol likes green.
    Question: What color does Bob like?
    Answer: Bob likes            → " blue"

Every entity and attribute is **one token** in the model's tokenizer *in the context where
it appears* (checked by tokenizing the template with the word and with a reference word),
so all prompts of a task have the same token length and can be batched without padding
(padding would shift RoPE positions). Entities within a prompt are distinct; attributes
are distinct when there are enough of them, else drawn with replacement (the answer stays
unique because the entity is). Which pair is queried is drawn uniformly.

Choices, and why (paper A's exact template and vocabularies are unknown):

* the paper's question ("What color does Alice like?"), followed by ``Answer: Alice likes``
  so that the answer is the very next token: on gemma-3-270m and smollm2-135m this scored
  best of the templates we tried (bare question, ``Answer:`` alone, "favourite colour is");
* colours as attributes (the paper's example) and common first names as entities, filtered
  per tokenizer; both lists are arguments;
* a fixed seed: the same call gives the same prompts.

:func:`evaluate_binding` scores the model's next-token logits: accuracy (argmax over the
whole vocabulary), accuracy among the attributes present in the prompt, and the logit
difference ``logit(answer) − mean logit(other attributes in the prompt)``.
:func:`random_token_prompts` gives task-free prompts of ordinary word tokens.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any, Sequence

import torch
from jaxtyping import Bool, Float, Int
from torch import Tensor

from .._inputs import as_tokens
from ..errors import InvalidSelectionError

__all__ = [
    "BindingTemplate",
    "BindingTask",
    "BindingResult",
    "binding_task",
    "evaluate_binding",
    "binding_logit_diff",
    "random_token_prompts",
    "single_token_words",
    "DEFAULT_ENTITIES",
    "DEFAULT_COLORS",
]

DEFAULT_ENTITIES: tuple[str, ...] = tuple(
    "Alice Bob Carol Dave Emma Frank Grace Henry Ivy Jack Kate Leo Mia Nick Olivia Paul "
    "Quinn Rose Sam Tom Uma Victor Wendy Xavier Yara Zoe Anna Ben Chloe Dan Eva Finn Gina "
    "Hugo Iris Jake Lily Max Nora Oscar Peter Ruby Sara Tim Vera Will Amy Adam Beth Carl "
    "Dora Eric Fred Gary Hank Ida Joe Kim Liam Mark Ned Owen Pam Ray Sue Ted Val Wes Zack "
    "Luke John Mary Jane Lucy Rita Tina Alan Bill Emily Greg Jill Kyle Lisa Mike Neil Rob "
    "Ruth Steve Todd".split()
)
DEFAULT_COLORS: tuple[str, ...] = tuple(
    "red blue green yellow black white orange purple pink brown gray gold silver violet "
    "cyan teal navy maroon beige tan".split()
)


@dataclass(frozen=True)
class BindingTemplate:
    """How a binding prompt is written.

    Attributes:
        statement: one binding, with ``{entity}`` and ``{attribute}``.
        question: the query, with ``{entity}`` (may appear more than once); the answer
            is the token that follows it.
        joiner: between statements.
    """

    statement: str = "{entity} likes {attribute}."
    question: str = "\nQuestion: What color does {entity} like?\nAnswer: {entity} likes"
    joiner: str = " "
    preamble: str = ""

    def __post_init__(self) -> None:
        for name, text, needed in (("statement", self.statement, ("{entity}", "{attribute}")),
                                   ("question", self.question, ("{entity}",))):
            missing = [n for n in needed if n not in text]
            if missing:
                raise InvalidSelectionError(
                    f"the binding template's {name} {text!r} lacks {', '.join(missing)}"
                )
        if "{attribute}" in self.question:
            raise InvalidSelectionError(
                "the binding template's question must not contain {attribute}: it would "
                "give the answer away"
            )

    def prompt(self, entities: Sequence[str], attributes: Sequence[str], query: int
               ) -> tuple[str, list[tuple[int, int]], list[tuple[int, int]]]:
        """The prompt text and the character spans of each entity and attribute in it."""
        text = self.preamble + (self.joiner if self.preamble else "")
        e_spans, a_spans = [], []
        for i, (entity, attribute) in enumerate(zip(entities, attributes)):
            if i:
                text += self.joiner
            statement = self.statement.format(entity=entity, attribute=attribute)
            e_at = self.statement.index("{entity}")
            a_at = self.statement.index("{attribute}")
            # offsets of the slots once the other slot is filled in
            e_start = len(text) + e_at + (len(attribute) - len("{attribute}") if a_at < e_at else 0)
            a_start = len(text) + a_at + (len(entity) - len("{entity}") if e_at < a_at else 0)
            e_spans.append((e_start, e_start + len(entity)))
            a_spans.append((a_start, a_start + len(attribute)))
            text += statement
        return text + self.question.format(entity=entities[query]), e_spans, a_spans


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


def single_token_words(tokenizer: Any, words: Sequence[str], contexts: Sequence[str]) -> list[str]:
    """The words that are exactly one token in every context (each with one ``{w}``).

    A word must be one known token on its own (``" " + word``), and in each context the
    tokenization with it and with a reference word (the first that passes on its own) must
    have the same length and differ exactly where ``{w}`` stands: so no neighbour merges
    with it.
    """
    unknown = getattr(tokenizer, "unk_token_id", None)

    def alone(word: str) -> bool:
        ids = _encode(tokenizer, " " + word)
        return len(ids) == 1 and ids[0] != unknown

    words = [w for w in dict.fromkeys(words) if alone(w)]
    if not words:
        return []
    reference = words[0]
    ok = []
    for word in words:
        for ctx in contexts:
            a, b = _encode(tokenizer, ctx.format(w=word)), _encode(tokenizer, ctx.format(w=reference))
            differ = sum(x != y for x, y in zip(a, b))
            if len(a) != len(b) or (word != reference and differ != ctx.count("{w}")):
                break
        else:
            ok.append(word)
    return ok


def _slot_contexts(template: BindingTemplate, entity: str, attribute: str
                   ) -> tuple[list[str], list[str]]:
    """Contexts checking an entity / an attribute in each slot, between real neighbours.

    ``entity`` and ``attribute`` fill the slot not under test. An entity is checked in the
    first statement (right after the preamble, or at the start of the text) and in a later
    one, and in the question; an attribute in a later statement.
    """
    start = template.preamble + (template.joiner if template.preamble else "")
    lead = start + template.statement.format(entity=entity, attribute=attribute) + template.joiner
    statement_e = template.statement.format(entity="{w}", attribute=attribute)
    statement_a = template.statement.format(entity=entity, attribute="{w}")
    question = template.question.replace("{entity}", "{w}")
    return ([start + statement_e, lead + statement_e, lead + question], [lead + statement_a])


def binding_task(
    model: Any,
    *,
    n_prompts: int = 32,
    n_pairs: int = 4,
    seed: int = 0,
    entities: Sequence[str] = DEFAULT_ENTITIES,
    attributes: Sequence[str] = DEFAULT_COLORS,
    template: BindingTemplate | None = None,
) -> BindingTask:
    """Build ``n_prompts`` binding prompts of ``n_pairs`` bindings each for ``model``.

    Args:
        model: a bridge (its tokenizer and ``to_tokens`` are used).
        n_prompts, n_pairs: batch size and bindings per prompt.
        seed: the prompts are a function of the seed (Python's ``random.Random``).
        entities, attributes: candidate words; those that are not one token in context
            are dropped.
        template: how a prompt is written (default: see the module docstring).

    Raises:
        InvalidSelectionError: too few single-token entities for ``n_pairs``, fewer than
            two single-token attributes, or a non-positive count.
    """
    template = template or BindingTemplate()
    if n_prompts < 1 or n_pairs < 1:
        raise InvalidSelectionError(
            f"n_prompts and n_pairs must be at least 1 (got {n_prompts}, {n_pairs})"
        )
    tokenizer = model.tokenizer
    entity_ctx, attribute_ctx = _slot_contexts(template, entities[0], attributes[0])
    ents = single_token_words(tokenizer, entities, entity_ctx)
    attrs = single_token_words(tokenizer, attributes, attribute_ctx)
    if len(ents) < n_pairs:
        raise InvalidSelectionError(
            f"only {len(ents)} of the {len(set(entities))} entities are single tokens for this "
            f"tokenizer, fewer than n_pairs={n_pairs}; lower n_pairs or pass more entities"
        )
    if len(attrs) < 2:
        raise InvalidSelectionError(
            f"only {len(attrs)} of the attributes are single tokens for this tokenizer; "
            "pass at least two that are"
        )
    rng = random.Random(seed)
    prompts, spans, chosen_e, chosen_a, queries = [], [], [], [], []
    for _ in range(n_prompts):
        es = rng.sample(ents, n_pairs)
        if n_pairs <= len(attrs):
            as_ = rng.sample(attrs, n_pairs)
        else:
            as_ = [rng.choice(attrs) for _ in range(n_pairs)]
        q = rng.randrange(n_pairs)
        if n_pairs > 1 and all(a == as_[q] for a in as_):  # keep at least one distractor
            as_[(q + 1) % n_pairs] = next(a for a in attrs if a != as_[q])
        text, e_spans, a_spans = template.prompt(es, as_, q)
        prompts.append(text)
        spans.append((e_spans, a_spans))
        chosen_e.append(es)
        chosen_a.append(as_)
        queries.append(q)
    tokens = as_tokens(model, prompts)
    e_pos, a_pos = _locate(tokenizer, tokens.cpu(), prompts, spans)
    cpu = tokens.cpu()
    entity_ids, attribute_ids = cpu.gather(1, e_pos), cpu.gather(1, a_pos)
    query = torch.tensor(queries)
    return BindingTask(
        prompts=prompts, tokens=tokens,
        answers=attribute_ids.gather(1, query[:, None])[:, 0].to(tokens.device),
        entity_ids=entity_ids.to(tokens.device), attribute_ids=attribute_ids.to(tokens.device),
        entity_positions=e_pos.to(tokens.device), attribute_positions=a_pos.to(tokens.device),
        query_pair=query.to(tokens.device), entities=chosen_e, attributes=chosen_a,
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


@dataclass
class BindingResult:
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

    def as_dict(self) -> dict[str, float]:
        return {"accuracy": self.accuracy, "candidate_accuracy": self.candidate_accuracy,
                "logit_diff": self.logit_diff}


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


def evaluate_binding(model: Any, task: BindingTask,
                     logits: Float[Tensor, "batch pos d_vocab"] | None = None) -> BindingResult:
    """Score ``model`` on ``task`` (or score ``logits`` already computed, e.g. under hooks)."""
    if logits is None:
        with torch.no_grad():
            logits = model(task.tokens)
    last = logits[:, -1].detach().float()
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


def random_token_prompts(model: Any, *, n_prompts: int = 8, n_tokens: int = 64,
                         seed: int = 0) -> Int[Tensor, "batch pos"]:
    """Task-free prompts: ``n_tokens`` ordinary word tokens drawn at random, BOS first.

    ``n_tokens`` counts the BOS (when the model's tokenizer has one), so the result is
    ``[n_prompts, n_tokens]``.
    """
    if n_prompts < 1 or n_tokens < 2:
        raise InvalidSelectionError(
            f"need n_prompts >= 1 and n_tokens >= 2 (got {n_prompts}, {n_tokens})"
        )
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
