"""The score engine: every layer of every model scored through one path.

:func:`score_layers` is what :func:`~lens_possym.scores.swap_scores`,
:func:`~lens_possym.scores.sites.site_swap_scores`,
:func:`~lens_possym.scores.profile.per_prompt_scores` and the dataset profile run. The
model is resolved once, by the public function that called it
(:func:`lens_possym.resolved.resolve`): everything here takes the
:class:`~lens_possym.resolved.Resolved`. Each chosen layer is then

1. **described** by its path (:func:`~lens_possym.scores.sources.layer_paths`, asked of
   its scheme once): RoPE layers (every layer of an all-RoPE model by its RoPE geometry,
   one capture pass for all of them) take the factor path, every other scheme (its
   :class:`~lens_possym.positions.LayerScheme`) the matrix path;
2. **asked for its cross-logits** through one protocol
   (:class:`~lens_possym.scores.sources.CrossLogitSource`): RoPE layers supply their
   per-frequency factors (:class:`~lens_possym.scores.sources.FactorSource`), every other
   scheme a matrix (:class:`~lens_possym.scores.matrix.CrossLogitMatrix`), both checked
   against the model's own attention first;
3. **scored** in closed form (the source's ``swap_scores``: the per-frequency kernel of
   :mod:`.exact` for factors, :func:`~lens_possym.scores.matrix.matrix_swap_scores` for
   matrices) or by the re-run reference (:func:`rerun_scores`, one prompt at a time);
4. **given its exclusion** (:func:`exclusion_keys`, the source's ``exclusion``) where the
   site has a closed form;

and comes out as one :class:`~lens_possym.scores.layer.LayerScores`, which
:func:`~lens_possym.scores.layer.assemble` turns into the result.
"""

from __future__ import annotations

from typing import Sequence

import torch
from jaxtyping import Bool, Int
from torch import Tensor
from tqdm.auto import tqdm

from .._inputs import ModelInput, as_heads, as_layers
from ..capture import AttentionInputs, capture_attention_inputs
from ..decompose import PendingCheck, read_checks
from ..errors import InvalidSelectionError, NoFrequenciesError
from ..resolved import Resolved
from .config import LIVE_INTERMEDIATES, MAX_ELEMENTS, MAX_MATRIX_ELEMENTS, ScoreConfig
from .exact import SwapScores
from .guards import check_finite, guard_hooks
from .inputs import cache_positions, resolve_for_input
from .layer import LayerScores, assemble
from .results import PosSymScores
from .stages import stage
from .sources import CrossLogitSource, LayerPath, closed_form_refusal, layer_paths
from .swaps import SwapSet, swap_set

__all__ = ["score_model", "score_layers", "layer_grid", "rerun_scores", "exclusion_keys",
           "per_frequency_available", "device_bounds"]

def _has_factors(path: LayerPath) -> bool:
    """RoPE: the layer supplies per-frequency factors (from captured q and k)."""
    return path.scheme.has_factors


def _frequencies_scored(path: LayerPath, method: str) -> bool:
    """Whether the engine scores this layer per frequency with ``method``: RoPE (closed
    form and re-run), and in closed form every other scheme with frequencies (it supplies
    its terms: MLA, RoPE on some heads)."""
    scheme = path.scheme
    return scheme.has_factors or (scheme.has_frequencies and method == "exact")


def per_frequency_available(resolved: Resolved, config: ScoreConfig,
                            layers: int | Sequence[int] | None = None) -> bool:
    """Whether the chosen ``layers`` can be scored per frequency with ``config``: at the
    ``"layer"`` site, every one RoPE or (in closed form) MLA or RoPE on some heads.
    :func:`~lens_possym.scores.swap_scores` left at its defaults scores per frequency only
    then (and whole heads otherwise), instead of refusing the model."""
    described = layer_paths(resolved)
    return _frequencies_everywhere(described, as_layers(layers, len(described)), config)


def _frequencies_everywhere(described: list[LayerPath], chosen: list[int], config: ScoreConfig
                            ) -> bool:
    return config.swap_site == "layer" and all(
        _frequencies_scored(described[layer], config.method) for layer in chosen)


