"""``lens-possym circuit``: files written, numbers read back, clear errors."""

from __future__ import annotations

import pytest
import torch

from lens_possym.circuits import Circuit
from lens_possym.cli import main
from lens_possym.errors import InvalidSelectionError


def test_circuit_writes_json_and_report(tmp_path, capsys):
    code = main(["circuit", "--model", "tiny-llama", "--task", "binding", "--heads-top", "3",
                 "--size", "5", "--n-prompts", "6", "--out", str(tmp_path), "--no-progress",
                 "--no-labels"])
    assert code == 0
    printed = capsys.readouterr().out
    assert "faithfulness by size" in printed and "circuit (5 edges)" in printed
    circuit = Circuit.load(tmp_path / "circuit.json")
    assert len(circuit.edges) == 5 and circuit.faithfulness.shape[1] == 6
    assert circuit.sizes[-1] == circuit.info["n_scored_edges"]
    html = (tmp_path / "report.html").read_text()
    assert "Faithfulness over circuit sizes" in html and "circuit graph" in html
    assert (tmp_path / "circuit_graph.png").exists()


def test_circuit_refuses_size_and_threshold(tmp_path):
    with pytest.raises(InvalidSelectionError, match="not both"):
        from lens_possym.cli.circuit import run
        import argparse
        run(argparse.Namespace(prompts=None, corruption=None, size=3, threshold=0.1, out=None))


def test_circuit_scope_candidates(tmp_path, monkeypatch):
    """``--scope candidates`` reaches the faithfulness run: the empty circuit is the model
    with only the candidate edges corrupted (not the corrupted model, whose normalised
    metric averages 0: the graph scope's empty circuit), the whole candidate set the clean
    model. The figures are blank here (drawing them is most of the command's time; the test
    above checks them)."""
    from matplotlib.figure import Figure

    from lens_possym import report
    monkeypatch.setattr(report.circuits, "circuit_figures", lambda *a, **k: {
        name: Figure(figsize=(1, 1)) for name in ("circuit_graph", "circuit_faithfulness")})
    code = main(["circuit", "--model", "tiny-llama", "--task", "binding", "--heads-top", "1",
                 "--n-prompts", "4", "--out", str(tmp_path), "--no-progress", "--no-labels",
                 "--scope", "candidates"])
    assert code == 0
    circuit = Circuit.load(tmp_path / "circuit.json")
    assert circuit.scope == "candidates" and circuit.summary()["scope"] == "candidates"
    assert circuit.info["heads"] == ["L0H0"] and circuit.sizes[-1] == 5
    assert abs(float(circuit.ablated.mean())) > 0.1
    assert torch.allclose(circuit.faithfulness[-1], circuit.clean, atol=1e-5)
    assert "every candidate ablated" in (tmp_path / "report.html").read_text()
