"""The profile report: what ``lens-possym profile`` writes beside ``scores.json``.

:func:`render_profile_report` builds it (:class:`~lens_possym.report.Report`) from saved
results alone, the scores and their :class:`ProfileDetails`: the command line, a summary
and the settings (each number explained, settings only where they apply), the most
positional and symbolic heads, the explorer (plane, heatmaps and frequency atlas,
interactive, wired to one head's per-frequency profile and attention), the circuitsvis
attention of three example heads, a glossary, and the static figures.
:func:`profile_details` is the one step that runs the model (what the report shows beside
the scores: logit shares, swap attention, the prompt's words, the attention view), and
:func:`profile_report` runs it and renders. :func:`save_profile_figures` writes the PNGs;
:func:`write_report` is the static report of earlier versions (summary, tables, PNGs).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from .._ids import head_name
from ..scores.results import PosSymScores
from ..typing import HookedModel
from ..viz.attention import attention_view_html
from .builder import Report
from .. import viz
from ..decompose import frequency_logits_all
from ..viz import pick_example_heads
from ..results_io import ResultIO, head_frame
from .explorer import add_explorer, explorer_inputs

__all__ = ["profile_report", "render_profile_report", "profile_details", "ProfileDetails",
           "save_profile_figures", "attention_view_html", "write_report", "summary_rows",
           "settings_rows", "heads_rows"]


@dataclass(repr=False)
class ProfileDetails(ResultIO):
    """What the profile report shows beside the scores, read from the model on the first
    prompt (:func:`profile_details`), so that the report renders later without the model.

    Attributes:
        share: ``[n_layers, n_heads, n_freqs]`` each frequency's share of each head's logit
            row at the last query (``nan`` for layers not scored).
        attention: ``{"L.H": {"before", "after", "first", "second"}}``: every scored head's
            attention of the last token before and after the swap that weighs most, and
            the swapped positions.
        words: the first prompt's tokens as text.
        prompt: the first prompt (shown above the attention view; may be empty).
        attention_html: the circuitsvis view of the example heads (may be empty).
    """

    share: Tensor
    attention: dict[str, Any]
    words: list[str]
    prompt: str = ""
    attention_html: str = field(default="", repr=False)

    FORMAT = "lens-possym/profile-details@1"

    def summary(self) -> dict[str, Any]:
        return {"n_heads": len(self.attention), "n_words": len(self.words),
                "n_freqs": int(self.share.shape[-1]), "prompt": self.prompt,
                "attention_view": bool(self.attention_html)}

    def _table(self):
        """Each head's logit share per frequency (``score`` ``logit_share``), long format."""
        return head_frame({"logit_share": self.share}, None)


def profile_details(model: HookedModel, scores: PosSymScores, tokens: torch.Tensor, *,
                    prompt: str = "", attention_html: str | None = None) -> ProfileDetails:
    """Run ``model`` on the first of ``tokens`` (the prompts the scores were computed on)
    for what :func:`render_profile_report` shows beside the scores; ``attention_html``: a
    circuitsvis view (default: the three example heads')."""
    share, attention, words = explorer_inputs(model, scores, tokens)
    if attention_html is None:
        heads = list(dict.fromkeys(pick_example_heads(scores).values()))
        attention_html = attention_view_html(model, tokens, heads)
    return ProfileDetails(share=share, attention=attention, words=words, prompt=prompt,
                          attention_html=attention_html)


