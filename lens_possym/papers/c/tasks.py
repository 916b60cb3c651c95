r"""Paper C's multi-hop tasks: **Number** (solved by positional Index heads) and **Letter**
(solved by symbolic Retrieval heads), structurally equivalent, seeded, hash-split.

Layout of a prompt of the training length (17 tokens, positions 0..16)::

    [ target window: 8 ][ pre-target window: 8 ][ query ]      → answer

Hops start at the query and move leftwards; after ``h`` hops (``h`` in ``1..max_hops``,
equal shares) the path lands in the target window, on the token that is the answer. The
hop path ``p_0 = query > p_1 > … > p_h`` (``p_1..p_{h-1}`` in the pre-target window,
``p_h`` in the target window) is drawn first: ``h - 1`` distinct pre-target positions,
sorted, and the answer position uniform over the target window; the answer's value is
uniform too, so within each hop class answer position and value are balanced
(paper_c.md §2; the repository's ``dataset.py`` samples the same way).

**Number** (:class:`NumberTask`). Target tokens are letters (``n_letters`` of them: paper
C uses 120, ``a..z`` then the bigrams ``aa..dp``), pre-target tokens and the query are
integers ``1..max_offset`` (paper: 16), each a *relative backward offset*: from position
``p`` holding ``o`` go to ``p - o``. The path's offsets are ``p_k - p_{k+1}``; every other
pre-target position holds a uniform offset to any earlier position *of the training
frame* (``1..p - n_extra``), so it never points into the extension below; other target
positions hold uniform letters (repeats allowed). Paper Fig 1: ``C B A 1 4 1 3 2 1`` → C.

**Letter** (:class:`LetterTask`). Every token is one atomic pair: target tokens are
letter-number pairs ``(l, d)`` (``l`` in ``n_letters`` = 8 letters, ``d`` in ``1..n_digits`` =
8), pre-target tokens and the query letter-letter pairs ``(l, l')``. From a pair ``(l, l')``
go to the earlier pair whose *first* letter is ``l'``; the first target-window pair reached
is the answer, the whole pair. The chain letters ``c_1..c_h`` are distinct (query
``(c_0, c_1)``, path pair ``k`` is ``(c_k, c_{k+1})``, answer ``(c_h, d)``), and every
filler uses only letters off the chain, so the path is unique ("proper" input, Def F.2).
Paper Fig 1: ``C2 B1 A3 FA EC DE HF GD IG`` → C2. The query's left letter ``c_0`` plays no
part in the hops; ``query_letter`` says where it comes from:

- ``"reserved"`` (the default): a chain letter of its own that occurs nowhere else, so
  fillers draw from ``n_letters - h - 1`` letters. Needs ``n_letters >= max_hops + 2``.
- ``"filler"``: drawn from the off-chain pool the fillers use (so it usually occurs among
  them, and fillers draw from ``n_letters - h`` letters), as paper C's
  ``data/symbolic_dataset.py`` does (``symbol_seq += [random.choice(choices)]``). Needs
  ``n_letters >= max_hops + 1``. The ``paper`` preset uses it.

**Length generalisation** (paper Sec 3.6, Fig 5B). ``length > 17`` inserts
``length - 17`` extra target-window tokens *before* the effective target window; the
pre-target window and the query are unchanged, so offsets and hops are unchanged and the
answer stays in the effective target window. The paper does not say what the extra tokens
are (UNCLEAR in paper_c.md §7); ``filler`` names the reading (:data:`FILLERS`; the headline
and the reason for it: docs/paper_c_rules.md):

- ``"target"`` (the headline): the target window's own distribution as the generator draws
  it: uniform letters for Number (answer copies included, at 1/``n_letters`` per token);
  letter-number pairs with off-chain first letters for Letter (the mirror's
  ``data/symbolic_dataset.py`` draws a window's fillers from letters other than the
  answer's and the chain's, so the answer token never recurs).
- ``"answer"``: fillers with answer-token copies (Def F.2 allows identical duplicates).
  Letter: each extra token's first letter uniform over the off-chain letters *and* the
  answer's letter ``c_h``; ``c_h`` gives the identical answer token, any other letter a
  letter-number pair with a uniform number (with the ``paper`` preset's 8 letters about
  16 % of the extension are answer copies). Number: the target window's letters are
  already uniform over every letter, answer included, so this is ``"target"`` (the same
  tokens; :meth:`MultiHopTask.same_as`).
- ``"duplicates"``: fillers with any proper duplicates. Letter: the first letter uniform
  over the off-chain letters and the chain letters ``c_1..c_h``; ``c_h`` gives the
  identical answer token, ``c_k`` (``k < h``) the identical path pair ``(c_k, c_{k+1})``,
  an off-chain letter ``l`` the pair ``(l, d_l)`` with one number ``d_l`` per letter and
  sequence (so every letter's extra copies are one identical token, Def F.2's "proper").
  Number: each extra token a copy of a uniformly chosen token of the 16 training-frame
  positions before the query (letters and offsets, path offsets and the answer included).
- ``"pretarget"``: drawn like the pre-target window's fillers: uniform offsets
  ``1..max_offset`` for Number; letter-letter pairs of off-chain letters for Letter.
- ``"mixed"``: each extra token from ``"target"`` or ``"pretarget"``, probability 1/2 each.
- ``"repeat"``: the effective target window tiled leftwards (the extension is copies of
  it, aligned with period ``window``): Number's answer letter recurs every ``window``
  tokens; Letter's answer pair recurs as the identical token (Def F.2's "proper").
- ``"reach"``: Number's choice of filler offsets. The extension as ``"target"``, and every
  non-path pre-target offset uniform over ``1..min(p, max_offset)`` at position ``p`` ("a
  uniformly random offset to any earlier position" read at the long length), so fillers
  may point into the extension; under the other readings they point only inside the
  training frame (``1..p - n_extra``), as at length 17. Letter has no offsets: this is
  ``"target"`` (the same tokens).

Every reading leaves the path, the answer and the effective target window unchanged
(``"reach"`` changes the pre-target fillers off the path only) and draws its tokens
*after* the training-length tokens, so ``"target"`` is bit-identical to the generator
before readings existed; ``filler`` enters :meth:`config` only when it is not ``"target"``
(checkpoints written before keep their configuration).

Token ids. Number: letters ``0..n_letters-1``, then offset ``o`` at ``n_letters + o - 1``.
Letter: ``(l, d)`` at ``l·n_digits + d - 1``, then ``(l, l')`` at
``n_letters·n_digits + l·n_letters + l'``.

Hop paths are a function of the tokens: :meth:`MultiHopTask.hop_path` follows them from
the query (an independent solver), and :meth:`MultiHopTask.sample_with_paths` returns the
generator's own paths beside the batch (tests check the two agree).
"""

