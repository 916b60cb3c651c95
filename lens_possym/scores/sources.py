r"""Where a layer's cross-logits come from: the score engine's per-layer protocol.

Paper A's Definition 2 swaps contents and keeps positions. Where a swap does that depends on
where position enters (:mod:`lens_possym.positions`), so the *swap site* picks which
cross-logit matrix :math:`C[p, c]` (the logit content :math:`c` gets at position :math:`p`)
the closed form reads:

* ``"layer"``: swap rows of the layer input ``blocks.{L}.hook_resid_pre``. Right where
  position enters *inside* the head (RoPE, ALiBi/T5/table biases, MLA, NoPE): the rows are
  contents, and the head adds position itself. For an absolute-PE model it is the pitfall:
  each row carries its own position, so the swap moves position along with content and
  every head scores :math:`s_{SYM} = 1` by construction (a test pins this).
* ``"content"``: swap only the content part of an absolute-PE model's input, the token
  embeddings (``hook_embed``), keeping the position embeddings. At layer 0 this has a
  closed form: :math:`C[p, c] = s\,q_n\cdot k(\mathrm{LN}(e_c + P_p))`, computed by running
  the layer's key path on all :math:`n^2` (content, position) rows at once. For an inside
  scheme the layer input is all content, so ``"content"`` is ``"layer"``.
* ``"input"``: swap token ids at the input and re-run the model from the embeddings. The
  reference for any layer and scheme; no closed form past layer 0 (every earlier layer sees
  the swap), so ``method="exact"`` refuses it there (:func:`closed_form_refusal`).

Every layer supplies its :math:`C` through one protocol, :class:`CrossLogitSource`:
``visible``, ``head_full()`` (:math:`C[b, h, p, c]`) and, where the scheme has frequencies,
``frequency_full()`` (:math:`C_f`); and each source scores itself: ``swap_scores(swaps,
config)`` (the closed form) and ``exclusion(keys, config)`` (Theorem 1). A RoPE layer
supplies its rank-2 per-frequency factors (:class:`FactorSource`, over
:class:`~lens_possym.scores.CrossLogitFactors` from one capture pass: :mod:`.exact`'s
per-frequency kernel, Theorem 1 in :math:`O(n)` per frequency); every other scheme a
:class:`~lens_possym.scores.matrix.CrossLogitMatrix` (:func:`matrix_source`: scored by
:func:`~lens_possym.scores.matrix.matrix_swap_scores`, Theorem 1 from its blocks). The
engine (:mod:`.engine`) asks the source; it never asks which one it is.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import torch
from einops import einsum
from jaxtyping import Bool, Float, Int
from torch import Tensor

from .._precision import is_half, model_tolerance
from ..capture import AttentionInputs, capture_attention_inputs, run_capturing
from ..decompose import PendingCheck, pending_check
from ..errors import DecompositionMismatchError, InvalidSelectionError, UnsupportedModelError
from ..positions import LayerScheme, causal_visible
from ..positions._bridge import keys_for_heads
from ..positions.base import PositionalScheme
from ..positions.rope import Rope
from ..resolved import Resolved, resolve
from ..rope import visible_keys
from ..typing import HookedModel
from .config import ScoreConfig
from .crosslogits import CrossLogitFactors, cross_logit_factors
from .exact import SwapScores, exact_swap_scores
from .exclusion import Exclusion, exclusion_from_factors
from .matrix import CrossLogitMatrix
from .rerun import rerun_site_scores, rerun_swap_scores
from .stages import stage
from .swaps import SwapSet

__all__ = ["CrossLogitSource", "FactorSource", "LayerPath", "FactorLayer", "MatrixLayer",
           "layer_paths",
           "closed_form_refusal", "effective_site", "matrix_source", "site_cross_logits",
           "check_against_model", "PATTERN_TOLERANCE"]


@runtime_checkable
class CrossLogitSource(Protocol):
    """What the closed form reads from one layer's query row, for chosen heads: RoPE's
    :class:`~lens_possym.scores.CrossLogitFactors` or a
    :class:`~lens_possym.scores.matrix.CrossLogitMatrix`."""

    visible: Bool[Tensor, "pos"]

    def head_full(self) -> Float[Tensor, "batch head_index pos pos"]:
        """The whole-head :math:`C` (rows: position, columns: content; ``-inf`` where the
        query cannot see)."""

    def frequency_full(self) -> Float[Tensor, "batch head_index freq pos pos"]:
        """The per-frequency :math:`C_f` (schemes with frequencies)."""

    def swap_scores(self, swaps: SwapSet, config: ScoreConfig) -> SwapScores:
        """Every swap of ``swaps`` scored in closed form, as ``config`` says (``tau``,
        ``per_frequency``, ...)."""

    def exclusion(self, keys: Int[Tensor, "key"] | range, config: ScoreConfig
                  ) -> tuple[Exclusion, Exclusion | None]:
        """Theorem 1 over ``keys``, per head and (``config.per_frequency``) per frequency
        (``None`` where the source has no terms)."""


@dataclass(frozen=True, eq=False)
class FactorSource:
    """A RoPE layer's :class:`CrossLogitSource`: its per-frequency factors
    (:class:`~lens_possym.scores.CrossLogitFactors`), scored by
    :func:`~lens_possym.scores.exact.exact_swap_scores` (the per-frequency kernel) and
    Theorem 1 from the factors in :math:`O(n)` per frequency
    (:func:`~lens_possym.scores.exclusion.exclusion_from_factors`)."""

    factors: CrossLogitFactors

    @property
    def visible(self) -> Bool[Tensor, "pos"]:
        return self.factors.visible

    def head_full(self) -> Float[Tensor, "batch head_index pos pos"]:
        return self.factors.head_full()

    def frequency_full(self) -> Float[Tensor, "batch head_index freq pos pos"]:
        return self.factors.frequency_full()

    def swap_scores(self, swaps: SwapSet, config: ScoreConfig) -> SwapScores:
        return exact_swap_scores(self.factors, swaps, tau=config.tau,
                                 per_frequency=config.per_frequency, cosine=config.cosine,
                                 max_elements=config.max_elements)

    def exclusion(self, keys: Int[Tensor, "key"] | range, config: ScoreConfig
                  ) -> tuple[Exclusion, Exclusion | None]:
        return exclusion_from_factors(self.factors, keys, per_frequency=config.per_frequency,
                                      max_elements=config.max_elements, trusted=True)


def effective_site(scheme: PositionalScheme | None, site: str) -> str:
    """The site a swap at ``site`` is made at for a layer of ``scheme``: Definition 2 swaps
    contents and keeps positions, and where position enters *inside* the head (RoPE,
    biases, MLA, NoPE) the layer's input rows are all content, so ``"content"`` is the
    ``"layer"`` site at every layer (both methods swap the rows of
    ``blocks.{L}.hook_resid_pre``). Only an absolute-PE layer's content site swaps the token
    embeddings apart from the position embeddings."""
    if site == "content" and (scheme is None or scheme.site == "inside"):
        return "layer"
    return site


def closed_form_refusal(scheme: PositionalScheme, layer: int, site: str) -> str | None:
    """Why ``site`` has no closed form at ``layer`` under ``scheme`` (``None``: it has one):
    ``"input"`` past layer 0, and ``"content"``/``"input"`` past layer 0 of an absolute-PE
    model. Then ``method="rerun"`` scores it and the exclusion is not computed."""
    absolute = scheme.site == "input"  # position added at the input (absolute PE)
    if site == "input" and layer > 0:
        return (
            f"swapping token ids at the input changes every layer before layer {layer}, so "
            f"there is no closed form; use method='rerun' (or swap_site='layer'"
            f"{'' if absolute else ', which is Definition 2 for this scheme'})")
    if absolute and site in ("content", "input") and layer > 0:
        return (
            f"the content of an absolute-PE model is separate from position only at "
            f"layer 0; for layer {layer} use method='rerun' (swap_site='content' or "
            f"'input' re-runs the model from its embeddings)")
    return None


def layer_visible(ls: LayerScheme, qpos: int, n_pos: int) -> Bool[Tensor, "pos"]:
    """Keys the query row at ``qpos`` sees in layer ``ls`` (causal, its window)."""
    return causal_visible(qpos, n_pos, ls.scheme.window)


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
    visible = layer_visible(ls, qpos, n_pos).to(full.device)
    return full.masked_fill(~visible[:, None], float("-inf"))


def matrix_source(model: HookedModel, tokens: Tensor, ls: LayerScheme,
                  heads: list[int], qpos: int, site: str, dtype: torch.dtype = torch.float64
                  ) -> CrossLogitMatrix:
    """The cross-logits of a layer whose scheme has no factors, at ``site`` (one run of
    the model for the layer's q and k; :func:`closed_form_refusal` must have passed).
    Schemes with frequencies supply their per-frequency terms too: MLA (its RoPE pairs,
    then its content part) and RoPE on some heads (its pairs; 2-D NoPE parts on the
    heads that do not rotate)."""
    scheme = ls.scheme
    visible = layer_visible(ls, qpos, tokens.shape[1])
    if scheme.site == "input" and site in ("content", "input"):
        cross = _content_site_cross_logits(model, tokens, ls, heads, qpos).to(dtype)
        return CrossLogitMatrix(cross, visible)
    got = run_capturing(model, tokens, [ls.q_hook, ls.k_hook])
    cross, terms_of = scheme.hook_cross_logits(got[ls.q_hook], got[ls.k_hook], heads,
                                               ls.n_heads, qpos, dtype)
    return CrossLogitMatrix(cross, visible, terms_of)


def site_cross_logits(model: HookedModel | Resolved, tokens: Tensor, ls: LayerScheme,
                      heads: list[int], qpos: int, site: str, dtype: torch.dtype = torch.float64
                      ) -> Float[Tensor, "batch head_index pos pos"]:
    """The cross-logit matrix whose entries the swaps at ``site`` produce (rows: position,
    columns: content; ``-inf`` where the query cannot see): the ``head_full()`` of the
    layer's :class:`CrossLogitSource`.

    Raises:
        InvalidSelectionError: the site has no closed form here (``"input"`` past layer 0,
            ``"content"`` past layer 0 of an absolute-PE model): use ``method="rerun"``.
    """
    resolved = resolve(model)
    refusal = closed_form_refusal(ls.scheme, ls.layer, site)
    if refusal is not None:
        raise InvalidSelectionError(refusal)
    if ls.scheme.has_factors:
        inputs = capture_attention_inputs(resolved, tokens, ls.layer,
                                          query_positions=qpos)[ls.layer]
        return cross_logit_factors(inputs, heads, dtype=dtype).head_full()
    return matrix_source(resolved.model, tokens, ls, heads, qpos, site, dtype).head_full()


#: largest |softmax(diag C) − model pattern| accepted by the check in a float32 (or wider)
#: model; a half-precision model's at its dtype's rounding (``_precision.model_tolerance``)
PATTERN_TOLERANCE = 1e-5


def check_against_model(model: HookedModel, tokens: Tensor, ls: LayerScheme,
                        heads: list[int], qpos: int, cross: Tensor) -> None:
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


# ---- the engine's two paths through a layer -----------------------------------------------


class LayerPath(Protocol):
    """How the engine reads one layer: its cross-logit source and its re-run reference.
    One implementation per kind of layer, chosen once from the scheme (``has_factors``,
    :func:`layer_paths`): :class:`FactorLayer` (RoPE: the engine captured its q and k) and
    :class:`MatrixLayer` (every other scheme), so the engine never asks which kind it holds.

    Attributes:
        layer: where the layer's tensors are read (``q_hook``, ``k_hook``,
            ``pattern_hook``), its index (``layer``) and ``n_heads``: a
            :class:`~lens_possym.rope.RopeSpec` (every layer of an all-RoPE model) or a
            :class:`~lens_possym.positions.LayerScheme`.
        scheme: its positional scheme.
    """

    layer: Any
    scheme: PositionalScheme

    def angles(self, inputs: AttentionInputs | None) -> Float[Tensor, "freq"]:
        """The angle of each frequency id (empty where the scheme has none); ``inputs``:
        the layer's capture (its angles at this input's length)."""

    def source(self, resolved: Resolved, tokens: Tensor | None,
               inputs: AttentionInputs | None, heads: list[int], config: ScoreConfig,
               pending: list[PendingCheck], closed_form: bool
               ) -> tuple[CrossLogitSource | None, Bool[Tensor, "pos"]]:
        """The layer's source (``None`` where the site has no closed form, or nothing
        needs one) and the keys its query row sees, the source checked against the model
        (a decomposition check is left in ``pending``). ``closed_form``: the site has one
        here (:func:`closed_form_refusal`)."""

    def rerun(self, resolved: Resolved, prompt: Tensor, heads: list[int], swaps: SwapSet,
              config: ScoreConfig) -> SwapScores:
        """The re-run reference on one prompt (``[1, pos]``)."""


@dataclass(frozen=True)
class FactorLayer:
    """A RoPE layer (every layer of an all-RoPE model, a RopeSpec; or a RoPE LayerScheme):
    its source is the per-frequency factors of its captured q and k
    (:class:`FactorSource`, checked by the decomposition), its re-run at the ``"layer"``
    site :func:`~lens_possym.scores.rerun.rerun_swap_scores` (per frequency too)."""

    layer: Any
    scheme: PositionalScheme

    def angles(self, inputs: AttentionInputs | None) -> Float[Tensor, "freq"]:
        return inputs.spec.angles          # at this input's length (LongRoPE, dynamic NTK)

    def source(self, resolved: Resolved, tokens: Tensor | None,
               inputs: AttentionInputs | None, heads: list[int], config: ScoreConfig,
               pending: list[PendingCheck], closed_form: bool
               ) -> tuple[FactorSource | None, Bool[Tensor, "pos"]]:
        spec = inputs.spec
        if config.method == "exact" and spec.extra.get("attention_sinks"):
            # GPT-OSS: a learned per-head sink logit joins the softmax; the closed form's
            # post-swap normaliser has no term for it (per head it would be off by ~1e-2)
            raise UnsupportedModelError(
                f"layer {spec.layer} ({spec.family}) has attention sinks, which the "
                "closed-form swap scores do not model; score it with method='rerun'")
        if config.check:
            with stage("check"):
                pending.append(pending_check(inputs, heads))
        # the query row's keys, computed on the host (the same function as inputs.mask()):
        # the swaps and the exclusion's keys are made from it without reading the device
        visible = visible_keys(spec, torch.tensor([inputs.query_position(0)]),
                               torch.arange(inputs.k.shape[1]))[0]
        if not closed_form:
            return None, visible
        with stage("factors"):
            return FactorSource(cross_logit_factors(
                inputs, heads, dtype=config.torch_dtype,
                max_matrix_elements=config.max_matrix_elements)), visible

    def rerun(self, resolved: Resolved, prompt: Tensor, heads: list[int], swaps: SwapSet,
              config: ScoreConfig) -> SwapScores:
        site = effective_site(self.scheme, config.swap_site)
        if site != "layer":
            return _rerun_at_site(resolved, prompt, self.layer, heads, swaps, site, config)
        return rerun_swap_scores(resolved, prompt, self.layer.layer, heads, swaps,
                                 tau=config.tau, per_frequency=config.per_frequency,
                                 cosine=config.cosine, batch_size=config.batch_size)


@dataclass(frozen=True)
class MatrixLayer:
    """A layer of any other scheme (a LayerScheme): its source is its cross-logit matrix at
    the swap site (:func:`matrix_source`, checked against the model's pattern), its re-run
    :func:`~lens_possym.scores.rerun.rerun_site_scores` at any site (whole heads)."""

    layer: Any
    scheme: PositionalScheme

    def angles(self, inputs: AttentionInputs | None) -> Float[Tensor, "freq"]:
        return (self.scheme.frequency_angles() if self.scheme.has_frequencies
                else torch.zeros(0))

    def source(self, resolved: Resolved, tokens: Tensor | None,
               inputs: AttentionInputs | None, heads: list[int], config: ScoreConfig,
               pending: list[PendingCheck], closed_form: bool
               ) -> tuple[CrossLogitMatrix | None, Bool[Tensor, "pos"]]:
        ls, qpos = self.layer, config.query_position
        visible = layer_visible(ls, qpos, tokens.shape[1])
        if not closed_form or not (config.method == "exact" or config.exclusion):
            return None, visible
        source = matrix_source(resolved.model, tokens, ls, heads, qpos, config.swap_site,
                               config.torch_dtype)
        if config.check:
            check_against_model(resolved.model, tokens, ls, heads, qpos, source.head_full())
        return source, visible

    def rerun(self, resolved: Resolved, prompt: Tensor, heads: list[int], swaps: SwapSet,
              config: ScoreConfig) -> SwapScores:
        return _rerun_at_site(resolved, prompt, self.layer, heads, swaps,
                              effective_site(self.scheme, config.swap_site), config)


def layer_paths(resolved: Resolved) -> list[LayerPath]:
    """Every layer's path, asked of its scheme: an all-RoPE model's layers (models that
    describe themselves with ``lens_possym_rope_specs()`` included) by their RoPE specs,
    any other model's by their :class:`~lens_possym.positions.LayerScheme`."""
    if resolved.all_rope:
        return [FactorLayer(spec, Rope(spec=spec)) for spec in resolved.specs]
    return [FactorLayer(ls, ls.scheme) if ls.scheme.has_factors else MatrixLayer(ls, ls.scheme)
            for ls in resolved.schemes]


def _rerun_at_site(resolved: Resolved, prompt: Tensor, ls: Any, heads: list[int],
                   swaps: SwapSet, site: str, config: ScoreConfig) -> SwapScores:
    return SwapScores(*rerun_site_scores(resolved.model, prompt, ls, heads, swaps, site,
                                         tau=config.tau, batch_size=config.batch_size))
