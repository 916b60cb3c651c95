""":func:`swap_scores`: positional and symbolic scores of every head (and frequency) of a model.

The public face of the score engine (:mod:`.engine`): the model is resolved once, one
forward pass captures what the layers need, each layer is scored from its cross-logits in
closed form (``method="exact"``) or, as the reference, by re-running the block once per
swap (``method="rerun"``), whatever its positional scheme. Scores are computed per prompt
and averaged over prompts (paper C's ``scores.mean(axis=0)``); :func:`per_prompt_scores`
returns them before the mean.
"""

from __future__ import annotations

from typing import Any, Sequence

from jaxtyping import Float
from torch import Tensor

from .._inputs import ModelInput
from ..resolved import Resolved, resolve
from ..typing import HookedModel
from . import engine
from .config import ScoreConfig
from .inputs import resolve_exclude_bos  # noqa: F401 - re-exported (viz, notebooks)
from .layer import LayerScores, mean_over_prompts, place_per_prompt  # noqa: F401 - re-exported
from .results import PosSymScores

__all__ = ["swap_scores", "resolve_exclude_bos", "LayerScores", "per_prompt_scores",
           "place_per_prompt", "mean_over_prompts"]


def swap_scores(model: HookedModel | Resolved, input: ModelInput,
                config: ScoreConfig | None = None, *,
                layers: int | Sequence[int] | None = None,
                heads: int | Sequence[int] | None = None, progress: bool = False,
                **settings: Any) -> PosSymScores:
    """Place every head of ``model`` on the positional-symbolic plane (paper A).

    For the query at ``query_position`` (the last token by default), each swap exchanges the
    contents of two key positions (``swap="token"``: paper C's single-token swaps over all
    pairs before the query) or of two of ``n_blocks`` contiguous blocks (``swap="block"``:
    paper A's relaxation), and compares the attention on the two groups before and after:

    * ``s_POS``: the mass stayed with the positions (cosine with the clean masses);
    * ``s_SYM``: the mass moved with the content (cosine with the swapped clean masses);

    each a sum over swaps weighted by ``softmax(|a_1 - a_2| / tau)``. Each frequency id can
    also be scored as a 2-D head of its own. Scores are computed per prompt and averaged.

    How: a :class:`~lens_possym.scores.ScoreConfig` (``config``), with any of its fields
    given as keywords overriding it: ``swap_scores(model, tokens, swap="block", tau=1.0)``
    is ``swap_scores(model, tokens, ScoreConfig(swap="block", tau=1.0))``. Keywords are what
    a notebook reaches for; a config is what a saved result holds and a script reuses
    (``swap_scores(model, tokens, saved.config)``). The closed form (``method="exact"``)
    relies on the layer's queries and keys being row-wise functions of its input, which
    holds for every model but not under hooks that edit q or k *by position* (e.g.
    ``unrotate`` frequency ablation): score such runs with ``method="rerun"``.

    Args:
        model: a bridge (:func:`lens_possym.load_model`, ...), any
            :class:`~lens_possym.typing.HookedModel` defining ``lens_possym_rope_specs()``
            or ``lens_possym_schemes()``, or a :class:`~lens_possym.resolved.Resolved`.
        input: a prompt, prompts of equal token length, tokens ``[batch, pos]``, or a
            ``transformer_lens.ActivationCache`` of the run (any mapping of hook names to
            tensors; nothing is run) holding each scored layer's q/k hooks
            (:func:`~lens_possym.capture.cache_hook_names`), as for
            :func:`~lens_possym.frequency_logits`: closed form and layer site only, and
            ``exclude_bos="auto"`` needs ``hook_embed`` too (or pass True/False).
        config, settings: how to score (:class:`~lens_possym.scores.ScoreConfig`).
        layers, heads: which to score (all by default); others are ``nan`` in the result.
        progress: show a progress bar over layers.

    Returns:
        :class:`~lens_possym.scores.PosSymScores`, its ``config`` resolved for this input
        (``exclude_bos`` a bool, ``query_position`` an index).

    Raises:
        InvalidSelectionError: a bad setting, bad layers/heads/positions, an empty or
            too-long prompt, too few keys for the swaps.
        NotRopeModelError: the model has no positional scheme lens-possym knows.
        NoFrequenciesError: ``per_frequency=True`` asked for (in ``config`` or as a
            keyword) on a layer without frequencies (absolute, ALiBi). Left at the
            defaults, a model is scored per frequency where that is possible (RoPE layers;
            MLA layers in closed form; the ``"layer"`` site) and per head otherwise (the
            result's ``config.per_frequency`` says which).
        DecompositionMismatchError: the geometry read does not reproduce the model's scores.
    """
    asked = config is not None or "per_frequency" in settings
    config = ScoreConfig.coerce(config, **settings)
    return engine.score_model(resolve(model), input, config, layers, heads, progress,
                              fit_per_frequency=not asked)


def per_prompt_scores(model: HookedModel | Resolved, input: ModelInput,
                      config: ScoreConfig | None = None, *,
                      layers: int | Sequence[int] | None = None,
                      heads: int | Sequence[int] | None = None
                      ) -> tuple[dict[str, Tensor | None], Float[Tensor, "layer freq"], ScoreConfig]:
    """What :func:`swap_scores` averages: every prompt's scores, before the mean.

    Returns ``(per_prompt, angles, config)``: ``per_prompt[name]`` is
    ``[n_prompts, n_layers, n_heads(, n_freqs)]`` (float64; ``nan`` where not scored,
    ``None`` where not computed) for each score of :class:`LayerScores`, ``angles`` is
    ``[n_layers, n_freqs]`` and ``config`` the one resolved for this input (``None``: the
    defaults, ``per_frequency`` where the layers have it, as :func:`swap_scores`).
    """
    resolved = resolve(model)
    _, config, results = engine.score_layers(resolved, input, ScoreConfig.coerce(config),
                                             layers, heads, fit_per_frequency=config is None)
    per_prompt, angles = place_per_prompt(results, config, **engine.layer_grid(resolved))
    return per_prompt, angles, config
