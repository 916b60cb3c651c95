"""Plug-ins: a fourth paper plugs in without touching the core (docs/adding_a_paper.md).

A minimal plug-in (a task, a trainable model, a command) is written into a temporary
package and registered; the core then builds its task by name, trains its model, reads its
checkpoints back and runs its command. The papers' own plug-ins are found through the
entry points, and the core never imports them.
"""

from __future__ import annotations

import ast
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from lens_possym.cli import build_parser, main
from lens_possym.errors import PluginError, TaskConfigError, TrainingError
from lens_possym.plugins import Plugin, plugins, register_plugin, unregister_plugin
from lens_possym.training import (
    MODELS,
    TASKS,
    TrainConfig,
    latest_checkpoint,
    make_task,
    read_checkpoint,
    register_model,
    register_task,
    train,
)

PACKAGE = Path(__file__).resolve().parents[1] / "lens_possym"

_TASK = '''
import torch
from lens_possym.training import SyntheticTask, TaskBatch


class CopyFirstTask(SyntheticTask):
    """Answer: the first token of the prompt."""
    name = "copy-first"
    behaviour = "positional"

    def __init__(self, n_symbols: int = 5, length: int = 4, seed: int = 0):
        super().__init__(seed=seed)
        self.n_symbols, self.length = n_symbols, length

    @property
    def d_vocab(self): return self.n_symbols
    @property
    def n_ctx(self): return self.length
    @property
    def answer_positions(self): return [0]
    @property
    def answer_tokens(self): return list(range(self.n_symbols))

    def config(self):
        return {"n_symbols": self.n_symbols, "length": self.length, "seed": self.seed}

    def _generate(self, n, gen):
        tokens = torch.randint(self.n_symbols, (n, self.length), generator=gen)
        return TaskBatch(tokens, tokens[:, 0].clone(), torch.zeros(n, dtype=torch.long))
'''

_MODEL = '''
from dataclasses import asdict, dataclass
import torch


@dataclass
class BagConfig:
    d_vocab: int
    n_ctx: int

    def to_dict(self): return asdict(self)


class FirstTokenModel(torch.nn.Module):
    """Logits from a learnt table of the first token (enough for copy-first)."""
    kind = "first-token"

    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.table = torch.nn.Parameter(torch.zeros(cfg.d_vocab, cfg.d_vocab))

    @classmethod
    def from_config(cls, data): return cls(BagConfig(**data))

    def forward(self, tokens):
        return self.table[tokens[:, :1]].expand(-1, tokens.shape[1], -1)
'''

_CLI = '''
def register(sub):
    parser = sub.add_parser("echo-first", help="print the first token of a copy-first prompt")
    parser.add_argument("--seed", type=int, default=0)
    parser.set_defaults(func=run)


def run(args):
    from lens_possym.training import make_task
    batch = make_task("copy-first").sample(1, seed=args.seed)
    print(f"first token {int(batch.tokens[0, 0])}, answer {int(batch.answers[0])}")
    return 0
'''


@pytest.fixture
def paper_d(tmp_path, monkeypatch):
    """A fourth paper as a package on sys.path, registered as a plug-in; removed after."""
    root = tmp_path / "paper_d_pkg"
    root.mkdir()
    for name, text in {"__init__.py": "", "tasks.py": _TASK, "model.py": _MODEL,
                       "cli.py": _CLI}.items():
        (root / name).write_text(textwrap.dedent(text))
    monkeypatch.syspath_prepend(str(tmp_path))
    plugin = register_plugin(Plugin(
        name="paper-d", title="a fourth paper",
        tasks={"copy-first": "paper_d_pkg.tasks:CopyFirstTask"},
        models={"first-token": "paper_d_pkg.model:FirstTokenModel"},
        commands=("paper_d_pkg.cli",)))
    yield plugin
    unregister_plugin("paper-d")
    for name in [m for m in sys.modules if m.startswith("paper_d_pkg")]:
        del sys.modules[name]


def test_a_fourth_paper_trains_checkpoints_and_reads_back(paper_d, tmp_path):
    assert "copy-first" in TASKS and "first-token" in MODELS
    task = make_task("copy-first", n_symbols=6)
    model = MODELS["first-token"].from_config({"d_vocab": 6, "n_ctx": 4})
    result = train(model, task, TrainConfig(steps=60, lr=0.5, warmup_steps=1, eval_every=30,
                                            eval_size=128, checkpoint_every=30,
                                            out_dir=str(tmp_path / "run")))
    assert result.test_accuracy == 1.0                  # it learnt: the core trained it
    ckpt = read_checkpoint(latest_checkpoint(tmp_path / "run"))
    back = ckpt.model()
    assert type(back).__name__ == "FirstTokenModel" and ckpt.make_task().config() == task.config()
    assert bool((back.table == model.table.cpu()).all())


def test_a_fourth_papers_command_is_listed_and_runs(paper_d, capsys):
    parser = build_parser()
    assert "echo-first" in parser.format_help()
    assert main(["echo-first", "--seed", "3"]) == 0
    first, answer = capsys.readouterr().out.split(",")
    assert first.split()[-1] == answer.split()[-1]


