"""Build the notebooks from the cell lists in ``notebooks/src/*.py`` (one file per notebook),
and execute them so that they are committed with their outputs (numbers, tables, figures)
for a reader.

Each source file defines ``CELLS``: a list of ``("md" | "code", text)``. After editing a
source, run (nice: executing all of them takes CPU minutes)::

    PYTHONPATH=$PWD nice -n 5 python notebooks/_build.py --execute        # every notebook
    PYTHONPATH=$PWD nice -n 5 python notebooks/_build.py --execute 01 03  # some of them

and commit the source and the notebook. ``python notebooks/_build.py`` without
``--execute`` writes the cells only (no outputs), which the tests refuse: a notebook is
committed executed. CI checks both halves (tests/test_notebooks.py): every notebook's
cells are what its source builds (fast), and executing it again gives the committed
outputs in what matters (slow): the same text with numbers equal to rounding
(:func:`comparable_outputs`), the same number of figures per cell (their bytes are not
compared: they differ with the matplotlib version).

Executed with ``TQDM_DISABLE=1`` (no progress bars in the outputs), in a temporary working
folder; stderr output (warnings, progress lines) and execution timestamps are not kept.
"""

from __future__ import annotations

import argparse
import importlib.util
import math
import os
import re
import sys
import tempfile
from pathlib import Path

import nbformat

HERE = Path(__file__).parent

#: how long one cell may run when executed (seconds)
CELL_TIMEOUT = 1800


def notebook(source: Path) -> nbformat.NotebookNode:
    """The notebook ``source`` describes, without outputs (not written anywhere)."""
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


def execute(nb: nbformat.NotebookNode, *, cwd: str | Path | None = None,
            env: dict | None = None) -> nbformat.NotebookNode:
    """Run every cell of ``nb`` in a fresh kernel (in place; returned), keeping what a
    reader needs: stdout, results and figures; not stderr streams nor timestamps."""
    from nbclient import NotebookClient

    env = dict(os.environ if env is None else env)
    env.setdefault("TQDM_DISABLE", "1")
    with tempfile.TemporaryDirectory(prefix="notebook-") as scratch:
        client = NotebookClient(nb, timeout=CELL_TIMEOUT, kernel_name="python3",
                                resources={"metadata": {"path": str(cwd or scratch)}})
        client.execute(env=env)
    for cell in nb.cells:
        cell.metadata.pop("execution", None)
        if cell.cell_type == "code":
            cell.outputs = [o for o in cell.outputs
                            if not (o.get("output_type") == "stream" and o.get("name") == "stderr")]
    return nb


def sources(nb: nbformat.NotebookNode) -> list[tuple[str, str]]:
    """``[(cell type, source)]``: what the notebook's source file decides."""
    return [(cell.cell_type, cell.source) for cell in nb.cells]


# ---- comparing outputs -----------------------------------------------------------------------

_NUMBER = re.compile(r"[-+]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?")
# what differs from run to run by nature: wall times, memory addresses, temporary paths
_VOLATILE = [
    (re.compile(r"\b(seconds|elapsed|wall_s|time_s)([=:]\s*)[-+]?\d+(?:\.\d+)?(?:e[-+]?\d+)?"),
     r"\1\2<time>"),  # a result's repr: PatchingGrid(..., seconds=36.8, ...)
    (re.compile(r"[-+]?\d+(?:\.\d+)?(?:e[-+]?\d+)?\s?(?:s|ms|min|seconds?)\b"), "<time>"),
    (re.compile(r"0x[0-9a-fA-F]+"), "<address>"),
    (re.compile(r"/tmp/[^\s'\"]*"), "<tmp>"),
]


def _texts(cell) -> tuple[list[str], int]:
    """A code cell's text outputs (stdout, results) and its number of figures."""
    texts, images = [], 0
    for output in cell.get("outputs", []):
        kind = output.get("output_type")
        if kind == "stream" and output.get("name") == "stdout":
            texts.append(output.get("text", ""))
        elif kind in ("execute_result", "display_data"):
            data = output.get("data", {})
            if "image/png" in data or "image/svg+xml" in data:
                images += 1
            elif "text/plain" in data:
                texts.append(data["text/plain"])
        elif kind == "error":
            texts.append(f"{output.get('ename')}: {output.get('evalue')}")
    return texts, images


