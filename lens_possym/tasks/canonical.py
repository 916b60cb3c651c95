r"""Paper A's canonical tasks as seeded generators with disjoint train/test splits.

Three tasks, each answered at the last position by reading one earlier token, whose
position every sample records (``answer_pos``) so accuracy can be read per position:

=====================  ======================================================  ==========
task                   prompt → answer                                         behaviour
=====================  ======================================================  ==========
:class:`IndexTask`     ``s_0 … s_{L-1} IDX_j`` → ``s_j``                        positional
:class:`RetrievalTask` ``(e_0 a_0) … (e_{n-1} a_{n-1}) e_q?`` → ``a`` with       symbolic
                       ``e = e_q`` (entities unique)
:class:`PartialInductionTask` the same, entities repeat (``e_q`` at least twice,   mixed
                       earlier occurrences bound to other attributes) → ``a`` of
                       the **last** ``e_q``
=====================  ======================================================  ==========

Formats (paper A does not publish its own; these are chosen so that a *one-layer* model
can only solve each task the intended way):

* Index: symbols are drawn i.i.d. (with replacement) from ``n_symbols``; the marker
  ``IDX_j`` is its own token for each ``j`` and carries no information about ``s_j``. The
  head must find *position* ``j``, which it can only do through RoPE (the model has no
  positional embedding).
* Retrieval and Partial Induction: a pair ``(e, a)`` is **one token** (as in paper C's
  letter task). In a one-layer model a key sees only its own token, so an attribute in a
  separate token could not be found by its entity. Queries ``e?`` and answers ``a`` are
  their own tokens.

Splits: a sequence belongs to the test split iff a fixed hash of all its tokens (answer
excluded, it is a function of them) falls in the lowest ``test_fraction`` of the hash
range. Membership is a property of the sequence itself, so train and test are disjoint by
construction, whatever seeds or batch sizes are used; the training stream rejects test
sequences and the test set is a seeded sample of test sequences. Answer positions are
drawn uniformly, so per-position accuracy has equal support.

Randomness comes from a private ``torch.Generator`` (global RNG untouched).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Iterator, Literal

import torch
from jaxtyping import Bool, Int
from torch import Tensor

from ..errors import TaskConfigError

__all__ = [
    "TaskBatch",
    "CanonicalTask",
    "IndexTask",
    "RetrievalTask",
    "PartialInductionTask",
    "TASKS",
    "make_task",
]

Split = Literal["train", "test"]
_PRIME = 2_147_483_647  # 2^31 - 1
_HASH_BUCKETS = 1 << 20


@dataclass
class TaskBatch:
    """A batch of prompts with their answers.

    Attributes:
        tokens: ``[batch, pos]`` prompt token ids; the query is the last position.
        answers: ``[batch]`` the correct next token.
        answer_pos: ``[batch]`` position of the token the answer is read from.
    """

    tokens: Int[Tensor, "batch pos"]
    answers: Int[Tensor, "batch"]
    answer_pos: Int[Tensor, "batch"]

    def __len__(self) -> int:
        return self.tokens.shape[0]

    def to(self, device) -> "TaskBatch":
        return TaskBatch(self.tokens.to(device), self.answers.to(device), self.answer_pos.to(device))

    def __getitem__(self, index) -> "TaskBatch":
        return TaskBatch(self.tokens[index], self.answers[index], self.answer_pos[index])

    @staticmethod
    def cat(batches: list["TaskBatch"]) -> "TaskBatch":
        return TaskBatch(torch.cat([b.tokens for b in batches]),
                         torch.cat([b.answers for b in batches]),
                         torch.cat([b.answer_pos for b in batches]))


def _sequence_hash(tokens: Int[Tensor, "batch pos"]) -> Int[Tensor, "batch"]:
    """A fixed polynomial hash of each row into ``[0, 2^20)`` (platform independent)."""
    h = torch.zeros(tokens.shape[0], dtype=torch.int64, device=tokens.device)
    for col in tokens.long().unbind(dim=1):
        h = (h * 1_000_003 + col + 1) % _PRIME
    h = (h * 48_271) % _PRIME
    return (h ^ (h >> 11)) % _HASH_BUCKETS


class CanonicalTask:
    """Common interface of the canonical tasks (see the module docstring).

    Subclasses define the vocabulary, ``_generate`` (raw samples, either split) and
    ``solve`` (an independent reference solver that reads only the tokens).

    Attributes:
        name: ``"index"``, ``"retrieval"`` or ``"partial-induction"``.
        seed: default seed of the test set and of the training stream.
        test_fraction: share of all sequences that belong to the test split.
    """

    name: ClassVar[str] = ""
    behaviour: ClassVar[str] = ""

    def __init__(self, *, seed: int = 0, test_fraction: float = 0.1):
        if not 0.0 < test_fraction < 1.0:
            raise TaskConfigError(f"test_fraction must be in (0, 1), got {test_fraction}")
        self.seed = int(seed)
        self.test_fraction = float(test_fraction)

    # ---- description ------------------------------------------------------------------

    @property
    def d_vocab(self) -> int:
        raise NotImplementedError

    @property
    def n_ctx(self) -> int:
        """Prompt length (the query is the last position)."""
        raise NotImplementedError

    @property
    def answer_positions(self) -> list[int]:
        """The positions an answer can be read from."""
        raise NotImplementedError

    @property
    def answer_tokens(self) -> list[int]:
        """The tokens that can be answers."""
        raise NotImplementedError

    def token_names(self) -> list[str]:
        raise NotImplementedError

    def config(self) -> dict:
        """The constructor arguments (for metrics files and checkpoints)."""
        raise NotImplementedError

    def describe(self) -> str:
        args = ", ".join(f"{k}={v}" for k, v in self.config().items())
        return f"{self.name}({args}): {self.n_ctx} tokens, vocabulary {self.d_vocab}"

    def __repr__(self) -> str:
        return f"<{self.describe()}>"

    def decode(self, tokens: Int[Tensor, "pos"]) -> str:
        names = self.token_names()
        return " ".join(names[int(t)] for t in tokens)

    # ---- generation ---------------------------------------------------------------------

    def _generate(self, n: int, gen: torch.Generator) -> TaskBatch:
        raise NotImplementedError

    def solve(self, tokens: Int[Tensor, "batch pos"]) -> tuple[Tensor, Tensor]:
        """Reference solver from the tokens alone: ``(answers, answer_pos)``."""
        raise NotImplementedError

    def is_test(self, tokens: Int[Tensor, "batch pos"]) -> Bool[Tensor, "batch"]:
        """Whether each sequence belongs to the test split."""
        return _sequence_hash(tokens) < int(round(self.test_fraction * _HASH_BUCKETS))

    def sample(self, n: int, *, split: Split = "train", generator: torch.Generator | None = None,
               seed: int | None = None) -> TaskBatch:
        """``n`` samples from one split (rejection on :meth:`is_test`).

        Pass a ``generator`` to continue a stream, or a ``seed`` (default: the task's).
        """
        if split not in ("train", "test"):
            raise TaskConfigError(f"split must be 'train' or 'test', got {split!r}")
        if n < 1:
            raise TaskConfigError(f"n must be >= 1, got {n}")
        gen = generator if generator is not None else torch.Generator().manual_seed(
            self.seed if seed is None else seed)
        keep_test = split == "test"
        share = self.test_fraction if keep_test else 1.0 - self.test_fraction
        got: list[TaskBatch] = []
        have = drawn = 0
        budget = min(500_000, 100_000 + int(100 * n / share))
        while drawn < budget:
            size = min(1 << 16, max(16, int((n - have) / share * 1.2) + 8))
            draw = self._generate(size, gen)
            drawn += size
            chosen = draw[self.is_test(draw.tokens) == keep_test]
            got.append(chosen)
            have += len(chosen)
            if have >= n:
                return TaskBatch.cat(got)[:n]
        raise TaskConfigError(
            f"{self.describe()}: could not draw {n} {split} samples; the task has too few "
            "distinct sequences for this split, make it larger or change test_fraction"
        )

    def test_set(self, n: int = 2048, *, seed: int | None = None) -> TaskBatch:
        """A fixed, seeded test set (``seed`` defaults to the task's seed)."""
        base = self.seed if seed is None else seed
        return self.sample(n, split="test", seed=base + 7_919)

    def train_batches(self, batch_size: int, *, seed: int | None = None) -> Iterator[TaskBatch]:
        """An endless stream of training batches (test sequences never appear)."""
        gen = torch.Generator().manual_seed(self.seed if seed is None else seed)
        while True:
            yield self.sample(batch_size, split="train", generator=gen)

    # ---- evaluation helpers -------------------------------------------------------------

    def accuracy_by_position(self, predictions: Int[Tensor, "batch"], batch: TaskBatch
                             ) -> Tensor:
        """Accuracy per answer position, ``[len(answer_positions)]`` (``nan`` where unseen)."""
        correct = (predictions.to(batch.answers.device) == batch.answers).float()
        out = []
        for p in self.answer_positions:
            at = batch.answer_pos == p
            out.append(correct[at].mean() if at.any() else torch.tensor(float("nan")))
        return torch.stack(out).cpu()


class IndexTask(CanonicalTask):
    """Index (``f_POS``): ``s_0 … s_{L-1} IDX_j`` → ``s_j``.

    Vocabulary: symbols ``0..n_symbols-1``, then the markers ``IDX_0..IDX_{L-1}``. Symbols
    are drawn i.i.d. with replacement; ``j`` uniformly.
    """

    name = "index"
    behaviour = "positional"

    def __init__(self, n_symbols: int = 16, length: int = 16, *, seed: int = 0,
                 test_fraction: float = 0.1):
        super().__init__(seed=seed, test_fraction=test_fraction)
        if n_symbols < 2 or length < 2:
            raise TaskConfigError(
                f"Index needs n_symbols >= 2 and length >= 2, got {n_symbols}, {length}")
        self.n_symbols, self.length = int(n_symbols), int(length)

    @property
    def d_vocab(self) -> int:
        return self.n_symbols + self.length

    @property
    def n_ctx(self) -> int:
        return self.length + 1

    @property
    def answer_positions(self) -> list[int]:
        return list(range(self.length))

    @property
    def answer_tokens(self) -> list[int]:
        return list(range(self.n_symbols))

    def token_names(self) -> list[str]:
        return [f"s{i}" for i in range(self.n_symbols)] + [f"IDX{j}" for j in range(self.length)]

    def config(self) -> dict:
        return {"n_symbols": self.n_symbols, "length": self.length, "seed": self.seed,
                "test_fraction": self.test_fraction}

    def _generate(self, n: int, gen: torch.Generator) -> TaskBatch:
        symbols = torch.randint(self.n_symbols, (n, self.length), generator=gen)
        j = torch.randint(self.length, (n,), generator=gen)
        tokens = torch.cat([symbols, (self.n_symbols + j)[:, None]], dim=1)
        return TaskBatch(tokens, symbols[torch.arange(n), j], j)

    def solve(self, tokens: Int[Tensor, "batch pos"]) -> tuple[Tensor, Tensor]:
        j = tokens[:, -1] - self.n_symbols
        return tokens[torch.arange(len(tokens)), j], j


class _PairTask(CanonicalTask):
    """Shared vocabulary of Retrieval and Partial Induction.

    Token ids: pair ``(e, a)`` = ``e·n_attributes + a``; query ``e?`` =
    ``n_entities·n_attributes + e``; answer ``a`` = ``n_entities·(n_attributes + 1) + a``.
    """

    def __init__(self, n_entities: int, n_attributes: int, n_pairs: int, *, seed: int,
                 test_fraction: float):
        super().__init__(seed=seed, test_fraction=test_fraction)
        if n_entities < 2 or n_attributes < 2 or n_pairs < 2:
            raise TaskConfigError(
                f"{self.name} needs n_entities, n_attributes and n_pairs >= 2, got "
                f"{n_entities}, {n_attributes}, {n_pairs}")
        self.n_entities, self.n_attributes = int(n_entities), int(n_attributes)
        self.n_pairs = int(n_pairs)

    def pair_token(self, entity: Tensor, attribute: Tensor) -> Tensor:
        return entity * self.n_attributes + attribute

    def query_token(self, entity: Tensor) -> Tensor:
        return self.n_entities * self.n_attributes + entity

    def answer_token(self, attribute: Tensor) -> Tensor:
        return self.n_entities * (self.n_attributes + 1) + attribute

    @property
    def d_vocab(self) -> int:
        return self.n_entities * (self.n_attributes + 1) + self.n_attributes

    @property
    def n_ctx(self) -> int:
        return self.n_pairs + 1

    @property
    def answer_tokens(self) -> list[int]:
        start = self.n_entities * (self.n_attributes + 1)
        return list(range(start, start + self.n_attributes))

    def token_names(self) -> list[str]:
        pairs = [f"E{e}a{a}" for e in range(self.n_entities) for a in range(self.n_attributes)]
        return pairs + [f"E{e}?" for e in range(self.n_entities)] + [
            f"a{a}" for a in range(self.n_attributes)]

    def config(self) -> dict:
        return {"n_entities": self.n_entities, "n_attributes": self.n_attributes,
                "n_pairs": self.n_pairs, "seed": self.seed, "test_fraction": self.test_fraction}

    def _split_pairs(self, tokens: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        pairs = tokens[:, :-1]
        entity, attribute = pairs // self.n_attributes, pairs % self.n_attributes
        query = tokens[:, -1] - self.n_entities * self.n_attributes
        return entity, attribute, query


class RetrievalTask(_PairTask):
    """Retrieval (``f_SYM``): ``(e_0 a_0) … (e_{n-1} a_{n-1}) e_q?`` → ``a_q``.

    Entities are distinct within a prompt (``n_pairs <= n_entities``), attributes i.i.d.
    """

    name = "retrieval"
    behaviour = "symbolic"

    def __init__(self, n_entities: int = 8, n_attributes: int = 8, n_pairs: int = 8, *,
                 seed: int = 0, test_fraction: float = 0.1):
        super().__init__(n_entities, n_attributes, n_pairs, seed=seed,
                         test_fraction=test_fraction)
        if n_pairs > n_entities:
            raise TaskConfigError(
                f"Retrieval needs distinct entities: n_pairs ({n_pairs}) <= n_entities "
                f"({n_entities})")

    @property
    def answer_positions(self) -> list[int]:
        return list(range(self.n_pairs))

    def _generate(self, n: int, gen: torch.Generator) -> TaskBatch:
        order = torch.rand(n, self.n_entities, generator=gen).argsort(dim=1)
        entity = order[:, : self.n_pairs]
        attribute = torch.randint(self.n_attributes, (n, self.n_pairs), generator=gen)
        p = torch.randint(self.n_pairs, (n,), generator=gen)
        rows = torch.arange(n)
        tokens = torch.cat([self.pair_token(entity, attribute),
                            self.query_token(entity[rows, p])[:, None]], dim=1)
        return TaskBatch(tokens, self.answer_token(attribute[rows, p]), p)

    def solve(self, tokens: Int[Tensor, "batch pos"]) -> tuple[Tensor, Tensor]:
        entity, attribute, query = self._split_pairs(tokens)
        p = (entity == query[:, None]).float().argmax(dim=1)
        return self.answer_token(attribute[torch.arange(len(tokens)), p]), p


class PartialInductionTask(_PairTask):
    """Partial Induction (``f_MIX``): the attribute bound to the **last** occurrence of ``e_q``.

    ``e_q`` occurs ``2..max_occurrences`` times; its last occurrence is at a uniform
    position ``p >= 1``, earlier ones at random positions before ``p``, and none after.
    The attribute at ``p`` differs from those of the earlier occurrences (so "the first
    occurrence" or "any occurrence" is wrong). Other positions hold random other entities,
    which may repeat.
    """

    name = "partial-induction"
    behaviour = "mixed"

    def __init__(self, n_entities: int = 8, n_attributes: int = 8, n_pairs: int = 16, *,
                 max_occurrences: int = 3, seed: int = 0, test_fraction: float = 0.1):
        super().__init__(n_entities, n_attributes, n_pairs, seed=seed,
                         test_fraction=test_fraction)
        if not 2 <= max_occurrences <= n_pairs:
            raise TaskConfigError(
                f"max_occurrences must be in 2..n_pairs ({n_pairs}), got {max_occurrences}")
        if n_attributes < max_occurrences:
            raise TaskConfigError(
                f"n_attributes ({n_attributes}) must be >= max_occurrences ({max_occurrences}) "
                "so the last occurrence can carry an attribute no earlier one has")
        self.max_occurrences = int(max_occurrences)

    def config(self) -> dict:
        return {**super().config(), "max_occurrences": self.max_occurrences}

    @property
    def answer_positions(self) -> list[int]:
        return list(range(1, self.n_pairs))

    def _generate(self, n: int, gen: torch.Generator) -> TaskBatch:
        L, E, A = self.n_pairs, self.n_entities, self.n_attributes
        rows, cols = torch.arange(n), torch.arange(L)[None, :]
        p = torch.randint(1, L, (n,), generator=gen)                     # last occurrence
        query = torch.randint(E, (n,), generator=gen)
        most = torch.clamp(p, max=self.max_occurrences - 1)              # earlier ones: 1..most
        earlier_n = (torch.rand(n, generator=gen) * most).long() + 1
        keys = torch.rand(n, L, generator=gen).masked_fill(cols >= p[:, None], 2.0)
        ranks = keys.argsort(dim=1).argsort(dim=1)
        earlier = ranks < earlier_n[:, None]                             # random slots < p
        other = torch.randint(E - 1, (n, L), generator=gen)
        other = other + (other >= query[:, None]).long()                 # any entity but e_q
        occurs = earlier | (cols == p[:, None])
        entity = torch.where(occurs, query[:, None], other)
        attribute = torch.randint(A, (n, L), generator=gen)
        onehot = torch.nn.functional.one_hot(attribute, A).bool()
        used = (onehot & earlier[..., None]).any(dim=1)                  # earlier e_q's attributes
        pick = torch.rand(n, A, generator=gen).masked_fill(used, -1.0).argmax(dim=1)
        attribute[rows, p] = pick
        tokens = torch.cat([self.pair_token(entity, attribute),
                            self.query_token(query)[:, None]], dim=1)
        return TaskBatch(tokens, self.answer_token(pick), p)

    def solve(self, tokens: Int[Tensor, "batch pos"]) -> tuple[Tensor, Tensor]:
        entity, attribute, query = self._split_pairs(tokens)
        match = entity == query[:, None]
        positions = torch.arange(entity.shape[1]).expand_as(entity)
        p = torch.where(match, positions, -1).max(dim=1).values
        return self.answer_token(attribute[torch.arange(len(tokens)), p]), p


TASKS: dict[str, type[CanonicalTask]] = {
    "index": IndexTask,
    "retrieval": RetrievalTask,
    "partial-induction": PartialInductionTask,
}


def make_task(name: str, **kwargs) -> CanonicalTask:
    """A canonical task by name (``"index"``, ``"retrieval"``, ``"partial-induction"``)."""
    key = name.replace("_", "-").lower()
    if key not in TASKS:
        raise TaskConfigError(f"unknown task {name!r}; choose one of {sorted(TASKS)}")
    return TASKS[key](**kwargs)
