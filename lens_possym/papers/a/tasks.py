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

Splits and seeding come from :class:`~lens_possym.training.tasks.SyntheticTask`
(hash-disjoint train/test, private generators). Answer positions are drawn uniformly, so
per-position accuracy has equal support.
"""

from __future__ import annotations

import torch
from jaxtyping import Int
from torch import Tensor

from ...errors import TaskConfigError
from ...training.tasks import SyntheticTask, TaskBatch

__all__ = ["IndexTask", "RetrievalTask", "PartialInductionTask"]


class IndexTask(SyntheticTask):
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


class PairTask(SyntheticTask):
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


class RetrievalTask(PairTask):
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


class PartialInductionTask(PairTask):
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