def test_without_the_plugin_its_names_are_unknown(paper_d):
    unregister_plugin("paper-d")
    try:
        assert "copy-first" not in TASKS
        with pytest.raises(TaskConfigError, match="unknown task 'copy-first'"):
            make_task("copy-first")
    finally:
        register_plugin(paper_d)


def test_the_papers_are_plugins_found_through_entry_points():
    found = plugins()
    assert {"paper-a", "paper-b", "paper-c"} <= set(found)
    assert {"index", "distance", "number", "letter"} <= set(TASKS)
    assert {"toy", "scheme-encoder", "gptj"} <= set(MODELS)
    assert found["paper-c"].commands == ("lens_possym.papers.c.cli",
                                         "lens_possym.papers.c.cli_pipeline")


@pytest.mark.parametrize("kwargs, match", [
    (dict(name="Paper D"), "name is lowercase"),
    (dict(name="d", tasks={"x": "no_colon"}), "'package.module:Attribute'"),
    (dict(name="d", tasks={"X Y": "m:A"}), "tasks key"),
    (dict(name="d", commands=("m:run",)), "must be a module name"),
])
def test_a_malformed_plugin_is_refused(kwargs, match):
    with pytest.raises(PluginError, match=match):
        Plugin(**kwargs)


def test_two_plugins_claiming_one_task_and_a_name_taken_twice_are_refused(paper_d):
    other = Plugin(name="paper-e", tasks={"copy-first": "somewhere.else:Task"})
    register_plugin(other)
    try:
        with pytest.raises(TaskConfigError, match="two plug-ins define the task 'copy-first'"):
            TASKS["copy-first"]
    finally:
        unregister_plugin("paper-e")
    with pytest.raises(PluginError, match="already registered"):
        register_plugin(Plugin(name="paper-d", title="another"))
    with pytest.raises(TaskConfigError, match="'copy-first' is already defined"):
        register_task("copy-first", int)       # a plug-in's task is not replaced silently
    register_task("copy-first", int, replace=True)  # code registration wins, when asked
    try:
        assert TASKS["copy-first"] is int
        with pytest.raises(TaskConfigError, match="already registered"):
            register_task("copy-first", float)
    finally:
        TASKS.unregister("copy-first")
    assert TASKS["copy-first"].__name__ == "CopyFirstTask"


def test_an_unimportable_reference_names_itself(paper_d):
    register_plugin(Plugin(name="paper-e", models={"ghost": "paper_d_pkg.model:Ghost"}))
    try:
        with pytest.raises(PluginError, match="'paper_d_pkg.model:Ghost' cannot be imported"):
            MODELS["ghost"]
    finally:
        unregister_plugin("paper-e")
    with pytest.raises(TrainingError, match="no string `kind`"):
        register_model(object)


def test_import_lens_possym_imports_no_paper_and_no_torch():
    code = ("import lens_possym, sys; print(sorted(m for m in sys.modules if "
            "m.startswith('lens_possym.papers') or m == 'torch'))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.strip()
    assert out == "[]"


def _imports(path: Path) -> list[tuple[str, int]]:
    """Absolute ``lens_possym`` modules a file imports (inside functions too)."""
    tree = ast.parse(path.read_text())
    rel = path.relative_to(PACKAGE.parent).with_suffix("")
    parts = list(rel.parts)
    package = parts if parts[-1] == "__init__" else parts[:-1]
    package = [p for p in package if p != "__init__"]
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            module = ".".join(base + ([node.module] if node.module else []))
            found += [(module, node.lineno)] + [(f"{module}.{a.name}", node.lineno)
                                                for a in node.names]
        elif isinstance(node, ast.Import):
            found += [(a.name, node.lineno) for a in node.names]
    return found


def test_no_module_outside_the_papers_imports_them():
    offenders = [f"{path.relative_to(PACKAGE)}:{line} imports {module}"
                 for path in PACKAGE.rglob("*.py") if "papers" not in path.parts
                 for module, line in _imports(path) if module.startswith("lens_possym.papers")]
    assert not offenders, offenders


_BROKEN_RUN = r'''
import warnings
from lens_possym.cli import main
from lens_possym.plugins import PluginWarning, plugins
from lens_possym.training import make_task

with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    found = sorted(plugins())
    plugins()                                              # a second look: no new warning
print("plugins", found)
print("warnings", [str(w.message) for w in caught if w.category is PluginWarning])
print("task", type(make_task("index")).__name__)
print("models", main(["models"]))
'''


def test_a_broken_plugin_is_reported_once_and_the_rest_keeps_working(tmp_path):
    """Two installed plug-ins that break (an entry point whose module raises on import; a
    plug-in whose command module raises) beside the papers: each is named once, and the
    papers, ``make_task`` and ``lens-possym models`` keep working."""
    site = tmp_path / "site"
    info = site / "broken_paper-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: broken-paper\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(
        "[lens_possym.plugins]\npaper-y = broken_y:PLUGIN\npaper-x = fine_x:PLUGIN\n")
    (site / "broken_y.py").write_text("raise RuntimeError('paper y is broken')\n")
    (site / "fine_x.py").write_text(
        "from lens_possym.plugins import Plugin\n"
        "PLUGIN = Plugin(name='paper-x', commands=('broken_x_cli',))\n")
    (site / "broken_x_cli.py").write_text("raise ValueError('paper x cli is broken')\n")
    env = {**__import__("os").environ,
           "PYTHONPATH": f"{site}:{PACKAGE.parent}"}
    done = subprocess.run([sys.executable, "-c", _BROKEN_RUN], capture_output=True, text=True,
                          env=env, cwd=tmp_path, timeout=120)
    assert done.returncode == 0, done.stderr
    out = dict(line.split(" ", 1) for line in done.stdout.strip().splitlines()
               if line.split(" ", 1)[0] in ("plugins", "warnings", "task", "models"))
    assert ast.literal_eval(out["plugins"]) == ["paper-a", "paper-b", "paper-c", "paper-x"]
    warned = ast.literal_eval(out["warnings"])
    assert len(warned) == 1 and "'paper-y' (broken_y:PLUGIN) cannot be loaded" in warned[0]
    assert "RuntimeError: paper y is broken" in warned[0]
    assert out["task"] == "IndexTask" and out["models"] == "0"
    lines = [line for line in done.stderr.splitlines() if "paper x cli" in line]
    assert lines == ["lens-possym: warning: plug-in 'paper-x': its command module "
                     "'broken_x_cli' cannot be registered: ValueError: paper x cli is broken "
                     "(left out; every other command and plug-in still works)"]
    assert "paper-y" not in done.stderr                      # reported once, in the warnings


