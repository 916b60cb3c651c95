"""Circuits: the whole graph is the clean model, the empty one the corrupted (or mean)
model; selection; edge scores from any method; a circuit's faithfulness curve."""

from __future__ import annotations

import pytest
import torch

from lens_possym.circuits import (Circuit, EdgeScores, as_edge_scores, circuit_metric,
                                  find_circuit, graph_edges, path_edge_scores, select_edges)
from lens_possym.errors import InvalidSelectionError

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _tokens(model, seed, batch=3, pos=6):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(1, model.cfg.d_vocab, (batch, pos), generator=g)


def _metric(logits):
    return logits[:, -1, 3] - logits[:, -1, 5]


def test_whole_graph_is_clean_and_empty_is_corrupted(tiny):
    model = tiny
    clean, corr = _tokens(model, 0), _tokens(model, 1)
    with torch.no_grad():
        m_clean, m_corr = _metric(model(clean)), _metric(model(corr))
    full = circuit_metric(model, clean, corr, _metric, graph_edges(model))
    empty = circuit_metric(model, clean, corr, _metric, [])
    scale = max(1.0, float(m_clean.abs().max()))
    assert torch.allclose(full, m_clean, atol=1e-5 * scale, rtol=0)
    assert torch.allclose(empty, m_corr, atol=1e-5 * scale, rtol=0)
    # mean ablation: the whole graph is still the clean model
    full_mean = circuit_metric(model, clean, corr, _metric, graph_edges(model), ablation="mean")
    assert torch.allclose(full_mean, m_clean, atol=1e-5 * scale, rtol=0)


def test_selection_and_scores_interface(tiny_by_family):
    model = tiny_by_family["llama"]
    clean, corr = _tokens(model, 0), _tokens(model, 1)
    edges = [e for e in graph_edges(model) if e.receiver.layer == 1 or e.receiver.kind == "logits"]
    es = path_edge_scores(model, clean, corr, _metric, edges)
    assert es.scores.shape == (len(edges),) and es.method == "path"
    top = select_edges(es, size=3)
    assert len(top) == 3 and top == sorted(top)
    assert min(abs(es.scores[es.edges.index(e.name)]) for e in top) >= \
        sorted(es.scores.abs().tolist())[-3]
    thr = float(es.scores.abs().sort().values[-5])
    assert len(select_edges(es, threshold=thr)) >= 5
    # the same scores through the other doors
    as_map = as_edge_scores({e: float(s) for e, s in zip(es.edges, es.scores)})
    assert select_edges(as_map, size=3) == top

    class Attribution:  # what an attribution method returns: .edges and .scores
        method = "attribution"
        def __init__(self, edges, scores):
            self.edges, self.scores = edges, scores
    assert select_edges(Attribution(es.edge_list(), es.scores), size=3) == top
    with pytest.raises(InvalidSelectionError):
        select_edges(es)
    with pytest.raises(InvalidSelectionError):
        select_edges(es, size=-1)
    with pytest.raises(InvalidSelectionError):
        as_edge_scores([1, 2])
    with pytest.raises(InvalidSelectionError):
        circuit_metric(model, clean, corr, _metric, [], ablation="zero")


def test_find_circuit_curve(tiny_by_family, tmp_path):
    model = tiny_by_family["qwen2"]
    clean, corr = _tokens(model, 4), _tokens(model, 5)
    edges = [e for e in graph_edges(model) if e.receiver.layer == 1 or e.receiver.kind == "logits"]
    circ = find_circuit(model, clean, corr, _metric, edges=edges, sizes=[1, 4, len(edges)])
    assert circ.faithfulness.shape == (3, 3)
    norm = circ.normalised()
    assert norm.shape == (3,)
    u = circ.curve()
    assert u.mean.shape == (3,)
    back = Circuit.load(circ.save(tmp_path / "c.json"))
    assert back.edges == circ.edges and torch.equal(back.faithfulness, circ.faithfulness)
