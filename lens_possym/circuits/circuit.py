r"""Circuits: edges selected by their scores, run alone, and read as positional or symbolic.

* **Edge scores** (:class:`EdgeScores`): one number per edge, from any method through one
  interface (:func:`as_edge_scores` takes an :class:`EdgeScores`, any object with
  ``edges`` and ``scores``, such as edge attribution's result, or a mapping ``{edge:
  score}``). :func:`path_edge_scores` gives the exact ones: each edge path-patched alone
  (:func:`~lens_possym.circuits.path_patch`), its score the mean over prompts of
  ``metric(edge clean) − metric(corrupted)``.
* **Selection** (:func:`select_edges`): the ``size`` edges of largest ``|score|``, or every
  edge with ``|score| >= threshold``.
* **Faithfulness** (:func:`circuit_metric`): the metric of the model in which only the
  circuit's edges carry their value, every other edge its corrupted value (``ablation=
  "corrupted"``) or its mean over the clean prompts (``"mean"``). Which edges are
  "every other" is the *scope* (:data:`SCOPES`): ``"graph"``, every edge of the model's
  graph outside the circuit (the circuit must do the task alone: the empty circuit is the
  corrupted model); ``"candidates"``, only the scored candidate edges outside the circuit,
  every edge that was never a candidate carrying its value (the circuit must do, among the
  candidates, what the candidates do: the empty circuit is the model with every candidate
  ablated, the whole candidate set the clean model). Each receiver input
  ``(r, c)`` reads ``base_in(r, c) + Σ_{s : s→r.c ∈ circuit} (out_s − base_out_s)``, where
  ``out_s`` is ``s``'s output *in the circuit's run* (the embedding's is the clean one):
  the whole model is the circuit with every edge (the clean metric, exactly) and the
  empty circuit gives the corrupted one. Computed exactly, layer by layer: each layer's
  receiver inputs are read in one frozen pass (:func:`~lens_possym.circuits.frozen_inputs`,
  one stacked copy per distinct set of circuit senders, stopped after the layer), its
  heads recomputed from their (q, k, v) with the layer's geometry.
* **Circuit** (:func:`find_circuit`, :class:`Circuit`): the faithfulness curve over
  circuit sizes (mean, standard error and bootstrap interval over prompts, as the grids
  give: :func:`~lens_possym.interventions.uncertainty`), the chosen circuit, each head
  labelled by its ``s_POS``/``s_SYM`` (:func:`~lens_possym.scores.swap_scores`) and each
  key edge by its **positional share**: the edge path-patched into the receiver's
  positional pairs only (``e_pos``) and into its other dims only (``e_con``),
  ``|e_pos| / (|e_pos| + |e_con|)``. A receiver's positional pairs are its frequency ids
  whose ``s_POS`` exceeds their ``s_SYM`` (or those given).
"""

from __future__ import annotations

import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping, Sequence

import torch
from torch import Tensor

from .._inputs import as_tokens
from ..errors import InvalidSelectionError
from ..interventions import engine
from ..experiments.uncertainty import Uncertainty, uncertainty
from ..resolved import Resolved, resolve
from ..results_io import ResultIO
from ..typing import HookedModel
from .graph import Edge, Node, graph_edges, graph_shape
from .path import (PathCell, Receiver, frozen_inputs, node_outputs, path_patch, run_caches)

__all__ = ["EdgeScores", "as_edge_scores", "path_edge_scores", "select_edges",
           "circuit_metric", "Circuit", "find_circuit", "positional_share", "ABLATIONS",
           "SCOPES"]

#: what an edge outside the circuit carries: the corrupted run's value, or the clean mean
ABLATIONS = ("corrupted", "mean")

#: which edges outside the circuit are ablated: every edge of the graph, or only the
#: candidates (the edges that were scored), every other edge carrying its value
SCOPES = ("graph", "candidates")


# ---- edge scores --------------------------------------------------------------------------


