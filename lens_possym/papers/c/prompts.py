r"""1-hop Number and Letter prompts for pretrained language models (paper C Sec 3.7, App H).

Each prompt is instructions, three worked examples (the paper's own), then
``Task: Input: "{sequence}" Output:``; the answer is one symbol. The sequence is a target
window of ``length`` symbols and a query:

* **Number** (a proxy for Index): ``length`` letters ``a..z`` (repeats allowed), then an
  integer ``o`` in ``1..length``; the answer is the letter ``o`` positions left of the
  integer. ``"a z b y c x d w 5"`` → ``y``.
* **Letter** (a proxy for Retrieval): ``length`` letter-digit pairs (``a..z`` × ``1..9``),
  then a letter-letter pair ``xy``; the answer is the unique pair starting with ``y``.
  ``"a4 b3 c2 d1 fc"`` → ``c2``. The queried letter occurs once; others may repeat.

The paper's wording of the instructions is not reproduced in it (paper_c.md §7: the
examples and the output format are); ours says the same in a sentence. The paper used
target windows ``{12, 16, 24, 32, 48, 64, 80, 100, 150, 200, 300}`` (:data:`PAPER_LENGTHS`).

:func:`hop_pairs` makes counterfactual pairs of these prompts for activation patching
(another offset, another target; ``docs/patching.md``).
"""

from __future__ import annotations

import random
import string
from dataclasses import dataclass
from typing import Any

from ...errors import TaskConfigError
from ...tasks.counterfactual import CounterfactualPairs

__all__ = ["HopPrompt", "hop_prompts", "hop_pairs", "HOP_CORRUPTIONS", "PAPER_LENGTHS",
           "INSTRUCTIONS", "EXAMPLES"]

PAPER_LENGTHS = (12, 16, 24, 32, 48, 64, 80, 100, 150, 200, 300)

INSTRUCTIONS = {
    "number": ("Find the number at the end of the input, n, and move n positions to the left "
               "from it. Answer with the letter found there, and nothing else."),
    "letter": ("Take the second character of the last token of the input, then scan to the left "
               "for the unique token that starts with that character. Answer with that token, "
               "and nothing else."),
}

EXAMPLES = {
    "number": [("a z b y c x d w 5", "y"), ("v t k g n k o h m p 4", "o"),
               ("w y b c v t r i p p 10", "w")],
    "letter": [("a4 b3 c2 d1 fc", "c2"), ("w9 t7 l5 g1 n4 l6 u9 k7 m5 p8 gk", "k7"),
               ("q5 r7 x4 t7 f4 k7 q4 u2 u3 r5 ex", "x4")],
}


@dataclass
class HopPrompt:
    """One prompt: the text, the sequence inside it, the answer, where the answer stands."""

    task: str
    length: int
    text: str
    sequence: str
    answer: str
    answer_index: int


def _frame(task: str, sequence: str) -> str:
    shots = "\n".join(f'Input: "{x}" Output: {y}' for x, y in EXAMPLES[task])
    return f'{INSTRUCTIONS[task]}\n\nExamples:\n{shots}\n\nTask: Input: "{sequence}" Output:'


def hop_prompts(task: str, length: int, n: int, *, seed: int = 0) -> list[HopPrompt]:
    """``n`` prompts of one task with a target window of ``length`` symbols (module doc)."""
    if task not in INSTRUCTIONS:
        raise TaskConfigError(f"task must be 'number' or 'letter', got {task!r}")
    if length < 2 or n < 1:
        raise TaskConfigError(f"length must be >= 2 and n >= 1, got {length}, {n}")
    rng = random.Random(f"{task}-{length}-{seed}")
    letters = string.ascii_lowercase
    out = []
    for _ in range(n):
        if task == "number":
            window = [rng.choice(letters) for _ in range(length)]
            offset = rng.randint(1, length)
            index = length - offset
            sequence = " ".join(window + [str(offset)])
            answer = window[index]
        else:
            target = rng.choice(letters)
            others = [c for c in letters if c != target]
            window = [rng.choice(others) + str(rng.randint(1, 9)) for _ in range(length)]
            index = rng.randrange(length)
            window[index] = target + str(rng.randint(1, 9))
            sequence = " ".join(window + [rng.choice(letters) + target])
            answer = window[index]
        out.append(HopPrompt(task, length, _frame(task, sequence), sequence, answer, index))
    return out


# ---- counterfactual pairs for patching ----------------------------------------------------

#: The corruptions of :func:`hop_pairs` per task (the first is the default).
HOP_CORRUPTIONS = {"number": ("shift_offset",), "letter": ("swap_target",)}


