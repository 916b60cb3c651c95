"""Interactive figures (plotly): hover a head for its numbers, click it to select it.

Each function returns a ``plotly.graph_objects.Figure``; in a notebook it displays as is
(plotly renders offline when its JavaScript is inlined, ``fig.show()`` with the notebook
renderer), and the profile report puts them on one page with the JavaScript inlined once
and wires clicks to a detail panel (:mod:`lens_possym.report.explorer`). Points and cells
carry ``customdata = [layer, head]`` (the atlas: its row label), so a click handler knows
the head.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

from jaxtyping import Float
from torch import Tensor

from .._checks import boundary
from .._ids import head_name
from ..errors import InvalidSelectionError
from ..scores.results import PosSymScores
from ._axes import angle_label, to_numpy
from .atlas import ATLAS_VIEWS, atlas_values
from .scores import scored_head

if TYPE_CHECKING:
    import plotly.graph_objects as go

__all__ = ["plane_figure", "heatmaps_figure", "atlas_figure", "frequency_profile_figure",
           "swap_attention_figure", "PLOTLY_CONFIG"]

#: the toolbar without the plotly logo link (a report opens offline: nothing to follow)
PLOTLY_CONFIG = {"displaylogo": False,
                 "modeBarButtonsToRemove": ["select2d", "lasso2d"]}

_COLORSCALES = {"magma": "Magma", "RdBu_r": "RdBu_r", "viridis": "Viridis"}


def _go():
    import plotly.graph_objects as go

    return go


def _round(values: Tensor, digits: int = 4) -> list:
    """Nested lists with ``nan`` as ``None`` (plotly draws a gap), rounded to keep pages small."""
    array = to_numpy(values.double()).round(digits)
    return [[None if x != x else float(x) for x in row] for row in array.tolist()] \
        if array.ndim == 2 else [None if x != x else float(x) for x in array.tolist()]


def _hover_numbers(scores: PosSymScores, layer: int, head: int) -> str:
    text = (f"head {head_name(layer, head)}<br>s_POS {float(scores.pos[layer, head]):.3f}"
            f"<br>s_SYM {float(scores.sym[layer, head]):.3f}")
    if scores.exclusion_ratio is not None:
        text += f"<br>Var/bound {float(scores.exclusion_ratio[layer, head]):.3f}"
    if scores.positional_share is not None:
        text += f"<br>positional share {float(scores.positional_share[layer, head]):.3f}"
    return text


def plane_figure(scores: PosSymScores, *, height: int = 440, width: int = 480) -> "go.Figure":
    """Every scored head as a point ``(s_POS, s_SYM)`` coloured by layer; hover: its numbers."""
    go = _go()
    heads = [(layer, head) for layer in range(scores.n_layers) for head in range(scores.n_heads)
             if bool(scores.pos[layer, head].isfinite())]
    fig = go.Figure(go.Scatter(
        x=[round(float(scores.pos[h]), 4) for h in heads],
        y=[round(float(scores.sym[h]), 4) for h in heads],
        mode="markers", customdata=[list(h) for h in heads],
        text=[_hover_numbers(scores, *h) for h in heads], hovertemplate="%{text}<extra></extra>",
        marker=dict(color=[h[0] for h in heads], colorscale="Viridis", size=9,
                    line=dict(width=0.5, color="black"),
                    colorbar=dict(title="layer", thickness=12)),
    ))
    fig.add_shape(type="line", x0=0, y0=1, x1=1, y1=0, line=dict(color="#ccc", width=1))
    fig.update_layout(
        height=height, width=width, margin=dict(l=50, r=10, t=30, b=45), clickmode="event",
        title=dict(text=f"positional-symbolic plane ({len(heads)} heads)", font_size=13),
        xaxis=dict(title="s_POS (positional score)", range=[-0.03, 1.03]),
        yaxis=dict(title="s_SYM (symbolic score)", range=[-0.03, 1.03],
                   scaleanchor="x", scaleratio=1))
    return fig


def heatmaps_figure(scores: PosSymScores, *, height: int | None = None, width: int = 540) -> "go.Figure":
    """Layer × head heatmaps of s_POS and s_SYM side by side; hover: the head's numbers."""
    go = _go()
    from plotly.subplots import make_subplots

    fig = make_subplots(rows=1, cols=2, subplot_titles=("s_POS", "s_SYM"),
                        horizontal_spacing=0.12)
    text = [[_hover_numbers(scores, layer, head) for head in range(scores.n_heads)]
            for layer in range(scores.n_layers)]
    custom = [[[layer, head] for head in range(scores.n_heads)] for layer in range(scores.n_layers)]
    for col, values in ((1, scores.pos), (2, scores.sym)):
        fig.add_trace(go.Heatmap(
            z=_round(values, 3), zmin=0, zmax=1, colorscale="Magma", text=text,
            customdata=custom, hovertemplate="%{text}<extra></extra>",
            showscale=col == 2, colorbar=dict(thickness=12)), row=1, col=col)
        fig.update_xaxes(title_text="head", dtick=1, row=1, col=col)
        fig.update_yaxes(title_text="layer", autorange="reversed", dtick=1 if
                         scores.n_layers <= 24 else None, row=1, col=col)
    fig.update_layout(height=height or max(300, 60 + 18 * scores.n_layers), width=width,
                      margin=dict(l=50, r=10, t=40, b=45), clickmode="event")
    return fig