@dataclass(repr=False)
class EdgeScores(ResultIO):
    """One score per edge: ``edges`` (names, ``"L0H1->L2H3.k"``), ``scores [n_edges]``,
    ``method`` (``"path"``: exact path patching; ``"attribution"``: a linear estimate),
    ``values [n_edges, n_prompts]`` per prompt where known, ``seconds``."""

    edges: list[str]
    scores: Tensor
    method: str = "path"
    values: Tensor | None = None
    seconds: float = 0.0

    FORMAT = "lens-possym/edge-scores@1"

    def __post_init__(self) -> None:
        if self.scores.shape != (len(self.edges),):
            raise InvalidSelectionError(
                f"edge scores of shape {tuple(self.scores.shape)} for {len(self.edges)} edges; "
                f"give one score per edge")

    def edge_list(self) -> list[Edge]:
        return [Edge.parse(e) for e in self.edges]

    def to_dict(self) -> dict[str, Any]:
        return {"edges": list(self.edges), "scores": self.scores, "method": self.method,
                "values": self.values, "seconds": self.seconds}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "EdgeScores":
        t = lambda v: v if v is None or isinstance(v, Tensor) else torch.tensor(v)  # noqa: E731
        return cls(edges=list(data["edges"]), scores=t(data["scores"]),
                   method=str(data["method"]), values=t(data.get("values")),
                   seconds=float(data.get("seconds", 0.0)))

    def summary(self) -> dict[str, Any]:
        top = int(self.scores.abs().argmax()) if len(self.edges) else None
        return {"n_edges": len(self.edges), "method": self.method,
                "strongest": None if top is None else self.edges[top],
                "strongest_score": None if top is None else float(self.scores[top]),
                "seconds": self.seconds}

    def _table(self):
        import pandas as pd

        return pd.DataFrame({"edge": self.edges,
                             "score": self.scores.double().cpu().numpy()})

    def _headline(self) -> list[str]:
        s = self.summary()
        return [f"edges={s['n_edges']}", f"method={s['method']}",
                f"strongest={s['strongest']}"]


def as_edge_scores(scores: Any) -> EdgeScores:
    """Edge scores from any method: an :class:`EdgeScores`, an object with ``edges`` (names
    or :class:`Edge` s) and ``scores`` (``[n_edges]``), optionally ``method``, or a mapping
    ``{edge or name: score}``."""
    if isinstance(scores, EdgeScores):
        return scores
    if isinstance(scores, Mapping):
        edges = [e.name if isinstance(e, Edge) else Edge.parse(e).name for e in scores]
        return EdgeScores(edges, torch.tensor([float(v) for v in scores.values()]),
                          method="given")
    if hasattr(scores, "edges") and hasattr(scores, "scores"):
        edges = [e.name if isinstance(e, Edge) else Edge.parse(str(e)).name
                 for e in scores.edges]
        values = torch.as_tensor(scores.scores).detach().float().cpu().reshape(-1)
        return EdgeScores(edges, values, method=str(getattr(scores, "method", "attribution")))
    raise InvalidSelectionError(
        f"edge scores {type(scores).__name__}: pass EdgeScores, an object with .edges and "
        f".scores (edge attribution's result), or {{'L0H1->L1H0.k': score, ...}}")


def path_edge_scores(model: HookedModel | Resolved, clean_tokens: Any, corrupted_tokens: Any,
                     metric: Callable[[Tensor], Tensor], edges: Iterable[Edge | str] | None = None,
                     *, patches_per_pass: int = 16, caches=None) -> EdgeScores:
    """Exact edge scores: each edge (default: every edge of the graph) path-patched alone;
    score = mean over prompts of ``metric(edge) − metric(corrupted)``."""
    resolved = resolve(model)
    start = time.perf_counter()
    edge_list = [e if isinstance(e, Edge) else Edge.parse(e) for e in
                 (graph_edges(resolved.model) if edges is None else edges)]
    clean = as_tokens(resolved.model, clean_tokens)
    corr = as_tokens(resolved.model, corrupted_tokens)
    caches = caches or run_caches(resolved, clean, corr)
    with torch.no_grad():
        base = torch.as_tensor(metric(resolved.model(corr))).detach().float().cpu()
    result = path_patch(resolved, clean, corr, metric, edge_list,
                        patches_per_pass=patches_per_pass, caches=caches)
    values = result.values - base
    return EdgeScores([e.name for e in edge_list], values.mean(-1), method="path",
                      values=values, seconds=time.perf_counter() - start)


