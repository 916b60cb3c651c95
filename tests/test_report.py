"""Figures and the HTML report, on a tiny model: files written, nothing fetched."""

from __future__ import annotations

import re

import matplotlib
import pytest
import torch

import lens_possym as lp
from lens_possym import viz
from lens_possym.report import attention_view_html, save_profile_figures, write_report

matplotlib.use("Agg")

PROMPT = "Alice likes red . Bob likes blue . Carol likes green . What color does"


@pytest.fixture(scope="module")
def profiled():
    model = lp.tiny_model("gemma3", sliding_window=8)
    tokens = model.to_tokens([PROMPT, PROMPT.replace("Bob", "Dave")])
    return model, tokens, lp.swap_scores(model, tokens)


def test_example_heads_are_the_extremes(profiled):
    _, _, scores = profiled
    heads = viz.pick_example_heads(scores)
    gap = scores.sym - scores.pos
    assert gap[heads["symbolic"]] == gap.max() and gap[heads["positional"]] == gap.min()
    both = torch.minimum(scores.pos, scores.sym)
    assert both[heads["mixed"]] == both.max()


def test_swap_attention_moves_the_swapped_mass(profiled):
    model, tokens, scores = profiled
    from lens_possym.capture import capture_attention_inputs
    from lens_possym.scores import cross_logit_factors

    layer = 2
    factors = cross_logit_factors(capture_attention_inputs(model, tokens, layer)[layer], [0, 1])
    before, after = factors.attention_after_swap(torch.tensor([3]), torch.tensor([7]))
    untouched = [p for p in range(tokens.shape[1]) if p not in (3, 7)]
    # only the two logits change, so the other weights keep their ratios
    ratio = after[..., untouched] / before[..., untouched]
    assert torch.allclose(ratio, ratio[..., :1].expand_as(ratio), rtol=1e-5)
    assert torch.allclose(after.sum(-1), torch.ones(2, 2, dtype=after.dtype))


def test_figures_and_report(profiled, tmp_path):
    model, tokens, scores = profiled
    figures = save_profile_figures(model, scores, tokens, tmp_path, dpi=40)
    assert set(figures) == {"plane", "heatmaps", "frequency_scores", "frequency_plane",
                            "frequency_atlas", "logit_norms", "swap_attention"}
    for path in figures.values():
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    view = attention_view_html(model, tokens, [(0, 1), (2, 3)])
    report = write_report(tmp_path / "report.html", scores, figures, attention_html=view,
                          prompt=PROMPT, command="lens-possym profile")
    text = report.read_text()
    assert text.count("data:image/png;base64,") == len(figures)
    assert "2.3" in text and "Most symbolic heads" in text
    # self-contained: no resource is loaded from anywhere (the real check, in a browser
    # with the network cut off, is tests/test_report_browser.py)
    assert not re.search(r"""(?:src|href)\s*=\s*["']?(?:https?:)?//""", text)
    assert "sym_low_minus_high_freq" not in text  # keys are shown by their label
    assert "s_SYM: slow minus fast frequencies" in text


def test_profile_report_explorer_data(profiled):
    """The explorer's data: every scored head's numbers, profile and attention, and the
    logit shares sum to 1 per head."""
    model, tokens, scores = profiled
    from lens_possym.report.explorer import explorer_data, logit_shares

    share = logit_shares(model, tokens, scores)
    assert torch.allclose(share.sum(-1), torch.ones(scores.n_layers, scores.n_heads,
                                                    dtype=share.dtype))
    data = explorer_data(model, scores, tokens, share)
    assert len(data["attention"]) == int(scores.pos.isfinite().sum())
    row = data["attention"]["2.3"]
    assert sum(row["before"]) == pytest.approx(1, abs=1e-3)
    assert sum(row["after"]) == pytest.approx(1, abs=1e-3)
    assert data["pos_freq"][2][3] == pytest.approx(scores.pos_freq[2, 3].tolist(), abs=1e-4)
    assert len(data["words"]) == tokens.shape[1]


def test_report_builder(tmp_path):
    """Plotly's JavaScript is inlined once, and only when a plotly figure is on the page;
    text is escaped; glossary keys get labels and explanations."""
    import plotly.graph_objects as go

    from lens_possym.report import TERMS, Report

    plain = Report("a <b> report").key_values([("tau", 1e-4), ("unknown_key", None)])
    html = plain.to_html()
    assert "a &lt;b&gt; report" in html and "plotly" not in html.lower()
    assert TERMS["tau"][0] in html and TERMS["tau"][1] in html and "unknown key" in html
    page = Report("r").plotly(go.Figure(go.Scatter(x=[1], y=[2]))).plotly(go.Figure())
    html = page.script("void 0;", data={"x": [1.5]}).save(tmp_path / "r.html").read_text()
    assert html.count("<script type='text/javascript'>") == 1
    assert "const DATA = {\"x\": [1.5]};" in html


def test_settings_shown_only_where_they_apply(profiled):
    from lens_possym.report.profile import settings_rows

    _, _, scores = profiled
    token = dict(settings_rows(scores))
    assert "n_blocks" not in token and "batch_size" not in token and token["swap"] == "token"
    block = dict(settings_rows(lp.PosSymScores(
        pos=scores.pos, sym=scores.sym, angles=scores.angles, layers=scores.layers,
        config=scores.config.replace(swap="block", n_blocks=4))))
    assert block["n_blocks"] == 4


