"""Every notebook is what its source builds (fast), and runs top to bottom offline (slow).

The kernel runs in its own process, out of reach of pytest-socket, so it gets an IPython
startup file that refuses every connection except to loopback (which the kernel itself
needs) and Unix sockets. A notebook that reaches for the network fails here.
"""

from __future__ import annotations

import importlib.util
import os
import textwrap
from pathlib import Path

import pytest

NOTEBOOK_DIR = Path(__file__).parent.parent / "notebooks"
NOTEBOOKS = sorted(NOTEBOOK_DIR.glob("*.ipynb"))
SOURCES = sorted((NOTEBOOK_DIR / "src").glob("*.py"))

_NETWORK_GUARD = textwrap.dedent(
    """
    import socket as _socket

    _real_connect = _socket.socket.connect

    def _guarded_connect(self, address):
        if self.family in (_socket.AF_INET, _socket.AF_INET6):
            host = address[0]
            if host not in ("127.0.0.1", "::1", "localhost"):
                raise OSError(f"network access blocked in tests: {address!r}")
        return _real_connect(self, address)

    _socket.socket.connect = _guarded_connect
    """
)


def _builder():
    spec = importlib.util.spec_from_file_location("notebook_build", NOTEBOOK_DIR / "_build.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _without_cell_ids(nb) -> dict:
    # nbformat gives every new cell a random id, so two builds of one source differ there
    data = dict(nb)
    data["cells"] = [{k: v for k, v in cell.items() if k != "id"} for cell in nb["cells"]]
    return data


def test_every_notebook_has_a_source_and_every_source_a_notebook():
    assert [p.stem for p in NOTEBOOKS] == [p.stem for p in SOURCES]


@pytest.mark.parametrize("source", SOURCES, ids=[p.stem for p in SOURCES])
def test_each_notebook_is_what_its_source_builds(source):
    """Run ``python notebooks/_build.py`` after editing a source, and commit both."""
    import nbformat

    built = _builder().notebook(source)
    committed = nbformat.read(NOTEBOOK_DIR / f"{source.stem}.ipynb", as_version=4)
    assert not any(cell.get("outputs") or cell.get("execution_count")
                   for cell in committed.cells if cell.cell_type == "code"), \
        f"{source.stem}.ipynb was committed with outputs"
    assert _without_cell_ids(committed) == _without_cell_ids(built), \
        f"{source.stem}.ipynb differs from notebooks/src/{source.name}: run " \
        "python notebooks/_build.py"


@pytest.fixture(scope="module")
def offline_ipython_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("ipython")
    startup = root / "profile_default" / "startup"
    startup.mkdir(parents=True)
    (startup / "00-block-network.py").write_text(_NETWORK_GUARD)
    return root


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_runs_offline(path, offline_ipython_dir, monkeypatch, tmp_path):
    import nbformat
    from nbclient import NotebookClient

    monkeypatch.setenv("IPYTHONDIR", str(offline_ipython_dir))
    monkeypatch.setenv("TQDM_DISABLE", "1")
    notebook = nbformat.read(path, as_version=4)
    client = NotebookClient(notebook, timeout=900, kernel_name="python3",
                            resources={"metadata": {"path": str(tmp_path)}})
    client.execute(env=dict(os.environ))
    errors = [
        output for cell in notebook.cells if cell.cell_type == "code"
        for output in cell.get("outputs", []) if output.get("output_type") == "error"
    ]
    assert not errors
    images = [o for c in notebook.cells if c.cell_type == "code" for o in c.get("outputs", [])
              if "image/png" in o.get("data", {})]
    assert images, f"{path.name} shows no figure"


def test_the_network_guard_blocks_outside_addresses(tmp_path):
    """The guard itself: outside addresses refused, loopback allowed (checked in-process)."""
    import socket

    namespace: dict = {}
    exec(_NETWORK_GUARD, namespace)
    try:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        with pytest.raises(OSError, match="blocked"):
            sock.connect(("192.0.2.1", 80))
        sock.close()
    finally:
        socket.socket.connect = namespace["_real_connect"]
