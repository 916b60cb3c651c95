"""Every input kind is checked where it enters, and results that cannot be right raise
(issue 27): each case the issue lists, as a test.

* tokens: dtype, device, range, length against the context (no silent truncation);
* ids and selections: the grammar, duplicates, types (bools refused);
* configs: finite, in range, scorable (``tau=1e-320``);
* reference batches from the same model; files shape-consistent on load;
* ``nan``/``inf`` in results raised, unless the user asks otherwise.

Each failure is a ``LensPossymError`` whose message names the value and the fix.
"""

from __future__ import annotations

import json

import pytest
import torch

import lens_possym as lp
from lens_possym.errors import (InvalidSelectionError, LensPossymError, NonFiniteResultError,
                                ResultsFileError, UnsupportedModelError)
from lens_possym.interventions import ablate_frequencies_hooks, frequency_means
from lens_possym.results_io import content_digest
from lens_possym.scores import ScoreConfig
from lens_possym.scores.dataset import dataset_profile, read_prompts
from tests.helpers import PROMPT

LONG = " ".join(["red"] * 400)          # 401 tokens: the tiny models' context is 256


@pytest.fixture(scope="module")
def model():
    return lp.tiny_model("llama")


@pytest.fixture(scope="module")
def tokens(model):
    return model.to_tokens(PROMPT)


# ---- tokens ---------------------------------------------------------------------------------


@pytest.mark.parametrize("call", [
    lambda m, x: lp.frequency_logits(m, x, 1),
    lambda m, x: lp.swap_scores(m, x, layers=[1]),
    lambda m, x: lp.capture_attention_inputs(m, x, 1),
    lambda m, x: lp.frequency_norms(m, x, layers=[1]),
])
def test_a_prompt_longer_than_the_context_is_refused_not_truncated(model, call):
    assert model.cfg.n_ctx == 256
    with pytest.raises(InvalidSelectionError, match="401 tokens but the model's context is 256"):
        call(model, LONG)


def test_a_long_prompt_in_a_dataset_is_named(model):
    with pytest.raises(InvalidSelectionError, match=r"prompt 1 .*401 tokens.*context is 256"):
        dataset_profile(model, [PROMPT, LONG], per_frequency=False)


@pytest.mark.parametrize("dtype", [torch.int8, torch.uint8, torch.int16, torch.int32])
def test_integer_tokens_of_any_width_are_ids(model, tokens, dtype):
    small = tokens.clamp(max=120)
    want = lp.frequency_logits(model, small, 1).terms
    assert torch.equal(lp.frequency_logits(model, small.to(dtype), 1).terms, want)


@pytest.mark.parametrize("bad, phrase", [
    (lambda t: t.float(), "must be integer ids, got a torch.float32"),
    (lambda t: t.bool(), "must be integer ids, got a torch.bool"),
    (lambda t: t.to("meta"), "meta tensor"),
    (lambda t: t + 10_000, "token ids must be in 0..159"),
    (lambda t: t - 100, "token ids must be in 0..159"),
    (lambda t: t[None, None], "must be \\[batch, pos\\]"),
    (lambda t: t[:, :0], "empty"),
    (lambda t: t[0].tolist(), "as a Python list"),
    (lambda t: [True, 5, 6], "as a Python list"),
])
def test_bad_tokens_are_named(model, tokens, bad, phrase):
    with pytest.raises(InvalidSelectionError, match=phrase):
        lp.swap_scores(model, bad(tokens), layers=[1])


def test_bool_token_ids_in_prompt_files_and_lists_are_refused(model, tmp_path):
    path = tmp_path / "p.jsonl"
    path.write_text('[1, 5, 6, 7]\n[true, 5, 6, 7]\n')
    with pytest.raises(InvalidSelectionError, match=r"p.jsonl:2.*integer token ids"):
        list(read_prompts(path))
    with pytest.raises(InvalidSelectionError, match="prompt 0 is a list holding.*not bools"):
        dataset_profile(model, [[True, 5, 6, 7]])


def test_a_device_torch_cannot_reach_is_named():
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    with pytest.raises(InvalidSelectionError, match="sees no CUDA GPU"):
        lp.tiny_model("llama", device="cuda")


# ---- ids and selections ------------------------------------------------------------------------