def select_edges(scores: Any, *, size: int | None = None, threshold: float | None = None
                 ) -> list[Edge]:
    """The circuit: the ``size`` edges of largest ``|score|`` (ties: the graph's order), or
    every edge with ``|score| >= threshold``; sorted topologically."""
    es = as_edge_scores(scores)
    if (size is None) == (threshold is None):
        raise InvalidSelectionError("select a circuit by size= or by threshold=, one of them")
    edges = es.edge_list()
    mags = es.scores.abs()
    if size is not None:
        if isinstance(size, bool) or not isinstance(size, int) or size < 0:
            raise InvalidSelectionError(f"circuit size must be an int >= 0, got {size!r}")
        order = sorted(range(len(edges)), key=lambda i: (-float(mags[i]), edges[i]))
        chosen = order[:size]
    else:
        if not isinstance(threshold, (int, float)) or threshold < 0 or threshold != threshold:
            raise InvalidSelectionError(f"threshold must be a number >= 0, got {threshold!r}")
        chosen = [i for i in range(len(edges)) if float(mags[i]) >= threshold]
    return sorted(edges[i] for i in chosen)


# ---- running a circuit --------------------------------------------------------------------


def _mean_cache(cache: Mapping[str, Tensor]) -> dict[str, Tensor]:
    return {k: v.mean(0, keepdim=True).expand_as(v).clone() for k, v in cache.items()}


def _senders_into(edges: Iterable[Edge]) -> dict[tuple[Node, str], frozenset]:
    """``{(receiver, channel): frozenset of senders}`` of ``edges``."""
    acc: dict[tuple[Node, str], set] = defaultdict(set)
    for e in edges:
        acc[(e.receiver, e.channel)].add(e.sender)
    return defaultdict(frozenset, {k: frozenset(v) for k, v in acc.items()})


def _with_non_candidates(model: HookedModel, edge_list: list[Edge],
                         candidates: Iterable[Edge | str]) -> list[Edge]:
    """``edge_list`` plus every edge of the graph that is not a candidate (scope
    ``"candidates"``: those always carry their value)."""
    cands = {e if isinstance(e, Edge) else Edge.parse(e) for e in candidates}
    outside = [e.name for e in edge_list if e not in cands]
    if outside:
        raise InvalidSelectionError(
            f"circuit edges {outside[:3]} are not among the candidates; a circuit is chosen "
            f"among the candidate edges (pass them all in candidates=)")
    graph = graph_edges(model)
    unknown = cands - set(graph)
    if unknown:
        raise InvalidSelectionError(
            f"candidate edges {sorted(e.name for e in unknown)[:3]} are not edges of this "
            f"model's graph (circuits.graph_edges lists them)")
    return edge_list + [e for e in graph if e not in cands]


