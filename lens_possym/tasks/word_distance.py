r"""Word-distance prompts for language models: the answer is fixed by *where* words stand.

A prompt lists ``n_words`` distinct one-token words, then repeats ``n_cue`` of them taken
``distance`` positions apart; the answer is the next word at that spacing::

    <bos> rain ring sun bell corn cake moon fork. bell corn cake       → " moon"   (distance 1)
    <bos> rain ring sun bell corn cake moon fork. ring bell cake       → " fork"   (distance 2)
    <bos> rain ring sun bell corn cake moon fork. cake corn bell       → " sun"    (distance -1)

Every word of the list is a candidate, and the contents carry no hint: the answer is the
word standing ``distance`` positions after the cue's last word in the list, so a model
can only find it through positions (which list word matches the cue, and what stands at
the offset from it). ``distance=1`` is the classic induction setting (continue a repeated
segment: previous-token and induction heads); ``2`` (every other word) and ``-1``
(backwards) ask for other offsets.

**Which setting, and why.** On gemma-3-270m we measured 32 prompts per setting (seed 0;
``benchmarks/head_importance.py --probe`` prints the table, ``docs/head_importance.md``
lists it with the question-style variants we also tried): distance 1 with a cue of 2-3
words is answered correctly about 95% of the time (chance 1/8), while distance 2 and -1,
and every explicit question ("how many words are between ...", "which word comes right
before ...", with or without worked examples) stay at or below chance. So the default is
``distance=1, n_cue=2``: the only position-dependent variant this 270M model solves.

All prompts of a task have the same token length (every word is one token in context,
checked with :func:`~lens_possym.tasks.binding.single_token_words`), so they batch without
padding. The task carries the answer and the other list words as distractors, ready for
:func:`~lens_possym.interventions.head_importance` (:meth:`WordDistanceTask.importance_batch`).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Sequence

import torch
from jaxtyping import Int
from torch import Tensor

from .._checks import boundary
from .._inputs import as_tokens
from ..errors import TaskConfigError
from ..results_io import ResultIO
from ..typing import HookedModel
from .binding import ImportanceBatch, last_position_logits, single_token_words

__all__ = ["DEFAULT_WORDS", "WordDistanceTask", "WordDistanceResult", "word_distance_task",
           "word_distance_task_from", "evaluate_word_distance"]

DEFAULT_WORDS: tuple[str, ...] = tuple(
    "cat dog sun tree box lamp car book fish bird cup hat door key pen ship bell coat drum "
    "fork rock shoe star milk rain moon ring sock lion bear frog cake corn leaf rose wolf "
    "bread chair table horse apple".split()
)


@dataclass
class WordDistanceTask:
    """A batch of word-distance prompts of equal token length.

    Attributes:
        prompts: the texts (without the answer).
        tokens: ``[batch, pos]`` token ids (BOS first when the model uses one).
        answers: ``[batch]`` the answer word's token.
        distractors: ``[batch, n_words - 1]`` the other list words' tokens.
        word_positions: ``[batch, n_words]`` where the list words stand in ``tokens``.
        answer_index: ``[batch]`` which list word is the answer.
        words: the list of each prompt.
        distance, n_cue, seed, separator: how the task was made.
    """

    prompts: list[str]
    tokens: Int[Tensor, "batch pos"]
    answers: Int[Tensor, "batch"]
    distractors: Int[Tensor, "batch n_distractors"]
    word_positions: Int[Tensor, "batch n_words"]
    answer_index: Int[Tensor, "batch"]
    words: list[list[str]]
    distance: int
    n_cue: int
    seed: int
    separator: str = "."

    @property
    def cue_starts(self) -> Int[Tensor, "batch"]:
        """Which list word the cue starts at, per prompt."""
        return self.answer_index - self.distance * self.n_cue

    @property
    def n_prompts(self) -> int:
        return self.tokens.shape[0]

    @property
    def n_words(self) -> int:
        return self.word_positions.shape[1]

    @property
    def chance(self) -> float:
        """Accuracy of a uniform guess among the list words."""
        return 1.0 / self.n_words

    def importance_batch(self) -> ImportanceBatch:
        """The prompts as an :class:`~lens_possym.tasks.ImportanceBatch`."""
        return ImportanceBatch(tokens=self.tokens, answers=self.answers,
                               distractors=self.distractors,
                               name=f"word distance {self.distance:+d} ({self.n_words} words, "
                               f"cue {self.n_cue})")


def _check(n_prompts: int, n_words: int, n_cue: int, distance: int) -> None:
    for name, value in (("n_prompts", n_prompts), ("n_words", n_words), ("n_cue", n_cue)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise TaskConfigError(f"{name} must be a positive integer, got {value!r}")
    if isinstance(distance, bool) or not isinstance(distance, int) or distance == 0:
        raise TaskConfigError(f"distance must be a non-zero integer, got {distance!r}")
    span = abs(distance) * n_cue + 1  # list words the cue and the answer occupy
    if span > n_words:
        raise TaskConfigError(
            f"a cue of {n_cue} words {abs(distance)} apart plus the answer spans {span} "
            f"list words, more than n_words={n_words}; raise n_words or lower n_cue/distance")


@boundary
def word_distance_task(model: HookedModel, *, n_prompts: int = 32, n_words: int = 8, n_cue: int = 2,
                       distance: int = 1, seed: int = 0,
                       words: Sequence[str] = DEFAULT_WORDS, separator: str = "."
                       ) -> WordDistanceTask:
    """Build ``n_prompts`` word-distance prompts for ``model`` (module docstring).

    Args:
        n_words: words in the list (distinct within a prompt).
        n_cue: words repeated after the list.
        distance: spacing of the cue words and of the answer after the last one (1 =
            continue the list, 2 = every other word, -1 = backwards).
        seed: the prompts are a function of the seed (Python's ``random.Random``).
        words: candidate words; those that are not one token in context are dropped.
        separator: ends the list before the cue.

    Raises:
        TaskConfigError: non-positive counts, ``distance == 0``, a cue that does not fit
            in the list, or fewer than ``n_words`` single-token words.
    """
    _check(n_prompts, n_words, n_cue, distance)
    tokenizer = model.tokenizer
    pool = single_token_words(tokenizer, words, ["{w} {w}" + separator + " {w}",
                                                 "{w}" + separator])
    if len(pool) < n_words:
        raise TaskConfigError(
            f"only {len(pool)} of the {len(set(words))} words are single tokens for this "
            f"tokenizer, fewer than n_words={n_words}; lower n_words or pass more words")
    rng = random.Random(seed)
    step, span = distance, abs(distance) * n_cue
    lists, starts = [], []
    for _ in range(n_prompts):
        chosen = rng.sample(pool, n_words)
        starts.append(rng.randrange(0, n_words - span) if step > 0 else rng.randrange(span, n_words))
        lists.append(chosen)
    return word_distance_task_from(model, lists, starts, n_cue=n_cue, distance=distance,
                                   seed=seed, separator=separator)


def word_distance_task_from(model: HookedModel, lists: Sequence[Sequence[str]],
                            starts: Sequence[int], *, n_cue: int = 2, distance: int = 1,
                            seed: int = 0, separator: str = ".") -> WordDistanceTask:
    """The word-distance prompts of given lists: prompt ``b`` lists ``lists[b]`` and cues
    the words at ``starts[b], starts[b] + distance, ...`` (``n_cue`` of them); the answer
    is the word ``distance`` after the last (what :func:`word_distance_task` draws;
    counterfactual prompts are built from edited lists).

    Raises:
        TaskConfigError: lists of different lengths, repeated words, a cue or answer
            outside the list, or words that are not one token each.
    """
    lists = [list(ws) for ws in lists]
    if not lists or len(lists) != len(starts):
        raise TaskConfigError(f"give one list and one start per prompt (got {len(lists)}, "
                              f"{len(starts)})")
    n_words = len(lists[0])
    _check(len(lists), n_words, n_cue, distance)
    answer_index, prompts = [], []
    for b, (ws, first) in enumerate(zip(lists, starts)):
        index = [int(first) + distance * k for k in range(n_cue + 1)]
        if len(ws) != n_words or len(set(ws)) != n_words:
            raise TaskConfigError(f"prompt {b}: the list {ws} must hold {n_words} distinct words")
        if not all(0 <= i < n_words for i in index):
            raise TaskConfigError(
                f"prompt {b}: a cue starting at word {first} with distance {distance} runs "
                f"outside the {n_words} words")
        cue = " ".join(ws[i] for i in index[:-1])
        prompts.append(f"{' '.join(ws)}{separator} {cue}")
        answer_index.append(index[-1])
    tokenizer = model.tokenizer
    tokens = as_tokens(model, prompts)
    # every word is one token and the text starts with the list, so word i of the list is
    # token i after any BOS
    shift = tokens.shape[1] - len(tokenizer.encode(prompts[0], add_special_tokens=False))
    ids = torch.tensor([[tokenizer.encode(" " + w if i else w, add_special_tokens=False)[-1]
                         for i, w in enumerate(ws)] for ws in lists])
    positions = torch.arange(n_words).repeat(len(lists), 1) + shift
    if not torch.equal(tokens.cpu().gather(1, positions), ids):
        raise TaskConfigError("the list words do not stand one token each at the start of the "
                              "prompt for this tokenizer; pass other words or separator")
    answer_index_t = torch.tensor(answer_index)
    answers = torch.tensor([tokenizer.encode(" " + ws[i], add_special_tokens=False)[-1]
                            for ws, i in zip(lists, answer_index)])
    distractors = torch.stack([
        torch.tensor([tokenizer.encode(" " + w, add_special_tokens=False)[-1]
                      for j, w in enumerate(ws) if j != i]) for ws, i in zip(lists, answer_index)])
    device = tokens.device
    return WordDistanceTask(
        prompts=prompts, tokens=tokens, answers=answers.to(device),
        distractors=distractors.to(device), word_positions=positions.to(device),
        answer_index=answer_index_t.to(device), words=lists, distance=distance, n_cue=n_cue,
        seed=seed, separator=separator)


@dataclass(repr=False)
class WordDistanceResult(ResultIO):
    """Accuracy over the whole vocabulary and among the list words, with chance."""

    accuracy: float
    candidate_accuracy: float
    chance: float

    FORMAT = "lens-possym/word-distance-result@1"

    def _table(self):
        """One row per number: ``score`` (``accuracy``, ``candidate_accuracy``, ``chance``)
        and ``value``."""
        import pandas as pd

        return pd.DataFrame({"score": list(self.as_dict()), "value": list(self.as_dict().values())})

    def as_dict(self) -> dict[str, float]:
        return {"accuracy": self.accuracy, "candidate_accuracy": self.candidate_accuracy,
                "chance": self.chance}


def evaluate_word_distance(model: HookedModel, task: WordDistanceTask,
                           logits: Tensor | None = None) -> WordDistanceResult:
    """Score ``model`` (or ``logits`` already computed) on ``task``'s last position."""
    last = last_position_logits(model, task.tokens, logits, last_only=True)
    answers = task.answers.to(last.device)
    top = last.argmax(-1) == answers
    candidates = torch.cat([task.answers[:, None], task.distractors], 1).to(last.device)
    best = candidates.gather(1, last.gather(1, candidates).argmax(-1, keepdim=True))[:, 0]
    return WordDistanceResult(accuracy=float(top.float().mean()),
                              candidate_accuracy=float((best == answers).float().mean()),
                              chance=task.chance)
