"""Hub ids (``gpt2``, ``org/name``) load from the local Hugging Face cache, offline; not
cached, they get today's clear message."""

from __future__ import annotations

import pytest
import torch

import lens_possym as lp
from lens_possym.cli import main
from lens_possym.errors import UnknownModelError
from lens_possym.models.loading import hub_cache_folder


@pytest.fixture
def hub_cache(tmp_path, monkeypatch):
    """A Hugging Face cache holding one tiny model as ``lens-test/tiny-llama`` (the layout
    huggingface_hub writes: models--ORG--NAME/{refs/main, snapshots/<commit>/...})."""
    root = tmp_path / "hub"
    commit = "0123456789abcdef0123456789abcdef01234567"
    repo = root / "models--lens-test--tiny-llama"
    snapshot = repo / "snapshots" / commit
    snapshot.mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)
    hf_model, tokenizer = lp.models.tiny.tiny_hf_model("llama")
    hf_model.save_pretrained(snapshot)
    tokenizer.save_pretrained(snapshot)
    monkeypatch.setenv("HF_HUB_CACHE", str(root))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return snapshot


def test_a_cached_hub_id_loads_offline(hub_cache):
    assert hub_cache_folder("lens-test/tiny-llama") == hub_cache
    model = lp.load_model("lens-test/tiny-llama", device="cpu")
    reference = lp.tiny_model("llama")
    tokens = reference.to_tokens("Alice likes red .")
    assert torch.allclose(model(tokens), reference(tokens), atol=1e-5)


def test_the_command_line_takes_a_cached_hub_id(hub_cache, capsys):
    assert main(["decompose", "--model", "lens-test/tiny-llama", "--layer", "1"]) == 0


def test_an_uncached_hub_id_gets_the_clear_message(hub_cache):
    assert hub_cache_folder("gpt2") is None
    with pytest.raises(UnknownModelError, match="not in the local Hugging Face cache.*'gpt2' "
                       "loads when its files are in the local Hugging Face cache"):
        lp.load_model("gpt2", device="cpu")