@pytest.mark.parametrize("call, phrase", [
    (lambda m, t: lp.swap_scores(m, t, layers="0,,1"), "empty item between commas"),
    (lambda m, t: lp.swap_scores(m, t, layers="0,0"), "more than once"),
    (lambda m, t: lp.swap_scores(m, t, layers=[1, -1]), "more than once"),
    (lambda m, t: lp.swap_scores(m, t, layers=[True]), "must be an integer, got True"),
    (lambda m, t: lp.swap_scores(m, t, layers=[1], heads="1,1"), "more than once"),
    (lambda m, t: ablate_frequencies_hooks(m, "1.0", freqs="\uff11"), "must be an integer"),
    (lambda m, t: ablate_frequencies_hooks(m, "1.0,1.0", freqs="0"), "more than once"),
    (lambda m, t: ablate_frequencies_hooks(m, "1.0", freqs=[]), "no frequency ids"),
    (lambda m, t: ablate_frequencies_hooks(m, "1.0", freqs="0", side=""), "unknown side ''"),
    (lambda m, t: ablate_frequencies_hooks(m, "1.0", "unrotate", side="q"), "side='qk'"),
    (lambda m, t: lp.frequency_logits(m, t, None), "one layer index"),
    (lambda m, t: lp.frequency_logits(m, t, [0, 1]), "one layer index"),
    (lambda m, t: lp.rope_spec(m, 1.0), "must be an integer, got 1.0"),
    (lambda m, t: lp.rope_spec(m, True), "must be an integer, got True"),
])
def test_malformed_selections_are_named(model, tokens, call, phrase):
    with pytest.raises(InvalidSelectionError, match=phrase):
        call(model, tokens)


def test_text_ids_read_as_ids(model):
    assert lp.rope_spec(model, "1").layer == lp.rope_spec(model, -1).layer == 1


# ---- configs ---------------------------------------------------------------------------------


@pytest.mark.parametrize("settings, phrase", [
    (dict(tau=1e-320), "below the smallest normal float64"),
    (dict(tau=1e-40, dtype="float32"), "below the smallest normal float32"),
    (dict(tau=True), "positive finite number.*got True"),
    (dict(tau=float("nan")), "positive finite"),
    (dict(tau=-1.0), "positive finite"),
    (dict(n_blocks=1_000_000), "n_blocks=1000000 is more blocks"),
    (dict(n_blocks=True), "n_blocks must be an integer"),
    (dict(nonfinite="ignore"), "unknown nonfinite"),
])
def test_configs_that_cannot_score_are_refused_when_made(settings, phrase):
    with pytest.raises(InvalidSelectionError, match=phrase):
        ScoreConfig(**settings)


def test_a_small_tau_that_floats_hold_scores_finite(model, tokens):
    scores = lp.swap_scores(model, tokens, layers=[1], tau=1e-300)
    assert scores.pos[1].isfinite().all() and scores.pos_freq[1].isfinite().all()


def test_a_config_that_is_not_one_is_named(model, tokens):
    with pytest.raises(InvalidSelectionError, match=r"ScoreConfig\(\*\*\{'tau': 1.0\}\)"):
        lp.swap_scores(model, tokens, {"tau": 1.0}, layers=[1])


# ---- non-finite results ------------------------------------------------------------------------


def _break(model):
    with torch.no_grad():
        model.blocks[0].attn.q.weight[0, 0] = float("nan")


def test_nan_weights_give_an_error_not_nan_scores(tokens):
    broken = lp.tiny_model("llama")
    _break(broken)
    with pytest.raises(NonFiniteResultError, match="layer 0: the model computes nan/inf"):
        lp.swap_scores(broken, tokens, check=False, exclusion=False)
    # weights broken after the geometry was read: the scores themselves are checked
    late = lp.tiny_model("llama")
    lp.rope_specs(late)
    _break(late)
    with pytest.raises(NonFiniteResultError, match=r"nan/inf \(pos of heads 0.0"):
        lp.swap_scores(late, tokens, check=False, exclusion=False)
    kept = lp.swap_scores(late, tokens, check=False, exclusion=False, nonfinite="keep")
    assert kept.pos[0].isnan().any()       # asked for: returned as computed


def test_binding_accuracy_of_nan_logits_is_an_error(model):
    task = lp.binding_task(model, n_prompts=2, n_pairs=2)
    logits = model(task.tokens)
    logits[1, -1, 3] = float("nan")
    with pytest.raises(NonFiniteResultError, match=r"prompts \[1\]"):
        lp.evaluate_binding(model, task, logits)
    assert 0 <= lp.evaluate_binding(model, task).accuracy <= 1


