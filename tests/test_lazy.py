"""lens_possym._lazy: a package's names and submodules imported on first use."""

from __future__ import annotations

import subprocess
import sys

import pytest

import lens_possym
from lens_possym._lazy import lazy_module


def _fresh(code: str) -> str:
    """What ``code`` prints in a new interpreter (nothing imported before it)."""
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True).stdout.strip()


def test_naming_a_submodule_imports_nothing_until_it_is_used():
    out = _fresh(
        "import sys\n"
        "from lens_possym import _ids, decompose\n"
        "from lens_possym.experiments import importance\n"
        "from lens_possym.report import patching\n"
        "print(sorted(m for m in sys.modules if m in ('torch', 'lens_possym._ids', "
        "'lens_possym.decompose', 'lens_possym.experiments.importance', "
        "'lens_possym.report.patching', 'matplotlib')))\n"
        "print(callable(_ids.read_ids), 'lens_possym._ids' in sys.modules,\n"
        "      'torch' in sys.modules)\n"
        "print(_ids.read_ids is sys.modules['lens_possym._ids'].read_ids)")
    assert out.splitlines() == ["[]", "True True True", "True"]


def test_the_stand_in_stays_out_of_sys_modules_and_passes_writes_through():
    out = _fresh(
        "import sys, types, pytest\n"
        "from lens_possym._lazy import lazy_module\n"
        "name = 'lens_possym.papers.c.verdicts'\n"
        "stand_in = lazy_module(name)\n"
        "print(isinstance(stand_in, types.ModuleType), name in sys.modules)\n"
        "print('imported on first use' in repr(stand_in))\n"
        "print(getattr(stand_in, '__wrapped__', None), name in sys.modules)\n"
        "with pytest.MonkeyPatch.context() as mp:\n"
        "    mp.setattr(stand_in, 'GAMMA', 'patched')\n"  # imports it, then writes to it
        "    print(sys.modules[name].GAMMA, stand_in.GAMMA)\n"
        "print(sys.modules[name].GAMMA)\n"  # the module's own value back, not deleted
        "print(repr(stand_in) == repr(sys.modules[name]), lazy_module(name) is sys.modules[name])")
    assert out.splitlines() == ["True False", "True", "None False", "patched patched", "0.1",
                                "True True"]


def test_a_name_that_is_neither_an_export_nor_a_submodule_is_an_attribute_error():
    assert lazy_module("lens_possym.no_such_module") is None
    with pytest.raises(AttributeError, match="has no attribute 'no_such_module'"):
        lens_possym.no_such_module  # noqa: B018 - the attribute read is the test
    with pytest.raises(AttributeError):
        lens_possym.__no_such_dunder__  # noqa: B018


def test_an_export_wins_over_the_submodule_of_the_same_name():
    from lens_possym import experiments, interventions
    from lens_possym.experiments.uncertainty import uncertainty

    assert experiments.uncertainty is uncertainty  # the function, not its module
    assert interventions.uncertainty is uncertainty  # served from the experiments' layer


def test_a_name_may_come_from_a_sibling_package():
    from lens_possym import report
    from lens_possym.viz.attention import attention_view_html

    assert report.attention_view_html is attention_view_html

