r"""Frequency ablation and gating: take RoPE frequencies away from chosen heads.

Notation as in :mod:`lens_possym.decompose`: the score of query head ``h`` at query
position ``n`` for the key at ``j`` is a sum of one term per frequency id ``f``,

.. math::

    \lambda_f(n, j) = s\,\langle R(n\theta_f)\,q_f(n),\; R(j\theta_f)\,k_f(j)\rangle,

with ``q_f``, ``k_f`` pair ``f`` of the *un-rotated* query and key (after any q/k-norm). Each
mode edits those pairs where lens-possym reads them (``spec.q_hook``/``spec.k_hook``), and
the model's own RoPE then runs as usual:

``zero`` (query side by default)
    ``q_f ← 0``: the term ``λ_f`` is removed from the head's scores, exactly (it is linear
    in ``q_f``). Only the query of the chosen head changes, so GQA neighbours are untouched.
``mean`` (query side by default)
    ``q_f ← E_ref[q_f]``, the mean over a reference set of prompts (pooled over prompts and
    positions ``1..``, or per position with ``per_position=True``). Because ``λ_f`` is
    linear in ``q_f``, this replaces the term by its mean over reference query contents,
    keeping the real keys: the head keeps frequency ``f``'s average use but loses its
    content-dependence on the query side.
``unrotate`` (query *and* key)
    ``q_f(n) ← R(-nθ_f) q_f(n)`` and ``k_f(j) ← R(-jθ_f) k_f(j)``, so that after the model's
    rotation both sit at angle 0 and ``λ_f = s⟨q_f, k_f⟩`` no longer depends on positions:
    the p-RoPE idea of Barbero et al. (2024) applied to chosen pairs of chosen heads. The
    inverse rotation uses the model's own float32 angle tables (without any YaRN-style
    ``attention_scaling``, which the model's rotation then applies as usual), so the model's
    rotation undoes it up to rounding (``cos² + sin² = 1`` in float32): the scores agree
    with a direct angle-0 computation to about 1e-6 relative. Unrotating every id makes
    the head a NoPE head, exactly symbolic. Keys are needed too (``q·R((j-n)θ)k`` has a
    key-dependent phase no query edit can cancel); see GQA below.

``side="k"`` or ``"qk"`` applies ``zero``/``mean`` to keys as well.

**GQA.** Query edits are per query head. A key edit for query head ``h`` is applied to the
shared key of its KV group only when every query head of the group asks for the same
edit; otherwise the heads that ask are recomputed with their own edited keys and written
into ``hook_z``, and the rest of the group is untouched bit for bit (see
:mod:`lens_possym.interventions.engine`, which also checks that recomputation against
the model on every pass).

A **gate** (:class:`FrequencyGate`) multiplies each pair of the query by a per-head,
per-frequency value, fixed or learnable: ``λ_f`` is multiplied by the gate, exactly.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Iterator, Literal, Mapping, Sequence

import torch
from jaxtyping import Float
from torch import Tensor, nn

from .._inputs import ModelInput, as_layers
from ..capture import capture_attention_inputs
from ..errors import InvalidSelectionError
from ..resolved import Resolved, resolve
from ..rope import RopeSpec
from ..typing import FwdHooks, HookedModel, HookFn
from .edits import replace_edit, unrotate_edit, zero_edit
from .engine import PairEdit, bphd, compile_selection, edit_hook
from .modes import AblationMode, Side, check_mode, check_side, resolve_side
from .selection import FreqsLike, Selection, parse_freqs, parse_selection

__all__ = [
    "FrequencyMeans",
    "frequency_means",
    "means_for",
    "ablate_frequencies_hook",
    "ablate_frequencies_hooks",
    "ablate_frequencies",
    "FrequencyGate",
    "FrequencyGates",
]

# ---- reference means ----------------------------------------------------------------------


@dataclass
class FrequencyMeans:
    """Mean un-rotated queries and keys over a reference set, per layer.

    Attributes:
        q: ``{layer: [1, pos|1, head_index, d_head]}`` mean query (query heads).
        k: ``{layer: [1, pos|1, kv_head, d_head]}`` mean key (KV heads).
        per_position: whether means are kept per position (else pooled over positions
            ``1..pos-1`` of every prompt: position 0, usually BOS, is an attention sink
            whose q and k are outliers).
        n_prompts: size of the reference set.
    """

    q: dict[int, Float[Tensor, "1 pos head_index d_head"]]
    k: dict[int, Float[Tensor, "1 pos kv_head d_head"]]
    per_position: bool
    n_prompts: int
    layers: list[int] = field(default_factory=list)
    model_name: str = ""

    def __post_init__(self) -> None:
        if set(self.q) != set(self.k):
            raise InvalidSelectionError("FrequencyMeans needs q and k means for the same layers")
        self.layers = sorted(self.q)

    def check_model(self, model: HookedModel, specs: Sequence[RopeSpec]) -> None:
        """Refuse means taken on another model: another name, or shapes that do not fit
        ``specs`` (means of another model would replace the pairs with foreign values)."""
        name = str(getattr(getattr(model, "cfg", None), "model_name", "") or "")
        if self.model_name and name and self.model_name != name:
            raise InvalidSelectionError(
                f"these reference means were taken on {self.model_name!r}, not on {name!r}; "
                "compute them on this model: frequency_means(model, reference)")
        for layer in self.layers:
            if not 0 <= layer < len(specs):
                raise InvalidSelectionError(
                    f"the reference means cover layer {layer}, which this model "
                    f"({len(specs)} layers) does not have; compute them on this model")
            self.check_layer(specs[layer])

    def check_layer(self, spec: RopeSpec) -> None:
        """Refuse this layer's means unless their shapes fit ``spec``."""
        layer = spec.layer
        self.require([layer])
        q, k = self.q[layer], self.k[layer]
        if (q.ndim != 4 or k.ndim != 4 or tuple(q.shape[2:]) != (spec.n_heads, spec.d_head)
                or tuple(k.shape[2:]) != (spec.n_kv_heads, spec.d_head)):
            raise InvalidSelectionError(
                f"the reference means of layer {layer} have shapes {tuple(q.shape)} / "
                f"{tuple(k.shape)}, but the layer has {spec.n_heads} query and "
                f"{spec.n_kv_heads} KV heads of width {spec.d_head}: they were taken on "
                "another model; compute them on this model")

    def require(self, layers: Sequence[int]) -> None:
        missing = sorted(set(layers) - set(self.q))
        if missing:
            raise InvalidSelectionError(
                f"the reference means do not cover layers {missing} (they cover {self.layers}); "
                "compute them with frequency_means(model, reference, layers=...)"
            )


