"""Shared fixtures (shared plain helpers: :mod:`tests.helpers`).

The network is off for the whole run (pytest-socket, configured in pyproject.toml: only
loopback is allowed, for the notebook kernels). Tiny models are built once per session;
real models load from the user's lens-possym cache (converted once, then seconds).
"""

from __future__ import annotations

import pytest
import torch

import lens_possym as lp

from .helpers import PROMPT


@pytest.fixture(scope="module")
def one_torch_thread():
    """Toy models are too small to gain from intra-op threads, and extra threads slow
    down badly on a busy CI machine; the count is restored afterwards. Modules that train
    toys use it with ``pytestmark = pytest.mark.usefixtures("one_torch_thread")``."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="session", params=lp.models.TINY_FAMILIES)
def tiny(request):
    """Each tiny RoPE family in turn (float32)."""
    return lp.tiny_model(request.param)


@pytest.fixture(scope="session")
def tiny_by_family():
    """All tiny families, built once: ``{family: model}``."""
    return {family: lp.tiny_model(family) for family in lp.models.TINY_FAMILIES}


@pytest.fixture(scope="session")
def gemma():
    return lp.load_model("gemma-3-270m")


@pytest.fixture(scope="session")
def smollm2():
    return lp.load_model("smollm2-135m")


@pytest.fixture
def tmp_cache(tmp_path, monkeypatch):
    """A private, empty lens-possym cache for tests that exercise caching."""
    root = tmp_path / "cache"
    monkeypatch.setenv("LENS_POSSYM_CACHE", str(root))
    return root


@pytest.fixture
def prompt():
    return PROMPT
