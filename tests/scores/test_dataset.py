"""Dataset-scale profiles: per-prompt agreement with swap_scores, exact moment merges,
mixed lengths without padding, incremental shards and resuming after an interruption."""

from __future__ import annotations

import json

import pytest
import torch

import lens_possym as lp
from lens_possym.errors import InvalidSelectionError, ResultsFileError
from lens_possym.scores.dataset import (SCORES, DatasetProfile, Moments, dataset_profile,
                                        read_prompts)


def _prompts(n: int, seed: int = 0, low: int = 5, high: int = 14) -> list[list[int]]:
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(low, high, (n,), generator=g)
    return [torch.randint(2, 120, (int(k),), generator=g).tolist() for k in lengths]


@pytest.fixture(scope="module")
def model():
    return lp.tiny_model("llama", n_layers=2)


PROMPTS = _prompts(24)


@pytest.fixture(scope="module")
def whole(model):
    return dataset_profile(model, PROMPTS, shard_size=5)


def _same(a: DatasetProfile, b: DatasetProfile) -> bool:
    return a.moments.keys() == b.moments.keys() and all(
        torch.equal(getattr(a.moments[k], f), getattr(b.moments[k], f))
        for k in a.moments for f in ("count", "mean", "m2"))


def test_mean_and_spread_equal_swap_scores_prompt_by_prompt(model, whole):
    # each prompt alone (its own length, its own positions: nothing padded)
    single = [lp.swap_scores(model, torch.tensor([p])) for p in PROMPTS]
    assert len({len(p) for p in PROMPTS}) > 3                      # mixed lengths
    for name in ("pos", "sym", "pos_freq", "sym_freq", "exclusion_ratio_freq", "positional_share"):
        values = torch.stack([getattr(s, name) for s in single])
        finite = values.isfinite()
        count = finite.sum(0)
        mean = values.nansum(0) / count
        var = torch.where(finite, values - mean, 0).pow(2).sum(0) / (count - 1)
        # float32 forward passes of a batch and of one prompt round differently
        torch.testing.assert_close(whole.mean(name), mean, atol=1e-6, rtol=0, equal_nan=True)
        torch.testing.assert_close(whole.std(name), var.sqrt(), atol=1e-6, rtol=0,
                                   equal_nan=True)
        assert torch.equal(whole.count(name), count.double())
    assert whole.n_prompts == 24 and whole.n_shards == 5
    assert whole.n_tokens["min"] == min(map(len, PROMPTS))


def test_moments_merge_exactly_in_any_split():
    g = torch.Generator().manual_seed(1)
    x = torch.randn(50, 3, 4, generator=g, dtype=torch.float64) * 1e3 + 1e6
    x[torch.rand(50, 3, 4, generator=g) < 0.2] = float("nan")      # undefined values
    x[:, 0, 0] = float("nan")                                      # never defined
    whole = Moments.of(x)
    for cuts in ([10, 30], [1, 2, 3, 49], [25]):
        edges = [0, *cuts, 50]
        merged = Moments.of(x[edges[0]:edges[1]])
        for a, b in zip(edges[1:], edges[2:]):
            merged = merged.merge(Moments.of(x[a:b]))
        assert torch.equal(merged.count, whole.count)
        torch.testing.assert_close(merged.mean, whole.mean, rtol=1e-14, atol=0, equal_nan=True)
        torch.testing.assert_close(merged.m2, whole.m2, rtol=1e-10, atol=0, equal_nan=True)
    assert whole.mean[0, 0].isnan() and whole.std[0, 0].isnan()


def test_an_interrupted_profile_resumes_and_equals_an_uninterrupted_run(model, whole, tmp_path):
    calls = []

    def interrupt_after_two(done, total, seconds):
        calls.append(done)
        if len(calls) == 2:
            raise KeyboardInterrupt                                # as Ctrl-C would

    with pytest.raises(KeyboardInterrupt):
        dataset_profile(model, iter(PROMPTS), shard_size=5, out_dir=tmp_path,
                        progress=interrupt_after_two)
    written = sorted(p.name for p in (tmp_path / "shards").glob("shard_*.pt"))
    assert written == ["shard_000000.pt", "shard_000001.pt"]
    assert not (tmp_path / "profile.json").exists()
    stamps = {p: p.stat().st_mtime_ns for p in (tmp_path / "shards").iterdir()}

    seen = []
    resumed = dataset_profile(model, iter(PROMPTS), shard_size=5, out_dir=tmp_path,
                              progress=lambda done, total, s: seen.append(done))
    assert _same(resumed, whole)                                   # bit for bit
    assert all(p.stat().st_mtime_ns == t for p, t in stamps.items())  # not recomputed
    assert seen[:2] == [5, 10] and seen[-1] == 24
    loaded = DatasetProfile.load(tmp_path / "profile.json")
    assert _same(loaded, whole) and loaded.config == whole.config
    # running it a third time reads everything back
    assert _same(dataset_profile(model, PROMPTS, shard_size=5, out_dir=tmp_path), whole)


def test_stop_after_leaves_a_profile_to_continue(model, whole, tmp_path):
    assert dataset_profile(model, PROMPTS, shard_size=5, out_dir=tmp_path, stop_after=3) is None
    assert len(list((tmp_path / "shards").glob("shard_*.pt"))) == 3
    assert _same(dataset_profile(model, PROMPTS, shard_size=5, out_dir=tmp_path), whole)