def save_profile_figures(model: HookedModel, scores: PosSymScores, tokens: torch.Tensor,
                         out_dir: str | Path, *, dpi: int = 110) -> dict[str, Path]:
    """Write the profile's figures as PNGs into ``out_dir``; returns ``{name: path}``.

    ``tokens`` are the prompts the scores were computed on (the first one is drawn).
    """
    import matplotlib.pyplot as plt


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
        save("frequency_atlas", viz.plot_frequency_atlas(scores, "sym").figure)
    first = tokens[:1]
    layers = sorted({layer for layer, _ in examples.values()})
    decomposed = frequency_logits_all(model, first, layers)
    fig, axes = plt.subplots(len(examples), 1, figsize=(8, 2.6 * len(examples)),
                             constrained_layout=True)
    for ax, (label, (layer, head)) in zip(axes, examples.items()):
        viz.plot_logit_norms(decomposed[layer], heads=[head], ax=ax, share=True)
        ax.set_title(f"{label} head {head_name(layer, head)}: share of the logit row per frequency",
                     fontsize="small")
    save("logit_norms", fig)
    config = scores.config
    save("swap_attention", viz.plot_swap_attention(
        model, first, examples, swap=config.swap, n_blocks=config.n_blocks,
        exclude_bos=config.exclude_bos)[0].figure)
    return paths


def summary_rows(scores: PosSymScores) -> list[tuple[str, Any]]:
    """The summary as ``(glossary key, value)`` rows, layer ranges written ``a–b``."""
    summary = scores.summary()
    task = summary.pop("task", None) or {}
    rows = []
    for key, value in summary.items():
        if isinstance(value, list):
            value = f"{value[0]}–{value[1]}" if len(value) == 2 else format_list(value)
        rows.append((key, value))
    rows += [(f"task {k}", v) for k, v in task.items()]
    return rows


def format_list(values: list) -> str:
    return ", ".join(map(str, values)) or "–"


def settings_rows(scores: PosSymScores) -> list[tuple[str, Any]]:
    """The settings that apply to this run (``n_blocks`` only for block swaps, the re-run
    batch only for the re-run, the exact method's dtype and memory bound only for it)."""
    config = scores.config.to_dict()
    skip = {"per_frequency", "exclusion", "check"}
    if config["swap"] != "block":
        skip.add("n_blocks")
    if config["method"] != "rerun":
        skip.add("batch_size")
    else:
        skip |= {"dtype", "max_elements"}
    rows = [(k, v) for k, v in config.items() if k not in skip]
    return rows + [("n_prompts", scores.n_prompts), ("n_tokens", scores.n_tokens)]


def heads_rows(scores: PosSymScores, by: str, k: int = 8) -> list[dict[str, Any]]:
    """The ``k`` heads :meth:`~lens_possym.scores.PosSymScores.ranked_heads` puts first,
    with their scores, the positional share that breaks their ties, and Var/bound (the report's
    tables and the command line's lists)."""
    rows = []
    for layer, head in scores.ranked_heads(by, k):
        row = {"head": head_name(layer, head), "s_POS": float(scores.pos[layer, head]),
               "s_SYM": float(scores.sym[layer, head])}
        if scores.positional_share is not None:
            row["positional_share"] = float(scores.positional_share[layer, head])
        if scores.exclusion_ratio is not None:
            row["exclusion_ratio"] = float(scores.exclusion_ratio[layer, head])
        rows.append(row)
    return rows


_INTRO = ("Each head's attention from the last token is compared before and after swapping "
          "the contents of two key positions (the positions themselves stay where they are): "
          "s_POS is high when the attention stays with the positions, s_SYM when it moves "
          "with the content (paper A). Every number is explained beside it or in the "
          "glossary at the end.")

_CAPTIONS = {
    "plane": "Every head on the positional-symbolic plane.",
    "heatmaps": "Scores per layer and head.",
    "frequency_scores": "Scores of each frequency id scored as a 2-D head, for a "
                        "positional, a symbolic and a mixed head.",
    "frequency_plane": "The symbolic example head, one point per frequency.",
    "logit_norms": "Which frequencies carry each example head's logits (first prompt).",
    "swap_attention": "Attention before and after the swap that weighs most.",
    "frequency_atlas": "Frequency atlas: s_SYM of every head (rows) and frequency id "
                       "(columns).",
}


def _settings_section(report: Report, scores: PosSymScores) -> None:
    report.section("Settings", caption="How the scores were computed (only the settings "
                   "that apply to this run).").key_values(settings_rows(scores))


