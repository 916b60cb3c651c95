r"""Head ablation: replace chosen query heads' outputs by zero or by their mean.

A head's output is its row of ``blocks.{L}.attn.hook_z`` (``[batch, pos, head_index,
d_head]``, ``pattern · v`` before the output projection ``W_O``). The layer's attention
output is ``Σ_h z_h W_O^h (+ b_O)``, so

``zero``
    ``z_h ← 0``: the head's term ``z_h W_O^h`` is removed, the bias ``b_O`` stays. This is
    paper B's probe (it zeroed the head's value rows, which zeroes ``z_h`` the same way).
``mean``
    ``z_h ← E_ref[z_h]``, the mean over a reference set of prompts, pooled over prompts and
    positions ``1..`` (position 0 often holds an attention-sink outlier), or one mean per
    position with ``per_position=True``: the head keeps its average contribution and loses
    everything that depends on the input.

**Query heads, not KV heads.** ``hook_z`` has one row per *query* head on every bridge
family and on the toy model, also under grouped-query attention (checked on each pass:
the hook raises if its tensor does not have the model's ``n_heads`` rows). Editing a row
therefore touches that query head alone; the other heads of its KV group keep their
outputs bit for bit. (Paper B's MLA variant zeroed a slice of the shared latent instead,
which hit every head at once: see ``shared/reference/companion_code.md``.)

Nothing here needs RoPE: any ``HookedRootModule`` with ``blocks.{L}.attn.hook_z`` hooks and
``cfg.n_heads`` works (bridges, :class:`~lens_possym.training.toy.ToyTransformer`, encoders).
``positions`` restricts the ablation to some positions (negatives count from the end).
"""

from __future__ import annotations

import re
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Iterator, Literal, Mapping, Sequence

import torch
from jaxtyping import Float
from torch import Tensor

from .._inputs import ModelInput, as_positions, as_tokens
from ..errors import InvalidSelectionError
from ..typing import HookedModel, HookFn
from .selection import HeadsLike, parse_heads

__all__ = [
    "HEAD_MODES",
    "HeadAblationMode",
    "HeadMeans",
    "z_hook_names",
    "head_counts",
    "head_means",
    "ablate_heads_hook",
    "ablate_heads_hooks",
    "ablate_heads",
]

HeadAblationMode = Literal["zero", "mean"]
HEAD_MODES: tuple[str, ...] = ("zero", "mean")
_Z_HOOK = re.compile(r"^blocks\.(\d+)\.attn\.hook_z$")


def check_head_mode(mode: str) -> None:
    if mode not in HEAD_MODES:
        raise InvalidSelectionError(
            f"unknown head ablation mode {mode!r}; use one of {', '.join(HEAD_MODES)}"
        )


def z_hook_names(model: HookedModel) -> dict[int, str]:
    """``{layer: "blocks.{layer}.attn.hook_z"}`` for every layer the model has that hook in.

    Raises:
        InvalidSelectionError: the model has no ``hook_dict`` or no ``hook_z`` hooks.
    """
    hook_dict = getattr(model, "hook_dict", None)
    if not isinstance(hook_dict, Mapping):
        raise InvalidSelectionError(
            f"{type(model).__name__} is not a TransformerLens HookedRootModule (no hook_dict); "
            "head ablation needs blocks.{L}.attn.hook_z hooks"
        )
    found = {int(m.group(1)): name for name in hook_dict if (m := _Z_HOOK.match(name))}
    if not found:
        raise InvalidSelectionError(
            f"{type(model).__name__} has no blocks.{{L}}.attn.hook_z hooks, so its heads' "
            "outputs cannot be ablated"
        )
    return dict(sorted(found.items()))


@dataclass(frozen=True)
class _HeadCount:
    """The one attribute of a ``RopeSpec`` that :func:`parse_heads` reads."""

    n_heads: int


def head_counts(model: HookedModel) -> list[_HeadCount]:
    """Query heads per layer, from ``model.cfg.n_heads`` and the model's ``hook_z`` layers."""
    layers = z_hook_names(model)
    n_heads = getattr(getattr(model, "cfg", None), "n_heads", None)
    if not isinstance(n_heads, int) or n_heads < 1:
        raise InvalidSelectionError(
            f"{type(model).__name__} has no cfg.n_heads; head ablation needs the number of "
            "query heads per layer"
        )
    if list(layers) != list(range(len(layers))):
        raise InvalidSelectionError(
            f"the model's hook_z layers {list(layers)} are not 0..{len(layers) - 1}"
        )
    return [_HeadCount(n_heads) for _ in layers]


