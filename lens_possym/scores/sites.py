r"""Swap scores under any positional scheme, at a chosen *swap site*.

Paper A's Definition 2 swaps contents and keeps positions. Where a swap does that depends on
where position enters (:mod:`lens_possym.positions`):

* ``"layer"``: swap rows of the layer input ``blocks.{L}.hook_resid_pre`` and re-run the
  block. Right where position enters *inside* the head (RoPE, ALiBi/T5/table biases, NoPE):
  the rows are contents, and the head adds position itself. For an absolute-PE model it is
  the pitfall: each row carries its own position, so the swap moves position along with
  content and every head scores :math:`s_{SYM} = 1` by construction (a test pins this).
* ``"content"``: swap only the content part of an absolute-PE model's input, the token
  embeddings (``hook_embed``), keeping the position embeddings. At layer 0 this has a closed
  form: the logit of content :math:`c` at position :math:`p` is exactly
  :math:`C[p, c] = s\,q_n\cdot k(\mathrm{LN}(e_c + P_p))`, computed by running the layer's key
  path on all :math:`n^2` (content, position) rows at once. For an inside scheme the layer
  input is all content, so ``"content"`` is ``"layer"``.
* ``"input"``: swap token ids at the input and re-run the model from the embeddings. The
  reference for any layer and scheme; it has no closed form past layer 0 (every earlier
  layer sees the swap), so ``method="exact"`` refuses it there.

The closed form needs only :math:`C[p, c]` (:func:`site_cross_logits`): after swapping
:math:`i` and :math:`j` the logits there are :math:`C[i, j]` and :math:`C[j, i]`, all others
unchanged. :func:`matrix_swap_scores` forms the post-swap attention row with its softmax
normaliser and compares the masses with the same cosine the re-run uses
(``torch.nn.functional.cosine_similarity``), so exact and re-run agree to rounding.
"""

from __future__ import annotations

from typing import Any, Sequence

import torch
from einops import einsum
import torch.nn.functional as F
from jaxtyping import Float
from torch import Tensor

from .._inputs import ModelInput, as_heads, as_layers
from .._precision import is_half, model_tolerance
from ..capture import capture_attention_inputs, run_capturing
from ..errors import DecompositionMismatchError, InvalidSelectionError, NoFrequenciesError
from ..positions import LayerScheme, schemes
from ..positions._bridge import keys_for_heads
from ..positions.absolute import Absolute
from ..positions.mla import MLA, mla_parts
from ..positions.rope import Rope
from ..typing import HookedModel
from .config import ScoreConfig
from .exclusion import exclusion_from_matrix
from .swaps import SwapSet, WeightedCosines, swap_set

__all__ = ["per_frequency_available", "site_swap_scores", "site_cross_logits", "matrix_swap_scores",
           "frequency_matrix_swap_scores", "rerun_site_scores"]


def _content_site_cross_logits(model: HookedModel, tokens: Tensor, ls: LayerScheme,
                               heads: list[int], qpos: int) -> Tensor:
    """``C[b, h, p, c]`` at layer 0 of an absolute-PE model: content ``c``'s token embedding
    plus position ``p``'s embedding, through the layer's own norm and key projection."""
    names = ["hook_embed", "hook_pos_embed", ls.q_hook]
    got = run_capturing(model, tokens, names)
    embed, pos_embed = got["hook_embed"], got["hook_pos_embed"]
    q = got[ls.q_hook][:, qpos][:, heads]                                 # [b, h, d]
    batch, n_pos, _ = embed.shape
    out = []
    for b in range(batch):
        rows = embed[b][:, None] + pos_embed[b][None]                     # [c, p, d_model]

        def place(tensor: Tensor, hook) -> Tensor:
            return rows.to(tensor)

        keys = run_capturing(model, tokens[b : b + 1].expand(n_pos, -1), [ls.k_hook],
                             fwd_hooks=[(f"blocks.{ls.layer}.hook_resid_pre", place)])[ls.k_hook]
        keys = keys_for_heads(keys, heads, ls.n_heads)                    # [c, p, h, d]
        logits = einsum(q[b], keys, "head_index d_head, content pos head_index d_head"
                        " -> head_index pos content")
        out.append(logits * ls.scheme.scale)
    full = torch.stack(out)
    visible = _visible(ls, qpos, n_pos).to(full.device)
    return full.masked_fill(~visible[:, None], float("-inf"))


def _visible(ls: LayerScheme, qpos: int, n_pos: int) -> Tensor:
    from ..positions import causal_visible

    return causal_visible(qpos, n_pos, ls.scheme.window)