def circuit_metric(model: HookedModel | Resolved, clean_tokens: Any, corrupted_tokens: Any,
                   metric: Callable[[Tensor], Tensor], edges: Iterable[Edge | str], *,
                   ablation: str = "corrupted", candidates: Iterable[Edge | str] | None = None,
                   caches=None) -> Tensor:
    """``metric`` per prompt (``[batch]``) of the model in which only ``edges`` carry their
    value (module docstring) among ``candidates`` (default: every edge of the graph, scope
    ``"graph"``; given: scope ``"candidates"``, every edge that is not a candidate carries
    its value too); the rest carry the corrupted run's (``ablation="corrupted"``) or the
    clean prompts' mean (``"mean"``).

    A node whose every input reads all its senders, each of them clean, is the clean
    model's node: it is read from the clean cache, not recomputed (so the cost is the
    stages from the first receiver that misses an edge on).
    """
    if ablation not in ABLATIONS:
        raise InvalidSelectionError(f"ablation {ablation!r}: choose one of {ABLATIONS}")
    resolved = resolve(model)
    model = resolved.model
    specs = resolved.specs
    shape = graph_shape(model)
    clean = as_tokens(model, clean_tokens)
    corr = as_tokens(model, corrupted_tokens)
    clean_cache, corr_cache = caches or run_caches(resolved, clean, corr)
    base = corr_cache if ablation == "corrupted" else _mean_cache(clean_cache)
    edge_list = [e if isinstance(e, Edge) else Edge.parse(e) for e in edges]
    if candidates is not None:
        edge_list = _with_non_candidates(model, edge_list, candidates)
    batch = corr.shape[0]
    into = _senders_into(edge_list)
    full = _senders_into(graph_edges(model))
    need = {e.sender for e in edge_list if e.sender.kind != "embed"}
    cur: dict[Node, Tensor] = dict(node_outputs(resolved, clean_cache, [Node("embed")]))
    is_clean: set[Node] = {Node("embed")}

    def clean_node(node: Node, channels: Sequence[str]) -> bool:
        # every input reads every sender it can, and each of them is the clean model's
        return all(into[(node, c)] == full[(node, c)] and full[(node, c)] <= is_clean
                   for c in channels)

    last = shape.n_layers
    # stages in the order their inputs become known: a layer's heads, then its MLP (with
    # them, for a parallel block), then the logits
    stages: list[tuple[int | None, int | None]] = []
    for layer in range(last):
        if shape.parallel_attn_mlp or not shape.mlps:
            stages.append((layer, layer if shape.mlps else None))
        else:
            stages += [(layer, None), (None, layer)]
    stages.append((None, None))
    for n_stage, (head_layer, mlp_layer) in enumerate(stages):
        final = n_stage == len(stages) - 1
        heads = [] if head_layer is None else [
            Node("head", head_layer, h) for h in range(shape.n_heads)
            if Node("head", head_layer, h) in need]
        mlp = None if mlp_layer is None else Node("mlp", mlp_layer)
        mlp = mlp if mlp in need else None
        known = [n for n in heads if clean_node(n, ("q", "k", "v"))]
        if mlp is not None and clean_node(mlp, ("in",)):
            known.append(mlp)
        cur.update(node_outputs(resolved, clean_cache, known))
        is_clean.update(known)
        heads = [n for n in heads if n not in is_clean]
        mlp = None if mlp in is_clean else mlp
        if not heads and mlp is None and not final:
            continue
        stage = head_layer if head_layer is not None else (mlp_layer if mlp_layer is not None
                                                          else last)
        requests: list[frozenset] = [frozenset()]
        want: list[str] = []
        if heads:
            spec = specs[stage]
            want += [spec.q_hook, spec.k_hook, engine.v_hook_name(spec)]
            for node in heads:
                requests += [into[(node, c)] for c in ("q", "k", "v")]
        if mlp is not None:
            want.append(f"blocks.{mlp.layer}.hook_mlp_out")
            requests.append(into[(mlp, "in")])
        if final:
            requests.append(into[(Node("logits"), "in")])
        copies = list(dict.fromkeys(requests))
        index = {s: i for i, s in enumerate(copies)}
        per_copy = [{s: cur[s] for s in senders} for senders in copies]
        # stop once this stage's inputs are read: at this layer's hook_z, or the next
        # layer's where an MLP output is read (it comes after)
        stop_layer = stage + 1 if mlp is not None else stage
        stop = engine.z_hook_name(specs[stop_layer]) if stop_layer < last and not final \
            else None
        store = frozen_inputs(resolved, corr, base, per_copy, want, stop_at=stop)
        rows = lambda senders: slice(index[senders] * batch, (index[senders] + 1) * batch)  # noqa: E731
        if heads:
            spec = specs[stage]
            q = engine.bphd(store[spec.q_hook], spec)
            k = engine.bphd(store[spec.k_hook], spec)
            v = store[engine.v_hook_name(spec)]
            qs = torch.stack([q[rows(into[(n, "q")]), :, n.head] for n in heads], 2)
            ks = torch.stack([k[rows(into[(n, "k")]), :, spec.kv_head(n.head)] for n in heads], 2)
            vs = torch.stack([v[rows(into[(n, "v")]), :, spec.kv_head(n.head)] for n in heads], 2)
            z = engine.attend(spec, qs, ks, vs)
            for i, node in enumerate(heads):
                cur[node] = z[:, :, i]
        if mlp is not None:
            cur[mlp] = store[f"blocks.{mlp.layer}.hook_mlp_out"][rows(into[(mlp, "in")])]
        if final:
            logits = store["logits"][rows(into[(Node("logits"), "in")])]
            value = torch.as_tensor(metric(logits)).detach().float().cpu()
            if value.shape != (batch,):
                raise InvalidSelectionError(
                    f"the metric returned shape {tuple(value.shape)}; it must give one value "
                    f"per prompt ([{batch}])")
    return value


