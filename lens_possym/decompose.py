r"""Split attention logits into one term per RoPE frequency, checked against the model.

For query position :math:`n`, key position :math:`j`, query head :math:`h` and frequency
:math:`f` with angle :math:`\theta_f`, write the un-rotated query and key pair as complex
numbers :math:`z^q_f = q_a + i q_b`, :math:`z^k_f = k_a + i k_b`. The model's pre-softmax
score is

.. math::

    s_{nj} = \sum_f \lambda^{(f)}_{nj} + \lambda^{(\mathrm{tail})}_{nj}, \qquad
    \lambda^{(f)}_{nj} = s \cdot \langle R(n\theta_f) q_f,\; R(j\theta_f) k_f \rangle

(absolute form: both vectors rotated by the model's own tables, :math:`s` the layer's
scale), and since rotations compose,

.. math::

    \lambda^{(f)}_{nj} = s\,(q_a k_a + q_b k_b)\cos\varphi + s\,(q_b k_a - q_a k_b)\sin\varphi,
    \qquad \varphi = (j - n)\,\theta_f

(relative form: a *content* term that the rotation scales by :math:`\cos\varphi` and a
*rotation* term weighted by :math:`\sin\varphi`). The non-rotated tail of a partial-rotary
head is the last frequency id, with :math:`\theta = 0` (only a content term). A softcap,
where the model has one, is applied after the sum; masks are kept in
:attr:`FrequencyLogits.mask`.

Every result carries :attr:`FrequencyLogits.max_abs_error`, the largest difference between
the summed terms (softcapped) and the model's own scores on the same pass (or, for
families without a pre-softmax hook, between the implied pattern and the model's pattern);
:func:`frequency_logits` raises if it is not at rounding level.

Per-frequency q/k norms (:func:`frequency_norms`) are the "frequency usage" measure of
Barbero et al. (2024): the mean 2-norm of each 2-D query or key chunk.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Sequence

import torch
from einops import einsum
from jaxtyping import Bool, Float, Int
from torch import Tensor

from ._inputs import ModelInput, as_heads, as_layer, as_layers
from ._mismatch import describe_mismatch, model_hidden
from ._precision import compute_dtype, model_tolerance
from .capture import AttentionInputs, capture_attention_inputs
from .errors import DecompositionMismatchError, InvalidSelectionError
from .results_io import ResultIO, head_frame
from .resolved import Resolved, resolve
from .rope import RopeSpec, cos_sin, rotate_pairs, to_pairs
from .typing import HookedModel

__all__ = [
    "FrequencyLogits",
    "frequency_logits",
    "frequency_logits_all",
    "decompose_inputs",
    "FrequencyNorms",
    "frequency_norms",
    "apply_softcap",
    "PendingCheck",
    "pending_check",
    "read_checks",
]


def apply_softcap(scores: Tensor, softcap: float | None) -> Tensor:
    """``c·tanh(s/c)`` as the model applies it after the sum (identity without a cap)."""
    return scores if not softcap else softcap * torch.tanh(scores / softcap)


@dataclass(repr=False)
class FrequencyLogits(ResultIO):
    """Per-frequency attention-logit terms of one layer, for chosen heads and query rows.

    Attributes:
        terms: ``[batch, head_index, query_pos, key_pos, freq]`` logit term of every
            frequency id (scale included; the tail, if any, is the last id). They sum to
            the model's pre-softcap scores at every unmasked entry.
        cos_terms, sin_terms: the relative form (same shape; ``cos + sin = terms``), or
            ``None`` unless requested.
        heads: the query heads along ``head_index``.
        query_positions: ``[query_pos]``; keys run over all positions ``0..n-1``.
        mask: ``[query_pos, key_pos]`` keys each row may attend to (causal, window).
        angles: ``[freq]`` float64 angle per position of each frequency id (tail: 0).
        spec: the layer's :class:`~lens_possym.rope.RopeSpec`.
        max_abs_error: largest |summed terms − model| on this pass (scores where the
            family has a pre-softmax hook, else the pattern), ``nan`` if not checked.
        checked_against: ``"scores"``, ``"pattern"`` or ``None``.
    """

    terms: Float[Tensor, "batch head_index query_pos key_pos freq"]
    heads: list[int]
    query_positions: Int[Tensor, "query_pos"]
    mask: Bool[Tensor, "query_pos key_pos"]
    spec: RopeSpec = field(repr=False)
    cos_terms: Float[Tensor, "batch head_index query_pos key_pos freq"] | None = None
    sin_terms: Float[Tensor, "batch head_index query_pos key_pos freq"] | None = None
    max_abs_error: float = float("nan")
    checked_against: str | None = None
    model_scores: Tensor | None = field(default=None, repr=False)
    model_pattern: Tensor | None = field(default=None, repr=False)
    model_dtype: torch.dtype | None = field(default=None, repr=False)

    FORMAT = "lens-possym/frequency-logits@1"

    @property
    def layer(self) -> int:
        return self.spec.layer

    def summary(self) -> dict[str, Any]:
        """Where the terms come from, their shape and the check against the model."""
        batch, _, n_queries, n_keys, n_freqs = self.terms.shape
        return {"layer": self.layer, "heads": list(self.heads), "n_prompts": batch,
                "n_queries": n_queries, "n_keys": n_keys, "n_freqs": n_freqs,
                "max_abs_error": self.max_abs_error, "checked_against": self.checked_against}

    # ---- tables, files, repr (ResultIO) --------------------------------------------------

    def _table(self):
        """Long format: one row per ``(batch, head, query_pos, key_pos, frequency)`` visible
        entry, ``score`` = ``"term"`` (and ``"cos_term"``/``"sin_term"`` when computed);
        ``query_pos`` holds the query's position, masked keys are left out."""
        visible = self.mask.to(self.terms.device)[None, None, :, :, None]
        tensors = {name: None if t is None else t.masked_fill(~visible, float("nan"))
                   for name, t in (("term", self.terms), ("cos_term", self.cos_terms),
                                   ("sin_term", self.sin_terms))}
        frame = head_frame(tensors, self.angles,
                           dims=("batch", "head", "query_pos", "key_pos", "frequency"),
                           heads=self.heads, layer=self.layer)
        frame["query_pos"] = self.query_positions.cpu().numpy()[frame["query_pos"].to_numpy()]
        first = ["layer", "head", "frequency", "angle", "batch", "query_pos", "key_pos"]
        return frame[first + ["score", "value"]]

    def to_dict(self) -> dict[str, Any]:
        """Everything but the model's own scores/pattern (kept for :meth:`check` only)."""
        spec = {f.name: getattr(self.spec, f.name) for f in dataclasses.fields(self.spec)}
        return {"layer": self.layer, "heads": list(self.heads), "terms": self.terms,
                "cos_terms": self.cos_terms, "sin_terms": self.sin_terms,
                "query_positions": self.query_positions, "mask": self.mask, "spec": spec,
                "max_abs_error": self.max_abs_error, "checked_against": self.checked_against,
                "model_dtype": None if self.model_dtype is None
                else str(self.model_dtype).removeprefix("torch.")}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "FrequencyLogits":
        spec = dict(data["spec"])
        spec["inv_freq"] = torch.as_tensor(spec["inv_freq"])
        dtype = data.get("model_dtype")
        return cls(terms=data["terms"], heads=list(data["heads"]),
                   query_positions=data["query_positions"], mask=data["mask"],
                   spec=RopeSpec(**spec), cos_terms=data.get("cos_terms"),
                   sin_terms=data.get("sin_terms"),
                   max_abs_error=_float(data.get("max_abs_error")),
                   checked_against=data.get("checked_against"),
                   model_dtype=None if dtype is None else getattr(torch, dtype))

    def _headline(self) -> list[str]:
        return [f"layer={self.layer}", f"n_freqs={self.spec.n_freqs}"]

    @property
    def angles(self) -> Float[Tensor, "freq"]:
        return self.spec.angles

    @property
    def freq_ids(self) -> Int[Tensor, "freq"]:
        return torch.arange(self.spec.n_freqs)

    def scores(self) -> Float[Tensor, "batch head_index query_pos key_pos"]:
        """Sum over frequencies: the pre-softcap, unmasked scores."""
        return self.terms.sum(-1)

    def logits(self) -> Float[Tensor, "batch head_index query_pos key_pos"]:
        """Softcapped scores with masked keys at ``-inf``: what the softmax sees."""
        capped = apply_softcap(self.scores(), self.spec.softcap)
        return capped.masked_fill(~self.mask.to(capped.device), float("-inf"))

    def pattern(self) -> Float[Tensor, "batch head_index query_pos key_pos"]:
        """The attention pattern implied by the terms."""
        return torch.softmax(self.logits(), dim=-1)

    def norms(self) -> Float[Tensor, "batch head_index query_pos freq"]:
        """2-norm of each frequency's logit row over the keys each query may see.

        The "per-frequency logit norm" of paper A's Figure 1D.
        """
        masked = self.terms.masked_fill(~self.mask.to(self.terms.device)[..., None], 0.0)
        return masked.norm(dim=-2)

    def check(self, atol: float | None = None) -> float:
        """Raise :class:`DecompositionMismatchError` unless the terms add up to the model.

        ``atol`` defaults to the model's dtype's
        (:func:`lens_possym._precision.model_tolerance`: ``1e-4`` in float32 and wider,
        ``2.3e-2`` in bfloat16, ``2.9e-3`` in float16), relative to the largest score magnitude when that exceeds 1. The message says what
        disagrees (layer, how many entries, the worst query/key/head, the size) and the
        likely cause: the mask/window (the model hides other keys than the geometry says),
        the angles (scores agree at zero offset, where rotation cancels, but not elsewhere)
        or the scale (off by one common factor).
        """
        if self.checked_against is None:
            return self.max_abs_error
        magnitude = 1.0
        if self.checked_against == "scores" and self.model_scores is not None:
            visible = self.model_scores[..., self.mask.to(self.model_scores.device)]
            visible = visible[~model_hidden(visible)]  # a key the model hid is no magnitude
            magnitude = max(1.0, float(visible.abs().max())) if visible.numel() else 1.0
        if atol is None:
            atol = model_tolerance(self.model_dtype, self.terms.dtype)
        if not self.max_abs_error <= atol * magnitude:
            detail = None
            if self.checked_against == "scores" and self.model_scores is not None:
                n_keys = self.mask.shape[-1]
                detail = describe_mismatch(
                    apply_softcap(self.scores(), self.spec.softcap), self.model_scores,
                    self.mask, self.query_positions, torch.arange(n_keys), atol * magnitude,
                    heads=self.heads, window=self.spec.window)
            detail = detail or (f"they differ by {self.max_abs_error:.3g} (tolerance "
                                f"{atol * magnitude:.3g})")
            raise DecompositionMismatchError(
                f"layer {self.layer}: the per-frequency terms do not add up to the model's "
                f"{self.checked_against}: {detail}. Geometry read: {self.spec.describe()}. "
                "If the cause is not an edit of yours (hooks, buffers), please report it "
                "with the model's class name."
            )
        return self.max_abs_error