def _mla_inputs(model: HookedModel, tokens: Tensor, ls: LayerScheme, heads: list[int], qpos: int):
    got = run_capturing(model, tokens, [ls.q_hook, ls.k_hook])
    return mla_parts(got[ls.q_hook][:, heads], got[ls.k_hook][:, heads], ls.d_content,
                     ls.scheme, qpos)


def site_cross_logits(model: HookedModel, tokens: Tensor, ls: LayerScheme, heads: list[int],
                      qpos: int, site: str, dtype: torch.dtype = torch.float64
                      ) -> Float[Tensor, "batch head_index pos pos"]:
    """The cross-logit matrix whose entries the swaps at ``site`` produce (rows: position,
    columns: content; ``-inf`` where the query cannot see).

    Raises:
        InvalidSelectionError: the site has no closed form here (``"input"`` past layer 0,
            ``"content"`` past layer 0 of an absolute-PE model): use ``method="rerun"``.
    """
    scheme = ls.scheme
    absolute = isinstance(scheme, Absolute)
    if site == "input" and ls.layer > 0:
        raise InvalidSelectionError(
            f"swapping token ids at the input changes every layer before layer {ls.layer}, so "
            f"there is no closed form; use method='rerun' (or swap_site='layer'"
            f"{'' if absolute else ', which is Definition 2 for this scheme'})")
    if absolute and site in ("content", "input"):
        if ls.layer > 0:
            raise InvalidSelectionError(
                f"the content of an absolute-PE model is separate from position only at "
                f"layer 0; for layer {ls.layer} use method='rerun' (swap_site='content' or "
                f"'input' re-runs the model from its embeddings)")
        return _content_site_cross_logits(model, tokens, ls, heads, qpos).to(dtype)
    if isinstance(scheme, MLA):
        return scheme.mla_cross_logits(*_mla_inputs(model, tokens, ls, heads, qpos), qpos).to(dtype)
    if isinstance(scheme, Rope):
        from .crosslogits import cross_logit_factors

        inputs = capture_attention_inputs(model, tokens, ls.layer, query_positions=qpos)[ls.layer]
        return cross_logit_factors(inputs, heads, dtype=dtype).head_full()
    got = run_capturing(model, tokens, [ls.q_hook, ls.k_hook])
    q = got[ls.q_hook][:, qpos][:, heads].to(dtype)
    k = keys_for_heads(got[ls.k_hook], heads, ls.n_heads).to(dtype)
    return scheme.cross_logits(q, k, qpos)


#: largest |softmax(diag C) − model pattern| accepted by the check in a float32 (or wider)
#: model; a half-precision model's at its dtype's rounding (``_precision.model_tolerance``)
PATTERN_TOLERANCE = 1e-5


def _check_against_model(model: HookedModel, tokens: Tensor, ls: LayerScheme, heads: list[int],
                         qpos: int, cross: Tensor) -> None:
    """The clean row of ``C`` must give the model's own attention: a wrong scheme (slopes,
    scale, window) shows here before any score is computed."""
    pattern = run_capturing(model, tokens, [ls.pattern_hook])[ls.pattern_hook][:, heads, qpos]
    implied = torch.softmax(torch.diagonal(cross, dim1=-2, dim2=-1), -1)
    error = float((implied - pattern.to(implied)).abs().max())
    tolerance = model_tolerance(pattern.dtype) if is_half(pattern.dtype) else PATTERN_TOLERANCE
    if error > tolerance:
        raise DecompositionMismatchError(
            f"layer {ls.layer}: the {ls.scheme.name} scheme read from this model misses its "
            f"attention by {error:.3g}; report the family (check=False skips this check)")


def matrix_swap_scores(cross: Float[Tensor, "batch head_index pos pos"], swaps: SwapSet, *,
                       tau: float = 1e-4, chunk: int = 256
                       ) -> tuple[Float[Tensor, "batch head_index"],
                                  Float[Tensor, "batch head_index"]]:
    """``(s_POS, s_SYM)`` of every head from its cross-logit matrix, all swaps at once.

    Each swap's attention row is the softmax of the clean logits with the two groups' entries
    replaced by ``C[first, second]`` and ``C[second, first]``; the masses on the groups (block
    means) are compared with the clean ones by cosine, as the re-run does.
    """
    logits = torch.diagonal(cross, dim1=-2, dim2=-1)                      # [b, h, p]
    clean = torch.softmax(logits, -1)
    acc = WeightedCosines()
    for start in range(0, swaps.n_swaps, chunk):
        first, second = swaps.pairs(slice(start, start + chunk))
        rows = logits[..., None, :].repeat(1, 1, len(first), 1)           # [b, h, s, p]
        index = torch.arange(len(first))[:, None]
        rows[..., index, first] = cross[..., first, second]
        rows[..., index, second] = cross[..., second, first]
        _add(acc, torch.softmax(rows, -1), clean, first, second, tau)
    return acc.result()