def _corrupt(prompt: HopPrompt, rng: random.Random) -> HopPrompt | None:
    """The prompt with its query changed so that the answer is another symbol of the
    window (``None`` when no such change exists)."""
    symbols = prompt.sequence.split(" ")
    window, query = symbols[:-1], symbols[-1]
    if prompt.task == "number":

        # same number of digits (the same tokens' count), another letter
        options = [o for o in range(1, len(window) + 1) if len(str(o)) == len(query)
                   and window[len(window) - o] != prompt.answer]
        if not options:
            return None
        new = rng.choice(options)
        index, answer = len(window) - new, window[len(window) - new]
        sequence = " ".join(window + [str(new)])
    else:
        firsts = [w[0] for w in window]
        options = [j for j, w in enumerate(window) if firsts.count(w[0]) == 1
                   and j != prompt.answer_index and w[0] != prompt.answer[0]]
        if not options:
            return None
        index = rng.choice(options)
        answer = window[index]
        sequence = " ".join(window + [query[0] + window[index][0]])
    return HopPrompt(prompt.task, prompt.length, _frame(prompt.task, sequence), sequence,
                     answer, index)


def hop_pairs(model: Any, task: str = "number", length: int = 12, n_prompts: int = 8, *,
              corruption: str | None = None, seed: int = 0, corruption_seed: int = 0) -> Any:
    """Counterfactual pairs of 1-hop prompts, for patching
    (:class:`~lens_possym.tasks.CounterfactualPairs`).

    * ``number`` / ``shift_offset``: the integer at the end asks for another offset (as
      many digits), whose letter differs from the clean answer; only the integer changes.
    * ``letter`` / ``swap_target``: the query's second letter names another pair of the
      window (one whose first letter occurs once), whose pair is the corrupted answer;
      only the query changes.

    The answers are the first token of ``" " + answer`` (what follows ``Output:``), and
    differ in every pair. Prompts are drawn with :func:`hop_prompts` (``seed``); a drawn
    prompt is kept when its corrupted twin has the same number of tokens, and the pairs
    of the most common token length are kept (prompts of a batch must have one length):
    the first ``n_prompts`` of them. Pairs whose tokens or first answer tokens do not
    differ (a tokenizer that does not know the letters) are left out.

    Raises:
        TaskConfigError: an unknown task or corruption, or fewer than ``n_prompts`` pairs
            of one length among the drawn prompts (raise ``length`` or lower ``n_prompts``).
    """
    import torch


    if task not in HOP_CORRUPTIONS:
        raise TaskConfigError(f"task must be 'number' or 'letter', got {task!r}")
    names = HOP_CORRUPTIONS[task]
    corruption = names[0] if corruption is None else corruption
    if corruption not in names:
        raise TaskConfigError(
            f"unknown {task} corruption {corruption!r}; use one of {', '.join(names)}")
    if isinstance(n_prompts, bool) or not isinstance(n_prompts, int) or n_prompts < 1:
        raise TaskConfigError(f"n_prompts must be a positive integer, got {n_prompts!r}")
    rng = random.Random(f"hop-{task}-{corruption}-{corruption_seed}")
    tokenizer = model.tokenizer

    def first_token(answer: str) -> int:
        return int(tokenizer.encode(" " + answer, add_special_tokens=False)[0])

    by_length: dict[int, list] = {}
    for prompt in hop_prompts(task, length, 20 * n_prompts, seed=seed):
        bad = _corrupt(prompt, rng)
        if bad is None:
            continue
        clean, corrupted = model.to_tokens(prompt.text)[0], model.to_tokens(bad.text)[0]
        if clean.shape != corrupted.shape or torch.equal(clean, corrupted):
            continue
        if first_token(prompt.answer) == first_token(bad.answer):
            continue
        by_length.setdefault(int(clean.shape[0]), []).append((prompt, bad, clean, corrupted))
    best = max(by_length.values(), key=len, default=[])
    if len(best) < n_prompts:
        raise TaskConfigError(
            f"only {len(best)} {task} prompts of length {length} and their corrupted twins "
            "differ in their tokens and first answer tokens and share one token length for "
            f"this tokenizer, fewer than n_prompts={n_prompts}; lower n_prompts, change "
            "length, or use a tokenizer that knows the letters")
    chosen = best[:n_prompts]
    return CounterfactualPairs(
        task=f"hop-{task}", corruption=corruption,
        clean_tokens=torch.stack([c for _, _, c, _ in chosen]),
        corrupted_tokens=torch.stack([k for _, _, _, k in chosen]),
        clean_answers=torch.tensor([first_token(p.answer) for p, _, _, _ in chosen]),
        corrupted_answers=torch.tensor([first_token(b.answer) for _, b, _, _ in chosen]),
        clean_prompts=[p.text for p, _, _, _ in chosen],
        corrupted_prompts=[b.text for _, b, _, _ in chosen],
        info={"length": length, "seed": seed, "corruption_seed": corruption_seed,
              "sequence_example": chosen[0][0].sequence,
              "corrupted_sequence_example": chosen[0][1].sequence},
        clean_task=[p for p, _, _, _ in chosen], corrupted_task=[b for _, b, _, _ in chosen])