def _rotated_pairs(x: Tensor, positions: Tensor, spec: RopeSpec, dtype: torch.dtype):
    """Rotate like the model does (its dtype, its tables), then cast to ``dtype``."""
    cos, sin = cos_sin(spec, positions.to(x.device))
    pairs, tail = to_pairs(x, spec)
    cos = cos.to(x.dtype)[None, :, None, :]
    sin = sin.to(x.dtype)[None, :, None, :]
    return rotate_pairs(pairs, cos, sin).to(dtype), tail.to(dtype)


def decompose_inputs(
    inputs: AttentionInputs,
    heads: int | Sequence[int] | None = None,
    *,
    relative: bool = False,
    dtype: torch.dtype | None = None,
    compare: bool = True,
) -> FrequencyLogits:
    """Per-frequency terms from captured inputs (see :func:`frequency_logits`).

    ``compare``: also hold the terms to the model's own scores or pattern
    (:attr:`FrequencyLogits.max_abs_error`, a value read back from the device);
    :func:`pending_check` does it without reading.

    ``inputs`` come from :func:`~lens_possym.capture.capture_attention_inputs`, which also
    reads them from a ``transformer_lens.ActivationCache``:
    ``decompose_inputs(capture_attention_inputs(model, cache, layer)[layer])``.
    """
    spec = inputs.spec
    head_list = as_heads(heads, spec.n_heads, spec.layer)
    model_dtype = inputs.q.dtype
    if dtype is None:
        dtype = compute_dtype(model_dtype)
    q = inputs.q[:, :, head_list]
    k = inputs.k_for_heads(head_list)
    qpos, kpos = inputs.query_positions, inputs.key_positions
    q_pairs, q_tail = _rotated_pairs(q, qpos, spec, dtype)
    k_pairs, k_tail = _rotated_pairs(k, kpos, spec, dtype)
    terms = einsum(q_pairs, k_pairs, "batch query_pos head_index freq pair, "
                   "batch key_pos head_index freq pair -> batch head_index query_pos key_pos freq")
    if spec.has_tail:
        tail = einsum(q_tail, k_tail, "batch query_pos head_index tail, "
                      "batch key_pos head_index tail -> batch head_index query_pos key_pos")
        terms = torch.cat([terms, tail[..., None]], dim=-1)
    terms = terms * spec.scale

    cos_terms = sin_terms = None
    if relative:
        cos_terms, sin_terms = _relative_terms(q, k, qpos, kpos, spec, dtype)

    result = FrequencyLogits(
        terms=terms, heads=head_list, query_positions=qpos, mask=inputs.mask(), spec=spec,
        cos_terms=cos_terms, sin_terms=sin_terms, model_dtype=model_dtype,
    )
    if compare:
        _attach_check(result, inputs, head_list)
    return result


