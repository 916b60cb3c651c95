"""Every notebook is what its source builds and is committed executed (fast), and runs top
to bottom offline giving its committed outputs again, numbers to rounding (slow).

The kernel runs in its own process, out of reach of pytest-socket, so it gets an IPython
startup file that refuses every connection except to loopback (which the kernel itself
needs) and Unix sockets. A notebook that reaches for the network fails here.
"""

from __future__ import annotations

import importlib.util
import textwrap
from pathlib import Path

import pytest

NOTEBOOK_DIR = Path(__file__).parent.parent / "notebooks"
NOTEBOOKS = sorted(NOTEBOOK_DIR.glob("*.ipynb"))
SOURCES = sorted((NOTEBOOK_DIR / "src").glob("*.py"))
SOURCE_OF = {p.stem: p for p in SOURCES}

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


def test_every_notebook_has_a_source_and_every_source_a_notebook():
    assert [p.stem for p in NOTEBOOKS] == [p.stem for p in SOURCES]


@pytest.mark.parametrize("source", SOURCES, ids=[p.stem for p in SOURCES])
def test_each_notebook_is_what_its_source_builds_and_is_executed(source):
    """Run ``python notebooks/_build.py --execute NN`` after editing a source, and commit
    both: the notebooks are committed with their outputs, for reading."""
    import nbformat

    builder = _builder()
    built = builder.notebook(source)
    committed = nbformat.read(NOTEBOOK_DIR / f"{source.stem}.ipynb", as_version=4)
    assert builder.sources(committed) == builder.sources(built), \
        f"{source.stem}.ipynb differs from notebooks/src/{source.name}: run " \
        f"python notebooks/_build.py --execute {source.stem[:2]}"
    code = [cell for cell in committed.cells if cell.cell_type == "code"]
    unexecuted = [i for i, cell in enumerate(code, 1) if cell.get("execution_count") is None]
    assert not unexecuted, \
        f"{source.stem}.ipynb was committed without outputs (code cells {unexecuted}): run " \
        f"python notebooks/_build.py --execute {source.stem[:2]}"
    errors = [o for cell in code for o in cell.outputs if o.get("output_type") == "error"]
    assert not errors, f"{source.stem}.ipynb was committed with an error: {errors[0]}"
    assert any(images for _, _, images in builder.comparable_outputs(committed)), \
        f"{source.stem}.ipynb shows no figure"


def test_the_output_comparison_can_fail():
    """Numbers to rounding, times ignored, a changed number or text or figure count caught."""
    import nbformat

    builder = _builder()

    def nb(text, images=1):
        cell = nbformat.v4.new_code_cell("x")
        cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text=text)] + [
            nbformat.v4.new_output("display_data", data={"image/png": "AAAA"})] * images
        book = nbformat.v4.new_notebook()
        book.cells.append(cell)
        return book

    assert builder.outputs_differ(nb("Grid(seconds=36.8, n=18)"), nb("Grid(seconds=41.2, n=18)")) == []
    assert builder.outputs_differ(nb("Grid(seconds=36.8, n=18)"), nb("Grid(seconds=36.8, n=19)"))
    base = nb("accuracy 0.812, head 5.0, done in 3.2 s at 0x7f00aa\n")
    assert builder.outputs_differ(base, nb("accuracy 0.813, head 5.0, done in 9.9 s at 0x1\n")) == []
    assert builder.outputs_differ(base, nb("accuracy 0.912, head 5.0, done in 3.2 s at 0x7f00aa\n"))
    assert builder.outputs_differ(base, nb("accuracy 0.812, head 5.1, done in 3.2 s at 0x7f00aa\n"))
    assert builder.outputs_differ(base, nb("recall 0.812, head 5.0, done in 3.2 s at 0x7f00aa\n"))
    assert builder.outputs_differ(base, nb("accuracy 0.812, head 5.0, done in 3.2 s at 0x7f00aa\n",
                                           images=2))


@pytest.fixture(scope="module")
def offline_ipython_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("ipython")
    startup = root / "profile_default" / "startup"
    startup.mkdir(parents=True)
    (startup / "00-block-network.py").write_text(_NETWORK_GUARD)
    return root


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_runs_offline_and_gives_its_committed_outputs(path, offline_ipython_dir,
                                                                monkeypatch, tmp_path):
    import nbformat

    monkeypatch.setenv("IPYTHONDIR", str(offline_ipython_dir))
    monkeypatch.setenv("TQDM_DISABLE", "1")
    builder = _builder()
    committed = nbformat.read(path, as_version=4)
    fresh = builder.execute(builder.notebook(SOURCE_OF[path.stem]), cwd=tmp_path)
    errors = [
        output for cell in fresh.cells if cell.cell_type == "code"
        for output in cell.get("outputs", []) if output.get("output_type") == "error"
    ]
    assert not errors
    assert any(images for _, _, images in builder.comparable_outputs(fresh)), \
        f"{path.name} shows no figure"
    problems = builder.outputs_differ(committed, fresh)
    assert not problems, (f"{path.name}: the committed outputs are not what it gives now "
                          f"(run python notebooks/_build.py --execute {path.stem[:2]}):\n"
                          + "\n".join(problems))


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
