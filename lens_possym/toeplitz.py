r"""Toeplitz decompositions of attention logits (paper B): content and position terms.

**Additive schemes.** Where a layer's input splits as :math:`x = c + p` and the head is
affine in it (:math:`q = W_Q x + b_Q`, likewise :math:`k`), the logit of query :math:`n` on
key :math:`m` splits into

.. math::

    s\,q_n\cdot k_m + B_{nm} = \underbrace{s\,q^c_n\cdot k^c_m}_{cc}
      + \underbrace{s\,q^c_n\cdot k^p_m}_{cp} + \underbrace{s\,q^p_n\cdot k^c_m}_{pc}
      + \underbrace{s\,q^p_n\cdot k^p_m}_{pp} + \underbrace{\dots}_{bias}

with :math:`B` the additive Toeplitz bias of the scheme (ALiBi, T5, table) and *bias* every
term holding :math:`b_Q`, :math:`b_K` or a layer norm's shift. At the first layer of an
absolute-PE model, :math:`x = c + p` exactly (token plus position embedding); the layer
norm in front is not linear, but it is affine once its row statistics are fixed:

.. math::

    \mathrm{LN}(c + p) = \gamma\odot\frac{c - \bar c}{\sigma}
                      + \gamma\odot\frac{p - \bar p}{\sigma} + \beta,
    \qquad \sigma = \sqrt{\mathrm{Var}(c + p) + \epsilon},

so with each row's own :math:`\sigma` (which depends on both parts) the split is exact:
:func:`toeplitz_terms` computes it and checks that the terms add up to the model's
scores. Deeper layers have no such split (the residual stream mixes content and position
non-linearly); there the swap scores at the ``"input"`` site are the tool
(:mod:`lens_possym.scores.sources`), and :func:`toeplitz_terms` refuses with that advice.

**RoPE** is multiplicative: with pairs as complex numbers, frequency :math:`f`'s term is

.. math::

    \lambda^{(f)}_{nm} = s\,\mathrm{Re}\big[\,q_{n,f}\,\overline{k_{m,f}}\;e^{i(n-m)\theta_f}\big],

a content product times the Toeplitz kernel :math:`e^{i(n-m)\theta_f}` (a Hadamard
product, per frequency); :func:`rope_hadamard_terms` computes it in that form, and it equals
:func:`lens_possym.decompose.decompose_inputs` (the relative form ``cos·X + sin·Y`` is its
real and imaginary part).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import torch
from einops import einsum
from jaxtyping import Bool, Float
from torch import Tensor

from ._attention import visible_mask
from ._inputs import ModelInput, as_heads, as_layers, as_tokens
from .capture import capture_attention_inputs, run_capturing
from .errors import DecompositionMismatchError, InvalidSelectionError, UnsupportedModelError
from .positions.base import PositionalScheme
from .positions.detect import LayerScheme
from .positions._bridge import keys_for_heads
from .positions.mla import mla_parts
from .resolved import Resolved, resolve
from .results_io import ResultIO, head_frame
from .rope import to_pairs
from .typing import HookedModel

__all__ = ["ToeplitzTerms", "toeplitz_terms", "LayerSplit", "rope_hadamard_terms",
           "TermMagnitudes", "toeplitz_magnitudes", "TOLERANCE"]

#: largest |sum of terms − model scores| accepted, relative to the scores' scale
TOLERANCE = 1e-6


@dataclass(repr=False)
class ToeplitzTerms(ResultIO):
    """A layer's logits split into named terms, each ``[batch, head_index, query_pos, key_pos]``.

    Attributes:
        layer, heads: where they come from.
        scheme: the layer's scheme name.
        terms: ``{"cc", "cp", "pc", "pp", "bias"}`` (absolute, layer 0), ``{"content",
            "bias"}`` (additive biases), ``{"content"}`` (NoPE), ``{"f0", "f1", ...}`` (RoPE),
            ``{"f0", ..., "content"}`` (MLA: its RoPE pairs and its content part).
        mask: ``[query_pos, key_pos]`` keys each query may attend to.
        max_abs_error: largest ``|Σ terms − model scores|`` over visible entries.
    """

    layer: int
    heads: list[int]
    scheme: str
    terms: dict[str, Float[Tensor, "batch head_index query_pos key_pos"]]
    mask: Bool[Tensor, "query_pos key_pos"]
    max_abs_error: float = float("nan")

    FORMAT = "lens-possym/toeplitz-terms@1"

    def summary(self) -> dict[str, Any]:
        """Where the terms come from, their names, each one's mean ``|term|`` over the heads
        (:meth:`magnitudes`) and the check against the model."""
        return {"layer": self.layer, "heads": list(self.heads), "scheme": self.scheme,
                "magnitudes": {k: float(v.double().mean()) for k, v in self.magnitudes().items()},
                "max_abs_error": self.max_abs_error}

    def _table(self):
        """Long format, one row per visible entry and term: ``batch``, ``head``,
        ``query_pos``, ``key_pos``, ``score`` (the term) and ``value``."""
        mask = self.mask.to(next(iter(self.terms.values())).device)
        visible = {name: t.masked_fill(~mask, float("nan")) for name, t in self.terms.items()}
        frame = head_frame(visible, None, heads=self.heads,
                           dims=("batch", "head", "query_pos", "key_pos"), layer=self.layer)
        return frame.drop(columns=["frequency", "angle"])

    def total(self) -> Float[Tensor, "batch head_index query_pos key_pos"]:
        return sum(self.terms.values())

    def magnitudes(self) -> dict[str, Float[Tensor, "head_index"]]:
        """Mean ``|term|`` over prompts and visible (query, key) entries, per head."""
        first = next(iter(self.terms.values()))
        mask = self.mask.to(first.device, first.dtype)
        return {name: (t.abs() * mask).sum((-1, -2)).mean(0) / mask.sum()
                for name, t in self.terms.items()}


def _logits(q: Float[Tensor, "batch query_pos head_index d_head"],
            k: Float[Tensor, "batch key_pos head_index d_head"]
            ) -> Float[Tensor, "batch head_index query_pos key_pos"]:
    """``⟨q_n, k_m⟩`` for every query row ``n`` and key row ``m`` (unscaled)."""
    return einsum(q, k, "batch query_pos head_index d_head, batch key_pos head_index d_head"
                  " -> batch head_index query_pos key_pos")


def _ln_and_projections(model: HookedModel, layer: int):
    """``(ln, q_affine, k_affine)`` of an absolute-PE family's attention at ``layer``."""
    hf = model.original_model
    kind = hf.config.model_type
    if kind == "gpt2":
        block = hf.transformer.h[layer]
        d = hf.config.n_embd
        return block.ln_1, (lambda x: block.attn.c_attn(x)[..., :d]), \
            (lambda x: block.attn.c_attn(x)[..., d:2 * d])
    if kind == "gpt_neo":
        block = hf.transformer.h[layer]
        # the bridge puts its attention wrapper where GPTNeoAttention was; the projections
        # live on the wrapped GPTNeoSelfAttention
        attention = getattr(block.attn, "_original_component", None) or block.attn.attention
        return block.ln_1, attention.q_proj, attention.k_proj
    if kind == "opt":
        block = hf.model.decoder.layers[layer]
        config = hf.config
        if not config.do_layer_norm_before or config.word_embed_proj_dim != config.hidden_size:
            raise UnsupportedModelError(
                "the Toeplitz split needs OPT with the layer norm before attention and no "
                "input projection (OPT-350m has neither)")
        return block.self_attn_layer_norm, block.self_attn.q_proj, block.self_attn.k_proj
    raise UnsupportedModelError(f"no Toeplitz split for the absolute-PE family {kind!r}")


