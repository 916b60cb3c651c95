"""Every result type: ``to_dataframe()`` (long format), ``save``/``load`` and a short repr.

Round trips are exact (tensors keep their dtype and every value; the DataFrame of the
loaded result equals the original's), the long table holds exactly the tensors' finite
entries (a pandas pivot gives the tensor back), and a file of another type is refused.
"""

from __future__ import annotations

import pandas as pd
import pytest
import torch

import lens_possym as lp
from lens_possym._json import dumps
from lens_possym.decompose import frequency_norms
from lens_possym.interventions import compare_with_random_heads
from lens_possym.errors import ResultsFileError
from lens_possym.results_io import LONG_COLUMNS
from lens_possym.papers.a.sweeps import FrequencySweep

from .helpers import toy_frequency_sweep

PROMPTS = ["the cat sat on the mat and the dog sat on the log", "one two three four five six "
           "seven eight nine ten eleven twelve"]


def _last_logit(logits):
    return float(logits[:, -1].float().mean())


@pytest.fixture(scope="module")
def results():
    model = lp.tiny_model("llama")
    tokens = model.to_tokens(PROMPTS)[:, :10]
    metric = {"mean_logit": _last_logit}
    toy = toy_frequency_sweep()
    return {
        "scores": lp.swap_scores(model, tokens),
        "logits": lp.frequency_logits(model, tokens, 1, relative=True),
        "norms": frequency_norms(model, tokens, per_token=True),
        "band_sweep": lp.band_sweep(model, tokens, metric, layers=[1], progress=False),
        "comparison": compare_with_random_heads(model, tokens, metric, "1.0,1.1", n_random=2,
                                                modes=("zero",), progress=False),
        "toy_sweep": toy,
        "train": _train_result(),
    }


def _train_result():
    from lens_possym.training.toy import ToyTransformer, toy_config_for
    from lens_possym.training.tasks import make_task
    from lens_possym.training.loop import train
    from lens_possym.training.loop import TrainConfig

    task = make_task("index", n_symbols=4, length=4)
    model = ToyTransformer(toy_config_for(task, n_freqs=4, seed=0))
    return train(model, task, TrainConfig(steps=10, eval_every=5, seed=0))


KINDS = ["scores", "logits", "norms", "band_sweep", "comparison", "toy_sweep", "train"]


def _tensors(obj, prefix=""):
    data = obj.to_dict() if hasattr(obj, "to_dict") else obj
    for key, value in data.items():
        if isinstance(value, torch.Tensor):
            yield prefix + key, value
        elif isinstance(value, dict):
            yield from _tensors(value, f"{prefix}{key}.")


@pytest.mark.parametrize("kind", KINDS)
def test_save_load_round_trip(results, kind, tmp_path):
    result = results[kind]
    back = type(result).load(result.save(tmp_path / f"{kind}.json"))
    assert type(back) is type(result)
    assert dumps(back.to_dict()) == dumps(result.to_dict())
    for (name, a), (_, b) in zip(_tensors(result), _tensors(back), strict=True):
        assert a.dtype == b.dtype, name
        assert torch.equal(a.cpu(), b) or torch.allclose(a.cpu(), b, equal_nan=True,
                                                          rtol=0, atol=0), name
    pd.testing.assert_frame_equal(back.to_dataframe(), result.to_dataframe())


@pytest.mark.parametrize("kind", KINDS)
def test_repr_is_short(results, kind):
    text = repr(results[kind])
    assert text.startswith(type(results[kind]).__name__ + "(")
    assert "\n" not in text and len(text) < 700, text
    assert "tensor(" not in text


@pytest.mark.parametrize("kind", KINDS)
def test_another_types_file_is_refused(results, kind, tmp_path):
    other = results["norms"] if kind != "norms" else results["scores"]
    path = other.save(tmp_path / "other.json")
    with pytest.raises(ResultsFileError, match=f"not a {type(results[kind]).__name__} file"):
        type(results[kind]).load(path)
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(ValueError, match="is not JSON"):
        type(results[kind]).load(tmp_path / "bad.json")


def test_scores_table_pivots_back_to_the_tensors(results):
    scores = results["scores"]
    frame = scores.to_dataframe()
    assert list(frame.columns) == LONG_COLUMNS
    per_freq = frame[frame.score == "sym_freq"]
    grid = per_freq.pivot_table(index=["layer", "head"], columns="frequency", values="value")
    expected = scores.sym_freq.reshape(-1, scores.sym_freq.shape[-1])
    assert torch.equal(torch.tensor(grid.to_numpy()), expected)
    per_head = frame[frame.score == "pos"].set_index(["layer", "head"])["value"]
    assert per_head.loc[(1, 2)] == float(scores.pos[1, 2])
    assert frame[frame.score == "pos"].frequency.isna().all()
    angles = per_freq.groupby(["layer", "frequency"]).angle.first()
    assert angles.loc[(0, 3)] == float(scores.angles[0, 3])
    n_finite = sum(int(getattr(scores, n).isfinite().sum()) for n in
                   ("pos", "sym", "exclusion_ratio", "positional_share", "pos_freq", "sym_freq",
                    "exclusion_ratio_freq", "positional_share_freq"))
    assert len(frame) == n_finite


def test_logits_table_sums_to_the_scores(results):
    """Summing the long table's terms over frequency gives the decomposition's scores."""
    fl = results["logits"]
    frame = fl.to_dataframe()
    terms = frame[frame.score == "term"]
    total = terms.groupby(["batch", "head", "query_pos", "key_pos"]).value.sum()
    scores = fl.scores()
    b, h, k = 1, fl.heads.index(2), 4
    query = int(fl.query_positions[0])
    assert total.loc[(b, 2, query, k)] == pytest.approx(float(scores[b, h, 0, k]), abs=1e-5)
    visible = int(fl.mask.sum())
    assert len(terms) == fl.terms.shape[0] * len(fl.heads) * visible * fl.spec.n_freqs


def test_sweep_tables_carry_the_effect(results):
    sweep = results["band_sweep"]
    frame = sweep.to_dataframe()
    assert set(frame.band) == set(sweep.band_names) and set(frame.layer) == {1}
    row = frame[(frame["head"] == 2) & (frame.band == sweep.band_names[0])].iloc[0]
    assert row.effect == pytest.approx(float(sweep.effect("mean_logit")[1, 2, 0]))
    comparison = results["comparison"].to_dataframe()
    assert set(comparison.heads) == {"baseline", "chosen", "random"}
    assert (comparison.heads == "random").sum() == 2 * len(results["comparison"].random)
    toy = results["toy_sweep"].to_dataframe()
    acc = toy[toy.score == "test_accuracy"].set_index("frequency").value
    assert acc.to_dict() == {"0": 0.5, "1+2": 0.75}
    assert toy[toy.score == "sym_freq"].freq_id.tolist() == [0, 1, 2]


def test_train_table_has_every_evaluation(results):
    result = results["train"]
    frame = result.to_dataframe()
    acc = frame[frame.score == "test_accuracy"].set_index("step").value
    assert acc.to_dict() == {r.step: r.test_accuracy for r in result.history}


def test_old_toy_sweep_files_without_a_format_still_load(results, tmp_path):
    toy = results["toy_sweep"]
    (tmp_path / "old.json").write_text(dumps(toy.to_dict()))  # as written before the tag
    assert dumps(FrequencySweep.load(tmp_path / "old.json").to_dict()) == dumps(toy.to_dict())
