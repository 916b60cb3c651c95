r"""Length generalisation (paper C Sec 3.6-3.7, Fig 5B-D, Table 3).

* :func:`accuracy_by_length`: a trained multi-hop model on the task's generalisation sets
  (:meth:`~lens_possym.papers.c.tasks.MultiHopTask.at_length`: extra target
  tokens in front, pre-target window and query unchanged), accuracy overall and per hop
  count at each length, the extra tokens read as ``filler``
  (:data:`~lens_possym.papers.c.tasks.FILLERS`; the headline is ``"target"``, extra tokens
  drawn like the target window's fillers). GPT-J runs past its ``n_positions``
  (:meth:`~lens_possym.papers.c.gptj.GPTJTaskModel.ensure_positions`).
* :func:`lm_hop_accuracy`: a pretrained language model (a bridge, e.g.
  ``lens_possym.load_model("gemma-3-270m")``) on the 1-hop prompts of
  :mod:`lens_possym.papers.c.prompts`, scored greedily: the continuation after
  ``Output:`` must spell the answer (up to ``max_new_tokens`` tokens, leading spaces
  ignored).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import torch

from ...errors import InvalidSelectionError
from ...results_io import ResultIO
from .tasks import MultiHopTask
from .prompts import hop_prompts

__all__ = ["LengthAccuracy", "accuracy_by_length", "lm_hop_accuracy"]


@dataclass(repr=False)
class LengthAccuracy(ResultIO):
    """Accuracy at each length: ``accuracy[i]`` at ``lengths[i]``; ``by_hops[i]`` per hop
    count (empty for LM prompts); ``n_prompts`` per length; ``filler``: the reading of the
    extra tokens."""

    task: str
    lengths: list[int]
    accuracy: list[float]
    by_hops: list[list[float]]
    n_prompts: int
    model: str = ""
    filler: str = "target"

    def to_dict(self) -> dict:
        return {"task": self.task, "lengths": self.lengths, "accuracy": self.accuracy,
                "by_hops": self.by_hops, "n_prompts": self.n_prompts, "model": self.model,
                "filler": self.filler}

    FORMAT = "lens-possym/paper-c-length-accuracy@1"

    def summary(self) -> dict:
        return {"task": self.task, "lengths": self.lengths, "accuracy": self.accuracy,
                "n_prompts": self.n_prompts, "filler": self.filler}

    def _table(self):
        """One row per length (``hops`` ``<NA>``) and per length and hop count:
        ``length``, ``hops``, ``accuracy``."""
        import pandas as pd

        rows = []
        for n, acc, by_hops in zip(self.lengths, self.accuracy, self.by_hops):
            rows.append({"length": n, "hops": None, "accuracy": acc})
            rows += [{"length": n, "hops": h + 1, "accuracy": a} for h, a in enumerate(by_hops)]
        frame = pd.DataFrame.from_records(rows, columns=["length", "hops", "accuracy"])
        frame["hops"] = frame["hops"].astype("Int64")
        return frame


@torch.no_grad()
def accuracy_by_length(model, task: MultiHopTask, lengths: Sequence[int], *,
                       n_prompts: int = 256, chunk: int = 32, seed: int = 0,
                       filler: str | None = None,
                       log: Callable[[str], None] | None = None) -> LengthAccuracy:
    """Accuracy of a trained model at each length (module docstring).

    ``chunk`` bounds the batch of one forward pass (attention is ``n²`` per prompt);
    ``filler`` the reading of the extra tokens (default: the task's own)."""
    if not lengths:
        raise InvalidSelectionError("give at least one length")
    model.eval()
    acc, by_hops = [], []
    reading = task.filler if filler is None else filler
    for n in lengths:
        long = task.at_length(int(n), filler=reading)
        batch = long.test_set(n_prompts, seed=seed + int(n))
        preds = torch.cat([model(batch.tokens[i: i + chunk])[:, -1].argmax(-1)
                           for i in range(0, len(batch), chunk)])
        acc.append(float((preds == batch.answers).float().mean()))
        by_hops.append(long.accuracy_by_hops(preds, batch))
        if log:
            log(f"{task.name} length {n}: accuracy {acc[-1]:.3f} by hops "
                f"{[round(a, 3) for a in by_hops[-1]]}")
    return LengthAccuracy(task.name, [int(n) for n in lengths], acc, by_hops, n_prompts,
                          filler=reading)


@torch.no_grad()
def lm_hop_accuracy(bridge, task: str, lengths: Sequence[int], *, n_prompts: int = 10,
                    seed: int = 0, max_new_tokens: int = 3, name: str = "",
                    log: Callable[[str], None] | None = None) -> LengthAccuracy:
    """Greedy accuracy of a language model on 1-hop prompts at each target-window length."""

    acc = []
    for n in lengths:
        hits = 0
        for prompt in hop_prompts(task, int(n), n_prompts, seed=seed):
            tokens = bridge.to_tokens(prompt.text)
            text = ""
            for _ in range(max_new_tokens):
                nxt = bridge(tokens)[0, -1].argmax()
                text += bridge.tokenizer.decode([int(nxt)])
                tokens = torch.cat([tokens, nxt.view(1, 1).to(tokens.device)], dim=1)
                got = text.strip()
                if got and not prompt.answer.startswith(got):
                    break
                if got == prompt.answer:
                    break
            got = text.strip()
            hits += int(got == prompt.answer or (got.startswith(prompt.answer) and not
                                                  got[len(prompt.answer):][:1].isalnum()))
        acc.append(hits / n_prompts)
        if log:
            log(f"{name or 'model'} {task} length {n}: {hits}/{n_prompts}")
    return LengthAccuracy(task, [int(n) for n in lengths], acc, [], n_prompts, model=name)
