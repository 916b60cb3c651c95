r"""Attribution patching (AtP; Nanda 2023, Kramár et al. 2024): every cell of a patching grid
estimated from one gradient, in a fixed number of passes whatever the number of cells.

**The estimate.** Patching activation ``a`` from the source run into the run (denoising:
clean into corrupted, as :func:`~lens_possym.interventions.patch_grid`'s default) changes
the metric ``m`` by

    Δm(cell) ≈ Σ_{i ∈ cell} (a_source − a_run)_i · ∂m/∂a_i |_run

the first-order Taylor term at the run. One forward pass on the source side (the
activations), one forward and one backward pass on the run's side (activations and
gradients) give every cell: each head's ``hook_z`` (``site="heads"``; summed over
positions, or per position with ``per_position=True``), and each frequency pair of each
head's un-rotated query or key (``site="frequencies"``; ``side="q"`` query heads, ``"k"``
KV heads, at ``spec.q_hook``/``spec.k_hook``, summed over the pair's two dims and every
position, exactly the cell :func:`~lens_possym.interventions.patch_frequencies_grid`
patches). The metric must give one value per prompt and each prompt's value must depend on
its own row only (the normalised logit difference does), so one backward pass of the sum
gives every prompt's gradient: results keep the prompt axis, as the grid does.

**The query-key fix (AtP*).** A query or key pair enters the run only through its head's
attention scores, and the softmax is where the linear estimate fails (a saturated pattern
has a near-zero gradient however large the patch's real effect; Kramár et al. 2024, §3.1).
For a frequency cell the change of the head's raw scores is exact and cheap:

    Δs_f[b, q, k] = scale · ⟨R_q Δq_f[b, q], R_k k[b, k]⟩    (query pair f patched)
    Δs_f[b, q, k] = scale · ⟨R_q q[b, q], R_k Δk_f[b, k]⟩    (key pair f of a KV head)

(``R`` the RoPE rotation at that position; pairs are orthogonal, so the pair's term is its
share of the dot product), so the patched pattern ``A'_f = softmax(softcap(s + Δs_f))``
(causal/window mask) is computed exactly for every cell at once, and only what follows the
pattern is linearised:

    Δm_QK(cell) = Σ_{b, h, q, k} ∂m/∂A[b, h, q, k] · (A'_f − A)[b, h, q, k],
    ∂m/∂A[b, h, q, k] = Σ_d ∂m/∂z[b, q, h, d] · v[b, k, kv(h), d]

(``z = A·v`` is linear in ``A``, so the pattern's gradient comes from ``hook_z``'s and the
values: no pattern hook is needed). For a key cell ``h`` runs over the KV group's query
heads. The recomputed pattern is checked against the model: ``A·v`` must equal the model's
``hook_z`` (else :class:`~lens_possym.errors.DecompositionMismatchError`). With the
softmax the only nonlinearity between the pair and the metric, ``Δm_QK`` equals real
patching (tested).

**Where the linear estimate is unreliable.** :class:`Attribution` keeps both estimates of a
frequency grid: ``gap = qk_fixed − linear`` is the error of linearising through the softmax,
and ``saturation[layer, head]`` the share of (prompt, query position) rows whose largest
attention weight is above ``saturation_threshold`` (0.99): a saturated head's linear
estimates are untrustworthy (its softmax gradient vanishes), and :meth:`Attribution.unreliable`
lists the cells whose two estimates disagree by more than a share of the largest. For head
outputs (``hook_z``) there is no query or key to fix: the linear estimate there
linearises every downstream attention softmax, and its failures (saturation downstream,
cancellation between paths, which AtP*'s GradDrop addresses) are measured against the
real grid by ``benchmarks/bench_attribution.py`` (numbers in ``docs/circuits.md``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

import torch
from torch import Tensor

from .._attention import visible_mask
from .._inputs import as_layers, as_token_pair
from .._json import JsonConfig, check_field_types, tensor_from_json
from .._precision import compute_dtype, model_tolerance
from ..decompose import apply_softcap
from ..errors import DecompositionMismatchError, InvalidSelectionError
from ..resolved import Resolved, resolve
from ..results_io import ResultIO, RunCost, number
from ..rope import RopeSpec, heads_view, rotate
from ..typing import HookedModel
from ..interventions import engine

__all__ = ["ATTRIBUTION_SITES", "AttributionConfig", "Attribution", "attribute",
           "attribution_patch", "gradient_run", "compare_to_grid", "spearman", "pearson",
           "top_overlap"]

#: what :func:`attribute` estimates: head outputs, or RoPE frequency pairs of q/k
ATTRIBUTION_SITES: tuple[str, ...] = ("heads", "frequencies")


@dataclass(frozen=True)
class AttributionConfig(JsonConfig):
    """What :func:`attribute` estimates (frozen, validated, stored in the result).

    Attributes:
        site: ``"heads"`` (each head's ``hook_z``) or ``"frequencies"`` (each pair of each
            head's un-rotated query, or key with ``side="k"``).
        per_position: heads only: one cell per (layer, position, head).
        direction: ``"denoise"`` (source = clean, run = corrupted) or ``"noise"``.
        layers: which layers (all by default; the grid's layout, other layers ``nan``).
        side: ``"q"`` or ``"k"`` for frequencies.
        qk_fix: frequencies: also compute the AtP* query-key-fixed estimate.
        saturation_threshold: an attention row whose largest weight exceeds this counts
            as saturated.
        per_prompt_normalization: as :class:`~lens_possym.interventions.PatchGridConfig`.
    """

    site: str = "heads"
    per_position: bool = False
    direction: str = "denoise"
    layers: tuple[int, ...] | None = None
    side: str = "q"
    qk_fix: bool = True
    saturation_threshold: float = 0.99
    per_prompt_normalization: bool = False

    def __post_init__(self) -> None:
        if self.site not in ATTRIBUTION_SITES:
            raise InvalidSelectionError(
                f"unknown attribution site {self.site!r}; use 'heads' (hook_z) or "
                "'frequencies' (RoPE pairs of q or k)")
        if self.direction not in ("denoise", "noise"):
            raise InvalidSelectionError(
                f"unknown direction {self.direction!r}; use 'denoise' (clean into corrupted) "
                "or 'noise' (corrupted into clean)")
        if self.side not in ("q", "k"):
            raise InvalidSelectionError(f"side must be 'q' or 'k', got {self.side!r}")
        if self.per_position and self.site != "heads":
            raise InvalidSelectionError("per_position applies to site='heads' only")
        if self.layers is not None:
            items = [self.layers] if isinstance(self.layers, int) else list(self.layers)
            if not items or any(isinstance(v, bool) or not isinstance(v, int) for v in items):
                raise InvalidSelectionError(f"layers must be integers, got {self.layers!r}")
            object.__setattr__(self, "layers", tuple(items))
        t = self.saturation_threshold
        if isinstance(t, bool) or not isinstance(t, (int, float)) or not 0 < t < 1:
            raise InvalidSelectionError(
                f"saturation_threshold must be a number in (0, 1), got {t!r}")
        object.__setattr__(self, "saturation_threshold", float(t))
        for name in ("per_position", "qk_fix", "per_prompt_normalization"):
            if not isinstance(getattr(self, name), bool):
                raise InvalidSelectionError(f"{name} must be True or False")
        check_field_types(self)


# ---- the passes -----------------------------------------------------------------------------


def gradient_run(resolved: Resolved, tokens: Tensor, metric: Callable[[Tensor], Tensor],
                 names: Sequence[str]) -> tuple[dict[str, Tensor], dict[str, Tensor], Tensor]:
    """One forward and one backward pass: the activations ``names`` (hook names), the
    metric's gradient with respect to each (summed over prompts, which gives each prompt's
    own gradient in its row when the metric is row-wise) and the metric ``[batch]``.

    A zero tensor with ``requires_grad`` is added at each hook, so the gradient is taken
    at the hook's output and flows to every earlier hook too; the hooks are removed after.
    """
    model = resolved.model
    names = list(dict.fromkeys(names))
    acts: dict[str, Tensor] = {}
    deltas: dict[str, Tensor] = {}

    def hook_for(name: str):
        def hook(act: Tensor, hook: Any = None) -> Tensor:
            if name in deltas:
                raise InvalidSelectionError(
                    f"the hook {name!r} fired twice in one pass; attribution needs each "
                    "activation once")
            acts[name] = act.detach()
            delta = torch.zeros_like(act, requires_grad=True)
            deltas[name] = delta
            return act + delta
        return hook

    with torch.enable_grad(), model.hooks(fwd_hooks=[(n, hook_for(n)) for n in names]):
        logits = model(tokens)
        values = metric(logits)
        values = torch.as_tensor(values)
        if values.shape != (tokens.shape[0],):
            raise InvalidSelectionError(
                f"the metric returned shape {tuple(values.shape)}; attribution needs one value "
                f"per prompt ([{tokens.shape[0]}]), each from its own row of the logits")
        if not values.requires_grad:
            raise InvalidSelectionError(
                "the metric's value carries no gradient (it detaches the logits or leaves "
                "torch); attribution differentiates it")
        missing = [n for n in names if n not in deltas]
        if missing:
            raise InvalidSelectionError(f"the hooks {missing} did not fire on this model")
        grads = torch.autograd.grad(values.sum(), [deltas[n] for n in names],
                                    allow_unused=True)
    out = {n: (g if g is not None else torch.zeros_like(deltas[n])).detach()
           for n, g in zip(names, grads)}
    return acts, out, values.detach().float().cpu()


def source_run(resolved: Resolved, tokens: Tensor, metric, names: Sequence[str]
                 ) -> tuple[dict[str, Tensor], Tensor]:
    with torch.no_grad():
        logits, cache = resolved.model.run_with_cache(tokens, names_filter=list(names))
        values = torch.as_tensor(metric(logits)).detach().float().cpu()
    return {n: cache[n] for n in names}, values


# ---- the estimates --------------------------------------------------------------------------


def _frequency_matrix(spec: RopeSpec, dtype: torch.dtype, device) -> Tensor:
    """``[d_head, n_freqs]``: 1 where dim ``d`` belongs to frequency id ``f``."""
    mat = torch.zeros(spec.d_head, spec.n_freqs, dtype=dtype, device=device)
    for f in range(spec.n_freqs):
        mat[spec.dims_of(f), f] = 1
    return mat


def raw_scores(spec: RopeSpec, qr: Tensor, kr: Tensor) -> Tensor:
    """``[batch, head, q, k]`` scaled scores of rotated queries and (per query head) keys."""
    return torch.einsum("bqhd,bkhd->bhqk", qr, kr) * spec.scale


def attention_pattern(spec: RopeSpec, raw: Tensor) -> Tensor:
    """Softmax over keys of softcapped, masked raw scores (``[..., q, k]``)."""
    n = raw.shape[-1]
    positions = torch.arange(n, device=raw.device)
    allowed = visible_mask(positions, positions, spec.window or None)
    scores = apply_softcap(raw, spec.softcap).masked_fill(~allowed, float("-inf"))
    return torch.softmax(scores, dim=-1)


def _frequency_cells(spec: RopeSpec, side: str, run: Mapping[str, Tensor],
                     src: Mapping[str, Tensor], grads: Mapping[str, Tensor], qk_fix: bool,
                     threshold: float) -> tuple[Tensor, Tensor | None, Tensor]:
    """One layer's frequency cells: linear ``[heads, freqs, batch]``, QK-fixed (or None)
    and the saturation ``[n_heads]`` of each query head."""
    hook = spec.q_hook if side == "q" else spec.k_hook
    x_run = heads_view(run[hook], spec)
    dtype = compute_dtype(x_run.dtype)
    device = x_run.device
    x_run = x_run.to(dtype)
    x_src = heads_view(src[hook], spec).to(dtype)
    g = heads_view(grads[hook], spec).to(dtype)
    freq_mat = _frequency_matrix(spec, dtype, device)
    diff = x_src - x_run
    # Σ over positions and the pair's dims: [batch, heads, freqs]
    linear = torch.einsum("bphd,df->bhf", diff * g, freq_mat).permute(1, 2, 0)

    n = x_run.shape[1]
    positions = torch.arange(n, device=device)
    at = spec.at_length(n)
    q = heads_view(run[spec.q_hook], spec).to(dtype)
    k = heads_view(run[spec.k_hook], spec).to(dtype)
    v = value_view(run, spec).to(dtype)
    kv = torch.tensor([spec.kv_head(h) for h in range(spec.n_heads)], device=device)
    qr = rotate(q, positions, at).to(dtype)
    kr = rotate(k, positions, at).to(dtype)[:, :, kv]
    raw = raw_scores(spec, qr, kr)  # [b, H, q, k]
    pattern = attention_pattern(spec, raw)
    z = torch.einsum("bhqk,bkhd->bqhd", pattern, v[:, :, kv])
    z_model = run[engine.z_hook_name(spec)]
    z_model = z_model.reshape(z.shape).to(dtype)
    err = float((z - z_model).abs().max())
    tol = model_tolerance(run[engine.z_hook_name(spec)].dtype) * max(
        1.0, float(z_model.abs().max()))
    if not err <= tol:
        raise DecompositionMismatchError(
            f"layer {spec.layer}: the attention recomputed from q, k, v differs from the "
            f"model's hook_z by {err:.3g} (tolerance {tol:.3g}); the query-key fix needs "
            f"this layer's attention ({spec.describe()}); use qk_fix=False")
    # rows with one visible key (the first position) are saturated by construction: skipped
    rows = visible_mask(positions, positions, spec.window or None).sum(-1) > 1
    saturation = (pattern.amax(-1)[:, :, rows] > threshold).float().mean(dim=(0, 2))  # [H]
    if not qk_fix:
        return linear.float().cpu(), None, saturation.float().cpu()

    gz = grads[engine.z_hook_name(spec)]
    gz = gz.reshape(gz.shape[0], gz.shape[1], spec.n_heads, spec.d_head).to(dtype)
    grad_pattern = torch.einsum("bqhd,bkhd->bhqk", gz, v[:, :, kv])
    d_rot = rotate(diff, positions, at).to(dtype)
    if side == "q":
        # Δs[b, H, f, q, k] = scale Σ_{d∈f} ΔqR[b,q,H,d] kR[b,k,H,d]
        delta = torch.einsum("bqhd,df,bkhd->bhfqk", d_rot, freq_mat, kr) * spec.scale
    else:
        d_k = d_rot[:, :, kv]
        delta = torch.einsum("bqhd,df,bkhd->bhfqk", qr, freq_mat, d_k) * spec.scale
    new = attention_pattern(spec, raw[:, :, None] + delta)
    effect = torch.einsum("bhqk,bhfqk->bhf", grad_pattern, new - pattern[:, :, None])
    if side == "k":  # a key cell moves every query head of its KV group
        grouped = torch.zeros(effect.shape[0], spec.n_kv_heads, effect.shape[2],
                              dtype=dtype, device=device)
        grouped.index_add_(1, kv, effect)
        effect = grouped
    return linear.float().cpu(), effect.permute(1, 2, 0).float().cpu(), saturation.float().cpu()


def value_view(run: Mapping[str, Tensor], spec: RopeSpec) -> Tensor:
    v = run[engine.v_hook_name(spec)]
    if v.ndim == 4:
        return v
    return v.reshape(v.shape[0], v.shape[1], spec.n_kv_heads, spec.d_head)


# ---- the result -----------------------------------------------------------------------------


def _opt(value: Any) -> Tensor | None:
    if value is None or isinstance(value, Tensor):
        return value
    return tensor_from_json(value)


@dataclass(repr=False)
class Attribution(RunCost, ResultIO):
    """Attribution-patching estimates in the layout of the real grid
    (:class:`~lens_possym.interventions.PatchingGrid`).

    Attributes:
        linear: ``[*grid, n_prompts]`` the first-order estimate of each cell's effect on
            the metric (``patched − run``), ``nan`` for layers not asked for.
        qk_fixed: frequencies with ``qk_fix``: the AtP* estimate (exact softmax), same
            shape; ``None`` otherwise.
        axis_names: ``["layer", "head"]``, ``["layer", "pos", "head"]`` or ``["layer",
            "head", "freq"]`` (the head a KV head for ``side="k"``).
        baseline: ``[n_prompts]`` the metric on the run; ``source_baseline`` on the source.
        saturation: ``[n_layers, n_heads]`` frequencies: share of (prompt, query position)
            rows of each query head whose largest attention weight exceeds the threshold
            (query positions that see one key only are left out)
            (``nan`` for layers not asked for); ``None`` for heads.
        config, seconds, n_passes (forward + backward passes), info.
    """

    linear: Tensor
    axis_names: list[str]
    baseline: Tensor
    qk_fixed: Tensor | None = None
    source_baseline: Tensor | None = None
    saturation: Tensor | None = None
    config: AttributionConfig | None = None

    FORMAT = "lens-possym/attribution@1"

    @property
    def estimate(self) -> Tensor:
        """``[*grid, prompt]`` the best estimate of each cell's effect: the QK-fixed one
        where computed, else the linear one."""
        return self.qk_fixed if self.qk_fixed is not None else self.linear

    @property
    def values(self) -> Tensor:
        """``[*grid, prompt]`` the estimated patched metric (``baseline + estimate``), the
        quantity :attr:`PatchingGrid.values` measures."""
        return self.baseline + self.estimate

    def mean(self) -> Tensor:
        """``[*grid]`` the estimated patched metric averaged over prompts."""
        return self.values.mean(-1)

    def effect(self) -> Tensor:
        """``[*grid]`` the estimated effect averaged over prompts."""
        return self.estimate.mean(-1)

    @property
    def gap(self) -> Tensor | None:
        """``[*grid]`` QK-fixed minus linear effect (mean over prompts): the error of
        linearising through the softmax; ``None`` without the fix."""
        if self.qk_fixed is None:
            return None
        return (self.qk_fixed - self.linear).mean(-1)

    def unreliable(self, share: float = 0.1) -> list[tuple[tuple[int, ...], float, float]]:
        """Cells whose linear and QK-fixed mean effects differ by more than ``share`` of the
        largest |QK-fixed| effect: ``(index, linear, qk_fixed)``, largest gap first."""
        if self.qk_fixed is None:
            return []
        lin, fix = self.linear.mean(-1), self.qk_fixed.mean(-1)
        gap = (fix - lin).abs()
        scale = float(torch.nan_to_num(fix.abs(), nan=0.0).max())
        flagged = torch.nonzero(torch.nan_to_num(gap, nan=0.0) > share * scale)
        rows = [(tuple(int(i) for i in idx), float(lin[tuple(idx)]), float(fix[tuple(idx)]))
                for idx in flagged]
        return sorted(rows, key=lambda r: -abs(r[2] - r[1]))

    def top(self, k: int = 10) -> list[tuple[tuple[int, ...], float]]:
        """The ``k`` cells of largest |estimated effect|: ``(index, effect)``."""
        eff = self.effect()
        flat = torch.nan_to_num(eff.abs(), nan=-1.0).flatten()
        order = flat.argsort(descending=True)[:k]
        return [(tuple(int(i) for i in torch.unravel_index(o, eff.shape)),
                 float(eff.flatten()[o])) for o in order]

    def to_dict(self) -> dict[str, Any]:
        return {"linear": self.linear, "qk_fixed": self.qk_fixed,
                "axis_names": list(self.axis_names), "baseline": self.baseline,
                "source_baseline": self.source_baseline, "saturation": self.saturation,
                "config": None if self.config is None else self.config.to_dict(),
                **self.cost_dict()}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Attribution":
        config = data.get("config")
        return cls(linear=_opt(data["linear"]), axis_names=list(data["axis_names"]),
                   baseline=_opt(data["baseline"]), qk_fixed=_opt(data.get("qk_fixed")),
                   source_baseline=_opt(data.get("source_baseline")),
                   saturation=_opt(data.get("saturation")),
                   config=None if config is None else AttributionConfig.from_dict(config),
                   **cls.read_cost(data))

    def summary(self) -> dict[str, Any]:
        top = self.top(1)
        return {"axes": list(self.axis_names), "shape": list(self.linear.shape[:-1]),
                "n_prompts": int(self.linear.shape[-1]),
                "strongest": None if not top else list(top[0][0]),
                "strongest_effect": None if not top else top[0][1],
                "qk_fixed": self.qk_fixed is not None,
                "n_unreliable": len(self.unreliable()),
                "seconds": self.seconds, "n_passes": self.n_passes}

    def _table(self):
        import pandas as pd

        lin = self.linear.mean(-1)
        fix = None if self.qk_fixed is None else self.qk_fixed.mean(-1)
        rows = []
        for idx in torch.nonzero(~torch.isnan(lin)):
            key = tuple(int(i) for i in idx)
            row = dict(zip(self.axis_names, key))
            row["linear"] = float(lin[key])
            if fix is not None:
                row["qk_fixed"] = float(fix[key])
            rows.append(row)
        return pd.DataFrame(rows)

    def _headline(self) -> list[str]:
        s = self.summary()
        return [f"axes={'x'.join(self.axis_names)}", f"prompts={s['n_prompts']}",
                f"strongest={s['strongest']}",
                f"effect={number(s['strongest_effect']) if s['strongest_effect'] is not None else None}"]


# ---- the entry points -----------------------------------------------------------------------


def attribute(model: HookedModel | Resolved, run_tokens: Any, source_tokens: Any,
              metric: Callable[[Tensor], Tensor], config: AttributionConfig | None = None,
              **settings: Any) -> Attribution:
    """Attribution-patch every cell of a grid (module docstring): the effect on ``metric``
    of patching each cell from the ``source_tokens`` run into the ``run_tokens`` run.

    Args:
        run_tokens, source_tokens: ``[batch, pos]`` (or prompts), of equal shape (for
            denoising: corrupted and clean).
        metric: ``logits [batch, pos, vocab] -> [batch]``, differentiable, each value from
            its own prompt's row.
        config / settings: :class:`AttributionConfig` (``direction`` is ignored here: the
            caller says which run is which).

    Returns:
        :class:`Attribution`: ``[n_layers, n_heads, prompt]`` for heads,
        ``[n_layers, n_pos, n_heads, prompt]`` per position, ``[n_layers, n_heads,
        n_freqs, prompt]`` for frequencies (KV heads for ``side="k"``). Three passes: a
        source forward, a run forward and its backward.
    """
    config = AttributionConfig.coerce(config, **settings)
    resolved = resolve(model)
    model = resolved.model
    run, src = as_token_pair(model, run_tokens, source_tokens, ("run tokens", "source tokens"))
    specs = resolved.specs
    n_layers = int(model.cfg.n_layers)
    layers = as_layers(list(config.layers) if config.layers else None, n_layers)
    start = time.perf_counter()
    z_names = {L: engine.z_hook_name(specs[L]) for L in layers}
    batch, n_pos = run.shape
    if config.site == "heads":
        names = list(z_names.values())
        source, base_src = source_run(resolved, src, metric, names)
        acts, grads, baseline = gradient_run(resolved, run, metric, names)
        n_heads = int(model.cfg.n_heads)
        shape = (n_layers, n_pos, n_heads) if config.per_position else (n_layers, n_heads)
        linear = torch.full((*shape, batch), float("nan"))
        for L in layers:
            name = z_names[L]
            prod = ((source[name].float() - acts[name].float()) * grads[name].float())
            prod = prod.reshape(batch, n_pos, n_heads, -1).sum(-1)  # [b, p, h]
            if config.per_position:
                linear[L] = prod.permute(1, 2, 0).cpu()
            else:
                linear[L] = prod.sum(1).permute(1, 0).cpu()
        return Attribution(linear=linear, axis_names=["layer", "pos", "head"]
                           if config.per_position else ["layer", "head"], baseline=baseline,
                           source_baseline=base_src, config=config,
                           seconds=time.perf_counter() - start, n_passes=3)
    # frequencies
    names = []
    for L in layers:
        spec = specs[L]
        names += [spec.q_hook, spec.k_hook, engine.v_hook_name(spec), z_names[L]]
    src_names = [specs[L].q_hook if config.side == "q" else specs[L].k_hook for L in layers]
    source, base_src = source_run(resolved, src, metric, src_names)
    acts, grads, baseline = gradient_run(resolved, run, metric, names)
    n_heads = int(model.cfg.n_heads)
    n_side = n_heads if config.side == "q" else max(s.n_kv_heads for s in specs)
    n_freqs = max(s.n_freqs for s in specs)
    linear = torch.full((n_layers, n_side, n_freqs, batch), float("nan"))
    fixed = torch.full_like(linear, float("nan")) if config.qk_fix else None
    saturation = torch.full((n_layers, n_heads), float("nan"))
    for L in layers:
        spec = specs[L]
        lin, fix, sat = _frequency_cells(spec, config.side, acts, source, grads, config.qk_fix,
                                         config.saturation_threshold)
        linear[L, :lin.shape[0], :lin.shape[1]] = lin
        if fixed is not None:
            fixed[L, :fix.shape[0], :fix.shape[1]] = fix
        saturation[L, :sat.shape[0]] = sat
    return Attribution(linear=linear, axis_names=["layer", "head", "freq"], baseline=baseline,
                       qk_fixed=fixed, source_baseline=base_src, saturation=saturation,
                       config=config, seconds=time.perf_counter() - start, n_passes=3)


def attribution_patch(model: HookedModel | Resolved, pairs: Any,
                      config: AttributionConfig | None = None, *,
                      metric: Callable[[Tensor], Tensor] | None = None,
                      **settings: Any) -> Attribution:
    """:func:`attribute` on counterfactual pairs, as :func:`~lens_possym.interventions.patch_grid`
    runs a grid: ``pairs.metric(model)`` (the normalised logit difference) by default;
    ``direction="denoise"`` patches clean into corrupted. The result's ``values`` compare
    with the grid's (``grid.values``) cell by cell."""
    config = AttributionConfig.coerce(config, **settings)
    resolved = resolve(model)
    if metric is None:
        metric = pairs.metric(resolved.model, per_prompt=config.per_prompt_normalization)
    clean, corrupted = pairs.clean_tokens, pairs.corrupted_tokens
    run, source = (corrupted, clean) if config.direction == "denoise" else (clean, corrupted)
    result = attribute(resolved, run, source, metric, config)
    result.info["pairs"] = pairs.describe()
    return result


# ---- comparing with the real grid --------------------------------------------------------------


def _ranks(x: Tensor) -> Tensor:
    """Average ranks (ties share their mean rank)."""
    x = x.double()
    order = x.argsort()
    ranks = torch.empty_like(x)
    ranks[order] = torch.arange(len(x), dtype=torch.float64)
    for value in x.unique():
        tie = x == value
        if int(tie.sum()) > 1:
            ranks[tie] = ranks[tie].mean()
    return ranks


def pearson(a: Tensor, b: Tensor) -> float:
    """Pearson correlation of two 1-d tensors."""
    a, b = a.double() - a.double().mean(), b.double() - b.double().mean()
    denom = float(a.norm() * b.norm())
    return float((a * b).sum()) / denom if denom > 0 else float("nan")


def spearman(a: Tensor, b: Tensor) -> float:
    """Spearman rank correlation of two 1-d tensors (average ranks for ties)."""
    return pearson(_ranks(a), _ranks(b))


def top_overlap(a: Tensor, b: Tensor, k: int) -> int:
    """How many of the ``k`` entries of largest |a| are among the ``k`` of largest |b|."""
    ta = set(a.abs().argsort(descending=True)[:k].tolist())
    tb = set(b.abs().argsort(descending=True)[:k].tolist())
    return len(ta & tb)


def compare_to_grid(estimate: Tensor, grid: Any, *, share: float = 0.01, k: int = 20
                    ) -> dict[str, Any]:
    """How an estimated effect grid agrees with the real one.

    Args:
        estimate: ``[*grid]`` estimated effects (``Attribution.effect()``, or its
            ``linear.mean(-1)``).
        grid: a :class:`~lens_possym.interventions.PatchingGrid` of the same cells (its
            effect ``values − baseline`` averaged over prompts), or a ``[*grid]`` tensor of
            real effects.

    Returns:
        ``{"n_cells", "n_large", "spearman_large"`` (over cells whose |real effect| is above
        ``share`` of the largest), ``"pearson"``, ``"spearman"`` (all cells),
        ``"top_k"``, ``"top_overlap"}``.
    """
    real = grid if isinstance(grid, Tensor) else grid.effect().mean(-1)
    if tuple(real.shape) != tuple(estimate.shape):
        raise InvalidSelectionError(
            f"the estimate's grid {tuple(estimate.shape)} and the real grid "
            f"{tuple(real.shape)} differ; compare the same cells")
    ok = ~(torch.isnan(real) | torch.isnan(estimate))
    r, e = real[ok].double(), estimate[ok].double()
    if r.numel() < 2:
        raise InvalidSelectionError("fewer than two cells to compare")
    large = r.abs() > share * float(r.abs().max())
    return {"n_cells": int(r.numel()), "n_large": int(large.sum()),
            "spearman_large": spearman(e[large], r[large]) if int(large.sum()) > 1
            else float("nan"),
            "pearson": pearson(e, r), "spearman": spearman(e, r), "top_k": min(k, r.numel()),
            "top_overlap": top_overlap(e, r, min(k, r.numel()))}