def _relative_terms(q, k, qpos, kpos, spec: RopeSpec, dtype):
    """The cos (content) and sin (rotation) parts, from un-rotated q and k."""
    qp, qt = to_pairs(q.to(dtype), spec)
    kp, kt = to_pairs(k.to(dtype), spec)
    qa, qb, ka, kb = qp[..., 0], qp[..., 1], kp[..., 0], kp[..., 1]
    by_pair = ("batch query_pos head_index freq, batch key_pos head_index freq"
               " -> batch head_index query_pos key_pos freq")
    re = einsum(qa, ka, by_pair) + einsum(qb, kb, by_pair)
    im = einsum(qb, ka, by_pair) - einsum(qa, kb, by_pair)
    # cos/sin of (j - n)θ from the model's own tables, so the two forms agree to rounding.
    qc, qs = (t.to(dtype) for t in cos_sin(spec, qpos.to(q.device)))
    kc, ks = (t.to(dtype) for t in cos_sin(spec, kpos.to(k.device)))
    cos_phi = kc[None, :, :] * qc[:, None, :] + ks[None, :, :] * qs[:, None, :]
    sin_phi = ks[None, :, :] * qc[:, None, :] - kc[None, :, :] * qs[:, None, :]
    cos_terms = re * cos_phi * spec.scale
    sin_terms = im * sin_phi * spec.scale
    if spec.has_tail:
        tail = einsum(qt.to(dtype), kt.to(dtype), "batch query_pos head_index tail, "
                      "batch key_pos head_index tail -> batch head_index query_pos key_pos")
        tail = tail * spec.scale
        cos_terms = torch.cat([cos_terms, tail[..., None]], dim=-1)
        sin_terms = torch.cat([sin_terms, torch.zeros_like(tail)[..., None]], dim=-1)
    return cos_terms, sin_terms


