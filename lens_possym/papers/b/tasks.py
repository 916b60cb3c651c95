r"""Paper B's two tasks: the distance between two trigger words, and how many triggers occur.

Both follow the official generators (``dis_gen/data-gen.py``, ``count_gen/data-gen.py`` of
Qihuai27/Deposit-Pattern-Research; ``shared/reference/companion_code.md`` section 1) on a
synthetic vocabulary, since the paper's corpus and tokenizer are not published. The answer
is a **class id**: the model's classifier has ``n_classes`` outputs, and the training loop
reads them at the last position (an encoder puts its pooled prediction there).

=========================  ===========================================  =====================
task                       sentence (then padded with id 0 to n_ctx)    label
=========================  ===========================================  =====================
:class:`DistanceTask`      ``left A middle B right``, ``|left|, |right|``  ``|middle| + 1``,
                           ``~ U{1..max_side}``, ``|middle| ~``             in ``[2, max_between+1]``
                           ``U{1..max_between}``, cut to ``max_len``
:class:`CountTask`         ``n`` triggers (with replacement from           ``n`` in
                           ``n_triggers``) and ``max_len - n`` fillers,     ``[1, max_count]``
                           shuffled
=========================  ===========================================  =====================

Vocabulary: id 0 is the pad (the official code pads with 0 and has no padding mask, so pads
are ordinary tokens the model sees and mean-pools over); the triggers come next; the
``n_words`` filler words last.

Departures from the official code, each deliberate and small:

* **Fillers never include a trigger** by default (the official distance generator samples
  fillers from the whole vocabulary, triggers included, so a sentence can hold extra
  trigger copies and an ambiguous label). Here the label is correct by construction, which
  a test checks with an independent solver. Fillers are drawn with replacement.
  ``DistanceTask(trigger_copies=True)`` draws them as the official code does (every word
  and both triggers): the label is then the drawn gap, which the tokens no longer decide
  when a copy lies on the wrong side of a trigger, so accuracy has a ceiling below 100 %
  (about one sentence in five holds a copy at the paper's lengths).
* **The count task's zero class**: the official training uses
  ``CrossEntropyLoss(ignore_index=0)`` and scores accuracy on ``labels != 0`` only, so
  sentences with no trigger contribute nothing to either. Here ``n`` is drawn from
  ``U{1..max_count}`` directly: the same objective and accuracy, without wasted samples.
* **One trigger pair per task instance** (as the official code draws one pair for the
  whole data set), fixed: ids 1 and 2.
* Duplicates: the official code drops duplicate samples; here train and test are disjoint
  by the hash split of :class:`~lens_possym.training.tasks.SyntheticTask`.

**Data regimes.** By default a task is a *fresh stream*: every training batch is new
sentences (hash-disjoint from the test split). With ``n_sentences`` set it is the
**official regime**: ``n_sentences`` sentences drawn once (from the task's seed),
duplicates dropped, split at random ``train_share`` / ``1 - train_share`` (official 70 /
30); the training loop then walks the training part in epochs (each epoch one seeded
shuffle, batches in order, the last one short, as a shuffled ``DataLoader``;
:meth:`train_batch`), and the test set is drawn from the held-out part. Official sizes:
100,000 distance and 50,000 count sentences, 100 epochs (MLA 150).

Official sizes (the ``paper`` preset of :mod:`lens_possym.papers.b.presets`): distance
``max_len 120, max_between 70, max_side 25``; count ``max_len 120, n_triggers 30,
max_count 100``; both padded to 128.
"""

from __future__ import annotations

import math

import torch
from jaxtyping import Int
from torch import Tensor

from ...errors import TaskConfigError
from ...training.tasks import Split, SyntheticTask, TaskBatch

__all__ = ["DistanceTask", "CountTask", "PAD"]

PAD = 0


def _positive(**values: int) -> None:
    for name, value in values.items():
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise TaskConfigError(f"{name} must be a positive integer, got {value!r}")


