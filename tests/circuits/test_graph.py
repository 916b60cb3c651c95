"""The circuit graph: nodes, edges, who is upstream of whom."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from lens_possym.circuits import Edge, Node, graph_edges, graph_nodes, top_heads
from lens_possym.errors import InvalidSelectionError


def _cfg(n_layers=3, n_heads=2, attn_only=False, parallel=False):
    return SimpleNamespace(cfg=SimpleNamespace(n_layers=n_layers, n_heads=n_heads,
                                               attn_only=attn_only,
                                               parallel_attn_mlp=parallel))


def test_node_names_round_trip_and_order():
    nodes = graph_nodes(_cfg())
    assert [n.name for n in nodes[:4]] == ["embed", "L0H0", "L0H1", "M0"]
    assert nodes[-1].name == "logits"
    assert sorted(reversed(nodes)) == nodes
    assert all(Node.parse(n.name) == n for n in nodes)
    assert len(set(nodes)) == len(nodes) == 1 + 3 * 3 + 1


@pytest.mark.parametrize("args", [("attn",), ("head", 1), ("head", -1, 0), ("mlp", 0, 2),
                                  ("embed", 0), ("logits", -1, 3), ("head", True, 0),
                                  ("head", 1.0, 0)])
def test_bad_nodes_refused(args):
    with pytest.raises(InvalidSelectionError):
        Node(*args)


def test_edges_upstream_and_channels():
    edges = graph_edges(_cfg())
    assert edges == sorted(edges)
    for e in edges:
        assert Edge.parse(e.name) == e
        assert e.sender < e.receiver
    into = {(e.receiver.name, e.channel): [] for e in edges}
    for e in edges:
        into[(e.receiver.name, e.channel)].append(e.sender.name)
    # a layer-1 head reads embed, layer 0's heads and MLP
    assert into[("L1H0", "k")] == ["embed", "L0H0", "L0H1", "M0"]
    # an MLP reads its own layer's heads
    assert into[("M1", "in")] == ["embed", "L0H0", "L0H1", "M0", "L1H0", "L1H1"]
    assert len(into[("logits", "in")]) == 1 + 3 * 3
    assert ("L0H0", "q") in into and into[("L0H0", "q")] == ["embed"]
    # parallel attention/MLP: the MLP does not read its own layer's heads
    par = {e.name for e in graph_edges(_cfg(parallel=True))}
    assert "L1H0->M1" not in par and "L0H0->M1" in par
    # attention only: no MLP nodes; q only
    only = graph_edges(_cfg(attn_only=True), channels=("q",))
    assert not any(e.sender.kind == "mlp" or e.receiver.kind == "mlp" for e in only)
    assert {e.channel for e in only} == {"q", "in"}


@pytest.mark.parametrize("name", ["L1H0->L0H1.k", "L0H0->L1H0", "L0H0->M1.q", "logits->M1",
                                  "M1->L1H0.v", "L0H0-L1H0.k", "L1H0->M1.x"])
def test_bad_edges_refused(name):
    with pytest.raises(InvalidSelectionError):
        Edge.parse(name)


def test_bad_model_refused():
    with pytest.raises(InvalidSelectionError, match="n_layers"):
        graph_nodes(object())


def test_top_heads_ranks_by_effect_and_excludes_unpatched_cells():
    import torch

    nan = float("nan")
    effect = torch.tensor([[nan, nan, nan], [0.1, -0.5, 0.3], [-0.3, nan, 0.0]])
    # argsort alone puts nan first; nan_to_num(0) would pick an unpatched head past 4 heads
    assert [n.name for n in top_heads(effect, 3)] == ["L1H1", "L1H2", "L2H0"]  # tie: grid order
    assert [n.name for n in top_heads(effect, 9)] == ["L1H1", "L1H2", "L2H0", "L1H0", "L2H2"]
    # a grid is ranked by its effect (values - baseline), not by the metric's level
    values = torch.tensor([[[1.0, 1.0], [0.2, 0.4]], [[0.9, 0.9], [nan, nan]]])
    grid = SimpleNamespace(effect=lambda: values - torch.tensor([1.0, 1.0]))
    assert [n.name for n in top_heads(grid, 2)] == ["L0H1", "L1H0"]


@pytest.mark.parametrize("grid, k, match", [
    ([[float("nan")]], 1, "no patched cell"), ([[0.1, 0.2]], 0, "k >= 1"),
    ([[0.1, 0.2]], True, "k >= 1"), ([[[0.1]]], 1, r"\[n_layers, n_heads\]")])
def test_top_heads_refuses(grid, k, match):
    import torch

    with pytest.raises(InvalidSelectionError, match=match):
        top_heads(torch.tensor(grid), k)
    with pytest.raises(InvalidSelectionError, match="PatchingGrid or a"):
        top_heads(grid, 1)  # a list
