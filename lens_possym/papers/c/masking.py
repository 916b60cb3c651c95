r"""Why a trained multi-hop GPT-J fails at length: the masking diagnostic.

A length-``n`` prompt is a training-length prompt (17 tokens) with ``n - 17`` extra
target-window tokens in front (:meth:`~lens_possym.papers.c.tasks.MultiHopTask.at_length`).
:func:`extension_accuracy` measures accuracy on such prompts three ways, on the same
prompts:

* ``"as built"``: the model as it is (the length-generalisation number);
* ``"mask"``: the extra tokens **hidden from layers** ``layers`` (default 0-3): in those
  layers no query at an effective position (the last 17) may attend to an extra token,
  i.e. those keys get ``-inf`` before the softmax (the extra tokens still attend to one
  another, causally, so their own rows stay defined); later layers see everything. If
  accuracy comes back, the failure lies in what those layers do with the extra tokens;
* ``"positions"``: nothing masked, but the extra tokens get **trained-range position
  ids**: extra token ``i`` takes the id of effective target position ``i mod window``
  (so every query-key distance the model sees lies in ``0..16``, as in training, apart
  from the extra tokens among themselves), the effective tokens keep theirs. If accuracy
  does not come back, unseen distances are not the cause.

Both work on a :class:`~lens_possym.papers.c.gptj.GPTJTaskModel` (paper C's model) by
replacing the ``attention_mask`` / ``position_ids`` keyword arguments of its attention
modules (forward pre-hooks on ``model.hf``'s ``GPTJAttention`` modules, removed on exit:
:func:`extension_hooks`); the model-level mask and positions are untouched, so
transformers' packed-sequence detection never sees the permuted ids.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Iterator, Sequence

import torch
from torch import Tensor

from ...errors import InvalidSelectionError
from ...results_io import ResultIO
from .tasks import MultiHopTask

__all__ = ["MODES", "ExtensionAccuracy", "extension_accuracy", "extension_hooks",
           "extension_mask", "trained_range_positions"]

MODES = ("as built", "mask", "positions")


def extension_mask(n: int, n_extra: int, *, dtype=torch.float32) -> Tensor:
    """Additive mask ``[1, 1, n, n]``: causal, and keys ``< n_extra`` hidden from queries
    ``>= n_extra`` (the most negative finite value, as transformers uses)."""
    if not 0 <= n_extra < n:
        raise InvalidSelectionError(f"n_extra must be in 0..{n - 1}, got {n_extra}")
    low = torch.finfo(dtype).min
    q = torch.arange(n)[:, None]
    k = torch.arange(n)[None, :]
    hidden = (k > q) | ((q >= n_extra) & (k < n_extra))
    return torch.zeros(n, n, dtype=dtype).masked_fill(hidden, low)[None, None]


def trained_range_positions(n: int, n_extra: int, window: int) -> Tensor:
    """Position ids ``[1, n]``: effective positions keep ``n_extra..n-1``; extra token
    ``i`` gets ``n_extra + (i mod window)`` (module docstring)."""
    if not 0 <= n_extra < n or window < 1:
        raise InvalidSelectionError(f"need 0 <= n_extra < n and window >= 1; got n_extra "
                                    f"{n_extra}, n {n}, window {window}")
    ids = torch.arange(n)
    ids[:n_extra] = n_extra + torch.arange(n_extra) % window
    return ids[None]


def _attention_modules(model) -> list:
    hf = getattr(model, "hf", None)
    blocks = getattr(getattr(hf, "transformer", None), "h", None)
    if blocks is None:
        raise InvalidSelectionError(
            f"the masking diagnostic runs on a GPTJTaskModel (paper C's model); got "
            f"{type(model).__name__}")
    return [block.attn for block in blocks]


@contextmanager
def extension_hooks(model, n: int, n_extra: int, *, mode: str, layers: Sequence[int] = (0, 1, 2, 3),
                    window: int = 8) -> Iterator[None]:
    """Within the block, ``model`` (a GPTJTaskModel) runs length-``n`` inputs with the
    extra tokens hidden from ``layers`` (``mode="mask"``) or at trained-range position ids
    (``mode="positions"``); ``"as built"`` changes nothing."""
    if mode not in MODES:
        raise InvalidSelectionError(f"mode must be one of {MODES}, got {mode!r}")
    modules = _attention_modules(model)
    chosen = sorted({int(x) for x in layers})
    if mode == "mask" and (not chosen or chosen[0] < 0 or chosen[-1] >= len(modules)):
        raise InvalidSelectionError(
            f"layers must lie in 0..{len(modules) - 1} and not be empty; got {list(layers)}")
    handles = []
    device = next(model.parameters()).device
    if mode == "mask":
        mask = extension_mask(n, n_extra).to(device)
        targets, change = [modules[i] for i in chosen], {"attention_mask": mask}
    elif mode == "positions":
        ids = trained_range_positions(n, n_extra, window).to(device)
        targets, change = modules, {"position_ids": ids}
    else:
        targets, change = [], {}

    def pre_hook(module, args, kwargs):
        batch = kwargs["hidden_states"].shape[0] if "hidden_states" in kwargs else args[0].shape[0]
        new = dict(kwargs)
        for key, value in change.items():
            if key not in kwargs:
                raise InvalidSelectionError(
                    f"GPT-J's attention was called without {key!r}; this transformers "
                    "version is not supported by the masking diagnostic")
            new[key] = value.expand(batch, *value.shape[1:])
        return args, new

    try:
        for module in targets:
            handles.append(module.register_forward_pre_hook(pre_hook, with_kwargs=True))
        yield
    finally:
        for handle in handles:
            handle.remove()


@dataclass(repr=False)
class ExtensionAccuracy(ResultIO):
    """Accuracy on long prompts as built, with the extension masked from early layers,
    and at trained-range position ids (module docstring).

    Attributes:
        task, lengths, n_prompts, layers (the masked layers), window.
        accuracy: ``{mode: [n_lengths]}``; by_hops: ``{mode: [n_lengths][max_hops]}``.
    """

    task: str
    lengths: list[int]
    n_prompts: int
    layers: list[int]
    accuracy: dict[str, list[float]] = field(default_factory=dict)
    by_hops: dict[str, list[list[float]]] = field(default_factory=dict)
    filler: str = "target"

    FORMAT = "lens-possym/paper-c-extension-accuracy@1"

    def to_dict(self) -> dict:
        return {"task": self.task, "lengths": self.lengths, "n_prompts": self.n_prompts,
                "layers": self.layers, "accuracy": self.accuracy, "by_hops": self.by_hops,
                "filler": self.filler}

    @classmethod
    def from_dict(cls, data: dict) -> "ExtensionAccuracy":
        return cls(**{k: data[k] for k in ("task", "lengths", "n_prompts", "layers",
                                          "accuracy", "by_hops", "filler")})

    def _table(self):
        import pandas as pd

        rows = [{"length": n, "mode": mode, "score": "accuracy", "value": acc[i]}
                for mode, acc in self.accuracy.items() for i, n in enumerate(self.lengths)]
        return pd.DataFrame.from_records(rows, columns=["length", "mode", "score", "value"])

    def _headline(self) -> list[str]:
        return [f"{mode}={[round(a, 3) for a in acc]}" for mode, acc in self.accuracy.items()]


@torch.no_grad()
def extension_accuracy(model, task: MultiHopTask, lengths: Sequence[int], *,
                       layers: Sequence[int] = (0, 1, 2, 3), modes: Sequence[str] = MODES,
                       n_prompts: int = 256, seed: int = 11, chunk: int = 32,
                       filler: str | None = None) -> ExtensionAccuracy:
    """Accuracy of a GPTJTaskModel at each length in each of ``modes`` (module
    docstring), on the prompts :func:`~lens_possym.papers.c.lengths.accuracy_by_length`
    uses (``test_set(n_prompts, seed=seed + n)``), so ``"as built"`` equals its number."""
    if not lengths:
        raise InvalidSelectionError("give at least one length")
    bad = [m for m in modes if m not in MODES]
    if bad or not modes:
        raise InvalidSelectionError(f"modes must be some of {MODES}, got {list(modes)}")
    _attention_modules(model)
    model.eval()
    reading = task.filler if filler is None else filler
    acc: dict[str, list[float]] = {m: [] for m in modes}
    hops_acc: dict[str, list[list[float]]] = {m: [] for m in modes}
    for n in lengths:
        long = task.at_length(int(n), filler=reading)
        batch = long.test_set(n_prompts, seed=seed + int(n))
        model.ensure_positions(int(n))
        for mode in modes:
            with extension_hooks(model, int(n), long.n_extra, mode=mode, layers=layers,
                                 window=long.window):
                preds = torch.cat([model(batch.tokens[i: i + chunk])[:, -1].argmax(-1)
                                   for i in range(0, len(batch), chunk)])
            acc[mode].append(float((preds.cpu() == batch.answers).float().mean()))
            hops_acc[mode].append(long.accuracy_by_hops(preds.cpu(), batch))
    return ExtensionAccuracy(task.name, [int(n) for n in lengths], n_prompts,
                             sorted({int(x) for x in layers}), acc, hops_acc, reading)