def test_a_broken_plugins_command_is_left_out_in_process(paper_d, capsys):
    broken = register_plugin(Plugin(name="paper-e", commands=("paper_d_pkg.no_such_cli",)))
    try:
        parser = build_parser()
        assert "echo-first" in parser.format_help() and "profile" in parser.format_help()
        err = capsys.readouterr().err.splitlines()
        assert len(err) == 1 and err[0].startswith(
            "lens-possym: warning: plug-in 'paper-e': its command module "
            "'paper_d_pkg.no_such_cli' cannot be registered: ModuleNotFoundError")
        assert main(["echo-first"]) == 0                   # the other plug-in still works
        assert "no_such_cli" not in capsys.readouterr().err      # reported once
    finally:
        unregister_plugin(broken.name)


DOC = PACKAGE.parent / "docs" / "adding_a_paper.md"


def _doc_files() -> dict[str, str]:
    """The code blocks of docs/adding_a_paper.md that start with ``# my_paper/<file>``."""
    files = {}
    for block in DOC.read_text().split("```python\n")[1:]:
        code = block.split("```", 1)[0]
        first = code.split("\n", 1)[0]
        if first.startswith("# my_paper/"):
            files[first[2:].strip()] = code
    return files


@pytest.fixture
def my_paper(tmp_path, monkeypatch):
    """The minimal paper of docs/adding_a_paper.md, written from the page alone."""
    files = _doc_files()
    assert set(files) == {"my_paper/model.py", "my_paper/tasks.py", "my_paper/cli.py",
                          "my_paper/__init__.py"}
    assert len(files["my_paper/model.py"].splitlines()) <= 70
    for name, code in files.items():
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_text(code)
    monkeypatch.syspath_prepend(str(tmp_path))
    import my_paper
    register_plugin(my_paper.PLUGIN)
    yield my_paper
    unregister_plugin("my-paper")
    for name in [m for m in sys.modules if m.startswith("my_paper")]:
        del sys.modules[name]


def test_the_minimal_paper_of_the_doc_meets_the_model_contract(my_paper, tmp_path, capsys):
    import torch

    import lens_possym as lp

    tiny = MODELS["tiny-rope"].from_config({"seed": 3})
    task = make_task("copy-first-again")
    tokens = task.sample(16, seed=0).tokens
    # the contract: per-frequency terms add up to the scores hook, both swap methods agree
    terms = lp.frequency_logits(tiny, tokens, layer=0)
    assert torch.allclose(terms.terms.sum(-1), terms.model_scores, atol=1e-5)
    exact = lp.swap_scores(tiny, tokens, exclude_bos=False, method="exact")
    rerun = lp.swap_scores(tiny, tokens, exclude_bos=False, method="rerun")
    assert torch.allclose(exact.pos, rerun.pos, atol=1e-5)
    assert torch.allclose(exact.sym, rerun.sym, atol=1e-5)
    # trained and read back by the core
    result = train(tiny, task, TrainConfig(steps=40, lr=0.05, warmup_steps=1, eval_every=40,
                                           eval_size=64, out_dir=str(tmp_path / "run")))
    back = read_checkpoint(latest_checkpoint(tmp_path / "run")).model()
    assert type(back).__name__ == "TinyRope" and result.steps_run == 40
    assert all(torch.equal(a, b) for a, b in zip(back.state_dict().values(),
                                                 tiny.cpu().state_dict().values()))
    # its command
    assert main(["tiny-scores", "--seed", "2"]) == 0
    assert capsys.readouterr().out.count("head ") == 2
