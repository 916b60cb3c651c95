"""What one scoring call scores: its tokens, and its config resolved for them.

Every entry point of the scores (:func:`~lens_possym.scores.swap_scores`,
:func:`~lens_possym.scores.profile.per_prompt_scores`, the dataset profile) turns its input
into tokens (or reads an activation cache) and resolves ``query_position`` to an index and
``exclude_bos`` to a bool (what the result records), here, once, before the engine
(:mod:`.engine`) checks the hooks on the model (:func:`~.guards.guard_hooks`) and scores a
layer.
"""

from __future__ import annotations

from typing import Any, Sequence

import torch
from jaxtyping import Int
from torch import Tensor

from .._inputs import ModelInput, as_positions, as_tokens, is_activation_cache
from ..errors import InvalidSelectionError
from ..resolved import Resolved, model_of
from ..rope import RopeSpec, heads_view
from ..typing import HookedModel
from .config import ScoreConfig

__all__ = ["resolve_exclude_bos", "resolve_for_input", "cache_positions"]


def resolve_exclude_bos(model: HookedModel | Resolved, tokens: Tensor,
                        exclude_bos: bool | str) -> bool:
    """``"auto"``: exclude position 0 when every prompt starts with the tokenizer's BOS."""
    if exclude_bos == "auto":
        bos = getattr(getattr(model_of(model), "tokenizer", None), "bos_token_id", None)
        return bos is not None and bool((tokens[:, 0] == bos).all())
    if not isinstance(exclude_bos, bool):
        raise InvalidSelectionError(f"exclude_bos must be True, False or 'auto', not {exclude_bos!r}")
    return exclude_bos


def resolve_for_input(resolved: Resolved, input: ModelInput, config: ScoreConfig
                      ) -> tuple[Int[Tensor, "batch pos"] | None, ScoreConfig]:
    """``input``'s tokens (``None`` for an activation cache), and ``config`` resolved for
    them: ``query_position`` an index, ``exclude_bos`` a bool (what every swap-score path
    records in its result)."""
    if is_activation_cache(input):
        return None, _resolve_for_cache(resolved, input, config)
    tokens = as_tokens(resolved.model, input)
    qpos = int(as_positions(config.query_position, tokens.shape[1])[0])
    return tokens, config.replace(
        query_position=qpos, exclude_bos=resolve_exclude_bos(resolved, tokens, config.exclude_bos))


def cache_positions(specs: Sequence[RopeSpec], cache: Any) -> int:
    """The number of positions of the run a cache holds (from a layer's query hook)."""
    for spec in specs:
        if spec.q_hook in cache:
            return int(heads_view(cache[spec.q_hook], spec).shape[1])
    raise InvalidSelectionError(
        f"the activation cache holds no query hook ({specs[0].q_hook}, ...); cache the hooks "
        "the scores read (lens_possym.capture.cache_hook_names) or pass the tokens")


def _resolve_for_cache(resolved: Resolved, cache: Any, config: ScoreConfig) -> ScoreConfig:
    """``config`` resolved for the run an activation cache holds (nothing is run): the
    closed form only (a re-run needs the tokens); ``exclude_bos="auto"`` reads position 0's
    embedding (``hook_embed``) against the BOS token's."""
    if config.method != "exact":
        raise InvalidSelectionError(
            "method='rerun' runs the model on swapped tokens, which an activation cache does "
            "not hold; pass the tokens instead, or score the cache with method='exact'")
    model = resolved.model
    n_pos = cache_positions(resolved.specs, cache)
    qpos = int(as_positions(config.query_position, n_pos)[0])
    exclude = config.exclude_bos
    if exclude == "auto":
        bos = getattr(getattr(model, "tokenizer", None), "bos_token_id", None)
        if bos is None:
            exclude = False
        elif "hook_embed" in cache and hasattr(model, "embed"):
            with torch.no_grad():
                first = cache["hook_embed"][:, 0]
                embedded = model.embed(torch.tensor([[bos]], device=first.device))[0, 0]
            exclude = bool((first == embedded.to(first.dtype)).all())
        else:
            raise InvalidSelectionError(
                "exclude_bos='auto' looks at position 0 of the tokens, which the activation "
                "cache does not hold; cache hook_embed as well, or pass exclude_bos=True or "
                "False")
    return config.replace(query_position=qpos, exclude_bos=exclude)