def frequency_means(model: HookedModel | Resolved, reference: ModelInput | Mapping[str, Tensor],
                    layers: int | Sequence[int] | None = None, *, per_position: bool = False
                    ) -> FrequencyMeans:
    """Mean un-rotated q and k of each layer over ``reference`` (for ``mode="mean"``).

    Args:
        reference: prompts or tokens ``[batch, pos]`` (one forward pass, stopped after the
            last layer needed), or an activation cache holding each layer's
            ``spec.q_hook`` and ``spec.k_hook``.
        per_position: keep one mean per position (a run may then be at most as long as
            the reference); by default means are pooled over prompts and positions 1..
    """
    resolved = resolve(model)
    model = resolved.model
    specs = resolved.specs
    chosen = as_layers(layers, len(specs))
    qs: dict[int, Tensor] = {}
    ks: dict[int, Tensor] = {}
    if isinstance(reference, Mapping) or (hasattr(reference, "keys") and not isinstance(reference, Tensor)):
        for layer in chosen:
            spec = specs[layer]
            try:
                qs[layer] = bphd(reference[spec.q_hook], spec)
                ks[layer] = bphd(reference[spec.k_hook], spec)
            except KeyError as exc:
                raise InvalidSelectionError(
                    f"the reference cache lacks {exc}; cache {spec.q_hook} and {spec.k_hook}, "
                    "or pass the reference prompts"
                ) from None
    else:
        captured = capture_attention_inputs(resolved, reference, chosen, query_positions=None,
                                            model_scores=False)
        for layer in chosen:
            qs[layer], ks[layer] = captured[layer].q, captured[layer].k
    n_prompts = next(iter(qs.values())).shape[0]
    q_means, k_means = {}, {}
    for layer in chosen:
        q, k = qs[layer].detach(), ks[layer].detach()
        if per_position:
            q_means[layer], k_means[layer] = q.mean(0, keepdim=True), k.mean(0, keepdim=True)
        else:
            if q.shape[1] < 2:
                raise InvalidSelectionError(
                    "pooled means skip position 0, so the reference needs at least 2 tokens"
                )
            q_means[layer] = q[:, 1:].mean((0, 1), keepdim=True)
            k_means[layer] = k[:, 1:].mean((0, 1), keepdim=True)
    return FrequencyMeans(q=q_means, k=k_means, per_position=per_position, n_prompts=n_prompts,
                          model_name=str(getattr(getattr(model, "cfg", None), "model_name", "")
                                         or ""))


