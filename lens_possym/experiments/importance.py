r"""Per-head ablation importance: ablate each query head alone and measure a metric.

For every layer ``L`` and query head ``h``, :func:`head_importance` ablates head ``(L, h)``
(its ``hook_z`` row set to zero or to its mean, :mod:`.heads`) and evaluates a metric
``m`` on the model's output. With ``m_0`` the clean value and ``m_{L,h}`` the ablated one,

.. math::

    \Delta_{L,h} = m_{L,h} - m_0, \qquad I_{L,h} = -\sigma\,\Delta_{L,h}, \qquad
    \rho_{L,h} = \Delta_{L,h} / |m_0|,

the **effect** ``Δ`` (ablated − baseline: the sign of every effect in lens-possym, as in
:class:`~lens_possym.interventions.BandSweep` and patching) and the **importance** ``I``,
with ``σ = +1`` for metrics where higher is better (accuracy, logit difference) and ``−1``
for the loss, so **I > 0 always means the head helps** (removing it hurts): a drop in
logit difference or a rise in loss. Results are ``[n_layers, n_heads]`` (query heads;
``nan`` where not swept).

**How concentrated is the importance?** With ``d = max(I, 0)`` over the swept heads,

* ``top_share = max d / Σ d``: the share of the summed single-head drops held by the top
  head. It answers the question asked of a task directly ("does one head carry it?"): 1
  when only one head matters, ``1/n`` when ``n`` heads matter equally;
* ``top_k_share``: the same for the ``k`` largest drops (a small circuit rather than one
  head);
* ``gini = Σ_i Σ_j |d_i − d_j| / (2 n Σ d)``: inequality over all heads (0 = all equal,
  ``(n−1)/n`` = one head holds everything); it sees the whole distribution, which the top
  share ignores.

The shares are of the *summed single-head* drops: heads that back each other up each show
a small drop, so a low share does not prove that no single head is needed, and the sum is
not the drop of ablating them all. :meth:`HeadImportance.carried_by_one_head` calls a task
carried by one head when that head holds at least half the summed drop *and* removing it
alone costs at least half the baseline.

**Speed.** The ablations are batched: ``heads_per_pass`` heads are ablated in one forward
pass over a batch stacked that many times, each copy ablating its own head (a per-example
head mask at ``hook_z``). An ablation at layer ``L`` cannot change anything before ``L``,
so on bridges each pass starts at the first layer it ablates, from the clean residual
stream cached once (``start_at_layer``), and only the last position's logits are computed
(``logits_to_keep=1``) unless ``last_token_only=False``. Measured figures:
``benchmarks/head_importance.py`` and ``docs/head_importance.md``.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass, field, fields, replace
from typing import Any, Callable, Mapping

import torch
from jaxtyping import Float
from torch import Tensor

from .._checks import boundary
from .._ids import head_name
from .._inputs import ModelInput, as_positions, as_tokens
from .._json import JsonConfig, check_field_types, tensor_from_json, to_jsonable
from ..errors import InvalidSelectionError
from ..results_io import ResultIO, head_frame, number
from ..tasks.binding import ImportanceBatch
from ..typing import HookedModel, HookFn
from ..interventions.heads import HeadMeans, check_head_mode, head_counts, head_means, z_hook_names
from .uncertainty import Uncertainty, standard_error, uncertainty

__all__ = [
    "METRICS",
    "ImportanceConfig",
    "ImportanceBatch",
    "HeadImportance",
    "head_importance",
    "importance_metric",
]

METRICS: tuple[str, ...] = ("accuracy", "logit_diff", "loss")
MetricFn = Callable[[Tensor, "ImportanceBatch"], Any]


# ---- configuration ---------------------------------------------------------------------------


def _int_tuple(value: Any, what: str) -> tuple[int, ...] | None:
    if value is None:
        return None
    items = [value] if isinstance(value, int) else list(value)
    if not items or any(isinstance(v, bool) or not isinstance(v, int) for v in items):
        raise InvalidSelectionError(f"{what} must be a non-empty list of integers, got {value!r}")
    return tuple(items)


@dataclass(frozen=True)
class ImportanceConfig(JsonConfig):
    """How :func:`head_importance` ablates and measures (validated on creation).

    Attributes:
        metric: ``"accuracy"``, ``"logit_diff"``, ``"loss"`` (next-token metrics of the
            last position, see :func:`importance_metric`) or the name of a custom metric.
        mode: ``"zero"`` or ``"mean"`` head ablation.
        positions: ablate only at these positions (negatives count from the end);
            ``None`` = every position.
        per_position: ``mode="mean"``: one mean per position instead of pooled.
        layers: layers whose heads are ablated (``None`` = all); heads of other layers are
            ``nan``.
        heads_per_pass: ablations batched into one forward pass.
        last_token_only: on bridges, compute only the last position's logits.
        higher_is_better: direction of the metric; ``None`` = the built-in metric's own
            (``False`` for ``loss``, ``True`` otherwise and for custom metrics).
        top_k: ``k`` of :attr:`HeadImportance.top_k_share`.
    """

    metric: str = "logit_diff"
    mode: str = "zero"
    positions: tuple[int, ...] | None = None
    per_position: bool = False
    layers: tuple[int, ...] | None = None
    heads_per_pass: int = 8
    last_token_only: bool = True
    higher_is_better: bool | None = None
    top_k: int = 3

    def __post_init__(self) -> None:
        if not isinstance(self.metric, str) or not self.metric:
            raise InvalidSelectionError(f"metric must be a name, got {self.metric!r}")
        check_head_mode(self.mode)
        object.__setattr__(self, "positions", _int_tuple(self.positions, "positions"))
        object.__setattr__(self, "layers", _int_tuple(self.layers, "layers"))
        for name in ("heads_per_pass", "top_k"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InvalidSelectionError(f"{name} must be a positive integer, got {value!r}")
        for name in ("per_position", "last_token_only"):
            if not isinstance(getattr(self, name), bool):
                raise InvalidSelectionError(f"{name} must be True or False")
        if self.higher_is_better is not None and not isinstance(self.higher_is_better, bool):
            raise InvalidSelectionError("higher_is_better must be True, False or None")
        if self.metric == "loss" and self.higher_is_better:
            raise InvalidSelectionError(
                "the loss is better when lower: leave higher_is_better unset")
        if self.metric in ("accuracy", "logit_diff") and self.higher_is_better is False:
            raise InvalidSelectionError(
                f"{self.metric} is better when higher: leave higher_is_better unset")
        if self.per_position and self.mode != "mean":
            raise InvalidSelectionError("per_position applies to mode='mean' only")
        # what the checks above leave open: a value of another type
        check_field_types(self)

    @property
    def maximize(self) -> bool:
        """Whether a higher metric is better."""
        if self.higher_is_better is not None:
            return self.higher_is_better
        return self.metric != "loss"

    # to_dict/from_dict, to_json/from_json and replace: JsonConfig


# ---- what is measured ------------------------------------------------------------------------


def _last(logits: Tensor) -> Float[Tensor, "batch d_vocab"]:
    last = logits[:, -1] if logits.ndim == 3 else logits
    return last.to(torch.promote_types(last.dtype, torch.float32))  # float64 stays float64


def importance_metric(name: str, per_prompt: bool = False) -> MetricFn:
    """A built-in metric ``(logits, batch) -> scalar`` of the last position's logits
    (``per_prompt``: ``-> [batch]``, one value per prompt, whose mean is the scalar).

    * ``accuracy``: share of prompts whose top token is ``batch.answers``;
    * ``logit_diff``: mean of ``logit(answer) − mean logit(distractors)``;
    * ``loss``: mean cross-entropy of ``answers`` (lower is better).
    """
    def need(batch: ImportanceBatch, *what: str) -> None:
        missing = [w for w in what if getattr(batch, w) is None]
        if missing:
            raise InvalidSelectionError(
                f"metric {name!r} needs the batch's {' and '.join(missing)}; build an "
                "ImportanceBatch with them (or pass a custom metric)")

    def reduce(values: Tensor) -> Tensor:
        return values if per_prompt else values.mean()

    def accuracy(logits: Tensor, batch: ImportanceBatch) -> Tensor:
        need(batch, "answers")
        last = _last(logits)
        return reduce((last.argmax(-1) == batch.answers.to(last.device)).float())

    def logit_diff(logits: Tensor, batch: ImportanceBatch) -> Tensor:
        need(batch, "answers", "distractors")
        last = _last(logits)
        correct = last.gather(1, batch.answers.to(last.device)[:, None])[:, 0]
        return reduce(correct - last.gather(1, batch.distractors.to(last.device)).mean(-1))

    def loss(logits: Tensor, batch: ImportanceBatch) -> Tensor:
        need(batch, "answers")
        last = _last(logits)
        return reduce(torch.nn.functional.cross_entropy(last, batch.answers.to(last.device),
                                                        reduction="none"))

    table = {"accuracy": accuracy, "logit_diff": logit_diff, "loss": loss}
    if name not in table:
        raise InvalidSelectionError(
            f"unknown metric {name!r}; use one of {', '.join(METRICS)} or pass a callable "
            "metric(logits, batch) -> scalar")
    return table[name]


# ---- the result ------------------------------------------------------------------------------


@dataclass(repr=False)
class HeadImportance(ResultIO):
    """Result of :func:`head_importance` (module docstring for the definitions).

    Attributes:
        config: the settings used.
        baseline: the metric without ablation.
        ablated: ``[n_layers, n_heads]`` the metric with that head ablated (``nan``: not
            swept).
        n_prompts: prompts evaluated.
        seconds, n_passes: wall time of the ablations and the forward passes they took.
        info: free-form description (model, task, seed) kept in the JSON.
        per_prompt: ``[n_layers, n_heads, n_prompts]`` the ablated metric per prompt, and
        baseline_per_prompt: ``[n_prompts]`` the clean one, when the metric gives one value
            per prompt (the built-in ones do): they give each effect its standard error and
            bootstrap interval (:meth:`uncertainty`).
    """

    config: ImportanceConfig
    baseline: float
    ablated: Float[Tensor, "layer head_index"]
    n_prompts: int
    seconds: float = float("nan")
    n_passes: int = 0
    info: dict = field(default_factory=dict)
    per_prompt: Float[Tensor, "layer head_index prompt"] | None = None
    baseline_per_prompt: Float[Tensor, "prompt"] | None = None

    FORMAT = "lens-possym/head-importance@1"
    UNTAGGED_OK = True  # heads.json files written before results carried a format tag

    @property
    def effect_per_prompt(self) -> Float[Tensor, "layer head_index prompt"] | None:
        """``Δ = ablated − baseline`` per prompt (a paired difference), or ``None``."""
        if self.per_prompt is None or self.baseline_per_prompt is None:
            return None
        return self.per_prompt - self.baseline_per_prompt

    def uncertainty(self, **kwargs: Any) -> "Uncertainty":
        """Mean, standard error and bootstrap interval over prompts of each head's effect
        ``Δ`` (ablated − baseline; the importance ``I = −σ Δ`` has the same standard error
        and the interval mirrored), with ``confidence``, ``n_resamples``, ``seed`` as in
        :func:`.uncertainty.uncertainty`.

        Raises:
            InvalidSelectionError: the metric gave one value for all prompts.
        """
        effect = self.effect_per_prompt
        if effect is None:
            raise InvalidSelectionError(
                "this result has no per-prompt values (a custom metric returned a scalar); "
                "return one value per prompt to get standard errors and intervals")
        return uncertainty(effect, -1, **{"allow_nan": True, **kwargs})

    @property
    def effect_se(self) -> Float[Tensor, "layer head_index"]:
        """Standard error of each head's effect over prompts (``nan`` without per-prompt
        values)."""
        effect = self.effect_per_prompt
        return torch.full_like(self.ablated, float("nan")) if effect is None else \
            standard_error(effect, -1, undefined="nan")

    @property
    def effect(self) -> Float[Tensor, "layer head_index"]:
        """``Δ = ablated − baseline``: the change the ablation makes to the metric (the
        sign of every effect in lens-possym)."""
        return self.ablated - self.baseline

    @property
    def importance(self) -> Float[Tensor, "layer head_index"]:
        """``I = −σ Δ``: positive where the head helps (its ablation lowers a metric where
        higher is better, or raises the loss)."""
        sign = 1.0 if self.config.maximize else -1.0
        return -sign * self.effect

    @property
    def relative(self) -> Float[Tensor, "layer head_index"]:
        """``Δ / |baseline|`` (``nan`` when the baseline is 0)."""
        scale = abs(self.baseline)
        return self.effect / scale if scale > 0 else torch.full_like(self.ablated, float("nan"))

    def _drops(self) -> Tensor:
        imp = self.importance
        return imp[torch.isfinite(imp)].clamp(min=0).double()

    @property
    def top_head(self) -> tuple[int, int]:
        """``(layer, head)`` whose ablation hurts most (the largest importance)."""
        imp = torch.nan_to_num(self.importance, nan=-float("inf"))
        index = int(imp.flatten().argmax())
        return divmod(index, imp.shape[1])

    @property
    def top_effect(self) -> float:
        """The top head's effect ``Δ`` (ablated − baseline)."""
        layer, head = self.top_head
        return float(self.effect[layer, head])

    @property
    def top_relative(self) -> float:
        """The top head's importance over ``|baseline|``: the share of the baseline its
        ablation costs (``nan`` when the baseline is 0)."""
        layer, head = self.top_head
        scale = abs(self.baseline)
        return float(self.importance[layer, head]) / scale if scale > 0 else float("nan")

    def _share(self, k: int) -> float:
        drops = self._drops()
        total = float(drops.sum())
        if total <= 0:
            return float("nan")
        return float(drops.sort(descending=True).values[:k].sum()) / total

    @property
    def top_share(self) -> float:
        """The top head's share of the summed positive drops (``nan`` if none is positive)."""
        return self._share(1)

    @property
    def top_k_share(self) -> float:
        """The ``config.top_k`` largest drops' share of the summed positive drops."""
        return self._share(self.config.top_k)

    @property
    def gini(self) -> float:
        """Gini coefficient of the positive drops over the swept heads."""
        drops = self._drops()
        total = float(drops.sum())
        if total <= 0:
            return float("nan")
        pairwise = (drops[:, None] - drops[None, :]).abs().sum()
        return float(pairwise) / (2 * drops.numel() * total)

    def carried_by_one_head(self, share: float = 0.5, relative_drop: float = 0.5) -> bool:
        """Whether the top head holds ``>= share`` of the summed drops and removing it
        alone costs ``>= relative_drop`` of the baseline."""
        return bool(self.top_share >= share and self.top_relative >= relative_drop)

    def top(self, k: int = 5) -> list[tuple[int, int, float]]:
        """The ``k`` most important heads (largest ``I``): ``(layer, head, Δ)``, ``Δ`` the
        effect (ablated − baseline)."""
        imp = torch.nan_to_num(self.importance, nan=-float("inf")).flatten()
        order = imp.argsort(descending=True, stable=True)[:k]
        eff = self.effect.flatten()
        return [(*divmod(int(i), self.ablated.shape[1]), float(eff[i])) for i in order
                if math.isfinite(float(imp[i]))]

    def summary(self) -> dict[str, Any]:
        """The headline numbers: the baseline, the top head (``"L.H"``), its effect ``Δ``
        with its standard error, the share of the baseline it costs, the concentration
        measures and whether one head carries the metric (``describe`` says it in words)."""
        layer, head = self.top_head
        return {"metric": self.config.metric, "baseline": self.baseline,
                "n_prompts": self.n_prompts, "top_head": head_name(layer, head),
                "top_effect": self.top_effect,
                "top_effect_se": float(self.effect_se[layer, head]),
                "top_relative": self.top_relative, "top_share": self.top_share,
                f"top_{self.config.top_k}_share": self.top_k_share, "gini": self.gini,
                "carried_by_one_head": self.carried_by_one_head()}

    def describe(self) -> str:
        """One sentence: the baseline, the top head's effect ± SE and what it costs, the
        concentration measures (what ``lens-possym heads`` prints)."""
        layer, head = self.top_head
        se = float(self.effect_se[layer, head])
        return (f"{self.config.metric} baseline {self.baseline:.3f}; top head {layer}.{head}: "
                f"Δ {self.top_effect:+.3f}{'' if math.isnan(se) else f' ± {se:.3f}'} "
                f"(costs {100 * self.top_relative:.0f}% of the baseline), "
                f"share of summed drop {self.top_share:.2f}, top-{self.config.top_k} share "
                f"{self.top_k_share:.2f}, Gini {self.gini:.2f}; "
                + ("one head carries it" if self.carried_by_one_head()
                   else "no single head carries it"))

    def to_dict(self) -> dict:
        def listed(t: Tensor) -> list:
            return [[None if not math.isfinite(v) else v for v in row] for row in t.tolist()]

        return {
            "config": self.config.to_dict(), "baseline": self.baseline,
            "ablated": listed(self.ablated), "effect": listed(self.effect),
            "importance": listed(self.importance),
            "relative": listed(self.relative), "n_prompts": self.n_prompts,
            "seconds": _finite(self.seconds), "n_passes": self.n_passes, "info": self.info,
            "top_head": list(self.top_head), "top_share": _finite(self.top_share),
            "top_k_share": _finite(self.top_k_share), "gini": _finite(self.gini),
            **self._uncertainty_dict(),
        }

    def _uncertainty_dict(self) -> dict:
        if self.effect_per_prompt is None:
            return {}
        unc = self.uncertainty()
        return to_jsonable({"effect_se": unc.se, "effect_ci_low": unc.low,
                            "effect_ci_high": unc.high, "confidence": unc.confidence,
                            "per_prompt": self.per_prompt,
                            "baseline_per_prompt": self.baseline_per_prompt})

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "HeadImportance":
        ablated = torch.tensor([[float("nan") if v is None else v for v in row]
                                for row in data["ablated"]], dtype=torch.float64)
        per_prompt = data.get("per_prompt")
        base = data.get("baseline_per_prompt")
        return cls(config=ImportanceConfig.from_dict(data["config"]), baseline=data["baseline"],
                   ablated=ablated, n_prompts=data["n_prompts"],
                   seconds=float("nan") if data["seconds"] is None else data["seconds"],
                   n_passes=data["n_passes"], info=dict(data.get("info", {})),
                   per_prompt=None if per_prompt is None else tensor_from_json(per_prompt),
                   baseline_per_prompt=None if base is None else tensor_from_json(base))

    def to_json(self, **kwargs: Any) -> str:
        return json.dumps(self.to_dict(), **kwargs)

    @classmethod
    def from_json(cls, text: str) -> "HeadImportance":
        return cls.from_dict(json.loads(text))

    def _table(self):
        """Long format, one row per swept head: ``value`` the ablated metric, ``effect``
        (Δ = ablated − baseline) and ``importance``, and with per-prompt values the effect's
        ``se`` and 95% bootstrap ``ci_low``/``ci_high``."""
        frame = head_frame({self.config.metric: self.ablated}, None)
        frame = frame.drop(columns=["frequency", "angle"])
        rows, cols = frame["layer"].to_numpy(), frame["head"].to_numpy()
        frame["effect"] = self.effect.double().numpy()[rows, cols]
        frame["importance"] = self.importance.double().numpy()[rows, cols]
        if self.effect_per_prompt is not None:
            unc = self.uncertainty()
            for key, tensor in (("se", unc.se), ("ci_low", unc.low), ("ci_high", unc.high)):
                frame[key] = tensor.double().numpy()[rows, cols]
        frame["baseline"] = self.baseline
        return frame

    def _headline(self) -> list[str]:
        if not torch.isfinite(self.ablated).any():
            return []
        layer, head = self.top_head
        se = float(self.effect_se[layer, head])
        return [f"baseline {self.config.metric}={number(self.baseline)}",
                f"top {layer}.{head} Δ {self.top_effect:+.3g}"
                + ("" if math.isnan(se) else f"±{se:.2g}")]