def _absolute_terms(model: HookedModel, tokens: Tensor, ls: LayerScheme, heads: list[int]):
    if ls.layer != 0:
        raise InvalidSelectionError(
            f"an absolute-PE model's logits split into content and position terms only at "
            f"layer 0, where the input is token plus position embedding; layer {ls.layer}'s "
            f"input mixes them. Use swap scores at the 'input' site there")
    names = ["hook_embed", "hook_pos_embed", "blocks.0.hook_resid_pre"]
    got = run_capturing(model, tokens, names)
    content, position = got["hook_embed"], got["hook_pos_embed"]
    x = got["blocks.0.hook_resid_pre"]
    if (x - content - position).abs().max() > 1e-6 * x.abs().max():
        raise UnsupportedModelError("the first layer's input is not token + position embedding")
    ln, q_aff, k_aff = _ln_and_projections(model, 0)
    sigma = torch.sqrt(x.var(-1, unbiased=False, keepdim=True) + ln.eps)
    centred = lambda t: (t - t.mean(-1, keepdim=True)) / sigma * ln.weight  # noqa: E731
    zero = torch.zeros_like(x[..., :1, :])
    parts = {"c": centred(content), "p": centred(position)}
    h, d = ls.n_heads, ls.d_head

    def split(affine, part):  # W·part (the affine map minus its offset), [b, pos, h, d]
        return (affine(part) - affine(zero)).unflatten(-1, (h, d))[:, :, heads]

    q = {n: split(q_aff, t) for n, t in parts.items()}
    k = {n: split(k_aff, t) for n, t in parts.items()}
    q["b"] = (q_aff(zero + ln.bias)).unflatten(-1, (h, d))[:, :, heads].expand_as(q["c"])
    k["b"] = (k_aff(zero + ln.bias)).unflatten(-1, (h, d))[:, :, heads].expand_as(k["c"])
    dot = lambda a, b: _logits(a, b) * ls.scheme.scale  # noqa: E731
    terms = {"cc": dot(q["c"], k["c"]), "cp": dot(q["c"], k["p"]), "pc": dot(q["p"], k["c"]),
             "pp": dot(q["p"], k["p"]),
             "bias": dot(q["b"], k["c"] + k["p"] + k["b"]) + dot(q["c"] + q["p"], k["b"])}
    return terms