def means_for(modes: Sequence[str], resolved: Resolved, layers: Sequence[int], *,
              means: FrequencyMeans | None, reference: Any, per_position: bool = False
              ) -> FrequencyMeans | None:
    """The reference means ``modes`` need: ``means`` if given, else taken over ``reference``.

    ``None`` when no mode is ``"mean"``.

    Raises:
        InvalidSelectionError: ``"mean"`` among ``modes`` with neither means nor a reference.
    """
    if "mean" not in modes:
        return means
    if means is not None:
        if not isinstance(means, FrequencyMeans):
            raise InvalidSelectionError(
                f"means must be a FrequencyMeans (frequency_means(model, reference)), got "
                f"{type(means).__name__}")
        means.check_model(resolved.model, resolved.specs)
        return means
    if reference is None:
        raise InvalidSelectionError(
            "mode='mean' needs reference=<prompts or tokens> to take the means over (or "
            "means=frequency_means(model, reference))"
        )
    return frequency_means(resolved, reference, list(layers), per_position=per_position)


# ---- hook factories -----------------------------------------------------------------------


def _edit_for(mode: str, spec: RopeSpec, freqs: Sequence[int], side: str,
              means: FrequencyMeans | None) -> PairEdit:
    if mode == "zero":
        return zero_edit(spec, freqs)
    if mode == "unrotate":
        return unrotate_edit(spec, freqs)
    if means is None:
        raise InvalidSelectionError(
            "mode='mean' needs a reference: pass reference=<prompts or tokens> (or "
            "means=frequency_means(model, reference))"
        )
    means.check_layer(spec)
    table = (means.q if side == "q" else means.k)[spec.layer]
    return replace_edit(spec, freqs, table, "mean")


def ablate_frequencies_hook(spec: RopeSpec, heads: int | Sequence[int], freqs: FreqsLike,
                            mode: AblationMode = "zero", *, side: Literal["q", "k"] = "q",
                            means: FrequencyMeans | None = None) -> HookFn:
    """One hook function that ablates ``freqs`` of ``heads`` at one layer.

    The low-level building block: attach it at ``spec.q_hook`` (``side="q"``; ``heads`` are
    query heads) or ``spec.k_hook`` (``side="k"``; ``heads`` are **KV heads**, and editing
    one changes the keys of every query head of its group). ``unrotate`` needs both: one
    hook per side. :func:`ablate_frequencies_hooks` composes these for you, GQA-safely.

    Example::

        spec = lp.rope_spec(model, 12)
        hook = ablate_frequencies_hook(spec, [0], "0:16")
        model.run_with_hooks(tokens, fwd_hooks=[(spec.q_hook, hook)])
    """
    check_mode(mode)
    check_side(side, ("q", "k"))
    ids = parse_freqs(freqs, spec)
    head_list = [heads] if isinstance(heads, int) else list(heads)
    edit = _edit_for(mode, spec, ids, side, means)
    return edit_hook(spec, side, {h: edit for h in head_list} if ids else {})


