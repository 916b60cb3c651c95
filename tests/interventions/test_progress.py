"""Long calls show a tqdm bar by default (on stderr), and none with ``progress=False``."""

from __future__ import annotations

import pytest

import lens_possym as lp
from lens_possym import interventions
from lens_possym.tasks import ImportanceBatch, binding_pairs
from tests.gguf_fixture import write_tiny_llama_gguf


@pytest.fixture(scope="module")
def model():
    return lp.tiny_model("llama")


def _calls(model):
    task = lp.binding_task(model, n_prompts=2, n_pairs=2)
    pairs = binding_pairs(model, None, "swap_query", n_prompts=2, n_pairs=2)
    batch = ImportanceBatch.from_binding(task)
    return {
        "head_importance": (lambda **kw: interventions.head_importance(
            model, batch, "logit_diff", **kw), "ablating heads"),
        "patch_grid": (lambda **kw: interventions.patch_grid(model, pairs, **kw), "patching"),
        "band_sweep": (lambda **kw: interventions.band_sweep(
            model, task.tokens, interventions.binding_metrics(task), layers=[1], **kw),
                       "ablating bands"),
    }


@pytest.mark.parametrize("name", ["head_importance", "patch_grid", "band_sweep"])
def test_a_bar_by_default_and_none_when_off(name, model, capsys, monkeypatch):
    monkeypatch.delenv("TQDM_DISABLE", raising=False)
    call, label = _calls(model)[name]
    call()
    err = capsys.readouterr().err
    assert label in err and "100%" in err, err
    call(progress=False)
    assert label not in capsys.readouterr().err


def test_the_first_conversion_says_which_step(tmp_path, tmp_cache, capsys, monkeypatch):
    monkeypatch.delenv("TQDM_DISABLE", raising=False)
    gguf = write_tiny_llama_gguf(tmp_path / "tiny.gguf")
    lp.from_gguf(gguf)
    err = capsys.readouterr().err
    assert "converting tiny (once; later loads read the cache): step 3/3" in err, err
    lp.from_gguf(gguf)  # cached: nothing to convert, no bar
    assert "converting" not in capsys.readouterr().err