def test_frequency_atlas_rows_are_heads(profiled):
    _, _, scores = profiled
    ax = viz.plot_frequency_atlas(scores, "sym-pos")
    grid = ax.images[0].get_array()
    assert grid.shape == (scores.n_layers * scores.n_heads, scores.pos_freq.shape[-1])
    expected = (scores.sym_freq - scores.pos_freq).reshape(grid.shape)
    assert torch.allclose(torch.as_tensor(grid.filled(float("nan")), dtype=torch.float64),
                          expected, equal_nan=True)
    with pytest.raises(ValueError, match="needs the logit share"):
        viz.plot_frequency_atlas(scores, "share")
    with pytest.raises(ValueError, match="atlas view 'nope' unknown"):
        viz.plot_frequency_atlas(scores, "nope")


def test_plots_reject_scores_without_frequencies(profiled):
    model, tokens, _ = profiled
    scores = lp.swap_scores(model, tokens, per_frequency=False)
    with pytest.raises(ValueError, match="per_frequency=False"):
        viz.plot_frequency_scores(scores, 0, 0)
    with pytest.raises(ValueError, match="per_frequency=False"):
        scores.band_means()


def test_figures_take_tensors_that_need_grad():
    """Figures copy tensors to the host themselves (detached, on the CPU), so results from
    a GPU or from a run with autograd on plot as they are."""
    from lens_possym.viz._axes import to_numpy

    values = torch.linspace(0, 1, 8, requires_grad=True) * 2
    assert to_numpy(values).tolist() == pytest.approx((torch.linspace(0, 1, 8) * 2).tolist())
    assert to_numpy([1.0, 2.0]).tolist() == [1.0, 2.0]
    ax = viz.plot_frequency_profile(values, torch.logspace(0, -3, 8))
    assert ax.lines[0].get_ydata().tolist() == pytest.approx(to_numpy(values).tolist())


def test_plane_labels_do_not_overlap(profiled):
    """Heads close on the plane share one label; every labelled head appears once."""
    import math

    from lens_possym.viz.scores import _label_groups

    _, _, scores = profiled
    groups = _label_groups(scores, 4, radius=0.2)
    anchors = list(groups)
    assert all(math.dist(a, b) >= 0.2 for i, a in enumerate(anchors) for b in anchors[i + 1:])
    labels = [name for names in groups.values() for name in names if name != "+"]
    assert len(labels) == len(set(labels))
    wanted = set(scores.ranked_heads("pos", 4) + scores.ranked_heads("sym", 4))
    assert len(labels) <= len(wanted)
    ax = viz.plot_plane(scores, annotate=4)
    assert len(ax.texts) == len(_label_groups(scores, 4))


def test_a_head_has_one_name_everywhere(profiled, tmp_path):
    """Figures, tables, labels, the report's buttons and address all write ``L.H``, and
    the head grammar reads each name back as that head (``a:b`` would be a range)."""
    import matplotlib.pyplot as plt

    from lens_possym.interventions import parse_heads
    from lens_possym.report import profile_report
    from lens_possym.rope import rope_specs

    model, tokens, scores = profiled
    specs = rope_specs(model)
    html = profile_report(model, scores, tokens).save(tmp_path / "r.html").read_text()
    named = re.findall(r"data-head='([^']*)'", html)
    assert named and all(parse_heads(name, specs) == [tuple(map(int, name.split(".")))]
                         for name in named)
    assert "#head=LAYER.HEAD" in html and not re.search(r"head \d+:\d+", html)
    texts = []
    for ax in (viz.plot_plane(scores, annotate=3),
               viz.plot_frequency_scores(scores, 2, 3),
               viz.plot_frequency_plane(scores, 2, 3),
               viz.plot_swap_attention(model, tokens[:1], {"x": (2, 3)})[0]):
        texts += [ax.get_title()] + [t.get_text() for t in ax.texts]
        plt.close(ax.figure)
    heads = [w for t in texts for w in re.findall(r"\b\d+[.:]\d+\b", t)]
    assert "2.3" in heads and not [h for h in heads if ":" in h]
    from lens_possym.viz.interactive import atlas_figure, heatmaps_figure

    atlas = atlas_figure(scores)
    assert atlas.layout.yaxis.type == "category"  # "0.10" must not read as 0.1
    assert list(atlas.data[0].y[:2]) == ["0.0", "0.1"]
    assert "head 2.3<br>" in heatmaps_figure(scores).data[0].text[2][3]


def test_profile_report_renders_from_saved_results_without_a_model(profiled, tmp_path,
                                                                   monkeypatch):
    """The scores and their ProfileDetails, saved and loaded back, render the same page
    as profile_report with the model, and rendering runs no model at all."""
    from lens_possym.report import (ProfileDetails, profile_details, profile_report,
                                    render_profile_report)
    from lens_possym.report import explorer

    model, tokens, scores = profiled
    live = profile_report(model, scores, tokens, prompt=PROMPT, command="c").to_html()
    details = profile_details(model, scores, tokens, prompt=PROMPT)
    scores_file = scores.save(tmp_path / "scores.json")
    details_file = details.save(tmp_path / "details.json")

    def no_model(*args, **kwargs):
        raise AssertionError("rendering a saved profile ran the model")

    for name in ("frequency_logits_all", "capture_attention_inputs"):
        monkeypatch.setattr(explorer, name, no_model)
    monkeypatch.setattr(type(model), "forward", no_model)
    saved = render_profile_report(lp.PosSymScores.load(scores_file),
                                  ProfileDetails.load(details_file), command="c").to_html()
    same_ids = lambda html: re.sub(r"circuits-vis-[0-9a-f-]+", "circuits-vis-ID", html)  # noqa: E731
    assert same_ids(saved) == same_ids(live)          # circuitsvis draws a new id per view
    assert PROMPT.split()[0] in saved and "explore-atlas" in saved