def _by_layer(model: HookedModel, heads: HeadsLike) -> dict[int, list[int]]:
    """Parse ``heads`` (``"12.0,13.1"``, ``"12.*"``, ``[(12, 0)]``, ...) to ``{layer: [heads]}``."""
    out: dict[int, list[int]] = {}
    for layer, head in parse_heads(heads, head_counts(model)):
        out.setdefault(layer, []).append(head)
    return out


@dataclass(frozen=True)
class HeadMeans:
    """Mean head outputs over a reference set (for ``mode="mean"``).

    Attributes:
        z: ``{layer: [n_heads, d_head]}`` pooled, or ``{layer: [pos, n_heads, d_head]}``
            per position.
        per_position: which of the two.
        n_prompts: size of the reference set.
    """

    z: dict[int, Tensor]
    per_position: bool
    n_prompts: int

    def replacement(self, layer: int, n_pos: int
                    ) -> Tensor:
        """The mean to write at ``layer`` for a run of ``n_pos`` positions:
        ``[n_pos, n_heads, d_head]`` per position, else ``[n_heads, d_head]``."""
        if layer not in self.z:
            raise InvalidSelectionError(
                f"no mean head outputs for layer {layer}; compute them with head_means(model, "
                f"reference, layers=[..., {layer}])"
            )
        mean = self.z[layer]
        if self.per_position:
            if n_pos > mean.shape[0]:
                raise InvalidSelectionError(
                    f"per-position means cover {mean.shape[0]} positions but the run has "
                    f"{n_pos}; use a reference at least as long, or pooled means"
                )
            return mean[:n_pos]
        return mean


def head_means(model: HookedModel, reference: ModelInput | Mapping[str, Tensor],
               layers: int | Sequence[int] | None = None, *, per_position: bool = False
               ) -> HeadMeans:
    """Mean ``hook_z`` per query head over ``reference`` (prompts, tokens or a cache).

    Pooled means average over prompts and positions ``1..`` (position 0 is skipped: it
    often carries an attention-sink outlier); ``per_position=True`` averages over prompts
    only, one mean per position.
    """
    names = z_hook_names(model)
    chosen = list(names) if layers is None else (
        [layers] if isinstance(layers, int) else [int(x) for x in layers])
    bad = [layer for layer in chosen if layer not in names]
    if bad or not chosen:
        raise InvalidSelectionError(
            f"layer {bad or layers} out of range: the model has {len(names)} layers")
    is_cache = isinstance(reference, Mapping) or (
        hasattr(reference, "keys") and not isinstance(reference, Tensor))
    if is_cache:
        try:
            zs = {layer: reference[names[layer]] for layer in chosen}
        except KeyError as exc:
            raise InvalidSelectionError(
                f"the reference cache lacks {exc}; cache the layers' hook_z or pass the "
                "reference prompts"
            ) from None
    else:
        tokens = as_tokens(model, reference)
        with torch.no_grad():
            _, cache = model.run_with_cache(tokens, names_filter=[names[layer] for layer in chosen])
        zs = {layer: cache[names[layer]] for layer in chosen}
    means: dict[int, Tensor] = {}
    for layer, z in zs.items():
        z = z.detach()
        if per_position:
            means[layer] = z.mean(0)
        else:
            if z.shape[1] < 2:
                raise InvalidSelectionError(
                    "pooled means skip position 0, so the reference needs at least 2 tokens")
            means[layer] = z[:, 1:].mean((0, 1))
    return HeadMeans(z=means, per_position=per_position, n_prompts=next(iter(zs.values())).shape[0])


