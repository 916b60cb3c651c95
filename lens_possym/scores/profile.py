""":func:`swap_scores`: positional and symbolic scores of every head (and frequency) of a model.

One forward pass captures every chosen layer's queries and keys (:mod:`lens_possym.capture`);
then each layer is scored from its cross-logit factors in closed form (``method="exact"``),
or, as the reference, by re-running the block once per swap (``method="rerun"``). Scores are
computed per prompt and averaged over prompts (paper C's ``scores.mean(axis=0)``).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, Sequence

import torch
from jaxtyping import Float, Int
from torch import Tensor
from tqdm.auto import tqdm

from .._inputs import (ModelInput, as_heads, as_layers, as_positions, as_tokens,
                       is_activation_cache)
from ..capture import AttentionInputs, capture_attention_inputs
from ..decompose import decompose_inputs
from ..errors import InvalidSelectionError, UnsupportedModelError
from ..rope import RopeSpec, heads_view, rope_specs
from ..typing import HookedModel
from .config import ScoreConfig
from .crosslogits import cross_logit_factors
from .exact import SwapScores, exact_swap_scores
from .exclusion import exclusion_from_factors
from .guards import check_decomposable_under_hooks, check_exact_under_hooks, check_finite
from .rerun import rerun_swap_scores
from .results import PosSymScores
from .swaps import SwapSet, swap_set
from .sites import per_frequency_available, site_swap_scores
from ..positions import Rope, schemes

__all__ = ["swap_scores", "resolve_exclude_bos", "LayerScores", "per_prompt_scores",
           "place_per_prompt", "mean_over_prompts"]


def resolve_exclude_bos(model: HookedModel, tokens: Tensor, exclude_bos: bool | str) -> bool:
    """``"auto"``: exclude position 0 when every prompt starts with the tokenizer's BOS."""
    if exclude_bos == "auto":
        bos = getattr(getattr(model, "tokenizer", None), "bos_token_id", None)
        return bos is not None and bool((tokens[:, 0] == bos).all())
    if not isinstance(exclude_bos, bool):
        raise InvalidSelectionError(f"exclude_bos must be True, False or 'auto', not {exclude_bos!r}")
    return exclude_bos


def resolve_for_input(model: HookedModel, input: ModelInput, config: ScoreConfig
                      ) -> tuple[Int[Tensor, "batch pos"], ScoreConfig]:
    """``input``'s tokens, and ``config`` resolved for them: ``query_position`` an index,
    ``exclude_bos`` a bool (what every swap-score path records in its result)."""
    if is_activation_cache(input):
        return None, _resolve_for_cache(model, input, config)
    tokens = as_tokens(model, input)
    qpos = int(as_positions(config.query_position, tokens.shape[1])[0])
    return tokens, config.replace(
        query_position=qpos, exclude_bos=resolve_exclude_bos(model, tokens, config.exclude_bos))


def _cache_positions(specs: Sequence[RopeSpec], cache: Any) -> int:
    """The number of positions of the run a cache holds (from a layer's query hook)."""
    for spec in specs:
        if spec.q_hook in cache:
            return int(heads_view(cache[spec.q_hook], spec).shape[1])
    raise InvalidSelectionError(
        f"the activation cache holds no query hook ({specs[0].q_hook}, ...); cache the hooks "
        "the scores read (lens_possym.capture.cache_hook_names) or pass the tokens")


def _resolve_for_cache(model: HookedModel, cache: Any, config: ScoreConfig) -> ScoreConfig:
    """``config`` resolved for the run an activation cache holds (nothing is run): the
    closed form only (a re-run needs the tokens); ``exclude_bos="auto"`` reads position 0's
    embedding (``hook_embed``) against the BOS token's."""
    if config.method != "exact":
        raise InvalidSelectionError(
            "method='rerun' runs the model on swapped tokens, which an activation cache does "
            "not hold; pass the tokens instead, or score the cache with method='exact'")
    n_pos = _cache_positions(rope_specs(model), cache)
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