def ablate_frequencies_hooks(model: HookedModel | Resolved, selection: Any,
                             mode: AblationMode = "zero", *, freqs: FreqsLike = None,
                             side: Side | None = None,
                             reference: Any = None, per_position: bool = False,
                             means: FrequencyMeans | None = None) -> FwdHooks:
    """Forward hooks that ablate chosen frequencies of chosen heads, GQA-safely.

    Args:
        model: a bridge (or any model whose :func:`~lens_possym.rope_specs` can be read).
        selection: ``{head: freqs}`` (e.g. ``{"12.0": "0:16", (13, 1): "low"}``), or heads
            alone (``"12.0,13.1"``, ``[(12, 0)]``) with ``freqs`` for all of them.
        mode: ``"zero"``, ``"mean"`` or ``"unrotate"`` (module docstring).
        freqs: frequency ids when ``selection`` lists heads only (all ids by default).
        side: ``"q"``, ``"k"`` or ``"qk"``; default ``"q"`` for zero/mean, ``"qk"``
            (required) for unrotate.
        reference, per_position: the reference set for ``mode="mean"``
            (see :func:`frequency_means`), or pass precomputed ``means``.

    Returns:
        ``[(hook name, hook fn)]`` for ``model.hooks(fwd_hooks=...)`` or
        ``run_with_hooks``. Empty frequency sets give no hooks (an exact no-op).
    """
    check_mode(mode)
    side = resolve_side(mode, side)
    resolved = resolve(model)
    specs = resolved.specs
    chosen: Selection = parse_selection(selection, specs, freqs)
    means = means_for([mode], resolved, list(chosen), means=means, reference=reference,
                      per_position=per_position)
    return compile_selection(specs, chosen, side,
                             lambda spec, ids, which: _edit_for(mode, spec, ids, which, means))


@contextmanager
def ablate_frequencies(model: HookedModel, selection: Any, mode: AblationMode = "zero", **kwargs: Any
                       ) -> Iterator[HookedModel]:
    """Context manager: ablate frequencies inside the ``with`` block, then remove the hooks.

    Same arguments as :func:`ablate_frequencies_hooks`. The hooks are removed on exit,
    also when the body raises; hooks attached before are left alone.

    Example::

        with lp.ablate_frequencies(model, {"12.0": "low", "13.1": "low"}):
            logits = model(tokens)
    """
    hooks = ablate_frequencies_hooks(model, selection, mode, **kwargs)
    with model.hooks(fwd_hooks=hooks):
        yield model


# ---- gates --------------------------------------------------------------------------------


