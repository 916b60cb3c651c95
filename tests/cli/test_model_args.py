"""``--model`` and ``--device``, shared by profile, decompose and ablate."""

from __future__ import annotations

import pytest
import torch

from lens_possym._inputs import resolve_device
from lens_possym.cli import main
from lens_possym.errors import InvalidSelectionError
from lens_possym.scores import PosSymScores

NO_GPU = not torch.cuda.is_available()


def test_profile_runs_on_a_tiny_model_on_the_chosen_device(tmp_path, capsys):
    out = tmp_path / "prof"
    code = main(["profile", "--model", "tiny-llama", "--device", "cpu", "--n-prompts", "2",
                 "--n-pairs", "3", "--out", str(out)])
    assert code == 0
    assert "loading tiny-llama on cpu" in capsys.readouterr().err
    scores = PosSymScores.load(out / "scores.json")
    assert scores.pos.shape == (2, 4) and scores.pos.isfinite().all()
    assert (out / "report.html").exists()


@pytest.mark.parametrize("command", [["decompose"], ["profile", "--no-report"],
                                     ["ablate", "--heads", "1.0"]])
@pytest.mark.skipif(not NO_GPU, reason="this machine has a GPU")
def test_asking_for_a_missing_gpu_is_one_clear_line(command, tmp_path, capsys):
    out = [] if command[0] == "decompose" else ["--out", str(tmp_path)]
    code = main(command + ["--model", "tiny-llama", "--device", "cuda"] + out)
    assert code == 1
    err = capsys.readouterr().err
    assert "sees no CUDA GPU" in err and "use 'cpu'" in err and "Traceback" not in err


def test_resolve_device():
    assert resolve_device("cpu") == torch.device("cpu")
    assert resolve_device("auto") == torch.device("cuda" if not NO_GPU else "cpu")
    with pytest.raises(InvalidSelectionError, match="unknown device 'tpu0'"):
        resolve_device("tpu0")
    if NO_GPU:
        with pytest.raises(InvalidSelectionError, match="sees no CUDA GPU"):
            resolve_device("cuda:0")
    else:
        with pytest.raises(InvalidSelectionError, match="does not exist"):
            resolve_device(f"cuda:{torch.cuda.device_count()}")


def test_verbose_logs_the_model_loaded(caplog):
    import logging

    from lens_possym.cli import main

    with caplog.at_level(logging.INFO, logger="lens_possym"):
        assert main(["-v", "decompose", "--model", "tiny-llama", "--layer", "1"]) == 0
    assert any("loaded tiny-llama in" in r.getMessage() and "2 layers × 4 heads" in
               r.getMessage() for r in caplog.records)
