"""The profile report's explorer: plane, heatmaps and atlas wired to one head's details.

Hovering a point of the plane, a cell of the heatmaps or a cell of the frequency atlas shows
that head's numbers; clicking it selects the head: the detail panel then shows its s_POS,
s_SYM and logit share per frequency and its attention before and after the swap that
weighs most. The page's address keeps the selection (``report.html#head=3:1``), so a link
opens on a head. Everything the panel needs for every head is computed here, once, and
embedded in the page as JSON (``DATA``): no server, no network.

What the explorer reads from the model (each frequency's logit share, the swap attention of
every head, the first prompt's words) is :func:`explorer_inputs`; :func:`explorer_page_data`
and :func:`add_explorer` work from those and the scores alone, so a report renders from
saved results without the model.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor

from .._ids import head_name
from ..scores.results import PosSymScores
from ..typing import HookedModel
from ..viz._axes import angle_label
from ..decompose import frequency_logits_all
from ..viz.atlas import logit_share
from ..capture import capture_attention_inputs
from ..viz.scores import pick_example_heads, top_swap_attention
from ..viz import interactive

__all__ = ["explorer_data", "explorer_inputs", "explorer_page_data", "logit_shares",
           "add_explorer", "EXPLORER_JS"]


def logit_shares(model: HookedModel, tokens: Tensor, scores: PosSymScores) -> Tensor:
    """``[n_layers, n_heads, n_freqs]`` each frequency's share of every head's logit row
    (the last query of the first prompt; ``nan`` for layers not scored)."""

    n_freqs = scores.angles.shape[-1]
    out = torch.full((scores.n_layers, scores.n_heads, n_freqs), math.nan, dtype=torch.float64)
    decomposed = frequency_logits_all(model, tokens[:1], list(scores.layers))
    for layer, fl in decomposed.items():
        norms = fl.norms()[0, :, -1].double().cpu()  # [head, freq]
        out[layer, fl.heads, : norms.shape[-1]] = logit_share(norms)
    return out


def _rounded(values: Tensor, digits: int = 4) -> Any:
    if values.dim() == 0:
        x = float(values)
        return None if not math.isfinite(x) else round(x, digits)
    return [_rounded(v, digits) for v in values]


def explorer_inputs(model: HookedModel, scores: PosSymScores, tokens: Tensor,
                    share: Tensor | None = None) -> tuple[Tensor, dict[str, Any], list[str]]:
    """What the explorer reads from the model, on the first prompt: ``(share, attention,
    words)``: :func:`logit_shares` (computed here when not given), every scored head's
    attention before and after the swap that weighs most (``{"L.H": {"before", "after",
    "first", "second"}}``) and the prompt's tokens as text."""
    first = tokens[:1]
    config = scores.config
    share = logit_shares(model, first, scores) if share is None else share
    attention: dict[str, Any] = {}
    captured = capture_attention_inputs(model, first, list(scores.layers))
    for layer in scores.layers:
        heads = [h for h in range(scores.n_heads) if bool(scores.pos[layer, h].isfinite())]
        if not heads:
            continue
        rows = top_swap_attention(captured[layer], heads, swap=config.swap,
                                  n_blocks=config.n_blocks, exclude_bos=bool(config.exclude_bos))
        for head, (before, after, a, b) in rows.items():
            attention[head_name(layer, head)] = {"before": _rounded(before), "after": _rounded(after),
                                            "first": a.tolist(), "second": b.tolist()}
    return share, attention, [str(w) for w in model.to_str_tokens(first[0])]


def explorer_data(model: HookedModel, scores: PosSymScores, tokens: Tensor,
                  share: Tensor | None = None) -> dict[str, Any]:
    """Every head's numbers, per-frequency profile and swap attention, as JSON data.

    ``share`` is :func:`logit_shares` (computed here when not given).
    """
    return explorer_page_data(scores, *explorer_inputs(model, scores, tokens, share))


def explorer_page_data(scores: PosSymScores, share: Tensor, attention: dict[str, Any],
                       words: list[str]) -> dict[str, Any]:
    """:func:`explorer_data` from what :func:`explorer_inputs` read (no model)."""
    examples = pick_example_heads(scores)
    data: dict[str, Any] = {
        "pos": _rounded(scores.pos), "sym": _rounded(scores.sym),
        "ratio": None if scores.exclusion_ratio is None else _rounded(scores.exclusion_ratio),
        "positional_share": (None if scores.positional_share is None
                             else _rounded(scores.positional_share)),
        "pos_freq": None if scores.pos_freq is None else _rounded(scores.pos_freq),
        "sym_freq": None if scores.sym_freq is None else _rounded(scores.sym_freq),
        "share": _rounded(share),
        "theta": [[angle_label(float(t)) if math.isfinite(float(t)) else ""
                   for t in row] for row in scores.angles],
        "words": list(words),
        "attention": attention,
        "examples": {name: list(head) for name, head in examples.items()},
    }
    return data