def positional_share(model: HookedModel | Resolved, clean_tokens: Any, corrupted_tokens: Any,
                     metric: Callable[[Tensor], Tensor], edge: Edge | str,
                     positional: Sequence[int], *, caches=None) -> float:
    """The share of a q/k edge's effect that goes through the receiver's ``positional``
    frequency ids: ``|e_pos| / (|e_pos| + |e_con|)``, each the mean over prompts of the
    edge path-patched into those pairs only (or every other id only) minus the corrupted
    metric; ``nan`` when both are 0."""
    resolved = resolve(model)
    edge = edge if isinstance(edge, Edge) else Edge.parse(edge)
    if edge.channel not in ("q", "k"):
        raise InvalidSelectionError(
            f"{edge.name}: only a query or key edge has frequency pairs")
    spec = resolved.specs[edge.receiver.layer]
    pos = tuple(sorted(set(int(f) for f in positional)))
    rest = tuple(f for f in range(spec.n_freqs) if f not in pos)
    cells = [PathCell((edge.sender,), (Receiver(edge.receiver, edge.channel, ids),))
             for ids in (pos, rest) if ids]
    clean = as_tokens(resolved.model, clean_tokens)
    corr = as_tokens(resolved.model, corrupted_tokens)
    caches = caches or run_caches(resolved, clean, corr)
    with torch.no_grad():
        base = torch.as_tensor(metric(resolved.model(corr))).detach().float().cpu()
    got = (path_patch(resolved, clean, corr, metric, cells, caches=caches).values - base).mean(-1)
    e_pos = abs(float(got[0])) if pos else 0.0
    e_con = abs(float(got[-1])) if rest else 0.0
    total = e_pos + e_con
    return float("nan") if total == 0 else e_pos / total


# ---- the circuit --------------------------------------------------------------------------