def _check_per_frequency(described: list[LayerPath], chosen: list[int], config: ScoreConfig
                         ) -> None:
    if not config.per_frequency:
        return
    for layer in chosen:
        scheme = described[layer].scheme
        if not scheme.has_frequencies:
            raise NoFrequenciesError(
                f"layer {layer} is a {scheme.name} layer: it has no frequencies to score; "
                f"pass per_frequency=False")
    if not _frequencies_everywhere(described, chosen, config):
        raise InvalidSelectionError(
            f"per-frequency scores are computed at the 'layer' site only (swap_site="
            f"{config.swap_site!r}), for RoPE layers, and in closed form for MLA layers and "
            f"RoPE on some heads (method='exact'); pass per_frequency=False")


def _check_cosine(described: list[LayerPath], chosen: list[int], config: ScoreConfig) -> None:
    """The scale-free cosine is written for RoPE's factors (and RoPE's re-run at the layer
    site); the matrix path and the site re-runs compare masses with the clamped one, so
    asking for it there is refused rather than silently ignored."""
    if config.cosine != "scale_free":
        return
    for layer in chosen:
        if not (_has_factors(described[layer])
                and (config.method == "exact" or config.swap_site == "layer")):
            raise InvalidSelectionError(
                f"cosine='scale_free' is computed for RoPE layers only (the closed form, or "
                f"the re-run at swap_site='layer'); layer {layer} ({described[layer].scheme.name}"
                f", method={config.method!r}, swap_site={config.swap_site!r}) would use the "
                f"clamped cosine: pass cosine='clamped'")


def layer_grid(resolved: Resolved) -> dict[str, int]:
    """The ``[n_layers, n_heads, n_freqs]`` grid every layer's scores are placed in (the
    largest layer's heads and frequencies; smaller layers are padded with ``nan``)."""
    described = layer_paths(resolved)

    def n_freqs(path: LayerPath) -> int:
        scheme = path.scheme
        return len(scheme.frequency_angles()) if scheme.has_frequencies else 0

    return {"n_layers": len(described),
            "n_heads": max(path.layer.n_heads for path in described),
            "n_freqs": max(n_freqs(path) for path in described)}


def score_layers(resolved: Resolved, input: ModelInput, config: ScoreConfig,
                 layers: int | Sequence[int] | None = None,
                 heads: int | Sequence[int] | None = None, progress: bool = False, *,
                 fit_per_frequency: bool = False
                 ) -> tuple[Int[Tensor, "batch pos"] | None, ScoreConfig, list[LayerScores]]:
    """The chosen layers scored per prompt: ``(tokens, config, results)``, ``tokens``
    ``None`` for an activation cache, ``config`` resolved for this input and ``results``
    one :class:`LayerScores` per chosen layer. ``fit_per_frequency``: ``per_frequency``
    was left at its default, so it is dropped where the chosen layers have no
    per-frequency form (:func:`per_frequency_available`) instead of refused."""
    described = layer_paths(resolved)
    chosen = as_layers(layers, len(described))
    if (fit_per_frequency and config.per_frequency
            and not _frequencies_everywhere(described, chosen, config)):
        config = config.replace(per_frequency=False)
    tokens, config = resolve_for_input(resolved, input, config)
    if tokens is None and config.swap_site != "layer":
        raise InvalidSelectionError(
            f"swap_site={config.swap_site!r} runs the model (its embeddings, or its key path "
            "on moved rows), which an activation cache does not hold; pass the tokens")
    if tokens is not None:  # a cache: nothing runs, so hooks on the model change nothing
        guard_hooks(resolved.model, [path.layer for path in described], chosen, config)
    _check_per_frequency(described, chosen, config)
    _check_cosine(described, chosen, config)
    with_factors = [layer for layer in chosen if _has_factors(described[layer])]
    with stage("capture"):
        captured = capture_attention_inputs(
            resolved, input if tokens is None else tokens, with_factors,
            query_positions=config.query_position) if with_factors else {}
    run = device_bounds(config, _device(captured, tokens))
    pending: list[PendingCheck] = []          # decomposition checks, read once at the end
    results = [score_layer(resolved, tokens, described[layer], captured.get(layer),
                           as_heads(heads, described[layer].layer.n_heads, layer), run,
                           pending)
               for layer in tqdm(chosen, desc="scoring layers", disable=not progress,
                                 leave=False)]
    with stage("finish"):
        read_checks(pending)
        check_finite(results, config.nonfinite)
    return tokens, config, results