def _mla_terms(model: HookedModel, tokens: Tensor, ls: LayerScheme, heads: list[int]):
    """MLA's per-frequency terms of every query row (the diagonals of ``C_f`` per row)."""
    got = run_capturing(model, tokens, [ls.q_hook, ls.k_hook])
    q, k = got[ls.q_hook][:, heads], got[ls.k_hook][:, heads]
    rows = []
    for n in range(tokens.shape[1]):
        parts = mla_parts(q, k, ls.d_content, ls.scheme, n)
        c_f = ls.scheme.frequency_cross_logits(*parts, n)                 # [b, h, f, p, c]
        rows.append(torch.diagonal(c_f, dim1=-2, dim2=-1).nan_to_num(0.0, neginf=0.0))
    terms = torch.stack(rows, dim=-2)                                     # [b, h, f, n, m]
    names = [f"f{f}" for f in range(terms.shape[2] - 1)] + ["content"]
    return {name: terms[:, :, i] for i, name in enumerate(names)}


def toeplitz_terms(model: HookedModel | Resolved, input: ModelInput, layer: int = 0,
                   heads: int | Sequence[int] | None = None, *, check: bool = True
                   ) -> ToeplitzTerms:
    """Split ``layer``'s logits (all query rows) into content and position terms.

    Absolute-PE models: layer 0 only (module docstring). Additive biases: ``content`` (``s
    q·k``) plus the Toeplitz ``bias``. NoPE: ``content``. RoPE: one term per frequency id
    (the Hadamard form, :func:`rope_hadamard_terms`).

    Raises:
        DecompositionMismatchError: ``check`` and the terms do not add up to the model's
            scores (or, where the family has no pre-softmax hook, pattern).
    """
    resolved = resolve(model)
    tokens = as_tokens(resolved.model, input)
    layers = resolved.schemes
    if not -len(layers) <= layer < len(layers):
        raise InvalidSelectionError(
            f"layer {layer} out of range: the model has {len(layers)} layers")
    ls = layers[layer]
    split = LayerSplit(resolved, tokens, ls, as_heads(heads, ls.n_heads, ls.layer), check)
    return ls.scheme.split_logits(split)