@dataclass(repr=False)
class Circuit(ResultIO):
    """A circuit and its faithfulness curve.

    Attributes:
        edges: the chosen circuit's edge names (topological order); ``scores`` their scores.
        sizes: the circuit sizes of the curve; ``faithfulness [n_sizes, n_prompts]`` the
            metric per prompt of each top-``size`` circuit (mean, se, interval:
            :meth:`curve`); ``clean``/``ablated`` ``[n_prompts]``: the whole model and
            the empty circuit (the curve's 1 and 0 once normalised).
        nodes: ``{node name: {"pos": s_POS, "sym": s_SYM}}`` for the circuit's heads
            (empty without scores).
        key_shares: ``{edge name: positional share}`` for the circuit's q/k edges into
            heads with known positional pairs.
        ablation, method: what edges outside the circuit carry; how edges were scored.
        scope: which edges outside the circuit were ablated (:data:`SCOPES`): ``"graph"``
            every edge of the graph, ``"candidates"`` only the scored ones.
        info: free-form (model, task, prompts, timings).
    """

    edges: list[str]
    scores: list[float]
    sizes: list[int]
    faithfulness: Tensor
    clean: Tensor
    ablated: Tensor
    nodes: dict[str, dict[str, float]] = field(default_factory=dict)
    key_shares: dict[str, float] = field(default_factory=dict)
    ablation: str = "corrupted"
    method: str = "path"
    info: dict[str, Any] = field(default_factory=dict)
    scope: str = "graph"

    FORMAT = "lens-possym/circuit@1"

    def normalised(self) -> Tensor:
        """``[n_sizes]``: ``(mean faithfulness − mean ablated) / (mean clean − mean
        ablated)``: 1 is the whole model, 0 the empty circuit."""
        lo, hi = float(self.ablated.mean()), float(self.clean.mean())
        denom = hi - lo
        if denom == 0:
            return torch.full((len(self.sizes),), float("nan"))
        return (self.faithfulness.mean(-1) - lo) / denom

    def curve(self) -> Uncertainty:
        """:class:`~lens_possym.interventions.Uncertainty` of the metric per size."""
        return uncertainty(self.faithfulness, -1, allow_nan=True)

    def to_dict(self) -> dict[str, Any]:
        return {"edges": list(self.edges), "scores": list(self.scores), "sizes": list(self.sizes),
                "faithfulness": self.faithfulness, "clean": self.clean, "ablated": self.ablated,
                "nodes": self.nodes, "key_shares": self.key_shares, "ablation": self.ablation,
                "method": self.method, "info": self.info, "scope": self.scope}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Circuit":
        t = lambda v: v if isinstance(v, Tensor) else torch.tensor(v)  # noqa: E731
        return cls(edges=list(data["edges"]), scores=[float(s) for s in data["scores"]],
                   sizes=[int(s) for s in data["sizes"]], faithfulness=t(data["faithfulness"]),
                   clean=t(data["clean"]), ablated=t(data["ablated"]),
                   nodes={k: {a: float(b) for a, b in v.items()}
                          for k, v in data.get("nodes", {}).items()},
                   key_shares={k: float(v) for k, v in data.get("key_shares", {}).items()},
                   ablation=str(data.get("ablation", "corrupted")),
                   method=str(data.get("method", "path")), info=dict(data.get("info", {})),
                   scope=str(data.get("scope", "graph")))

    def summary(self) -> dict[str, Any]:
        norm = self.normalised()
        return {"n_edges": len(self.edges), "nodes": sorted(self.node_names()),
                "sizes": list(self.sizes),
                "faithfulness": [None if v != v else round(float(v), 4) for v in norm],
                "ablation": self.ablation, "scope": self.scope, "method": self.method,
                "key_shares": {k: round(v, 4) for k, v in self.key_shares.items()}}

    def node_names(self) -> set[str]:
        names = set()
        for e in self.edges:
            edge = Edge.parse(e)
            names |= {edge.sender.name, edge.receiver.name}
        return names

    def _table(self):
        import pandas as pd

        rows = [{"edge": e, "score": s, "positional_share": self.key_shares.get(e)}
                for e, s in zip(self.edges, self.scores)]
        return pd.DataFrame(rows, columns=["edge", "score", "positional_share"])

    def _headline(self) -> list[str]:
        norm = self.normalised()
        last = float(norm[-1]) if len(norm) else float("nan")
        return [f"edges={len(self.edges)}", f"nodes={len(self.node_names())}",
                f"faithfulness@{self.sizes[-1] if self.sizes else 0}={last:.3g}"]


def _positional_ids(labels: Any, node: Node) -> tuple[int, ...]:
    """A head's frequency ids whose ``s_POS`` exceeds their ``s_SYM``."""
    pf, sf = getattr(labels, "pos_freq", None), getattr(labels, "sym_freq", None)
    if pf is None or sf is None:
        return ()
    row_p, row_s = pf[node.layer, node.head], sf[node.layer, node.head]
    return tuple(int(i) for i in torch.nonzero(row_p > row_s).flatten())