EXPLORER_JS = r"""
window.addEventListener('load', function () {
  const prof = document.getElementById('explore-profile');
  const att = document.getElementById('explore-attention');
  const info = document.getElementById('explore-head');
  const fmt = x => (x === null || x === undefined) ? '–' : x.toFixed(3);
  function rect(p, colour) {
    return {type: 'rect', xref: 'x', yref: 'paper', x0: p - 0.5, x1: p + 0.5, y0: 0, y1: 1,
            fillcolor: colour, opacity: 0.15, line: {width: 0}};
  }
  function span(g) { return g.length === 1 ? g[0] : g[0] + '–' + g[g.length - 1]; }
  function select(layer, head) {
    const key = layer + '.' + head;
    const a = DATA.attention[key];
    if (!a) return;
    let text = '<b>head ' + key + '</b>: s_POS ' + fmt(DATA.pos[layer][head]) +
      ' · s_SYM ' + fmt(DATA.sym[layer][head]);
    if (DATA.ratio) text += ' · Var/bound ' + fmt(DATA.ratio[layer][head]);
    const share = DATA.positional_share;
    if (share) text += ' · positional share ' + fmt(share[layer][head]);
    info.innerHTML = text;
    info.dataset.head = key;
    if (prof && DATA.pos_freq) {
      const theta = DATA.theta[layer];
      Plotly.restyle(prof, {y: [DATA.pos_freq[layer][head], DATA.sym_freq[layer][head],
                                DATA.share[layer][head]], text: [theta, theta, theta]}, [0, 1, 2]);
      Plotly.relayout(prof, {'title.text': 'head ' + key + ' by frequency'});
    }
    Plotly.restyle(att, {y: [a.before, a.after]}, [0, 1]);
    Plotly.relayout(att, {
      shapes: a.first.map(p => rect(p, 'red')).concat(a.second.map(p => rect(p, 'green'))),
      'title.text': 'head ' + key + ': attention of the last token, swap ' + span(a.first) +
        ' ↔ ' + span(a.second)});
    if (history.replaceState) history.replaceState(null, '', '#head=' + key);
  }
  window.lensPossymSelect = select;
  function onClick(ev) {
    const p = ev.points[0];
    let lh = Array.isArray(p.customdata) ? p.customdata : null;
    if (!lh && typeof p.y === 'string' && p.y.indexOf('.') > 0) lh = p.y.split('.').map(Number);
    if (lh) select(lh[0], lh[1]);
  }
  for (const id of ['explore-plane', 'explore-heatmaps', 'explore-atlas']) {
    const el = document.getElementById(id);
    if (el && el.on) el.on('plotly_click', onClick);
  }
  for (const button of document.querySelectorAll('button[data-head]')) {
    button.addEventListener('click', () => {
      const lh = button.dataset.head.split('.').map(Number);
      select(lh[0], lh[1]);
    });
  }
  const m = /head=(\d+)[.:](\d+)/.exec(window.location.hash);  // '.'; ':' of older links
  const start = m ? [+m[1], +m[2]] : DATA.examples.symbolic;
  select(start[0], start[1]);
});
"""


def add_explorer(report, scores: PosSymScores, share: Tensor, attention: dict[str, Any],
                 words: list[str]) -> None:
    """Add the explorer sections to ``report``, from the scores and what
    :func:`explorer_inputs` read from the model (no model needed here)."""
    import html

    data = explorer_page_data(scores, share, attention, words)
    layer, head = data["examples"]["symbolic"]
    attn = data["attention"][head_name(layer, head)]
    report.section("Explore the heads", anchor="explore", caption=(
        "Hover a point or a cell for that head's numbers; click it to show its per-frequency "
        "profile and its attention below. The page address keeps the choice "
        "(report.html#head=LAYER.HEAD)."))
    report.raw("<div class='cols'><div>")
    report.plotly(interactive.plane_figure(scores), div_id="explore-plane", caption=(
        "Every head at (s_POS, s_SYM), coloured by layer. Near the top-left corner: symbolic "
        "heads; bottom-right: positional; top-right: near-uniform attention (no focus). The "
        "grey line is s_POS + s_SYM = 1."))
    report.raw("</div><div>")
    report.plotly(interactive.heatmaps_figure(scores), div_id="explore-heatmaps",
                  caption="The same scores per layer (rows) and head (columns).")
    report.raw("</div></div>")
    buttons = " ".join(
        f"<button data-head='{head_name(*h)}'>{html.escape(name)} example {head_name(*h)}</button>"
        for name, h in data["examples"].items())
    report.raw("<h3>Selected head</h3><p id='explore-head' class='caption'></p>"
               f"<p class='caption'>Jump to: {buttons}</p>")
    if scores.pos_freq is not None:
        report.plotly(interactive.frequency_profile_figure(scores, layer, head, share=share),
                      div_id="explore-profile", caption=(
                          "s_POS and s_SYM of each frequency id scored as a 2-D head of its own "
                          "(lines), and that frequency's share of the head's logit row (bars, "
                          "right axis). Frequency id 0 rotates fastest; hover for θ."))
    report.plotly(interactive.swap_attention_figure(
        data["words"], torch.tensor([math.nan if v is None else v for v in attn["before"]]),
        torch.tensor([math.nan if v is None else v for v in attn["after"]]),
        attn["first"], attn["second"]), div_id="explore-attention", caption=(
            "Attention of the last token over the key positions of the first prompt, before "
            "(grey) and after (blue) the swap that weighs most in the score (the swapped "
            "positions shaded red and green). A positional head's attention stays put; a "
            "symbolic head's follows the content."))
    if scores.pos_freq is not None:
        report.section("Frequency atlas: every head, every frequency", anchor="atlas",
                       caption=(
            "One row per head (layer:head, layers top to bottom), one column per frequency id "
            "(0 = fastest rotation; θ on the top axis, of the first layer: layers with another "
            "RoPE base have other angles, hover shows each cell's θ). The buttons switch "
            "between s_SYM, s_POS, their difference and the logit share: which frequencies "
            "make each head positional or symbolic, across the whole model. Click a cell to "
            "select its head."))
        report.plotly(interactive.atlas_figure(scores, share=share), div_id="explore-atlas")
    report.script(EXPLORER_JS, data=data)
