"""Circuits: how heads connect, through a receiver's query, key or value, and whether an
edge feeds the receiver's positional channel or its content.

* :mod:`.graph`: the graph circuits are drawn on: :class:`Node` (``embed``, a head
  ``L3H5``, an MLP ``M3``, ``logits``), :class:`Edge` (a sender's output reaching one input
  of a receiver: ``q``/``k``/``v`` for a head, ``in`` for an MLP or the logits),
  :func:`graph_nodes` / :func:`graph_edges` listing a model's, :func:`top_heads` the
  heads a patching grid ranks first;
* :mod:`.path`: path patching (:func:`path_patch`: senders' clean outputs reaching only
  chosen receiver inputs, a query's or key's frequency pairs included), batched;
* :mod:`.circuit`: edge scores from any method (:class:`EdgeScores`, exact ones by
  :func:`path_edge_scores`), a circuit by size or threshold (:func:`select_edges`), its
  faithfulness (:func:`circuit_metric`) as a curve over sizes, with labels
  (:func:`find_circuit` -> :class:`Circuit`).
* :mod:`.attribution`: attribution patching (:func:`attribute`, :func:`attribution_patch`:
  every head's output, per position, every RoPE pair of every query and key, in three
  passes; the AtP* query-key fix and where the linear estimate is unreliable);
* :mod:`.edges`: edge attribution (:func:`edge_attribution`: every edge of the graph from
  one gradient, each q/k edge split into the receiver's positional and content pairs).

See ``docs/circuits.md``.
"""

from .._lazy import lazy_attributes

# imported on first use (lens_possym._lazy), so importing this package imports nothing heavy
_EXPORTS = {
    "graph": ["CHANNELS", "KINDS", "Edge", "GraphShape", "Node", "edges_among", "graph_edges", "graph_nodes",
        "graph_shape", "top_heads"],
    "path": ["OUTPUT_ACTS", "PathCell", "PathPatching", "Receiver", "node_outputs",
        "output_hooks", "path_patch", "run_caches", "frozen_inputs", "band_freqs"],
    "circuit": ["ABLATIONS", "SCOPES", "Circuit", "EdgeScores", "as_edge_scores", "circuit_metric",
        "find_circuit", "path_edge_scores", "positional_share", "select_edges"],
    "attribution": ["ATTRIBUTION_SITES", "Attribution", "AttributionConfig", "attribute",
        "attribution_patch", "compare_to_grid", "gradient_run", "pearson", "spearman",
        "top_overlap"],
    "edges": ["EdgeAttribution", "edge_attribution"],
}
__getattr__, __dir__ = lazy_attributes(__name__, _EXPORTS)

__all__ = [name for names in _EXPORTS.values() for name in names]
