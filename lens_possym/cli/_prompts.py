"""``--prompts FILE`` (with ``--field``): your own prompts instead of a built-in task.

The file is read as ``lens-possym dataset`` reads it
(:func:`lens_possym.scores.dataset.read_prompts`: text, one prompt a line; or ``.jsonl``,
``--field`` of each object, or bare strings / token-id lists). ``profile`` scores prompts
of any lengths (grouped by length, no padding); ``ablate`` and ``heads``, which run the
prompts through one batch per ablation, cut them to the shortest prompt's token length
and predict each prompt's last kept token from the tokens before it.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from .. import _inputs, scores
from ..errors import InvalidSelectionError
from ._types import positive_int

if TYPE_CHECKING:
    from torch import Tensor

    from ..typing import HookedModel

__all__ = ["add_prompts_args", "add_task_args", "add_pair_args",
           "check_pair_args", "prompt_tokens", "equal_length", "TASK_DEFAULTS",
           "SAME_PROMPTS"]

#: The one default prompt set of each task, shared by ``profile``, ``heads``, ``ablate`` and
#: ``patch`` (the clean prompts of ``patch``'s pairs are these prompts): the heads one
#: command finds "most symbolic" and another "most important" come from the same prompts.
TASK_DEFAULTS = {"n_prompts": 16, "n_pairs": 4, "seed": 0, "distance": 1, "n_words": 8,
                 "n_cue": 2}

#: what ``--help`` says about it
SAME_PROMPTS = ("by default the same prompts in profile, heads, ablate and patch: "
                f"{TASK_DEFAULTS['n_prompts']} prompts, binding with {TASK_DEFAULTS['n_pairs']} "
                f"pairs, seed {TASK_DEFAULTS['seed']}")


def add_prompts_args(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument("--prompts", metavar="FILE",
                        help="your own prompts instead of --task: a text file (one prompt a "
                        "line) or .jsonl (one object a line, its --field; or a string or a "
                        f"list of token ids a line); {what}")
    parser.add_argument("--field", default="text",
                        help="the JSONL field holding the prompt (default text)")


def add_task_args(parser: argparse.ArgumentParser, *, distance: bool = False) -> None:
    """``--n-prompts``, ``--n-pairs``, ``--seed`` (and with ``distance``: ``--distance``,
    ``--n-words``, ``--n-cue``) with the defaults every command shares
    (:data:`TASK_DEFAULTS`)."""
    d = TASK_DEFAULTS
    parser.add_argument("--n-prompts", type=positive_int, default=d["n_prompts"],
                        help=f"prompts of the task (default {d['n_prompts']}; {SAME_PROMPTS})")
    parser.add_argument("--n-pairs", type=positive_int, default=d["n_pairs"],
                        help=f"binding: entity-attribute pairs per prompt (default {d['n_pairs']})")
    parser.add_argument("--seed", type=int, default=d["seed"],
                        help=f"prompt seed (default {d['seed']})")
    if distance:
        parser.add_argument("--distance", type=int, default=d["distance"],
                            help="distance: spacing of the cue words and the answer "
                            f"(default {d['distance']})")
        parser.add_argument("--n-words", type=positive_int, default=d["n_words"],
                            help=f"distance: words in the list (default {d['n_words']})")
        parser.add_argument("--n-cue", type=positive_int, default=d["n_cue"],
                            help=f"distance: words in the cue (default {d['n_cue']})")


def add_pair_args(parser: argparse.ArgumentParser) -> None:
    """The counterfactual pairs of ``patch`` and ``circuit`` (read by
    ``cli.patch.pairs_from_args``): ``--task`` (binding, distance), ``--corruption``,
    ``--prompts FILE`` (JSONL pairs), the task arguments (:func:`add_task_args`) and
    ``--corruption-seed``."""
    parser.add_argument("--task", default="binding", choices=["binding", "distance"])
    parser.add_argument("--corruption",
                        help="binding: swap_query (default), swap_attribute, shuffle_order; "
                        "distance: shift_cue (default), swap_answer")
    parser.add_argument("--prompts", metavar="FILE",
                        help="JSONL of your own pairs (clean, corrupted, clean_answer, "
                        "corrupted_answer per line) instead of --task")
    add_task_args(parser, distance=True)
    parser.add_argument("--corruption-seed", type=int, default=0)


def check_pair_args(args: argparse.Namespace) -> None:
    """Refuse what :func:`add_pair_args`'s options cannot mean together, before any model
    is loaded."""
    if args.prompts and args.corruption:
        raise InvalidSelectionError("--corruption names a task's corruption; --prompts brings "
                                    "its own corrupted prompts")


def prompt_tokens(model: "HookedModel", path: str | Path, field: str = "text") -> list["Tensor"]:
    """Every prompt of the file as token ids ``[pos]`` (BOS first for text), in file order.

    Raises:
        InvalidSelectionError: no such file, no prompts in it, a bad line (named by its
            number), a prompt that is not valid for the model.
    """
    import torch

    path = Path(path)
    rows = []
    for number, prompt in enumerate(scores.read_prompts(path, field=field), 1):
        try:
            tokens = _inputs.as_tokens(model, prompt if isinstance(prompt, str)
                               else torch.tensor(prompt, dtype=torch.long))
        except InvalidSelectionError as exc:
            raise InvalidSelectionError(f"{path}, prompt {number}: {exc}") from None
        rows.append(tokens[0])
    if not rows:
        raise InvalidSelectionError(f"{path} holds no prompts (every line is blank)")
    return rows


def equal_length(rows: list["Tensor"], *, min_tokens: int = 2) -> tuple["Tensor", int]:
    """The prompts cut to the shortest one's length, as ``[batch, pos]``, and that length."""
    import torch

    n = min(len(r) for r in rows)
    if n < min_tokens:
        raise InvalidSelectionError(
            f"the shortest prompt has {n} token(s); every prompt needs at least {min_tokens} "
            "(a context and the token to predict)")
    return torch.stack([r[:n] for r in rows]), n