class LayerSplit:
    """One layer's logits to split, for chosen heads: what a scheme's
    :meth:`~lens_possym.positions.PositionalScheme.split_logits` asks for. Each scheme
    names the split it has (``scheme.split_logits(split)`` calls one method below, with
    itself); the split runs the model for what that form needs, builds the terms and,
    with ``check``, holds their sum to the model's scores (or pattern).

    Attributes:
        resolved, tokens: the model and the prompts ``[batch, pos]``.
        ls: the layer's :class:`~lens_possym.positions.LayerScheme`.
        heads: the heads to split.
        check: whether to check the terms against the model.
    """

    def __init__(self, resolved: Resolved, tokens: Tensor, ls: LayerScheme, heads: list[int],
                 check: bool = True) -> None:
        self.resolved, self.tokens, self.ls, self.heads = resolved, tokens, ls, heads
        self.check = check

    def rope(self, scheme: PositionalScheme) -> "ToeplitzTerms":
        """RoPE: one term per frequency id, the Hadamard form (:func:`rope_hadamard_terms`),
        checked against the scores captured in the same pass."""
        ls, heads = self.ls, self.heads
        inputs = capture_attention_inputs(self.resolved, self.tokens, ls.layer,
                                          query_positions=None)[ls.layer]
        per_freq = rope_hadamard_terms(inputs, heads)
        terms = {f"f{f}": per_freq[..., f] for f in range(per_freq.shape[-1])}
        result = ToeplitzTerms(ls.layer, heads, scheme.name, terms, inputs.mask().cpu())
        if self.check and inputs.model_scores is not None:
            _check(result, inputs.model_scores[:, heads], None)
        return result

    def mla(self, scheme: PositionalScheme) -> "ToeplitzTerms":
        """MLA: its RoPE pairs' terms, then its content part (:func:`_mla_terms`)."""
        return self._checked(scheme, _mla_terms(self.resolved.model, self.tokens, self.ls,
                                                self.heads))

    def absolute(self, scheme: PositionalScheme) -> "ToeplitzTerms":
        """Position added at the input: ``cc``, ``cp``, ``pc``, ``pp`` and ``bias``, at
        layer 0 only (module docstring)."""
        with torch.no_grad():
            terms = _absolute_terms(self.resolved.model, self.tokens, self.ls, self.heads)
        return self._checked(scheme, terms)

    def additive(self, scheme: PositionalScheme) -> "ToeplitzTerms":
        """``content`` (``s q·k``) plus, where the scheme has one, its Toeplitz ``bias``
        (NoPE has none)."""
        ls, heads = self.ls, self.heads
        got = run_capturing(self.resolved.model, self.tokens, [ls.q_hook, ls.k_hook])
        q = got[ls.q_hook][:, :, heads]
        k = keys_for_heads(got[ls.k_hook], heads, ls.n_heads)
        terms = {"content": _logits(q, k) * scheme.scale}
        positions = torch.arange(self.tokens.shape[1])
        bias = scheme.bias(positions, positions)
        if bias is not None:
            terms["bias"] = bias[heads][None].to(q)
        return self._checked(scheme, terms)

    def unsupported(self, scheme: PositionalScheme) -> "ToeplitzTerms":
        """A scheme with no split read from a model yet."""
        raise UnsupportedModelError(
            f"no Toeplitz split of a {scheme.name} layer read from a model yet")

    def _checked(self, scheme: PositionalScheme, terms: dict[str, Tensor]) -> "ToeplitzTerms":
        """The terms as a result with the causal (window) mask, checked against the model's
        scores where the family has a pre-softmax hook, its pattern otherwise."""
        ls = self.ls
        positions = torch.arange(self.tokens.shape[1])
        mask = visible_mask(positions, positions, scheme.window)
        result = ToeplitzTerms(ls.layer, self.heads, scheme.name, terms, mask)
        if self.check:
            names = [ls.scores_hook or ls.pattern_hook]
            got = run_capturing(self.resolved.model, self.tokens, names)[names[0]][:, self.heads]
            _check(result, None if ls.scores_hook is None else got,
                   got if ls.scores_hook is None else None)
        return result


def _check(result: ToeplitzTerms, scores: Tensor | None, pattern: Tensor | None) -> None:
    total = result.total()
    mask = result.mask.to(total.device)
    if scores is not None:
        error = ((total - scores.to(total)).abs() * mask).max().item()
        scale = scores.masked_select(mask.expand_as(scores)).abs().max().item()
    else:
        implied = torch.softmax(total.masked_fill(~mask, float("-inf")), -1)
        error = (implied - pattern.to(total)).abs().max().item()
        scale = 1.0
    result.max_abs_error = error
    if error > TOLERANCE * max(scale, 1.0):
        raise DecompositionMismatchError(
            f"the {result.scheme} terms of layer {result.layer} miss the model's "
            f"{'scores' if scores is not None else 'pattern'} by {error:.3g}; the scheme read "
            f"from this model is wrong (report the family)")


