"""Shared fixtures (shared plain helpers: :mod:`tests.helpers`).

The network is off for the whole run (pytest-socket, configured in pyproject.toml: only
loopback is allowed, for the notebook kernels). Tiny models are built once per session;
real models load from the user's lens-possym cache (converted once, then seconds).
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import torch

import lens_possym as lp

from .helpers import PROMPT


REPOSITORY = Path(__file__).resolve().parents[1]


def _working_tree_state() -> set[str] | None:
    """``git status --porcelain`` of the repository the tests run from, one entry per
    changed or new file (``None`` outside a git checkout or without git)."""
    if shutil.which("git") is None or not (REPOSITORY / ".git").exists():
        return None
    done = subprocess.run(["git", "status", "--porcelain", "--untracked-files=all"],
                          cwd=REPOSITORY, capture_output=True, text=True)
    return set(done.stdout.splitlines()) if done.returncode == 0 else None


@pytest.fixture(scope="session", autouse=True)
def the_working_tree_is_left_as_found():
    """Tests write only to temporary folders: a file that a run creates or changes in the
    checkout (a command's output in the current directory, a report rewritten in docs/)
    fails the run at its end, naming the files. Changes already there at the start (a
    developer's edits) are not the run's."""
    before = _working_tree_state()
    yield
    after = _working_tree_state()
    if before is not None and after is not None and after - before:
        pytest.fail("the test run wrote into the checkout (tests must write only to "
                    f"tmp_path): {sorted(after - before)}", pytrace=False)


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
def scheme_models():
    """Tiny float64 models of every non-RoPE scheme family, built once: ``{family: model}``
    (tests/positions and tests/test_toeplitz.py share them)."""
    from lens_possym.models.tiny_schemes import SCHEME_FAMILIES, tiny_scheme_model

    return {family: tiny_scheme_model(family, dtype=torch.float64) for family in SCHEME_FAMILIES}


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
