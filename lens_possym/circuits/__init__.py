"""Circuits: how heads connect, through a receiver's query, key or value, and whether an
edge feeds the receiver's positional channel or its content.

* :mod:`.graph`: the graph circuits are drawn on: :class:`Node` (``embed``, a head
  ``L3H5``, an MLP ``M3``, ``logits``), :class:`Edge` (a sender's output reaching one input
  of a receiver: ``q``/``k``/``v`` for a head, ``in`` for an MLP or the logits),
  :func:`graph_nodes` / :func:`graph_edges` listing a model's.

See ``docs/circuits.md``.
"""

from .._lazy import lazy_attributes

# imported on first use (lens_possym._lazy), so importing this package imports nothing heavy
_EXPORTS = {
    "graph": ["CHANNELS", "KINDS", "Edge", "GraphShape", "Node", "graph_edges", "graph_nodes",
        "graph_shape"],
}
__getattr__, __dir__ = lazy_attributes(__name__, _EXPORTS)

__all__ = [
    "Node",
    "Edge",
    "KINDS",
    "CHANNELS",
    "GraphShape",
    "graph_shape",
    "graph_nodes",
    "graph_edges",
]