from __future__ import annotations

import string
from typing import Callable

import torch
from jaxtyping import Int
from torch import Tensor

from ...errors import TaskConfigError
from ...training.tasks import Split, SyntheticTask, TaskBatch

__all__ = ["MultiHopTask", "NumberTask", "LetterTask", "TRAIN_LENGTH", "QUERY_LETTERS",
           "FILLERS", "FILLER_SUMMARIES", "HEADLINE_FILLER", "number_letters"]

TRAIN_LENGTH = 17
QUERY_LETTERS = ("reserved", "filler")
#: readings of the length extension's extra tokens (module docstring)
FILLERS = ("target", "answer", "duplicates", "pretarget", "mixed", "repeat", "reach")
HEADLINE_FILLER = "target"
#: one line per reading, for reports (the module docstring gives each in full)
FILLER_SUMMARIES = {
    "target": "drawn like the target window's fillers",
    "answer": "the target window's fillers with answer-token copies; Number: = `target`",
    "duplicates": "proper duplicates of the prompt's own tokens, path and answer included",
    "pretarget": "drawn like the pre-target fillers",
    "mixed": "`target` or `pretarget`, with probability 1/2 each",
    "repeat": "the effective target window tiled leftwards",
    "reach": "`target`, with the pre-target offsets free to point into the extension"
             "; Letter: = `target`",
}