def find_circuit(model: HookedModel | Resolved, clean_tokens: Any, corrupted_tokens: Any,
                 metric: Callable[[Tensor], Tensor], *, scores: Any = None,
                 edges: Iterable[Edge | str] | None = None,
                 size: int | None = None, threshold: float | None = None,
                 sizes: Sequence[int] | None = None, ablation: str = "corrupted",
                 scope: str = "graph", labels: Any = None, positional: Mapping[str, Sequence[int]] | None = None,
                 patches_per_pass: int = 16, info: Mapping[str, Any] | None = None) -> Circuit:
    """Score edges (``scores``, from any method, or exact path patching over ``edges``,
    default every edge), pick the circuit by ``size`` or ``threshold`` (default: the
    smallest size on the curve reaching 0.9 of the whole model, else the largest), run the
    faithfulness curve over ``sizes`` (default 1, 2, 4, ... up to every scored edge), and
    label its heads and key edges.

    Args:
        ablation: what an ablated edge carries (:data:`ABLATIONS`).
        scope: which edges outside the circuit are ablated (:data:`SCOPES`): ``"graph"``
            every edge of the model's graph (the circuit alone must do the task; the
            empty circuit is the corrupted model), ``"candidates"`` only the scored edges
            (the rest of the model keeps its value; the empty circuit is the model with
            every candidate ablated, the whole candidate set the clean model).
        labels: a :class:`~lens_possym.scores.PosSymScores` of the same model (its
            ``pos``/``sym`` label the heads; its per-frequency scores give each head's
            positional pairs).
        positional: ``{head name: frequency ids}`` positional pairs, overriding ``labels``.
    """
    if scope not in SCOPES:
        raise InvalidSelectionError(f"scope {scope!r}: choose one of {SCOPES}")
    resolved = resolve(model)
    start = time.perf_counter()
    clean = as_tokens(resolved.model, clean_tokens)
    corr = as_tokens(resolved.model, corrupted_tokens)
    caches = run_caches(resolved, clean, corr)
    es = (as_edge_scores(scores) if scores is not None else
          path_edge_scores(resolved, clean, corr, metric, edges,
                           patches_per_pass=patches_per_pass, caches=caches))
    n = len(es.edges)
    if sizes is None:
        sizes, k = [], 1
        while k < n:
            sizes.append(k)
            k *= 2
        sizes.append(n)
    sizes = sorted(set(int(s) for s in sizes))
    among = es.edge_list() if scope == "candidates" else None

    def run(chosen: Iterable[Edge | str]) -> Tensor:
        return circuit_metric(resolved, clean, corr, metric, chosen, ablation=ablation,
                              candidates=among, caches=caches)

    # the whole graph is the clean model in either scope and ablation (module docstring)
    with torch.no_grad():
        clean_m = torch.as_tensor(metric(resolved.model(clean))).detach().float().cpu()
    ablated = run([])
    curve = torch.stack([run(select_edges(es, size=s)) for s in sizes])
    if size is None and threshold is None:
        lo, hi = float(ablated.mean()), float(clean_m.mean())
        norm = (curve.mean(-1) - lo) / (hi - lo) if hi != lo else curve.mean(-1) * float("nan")
        reach = [s for s, v in zip(sizes, norm) if float(v) >= 0.9]
        size = reach[0] if reach else sizes[-1]
    chosen = select_edges(es, size=size, threshold=threshold)
    by_name = dict(zip(es.edges, es.scores.tolist()))
    nodes: dict[str, dict[str, float]] = {}
    heads = sorted({n for e in chosen for n in (e.sender, e.receiver) if n.kind == "head"})
    if labels is not None:
        for node in heads:
            nodes[node.name] = {"pos": float(labels.pos[node.layer, node.head]),
                                "sym": float(labels.sym[node.layer, node.head])}
    shares: dict[str, float] = {}
    for e in chosen:
        if e.channel != "k":
            continue
        ids = (tuple(positional[e.receiver.name]) if positional and e.receiver.name in positional
               else _positional_ids(labels, e.receiver) if labels is not None else ())
        if ids:
            shares[e.name] = positional_share(resolved, clean, corr, metric, e, ids,
                                              caches=caches)
    meta = dict(info or {})
    meta.update(seconds=round(time.perf_counter() - start, 3), n_prompts=int(clean.shape[0]),
                scoring_seconds=round(es.seconds, 3), n_scored_edges=n)
    return Circuit(edges=[e.name for e in chosen], scores=[by_name[e.name] for e in chosen],
                   sizes=list(sizes), faithfulness=curve, clean=clean_m, ablated=ablated,
                   nodes=nodes, key_shares=shares, ablation=ablation, method=es.method,
                   info=meta, scope=scope)
