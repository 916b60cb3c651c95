r"""What every synthetic task is: the :class:`Task` protocol, :class:`TaskBatch`, and
:class:`SyntheticTask`, the base class that gives a task seeded generation and disjoint
train/test splits.

The training loop (:mod:`lens_possym.training.loop`), the sweeps and the run files
ask a task only for what :class:`Task` lists, so a new task is a class in a plug-in
(:mod:`lens_possym.plugins`; papers A, B and C are plug-ins under ``lens_possym/papers``)
named in its ``tasks`` table, or registered in code with :func:`register_task`; nothing in
the loop changes. :data:`TASKS` (a read-only mapping) and :func:`make_task` find a task by
its registry name, as checkpoints and the CLI do.

Splits: a sequence belongs to the test split iff a fixed hash of all its tokens (answer
excluded, it is a function of them) falls in the lowest ``test_fraction`` of the hash
range. Membership is a property of the sequence itself, so train and test are disjoint by
construction, whatever seeds or batch sizes are used; the training stream rejects test
sequences and the test set is a seeded sample of test sequences.

Randomness comes from a private ``torch.Generator`` (global RNG untouched).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import ClassVar, Iterator, Literal, Protocol, runtime_checkable

import torch
from jaxtyping import Bool, Int
from torch import Tensor

from ..errors import TaskConfigError
from ..registry import Registry

__all__ = ["Task", "TaskBatch", "SyntheticTask", "Split", "TASKS", "make_task", "register_task"]

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


@functools.lru_cache(maxsize=64)
def _hash_weights(n: int) -> tuple[int, ...]:
    """``1_000_003^(n - 1 - i) mod _PRIME`` for ``i < n``: the weight of column ``i``."""
    out, w = [], 1
    for _ in range(n):
        out.append(w)
        w = w * 1_000_003 % _PRIME
    return tuple(reversed(out))


def _sequence_hash(tokens: Int[Tensor, "batch pos"]) -> Int[Tensor, "batch"]:
    """A fixed polynomial hash of each row into ``[0, 2^20)`` (platform independent).

    ``h = sum_i (t_i + 1) 1_000_003^(n-1-i) mod p`` (``p = 2^31 - 1``; the Horner form
    ``h <- (h 1_000_003 + t_i + 1) mod p`` over the columns, computed in one vectorised
    pass: every product is below ``2^62`` and the sum of ``n`` residues below ``n 2^31``, so
    int64 is exact and the value is the Horner one bit for bit), then mixed and cut to
    ``2^20`` buckets."""
    t = tokens.long()
    weights = torch.tensor(_hash_weights(t.shape[1]), dtype=torch.int64, device=t.device)
    h = ((t + 1) % _PRIME * weights % _PRIME).sum(dim=1) % _PRIME
    h = (h * 48_271) % _PRIME
    return (h ^ (h >> 11)) % _HASH_BUCKETS

@runtime_checkable
class Task(Protocol):
    """What the training loop, sweeps and run files need from a task.

    A task answers at the **last** position: ``model(batch.tokens)[:, -1]`` is scored
    against ``batch.answers``. ``name`` keys :data:`~lens_possym.training.tasks.TASKS`
    and, with ``config()``, rebuilds the task from a checkpoint
    (``make_task(name, **config())``).
    """

    name: ClassVar[str]

    @property
    def d_vocab(self) -> int: ...

    @property
    def n_ctx(self) -> int: ...

    @property
    def answer_positions(self) -> list[int]: ...

    @property
    def answer_tokens(self) -> list[int]: ...

    def config(self) -> dict: ...

    def describe(self) -> str: ...

    def sample(self, n: int, *, split: Split = "train", generator: torch.Generator | None = None,
               seed: int | None = None) -> TaskBatch: ...

    def test_set(self, n: int = 2048, *, seed: int | None = None) -> TaskBatch: ...

    def accuracy_by_position(self, predictions: Int[Tensor, "batch"], batch: TaskBatch
                             ) -> Tensor: ...


class SyntheticTask:
    """A :class:`Task` with seeded generation and hash-disjoint splits (module docstring).

    Subclasses define the vocabulary, ``_generate`` (raw samples, either split) and
    ``solve`` (an independent reference solver that reads only the tokens).

    Attributes:
        name: the task's key in :data:`~lens_possym.training.tasks.TASKS`.
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


TASKS = Registry("task", lambda plugin: plugin.tasks, TaskConfigError)


def register_task(name: str, cls: type, *, replace: bool = False) -> type:
    """Make ``cls`` (a :class:`Task` class) known as ``name`` to :func:`make_task` and to
    checkpoints (``replace``: allow a new class for a name already known)."""
    return TASKS.register(name, cls, replace=replace)


def make_task(name: str, **kwargs) -> Task:
    """A task by its registry name (``"index"``, ``"number"``, ...: ``sorted(TASKS)``)."""
    key = name.replace("_", "-").lower() if isinstance(name, str) else name
    if not isinstance(key, str) or key not in TASKS:
        raise TaskConfigError(
            f"unknown task {name!r}; choose one of {list(TASKS)} (tasks come from plug-ins: "
            "lens-possym's papers are installed with the package (pip install -e .); your "
            "own with lens_possym.plugins.register_plugin or register_task)")
    return TASKS[key](**kwargs)