class _PaperBTask(SyntheticTask):
    """Shared parts: classes read at the last position, pads, fillers, the data regimes."""

    def __init__(self, *, n_ctx: int, max_len: int | None, n_words: int, seed: int,
                 test_fraction: float, n_sentences: int | None = None,
                 train_share: float = 0.7):
        super().__init__(seed=seed, test_fraction=test_fraction)
        max_len = n_ctx if max_len is None else max_len
        _positive(n_ctx=n_ctx, max_len=max_len, n_words=n_words)
        if max_len > n_ctx:
            raise TaskConfigError(f"max_len ({max_len}) must be <= n_ctx ({n_ctx})")
        self._n_ctx, self.max_len, self.n_words = n_ctx, max_len, n_words
        if n_sentences is not None:
            _positive(n_sentences=n_sentences)
            if n_sentences < 2:
                raise TaskConfigError(f"n_sentences must be >= 2 (a train and a test part), "
                                      f"got {n_sentences}")
        if not 0.0 < train_share < 1.0:
            raise TaskConfigError(f"train_share must be in (0, 1), got {train_share!r}")
        self.n_sentences, self.train_share = n_sentences, float(train_share)
        self._fixed: tuple[TaskBatch, TaskBatch] | None = None

    def _regime_config(self) -> dict:
        if self.n_sentences is None:
            return {}
        return {"n_sentences": self.n_sentences, "train_share": self.train_share}

    # ---- the official regime: a fixed set, split once, walked in epochs ---------------

    def fixed_split(self) -> tuple[TaskBatch, TaskBatch]:
        """``(train, test)`` of the fixed sentence set (official regime only; built once)."""
        if self.n_sentences is None:
            raise TaskConfigError(f"{self.describe()} is a fresh stream; pass n_sentences=N "
                                  "for a fixed set of N sentences (the official regime)")
        if self._fixed is None:
            gen = torch.Generator().manual_seed(self.seed + 104_729)
            draw = self._generate(self.n_sentences, gen)
            _, inverse = torch.unique(draw.tokens, dim=0, return_inverse=True)
            first = torch.full((int(inverse.max()) + 1,), len(draw), dtype=torch.long)
            first = first.scatter_reduce(0, inverse, torch.arange(len(draw)), reduce="amin")
            draw = draw[first.sort().values]                          # duplicates dropped
            order = torch.randperm(len(draw), generator=gen)
            n_train = int(self.train_share * len(draw))
            if not 0 < n_train < len(draw):
                raise TaskConfigError(f"{self.describe()}: {len(draw)} distinct sentences "
                                      "cannot be split into a train and a test part")
            small = torch.int16 if self.d_vocab <= 32767 else torch.int32
            compact = [TaskBatch(part.tokens.to(small), part.answers, part.answer_pos)
                       for part in (draw[order[:n_train]], draw[order[n_train:]])]
            self._fixed = (compact[0], compact[1])
        return self._fixed

    @property
    def epoch_size(self) -> int | None:
        """Training sentences per epoch (official regime), ``None`` for a fresh stream."""
        return None if self.n_sentences is None else len(self.fixed_split()[0])

    def train_batch(self, step: int, batch_size: int, seed: int) -> TaskBatch:
        """The batch at optimiser step ``step`` (0-based) of the official regime: epoch
        ``step // ceil(epoch_size / batch_size)`` is one shuffle of the training part,
        seeded by ``(seed, epoch)``, cut into batches in order (the last one short)."""
        train, _ = self.fixed_split()
        per_epoch = math.ceil(len(train) / batch_size)
        epoch, index = divmod(step, per_epoch)
        gen = torch.Generator().manual_seed(seed * 1_000_003 + epoch)
        rows = torch.randperm(len(train), generator=gen)[index * batch_size:
                                                          (index + 1) * batch_size]
        return self._widen(train[rows])

    @staticmethod
    def _widen(batch: TaskBatch) -> TaskBatch:
        return TaskBatch(batch.tokens.long(), batch.answers, batch.answer_pos)

    def sample(self, n: int, *, split: Split = "train", generator: torch.Generator | None = None,
               seed: int | None = None) -> TaskBatch:
        """As :meth:`SyntheticTask.sample`; in the official regime, ``n`` distinct
        sentences of that part of the fixed set."""
        if self.n_sentences is None:
            return super().sample(n, split=split, generator=generator, seed=seed)
        if split not in ("train", "test"):
            raise TaskConfigError(f"split must be 'train' or 'test', got {split!r}")
        part = self.fixed_split()[0 if split == "train" else 1]
        if not 1 <= n <= len(part):
            raise TaskConfigError(
                f"{self.describe()}: asked for {n} {split} sentences, the fixed set's {split} "
                f"part holds {len(part)}; ask for fewer or raise n_sentences")
        gen = generator if generator is not None else torch.Generator().manual_seed(
            self.seed if seed is None else seed)
        return self._widen(part[torch.randperm(len(part), generator=gen)[:n]])

    n_special: int = 1  # pad + triggers; set by subclasses

    @property
    def n_ctx(self) -> int:
        return self._n_ctx

    @property
    def d_vocab(self) -> int:
        return self.n_special + self.n_words

    @property
    def n_classes(self) -> int:
        raise NotImplementedError

    @property
    def answer_positions(self) -> list[int]:
        """The classifier's output is read at the last position only."""
        return [self.n_ctx - 1]

    @property
    def answer_tokens(self) -> list[int]:
        """The class ids (labels) that can occur."""
        raise NotImplementedError

    def _fillers(self, shape: tuple[int, ...], gen: torch.Generator) -> Tensor:
        return self.n_special + torch.randint(self.n_words, shape, generator=gen)

    def _batch(self, tokens: Tensor) -> TaskBatch:
        answers, answer_pos = self.solve(tokens)
        return TaskBatch(tokens, answers, answer_pos)


