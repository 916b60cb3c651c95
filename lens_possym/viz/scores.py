"""Figures of positional/symbolic scores (paper A, Figure 1 A, B, C, E and F).

Every function draws into an ``ax`` (or ``axes``) it is given, or makes a figure, and
returns what it drew into.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np
import torch
from torch import Tensor

from .._checks import boundary
from .._ids import as_int, head_name
from ..errors import InvalidSelectionError
from ..interventions.selection import parse_heads
from ..resolved import Resolved, resolve
from ..scores.results import PosSymScores
from ..typing import HookedModel
from ._axes import axes_or_new, to_numpy
from .frequency import plot_frequency_profile
from .._inputs import as_heads, as_tokens
from ..capture import capture_attention_inputs
from ..scores.profile import resolve_exclude_bos
from ..scores.crosslogits import cross_logit_factors
from ..scores.swaps import swap_set

if TYPE_CHECKING:
    from matplotlib.axes import Axes

__all__ = [
    "plot_plane",
    "plot_score_heatmaps",
    "plot_frequency_scores",
    "plot_frequency_plane",
    "plot_swap_attention",
    "pick_example_heads",
]


def _square(ax) -> None:
    ax.set_xlim(-0.02, 1.02)
    ax.set_ylim(-0.02, 1.02)
    ax.set_aspect("equal")
    ax.set_xlabel("positional score $s_{POS}$")
    ax.set_ylabel("symbolic score $s_{SYM}$")


def plot_plane(scores: PosSymScores, *, ax=None, annotate: int = 0, cmap: str = "viridis") -> "Axes":
    """Every head as a point ``(s_POS, s_SYM)``, coloured by layer (Figure 1A).

    ``annotate`` labels that many heads at each corner (most positional, most symbolic)
    with ``layer:head``.
    """
    import matplotlib.pyplot as plt

    ax = axes_or_new(ax, (5, 4.5))
    layers = torch.arange(scores.n_layers)[:, None].expand(-1, scores.n_heads)
    keep = scores.pos.isfinite() & scores.sym.isfinite()
    points = ax.scatter(to_numpy(scores.pos[keep]), to_numpy(scores.sym[keep]),
                        c=to_numpy(layers[keep]), cmap=cmap, s=28, edgecolors="k", linewidths=0.3,
                        vmin=0, vmax=max(scores.n_layers - 1, 1))
    plt.colorbar(points, ax=ax, label="layer", shrink=0.8)
    _square(ax)
    ax.plot([0, 1], [1, 0], color="0.8", lw=0.8, zorder=0)
    for (x, y), names in _label_groups(scores, annotate).items():
        ax.annotate(", ".join(names), (x, y), fontsize="x-small", xytext=(3, 3),
                    textcoords="offset points")
    ax.set_title(f"positional-symbolic plane ({int(keep.sum())} heads)", fontsize="medium")
    return ax


def _label_groups(scores: PosSymScores, k: int, radius: float = 0.06
                  ) -> dict[tuple[float, float], list[str]]:
    """The ``k`` most positional and ``k`` most symbolic heads' labels, heads closer than
    ``radius`` on the plane sharing one label (``"3:1, 4:2"``), so labels do not overlap."""
    groups: dict[tuple[float, float], list[str]] = {}
    heads = list(dict.fromkeys(scores.ranked_heads("pos", k) + scores.ranked_heads("sym", k)))
    for layer, head in heads:
        x, y = float(scores.pos[layer, head]), float(scores.sym[layer, head])
        near = next((p for p in groups if math.hypot(p[0] - x, p[1] - y) < radius), None)
        if near is None:
            groups[(x, y)] = [head_name(layer, head)]
        elif len(groups[near]) < 3:
            groups[near].append(head_name(layer, head))
        elif not groups[near][-1].startswith("+"):
            groups[near].append("+")
    return groups


def plot_score_heatmaps(scores: PosSymScores, *, axes: Sequence[Any] | None = None) -> "Sequence[Axes]":
    """Layer × head heatmaps of s_POS and s_SYM side by side (Figure 1B)."""
    import matplotlib.pyplot as plt

    if axes is None:
        height = max(3.0, 0.22 * scores.n_layers + 1.2)
        _, axes = plt.subplots(1, 2, figsize=(2.2 + 0.5 * scores.n_heads * 2, height),
                               constrained_layout=True)
    for ax, name, values in zip(axes, ("$s_{POS}$", "$s_{SYM}$"), (scores.pos, scores.sym)):
        image = ax.imshow(to_numpy(values), vmin=0, vmax=1, cmap="magma", aspect="auto",
                          interpolation="nearest")
        ax.set_xlabel("head")
        ax.set_ylabel("layer")
        ax.set_xticks(range(scores.n_heads))
        ax.set_title(name, fontsize="medium")
        plt.colorbar(image, ax=ax, shrink=0.8)
    return axes


def scored_head(scores: PosSymScores, layer: Any, head: Any) -> tuple[int, int]:
    """``(layer, head)`` checked against what ``scores`` holds (per frequency)."""
    if scores.pos_freq is None:
        raise InvalidSelectionError("these scores have no per-frequency part "
                                    "(per_frequency=False); compute them with per_frequency=True")
    layer, head = as_int(layer, "a layer"), as_int(head, "a head")
    if layer not in scores.layers:
        raise InvalidSelectionError(
            f"layer {layer} was not scored; these scores hold layers {scores.layers}")
    if not 0 <= head < scores.n_heads:
        raise InvalidSelectionError(
            f"head {head} out of range: the scores have {scores.n_heads} heads per layer "
            f"(0..{scores.n_heads - 1})")
    return layer, head


def plot_frequency_scores(scores: PosSymScores, layer: int, head: int, *, ax=None) -> "Axes":
    """s_POS and s_SYM of each frequency id of one head (Figure 1C), angles on top."""
    layer, head = scored_head(scores, layer, head)
    ax = axes_or_new(ax, (7, 3.5))
    angles = scores.angles[layer]
    keep = angles.isfinite()
    plot_frequency_profile(scores.pos_freq[layer, head][keep], angles[keep], ax=ax,
                           label="$s_{POS}$", color="tab:red")
    plot_frequency_profile(scores.sym_freq[layer, head][keep], angles[keep], ax=ax,
                           label="$s_{SYM}$", color="tab:green", ylabel="score")
    ax.set_ylim(-0.02, 1.02)
    ax.set_title(f"head {head_name(layer, head)} by frequency (whole head: "
                 f"pos {float(scores.pos[layer, head]):.2f}, "
                 f"sym {float(scores.sym[layer, head]):.2f})", fontsize="medium")
    return ax


def plot_frequency_plane(scores: PosSymScores, layer: int, head: int, *, ax=None) -> "Axes":
    """Each frequency id of one head as a point on the plane, coloured by id (Figure 1F)."""
    import matplotlib.pyplot as plt

    layer, head = scored_head(scores, layer, head)
    ax = axes_or_new(ax, (5, 4.5))
    pos, sym = scores.pos_freq[layer, head], scores.sym_freq[layer, head]
    keep = pos.isfinite()
    ids = np.arange(len(pos))[to_numpy(keep)]
    points = ax.scatter(to_numpy(pos[keep]), to_numpy(sym[keep]), c=ids, cmap="plasma", s=22,
                        edgecolors="k", linewidths=0.2)
    plt.colorbar(points, ax=ax, label="frequency id (0 = fastest)", shrink=0.8)
    ax.scatter([float(scores.pos[layer, head])], [float(scores.sym[layer, head])], marker="*",
               s=180, c="white", edgecolors="k", label="whole head", zorder=3)
    ax.legend(fontsize="small", loc="lower left")
    _square(ax)
    ax.set_title(f"head {head_name(layer, head)}, one point per frequency", fontsize="medium")
    return ax


def pick_example_heads(scores: PosSymScores) -> dict[str, tuple[int, int]]:
    """A clearly positional, a clearly symbolic and a mixed head (both scores high).

    Positional: largest ``s_POS − s_SYM``; symbolic: largest ``s_SYM − s_POS`` (to two
    decimals, ties broken by positional share, as :meth:`PosSymScores.ranked_heads` ranks); mixed:
    largest ``min(s_POS, s_SYM)`` (paper A reads these as near-uniform attention).
    """
    both = torch.minimum(scores.pos, scores.sym)
    flat = torch.where(both.isfinite(), both, torch.tensor(-1.0, dtype=both.dtype)).flatten()
    mixed = int(flat.argmax())
    return {
        "positional": scores.ranked_heads("sym-pos", 1, descending=False)[0],
        "symbolic": scores.ranked_heads("sym-pos", 1)[0],
        "mixed": (mixed // scores.n_heads, mixed % scores.n_heads),
    }


@boundary
def plot_swap_attention(model: HookedModel | Resolved, tokens: torch.Tensor, heads: dict[str, tuple[int, int]], *,
                        swap: str = "token", n_blocks: int = 8, exclude_bos: bool | str = "auto",
                        axes: Sequence[Any] | None = None) -> "Sequence[Axes]":
    """The query row's attention before and after the swap that weighs most (Figure 1E).

    For each named head (e.g. from :func:`pick_example_heads`), the clean attention of the
    last token over the first prompt of ``tokens`` and the attention after the swap with
    the largest weight (the one that decides the score at small ``tau``): for a positional
    head the mass stays put, for a symbolic one it moves with the content.
    """
    import matplotlib.pyplot as plt

    resolved = resolve(model)
    model = resolved.model
    tokens = as_tokens(model, tokens)[:1]
    drop_bos = resolve_exclude_bos(model, tokens, exclude_bos)
    if not isinstance(heads, dict) or not heads:
        raise InvalidSelectionError(
            f"heads must be {{name: (layer, head)}} (e.g. pick_example_heads(scores)), got "
            f"{heads!r}")
    specs = resolved.specs
    for label, pair in heads.items():
        if not (isinstance(pair, tuple) and len(pair) == 2 and pair[1] is not None
                and len(parse_heads([pair], specs)) == 1):
            raise InvalidSelectionError(
                f"heads[{label!r}] must be one (layer, head) pair of this model, got {pair!r}")
    heads = {label: parse_heads([pair], specs)[0] for label, pair in heads.items()}
    layers = sorted({layer for layer, _ in heads.values()})
    captured = capture_attention_inputs(resolved, tokens, layers)
    if axes is None:
        _, axes = plt.subplots(len(heads), 1, figsize=(9, 1.9 * len(heads)),
                               constrained_layout=True, squeeze=False)
        axes = axes[:, 0]
    n_pos = tokens.shape[1]
    for ax, (label, (layer, head)) in zip(axes, heads.items()):
        before, after, first, second = top_swap_attention(
            captured[layer], [head], swap=swap, n_blocks=n_blocks, exclude_bos=drop_bos)[head]
        before, after = to_numpy(before), to_numpy(after)
        x = np.arange(n_pos)
        ax.bar(x - 0.2, before, width=0.4, color="0.6", label="clean")
        ax.bar(x + 0.2, after, width=0.4, color="tab:blue", label="after swap")
        for group, color in ((first, "tab:red"), (second, "tab:green")):
            for p in group.tolist():
                ax.axvspan(p - 0.5, p + 0.5, color=color, alpha=0.12, lw=0)
        ax.set_xlim(-0.5, n_pos - 0.5)
        ax.set_ylabel("attention")
        ax.set_title(f"{label} head {head_name(layer, head)}: swap {_span(first)} ↔ {_span(second)}",
                     fontsize="small")
        ax.legend(fontsize="x-small", loc="upper left")
    axes[-1].set_xlabel("key position")
    return axes


@boundary
def top_swap_attention(inputs, heads: Sequence[int], *, swap: str = "token", n_blocks: int = 8,
                       exclude_bos: bool = False
                       ) -> dict[int, tuple[Tensor, Tensor, Tensor, Tensor]]:
    """The query row's attention before and after the swap that weighs most, per head.

    Args:
        inputs: one layer's captured :class:`~lens_possym.capture.AttentionInputs` (the
            first prompt is used).
        heads: query heads of that layer.
        swap, n_blocks, exclude_bos: the swap set (as in :class:`ScoreConfig`, BOS resolved).

    Returns:
        ``{head: (before [key_pos], after [key_pos], first, second)}``: the clean and swapped
        attention rows and the key positions of the two swapped groups.
    """
    heads = as_heads(heads, inputs.spec.n_heads, inputs.spec.layer)
    factors = cross_logit_factors(inputs, list(heads))
    swaps = swap_set(swap, factors.query_position, factors.visible, exclude_bos=exclude_bos,
                     n_blocks=n_blocks)
    clean = torch.softmax(factors.head_diagonal(), -1)[0]  # [head, key_pos]
    out = {}
    for i, head in enumerate(heads):
        weight = (clean[i][swaps.first].mean(-1) - clean[i][swaps.second].mean(-1)).abs()
        top = int(weight.argmax())
        first, second = swaps.first[top], swaps.second[top]
        before, after = factors.attention_after_swap(first, second)
        out[head] = (before[0, i].detach().cpu(), after[0, i].detach().cpu(), first, second)
    return out


def _span(group: torch.Tensor) -> str:
    values = group.tolist()
    return str(values[0]) if len(values) == 1 else f"{values[0]}–{values[-1]}"