def _device(captured: dict[int, AttentionInputs], tokens: Tensor | None) -> torch.device:
    for inputs in captured.values():
        return inputs.k.device
    return tokens.device if tokens is not None else torch.device("cpu")


#: share of a CUDA device's free memory the closed form's chunks may take, when the
#: bounds are left at their defaults: the whole-head matrix (float64) and the
#: intermediates (at most LIVE_INTERMEDIATES of max_elements numbers) a quarter each
DEVICE_SHARE = 0.25
#: largest chunk of intermediates on a device (2**28 numbers, 2 GiB in float64): larger
#: chunks gain nothing (the kernels are long already) and need 64-bit indexing
DEVICE_MAX_ELEMENTS = 1 << 28


def device_bounds(config: ScoreConfig, device: torch.device | str) -> ScoreConfig:
    """``config`` with its memory bounds for ``device``: on CUDA, ``max_elements`` and
    ``max_matrix_elements`` left at their defaults (CPU-sized: 2**21 and 2**26 numbers)
    follow the device's free memory (``torch.cuda.mem_get_info``): the whole-head matrix
    may take :data:`DEVICE_SHARE` of it and the live intermediates as much again, so a
    long context is cut into a few large pieces instead of thousands of small launches
    (n = 8,192 on gemma-3-270m's shape: 8,192 fused-kernel calls per global layer at the
    CPU default, with a 1-frequency chunk that recompiles the kernel). A bound set to any
    other value is kept; on the CPU nothing changes."""
    device = torch.device(device)
    if device.type != "cuda":
        return config
    free, _ = torch.cuda.mem_get_info(device)
    budget = int(free * DEVICE_SHARE) // 8                      # float64 numbers
    changes = {}
    if config.max_matrix_elements == MAX_MATRIX_ELEMENTS:
        changes["max_matrix_elements"] = max(MAX_MATRIX_ELEMENTS, budget)
    if config.max_elements == MAX_ELEMENTS:
        changes["max_elements"] = max(MAX_ELEMENTS, min(DEVICE_MAX_ELEMENTS,
                                                        budget // LIVE_INTERMEDIATES))
    return config.replace(**changes) if changes else config


def score_model(resolved: Resolved, input: ModelInput, config: ScoreConfig,
                layers: int | Sequence[int] | None = None,
                heads: int | Sequence[int] | None = None, progress: bool = False, *,
                fit_per_frequency: bool = False) -> PosSymScores:
    """:func:`score_layers`, assembled into a :class:`~lens_possym.scores.PosSymScores`."""
    tokens, config, results = score_layers(resolved, input, config, layers, heads, progress,
                                           fit_per_frequency=fit_per_frequency)
    n_tokens = tokens.shape[1] if tokens is not None else cache_positions(resolved.specs, input)
    with stage("assembly"):
        return assemble(results, config, **layer_grid(resolved), n_tokens=n_tokens,
                        model_name=str(getattr(getattr(resolved.model, "cfg", None),
                                               "model_name", "")))


def score_layer(resolved: Resolved, tokens: Tensor | None, path: LayerPath,
                inputs: AttentionInputs | None, heads: list[int], config: ScoreConfig,
                pending: list[PendingCheck] | None = None) -> LayerScores:
    """One layer's scores of ``heads``: its cross-logit source, then the closed form (or
    the re-run) and the exclusion. ``inputs``: the layer's captured q and k (RoPE).
    ``pending``: where the decomposition check is left for the caller to read with the
    other layers' (:func:`~lens_possym.decompose.read_checks`; ``None``: read here)."""
    own = pending is None
    pending = [] if own else pending
    source, visible = _source(resolved, tokens, path, inputs, heads, config, pending)
    if own:
        read_checks(pending)
    qpos = config.query_position
    device = inputs.k.device if inputs is not None else visible.device
    swaps = swap_set(config.swap, qpos, visible, exclude_bos=config.exclude_bos,
                     n_blocks=config.n_blocks, device=device)
    if config.method == "exact":
        result = source.swap_scores(swaps, config)
    else:
        result = rerun_scores(resolved, tokens, path, heads, swaps, config)
    out = LayerScores(layer=path.layer.layer, heads=heads, angles=path.angles(inputs),
                      pos=result.pos, sym=result.sym, pos_freq=result.pos_freq,
                      sym_freq=result.sym_freq)
    if config.exclusion and source is not None:
        with stage("exclusion"):
            keys = _host_keys(qpos, visible, config.exclude_bos)
            if len(keys) >= 2:
                head_ex, freq_ex = source.exclusion(keys, config)
                out.exclusion_ratio = head_ex.ratio
                out.positional_share = head_ex.positional_share
                if freq_ex is not None:
                    out.exclusion_ratio_freq = freq_ex.ratio
                    out.positional_share_freq = freq_ex.positional_share
    return out


def _host_keys(query_position: int, visible: Bool[Tensor, "pos"], exclude_bos: bool
               ) -> range | Tensor:
    """:func:`exclusion_keys` from a ``visible`` on the host, read there: a run of
    positions (causal, a window: always) as a ``range``, so the exclusion knows without
    reading the device that it reads a block of ``C``."""
    if visible.device.type != "cpu":
        return exclusion_keys(query_position, visible, exclude_bos)
    start = int(exclude_bos)
    keys = [p for p, seen in enumerate(visible[start:query_position].tolist(), start) if seen]
    if keys and keys[-1] - keys[0] + 1 == len(keys):
        return range(keys[0], keys[-1] + 1)
    return torch.tensor(keys, dtype=torch.long)


def _source(resolved: Resolved, tokens: Tensor | None, path: LayerPath,
            inputs: AttentionInputs | None, heads: list[int], config: ScoreConfig,
            pending: list[PendingCheck]) -> tuple[CrossLogitSource | None, Bool[Tensor, "pos"]]:
    """The layer's :class:`CrossLogitSource` (``None`` where the site has no closed form
    and the method re-runs, or nothing needs it) and the keys its query row sees, after
    checking the source against the model."""
    refusal = closed_form_refusal(path.scheme, path.layer.layer, config.swap_site)
    if refusal is not None and config.method == "exact":
        raise InvalidSelectionError(refusal)
    return path.source(resolved, tokens, inputs, heads, config, pending,
                       closed_form=refusal is None)


def rerun_scores(resolved: Resolved, tokens: Tensor, path: LayerPath,
                 heads: list[int], swaps: SwapSet, config: ScoreConfig) -> SwapScores:
    """The re-run reference, one prompt at a time, as the layer's path runs it
    (:class:`~lens_possym.scores.sources.LayerPath`): RoPE layers at the ``"layer"`` site
    by :func:`~lens_possym.scores.rerun.rerun_swap_scores` (per frequency too), any layer
    at any site by :func:`~lens_possym.scores.rerun.rerun_site_scores`."""
    rows = [path.rerun(resolved, tokens[b : b + 1], heads, swaps, config)
            for b in range(tokens.shape[0])]
    cat = lambda name: None if getattr(rows[0], name) is None else torch.cat(  # noqa: E731
        [getattr(r, name) for r in rows])
    return SwapScores(cat("pos"), cat("sym"), cat("pos_freq"), cat("sym_freq"))


def exclusion_keys(query_position: int, visible: Bool[Tensor, "pos"], exclude_bos: bool
                   ) -> Int[Tensor, "key"]:
    """The keys Theorem 1 permutes: every position before the query that it sees
    (position 0 left out with ``exclude_bos``)."""
    keys = torch.arange(int(exclude_bos), query_position, device=visible.device)
    return keys[visible[keys]]
