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
"""

from __future__ import annotations

import random
import string
from dataclasses import dataclass

from ...errors import TaskConfigError

__all__ = ["HopPrompt", "hop_prompts", "PAPER_LENGTHS", "INSTRUCTIONS", "EXAMPLES"]

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