def rope_hadamard_terms(inputs: Any, heads: list[int], dtype: torch.dtype = torch.float64
                        ) -> Float[Tensor, "batch head_index query_pos key_pos freq"]:
    r"""RoPE's per-frequency terms as ``s·Re[q_f conj(k_f) ⊙ e^{i(n−m)θ_f}]``.

    ``inputs``: :class:`~lens_possym.capture.AttentionInputs` (any query rows). The kernel
    is built from the spec's angles in ``dtype`` (the model's float32 tables agree to
    rounding). The tail of a partial-rotary head is the last id, with kernel 1.
    """

    spec = inputs.spec
    q = inputs.q[:, :, heads].to(dtype)
    k = inputs.k_for_heads(heads).to(dtype)
    q_pairs, q_tail = to_pairs(q, spec)
    k_pairs, k_tail = to_pairs(k, spec)
    zq = torch.complex(q_pairs[..., 0], q_pairs[..., 1])               # [b, n, h, F]
    zk = torch.complex(k_pairs[..., 0], k_pairs[..., 1])               # [b, m, h, F]
    content = einsum(zq, zk.conj(), "batch query_pos head_index freq, "
                     "batch key_pos head_index freq -> batch head_index query_pos key_pos freq")
    theta = spec.inv_freq.to(dtype)
    offset = (inputs.query_positions[:, None] - inputs.key_positions[None, :]).to(dtype)
    kernel = torch.polar(torch.ones_like(offset)[..., None] * spec.attention_scaling ** 2,
                         offset[..., None] * theta)                    # [n, m, F]
    terms = (content * kernel.to(content.device)).real * spec.scale
    if spec.has_tail:
        tail = _logits(q_tail, k_tail) * spec.scale
        terms = torch.cat([terms, tail[..., None]], dim=-1)
    return terms


@dataclass(repr=False)
class TermMagnitudes(ResultIO):
    """Mean ``|term|`` per layer and head: ``values[n_layers, n_heads, n_terms]`` (``nan`` where
    a layer has no split, e.g. an absolute-PE model past layer 0); ``names`` the terms."""

    values: Float[Tensor, "n_layers n_heads n_terms"]
    names: list[str]
    scheme: str

    FORMAT = "lens-possym/term-magnitudes@1"

    def summary(self) -> dict[str, Any]:
        """The scheme and each term's mean ``|term|`` over the layers and heads it has."""
        return {"scheme": self.scheme,
                **{name: float(self.values[..., t].double().nanmean())
                   for t, name in enumerate(self.names)}}

    def _table(self):
        """Long format: ``layer``, ``head``, ``score`` (the term) and ``value``."""
        frame = head_frame({name: self.values[..., t] for t, name in enumerate(self.names)},
                           None)
        return frame.drop(columns=["frequency", "angle"])


def toeplitz_magnitudes(model: HookedModel | Resolved, input: ModelInput,
                        layers: int | Sequence[int] | None = None) -> TermMagnitudes:
    """:meth:`ToeplitzTerms.magnitudes` of every layer that has a split, in one tensor.

    Absolute-PE models split at layer 0 only; the other layers are left ``nan`` (asking
    for them explicitly raises, as :func:`toeplitz_terms` does).
    """

    resolved = resolve(model)
    layer_schemes = resolved.schemes
    asked = layers is not None
    chosen = as_layers(layers, len(layer_schemes))
    found: dict[int, dict[str, Tensor]] = {}
    for layer in chosen:
        # position added at the input splits at layer 0 only
        if layer_schemes[layer].scheme.site == "input" and layer > 0 and not asked:
            continue
        found[layer] = toeplitz_terms(resolved, input, layer).magnitudes()
    names = list(dict.fromkeys(name for terms in found.values() for name in terms))
    n_heads = max(ls.n_heads for ls in layer_schemes)
    values = torch.full((len(layer_schemes), n_heads, len(names)), float("nan"),
                        dtype=torch.float64)
    for layer, terms in found.items():
        for t, name in enumerate(names):
            if name in terms:
                values[layer, : len(terms[name]), t] = terms[name].detach().double().cpu()
    return TermMagnitudes(values, names, layer_schemes[chosen[0]].scheme.name)