class FrequencyGate(nn.Module):
    r"""A per-head mask over frequency ids that multiplies query (or key) pairs.

    With gate values ``g[h, f]``, pair ``f`` of head ``h``'s un-rotated query is multiplied
    by ``g[h, f]`` at ``spec.q_hook``, so each score term becomes ``g[h, f] · λ_f``, exactly
    (``λ_f`` is linear in ``q_f``): a soft version of ``zero`` ablation, differentiable in
    ``g``. With ``side="k"`` the gate has one row per **KV head** and scales the shared
    keys (every query head of a group gets the same factor).

    Args:
        spec: the layer's :class:`~lens_possym.RopeSpec` (any model that describes itself
            with ``lens_possym_rope_specs`` works, so toy models can train with it).
        kind: ``"sigmoid"`` (learnable logits, gate = sigmoid(logits)), ``"raw"``
            (learnable gate values used as they are) or ``"fixed"`` (a buffer, no
            gradient: a fixed mask).
        init: initial gate value, a float or an ``[n, n_freqs]`` tensor (default 1.0; for
            ``"sigmoid"`` values are clamped to [1e-4, 1 - 1e-4] before taking logits).
        side: ``"q"`` or ``"k"``.

    The module is itself the hook function: ``model.hooks(fwd_hooks=gate.fwd_hooks())``.
    """

    def __init__(self, spec: RopeSpec, *, kind: Literal["sigmoid", "raw", "fixed"] = "sigmoid",
                 init: float | Tensor = 1.0, side: Literal["q", "k"] = "q") -> None:
        super().__init__()
        if kind not in ("sigmoid", "raw", "fixed"):
            raise InvalidSelectionError(
                f"unknown gate kind {kind!r}; choose one of sigmoid, raw, fixed"
            )
        check_side(side, ("q", "k"))
        self.spec, self.kind, self.side = spec, kind, side
        n = spec.n_heads if side == "q" else spec.n_kv_heads
        shape = (n, spec.n_freqs)
        try:
            values = torch.as_tensor(init, dtype=torch.float32)
        except (TypeError, ValueError, RuntimeError) as exc:
            raise InvalidSelectionError(
                f"gate init must be a number or a tensor, got {init!r}") from exc
        if not bool(values.isfinite().all()):
            raise InvalidSelectionError(
                f"gate init must be finite, got {init!r}" if values.ndim == 0 else
                f"gate init holds {int((~values.isfinite()).sum())} non-finite value(s); "
                "every gate value must be a finite number")
        if values.shape not in ((), shape):
            raise InvalidSelectionError(
                f"gate init has shape {tuple(values.shape)}; layer {spec.layer} needs a float "
                f"or a tensor of shape {shape} ([{'query' if side == 'q' else 'KV'} heads, "
                "frequency ids])"
            )
        values = values.expand(shape).clone()
        if kind == "sigmoid":
            p = values.clamp(1e-4, 1 - 1e-4)
            self.weight = nn.Parameter(torch.log(p) - torch.log1p(-p))
        elif kind == "raw":
            self.weight = nn.Parameter(values)
        else:
            self.register_buffer("weight", values)
        # each pair of every row scaled the same way at every position (lens_possym.scores)
        setattr(self, "__lens_possym_effect__", "position_free")
        freq_of_dim = torch.empty(spec.d_head, dtype=torch.long)
        for f in range(spec.n_freqs):
            freq_of_dim[spec.dims_of(f)] = f
        self.register_buffer("freq_of_dim", freq_of_dim, persistent=False)

    @classmethod
    def from_mask(cls, spec: RopeSpec, mask: Tensor, *, side: Literal["q", "k"] = "q"
                  ) -> "FrequencyGate":
        """A fixed gate from a ``[n, n_freqs]`` mask (1 keeps a frequency, 0 removes it)."""
        return cls(spec, kind="fixed", init=mask.float(), side=side)

    @property
    def hook_name(self) -> str:
        return self.spec.q_hook if self.side == "q" else self.spec.k_hook

    def gate_values(self) -> Float[Tensor, "head_index freq"]:
        """Gate value of each head and frequency id."""
        return torch.sigmoid(self.weight) if self.kind == "sigmoid" else self.weight

    def forward(self, tensor: Tensor, hook: Any = None) -> Tensor:
        """Multiply each pair of the hook's q (or k) rows by its gate (the hook function)."""
        scale = self.gate_values()[:, self.freq_of_dim]  # [head, d_head]
        if self.spec.qk_layout == "bhpd":
            return tensor * scale[None, :, None, :].to(tensor.dtype)
        if self.spec.qk_layout == "flat":  # [batch, pos, head·d_head]
            return tensor * scale.flatten()[None, None, :].to(tensor.dtype)
        return tensor * scale[None, None, :, :].to(tensor.dtype)

    def fwd_hooks(self) -> FwdHooks:
        return [(self.hook_name, self)]

    def extra_repr(self) -> str:
        return f"layer={self.spec.layer}, kind={self.kind}, side={self.side}, shape={tuple(self.weight.shape)}"


class FrequencyGates(nn.ModuleDict):
    """One :class:`FrequencyGate` per layer, for training with gates on several layers.

    ``FrequencyGates(model, layers=None, **gate_kwargs)``; ``gates.fwd_hooks()`` attaches
    them all; ``gates.gate_values()`` is ``[n_layers, n_heads, n_freqs]`` over the chosen layers
    (when they share a shape); ``gates.parameters()`` go to an optimizer.
    """

    def __init__(self, model: HookedModel | Resolved, layers: int | Sequence[int] | None = None,
                 **gate_kwargs: Any) -> None:
        specs = resolve(model).specs
        chosen = as_layers(layers, len(specs))
        super().__init__({str(layer): FrequencyGate(specs[layer], **gate_kwargs) for layer in chosen})

    @property
    def layers(self) -> list[int]:
        return [int(k) for k in self.keys()]

    def fwd_hooks(self) -> FwdHooks:
        return [hook for gate in self.values() for hook in gate.fwd_hooks()]

    def gate_values(self) -> Float[Tensor, "layer head_index freq"]:
        return torch.stack([gate.gate_values() for gate in self.values()])