@dataclass
class LayerScores:
    """One layer's scores, per prompt, for the heads scored (``None``: not computed).

    Per-head tensors are ``[n_prompts, len(heads)]``, per-frequency ones
    ``[n_prompts, len(heads), n_freqs]``; :func:`swap_scores` places every layer's into
    the ``[n_layers, n_heads(, n_freqs)]`` tensors of :class:`PosSymScores` at the end.
    """

    layer: int
    heads: list[int]
    angles: Float[Tensor, "freq"]
    pos: Float[Tensor, "prompt head"]
    sym: Float[Tensor, "prompt head"]
    pos_freq: Float[Tensor, "prompt head freq"] | None = None
    sym_freq: Float[Tensor, "prompt head freq"] | None = None
    exclusion_ratio: Float[Tensor, "prompt head"] | None = None
    exclusion_ratio_freq: Float[Tensor, "prompt head freq"] | None = None
    balance: Float[Tensor, "prompt head"] | None = None
    balance_freq: Float[Tensor, "prompt head freq"] | None = None


# the per-prompt tensors of LayerScores, and whether a prompt's undefined value is left out
# of the mean (a balance 0/0 is undefined; a score never is)
_PER_PROMPT = {f.name: f.name.startswith("balance") for f in fields(LayerScores)
               if f.name not in ("layer", "heads", "angles")}


