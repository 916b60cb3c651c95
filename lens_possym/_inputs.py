"""Turning what users pass (a prompt, prompts, tokens; positions; heads) into tensors.

Every analysis goes through these helpers so that bad input fails the same way everywhere,
with a message that says what was wrong and what to pass instead.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Sequence, Union

import torch
from jaxtyping import Int
from torch import Tensor

from ._ids import read_ids
from .errors import InvalidSelectionError
from .typing import HookedModel
from ._ids import as_int

__all__ = ["as_tokens", "as_token_pair", "as_positions", "as_heads", "as_layers", "resolve_device",
           "ModelInput", "is_activation_cache", "check_count", "MAX_PROMPTS"]

#: the most prompts one call builds (one batch): past it a typo (10**9) would run for hours
#: or exhaust memory instead of being refused
MAX_PROMPTS = 100_000


def check_count(name: str, value: int, low: int = 1, high: int = MAX_PROMPTS) -> None:
    """Refuse a count outside ``low..high`` (an ``InvalidSelectionError`` naming both)."""
    if not low <= value <= high:
        raise InvalidSelectionError(
            f"{name} must be between {low} and {high}, got {value}"
            + ("; build a larger set from several seeds, or score a file of prompts with "
               "dataset_profile" if name == "n_prompts" and value > high else ""))

#: A prompt, prompts of equal token length, tokens ``[batch, pos]``, or (where an analysis
#: says so) a ``transformer_lens.ActivationCache`` of the run to analyse.
ModelInput = Union[str, Sequence[str], Tensor, Mapping]


def is_activation_cache(input: Any) -> bool:
    """True for a ``transformer_lens.ActivationCache`` or any mapping of hook names to tensors."""
    return isinstance(input, Mapping) or (
        hasattr(input, "keys") and hasattr(input, "__getitem__")
        and not isinstance(input, (Tensor, str, list, tuple))
    )


def resolve_device(device: str | torch.device = "auto") -> torch.device:
    """``"auto"`` → CUDA if available, else CPU; anything else as given, checked.

    Raises ``InvalidSelectionError`` for a name torch does not know, for CUDA on a
    machine where torch cannot reach a GPU, or for another device type (``mps``, ``meta``)
    that cannot hold a tensor here (instead of torch's own error deep inside a model's
    ``.to``).
    """
    if str(device) == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        resolved = torch.device(device)
    except (RuntimeError, TypeError) as exc:
        raise InvalidSelectionError(
            f"unknown device {device!r}; use 'auto', 'cpu', 'cuda' or 'cuda:N'") from exc
    if resolved.type == "cuda":
        if not torch.cuda.is_available():
            raise InvalidSelectionError(
                f"device {device!r} asked for, but torch {torch.__version__} sees no CUDA GPU "
                "here; use 'cpu' (or 'auto', which picks a GPU only when there is one)")
        if resolved.index is not None and resolved.index >= torch.cuda.device_count():
            raise InvalidSelectionError(
                f"device {device!r} does not exist: this machine has "
                f"{torch.cuda.device_count()} CUDA device(s)")
    elif resolved.type != "cpu":  # mps, xpu, meta, ...: usable only if a tensor goes there
        try:
            usable = resolved.type != "meta" and torch.empty(1, device=resolved).numel() == 1
        except Exception:  # noqa: BLE001 - whatever the backend raises: not usable here
            usable = False
        if not usable:
            raise InvalidSelectionError(
                f"device {device!r} is not usable here (torch {torch.__version__}); use "
                "'cpu', 'cuda' or 'auto' (a GPU only when there is one)")
    return resolved


def _to_tokens(model: HookedModel, text: str) -> Tensor:
    """``model.to_tokens(text)`` without TransformerLens's silent truncation at ``n_ctx``
    (the length is checked against the context afterwards, with a message)."""
    try:
        return model.to_tokens(text, truncate=False)
    except TypeError:  # a model whose to_tokens has no ``truncate`` (it does not truncate)
        return model.to_tokens(text)


def _context_length(model: HookedModel) -> int | None:
    n_ctx = getattr(getattr(model, "cfg", None), "n_ctx", None)
    if _extends_its_context(model):
        return None
    return int(n_ctx) if n_ctx else None


def _extends_its_context(model: HookedModel) -> bool:
    """Dynamic-NTK RoPE recomputes its angles for inputs longer than the context."""
    config = getattr(getattr(model, "original_model", None), "config", None)
    params = getattr(config, "rope_parameters", None) or {}
    types = [p.get("rope_type", "") for p in params.values() if isinstance(p, dict)] or [
        params.get("rope_type", "")]
    return any("dynamic" in str(t) for t in types)


def as_tokens(model: HookedModel, input: ModelInput) -> Int[Tensor, "batch pos"]:
    """Token ids ``[batch, pos]`` on the model's device, with BOS prepended for text.

    Raises ``InvalidSelectionError`` for an empty prompt, prompts of different token
    lengths (padding would shift positions), or a prompt longer than the context.
    """
    if isinstance(input, str) or (isinstance(input, (list, tuple)) and input
                                  and all(isinstance(x, str) for x in input)):
        texts = [input] if isinstance(input, str) else list(input)
        if any(not t.strip() for t in texts):
            raise InvalidSelectionError("a prompt is empty; pass at least one token of text")
        rows = [_to_tokens(model, t)[0] for t in texts]
        lengths = {len(r) for r in rows}
        if len(lengths) > 1:
            raise InvalidSelectionError(
                f"prompts tokenize to different lengths {sorted(lengths)}; analyse them one at "
                "a time (positions would shift under padding)"
            )
        tokens = torch.stack(rows)
    elif isinstance(input, Tensor):
        if input.is_floating_point() or input.is_complex() or input.dtype == torch.bool:
            raise InvalidSelectionError(
                f"tokens must be integer ids, got a {input.dtype} tensor; pass a torch.long "
                "tensor [batch, pos] (model.to_tokens(text) makes one)")
        if input.device.type == "meta":
            raise InvalidSelectionError(
                "the tokens are a meta tensor (no values); pass real token ids")
        tokens = input[None] if input.ndim == 1 else input
        if tokens.ndim != 2:
            raise InvalidSelectionError(f"tokens must be [batch, pos], got shape {tuple(input.shape)}")
        tokens = tokens.long()  # int8/uint8/int16/int32 ids are ids; embeddings need int64
    elif isinstance(input, (list, tuple)) and input and all(
            isinstance(x, (list, tuple, int)) for x in input):
        raise InvalidSelectionError(
            "token ids as a Python list: pass torch.tensor(ids) ([pos] or [batch, pos]) "
            "or the text")
    elif is_activation_cache(input):
        raise InvalidSelectionError(
            "this function needs the prompt or its tokens, not an activation cache: pass the "
            "tokens the cache was made from"
        )
    else:
        raise InvalidSelectionError(
            f"expected a prompt, a list of prompts or a token tensor, got {type(input).__name__}"
        )
    if tokens.shape[1] == 0 or tokens.shape[0] == 0:
        raise InvalidSelectionError("the input is empty; pass at least one token")
    d_vocab = getattr(getattr(model, "cfg", None), "d_vocab", None)
    if d_vocab and not (0 <= int(tokens.min()) and int(tokens.max()) < int(d_vocab)):
        raise InvalidSelectionError(
            f"token ids must be in 0..{int(d_vocab) - 1} (the model's vocabulary), got "
            f"{int(tokens.min())}..{int(tokens.max())}")
    n_ctx = _context_length(model)
    if n_ctx is not None and tokens.shape[1] > n_ctx:
        raise InvalidSelectionError(
            f"the input has {tokens.shape[1]} tokens but the model's context is {n_ctx}; "
            "shorten the prompt"
        )
    try:
        device = next(model.parameters()).device
    except (StopIteration, AttributeError):
        device = tokens.device
    return tokens.to(device)


def as_token_pair(model: HookedModel, first: ModelInput, second: ModelInput,
                  names: tuple[str, str], what: str = "patching"
                  ) -> tuple[Int[Tensor, "batch pos"], Int[Tensor, "batch pos"]]:
    """Two inputs as :func:`as_tokens`, of one shape: patching takes a value from the same
    prompt and position of the other input, so a shape mismatch is an error naming both
    (``names``, e.g. ``("run tokens", "source tokens")``; ``what`` pairs them)."""
    a, b = as_tokens(model, first), as_tokens(model, second)
    if a.shape != b.shape:
        raise InvalidSelectionError(
            f"{names[0]} {tuple(a.shape)} and {names[1]} {tuple(b.shape)} differ in shape; "
            f"{what} pairs prompts position by position")
    return a, b


def as_positions(positions: int | Sequence[int] | Tensor | None, n_pos: int,
                 what: str = "query position") -> Int[Tensor, "n"]:
    """Non-negative positions in ``[0, n_pos)``; ``None`` means all; negatives count from the end."""
    if positions is None:
        return torch.arange(n_pos)
    if isinstance(positions, Tensor):
        if positions.is_floating_point() or positions.dtype == torch.bool:
            raise InvalidSelectionError(f"{what}s must be integers, got a {positions.dtype} tensor")
        positions = positions.reshape(-1).tolist()
    ids = read_ids(positions, n_pos, what=what, from_end=True,
                   where=f"an input of {n_pos} tokens")
    if not ids:
        raise InvalidSelectionError(f"no {what} selected")
    return torch.tensor(ids, dtype=torch.long)


def as_heads(heads: int | Sequence[int] | str | None, n_heads: int, layer: int) -> list[int]:
    """Query-head indices, all by default (text in the id grammar of :mod:`._ids`)."""
    out = read_ids(heads, n_heads, what="head", where=f"layer {layer}")
    if not out:
        raise InvalidSelectionError(f"no heads selected for layer {layer}")
    return out


def as_layer(layer: int, n_layers: int) -> int:
    """One layer index (negatives count from the end), as a non-negative index.

    Text (``"3"``, ``"-1"``) and integer tensors are read as ids; anything else (a float, a
    bool, ``None``, a list) is refused: this takes one layer.
    """

    if layer is None or isinstance(layer, (list, tuple, range, slice)):
        raise InvalidSelectionError(
            f"pass one layer index here (e.g. 3 or -1), got {layer!r}; the functions that "
            "take several layers are named *_all or take layers=")
    layer = as_int(layer, "a layer")
    if not -n_layers <= layer < n_layers:
        raise InvalidSelectionError(
            f"layer {layer} out of range: the model has {n_layers} layers (0..{n_layers - 1})")
    return layer % n_layers


def as_layers(layers: int | Sequence[int] | str | None, n_layers: int) -> list[int]:
    """Layer indices (negatives count from the end), all by default.

    Text is read by the id grammar of :mod:`._ids` (``"0,5"``, ``"0:6"``, ``"all"``).
    """
    out = read_ids(layers, n_layers, what="layer", from_end=True)
    if not out:
        raise InvalidSelectionError("no layers selected; pass e.g. [0, 5] or '0:6'")
    return out