def _attach_check(result: FrequencyLogits, inputs: AttentionInputs, heads: list[int]) -> None:
    mask = result.mask.to(result.terms.device)
    if inputs.model_scores is not None:
        model = inputs.model_scores[:, heads].to(result.terms.dtype)
        ours = apply_softcap(result.scores(), result.spec.softcap)
        diff = (ours - model)[..., mask]
        result.model_scores = inputs.model_scores[:, heads]
        result.checked_against = "scores"
    elif inputs.model_pattern is not None:
        model = inputs.model_pattern[:, heads].to(result.terms.dtype)
        diff = result.pattern() - model
        result.checked_against = "pattern"
    else:
        return
    result.model_pattern = None if inputs.model_pattern is None else inputs.model_pattern[:, heads]
    result.max_abs_error = float(diff.abs().max()) if diff.numel() else 0.0


@dataclass
class PendingCheck:
    """The decomposition check of one layer, computed on the device and not yet read.

    ``error`` and ``allowed`` are 0-d tensors on the capture's device: the largest
    |summed terms − model| (:attr:`FrequencyLogits.max_abs_error`) and the tolerance it is
    held to (:meth:`FrequencyLogits.check`'s ``atol × magnitude``; ``inf`` where the family
    has nothing to check against). Reading them is what makes a GPU wait for the host, so a
    caller that checks many layers gathers them and reads them once
    (:func:`read_checks`)."""

    inputs: AttentionInputs
    heads: list[int]
    error: Tensor
    allowed: Tensor