def ablate_heads_hook(heads: int | Sequence[int], mode: HeadAblationMode = "zero", *,
                      mean: Tensor | None = None,
                      positions: int | Sequence[int] | Tensor | None = None,
                      n_heads: int | None = None) -> HookFn:
    """A hook for ``blocks.{L}.attn.hook_z`` that ablates query ``heads`` of that layer.

    Args:
        heads: query heads of the layer.
        mode: ``"zero"`` or ``"mean"`` (module docstring).
        mean: for ``"mean"``: ``[n_heads, d_head]`` or ``[pos, n_heads, d_head]`` (one
            layer of :attr:`HeadMeans.z`, or :meth:`HeadMeans.replacement`).
        positions: ablate only there (all by default; negatives count from the end).
        n_heads: if given, the hook checks that ``hook_z`` has that many head rows (so a
            hook attached to a KV-head tensor fails instead of ablating a group).
    """
    check_head_mode(mode)
    head_list = [heads] if isinstance(heads, int) else [int(h) for h in heads]
    if mode == "mean" and mean is None:
        raise InvalidSelectionError("mode='mean' needs mean=<[n_heads, d_head] mean of hook_z>")

    def hook(z: Float[Tensor, "batch pos head_index d_head"], hook: Any = None) -> Tensor:
        if z.ndim != 4 or (n_heads is not None and z.shape[2] != n_heads):
            raise InvalidSelectionError(
                f"ablate_heads_hook expects hook_z [batch, pos, head_index, d_head] with "
                f"{n_heads or 'one row per query'} head(s); got {tuple(z.shape)}"
            )
        bad = [h for h in head_list if not 0 <= h < z.shape[2]]
        if bad:
            raise InvalidSelectionError(f"head {bad} out of range: hook_z has {z.shape[2]} heads")
        pos = as_positions(positions, z.shape[1], "position").to(z.device)
        out = z.clone()
        if mode == "zero":
            out[:, pos[:, None], head_list] = 0
        else:
            value = mean.to(device=z.device, dtype=z.dtype)
            if value.ndim == 3:  # per position
                if value.shape[0] < z.shape[1]:
                    raise InvalidSelectionError(
                        f"per-position means cover {value.shape[0]} positions, the run has "
                        f"{z.shape[1]}")
                value = value[pos][:, head_list]
            else:
                value = value[head_list]
            out[:, pos[:, None], head_list] = value
        return out

    return hook


def ablate_heads_hooks(model: HookedModel, heads: HeadsLike, mode: HeadAblationMode = "zero", *,
                       reference: ModelInput | Mapping[str, Tensor] | None = None,
                       means: HeadMeans | None = None, per_position: bool = False,
                       positions: int | Sequence[int] | Tensor | None = None
                       ) -> list[tuple[str, HookFn]]:
    """Hooks ablating query ``heads`` (e.g. ``"12.0,13.1"``, ``"12.*"``, ``[(12, 0)]``).

    Args:
        mode: ``"zero"`` or ``"mean"``; ``"mean"`` needs ``reference`` (prompts, tokens or
            a cache with the layers' ``hook_z``) or precomputed ``means``.
        per_position: with ``reference``, one mean per position instead of pooled.
        positions: ablate only there.

    Raises:
        InvalidSelectionError: an unknown mode, a head or layer out of range, or
            ``"mean"`` without a reference.
    """
    check_head_mode(mode)
    chosen = _by_layer(model, heads)
    names = z_hook_names(model)
    n_heads = head_counts(model)[0].n_heads
    if mode == "mean" and means is None:
        if reference is None:
            raise InvalidSelectionError(
                "mode='mean' needs reference=<prompts or tokens> (or means=head_means(...))")
        means = head_means(model, reference, list(chosen), per_position=per_position)
    hooks = []
    for layer, hs in chosen.items():
        mean = None
        if mode == "mean":
            if layer not in means.z:
                raise InvalidSelectionError(f"the means given have no layer {layer}")
            mean = means.z[layer]
        hooks.append((names[layer], ablate_heads_hook(hs, mode, mean=mean, positions=positions,
                                                      n_heads=n_heads)))
    return hooks


@contextmanager
def ablate_heads(model: HookedModel, heads: HeadsLike, mode: HeadAblationMode = "zero", *,
                 reference: ModelInput | Mapping[str, Tensor] | None = None,
                 means: HeadMeans | None = None, per_position: bool = False,
                 positions: int | Sequence[int] | Tensor | None = None) -> Iterator[Any]:
    """Context manager: inside the block, ``heads`` are ablated (hooks removed on exit).

    Example::

        with lp.interventions.ablate_heads(model, "5.0,7.*", mode="zero"):
            logits = model(tokens)
    """
    hooks = ablate_heads_hooks(model, heads, mode, reference=reference, means=means,
                               per_position=per_position, positions=positions)
    with model.hooks(fwd_hooks=hooks):
        yield model