def _head_sections(report: Report, scores: PosSymScores) -> None:
    report.section("Summary", caption="Medians are over the heads of each half of the "
                   "scored layers.").key_values(summary_rows(scores))
    report.raw("<div class='cols'><div>")
    report.section("Most positional heads").table(heads_rows(scores, "pos"))
    report.raw("</div><div>")
    report.section("Most symbolic heads").table(heads_rows(scores, "sym"))
    report.raw("</div></div>")
    report.caption("Ranked by s_POS (s_SYM) to two decimals; heads equal to that precision "
                   "(at tau = 1e-4 many saturate at 1) are ranked by positional share, higher "
                   "(lower) first. Balance: 1 = the logits depend on position only, 0 = on "
                   "content only. Var/bound: the head's logit variance over Theorem 1's "
                   "bound (near 1: it uses both position and content; near 0: near-uniform). "
                   "Hover a column header for its definition.")


GLOSSARY = ["s_POS", "s_SYM", "per_frequency", "frequency_id", "theta", "logit_share",
            "exclusion_ratio", "positional_share", "pearson_pos_sym", "sym_low_minus_high_freq",
            "pos_low_minus_high_freq", "tau", "swap", "n_blocks", "exclude_bos", "method"]


def profile_report(model: HookedModel, scores: PosSymScores, tokens: torch.Tensor, *,
                   command: str = "", prompt: str = "",
                   figures: dict[str, Path] | None = None,
                   attention_html: str | None = None) -> Report:
    """The profile report (not yet saved: call ``.save(path)``): :func:`profile_details`
    then :func:`render_profile_report`.

    Args:
        model, tokens: the model and prompts the scores were computed on (the explorer's
            per-frequency logit shares and attention use the first prompt).
        command: the command line that made it, shown at the top.
        prompt: the first prompt as text, shown above the attention view.
        figures: PNGs from :func:`save_profile_figures`, added in a closed section.
        attention_html: a circuitsvis view (default: the three example heads).
    """
    details = profile_details(model, scores, tokens, prompt=prompt,
                              attention_html=attention_html)
    return render_profile_report(scores, details, command=command, figures=figures)


def render_profile_report(scores: PosSymScores, details: ProfileDetails, *,
                          command: str = "", figures: dict[str, Path] | None = None) -> Report:
    """The profile report from saved results, no model: the scores and what
    :func:`profile_details` read (e.g. both loaded from their JSON files)."""
    report = Report(f"lens-possym profile: {scores.model_name or 'model'}", command=command,
                    intro=_INTRO)
    _head_sections(report, scores)
    add_explorer(report, scores, details.share, details.attention, details.words)
    report.section("Attention patterns of the example heads", caption=(
        "The whole attention pattern (every query, every key) of the positional, symbolic "
        "and mixed example heads on the first prompt (circuitsvis: hover a token)."))
    if details.prompt:
        report.raw(f"<p class='caption'>Prompt: <code>{_escape(details.prompt)}</code></p>")
    report.raw(details.attention_html)
    _settings_section(report, scores)
    report.glossary(GLOSSARY)
    if figures:
        report.details("Static figures (the PNGs written beside this report)")
        for name, path in figures.items():
            report.image(path, caption=_CAPTIONS.get(name, name), alt=name)
        report.end_details()
    return report


def _escape(text: str) -> str:
    import html

    return html.escape(text)


def write_report(path: str | Path, scores: PosSymScores, figures: dict[str, Path], *,
                 attention_html: str = "", prompt: str = "", command: str = "") -> Path:
    """A static report (summary, settings, top heads, the PNGs, an attention view): for
    callers without the model; :func:`profile_report` is the interactive one."""
    report = Report(f"lens-possym profile: {scores.model_name or 'model'}", command=command,
                    intro=_INTRO)
    _head_sections(report, scores)
    for name, figure in figures.items():
        report.section(_CAPTIONS.get(name, name)).image(figure, alt=name)
    if attention_html:
        report.section("Attention patterns of the example heads (first prompt)")
        if prompt:
            report.raw(f"<p class='caption'>Prompt: <code>{_escape(prompt)}</code></p>")
        report.raw(attention_html)
    _settings_section(report, scores)
    report.glossary(GLOSSARY)
    return report.save(path)