def pending_check(inputs: AttentionInputs, heads: Sequence[int]) -> PendingCheck:
    """:meth:`FrequencyLogits.check` of ``decompose_inputs(inputs, heads)`` without reading
    anything back: the same error and tolerance, as device tensors (no boolean indexing, no
    ``float(tensor)``), for :func:`read_checks` to read with other layers' at once."""
    result = decompose_inputs(inputs, heads, compare=False)
    mask = result.mask.to(result.terms.device)
    device = result.terms.device
    if inputs.model_scores is not None:
        model = inputs.model_scores[:, result.heads]
        ours = apply_softcap(result.scores(), result.spec.softcap)
        diff = (ours - model.to(result.terms.dtype)).abs().masked_fill(~mask, 0.0)
        counted = mask & ~model_hidden(model)     # a key the model hid is no magnitude
        magnitude = model.abs().masked_fill(~counted, 0.0)
        magnitude = (magnitude.amax() if magnitude.numel() else magnitude.new_zeros(()))
        magnitude = magnitude.to(torch.float64).clamp_min(1.0)
    elif inputs.model_pattern is not None:
        model = inputs.model_pattern[:, result.heads].to(result.terms.dtype)
        diff = (result.pattern() - model).abs()
        magnitude = torch.ones((), dtype=torch.float64, device=device)
    else:
        zero = torch.zeros((), dtype=torch.float64, device=device)
        return PendingCheck(inputs, result.heads, zero, zero + float("inf"))
    error = diff.amax().to(torch.float64) if diff.numel() else torch.zeros(
        (), dtype=torch.float64, device=device)
    atol = model_tolerance(result.model_dtype, result.terms.dtype)
    return PendingCheck(inputs, result.heads, error, magnitude * atol)