def _row_labels(scores: PosSymScores, rows: Sequence[int]) -> list[str]:
    return [head_name(layer, head) for layer in rows for head in range(scores.n_heads)]


@boundary
def atlas_figure(scores: PosSymScores, *,
                 share: Float[Tensor, "layer head_index freq"] | None = None,
                 view: str = "sym", height: int | None = None) -> "go.Figure":
    """The frequency atlas (:func:`~lens_possym.viz.plot_frequency_atlas`), interactive.

    Rows ``layer.head``, columns frequency ids, θ of each id on the top axis; buttons switch
    between s_SYM, s_POS, s_SYM − s_POS and (with ``share``) the logit share; hover gives
    the head, the id, its θ and the value.
    """
    if not isinstance(view, str) or view not in ATLAS_VIEWS or (view == "share" and share is None):
        atlas_values(scores, view, share)  # says what is wrong
    go = _go()
    views = [v for v in ATLAS_VIEWS if v != "share" or share is not None]
    rows = [layer for layer in range(scores.n_layers) if scores.pos[layer].isfinite().any()]
    labels = _row_labels(scores, rows)
    grids = {v: _round(atlas_values(scores, v, share)[rows].reshape(len(labels), -1), 3)
             for v in views}
    n_freqs = len(grids[view][0]) if labels else 0
    theta = [[angle_label(float(scores.angles[layer, f])) for f in range(n_freqs)]
             for layer in rows for _ in range(scores.n_heads)]

    def style(v: str) -> dict:
        title, cmap, (vmin, vmax) = ATLAS_VIEWS[v]
        return dict(zmin=vmin, zmax=vmax, colorscale=_COLORSCALES[cmap], zauto=vmax is None,
                    colorbar=dict(title=dict(text=title, side="right"), thickness=12))

    fig = go.Figure(go.Heatmap(
        z=grids[view], y=labels, x=list(range(n_freqs)), text=theta,
        hovertemplate="head %{y}<br>frequency id %{x} (θ %{text} rad/token)"
                      "<br>value %{z:.3f}<extra></extra>", **style(view)))
    first = rows[0] if rows else 0
    ticks = sorted({round(i * (n_freqs - 1) / 5) for i in range(6)}) if n_freqs else []
    # an invisible trace gives the top axis (θ of the first scored layer) something to span
    fig.add_trace(go.Scatter(x=[0, max(n_freqs - 1, 0)], y=[labels[0]] * 2 if labels else [],
                             xaxis="x2", mode="markers", marker=dict(opacity=0),
                             hoverinfo="skip", showlegend=False))
    buttons = [dict(label=ATLAS_VIEWS[v][0], method="restyle",
                    args=[{"z": [grids[v]], **{k: [val] for k, val in style(v).items()}}, [0]])
               for v in views]
    fig.update_layout(
        height=height or max(320, 110 + 7 * len(labels)),
        margin=dict(l=60, r=10, t=80, b=45), clickmode="event",
        xaxis=dict(title="frequency id (0 = fastest rotation)", range=[-0.5, n_freqs - 0.5]),
        xaxis2=dict(overlaying="x", side="top", range=[-0.5, n_freqs - 0.5], tickvals=ticks,
                    ticktext=[angle_label(float(scores.angles[first, t])) for t in ticks],
                    title=dict(text=f"θ (rad/token), layer {first}", standoff=2)),
        # "L.H" labels read as numbers otherwise ("0.10" = "0.1"): categories, always
        yaxis=dict(title="layer.head", type="category", autorange="reversed",
                   tickmode="array", tickvals=[head_name(layer, 0) for layer in rows],
                   ticktext=[f"L{layer}" for layer in rows]),
        updatemenus=[dict(buttons=buttons, direction="right", type="buttons", x=0, y=1.0,
                          xanchor="left", yanchor="bottom", pad=dict(b=28),
                          active=views.index(view), font_size=11)],
    )
    return fig