# ---- reference batches -----------------------------------------------------------------------


def test_mean_ablation_means_from_another_model_are_refused(model, tokens):
    other = lp.tiny_model("qwen2")
    foreign = frequency_means(other, other.to_tokens(PROMPT), [1])
    with pytest.raises(InvalidSelectionError, match="taken on another model|not on"):
        ablate_frequencies_hooks(model, "1.0", "mean", freqs="0", means=foreign)
    same_shape = frequency_means(model, tokens, [1])
    same_shape.model_name = "some/other-model"
    with pytest.raises(InvalidSelectionError, match="taken on 'some/other-model'"):
        ablate_frequencies_hooks(model, "1.0", "mean", freqs="0", means=same_shape)
    with pytest.raises(InvalidSelectionError, match="must be a FrequencyMeans"):
        ablate_frequencies_hooks(model, "1.0", "mean", freqs="0", means={"q": 1})


# ---- models ------------------------------------------------------------------------------------


@pytest.mark.parametrize("family", ["deepseek-v3", "phimoe"])
def test_families_that_cannot_run_are_named(family):
    with pytest.raises(UnsupportedModelError):
        model = lp.tiny_model(family)
        lp.swap_scores(model, "Alice likes red . Bob likes blue", per_frequency=False)


@pytest.mark.parametrize("args", [(None, None), ("not a model", object()), (3, None)])
def test_from_hf_without_a_model_is_named(args):
    with pytest.raises(LensPossymError):
        lp.from_hf(*args)


# ---- files -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def saved(model, tokens, tmp_path_factory):
    path = tmp_path_factory.mktemp("scores") / "scores.json"
    lp.swap_scores(model, tokens, layers=[1]).save(path)
    return json.loads(path.read_text())


@pytest.mark.parametrize("change, phrase", [
    (lambda d: d.update(sym=d["sym"][:1]), r"sym has shape \(1, 4\), pos \(2, 4\)"),
    (lambda d: d.pop("pos"), "no pos scores"),
    (lambda d: d.update(layers=[99]), r"layers \[99\] do not fit its 2 layers"),
    (lambda d: d.update(layers=[1, 1]), "each once"),
    (lambda d: d.update(layers=[True]), "a list of layer indices"),
    (lambda d: d.update(pos_freq=d["pos_freq"][:, :2]), "pos_freq has shape"),
    (lambda d: d.update(angles=d["angles"][:1]), "angles has shape"),
    (lambda d: d.pop("sym_prompts"), "one of pos and sym only"),
])
def test_a_scores_file_whose_parts_do_not_fit_is_refused(saved, tmp_path, change, phrase):
    data = json.loads(json.dumps(saved))
    for key in ("sym", "pos_freq", "angles"):
        if isinstance(data.get(key), dict):
            pytest.skip("tensors are not stored as nested lists here")
    change(data) if "pos_freq" not in phrase else data.update(
        pos_freq=[[row[:2] for row in layer] for layer in saved["pos_freq"]])
    path = tmp_path / "scores.json"
    path.write_text(json.dumps({**data, "digest": content_digest(data)}))  # as if written so
    with pytest.raises(ResultsFileError, match=phrase):
        lp.PosSymScores.load(path)
    path.write_text(json.dumps(data))  # edited after it was written: its digest says so
    with pytest.raises(ResultsFileError, match="failed its digest"):
        lp.PosSymScores.load(path)


def test_the_saved_file_itself_loads(saved, tmp_path):
    path = tmp_path / "scores.json"
    path.write_text(json.dumps(saved))
    assert lp.PosSymScores.load(path).layers == [1]


@pytest.mark.parametrize("make, phrase", [
    (lambda p: p, "no file at"),
    (lambda p: p.write_bytes(b"\xff\xfe\x00\x81") and p, "not a text file"),
    (lambda p: p.mkdir() or p, "is a folder"),
    (lambda p: p.write_text("[" * 100000) and p, "not JSON"),
])
def test_a_results_file_that_cannot_be_read_is_named(tmp_path, make, phrase):
    path = make(tmp_path / "scores.json")
    with pytest.raises(ResultsFileError, match=phrase):
        lp.PosSymScores.load(path)