def comparable_outputs(nb: nbformat.NotebookNode) -> list[tuple[str, list[float], int]]:
    """Per code cell: its text outputs with every measured number (two decimals or more, or
    an exponent) taken out (``#`` in its place; shorter numbers such as head ``5.0`` or a
    count stay in the text) and volatile parts (wall times, addresses, temporary paths) replaced by a word, the numbers
    in order, and the number of figures. Two runs agree when the texts are equal, the
    numbers are close (:func:`outputs_differ`) and the figure counts are equal."""
    out = []
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        texts, images = _texts(cell)
        # stdout arrives in one stream output or several (a warning on stderr splits it, as
        # timing decides), so outputs are joined as lines, not with a separator each
        text = "".join(t if t.endswith("\n") else t + "\n" for t in texts)
        for pattern, word in _VOLATILE:
            text = pattern.sub(word, text)
        # a number with at most one decimal (a head "5.0", a count, a layer) is part of the
        # text and must match exactly; longer ones (measurements) are compared to rounding
        exact = re.compile(r"(?<![\d.])[-+]?\d+(?:\.\d)?(?![\d.eE])")
        skeleton = _NUMBER.sub(lambda m: m.group(0) if exact.fullmatch(m.group(0)) else "#",
                               text)
        numbers = [float(n) for n in _NUMBER.findall(text) if not exact.fullmatch(n)]
        out.append((skeleton, numbers, images))
    return out


def outputs_differ(committed: nbformat.NotebookNode, fresh: nbformat.NotebookNode, *,
                   rel: float = 0.02, abs_: float = 2e-3) -> list[str]:
    """What differs between two executions of one notebook, in what matters to a reader
    (empty when they agree): per code cell, the text, the numbers (``|a − b| <= abs_ +
    rel·|b|``: a number printed to 3 digits may move in its last digit with the thread
    count) and the number of figures."""
    problems = []
    for index, (old, new) in enumerate(zip(comparable_outputs(committed),
                                           comparable_outputs(fresh)), 1):
        (old_text, old_numbers, old_images), (new_text, new_numbers, new_images) = old, new
        if old_text != new_text:
            problems.append(f"code cell {index}: the text differs:\n  committed: "
                            f"{old_text[:300]!r}\n  now:       {new_text[:300]!r}")
        elif len(old_numbers) != len(new_numbers) or any(
                not (math.isclose(a, b, rel_tol=rel, abs_tol=abs_) or (a != a and b != b))
                for a, b in zip(old_numbers, new_numbers)):
            pairs = [(a, b) for a, b in zip(old_numbers, new_numbers)
                     if not math.isclose(a, b, rel_tol=rel, abs_tol=abs_)]
            problems.append(f"code cell {index}: numbers differ (committed, now): {pairs[:6]}")
        if old_images != new_images:
            problems.append(f"code cell {index}: {old_images} figure(s) committed, "
                            f"{new_images} now")
    if len(comparable_outputs(committed)) != len(comparable_outputs(fresh)):
        problems.append("the notebooks have different numbers of code cells")
    return problems


def build(source: Path, *, run: bool = False) -> Path:
    """Write the notebook of ``source`` next to this script (executed with ``run``)."""
    target = HERE / f"{source.stem}.ipynb"
    nb = notebook(source)
    if run:
        execute(nb)
    nbformat.write(nb, target)
    return target


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--execute", action="store_true",
                        help="run each notebook and keep its outputs (what is committed)")
    parser.add_argument("names", nargs="*",
                        help="notebooks to build, by prefix (e.g. 01 03); default all")
    args = parser.parse_args(argv)
    chosen = [src for src in sorted((HERE / "src").glob("*.py"))
              if not args.names or any(src.stem.startswith(n) for n in args.names)]
    if not chosen:
        print(f"no notebook source matches {args.names}", file=sys.stderr)
        return 2
    for src in chosen:
        print("wrote", build(src, run=args.execute), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