def number_letters(n: int) -> list[str]:
    """Paper C's letter alphabet: ``a..z`` then the bigrams ``aa, ab, …`` (120 → ``…dp``)."""
    single = list(string.ascii_lowercase)
    pairs = [a + b for a in string.ascii_lowercase for b in string.ascii_lowercase]
    return (single + pairs)[:n]


class MultiHopTask(SyntheticTask):
    """Shared layout, path sampling, splits and per-hop evaluation of Number and Letter.

    Attributes:
        window: size of the target and pre-target windows (paper: 8).
        max_hops: hops ``1..max_hops`` in equal shares (paper: 4; ``<= window``).
        length: prompt length, ``2·window + 1`` for training (paper: 17) or more for
            length-generalisation sets (extra target-window tokens in front).
        filler: what the extra tokens are (:data:`FILLERS`, module docstring).
    """

    def __init__(self, *, window: int = 8, max_hops: int = 4, length: int | None = None,
                 seed: int = 0, test_fraction: float = 0.095, filler: str = HEADLINE_FILLER):
        super().__init__(seed=seed, test_fraction=test_fraction)
        if filler not in FILLERS:
            raise TaskConfigError(f"filler must be one of {FILLERS}, got {filler!r}")
        self.filler = filler
        if window < 2:
            raise TaskConfigError(f"window must be >= 2, got {window}")
        if not 1 <= max_hops <= window:
            raise TaskConfigError(f"max_hops must be in 1..window ({window}), got {max_hops}")
        base = 2 * window + 1
        length = base if length is None else int(length)
        if length < base:
            raise TaskConfigError(
                f"length must be >= {base} (target {window} + pre-target {window} + query); "
                f"got {length}")
        self.window, self.max_hops, self.length = int(window), int(max_hops), length

    # ---- layout -------------------------------------------------------------------------

    @property
    def n_extra(self) -> int:
        """Extra target-window tokens in front (0 at the training length)."""
        return self.length - (2 * self.window + 1)

    @property
    def n_ctx(self) -> int:
        return self.length

    @property
    def query_pos(self) -> int:
        return self.length - 1

    @property
    def target_start(self) -> int:
        """First position of the effective target window."""
        return self.n_extra

    @property
    def pre_start(self) -> int:
        """First position of the pre-target window."""
        return self.n_extra + self.window

    @property
    def answer_positions(self) -> list[int]:
        return list(range(self.target_start, self.target_start + self.window))

    def base_config(self) -> dict:
        out = {"window": self.window, "max_hops": self.max_hops, "length": self.length,
               "seed": self.seed, "test_fraction": self.test_fraction}
        if self.filler != HEADLINE_FILLER:
            out["filler"] = self.filler
        return out

    def at_length(self, length: int, *, filler: str | None = None) -> "MultiHopTask":
        """The same task with prompts of ``length`` tokens (a generalisation set), the
        extra tokens read as ``filler`` (default: this task's reading)."""
        extra = {} if filler is None else {"filler": filler}
        return type(self)(**{**self.config(), "length": int(length), **extra})

    #: readings that generate the same tokens as another one for this task (module doc)
    SAME_AS: dict[str, str] = {}

    def same_as(self, filler: str | None = None) -> str:
        """The reading whose tokens ``filler`` (default: this task's) generates for this
        task: itself, or the one it coincides with (Number's ``"answer"`` is
        ``"target"``; Letter's ``"reach"`` is ``"target"``)."""
        reading = self.filler if filler is None else filler
        if reading not in FILLERS:
            raise TaskConfigError(f"filler must be one of {FILLERS}, got {reading!r}")
        return self.SAME_AS.get(reading, reading)

    def _refill_extension(self, tokens: Tensor, draws: dict[str, Callable[[int], Tensor]],
                          gen: torch.Generator) -> None:
        """Overwrite the extension ``tokens[:, :n_extra]`` (in place) by this task's
        ``filler`` reading; ``draws[name](e)`` gives ``[batch, e]`` tokens of the readings
        that need the task (``"target"``, ``"pretarget"``, ``"answer"``, ``"duplicates"``).
        A no-op for ``"target"`` and what coincides with it (already drawn) or at length 17."""
        e = self.n_extra
        reading = self.same_as()
        if e == 0 or reading in ("target", "reach"):
            return
        if reading == "mixed":
            a, b = draws["target"](e), draws["pretarget"](e)
            pick = torch.rand(tokens.shape[0], e, generator=gen) < 0.5
            tokens[:, :e] = torch.where(pick, a, b)
        elif reading == "repeat":
            src = e + (torch.arange(e) - e) % self.window
            tokens[:, :e] = tokens[:, src]
        else:                                      # pretarget, answer, duplicates
            tokens[:, :e] = draws[reading](e)

    # ---- paths --------------------------------------------------------------------------

    def _draw_paths(self, n: int, gen: torch.Generator) -> tuple[Tensor, Tensor]:
        """``(hops [n], path [n, max_hops + 1])``: positions ``p_0 = query, p_1, …, p_h``,
        ``-1`` after ``p_h``. Hops in equal shares (a shuffled cycle), answer position
        uniform over the effective target window."""
        hops = (torch.arange(n) % self.max_hops + 1)[torch.randperm(n, generator=gen)]
        keys = torch.rand(n, self.window, generator=gen)
        order = keys.argsort(dim=1)                              # random pre-target slots
        path = torch.full((n, self.max_hops + 1), -1, dtype=torch.long)
        path[:, 0] = self.query_pos
        answer_pos = self.target_start + torch.randint(self.window, (n,), generator=gen)
        for k in range(1, self.max_hops):                       # intermediate stops
            take = order[:, :k]
            inter = (self.pre_start + take).sort(dim=1, descending=True).values
            rows = hops == k + 1
            path[rows, 1:k + 1] = inter[rows]
        path[torch.arange(n), hops] = answer_pos
        return hops, path

    def hop_path(self, tokens: Int[Tensor, "batch pos"]) -> tuple[Tensor, Tensor]:
        """Follow the hops from the query, reading only the tokens: ``(hops [batch],
        path [batch, max_hops + 1])`` (``-1`` after the answer position).

        Raises :class:`TaskConfigError` when a sequence has no well-defined path within
        ``max_hops`` hops."""
        n = tokens.shape[0]
        rows = torch.arange(n)
        path = torch.full((n, self.max_hops + 1), -1, dtype=torch.long)
        pos = torch.full((n,), tokens.shape[1] - 1, dtype=torch.long)
        path[:, 0] = pos
        hops = torch.zeros(n, dtype=torch.long)
        done = torch.zeros(n, dtype=torch.bool)
        for k in range(1, self.max_hops + 1):
            nxt = self._next(tokens, pos)
            if ((nxt < 0) & ~done).any():
                raise TaskConfigError(f"{self.name}: a sequence has no well-defined hop path")
            nxt = torch.where(done, pos, nxt)
            path[~done, k] = nxt[~done]
            arrived = self._is_target_token(tokens[rows, nxt]) & ~done
            hops[arrived] = k
            done |= arrived
            pos = nxt
            if bool(done.all()):
                break
        if not bool(done.all()):
            raise TaskConfigError(f"{self.name}: a sequence needs more than {self.max_hops} hops")
        return hops, path

    def solve(self, tokens: Int[Tensor, "batch pos"]) -> tuple[Tensor, Tensor]:
        hops, path = self.hop_path(tokens)
        answer_pos = path[torch.arange(len(tokens)), hops]
        return tokens[torch.arange(len(tokens)), answer_pos], answer_pos

    def sample_with_paths(self, n: int, *, split: Split = "test", seed: int | None = None
                          ) -> tuple[TaskBatch, Tensor, Tensor]:
        """``(batch, hops, path)`` from one split; ``hops``/``path`` as :meth:`hop_path`."""
        batch = self.sample(n, split=split, seed=seed)
        hops, path = self.hop_path(batch.tokens)
        return batch, hops, path

    def accuracy_by_hops(self, predictions: Int[Tensor, "batch"], batch: TaskBatch
                         ) -> list[float]:
        """Accuracy per hop count ``1..max_hops`` (``nan`` where unseen)."""
        hops, _ = self.hop_path(batch.tokens)
        correct = (predictions.cpu() == batch.answers.cpu()).float()
        return [float(correct[hops == h].mean()) if (hops == h).any() else float("nan")
                for h in range(1, self.max_hops + 1)]

    # ---- task specifics -----------------------------------------------------------------

    def _next(self, tokens: Tensor, pos: Tensor) -> Tensor:
        """The position one hop left of ``pos`` (``-1``: none)."""
        raise NotImplementedError

    def _is_target_token(self, token: Tensor) -> Tensor:
        raise NotImplementedError