@boundary
def frequency_profile_figure(scores: PosSymScores, layer: int, head: int, *,
                             share: Float[Tensor, "layer head_index freq"] | None = None,
                             height: int = 300) -> "go.Figure":
    """One head's s_POS and s_SYM per frequency id (and its logit share on a second axis)."""
    layer, head = scored_head(scores, layer, head)
    go = _go()
    n_freqs = scores.pos_freq.shape[-1]
    theta = [angle_label(float(t)) for t in scores.angles[layer]]
    x = list(range(n_freqs))
    fig = go.Figure()
    for name, values, colour in (("s_POS", scores.pos_freq, "#d62728"),
                                 ("s_SYM", scores.sym_freq, "#2ca02c")):
        fig.add_trace(go.Scatter(x=x, y=_round(values[layer, head]), name=name, text=theta,
                                 mode="lines", line=dict(color=colour, width=1.5),
                                 hovertemplate=f"id %{{x}} (θ %{{text}})<br>{name} "
                                               "%{y:.3f}<extra></extra>"))
    if share is not None:
        fig.add_trace(go.Bar(x=x, y=_round(share[layer, head]), name="logit share",
                             yaxis="y2", marker_color="rgba(31,119,180,0.35)", text=theta,
                             textposition="none",
                             hovertemplate="id %{x} (θ %{text})<br>logit share %{y:.3f}"
                                           "<extra></extra>"))
    fig.update_layout(
        height=height, margin=dict(l=50, r=50, t=35, b=40),
        title=dict(text=f"head {head_name(layer, head)} by frequency", font_size=13),
        xaxis=dict(title="frequency id (0 = fastest rotation)"),
        yaxis=dict(title="score", range=[-0.02, 1.02]),
        yaxis2=dict(title="share of ‖λ‖", overlaying="y", side="right", rangemode="tozero",
                    showgrid=False),
        legend=dict(orientation="h", y=1.02, x=1, xanchor="right", yanchor="bottom"))
    return fig


def swap_attention_figure(words: Sequence[str], before: Tensor, after: Tensor,
                          first: Sequence[int], second: Sequence[int], *, title: str = "",
                          height: int = 260) -> "go.Figure":
    """The query row's attention before and after a swap of key groups ``first``/``second``."""
    go = _go()
    x = list(range(len(before)))
    labels = [f"{i}: {w!r}" for i, w in enumerate(words)]
    fig = go.Figure([
        go.Bar(x=x, y=_round(before), name="clean", marker_color="#999", text=labels,
               textposition="none",
               hovertemplate="%{text}<br>clean %{y:.3f}<extra></extra>"),
        go.Bar(x=x, y=_round(after), name="after swap", marker_color="#1f77b4", text=labels,
               textposition="none",
               hovertemplate="%{text}<br>after swap %{y:.3f}<extra></extra>"),
    ])
    shapes = [dict(type="rect", xref="x", yref="paper", x0=p - 0.5, x1=p + 0.5, y0=0, y1=1,
                   fillcolor=colour, opacity=0.15, line_width=0)
              for group, colour in ((first, "red"), (second, "green")) for p in group]
    fig.update_layout(
        height=height, barmode="group", margin=dict(l=50, r=10, t=35, b=40), shapes=shapes,
        title=dict(text=title, font_size=13), xaxis=dict(title="key position"),
        yaxis=dict(title="attention"),
        legend=dict(orientation="h", y=1.02, x=1, xanchor="right", yanchor="bottom"))
    return fig