def read_checks(pending: Sequence[PendingCheck]) -> None:
    """Read every pending check at once (one device-to-host copy) and raise
    :class:`DecompositionMismatchError` for the first layer that fails, with
    :meth:`FrequencyLogits.check`'s message (that layer's check is run again in full)."""
    if not pending:
        return
    values = torch.stack([torch.stack([p.error, p.allowed.to(p.error.device)])
                          for p in pending]).cpu()
    for check, (error, allowed) in zip(pending, values.tolist()):
        if not error <= allowed:
            decompose_inputs(check.inputs, check.heads).check()
            raise DecompositionMismatchError(  # the full check agreed to within rounding
                f"layer {check.inputs.layer}: the per-frequency terms miss the model's scores "
                f"by {error:.3g} (tolerance {allowed:.3g}); report the family")


def frequency_logits(
    model: HookedModel | Resolved,
    input: ModelInput,
    layer: int,
    *,
    heads: int | Sequence[int] | None = None,
    query_positions: int | Sequence[int] | Tensor | None = -1,
    relative: bool = False,
    check: bool = True,
    dtype: torch.dtype | None = None,
) -> FrequencyLogits:
    """Per-frequency attention-logit terms of one layer.

    Args:
        model: a bridge from :func:`lens_possym.load_model`, :func:`~lens_possym.from_hf`,
            :func:`~lens_possym.tiny_model`, ...
        input: a prompt, prompts of equal token length, tokens ``[batch, pos]``, or a
            ``transformer_lens.ActivationCache`` of the run (see
            :func:`~lens_possym.capture.capture_attention_inputs` for the hooks it needs).
        layer: the layer (negative counts from the end).
        heads: query heads (all by default).
        query_positions: query rows; the last token by default (memory O(n·freq)),
            ``None`` for all rows (O(n²·freq)).
        relative: also return the relative cos/sin form.
        check: raise :class:`~lens_possym.errors.DecompositionMismatchError` if the terms
            do not add up to the model's own scores on this pass.
        dtype: computation dtype (default: the model's, at least float32).

    Returns:
        :class:`FrequencyLogits` with ``terms`` of shape
        ``[batch, head_index, query_pos, key_pos, freq]``.

    Example::

        model = lens_possym.load_model("gemma-3-270m")
        fl = lens_possym.frequency_logits(model, "The capital of France is", layer=5)
        fl.terms.shape          # [1, 4, 1, 6, 128]
        fl.max_abs_error        # ~1e-6: the terms add up to the model's scores
    """
    resolved = resolve(model)
    layer = as_layer(layer, len(resolved.specs))
    return frequency_logits_all(
        resolved, input, [layer], heads=heads, query_positions=query_positions,
        relative=relative, check=check, dtype=dtype,
    )[layer]


def frequency_logits_all(
    model: HookedModel | Resolved,
    input: ModelInput,
    layers: int | Sequence[int] | None = None,
    *,
    heads: int | Sequence[int] | None = None,
    query_positions: int | Sequence[int] | Tensor | None = -1,
    relative: bool = False,
    check: bool = True,
    dtype: torch.dtype | None = None,
) -> dict[int, FrequencyLogits]:
    """:func:`frequency_logits` for several layers (all by default) from one forward pass."""
    captured = capture_attention_inputs(model, input, layers, query_positions=query_positions)
    out = {}
    for layer, inputs in captured.items():
        result = decompose_inputs(inputs, heads, relative=relative, dtype=dtype)
        if check:
            result.check()
        out[layer] = result
    return out