class NumberTask(MultiHopTask):
    """Number: letters in the target window, backward offsets before the query (module doc)."""

    name = "number"
    behaviour = "positional"
    SAME_AS = {"answer": "target"}

    def __init__(self, n_letters: int = 120, max_offset: int = 16, *, window: int = 8,
                 max_hops: int = 4, length: int | None = None, seed: int = 0,
                 test_fraction: float = 0.095, filler: str = HEADLINE_FILLER):
        super().__init__(window=window, max_hops=max_hops, length=length, seed=seed,
                         test_fraction=test_fraction, filler=filler)
        if n_letters < 2:
            raise TaskConfigError(f"n_letters must be >= 2, got {n_letters}")
        if max_offset < 2 * window:
            raise TaskConfigError(
                f"max_offset must be >= 2·window ({2 * window}) so the query can reach the "
                f"first target position; got {max_offset}")
        self.n_letters, self.max_offset = int(n_letters), int(max_offset)

    @property
    def d_vocab(self) -> int:
        return self.n_letters + self.max_offset

    @property
    def answer_tokens(self) -> list[int]:
        return list(range(self.n_letters))

    def token_names(self) -> list[str]:
        letters = number_letters(self.n_letters) if self.n_letters <= 702 else [
            f"L{i}" for i in range(self.n_letters)]
        return letters + [str(o) for o in range(1, self.max_offset + 1)]

    def offset_token(self, offset: Tensor) -> Tensor:
        return self.n_letters + offset - 1

    def config(self) -> dict:
        return {"n_letters": self.n_letters, "max_offset": self.max_offset,
                **self.base_config()}

    def _generate(self, n: int, gen: torch.Generator) -> TaskBatch:
        return self._generate_with_paths(n, gen)[0]

    def _generate_with_paths(self, n: int, gen: torch.Generator
                             ) -> tuple[TaskBatch, Tensor, Tensor]:
        hops, path = self._draw_paths(n, gen)
        L, rows = self.length, torch.arange(n)
        tokens = torch.empty(n, L, dtype=torch.long)
        tokens[:, : self.pre_start] = torch.randint(self.n_letters, (n, self.pre_start),
                                                    generator=gen)
        # fillers: a uniform offset to any earlier position of the training frame (or,
        # under "reach", to any earlier position within max_offset)
        pos = torch.arange(self.pre_start, L)
        frame = pos if self.filler == "reach" else pos - self.n_extra
        reach = frame.clamp(max=self.max_offset)
        offsets = (torch.rand(n, len(pos), generator=gen) * reach).long() + 1
        tokens[:, self.pre_start:] = self.offset_token(offsets)
        for k in range(self.max_hops):
            src, dst = path[:, k], path[:, k + 1]
            on = dst >= 0
            tokens[rows[on], src[on]] = self.offset_token(src[on] - dst[on])
        frame = tokens[:, self.n_extra: L - 1]

        def copies(e: int) -> Tensor:            # copies of the frame's tokens
            pick = torch.randint(frame.shape[1], (n, e), generator=gen)
            return frame.gather(1, pick)

        self._refill_extension(tokens, {
            "target": lambda e: torch.randint(self.n_letters, (n, e), generator=gen),
            "pretarget": lambda e: self.offset_token(
                torch.randint(1, self.max_offset + 1, (n, e), generator=gen)),
            "duplicates": copies}, gen)
        answer_pos = path[rows, hops]
        return TaskBatch(tokens, tokens[rows, answer_pos], answer_pos), hops, path

    def _next(self, tokens: Tensor, pos: Tensor) -> Tensor:
        tok = tokens[torch.arange(len(tokens)), pos]
        offset = tok - self.n_letters + 1
        nxt = pos - offset
        return torch.where((tok >= self.n_letters) & (nxt >= 0), nxt, -1)

    def _is_target_token(self, token: Tensor) -> Tensor:
        return token < self.n_letters