class DistanceTask(_PaperBTask):
    """Task 1 (position-sensitive): the distance from trigger ``A`` (id 1) to ``B`` (id 2).

    Label ``= |middle| + 1 = pos(B) - pos(A)``, a class in ``[2, max_between + 1]``
    (``n_classes = max_between + 2``; classes 0 and 1 never occur, as in the official code).
    ``trigger_copies=True``: fillers drawn from the words and both triggers (the official
    draw), the label the drawn gap (module docstring).
    """

    name = "distance"
    behaviour = "positional"
    n_special = 3
    TRIGGER_A, TRIGGER_B = 1, 2

    def __init__(self, n_ctx: int = 32, *, max_len: int | None = None, max_between: int = 16,
                 max_side: int = 6, n_words: int = 64, seed: int = 0, test_fraction: float = 0.1,
                 n_sentences: int | None = None, train_share: float = 0.7,
                 trigger_copies: bool = False):
        super().__init__(n_ctx=n_ctx, max_len=max_len, n_words=n_words, seed=seed,
                         test_fraction=test_fraction, n_sentences=n_sentences,
                         train_share=train_share)
        _positive(max_between=max_between, max_side=max_side)
        if not isinstance(trigger_copies, bool):
            raise TaskConfigError(f"trigger_copies must be True or False, got {trigger_copies!r}")
        self.max_between, self.max_side = max_between, max_side
        self.trigger_copies = trigger_copies
        if max_side + max_between + 2 > self.max_len:
            raise TaskConfigError(
                f"max_side + max_between + 2 = {max_side + max_between + 2} exceeds max_len "
                f"{self.max_len}: trigger B could be cut off; lower them or raise max_len")

    @property
    def n_classes(self) -> int:
        return self.max_between + 2

    @property
    def answer_tokens(self) -> list[int]:
        return list(range(2, self.max_between + 2))

    def token_names(self) -> list[str]:
        return ["<pad>", "A", "B"] + [f"w{i}" for i in range(self.n_words)]

    def config(self) -> dict:
        return {"n_ctx": self.n_ctx, "max_len": self.max_len, "max_between": self.max_between,
                "max_side": self.max_side, "n_words": self.n_words, "seed": self.seed,
                "test_fraction": self.test_fraction, **self._regime_config(),
                # only when set, so the configs (and checkpoints) of exact-label tasks are
                # those they were before the option existed
                **({"trigger_copies": True} if self.trigger_copies else {})}

    def _fillers(self, shape: tuple[int, ...], gen: torch.Generator) -> Tensor:
        if not self.trigger_copies:
            return super()._fillers(shape, gen)
        return 1 + torch.randint(self.d_vocab - 1, shape, generator=gen)   # all but the pad

    def _generate(self, n: int, gen: torch.Generator) -> TaskBatch:
        left = torch.randint(1, self.max_side + 1, (n,), generator=gen)
        between = torch.randint(1, self.max_between + 1, (n,), generator=gen)
        right = torch.randint(1, self.max_side + 1, (n,), generator=gen)
        pos = torch.arange(self.n_ctx)[None]
        pos_a = left[:, None]
        pos_b = (left + between + 1)[:, None]
        end = torch.clamp(pos_b + 1 + right[:, None], max=self.max_len)  # cut to max_len
        tokens = self._fillers((n, self.n_ctx), gen)
        tokens = torch.where(pos == pos_a, self.TRIGGER_A, tokens)
        tokens = torch.where(pos == pos_b, self.TRIGGER_B, tokens)
        tokens = torch.where(pos >= end, PAD, tokens)
        if not self.trigger_copies:
            return self._batch(tokens)
        # the drawn gap: with copies in the sentence the tokens no longer decide it
        return TaskBatch(tokens, between + 1, torch.full_like(between, self.n_ctx - 1))

    def solve(self, tokens: Int[Tensor, "batch pos"]) -> tuple[Tensor, Tensor]:
        """Label = position of ``B`` minus position of ``A`` (each occurs once; with
        ``trigger_copies``, the first of each, which is not always the drawn pair)."""
        a = (tokens == self.TRIGGER_A).long().argmax(dim=1)
        b = (tokens == self.TRIGGER_B).long().argmax(dim=1)
        return b - a, torch.full_like(a, self.n_ctx - 1)

    def best_guess(self, tokens: Int[Tensor, "batch pos"]) -> tuple[Tensor, Tensor]:
        """The Bayes-optimal label and the probability that it is the drawn gap.

        Sides and gap are drawn uniformly and every filler uniformly, so each ``(A, B)`` pair
        of the sentence that the draw could have planted (left side in ``[1, max_side]``,
        middle in ``[1, max_between]``, right side in ``[1, max_side]``) is equally likely,
        except that a sentence cut at ``max_len`` shows ``r`` words of a right side drawn
        ``>= r`` (likelihood ``(max_side - r + 1) / max_side`` instead of ``1 / max_side``).
        The best guess is the gap with the most posterior mass; its mass is the chance it is
        right, so its mean over sentences is the task's accuracy ceiling. Without
        ``trigger_copies`` there is one pair: the label, with probability 1.
        """
        labels, probs = [], []
        for row in tokens.tolist():
            n = sum(1 for t in row if t != PAD)
            cut = n == self.max_len
            a_at = [i for i, t in enumerate(row[:n]) if t == self.TRIGGER_A]
            b_at = [j for j, t in enumerate(row[:n]) if t == self.TRIGGER_B]
            mass: dict[int, float] = {}       # likelihoods times max_side: a common factor
            for i in a_at:
                for j in b_at:
                    r = n - j - 1
                    if (1 <= i <= self.max_side and 1 <= j - i - 1 <= self.max_between
                            and 1 <= r <= self.max_side):
                        mass[j - i] = mass.get(j - i, 0.0) + (self.max_side - r + 1 if cut else 1)
            if not mass:
                raise TaskConfigError("a sentence holds no (A, B) pair this task could have "
                                      "drawn; best_guess reads sentences of this task only")
            gap = max(mass, key=lambda g: (mass[g], -g))
            labels.append(gap)
            probs.append(mass[gap] / sum(mass.values()))
        return torch.tensor(labels), torch.tensor(probs, dtype=torch.float64)