def frequency_matrix_swap_scores(cross: Float[Tensor, "batch head_index freq pos pos"],
                                 swaps: SwapSet, *, tau: float = 1e-4
                                 ) -> tuple[Float[Tensor, "batch head_index freq"],
                                            Float[Tensor, "batch head_index freq"]]:
    """Per-frequency scores: each id's ``C_f`` scored as a head of its own (its own softmax),
    as RoPE's per-frequency scores are. E.g. MLA's RoPE pairs and its content part."""
    b, h, f = cross.shape[:3]
    pos, sym = matrix_swap_scores(cross.flatten(1, 2), swaps, tau=tau)
    return pos.view(b, h, f), sym.view(b, h, f)


def _add(acc: WeightedCosines, after: Tensor, clean: Tensor, first: Tensor, second: Tensor,
         tau: float) -> None:
    """``after``: ``[..., swap, pos]`` attention rows after each swap; ``clean``: ``[..., pos]``."""
    def mass(rows: Tensor, groups: Tensor) -> Tensor:                     # -> [..., swap]
        index = groups.to(rows.device).expand(*rows.shape[:-1], groups.shape[-1])
        return torch.gather(rows, -1, index).mean(-1)

    new = torch.stack([mass(after, first), mass(after, second)], -1)
    d1, d2 = clean[..., first].mean(-1), clean[..., second].mean(-1)
    pos = F.cosine_similarity(new, torch.stack([d1, d2], -1), dim=-1)
    sym = F.cosine_similarity(new, torch.stack([d2, d1], -1), dim=-1)
    acc.add((d1 - d2).abs() / tau, pos, sym)


def rerun_site_scores(model: HookedModel, tokens: Tensor, ls: LayerScheme, heads: list[int],
                      swaps: SwapSet, site: str, *, tau: float = 1e-4, batch_size: int = 64
                      ) -> tuple[Tensor, Tensor]:
    """``(s_POS, s_SYM)`` (``[1, head_index]``) of one prompt by re-running every swap at ``site``:
    rows of ``blocks.{L}.hook_resid_pre`` (``"layer"``), rows of ``hook_embed``
    (``"content"``) or token ids (``"input"``)."""
    if tokens.shape[0] != 1:
        raise InvalidSelectionError("rerun_site_scores takes one prompt at a time")
    qpos, n_pos = swaps.query_position, tokens.shape[1]
    pattern = ls.pattern_hook
    point = {"layer": f"blocks.{ls.layer}.hook_resid_pre", "content": "hook_embed"}.get(site)
    names = [pattern] + ([point] if point else [])
    clean_run = run_capturing(model, tokens, names)
    clean = clean_run[pattern][:, heads, qpos].double()                   # [1, h, p]
    acc = WeightedCosines()
    for start in range(0, swaps.n_swaps, batch_size):
        stop = min(start + batch_size, swaps.n_swaps)
        perms = torch.stack([swaps.permutation(s, n_pos) for s in range(start, stop)])
        if point is None:
            got = run_capturing(model, tokens[0, perms.to(tokens.device)], [pattern])
        else:
            rows = clean_run[point][0, perms.to(tokens.device)]

            def replace(tensor: Tensor, hook) -> Tensor:
                return rows

            got = run_capturing(model, tokens.expand(len(perms), -1), [pattern],
                                fwd_hooks=[(point, replace)])
        after = got[pattern][:, heads, qpos].double().transpose(0, 1)[None]   # [1, h, s, p]
        _add(acc, after, clean, *swaps.pairs(slice(start, stop)), tau)
    return acc.result()


def per_frequency_available(model: HookedModel, config: ScoreConfig,
                            layers: int | Sequence[int] | None = None) -> bool:
    """Whether :func:`site_swap_scores` can score the chosen ``layers`` per frequency
    with ``config``: every one has frequencies (MLA), at the ``"layer"`` site, in closed
    form. :func:`~lens_possym.scores.swap_scores` left at its defaults scores per
    frequency only then (and whole heads otherwise), instead of refusing the model."""
    layer_schemes = schemes(model)
    chosen = as_layers(layers, len(layer_schemes))
    return (config.swap_site == "layer" and config.method == "exact"
            and all(isinstance(layer_schemes[layer].scheme, MLA) for layer in chosen))


