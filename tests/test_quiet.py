"""``import lens_possym`` in a Jupyter kernel without ipywidgets prints no TqdmWarning."""

from __future__ import annotations

import os

import pytest


def _outputs(code: str) -> list[str]:
    import nbclient
    import nbformat

    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(code)])
    nbclient.NotebookClient(nb, timeout=300, kernel_name="python3").execute()
    return [o.get("text", "") + str(o.get("evalue", "")) for o in nb.cells[0].outputs]


@pytest.mark.slow
def test_import_in_a_kernel_without_ipywidgets_is_quiet(monkeypatch):
    pytest.importorskip("nbclient")
    try:
        import ipywidgets  # noqa: F401
    except ImportError:
        pass
    else:
        pytest.skip("ipywidgets is installed here, so tqdm has nothing to warn about")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(  # the kernel imports this tree
        [root] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    # the check can fail: tqdm.auto on its own warns in this kernel
    assert any("IProgress not found" in out for out in _outputs("import tqdm.auto"))
    assert _outputs("import lens_possym") == []