class CountTask(_PaperBTask):
    """Task 2 (position-agnostic): how many trigger words (ids ``1..n_triggers``) occur.

    Label ``= n`` in ``[1, max_count]`` (``n_classes = max_count + 1``; class 0 is never a
    target: module docstring). Every sentence has exactly ``max_len`` words.
    """

    name = "count"
    behaviour = "symbolic"

    def __init__(self, n_ctx: int = 64, *, max_len: int | None = None, n_triggers: int = 8,
                 max_count: int = 48, n_words: int = 64, seed: int = 0,
                 test_fraction: float = 0.1, n_sentences: int | None = None,
                 train_share: float = 0.7):
        super().__init__(n_ctx=n_ctx, max_len=max_len, n_words=n_words, seed=seed,
                         test_fraction=test_fraction, n_sentences=n_sentences,
                         train_share=train_share)
        _positive(n_triggers=n_triggers, max_count=max_count)
        if max_count > self.max_len:
            raise TaskConfigError(f"max_count ({max_count}) must be <= max_len ({self.max_len})")
        self.n_triggers, self.max_count = n_triggers, max_count

    @property
    def n_special(self) -> int:  # type: ignore[override]
        return 1 + self.n_triggers

    @property
    def n_classes(self) -> int:
        return self.max_count + 1

    @property
    def answer_tokens(self) -> list[int]:
        return list(range(1, self.max_count + 1))

    def token_names(self) -> list[str]:
        return (["<pad>"] + [f"T{i}" for i in range(self.n_triggers)]
                + [f"w{i}" for i in range(self.n_words)])

    def config(self) -> dict:
        return {"n_ctx": self.n_ctx, "max_len": self.max_len, "n_triggers": self.n_triggers,
                "max_count": self.max_count, "n_words": self.n_words, "seed": self.seed,
                "test_fraction": self.test_fraction, **self._regime_config()}

    def _generate(self, n: int, gen: torch.Generator) -> TaskBatch:
        count = torch.randint(1, self.max_count + 1, (n,), generator=gen)
        slots = torch.arange(self.max_len)[None]
        triggers = 1 + torch.randint(self.n_triggers, (n, self.max_len), generator=gen)
        words = torch.where(slots < count[:, None], triggers,
                            self._fillers((n, self.max_len), gen))
        order = torch.rand(n, self.max_len, generator=gen).argsort(dim=1)   # shuffle
        words = torch.gather(words, 1, order)
        tokens = torch.full((n, self.n_ctx), PAD, dtype=torch.long)
        tokens[:, : self.max_len] = words
        return self._batch(tokens)

    def solve(self, tokens: Int[Tensor, "batch pos"]) -> tuple[Tensor, Tensor]:
        """Label = number of trigger tokens."""
        count = ((tokens >= 1) & (tokens <= self.n_triggers)).sum(dim=1)
        return count, torch.full_like(count, self.n_ctx - 1)
