"""A self-contained HTML report of a positional/symbolic profile, and the figures in it.

:func:`save_profile_figures` writes the PNGs (plane, heatmaps, per-frequency scores and
logit norms of three example heads, attention before and after a swap);
:func:`attention_view_html` renders circuitsvis attention patterns with the JavaScript
inlined (``local_src``: nothing is fetched when the page opens, and nothing here probes the
network, unlike a notebook ``display`` of a circuitsvis object); :func:`write_report`
puts it all in one HTML file, figures embedded as base64, that opens offline.
"""

from __future__ import annotations

import base64
import html
import math
from pathlib import Path
from typing import Any

import torch

from .scores.results import PosSymScores
from .typing import HookedModel

__all__ = ["save_profile_figures", "attention_view_html", "write_report"]


def save_profile_figures(model: HookedModel, scores: PosSymScores, tokens: torch.Tensor,
                         out_dir: str | Path, *, dpi: int = 110) -> dict[str, Path]:
    """Write the profile's figures as PNGs into ``out_dir``; returns ``{name: path}``.

    ``tokens`` are the prompts the scores were computed on (the first one is drawn).
    """
    import matplotlib.pyplot as plt

    from . import viz
    from .decompose import frequency_logits_all

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths: dict[str, Path] = {}

    def save(name: str, figure) -> None:
        path = out / f"{name}.png"
        figure.savefig(path, dpi=dpi)
        plt.close(figure)
        paths[name] = path

    save("plane", viz.plot_plane(scores, annotate=2).figure)
    save("heatmaps", viz.plot_score_heatmaps(scores)[0].figure)
    examples = viz.pick_example_heads(scores)
    if scores.pos_freq is not None:
        fig, axes = plt.subplots(len(examples), 1, figsize=(8, 2.8 * len(examples)),
                                 constrained_layout=True)
        for ax, (label, (layer, head)) in zip(axes, examples.items()):
            viz.plot_frequency_scores(scores, layer, head, ax=ax)
            ax.set_title(f"{label} example: " + ax.get_title(), fontsize="small")
        save("frequency_scores", fig)
        save("frequency_plane", viz.plot_frequency_plane(scores, *examples["symbolic"]).figure)
    first = tokens[:1]
    layers = sorted({layer for layer, _ in examples.values()})
    decomposed = frequency_logits_all(model, first, layers)
    fig, axes = plt.subplots(len(examples), 1, figsize=(8, 2.6 * len(examples)),
                             constrained_layout=True)
    for ax, (label, (layer, head)) in zip(axes, examples.items()):
        viz.plot_logit_norms(decomposed[layer], heads=[head], ax=ax, share=True)
        ax.set_title(f"{label} head {layer}:{head}: share of the logit row per frequency",
                     fontsize="small")
    save("logit_norms", fig)
    config = scores.config
    save("swap_attention", viz.plot_swap_attention(
        model, first, examples, swap=config.swap, n_blocks=config.n_blocks,
        exclude_bos=config.exclude_bos)[0].figure)
    return paths


def attention_view_html(model: HookedModel, tokens: torch.Tensor, heads: list[tuple[int, int]]) -> str:
    """circuitsvis ``attention_heads`` of some ``(layer, head)`` on the first prompt, inline."""
    import circuitsvis.attention as cv_attention

    first = tokens[:1]
    specs_needed = sorted({layer for layer, _ in heads})
    names = [f"blocks.{layer}.attn.hook_pattern" for layer in specs_needed]
    with torch.no_grad():
        _, cache = model.run_with_cache(first, names_filter=names)
    patterns = torch.stack([cache[f"blocks.{layer}.attn.hook_pattern"][0, head]
                            for layer, head in heads]).float().cpu()
    words = [str(t) for t in model.to_str_tokens(first[0])]
    rendered = cv_attention.attention_heads(
        patterns, words, attention_head_names=[f"L{layer}H{head}" for layer, head in heads])
    return rendered.local_src


def _image(path: Path) -> str:
    data = base64.b64encode(Path(path).read_bytes()).decode("ascii")
    return f'<img alt="{html.escape(path.stem)}" src="data:image/png;base64,{data}">'


def _number(value: Any) -> str:
    if isinstance(value, float):
        return "–" if math.isnan(value) else f"{value:.4g}"
    return html.escape(str(value))


