"""swap_scores as users call it: settings, the results object, JSON, and bad input."""

from __future__ import annotations

import dataclasses

import json
import math

import numpy as np
import pytest
import torch

import lens_possym as lp
from lens_possym.errors import (InvalidSelectionError, NoFrequenciesError, NonFiniteResultError,
                                NotRopeModelError)
from lens_possym.scores import PosSymScores, ScoreConfig, pearson_r, swap_scores

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
    with pytest.raises(ValueError, match="not a PosSymScores file"):
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
    assert math.isnan(pearson_r(a, torch.ones(4), undefined="nan"))
    with pytest.raises(NonFiniteResultError, match="one side is constant"):  # issue 39
        pearson_r(a, torch.ones(4))
    with pytest.raises(NonFiniteResultError, match="1 finite pair"):
        pearson_r(a[2:], torch.ones(2))


def test_ranked_heads(scores):
    """By the score to two decimals, then by positional share (lower first for "sym"); raw scores
    with decimals=None; descending=False reverses the whole order."""
    ranked = scores.ranked_heads("sym")
    keys = [(round(float(scores.sym[lh]) * 100), -float(scores.positional_share[lh]))
            for lh in ranked]
    assert keys == sorted(keys, reverse=True) and len(ranked) == 8
    assert scores.ranked_heads("sym", descending=False) == ranked[::-1] or len(set(keys)) < 8
    raw = [float(scores.sym[lh]) for lh in scores.ranked_heads("sym", decimals=None)]
    assert raw == sorted(raw, reverse=True)
    assert scores.ranked_heads("pos", 3, descending=False, decimals=None)[0] == min(
        ((l, h) for l in range(2) for h in range(4)), key=lambda lh: float(scores.pos[lh]))
    torch.testing.assert_close(scores.tie_break("sym"), 1 - scores.positional_share)
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
    """A model with no known scheme is refused; a known non-RoPE one (GPT-2) is scored
    whole-head only (tests/positions), and asking it for frequencies says so."""
    import transformers

    config = transformers.GPTBigCodeConfig(vocab_size=len(lp.models.tiny.TINY_VOCAB),
                                           n_embd=32, n_layer=1, n_head=2, n_positions=64)
    model = lp.from_hf(transformers.GPTBigCodeForCausalLM(config).eval(),
                       lp.models.tiny_tokenizer())
    with pytest.raises(NotRopeModelError, match="no rotary position embedding"):
        swap_scores(model, PROMPT)
    config = transformers.GPT2Config(vocab_size=len(lp.models.tiny.TINY_VOCAB), n_embd=32,
                                     n_layer=1, n_head=2, n_positions=64)
    model = lp.from_hf(transformers.GPT2LMHeadModel(config).eval(), lp.models.tiny_tokenizer())
    # asked for, per-frequency scores of a model without frequencies are refused ...
    with pytest.raises(NoFrequenciesError, match="per_frequency=False"):
        swap_scores(model, PROMPT, per_frequency=True)
    # ... left at the defaults, it is scored per head (what it has)
    scores = swap_scores(model, PROMPT)
    assert scores.config.per_frequency is False and scores.pos_freq is None
    torch.testing.assert_close(scores.pos, swap_scores(model, PROMPT, per_frequency=False).pos)


# ---- ScoreConfig, and the result assembled from per-layer results ------------------------------


def test_layers_and_heads_land_where_they_belong(llama, scores):
    prompts = [PROMPT, PROMPT.replace("Bob", "Dave")]
    assert torch.equal(scores.pos, scores.pos_prompts.mean(0))
    for layer in (0, 1):
        one = swap_scores(llama, prompts, swap="block", n_blocks=3, layers=[layer], heads=[1, 3])
        assert one.pos[1 - layer].isnan().all() and one.pos[layer, [0, 2]].isnan().all()
        for name in ("pos", "sym", "pos_freq", "sym_freq", "exclusion_ratio", "positional_share",
                     "exclusion_ratio_freq", "positional_share_freq"):
            assert torch.equal(getattr(one, name)[layer, [1, 3]],
                               getattr(scores, name)[layer, [1, 3]]), name


def test_config_and_keywords_are_the_same_run_and_the_result_replays(llama, scores):
    config = ScoreConfig(swap="block", n_blocks=3)
    by_config = swap_scores(llama, [PROMPT, PROMPT.replace("Bob", "Dave")], config)
    assert by_config.config == scores.config and torch.equal(by_config.sym, scores.sym)
    replay = swap_scores(llama, [PROMPT, PROMPT.replace("Bob", "Dave")], scores.config)
    assert torch.equal(replay.pos_freq.nan_to_num(9), scores.pos_freq.nan_to_num(9))
    assert scores.config.n_blocks == 3 and scores.config.exclude_bos is True
    assert scores.n_prompts == 2 and scores.n_tokens == llama.to_tokens(PROMPT).shape[1]


def test_score_config_round_trip_and_validation(tmp_path):
    config = ScoreConfig(method="rerun", swap="block", n_blocks=4, tau=0.5, dtype=torch.float32)
    assert config.dtype == "float32" and config.torch_dtype is torch.float32
    assert ScoreConfig.from_json(config.to_json()) == config
    config.to_json(tmp_path / "c.json")
    assert ScoreConfig.from_json(tmp_path / "c.json") == config
    assert config.replace(tau=1.0).tau == 1.0 and config.tau == 0.5  # frozen: a copy
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.tau = 1.0
    for bad, message in [(dict(n_blocks=1), "n_blocks"), (dict(batch_size=0), "batch_size"),
                         (dict(cosine="cos"), "unknown cosine"), (dict(exclude_bos="yes"),
                                                                 "exclude_bos"),
                         (dict(dtype="float16"), "unknown dtype"), (dict(tau=float("nan")), "tau"),
                         (dict(per_frequency=1), "per_frequency"),
                         (dict(query_position=1.5), "query_position")]:
        with pytest.raises(InvalidSelectionError, match=message):
            ScoreConfig(**bad)
    with pytest.raises(InvalidSelectionError, match="no setting 'n_block'"):
        ScoreConfig().replace(n_block=3)
    assert ScoreConfig(cosine="scale_free").cosine == "scale_free"


def test_unknown_keyword_names_the_settings(llama):
    with pytest.raises(InvalidSelectionError, match="no setting 'n_block'.*n_blocks"):
        swap_scores(llama, PROMPT, n_block=3)


def test_files_with_the_older_settings_still_load(scores):
    data = scores.to_dict()
    del data["config"], data["n_tokens"]
    data["settings"] = {"swap": "block", "n_blocks": 3, "method": "exact", "tau": 1e-4,
                        "exclude_bos": True, "query_position": 17, "n_prompts": 2,
                        "n_tokens": 18, "per_frequency": True, "dtype": "float64"}
    old = PosSymScores.from_dict(data)
    assert old.config == scores.config.replace(query_position=17)
    assert old.n_tokens == 18 and torch.equal(old.pos, scores.pos.double())
