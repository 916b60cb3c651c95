"""Build the notebooks from the cell lists in ``notebooks/src/*.py`` (one file per notebook).

Each source file defines ``CELLS``: a list of ``("md" | "code", text)``. Run
``python notebooks/_build.py`` after editing a source; commit both. Notebooks are stored
without outputs; CI executes them, and a fast test checks that every notebook is what its
source builds (tests/test_notebooks.py).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import nbformat

HERE = Path(__file__).parent


def notebook(source: Path) -> nbformat.NotebookNode:
    """The notebook ``source`` describes (not written anywhere)."""
    spec = importlib.util.spec_from_file_location(source.stem, source)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.metadata["language_info"] = {"name": "python"}
    for kind, text in module.CELLS:
        text = text.strip("\n")
        nb.cells.append(nbformat.v4.new_markdown_cell(text) if kind == "md"
                        else nbformat.v4.new_code_cell(text))
    return nb


def build(source: Path) -> Path:
    """Write the notebook of ``source`` next to this script; return its path."""
    target = HERE / f"{source.stem}.ipynb"
    nbformat.write(notebook(source), target)
    return target


if __name__ == "__main__":
    for src in sorted((HERE / "src").glob("*.py")):
        print("wrote", build(src))