def _table(rows: list[tuple[str, Any]]) -> str:
    body = "".join(f"<tr><th>{html.escape(k)}</th><td>{_number(v)}</td></tr>" for k, v in rows)
    return f"<table>{body}</table>"


def _heads_table(scores: PosSymScores, by: str, k: int = 8) -> str:
    rows = []
    for layer, head in scores.ranked_heads(by, k):
        ratio = (float(scores.exclusion_ratio[layer, head])
                 if scores.exclusion_ratio is not None else math.nan)
        rows.append(f"<tr><td>{layer}:{head}</td><td>{_number(float(scores.pos[layer, head]))}"
                    f"</td><td>{_number(float(scores.sym[layer, head]))}</td>"
                    f"<td>{_number(ratio)}</td></tr>")
    return ("<table><tr><th>head</th><th>s_POS</th><th>s_SYM</th><th>Var/bound</th></tr>"
            + "".join(rows) + "</table>")


_STYLE = """
body { font-family: system-ui, sans-serif; max-width: 1000px; margin: 2em auto; color: #222; }
img { max-width: 100%; border: 1px solid #eee; margin: 0.5em 0; }
table { border-collapse: collapse; margin: 0.5em 0 1em; font-size: 0.9em; }
th, td { border: 1px solid #ddd; padding: 3px 8px; text-align: left; }
th { background: #f6f6f6; }
.cols { display: flex; gap: 2em; flex-wrap: wrap; }
code { background: #f3f3f3; padding: 0 3px; }
"""


def write_report(path: str | Path, scores: PosSymScores, figures: dict[str, Path], *,
                 attention_html: str = "", prompt: str = "", command: str = "") -> Path:
    """Assemble the report: summary, settings, top heads, figures, attention views."""
    summary = scores.summary()
    task = summary.pop("task", None) or {}
    summary_rows = [(k, v) for k, v in summary.items() if not isinstance(v, list)]
    summary_rows += [(f"task {k}", v) for k, v in task.items()]
    settings_rows = [*scores.config.to_dict().items(), ("n_prompts", scores.n_prompts),
                     ("n_tokens", scores.n_tokens)]
    parts = [
        "<!DOCTYPE html><html><head><meta charset='utf-8'>",
        f"<title>lens-possym profile: {html.escape(scores.model_name)}</title>",
        f"<style>{_STYLE}</style></head><body>",
        f"<h1>Positional / symbolic profile of <code>{html.escape(scores.model_name)}</code></h1>",
        f"<p>Command: <code>{html.escape(command)}</code></p>" if command else "",
        "<p>Each head's attention of the last token is compared before and after swapping the "
        "contents of key positions: <b>s_POS</b> is high when the attention stays with the "
        "positions, <b>s_SYM</b> when it moves with the content (paper A). Frequency id 0 is "
        "the fastest RoPE rotation.</p>",
        "<div class='cols'><div><h2>Summary</h2>", _table(summary_rows), "</div>",
        "<div><h2>Settings</h2>", _table(settings_rows), "</div></div>",
        "<div class='cols'><div><h3>Most positional heads</h3>", _heads_table(scores, "pos"),
        "</div><div><h3>Most symbolic heads</h3>", _heads_table(scores, "sym"), "</div></div>",
    ]
    captions = {
        "plane": "Every head on the positional-symbolic plane.",
        "heatmaps": "Scores per layer and head.",
        "frequency_scores": "Scores of each frequency id scored as a 2-D head, for a "
                            "positional, a symbolic and a mixed head.",
        "frequency_plane": "The symbolic example head, one point per frequency.",
        "logit_norms": "Which frequencies carry each example head's logits (first prompt).",
        "swap_attention": "Attention before and after the swap that weighs most.",
    }
    for name, figure in figures.items():
        parts += [f"<h2>{html.escape(captions.get(name, name))}</h2>", _image(figure)]
    if attention_html:
        parts += ["<h2>Attention patterns of the example heads (first prompt)</h2>",
                  f"<p>{html.escape(prompt)}</p>" if prompt else "", attention_html]
    parts.append("</body></html>")
    path = Path(path)
    path.write_text("\n".join(parts), encoding="utf-8")
    return path