def _finite(value: float) -> float | None:
    """``None`` for nan/inf, so that the JSON stays standard."""
    return value if math.isfinite(value) else None


# ---- each head ablated alone -----------------------------------------------------------------


def _values(value: Any, name: str, n_prompts: int) -> tuple[float, Tensor | None]:
    """A metric's value as ``(mean, per-prompt values or None)``: a scalar, or one value per
    prompt (kept, for standard errors and intervals)."""
    value = torch.as_tensor(value).detach()
    if value.numel() == 1:
        return float(value), None
    if value.ndim != 1 or value.shape[0] != n_prompts:
        raise InvalidSelectionError(
            f"metric {name!r} must return a scalar or one value per prompt ([{n_prompts}]), "
            f"got shape {tuple(value.shape)}")
    value = value.double().cpu()
    return float(value.mean()), value


def _as_batch(model: HookedModel, batch: Any, predict_last: bool = False) -> ImportanceBatch:
    """``batch`` as an :class:`ImportanceBatch`; raw prompts/tokens with ``predict_last``
    (the built-in ``loss``/``accuracy``): each prompt's last token is its answer, predicted
    from the tokens before it (what ``lens-possym heads --prompts`` does)."""
    if isinstance(batch, ImportanceBatch):
        return replace(batch, tokens=as_tokens(model, batch.tokens))
    if hasattr(batch, "attribute_ids") and hasattr(batch, "query_pair"):  # a BindingTask
        return _as_batch(model, ImportanceBatch.from_binding(batch))
    if hasattr(batch, "importance_batch"):
        return _as_batch(model, batch.importance_batch())
    tokens = as_tokens(model, batch)
    if predict_last:
        if tokens.shape[1] < 2:
            raise InvalidSelectionError(
                f"prompts of {tokens.shape[1]} token(s): the loss and accuracy of raw tokens "
                "predict each prompt's last token from the ones before it, so each needs at "
                "least 2")
        return ImportanceBatch(tokens=tokens[:, :-1], answers=tokens[:, -1])
    return ImportanceBatch(tokens=tokens)