def test_other_settings_or_prompts_in_out_dir_are_refused(model, tmp_path):
    dataset_profile(model, PROMPTS[:6], shard_size=5, out_dir=tmp_path)
    with pytest.raises(ResultsFileError, match="other settings.*shard_size"):
        dataset_profile(model, PROMPTS[:6], shard_size=4, out_dir=tmp_path)
    with pytest.raises(ResultsFileError, match="other prompts than shard 0"):
        dataset_profile(model, PROMPTS[6:12], shard_size=5, out_dir=tmp_path)


def test_bad_input_is_named(model, tmp_path):
    with pytest.raises(InvalidSelectionError, match="no prompts"):
        dataset_profile(model, [])
    with pytest.raises(InvalidSelectionError, match="prompt 3 .* has 2 tokens"):
        dataset_profile(model, PROMPTS[:3] + [[5, 6]])
    with pytest.raises(InvalidSelectionError, match="prompt 1 is a float"):
        dataset_profile(model, [PROMPTS[0], 1.5])
    with pytest.raises(InvalidSelectionError, match="shard_size"):
        dataset_profile(model, PROMPTS, shard_size=0)
    with pytest.raises(InvalidSelectionError, match="pass the model's name"):
        dataset_profile(model, PROMPTS, executor=lp.execution.RayExecutor())


def test_read_prompts_text_and_jsonl(tmp_path):
    text = tmp_path / "p.txt"
    text.write_text("first prompt\n\nsecond one\n")
    assert list(read_prompts(text)) == ["first prompt", "second one"]
    jsonl = tmp_path / "p.jsonl"
    jsonl.write_text('{"text": "a b c"}\n"bare"\n[1, 2, 3]\n')
    assert list(read_prompts(jsonl)) == ["a b c", "bare", [1, 2, 3]]
    jsonl.write_text('{"text": "a"}\n{"body": "b"}\n')
    with pytest.raises(InvalidSelectionError, match=r"p.jsonl:2 has no 'text' field"):
        list(read_prompts(jsonl))
    jsonl.write_text('{"text": "a"}\n{oops\n')
    with pytest.raises(InvalidSelectionError, match=r"p.jsonl:2 is not valid JSON"):
        list(read_prompts(jsonl))
    with pytest.raises(InvalidSelectionError, match="no prompts file"):
        list(read_prompts(tmp_path / "missing.txt"))


def test_read_prompts_strips_a_byte_order_mark_and_refuses_absurd_ids(tmp_path):
    """Issue 39: a UTF-8 BOM stayed on the first prompt (an <unk> token); an id of 10^23
    was an internal error."""
    for name, body, first in (("p.txt", "Alice likes red\nBob\n", "Alice likes red"),
                              ("p.jsonl", '{"text": "Alice"}\n', "Alice"),
                              ("ids.jsonl", "[1, 2]\n", [1, 2])):
        path = tmp_path / name
        path.write_bytes(b"\xef\xbb\xbf" + body.encode())
        assert list(read_prompts(path))[0] == first
    path.write_text("[1, 100000000000000000000000]\n")
    with pytest.raises(InvalidSelectionError, match="ids.jsonl:1: token id 1e.23 is out of"):
        list(read_prompts(path))
    path.write_text("[1, -2]\n")
    with pytest.raises(InvalidSelectionError, match="token id -2 is out of range"):
        list(read_prompts(path))


def test_the_profile_reads_as_scores_and_a_table(whole):
    scores = whole.scores()
    assert torch.equal(scores.pos, whole.mean("pos"))
    frame = whole.to_dataframe()
    assert {"mean", "std", "count"} <= set(frame.columns)
    assert set(frame["score"]) == set(SCORES)
    assert json.loads(json.dumps(whole.to_dict()))["n_prompts"] == 24


def test_scoring_leaves_torch_thread_count_as_it_was(model):
    # numba's OpenMP layer used to reset it to all cores at the first profile, so later
    # forward passes rounded differently (and ignored --threads)
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        lp.swap_scores(model, torch.tensor([PROMPTS[0]]))
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)


def test_files_that_call_the_positional_share_balance_still_load(whole, tmp_path):
    """Files written before the rename hold ``balance`` / ``balance_freq``: a dataset
    profile and a scores file read them as ``positional_share`` / ``_freq``."""
    old = whole.to_dict()
    old["moments"] = {{"positional_share": "balance", "positional_share_freq": "balance_freq"
                       }.get(k, k): m for k, m in old["moments"].items()}
    assert "balance" in old["moments"] and "positional_share" not in old["moments"]
    (tmp_path / "profile.json").write_text(json.dumps(old))
    assert _same(DatasetProfile.load(tmp_path / "profile.json"), whole)
    scores = whole.scores()
    data = scores.to_dict()
    data["balance"], data["balance_freq"] = (data.pop("positional_share"),
                                             data.pop("positional_share_freq"))
    (tmp_path / "scores.json").write_text(json.dumps(data))
    loaded = lp.PosSymScores.load(tmp_path / "scores.json")
    for name in ("positional_share", "positional_share_freq"):
        torch.testing.assert_close(getattr(loaded, name), getattr(scores, name), rtol=0,
                                   atol=0, equal_nan=True)
    assert not hasattr(loaded, "balance")