def site_swap_scores(model: HookedModel, input: ModelInput, config: ScoreConfig | None = None, *,
                     layers: int | Sequence[int] | None = None,
                     heads: int | Sequence[int] | None = None, progress: bool = False,
                     **settings: Any) -> PosSymScores:
    """:func:`~lens_possym.scores.swap_scores` for any positional scheme and swap site.

    ``config.swap_site`` picks the site (module docstring). Whole-head scores (and
    Theorem 1's exclusion ratio where a closed form exists); per-frequency scores at the
    ``"layer"`` site: for MLA here (its RoPE pairs, then its content part as the last id),
    for RoPE in :func:`~lens_possym.scores.swap_scores`'s own path.

    Raises:
        NoFrequenciesError: ``per_frequency=True`` on a layer whose scheme has no frequencies.
        InvalidSelectionError: ``per_frequency=True`` at a site other than ``"layer"``;
            ``method="exact"`` where the site has no closed form; other bad settings.
    """
    from .profile import LayerScores, _assemble, resolve_for_input

    from .guards import check_finite
    from .profile import guard_hooks

    config = ScoreConfig.coerce(config, **settings)
    layer_schemes = schemes(model)
    chosen = as_layers(layers, len(layer_schemes))
    tokens, config = resolve_for_input(model, input, config)
    guard_hooks(model, layer_schemes, chosen, config)
    qpos = config.query_position
    if config.per_frequency:
        for layer in chosen:
            scheme = layer_schemes[layer].scheme
            if not scheme.has_frequencies:
                raise NoFrequenciesError(
                    f"layer {layer} is a {scheme.name} layer: it has no frequencies to score; "
                    f"pass per_frequency=False")
        if config.swap_site != "layer" or config.method != "exact" or not all(
                isinstance(layer_schemes[layer].scheme, MLA) for layer in chosen):
            raise InvalidSelectionError(
                f"per-frequency scores are computed at the 'layer' site only (swap_site="
                f"{config.swap_site!r}), and here in closed form for MLA layers "
                f"(method='exact'); pass per_frequency=False")
    results = []
    for layer in chosen:
        ls = layer_schemes[layer]
        chosen_heads = as_heads(heads, ls.n_heads, layer)
        visible = _visible(ls, qpos, tokens.shape[1])
        swaps = swap_set(config.swap, qpos, visible, exclude_bos=config.exclude_bos,
                         n_blocks=config.n_blocks)
        cross = None
        if config.method == "exact" or config.exclusion:
            try:
                cross = site_cross_logits(model, tokens, ls, chosen_heads, qpos,
                                          config.swap_site, config.torch_dtype)
            except InvalidSelectionError:
                if config.method == "exact":
                    raise
        if config.check and cross is not None:
            _check_against_model(model, tokens, ls, chosen_heads, qpos, cross)
        if config.method == "exact":
            pos, sym = matrix_swap_scores(cross, swaps, tau=config.tau)
        else:
            rows = [rerun_site_scores(model, tokens[b : b + 1], ls, chosen_heads, swaps,
                                      config.swap_site, tau=config.tau,
                                      batch_size=config.batch_size)
                    for b in range(tokens.shape[0])]
            pos, sym = (torch.cat([r[i] for r in rows]) for i in (0, 1))
        angles = ls.scheme.frequency_angles() if ls.scheme.has_frequencies else torch.zeros(0)
        out = LayerScores(layer=layer, heads=chosen_heads, angles=angles, pos=pos, sym=sym)
        if config.per_frequency:  # MLA (checked above): its RoPE pairs and content part
            terms = ls.scheme.frequency_cross_logits(
                *_mla_inputs(model, tokens, ls, chosen_heads, qpos), qpos)
            out.pos_freq, out.sym_freq = frequency_matrix_swap_scores(terms, swaps, tau=config.tau)
        if config.exclusion and cross is not None:
            keys = torch.arange(int(config.exclude_bos), qpos)
            keys = keys[visible[keys]]
            if len(keys) >= 2:
                ex = exclusion_from_matrix(cross[..., keys[:, None], keys[None, :]])
                out.exclusion_ratio, out.balance = ex.ratio, ex.balance
        results.append(out)
    check_finite(results, config.nonfinite)
    return _assemble(results, config, n_layers=len(layer_schemes),
                     n_heads=max(ls.n_heads for ls in layer_schemes),
                     n_freqs=max((len(r.angles) for r in results), default=0),
                     n_tokens=tokens.shape[1],
                     model_name=str(getattr(getattr(model, "cfg", None), "model_name", "")))
