"""The circuit graph figure: heads placed by layer and index, coloured by ``s_POS − s_SYM``,
edges drawn by weight and coloured by their positional share."""

from __future__ import annotations

from typing import Any

from ..circuits.graph import Edge

__all__ = ["plot_circuit"]

_CHANNEL_STYLE = {"q": "-", "k": "--", "v": ":", "in": "-"}


def plot_circuit(circuit: Any, *, ax: Any = None, title: str | None = None) -> Any:
    """Draw ``circuit`` (a :class:`~lens_possym.circuits.Circuit`) on ``ax``: x = layer
    (the embedding left, the logits right), y = head index (an MLP below the heads); a
    node's colour is its ``s_POS − s_SYM`` (red positional, blue symbolic, grey unknown);
    an edge's width is ``|score| / max |score|``, its style the channel (q solid, k
    dashed, v dotted), its colour the positional share of a key edge (red 1, blue 0,
    black unknown). Returns ``ax``."""
    import matplotlib
    from matplotlib.figure import Figure

    if ax is None:
        ax = Figure(figsize=(8, 5), constrained_layout=True).subplots()
    edges = [Edge.parse(e) for e in circuit.edges]
    nodes = sorted({n for e in edges for n in (e.sender, e.receiver)})
    layers = [n.layer for n in nodes if n.layer >= 0]
    last = (max(layers) + 1) if layers else 1
    heads = [n.head for n in nodes if n.kind == "head"]
    mid = (max(heads) / 2) if heads else 0.0

    def place(node):
        if node.kind == "embed":
            return (-1.0, mid)
        if node.kind == "logits":
            return (float(last), mid)
        if node.kind == "mlp":
            return (node.layer + 0.4, -1.0)
        return (float(node.layer), float(node.head))

    cmap = matplotlib.colormaps["coolwarm"]
    top = max((abs(s) for s in circuit.scores), default=1.0) or 1.0
    for edge, score in zip(edges, circuit.scores):
        (x0, y0), (x1, y1) = place(edge.sender), place(edge.receiver)
        share = circuit.key_shares.get(edge.name)
        colour = "black" if share is None or share != share else cmap(share)
        ax.annotate("", xy=(x1, y1), xytext=(x0, y0),
                    arrowprops=dict(arrowstyle="-|>", lw=0.6 + 4.0 * abs(score) / top,
                                    linestyle=_CHANNEL_STYLE[edge.channel], color=colour,
                                    alpha=0.8, shrinkA=9, shrinkB=9,
                                    connectionstyle="arc3,rad=0.08"))
    for node in nodes:
        x, y = place(node)
        label = circuit.nodes.get(node.name)
        colour = (cmap(0.5 + 0.5 * max(-1.0, min(1.0, label["pos"] - label["sym"])))
                  if label else "lightgrey")
        ax.scatter([x], [y], s=420, color=colour, edgecolor="black", zorder=3)
        ax.text(x, y, node.name, ha="center", va="center", fontsize=7, zorder=4)
    ax.set_xlabel("layer (embed left, logits right)")
    ax.set_ylabel("head (MLP below)")
    ax.set_xlim(-1.6, last + 0.6)
    ax.margins(y=0.2)
    ax.set_title(title or f"circuit: {len(edges)} edges; node colour s_POS − s_SYM, "
                 f"key edges by positional share (q solid, k dashed, v dotted)", fontsize=8)
    return ax