def _chunk_hook(members: list[tuple[int, int]], n_prompts: int, replacement: Tensor,
                position_mask: Tensor) -> HookFn:
    """``hook_z`` hook for a stacked batch: copy ``c`` ablates head ``h`` for ``(c, h)`` in
    ``members`` (rows ``c·n_prompts .. (c+1)·n_prompts``), at the masked positions."""

    def hook(z: Float[Tensor, "batch pos head_index d_head"], hook: Any = None) -> Tensor:
        rows = torch.zeros(z.shape[0], z.shape[2], dtype=torch.bool, device=z.device)
        for copy, head in members:
            rows[copy * n_prompts:(copy + 1) * n_prompts, head] = True
        where = rows[:, None, :, None] & position_mask.to(z.device)[None, :, None, None]
        return torch.where(where, replacement.to(device=z.device, dtype=z.dtype), z)

    return hook


@boundary
def head_importance(model: HookedModel, batch: ImportanceBatch | ModelInput | Any,
                    metric: str | MetricFn | None = None, *,
                    reference: ModelInput | Mapping[str, Tensor] | None = None,
                    means: HeadMeans | None = None, config: ImportanceConfig | None = None,
                    progress: bool = True, **settings: Any) -> HeadImportance:
    """Ablate every query head alone (zero or mean) and measure ``metric``.

    Args:
        model: any ``HookedRootModule`` with ``blocks.{L}.attn.hook_z`` and ``cfg.n_heads``
            (bridges, toy models, encoders).
        batch: an :class:`ImportanceBatch`, a binding task (its other attributes are the
            distractors), or prompts/tokens ``[batch, pos]``: with ``"loss"`` or
            ``"accuracy"`` each prompt's last token is its answer, predicted from the
            ``pos − 1`` tokens before it (as ``lens-possym heads --prompts``); a custom
            metric gets them whole.
        metric: a name in :data:`METRICS` or a callable ``metric(logits, batch) -> scalar``
            (default: ``config.metric``, ``"logit_diff"`` without a config)
            (``logits`` ``[batch, pos, d_vocab]``, only the last position when
            ``last_token_only`` on a bridge; ``batch`` the :class:`ImportanceBatch`).
        reference: prompts/tokens/cache for ``mode="mean"`` (or precomputed ``means``).
        config: an :class:`ImportanceConfig`; ``settings`` override its fields
            (``mode="mean"``, ``heads_per_pass=16``, ``positions=[-1]``, ...).
        progress: show a tqdm progress bar (default; ``False`` hides it).

    Returns:
        :class:`HeadImportance` with ``[n_layers, n_heads]`` values.

    Raises:
        InvalidSelectionError: unknown settings, a bad metric, layer or position, or
            ``mode="mean"`` without a reference.
    """
    from tqdm.auto import tqdm

    if config is not None and not isinstance(config, ImportanceConfig):
        raise InvalidSelectionError(
            f"config must be an ImportanceConfig, got {type(config).__name__}; pass "
            "ImportanceConfig(...) or the settings as keywords")
    if metric is None:
        metric = config.metric if config is not None else ImportanceConfig.metric
    name = metric if isinstance(metric, str) else _callable_name(metric)
    try:
        config = replace(config or ImportanceConfig(), metric=name, **settings)
    except TypeError:
        known = sorted(f.name for f in fields(ImportanceConfig))
        raise InvalidSelectionError(
            f"unknown setting(s) {sorted(settings)}; known: {known}") from None
    metric_fn = importance_metric(name, per_prompt=True) if isinstance(metric, str) else metric
    data = _as_batch(model, batch, predict_last=isinstance(metric, str) and name in
                     ("loss", "accuracy"))
    names, counts = z_hook_names(model), head_counts(model)
    n_layers, n_heads = len(counts), counts[0].n_heads
    layers = list(range(n_layers)) if config.layers is None else [
        layer % n_layers if -n_layers <= layer < n_layers else _bad_layer(layer, n_layers)
        for layer in config.layers]
    n_pos, n_prompts = data.tokens.shape[1], data.n_prompts
    position_mask = torch.zeros(n_pos, dtype=torch.bool)
    position_mask[as_positions(config.positions, n_pos, "position")] = True

    bridge = hasattr(model, "original_model")
    keep = {"logits_to_keep": 1} if (bridge and config.last_token_only) else {}
    ablated = torch.full((n_layers, n_heads), float("nan"), dtype=torch.float64)
    start = time.perf_counter()
    with torch.no_grad():
        if bridge:
            resid = [f"blocks.{layer}.hook_resid_pre" for layer in layers]
            logits, cache = model.run_with_cache(data.tokens, names_filter=resid, **keep)
            starts = {layer: cache[f"blocks.{layer}.hook_resid_pre"] for layer in layers}
        else:
            logits = model(data.tokens)
        baseline, baseline_prompts = _values(metric_fn(logits, data), name, n_prompts)
        per_prompt = None if baseline_prompts is None else torch.full(
            (n_layers, n_heads, n_prompts), float("nan"), dtype=torch.float64)
        if config.mode == "mean" and means is None:
            if reference is None:
                raise InvalidSelectionError(
                    "mode='mean' needs reference=<prompts or tokens> (or means=head_means(...))")
            means = head_means(model, reference, layers, per_position=config.per_position)
        replacements = {}
        for layer in layers:
            if config.mode == "zero":
                replacements[layer] = torch.zeros(())
            else:
                mean = means.replacement(layer, n_pos)
                replacements[layer] = mean[None] if mean.ndim == 3 else mean[None, None]
        todo = [(layer, head) for layer in sorted(set(layers)) for head in range(n_heads)]
        per_pass = config.heads_per_pass
        n_passes = 0
        bar = tqdm(total=len(todo), desc=f"{config.mode}-ablating heads", disable=not progress)
        try:
            for i in range(0, len(todo), per_pass):
                chunk = todo[i:i + per_pass]
                by_layer: dict[int, list[tuple[int, int]]] = {}
                for copy, (layer, head) in enumerate(chunk):
                    by_layer.setdefault(layer, []).append((copy, head))
                hooks = [(names[layer], _chunk_hook(members, n_prompts, replacements[layer],
                                                    position_mask))
                         for layer, members in by_layer.items()]
                first = chunk[0][0]
                if bridge:
                    stacked = starts[first].repeat(len(chunk), *([1] * (starts[first].ndim - 1)))
                    out = model.run_with_hooks(stacked, start_at_layer=first, fwd_hooks=hooks,
                                               **keep)
                else:
                    out = model.run_with_hooks(data.tokens.repeat(len(chunk), 1), fwd_hooks=hooks)
                n_passes += 1
                for copy, (layer, head) in enumerate(chunk):
                    rows = out[copy * n_prompts:(copy + 1) * n_prompts]
                    mean, prompts = _values(metric_fn(rows, data), name, n_prompts)
                    ablated[layer, head] = mean
                    if per_prompt is not None:
                        if prompts is None:
                            raise InvalidSelectionError(
                                f"metric {name!r} returned one value per prompt on the clean "
                                "run but a scalar with a head ablated")
                        per_prompt[layer, head] = prompts
                bar.update(len(chunk))
        finally:
            bar.close()
    return HeadImportance(config=config, baseline=baseline, ablated=ablated,
                          n_prompts=n_prompts, seconds=time.perf_counter() - start,
                          n_passes=n_passes, info={"batch": data.name} if data.name else {},
                          per_prompt=per_prompt, baseline_per_prompt=baseline_prompts)


def _callable_name(metric: Any) -> str:
    if not callable(metric):
        raise InvalidSelectionError(
            f"metric must be one of {', '.join(METRICS)} or a callable metric(logits, batch), "
            f"got {metric!r}")
    name = getattr(metric, "__name__", "")
    return name if name and not name.startswith("<") else "custom"


def _bad_layer(layer: int, n_layers: int) -> int:
    raise InvalidSelectionError(
        f"layer {layer} out of range: the model has {n_layers} layers (0..{n_layers - 1})")
