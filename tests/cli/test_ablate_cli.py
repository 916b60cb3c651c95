"""``lens-possym ablate``: numbers agree with the library, files written, clear errors."""

from __future__ import annotations

import json

import pytest
import torch

import lens_possym as lp
from lens_possym._json import tensor_from_json
from lens_possym.cli import main
from lens_possym.interventions import ablate_frequencies
from lens_possym.tasks import binding_task, evaluate_binding


def test_ablate_reports_before_and_after(tmp_path, capsys):
    code = main(["ablate", "--model", "tiny-llama", "--heads", "1.0,1.1", "--freqs", "0:4",
                 "--mode", "unrotate", "--n-prompts", "6", "--n-pairs", "3", "--out", str(tmp_path)])
    assert code == 0
    printed = capsys.readouterr().out
    assert "logit difference" in printed and "unrotate-ablating frequency ids 0:4" in printed
    payload = json.loads((tmp_path / "ablate.json").read_text())
    assert payload["selection"] == {"1.0": [0, 1, 2, 3], "1.1": [0, 1, 2, 3]}
    model = lp.tiny_model("llama")
    task = binding_task(model, n_prompts=6, n_pairs=3, seed=0)
    with torch.no_grad():
        before = evaluate_binding(model, task)
        with ablate_frequencies(model, "1.0,1.1", "unrotate", freqs="0:4"):
            after = evaluate_binding(model, task, logits=model(task.tokens))
    assert payload["before"]["logit_diff"] == pytest.approx(before.logit_diff, abs=1e-6)
    assert payload["after"]["logit_diff"] == pytest.approx(after.logit_diff, abs=1e-6)
    assert payload["after"]["logit_diff"] != payload["before"]["logit_diff"]
    replay = lp.Intervention.from_dict(payload["intervention"])  # the saved spec replays
    assert str(replay) == "ablate_frequencies mode=unrotate side=qk: 1.0 ← 0:4; 1.1 ← 0:4"
    with torch.no_grad(), replay.apply(model):
        again = evaluate_binding(model, task, logits=model(task.tokens))
    assert again.logit_diff == pytest.approx(after.logit_diff, abs=1e-6)
    report = (tmp_path / "report.html").read_text()
    assert "The binding task before and after" in report and "1.0" in report
    change = payload["change"]["logit_diff"]  # paired over prompts, with its interval
    diffs = after.logit_diffs.double() - before.logit_diffs.double()
    assert change["mean"] == pytest.approx(float(diffs.mean()), abs=1e-6)
    assert change["se"] == pytest.approx(float(diffs.std() / 6 ** 0.5), abs=1e-6)
    assert change["ci_low"] <= change["mean"] <= change["ci_high"]
    assert "95% bootstrap interval" in report and "± SE" in printed


def test_sweep_writes_json_and_heatmaps(tmp_path, capsys):
    code = main(["ablate", "--model", "tiny-gemma3", "--sweep", "bands", "--layers", "1,2",
                 "--n-prompts", "4", "--n-pairs", "3", "--mode", "mean", "--reference-prompts", "4",
                 "--no-progress", "--out", str(tmp_path)])
    assert code == 0
    assert "mean Δ logit difference per band" in capsys.readouterr().out
    payload = json.loads((tmp_path / "sweep.json").read_text())
    assert payload["config"]["mode"] == "mean" and payload["config"]["layers"] == "1,2"
    assert payload["layers"] == [1, 2] and payload["band_names"] == ["high", "mid", "low"]
    effect = tensor_from_json(payload["effect"]["logit_diff"])  # strict JSON: nan as null
    assert effect.shape == (3, 4, 3)
    assert torch.isnan(effect[0]).all() and torch.isfinite(effect[1:]).all()
    for metric in ("logit_diff", "accuracy"):
        assert (tmp_path / f"sweep_{metric}.png").stat().st_size > 1000
    assert lp.interventions.BandSweep.load(tmp_path / "sweep.json").layers == [1, 2]
    report = (tmp_path / "report.html").read_text()
    assert "Largest drops in logit_diff" in report and 'id="sweep-accuracy"' in report
    se = tensor_from_json(payload["effect_se"]["logit_diff"])
    assert se.shape == (3, 4, 3) and torch.isfinite(se[1:]).all()
    assert "bootstrap intervals" in report


@pytest.mark.parametrize("argv, message", [
    (["--heads", "1.9"], "unknown head 1.9: layer 1 has 4 query heads"),
    (["--heads", "1.0", "--freqs", "0:99"], "'0:99' out of range for layer 1"),
    ([], "pass either --heads"),
    (["--heads", "1.0", "--mode", "unrotate", "--side", "q"], "acts on queries and keys together"),
])
def test_bad_input_is_one_clear_line(argv, message, capsys):
    assert main(["ablate", "--model", "tiny-llama", "--n-prompts", "2", *argv]) == 1
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_unknown_mode_is_refused_by_the_parser(capsys):
    assert main(["ablate", "--model", "tiny-llama", "--heads", "1.0", "--mode", "scramble"]) == 2
    assert "invalid choice: 'scramble'" in capsys.readouterr().err


def test_ablate_reads_the_models_geometry_once(monkeypatch, capsys):
    """The command resolves the model once at its boundary: the selection and the hooks
    read the same Resolved (lens_possym/resolved.py)."""
    import lens_possym.resolved as resolved_module

    reads = []
    real = resolved_module.rope_specs
    monkeypatch.setattr(resolved_module, "rope_specs",
                        lambda model, **kw: reads.append(1) or real(model, **kw))
    assert main(["ablate", "--model", "tiny-llama", "--heads", "1.0", "--freqs", "0:2",
                 "--n-prompts", "2", "--n-pairs", "3"]) == 0
    assert "ablating frequency ids 0:2" in capsys.readouterr().out
    assert len(reads) == 1
