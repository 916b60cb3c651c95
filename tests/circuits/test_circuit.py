"""Circuits: the whole graph is the clean model, the empty one the corrupted (or mean)
model; selection; edge scores from any method; a circuit's faithfulness curve."""

from __future__ import annotations

import pytest
import torch

from lens_possym.circuits import (Circuit, EdgeScores, Node, as_edge_scores, circuit_metric,
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


@pytest.mark.parametrize("family", ["llama", "neox"])
def test_candidate_scope_ablates_only_the_candidates(tiny_by_family, family):
    """Scope "candidates": only the scored edges outside the circuit are ablated. Checked
    against the model's own hooks: every edge into a head's q, k and v as the candidates,
    the empty circuit is the clean run with that head's hook_z corrupted; every edge into
    the logits, it is the corrupted model; the whole candidate set is the clean model;
    every edge of the graph as the candidates is scope "graph"."""
    model = tiny_by_family[family]
    clean, corr = _tokens(model, 6), _tokens(model, 7)
    with torch.no_grad():
        m_clean, m_corr = _metric(model(clean)), _metric(model(corr))
        _, cc = model.run_with_cache(corr, names_filter=lambda n: n.endswith("hook_z"))
    scale = max(1.0, float(m_clean.abs().max()))
    close = lambda a, b: torch.allclose(a, b, atol=1e-5 * scale, rtol=0)  # noqa: E731
    head = Node("head", 0, 1)
    into_head = graph_edges(model, receivers=[head])
    name = "blocks.0.attn.hook_z"

    def corrupt_head(z, hook):
        z = z.clone()
        z[:, :, 1] = cc[name][:, :, 1]
        return z
    with torch.no_grad(), model.hooks(fwd_hooks=[(name, corrupt_head)]):
        m_head = _metric(model(clean))
    got = circuit_metric(model, clean, corr, _metric, [], candidates=into_head)
    assert close(got, m_head) and not close(got, m_clean)
    assert close(circuit_metric(model, clean, corr, _metric, into_head, candidates=into_head),
                 m_clean)
    into_logits = graph_edges(model, receivers=[Node("logits")])
    assert close(circuit_metric(model, clean, corr, _metric, [], candidates=into_logits), m_corr)
    some = into_head[:3] + into_logits[:2]
    every = graph_edges(model)
    assert torch.equal(circuit_metric(model, clean, corr, _metric, some, candidates=every),
                       circuit_metric(model, clean, corr, _metric, some))
    with pytest.raises(InvalidSelectionError, match="not among the candidates"):
        circuit_metric(model, clean, corr, _metric, into_logits[:1], candidates=into_head)


def test_find_circuit_candidate_scope(tiny_by_family, tmp_path):
    model = tiny_by_family["llama"]
    clean, corr = _tokens(model, 4), _tokens(model, 5)
    edges = [e for e in graph_edges(model) if e.receiver.layer == 1 or e.receiver.kind == "logits"]
    circ = find_circuit(model, clean, corr, _metric, edges=edges, sizes=[2, len(edges)],
                        scope="candidates")
    # every candidate kept is the clean model
    assert circ.scope == "candidates"
    assert torch.allclose(circ.faithfulness[-1], circ.clean, atol=1e-5, rtol=0)
    assert Circuit.load(circ.save(tmp_path / "c.json")).scope == "candidates"
    with pytest.raises(InvalidSelectionError, match="scope"):
        find_circuit(model, clean, corr, _metric, edges=edges, scope="all")
