"""The package's import structure (docs/layering.md), read from its source with ``ast``.

* no import cycle among the package's modules, counting imports inside functions;
* package-internal imports inside functions: only those in :data:`FUNCTION_IMPORTS`,
  each with its reason, at most 20 in all;
* the layer order: no module imports a module of a higher layer (:data:`LAYERS`);
* the papers are plug-ins: nothing outside ``lens_possym/papers`` imports them, and
  ``import lens_possym`` imports none of them; a paper imports the core through its public
  modules only (the plug-in API, ``lens_possym.plugins``, serves what a plug-in needs),
  never a private (``_name``) module of the core, and no paper imports another;
* the model is resolved at the public boundary: ``rope_specs(`` and ``schemes(`` are
  called only from :data:`READERS` (at most 5 places), and no private function takes
  ``HookedModel | Resolved``;
* no module imports a private name (``_name``) of another module.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "lens_possym"

# ---- the rules -------------------------------------------------------------------------------

#: bottom to top; a module may import modules of its own layer or lower ones. A module
#: belongs to the first entry naming it or a package above it (the longest name wins).
LAYERS: list[tuple[str, list[str]]] = [
    ("foundation", ["errors", "typing", "_checks", "_json", "_lazy", "_inputs", "_precision",
                    "_files", "_lock", "_interrupt", "_quiet", "_ids", "_mismatch", "_hooks",
                    "_attention", "results_io", "registry", "execution", "bands"]),
    ("rope", ["rope"]),
    ("positions", ["positions"]),
    ("resolved", ["resolved"]),
    ("models", ["models"]),
    ("capture", ["capture"]),
    # prompt sets use the foundation only; experiments (metrics, head importance) read them
    ("tasks", ["tasks"]),
    # analyses that run the model through capture: per-frequency terms and the Toeplitz
    # split (each scheme names its split; lens_possym.toeplitz computes it)
    ("decompose", ["decompose", "toeplitz"]),
    ("scores", ["scores"]),
    # hook primitives, then the experiments and statistics built on them
    ("interventions", ["interventions"]),
    ("experiments", ["experiments"]),
    ("circuits", ["circuits"]),
    ("training", ["training"]),
    ("viz, report", ["viz", "report"]),
    # the top-level package serves every layer's names (lazily): only the command line and
    # the papers may import through it; so does the plug-in API (lens_possym.plugins), for
    # the papers and outside plug-ins
    ("cli", ["cli", "", "plugins"]),
    ("papers", ["papers"]),
]

#: package-internal imports inside functions that stay, as (file, imported module): why.
#: A new one fails test_function_level_imports_are_listed until it is added here with its
#: reason (docs/layering.md); avoiding an import cycle is not a reason.
FUNCTION_IMPORTS: dict[tuple[str, str], str] = {
}

#: the places that call rope_specs( / schemes( on a model, as (file, function)
READERS: dict[tuple[str, str], str] = {
    ("lens_possym/resolved.py", "Resolved.specs"): "the one read of a model's RoPE specs",
    ("lens_possym/resolved.py", "Resolved.schemes"): "the one read of a model's schemes",
    ("lens_possym/positions/detect.py", "schemes"): (
        "the schemes of a RoPE model are views of its specs (Resolved passes its own)"),
    ("lens_possym/positions/detect.py", "positional_scheme"): "one layer of schemes()",
    ("lens_possym/rope/reading.py", "rope_spec"): "one layer of rope_specs()",
}

# ---- reading the package ---------------------------------------------------------------------


@dataclass(frozen=True)
class Import:
    module: str         # the importing module, "lens_possym.scores.profile"
    path: str           # its file, relative to the repository
    line: int
    target: str         # the imported module (the deepest one that exists)
    in_function: bool


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@lru_cache(maxsize=1)
def _sources() -> dict[str, tuple[Path, ast.Module]]:
    return {_module_name(p): (p, ast.parse(p.read_text(), str(p)))
            for p in sorted(PACKAGE.rglob("*.py"))}


def _function_nodes(tree: ast.Module) -> set[int]:
    inside = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            inside.update(id(n) for n in ast.walk(node) if n is not node)
    return inside


@lru_cache(maxsize=1)
def _imports() -> tuple[Import, ...]:
    modules = _sources()
    found = []
    for name, (path, tree) in modules.items():
        inside = _function_nodes(tree)
        package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                base = (".".join(package[:len(package) - node.level + 1] + ([node.module] if
                        node.module else [])) if node.level else node.module or "")
                targets = [f"{base}.{a.name}" for a in node.names] or [base]
                targets = [t if t in modules else base for t in targets]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                continue
            for target in targets:
                if target != "lens_possym" and not target.startswith("lens_possym."):
                    continue
                while target not in modules and "." in target:
                    target = target.rsplit(".", 1)[0]
                if target != name:
                    found.append(Import(name, str(path.relative_to(ROOT)), node.lineno,
                                        target, id(node) in inside))
    return tuple(found)


def _layer(module: str) -> int:
    inner = module.split(".", 1)[1] if "." in module else ""
    best, rank = -1, None
    for i, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if (inner == prefix or inner.startswith(prefix + ".")) and len(prefix) > best:
                best, rank = len(prefix), i
    if rank is None:
        raise AssertionError(f"{module} is in no layer of LAYERS; add it (docs/layering.md)")
    return rank


# ---- (a) no cycle --------------------------------------------------------------------------


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for root in edges:
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_cycle_finder_finds_a_cycle():
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _cycles(edges) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycle_counting_imports_inside_functions():
    edges: dict[str, set[str]] = {m: set() for m in _sources()}
    for imp in _imports():
        edges[imp.module].add(imp.target)
    cycles = _cycles(edges)
    assert not cycles, f"import cycles (function-level imports counted): {cycles}"


# ---- (b) function-level imports ------------------------------------------------------------


def test_function_level_imports_are_listed():
    unlisted = [f"{i.path}:{i.line}: {i.target}" for i in _imports()
                if i.in_function and (i.path, i.target) not in FUNCTION_IMPORTS]
    assert not unlisted, (
        "package-internal imports inside functions that FUNCTION_IMPORTS does not list "
        "(import at module level, or list it with a reason other than a cycle: "
        f"docs/layering.md): {unlisted}")


def test_function_level_imports_are_few_and_each_has_a_reason():
    assert all(reason.strip() and "cycle" not in reason for reason in FUNCTION_IMPORTS.values())
    listed = Counter((i.path, i.target) for i in _imports() if i.in_function)
    assert sum(listed[key] for key in FUNCTION_IMPORTS) <= 20
    stale = [key for key in FUNCTION_IMPORTS if not listed[key]]
    assert not stale, f"FUNCTION_IMPORTS lists imports that are gone: {stale}"


# ---- (c) the layer order --------------------------------------------------------------------


def test_every_module_has_a_layer():
    for module in _sources():
        _layer(module)


def test_no_module_imports_a_higher_layer():
    upward = [f"{i.path}:{i.line}: {i.module} ({LAYERS[_layer(i.module)][0]}) imports "
              f"{i.target} ({LAYERS[_layer(i.target)][0]})"
              for i in _imports() if _layer(i.target) > _layer(i.module)]
    assert not upward, "imports of a higher layer:\n" + "\n".join(upward)


def test_layer_of():
    assert LAYERS[_layer("lens_possym.toeplitz")][0] == "decompose"
    assert LAYERS[_layer("lens_possym.registry")][0] == "foundation"
    assert LAYERS[_layer("lens_possym.positions.detect")][0] == "positions"
    assert LAYERS[_layer("lens_possym")][0] == "cli"
    assert LAYERS[_layer("lens_possym._ids")][0] == "foundation"


# ---- (d) the papers are plug-ins -----------------------------------------------------------


def test_nothing_outside_the_papers_imports_them():
    outside = [f"{i.path}:{i.line}: {i.target}" for i in _imports()
               if i.target.startswith("lens_possym.papers")
               and not i.module.startswith("lens_possym.papers")]
    assert not outside, f"modules outside lens_possym/papers import it: {outside}"


def _paper(module: str) -> str | None:
    """``"a"`` for ``lens_possym.papers.a.toy``; None outside the papers."""
    parts = module.split(".")
    return parts[2] if len(parts) > 2 and parts[1] == "papers" else None


def test_papers_import_no_private_module_of_the_core():
    private = [f"{i.path}:{i.line}: {i.target}" for i in _imports()
               if _paper(i.module) and not _paper(i.target)
               and any(part.startswith("_") and not part.startswith("__")
                       for part in i.target.split(".")[1:])]
    assert not private, ("papers importing a private module of the core (use the plug-in "
                         "API, lens_possym.plugins, or a public module):\n" + "\n".join(private))


def test_no_paper_imports_another():
    across = sorted({f"{i.path}:{i.line}: {i.target}" for i in _imports()
                     if _paper(i.module) and _paper(i.target)
                     and _paper(i.module) != _paper(i.target)})
    assert not across, ("a paper importing another paper (move what they share into the "
                        "core):\n" + "\n".join(across))


def test_which_paper_a_module_belongs_to():
    assert _paper("lens_possym.papers.b.cli") == "b" and _paper("lens_possym.cli") is None
    assert _paper("lens_possym.papers") is None


def test_importing_the_package_imports_no_paper():
    code = ("import sys, lens_possym; "
            "print([m for m in sys.modules if m.startswith('lens_possym.papers')])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=ROOT, check=True).stdout.strip()
    assert out == "[]"


# ---- (e) the model is resolved at the public boundary ---------------------------------------


def _reader_calls() -> list[tuple[str, str, int]]:
    """``(file, enclosing function, line)`` of every call of rope_specs / schemes."""
    calls = []
    for _, (path, tree) in _sources().items():
        def visit(node: ast.AST, where: list[str]) -> None:
            for child in ast.iter_child_nodes(node):
                scope = where
                if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    scope = where + [child.name]
                if isinstance(child, ast.Call):
                    f = child.func
                    name = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", None)
                    if name in ("rope_specs", "schemes"):
                        calls.append((str(path.relative_to(ROOT)), ".".join(where),
                                      child.lineno))
                visit(child, scope)
        visit(tree, [])
    return calls


def test_rope_specs_and_schemes_are_called_only_by_the_readers():
    others = [f"{path}:{line} ({where})" for path, where, line in _reader_calls()
              if (path, where) not in READERS]
    assert not others, (
        "rope_specs( / schemes( called outside the readers: resolve the model at the public "
        f"boundary (lens_possym.resolved.resolve) and pass it down: {others}")


def test_the_readers_are_at_most_five_and_all_there():
    assert len(READERS) <= 5
    there = {(path, where) for path, where, _ in _reader_calls()}
    assert not set(READERS) - there, f"READERS lists calls that are gone: {set(READERS) - there}"


def _takes_either_model(annotation: ast.expr | None) -> bool:
    text = ast.unparse(annotation) if annotation is not None else ""
    return "HookedModel" in text and "Resolved" in text


def test_below_the_public_functions_the_model_is_resolved():
    """Only a public function accepts ``HookedModel | Resolved`` (and resolves it at its
    top); a private one (``_name``, or in a private module) takes the ``Resolved`` the
    public one made, or the raw model where it only runs it."""
    found = []
    for name, (path, tree) in _sources().items():
        private_module = any(p.startswith("_") and not p.startswith("__")
                             for p in name.split("."))
        for node in ast.walk(tree):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            if not (private_module or (node.name.startswith("_")
                                       and not node.name.startswith("__"))):
                continue
            args = node.args.posonlyargs + node.args.args + node.args.kwonlyargs
            found += [f"{path.relative_to(ROOT)}:{node.lineno} {node.name}({a.arg})"
                      for a in args if _takes_either_model(a.annotation)]
    assert not found, f"private functions taking HookedModel | Resolved: {found}"


def test_the_model_rule_sees_a_union():
    tree = ast.parse("def _f(model: HookedModel | Resolved, r: Resolved) -> None: ...")
    fn = tree.body[0]
    assert [_takes_either_model(a.annotation) for a in fn.args.args] == [True, False]


# ---- (f) no private name crosses a module -----------------------------------------------------


def test_no_module_imports_a_private_name_of_another():
    """``from .x import _name``: make the name public or move it (a private module, ``from ..
    import _ids``, is fine: its names are the package's own)."""
    found = []
    for name, (path, tree) in _sources().items():
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "")
                                                     .startswith("lens_possym")):
                private = [a.name for a in node.names if a.name.startswith("_")
                           and not a.name.startswith("__")
                           and not (PACKAGE.parent / _file_of(name, node, a.name)).exists()]
                found += [f"{path.relative_to(ROOT)}:{node.lineno}: {n}" for n in private]
    assert not found, f"private names imported from another module: {found}"


def _file_of(importer: str, node: ast.ImportFrom, name: str) -> Path:
    """Where the module ``from <node.module> import <name>`` would be, if it is one."""
    path, _ = _sources()[importer]
    package = importer.split(".") if path.name == "__init__.py" else importer.split(".")[:-1]
    base = (package[:len(package) - node.level + 1] if node.level else []) + (
        node.module.split(".") if node.module else [])
    module = Path(*base, name)
    return module.with_suffix(".py") if not (PACKAGE.parent / module).is_dir() else module