class LetterTask(MultiHopTask):
    """Letter: letter-number pairs in the target window, letter-letter pairs before and as
    the query; hop to the earlier pair whose first letter is this pair's second (module doc)."""

    name = "letter"
    behaviour = "symbolic"
    SAME_AS = {"reach": "target"}

    def __init__(self, n_letters: int = 8, n_digits: int = 8, *, window: int = 8,
                 max_hops: int = 4, length: int | None = None, seed: int = 0,
                 test_fraction: float = 0.095, query_letter: str = "reserved",
                 filler: str = HEADLINE_FILLER):
        super().__init__(window=window, max_hops=max_hops, length=length, seed=seed,
                         test_fraction=test_fraction, filler=filler)
        if query_letter not in QUERY_LETTERS:
            raise TaskConfigError(
                f"query_letter must be one of {QUERY_LETTERS}, got {query_letter!r}")
        reserved = int(query_letter == "reserved")
        if n_letters < max_hops + 1 + reserved:
            raise TaskConfigError(
                f"n_letters must be >= max_hops + {1 + reserved} ({max_hops + 1 + reserved}) "
                f"with query_letter={query_letter!r}: the chain uses max_hops"
                f"{' + 1' if reserved else ''} distinct letters and fillers need at least "
                f"one more; got {n_letters}")
        if n_digits < 1:
            raise TaskConfigError(f"n_digits must be >= 1, got {n_digits}")
        self.n_letters, self.n_digits = int(n_letters), int(n_digits)
        self.query_letter = query_letter

    @property
    def n_pairs(self) -> int:
        return self.n_letters * self.n_digits

    @property
    def d_vocab(self) -> int:
        return self.n_pairs + self.n_letters * self.n_letters

    @property
    def answer_tokens(self) -> list[int]:
        return list(range(self.n_pairs))

    def token_names(self) -> list[str]:
        letters = string.ascii_lowercase if self.n_letters <= 26 else [
            f"L{i}_" for i in range(self.n_letters)]
        digit = [f"{l}{d}" for l in letters[: self.n_letters] for d in range(1, self.n_digits + 1)]
        pairs = [f"{a}{b}" for a in letters[: self.n_letters] for b in letters[: self.n_letters]]
        return digit + pairs

    def digit_token(self, letter: Tensor, digit: Tensor) -> Tensor:
        """``(letter, digit)`` with ``digit`` in ``1..n_digits``."""
        return letter * self.n_digits + digit - 1

    def pair_token(self, left: Tensor, right: Tensor) -> Tensor:
        return self.n_pairs + left * self.n_letters + right

    def config(self) -> dict:
        return {"n_letters": self.n_letters, "n_digits": self.n_digits,
                "query_letter": self.query_letter, **self.base_config()}

    def _generate(self, n: int, gen: torch.Generator) -> TaskBatch:
        return self._generate_with_paths(n, gen)[0]

    def _generate_with_paths(self, n: int, gen: torch.Generator
                             ) -> tuple[TaskBatch, Tensor, Tensor]:
        hops, path = self._draw_paths(n, gen)
        L, A, rows = self.length, self.n_letters, torch.arange(n)
        chain = torch.rand(n, A, generator=gen).argsort(dim=1)     # c_0, c_1, … distinct
        if self.query_letter == "filler":
            # c_1..c_h = the first h letters; c_0 one of the rest (the fillers' pool)
            u = torch.rand(n, 1, generator=gen)
            pick = hops[:, None] + (u * (A - hops)[:, None]).long()
            chain = torch.cat([chain.gather(1, pick), chain], dim=1)
        n_chain = hops + 1
        # off-chain letters: chain[:, n_chain:], pick uniformly among them
        n_off = chain.shape[1] - n_chain

        def off_chain(shape_cols: int) -> Tensor:
            u = torch.rand(n, shape_cols, generator=gen)
            idx = n_chain[:, None] + (u * n_off[:, None]).long()
            return chain.gather(1, idx)

        tokens = torch.empty(n, L, dtype=torch.long)
        digits = torch.randint(1, self.n_digits + 1, (n, self.pre_start), generator=gen)
        tokens[:, : self.pre_start] = self.digit_token(off_chain(self.pre_start), digits)
        w = L - self.pre_start
        tokens[:, self.pre_start:] = self.pair_token(off_chain(w), off_chain(w))
        for k in range(self.max_hops):                         # path pairs (c_k, c_{k+1})
            at = path[:, k]
            on = (path[:, k + 1] >= 0)
            tokens[rows[on], at[on]] = self.pair_token(chain[rows[on], k], chain[rows[on], k + 1])
        answer_pos = path[rows, hops]
        answer_digit = torch.randint(1, self.n_digits + 1, (n,), generator=gen)
        answer = self.digit_token(chain[rows, hops], answer_digit)
        tokens[rows, answer_pos] = answer
        def with_answer(e: int) -> Tensor:
            # first letters uniform over c_h (chain[:, h]) and the off-chain letters
            u = torch.rand(n, e, generator=gen)
            idx = hops[:, None] + (u * (n_off + 1)[:, None]).long()
            letter = chain.gather(1, idx)
            digit = torch.randint(1, self.n_digits + 1, (n, e), generator=gen)
            return torch.where(idx == hops[:, None], answer[:, None],
                               self.digit_token(letter, digit))

        def duplicates(e: int) -> Tensor:
            # first letters uniform over c_1..c_h and the off-chain letters (chain[:, 1:]);
            # chain letters give the identical frame token, off-chain l one (l, d_l)
            u = torch.rand(n, e, generator=gen)
            idx = 1 + (u * (chain.shape[1] - 1)).long()
            letter = chain.gather(1, idx)
            nxt = chain.gather(1, (idx + 1).clamp(max=chain.shape[1] - 1))
            d_of = torch.randint(1, self.n_digits + 1, (n, A), generator=gen)
            out = self.digit_token(letter, d_of.gather(1, letter))
            on_path = idx < hops[:, None]
            out = torch.where(on_path, self.pair_token(letter, nxt), out)
            return torch.where(idx == hops[:, None], answer[:, None], out)

        self._refill_extension(tokens, {
            "target": lambda e: self.digit_token(
                off_chain(e), torch.randint(1, self.n_digits + 1, (n, e), generator=gen)),
            "pretarget": lambda e: self.pair_token(off_chain(e), off_chain(e)),
            "answer": with_answer, "duplicates": duplicates}, gen)
        return TaskBatch(tokens, answer, answer_pos), hops, path

    def _next(self, tokens: Tensor, pos: Tensor) -> Tensor:
        n, L = tokens.shape
        tok = tokens[torch.arange(n), pos]
        is_pair = tok >= self.n_pairs
        want = (tok - self.n_pairs) % self.n_letters                # right letter
        left = torch.where(tokens >= self.n_pairs, (tokens - self.n_pairs) // self.n_letters,
                           tokens // self.n_digits)
        cols = torch.arange(L)[None, :]
        match = (left == want[:, None]) & (cols < pos[:, None])
        # the latest earlier match (unique on proper inputs)
        found = torch.where(match, cols, -1).max(dim=1).values
        return torch.where(is_pair, found, -1)

    def _is_target_token(self, token: Tensor) -> Tensor:
        return token < self.n_pairs
