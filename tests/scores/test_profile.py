"""swap_scores as users call it: settings, the results object, JSON, and bad input."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

import lens_possym as lp
from lens_possym.errors import InvalidSelectionError, NotRopeModelError
from lens_possym.scores import PosSymScores, pearson_r, swap_scores

PROMPT = "Alice likes red . Bob likes blue . Carol likes green . What color does"


@pytest.fixture(scope="module")
def llama():
    return lp.tiny_model("llama")


@pytest.fixture(scope="module")
def scores(llama):
    return swap_scores(llama, [PROMPT, PROMPT.replace("Bob", "Dave")], swap="block", n_blocks=3)


def test_shapes_settings_and_nan_for_unscored(llama):
    s = swap_scores(llama, PROMPT, layers=[1], heads=[0, 3])
    assert s.pos.shape == (2, 4) and s.pos_freq.shape == (2, 4, 8) and s.angles.shape == (2, 8)
    assert s.pos[0].isnan().all() and s.pos[1, [1, 2]].isnan().all()
    assert s.pos[1, [0, 3]].isfinite().all()
    assert s.layers == [1]
    assert s.config.exclude_bos is True  # the tiny tokenizer prepends <bos>
    assert s.config.query_position == llama.to_tokens(PROMPT).shape[1] - 1
    assert s.config.swap == "token" and s.config.method == "exact"


def test_exclude_bos_changes_the_swap_set(llama):
    tokens = llama.to_tokens(PROMPT)
    with_bos = swap_scores(llama, tokens, exclude_bos=False, tau=1.0)
    without = swap_scores(llama, tokens, exclude_bos=True, tau=1.0)
    assert not torch.allclose(with_bos.pos, without.pos)
    no_bos_tokens = tokens[:, 1:]
    assert swap_scores(llama, no_bos_tokens).config.exclude_bos is False


def test_json_roundtrip(scores, tmp_path):
    scores.task = {"accuracy": 0.5}
    path = scores.save(tmp_path / "out" / "scores.json")
    assert json.loads(path.read_text())["format"] == "lens-possym/scores@1"
    back = PosSymScores.load(path)
    for name in ("pos", "sym", "pos_freq", "sym_freq", "angles", "exclusion_ratio",
                 "pos_prompts"):
        assert torch.equal(getattr(back, name), getattr(scores, name).double())
    assert back.config == scores.config and back.task == {"accuracy": 0.5}
    assert back.layers == scores.layers


def test_json_keeps_nan(llama, tmp_path):
    partial = swap_scores(llama, PROMPT, layers=[0], per_frequency=False, exclusion=False)
    back = PosSymScores.load(partial.save(tmp_path / "s.json"))
    assert back.pos[1].isnan().all() and back.pos_freq is None and back.exclusion_ratio is None
    with pytest.raises(ValueError, match="not a lens-possym scores file"):
        (tmp_path / "bad.json").write_text("{}")
        PosSymScores.load(tmp_path / "bad.json")


def test_summary_matches_its_definition(scores):
    summary = scores.summary()
    assert summary["median_pos_first_half"] == pytest.approx(float(scores.pos[0].median()))
    expected_r = np.corrcoef(scores.pos.flatten().numpy(), scores.sym.flatten().numpy())[0, 1]
    assert summary["pearson_pos_sym"] == pytest.approx(expected_r, abs=1e-12)
    bands = scores.band_means(3)
    assert summary["sym_low_minus_high_freq"] == pytest.approx(
        float((bands["sym"][..., 2] - bands["sym"][..., 0]).mean()))


def test_pearson_ignores_nan_and_handles_constants():
    a = torch.tensor([1.0, 2.0, 3.0, float("nan")])
    assert pearson_r(a, torch.tensor([2.0, 4.0, 6.0, 1.0])) == pytest.approx(1.0)
    assert math.isnan(pearson_r(a, torch.ones(4)))


def test_ranked_heads(scores):
    ranked = scores.ranked_heads("sym")
    values = [float(scores.sym[layer, head]) for layer, head in ranked]
    assert values == sorted(values, reverse=True) and len(ranked) == 8
    assert scores.ranked_heads("pos", 3, descending=False)[0] == min(
        ((l, h) for l in range(2) for h in range(4)), key=lambda lh: float(scores.pos[lh]))
    with pytest.raises(ValueError):
        scores.ranked_heads("nope")


def test_bad_input_is_a_clear_error(llama):
    with pytest.raises(InvalidSelectionError, match="context is 256"):
        swap_scores(llama, torch.ones(1, 300, dtype=torch.long))
    with pytest.raises(InvalidSelectionError, match="empty"):
        swap_scores(llama, "")
    with pytest.raises(InvalidSelectionError, match="too few keys for 8 blocks"):
        swap_scores(llama, "Alice likes red .", swap="block", n_blocks=8)
    with pytest.raises(InvalidSelectionError, match="at least two keys"):
        swap_scores(llama, "Alice likes")
    with pytest.raises(InvalidSelectionError, match="unknown method"):
        swap_scores(llama, PROMPT, method="fast")
    with pytest.raises(InvalidSelectionError, match="unknown swap"):
        swap_scores(llama, PROMPT, swap="pair")
    with pytest.raises(InvalidSelectionError, match="tau"):
        swap_scores(llama, PROMPT, tau=0)
    with pytest.raises(InvalidSelectionError, match="head \\[4\\] out of range"):
        swap_scores(llama, PROMPT, heads=[4])
    with pytest.raises(InvalidSelectionError, match="layer \\[5\\] out of range"):
        swap_scores(llama, PROMPT, layers=[5])


def test_non_rope_model_is_rejected():
    import transformers

    config = transformers.GPT2Config(vocab_size=len(lp.models.tiny.TINY_VOCAB), n_embd=32,
                                     n_layer=1, n_head=2, n_positions=64)
    model = lp.from_hf(transformers.GPT2LMHeadModel(config).eval(), lp.models.tiny_tokenizer())
    with pytest.raises(NotRopeModelError, match="no rotary position embedding"):
        swap_scores(model, PROMPT)