@dataclass(repr=False)
class FrequencyNorms(ResultIO):
    """Per-frequency query and key norms ("frequency usage", Barbero et al. 2024).

    Attributes:
        q: ``[n_layers, n_heads, n_freqs]`` mean over batch and positions of the 2-norm of
            each query pair (the tail's norm as the last id).
        k: ``[n_layers, n_heads, n_freqs]`` the same for keys, per *query* head (GQA:
            a KV head's norms repeated for each query head reading it).
        angles: ``[n_layers, n_freqs]`` float64 angles per layer.
        layers: the layer indices along the first axis.
        q_tokens, k_tokens: per-token norms ``[n_layers, batch, pos, n_heads, n_freqs]``
            if requested, else ``None``.
    """

    q: Float[Tensor, "layer head_index freq"]
    k: Float[Tensor, "layer head_index freq"]
    angles: Float[Tensor, "layer freq"]
    layers: list[int]
    q_tokens: Tensor | None = None
    k_tokens: Tensor | None = None

    FORMAT = "lens-possym/frequency-norms@1"

    def _table(self):
        """Long format: ``score`` = ``"q_norm"``/``"k_norm"``, one row per layer, head and
        frequency (per-token norms are not tabulated; they stay in ``q_tokens``)."""
        return head_frame({"q_norm": self.q, "k_norm": self.k}, self.angles, layers=self.layers)

    def to_dict(self) -> dict[str, Any]:
        return {"q": self.q, "k": self.k, "angles": self.angles, "layers": list(self.layers),
                "q_tokens": self.q_tokens, "k_tokens": self.k_tokens}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "FrequencyNorms":
        return cls(q=data["q"], k=data["k"], angles=data["angles"], layers=list(data["layers"]),
                   q_tokens=data.get("q_tokens"), k_tokens=data.get("k_tokens"))

    def summary(self) -> dict[str, Any]:
        """The layers, the number of frequency ids, and the ids with the largest mean share
        of the query's and the key's norm."""
        def top(t: Tensor) -> int:
            return int((t / t.sum(-1, keepdim=True)).nanmean(dim=(0, 1)).argmax())

        return {"layers": list(self.layers), "n_freqs": int(self.q.shape[-1]),
                "top_q_freq": top(self.q), "top_k_freq": top(self.k)}

    def _headline(self) -> list[str]:
        share = self.q / self.q.sum(-1, keepdim=True)
        return [f"top_q_freq={int(share.mean(dim=(0, 1)).argmax())}"]


def _float(value: Any) -> float:
    return float("nan") if value is None else float(value)


def _pair_norms(x: Tensor, spec: RopeSpec) -> Tensor:
    pairs, tail = to_pairs(x.float(), spec)
    norms = pairs.norm(dim=-1)
    if spec.has_tail:
        norms = torch.cat([norms, tail.norm(dim=-1, keepdim=True)], dim=-1)
    return norms


def frequency_norms(
    model: HookedModel | Resolved,
    input: ModelInput,
    layers: int | Sequence[int] | None = None,
    *,
    per_token: bool = False,
) -> FrequencyNorms:
    """Per-frequency q/k norms of every head, from one forward pass (or from an
    activation cache holding each layer's q/k hooks, as for :func:`frequency_logits`).

    Rotation preserves each pair's norm, so these are read from the un-rotated q and k.
    """
    captured = capture_attention_inputs(model, input, layers, query_positions=None,
                                        model_scores=False)
    chosen = list(captured)
    n_freqs = {captured[layer].spec.n_freqs for layer in chosen}
    if len(n_freqs) != 1:
        raise InvalidSelectionError(
            f"layers {chosen} have different numbers of frequency ids ({sorted(n_freqs)}: "
            "partial rotary or NoPE layers differ); ask for them separately"
        )
    q_tok, k_tok, angles = [], [], []
    for layer in chosen:
        inputs = captured[layer]
        q_tok.append(_pair_norms(inputs.q, inputs.spec))
        k_tok.append(_pair_norms(inputs.k_for_heads(), inputs.spec))
        angles.append(inputs.spec.angles)
    q_all, k_all = torch.stack(q_tok), torch.stack(k_tok)
    return FrequencyNorms(
        q=q_all.mean(dim=(1, 2)),
        k=k_all.mean(dim=(1, 2)),
        angles=torch.stack(angles),
        layers=chosen,
        q_tokens=q_all if per_token else None,
        k_tokens=k_all if per_token else None,
    )