def swap_scores(model: HookedModel, input: ModelInput, config: ScoreConfig | None = None, *,
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
        model: a bridge (:func:`lens_possym.load_model`, ...) or any
            :class:`~lens_possym.typing.HookedModel` defining ``lens_possym_rope_specs()``.
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
            keyword) on a layer without frequencies (absolute, ALiBi): models that are not
            all RoPE, and any ``swap_site`` other than ``"layer"``, are scored by
            :func:`~lens_possym.scores.sites.site_swap_scores`. Left at the defaults, such
            a model is scored per frequency where that is possible and per head otherwise
            (the result's ``config.per_frequency`` says which).
        DecompositionMismatchError: the geometry read does not reproduce the model's scores.
    """
    asked_per_frequency = config is not None or "per_frequency" in settings
    config = ScoreConfig.coerce(config, **settings)
    if config.swap_site != "layer" or not _all_rope(model):

        if (config.per_frequency and not asked_per_frequency
                and not per_frequency_available(model, config, layers)):
            # the default scores what the model has: whole heads where its layers have no
            # frequencies (absolute, ALiBi) or the site has no per-frequency form
            config = config.replace(per_frequency=False)
        return site_swap_scores(model, input, config, layers=layers, heads=heads,
                                progress=progress)
    specs, tokens, config, results = _score_layers(model, input, config, layers, heads,
                                                   progress)
    n_tokens = tokens.shape[1] if tokens is not None else _cache_positions(specs, input)
    return _assemble(results, config, **_grid(specs), n_tokens=n_tokens,
                     model_name=str(getattr(getattr(model, "cfg", None), "model_name", "")))


def _all_rope(model: HookedModel) -> bool:
    """Whether every layer is RoPE (the per-frequency path); other schemes go to
    :func:`~lens_possym.scores.sites.site_swap_scores`."""
    if callable(getattr(model, "lens_possym_rope_specs", None)):
        return True

    return all(isinstance(ls.scheme, Rope) for ls in schemes(model))


def _score_layer(model: HookedModel, tokens: Tensor, inputs: AttentionInputs, heads: list[int],
                 config: ScoreConfig) -> LayerScores:
    """Scores of ``heads`` of one layer, from its captured queries and keys."""
    spec = inputs.spec
    if config.method == "exact" and spec.extra.get("attention_sinks"):
        # GPT-OSS: a learned per-head sink logit joins the softmax; the closed form's
        # post-swap normaliser has no term for it (per head it would be off by ~1e-2)
        raise UnsupportedModelError(
            f"layer {spec.layer} ({spec.family}) has attention sinks, which the closed-form "
            "swap scores do not model; score it with method='rerun'")
    if config.check:
        decompose_inputs(inputs, heads).check()
    factors = cross_logit_factors(inputs, heads, dtype=config.torch_dtype,
                                  max_matrix_elements=config.max_matrix_elements)
    swaps = swap_set(config.swap, config.query_position, factors.visible,
                     exclude_bos=config.exclude_bos, n_blocks=config.n_blocks)
    if config.method == "exact":
        result = exact_swap_scores(factors, swaps, tau=config.tau,
                                   per_frequency=config.per_frequency, cosine=config.cosine,
                                   max_elements=config.max_elements)
    else:
        result = _rerun(model, tokens, spec.layer, heads, swaps, config)
    out = LayerScores(layer=spec.layer, heads=heads, angles=spec.angles, pos=result.pos,
                      sym=result.sym, pos_freq=result.pos_freq, sym_freq=result.sym_freq)
    if config.exclusion:
        keys = torch.arange(int(config.exclude_bos), config.query_position,
                            device=factors.visible.device)
        keys = keys[factors.visible[keys]]
        if len(keys) >= 2:
            head_ex, freq_ex = exclusion_from_factors(factors, keys,
                                                      per_frequency=config.per_frequency,
                                                      max_elements=config.max_elements)
            out.exclusion_ratio, out.balance = head_ex.ratio, head_ex.balance
            if config.per_frequency:
                out.exclusion_ratio_freq, out.balance_freq = freq_ex.ratio, freq_ex.balance
    return out


def place_per_prompt(results: list[LayerScores], config: ScoreConfig, *, n_layers: int,
                     n_heads: int, n_freqs: int
                     ) -> tuple[dict[str, Tensor | None], Float[Tensor, "layer freq"]]:
    """Every layer's per-prompt scores placed in ``[n_prompts, n_layers, n_heads(, n_freqs)]``
    float64 tensors (``nan`` where not scored; ``None`` where not computed), and the angles
    ``[n_layers, n_freqs]``."""
    n_prompts = results[0].pos.shape[0]
    computed = {"pos": True, "sym": True, "pos_freq": config.per_frequency,
                "sym_freq": config.per_frequency, "exclusion_ratio": config.exclusion,
                "balance": config.exclusion,
                "exclusion_ratio_freq": config.exclusion and config.per_frequency,
                "balance_freq": config.exclusion and config.per_frequency}
    per_prompt: dict[str, Tensor | None] = {}
    for name in _PER_PROMPT:
        if not computed[name]:
            per_prompt[name] = None
            continue
        shape = (n_prompts, n_layers, n_heads) + ((n_freqs,) if name.endswith("_freq") else ())
        full = torch.full(shape, float("nan"), dtype=torch.float64)
        for r in results:
            value = getattr(r, name)
            if value is not None:  # a layer with fewer frequency ids fills the first ones
                freqs = (slice(value.shape[-1]),) * (value.ndim - 2)
                full[(slice(None), r.layer, r.heads) + freqs] = value.detach().cpu().double()
        per_prompt[name] = full
    angles = torch.full((n_layers, n_freqs), float("nan"), dtype=torch.float64)
    for r in results:
        angles[r.layer, : len(r.angles)] = r.angles.double().cpu()
    return per_prompt, angles


def per_prompt_scores(model: HookedModel, input: ModelInput, config: ScoreConfig | None = None,
                      *, layers: int | Sequence[int] | None = None,
                      heads: int | Sequence[int] | None = None
                      ) -> tuple[dict[str, Tensor | None], Float[Tensor, "layer freq"], ScoreConfig]:
    """What :func:`swap_scores` averages: every prompt's scores, before the mean.

    Returns ``(per_prompt, angles, config)``: ``per_prompt[name]`` is
    ``[n_prompts, n_layers, n_heads(, n_freqs)]`` (float64; ``nan`` where not scored,
    ``None`` where not computed) for each score of :class:`LayerScores`, ``angles`` is
    ``[n_layers, n_freqs]`` and ``config`` the one resolved for this input. Models that
    :func:`swap_scores` sends to :func:`~lens_possym.scores.sites.site_swap_scores` are
    scored one prompt at a time (a mean over one prompt is that prompt's score).
    """
    config = ScoreConfig.coerce(config)
    if config.swap_site != "layer" or not _all_rope(model):
        tokens = as_tokens(model, input)
        rows = [swap_scores(model, tokens[b : b + 1], config, layers=layers, heads=heads)
                for b in range(tokens.shape[0])]
        names = list(_PER_PROMPT)
        per_prompt = {name: None if getattr(rows[0], name) is None else
                      torch.stack([getattr(r, name).double() for r in rows]) for name in names}
        return per_prompt, rows[0].angles, rows[0].config
    specs, _, config, results = _score_layers(model, input, config, layers, heads)
    per_prompt, angles = place_per_prompt(results, config, **_grid(specs))
    return per_prompt, angles, config


def _grid(specs: Sequence[RopeSpec]) -> dict[str, int]:
    """The ``[n_layers, n_heads, n_freqs]`` grid every layer's scores are placed in (the
    largest layer's heads and frequencies; smaller layers are padded with ``nan``)."""
    return {"n_layers": len(specs), "n_heads": max(spec.n_heads for spec in specs),
            "n_freqs": max(spec.n_freqs for spec in specs)}


def _score_layers(model: HookedModel, input: ModelInput, config: ScoreConfig,
                  layers: int | Sequence[int] | None, heads: int | Sequence[int] | None,
                  progress: bool = False):
    """The chosen layers of an all-RoPE model scored at the layer site, in closed form:
    ``(specs, tokens, config, results)``, ``config`` resolved for this input and
    ``results`` one :class:`LayerScores` per chosen layer (one capture pass for all)."""
    specs = rope_specs(model)
    chosen = as_layers(layers, len(specs))
    tokens, config = resolve_for_input(model, input, config)
    if tokens is not None:  # a cache: nothing runs, so hooks on the model change nothing
        guard_hooks(model, specs, chosen, config)
    captured = capture_attention_inputs(model, input if tokens is None else tokens, chosen,
                                        query_positions=config.query_position)
    results = [_score_layer(model, tokens, captured[layer],
                            as_heads(heads, specs[layer].n_heads, layer), config)
               for layer in tqdm(chosen, desc="scoring layers", disable=not progress, leave=False)]
    check_finite(results, config.nonfinite)
    return specs, tokens, config, results


def guard_hooks(model: HookedModel, specs: Sequence[Any], layers: Sequence[int],
                config: ScoreConfig) -> None:
    """Refuse the closed forms (the exact method; the exclusion, closed form only) where
    hooks on ``model`` change what they would compute (:mod:`.guards`)."""
    if config.method == "exact":
        check_exact_under_hooks(model, specs, layers, site=config.swap_site)
    elif config.per_frequency:
        check_decomposable_under_hooks(model, layers)
    if config.exclusion:
        check_exact_under_hooks(model, specs, layers, site=config.swap_site,
                                purpose="the exclusion (Theorem 1's sums, in closed form)")


def _assemble(results: list[LayerScores], config: ScoreConfig, *, n_layers: int, n_heads: int,
              n_freqs: int, n_tokens: int, model_name: str) -> PosSymScores:
    """Every layer's scores placed in ``[n_layers, n_heads(, n_freqs)]`` tensors (``nan``
    where not scored), averaged over prompts."""
    per_prompt, angles = place_per_prompt(results, config, n_layers=n_layers, n_heads=n_heads,
                                          n_freqs=n_freqs)
    return mean_over_prompts(per_prompt, angles, config, layers=[r.layer for r in results],
                             n_tokens=n_tokens, model_name=model_name)


def mean_over_prompts(per_prompt: dict[str, Tensor | None], angles: Float[Tensor, "layer freq"],
                      config: ScoreConfig, *, layers: Sequence[int], n_tokens: int,
                      model_name: str = "") -> PosSymScores:
    """:class:`PosSymScores` from per-prompt scores (:func:`per_prompt_scores`' first
    result; those of prompts of different lengths may be concatenated along the prompt
    axis): each score's mean over prompts, as :func:`swap_scores` takes it (a balance
    that is undefined for a prompt is left out of its mean; a score never is)."""
    means = {name: None if per_prompt.get(name) is None else
             (per_prompt[name].nanmean(0) if skip_undefined else per_prompt[name].mean(0))
             for name, skip_undefined in _PER_PROMPT.items()}
    return PosSymScores(**means, angles=angles, layers=list(layers),
                        pos_prompts=per_prompt["pos"], sym_prompts=per_prompt["sym"],
                        config=config, n_tokens=n_tokens, model_name=model_name)


def _rerun(model: HookedModel, tokens: Tensor, layer: int, heads: list[int], swaps: SwapSet,
           config: ScoreConfig) -> SwapScores:
    rows = [rerun_swap_scores(model, tokens[b : b + 1], layer, heads, swaps, tau=config.tau,
                              per_frequency=config.per_frequency, cosine=config.cosine,
                              batch_size=config.batch_size)
            for b in range(tokens.shape[0])]
    cat = lambda name: None if getattr(rows[0], name) is None else torch.cat(  # noqa: E731
        [getattr(r, name) for r in rows])
    return SwapScores(cat("pos"), cat("sym"), cat("pos_freq"), cat("sym_freq"))
