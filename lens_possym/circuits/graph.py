r"""The computational graph circuits are drawn on: nodes (the embedding, every attention head,
every MLP, the logits) and edges (a sender's output reaching one input of a receiver).

A transformer's residual stream is a sum of everything written before: the embedding, each
head's output (``hook_z`` times ``W_O``), each MLP's output. A receiver reads that sum, so
the edge ``sender -> receiver`` is the sender's term in the sum the receiver reads, and a
head reads it three times: through its query, its key and its value (``channel`` ``"q"``,
``"k"``, ``"v"``); an MLP and the logits read it once (``"in"``).

Upstream (who can reach whom), for a sequential block ``x -> x + attn(x) -> + mlp(.)``:

* a head of layer ``L`` reads the embedding, every head of layers ``< L`` and every MLP of
  layers ``< L``;
* the MLP of layer ``L`` reads the embedding, every head of layers ``<= L`` and every MLP of
  layers ``< L`` (with ``cfg.parallel_attn_mlp``, the heads of layers ``< L`` only: the
  block's attention and MLP read the same residual);
* the logits read every node.

:class:`Node` and :class:`Edge` are ordered topologically (a sender sorts before every one
of its receivers), so ``sorted(edges)`` is a valid order to compute receivers in.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import total_ordering
import re
from typing import Any, Iterable

from ..errors import InvalidSelectionError

__all__ = ["KINDS", "CHANNELS", "Node", "Edge", "graph_nodes", "graph_edges", "GraphShape",
           "graph_shape", "edges_among", "top_heads"]

#: the kinds of node, in the order the residual stream is written
KINDS = ("embed", "head", "mlp", "logits")
#: a head receiver's inputs; an MLP's and the logits' single input is ``"in"``
CHANNELS = ("q", "k", "v", "in")
_HEAD_CHANNELS = ("q", "k", "v")
_LAST = 1 << 30  # the logits' layer in the topological key
_NAME = re.compile(r"^(?:embed|logits|L(\d+)H(\d+)|M(\d+))$")


def _is_index(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


@total_ordering
@dataclass(frozen=True, eq=True)
class Node:
    """One node of the graph: ``Node("embed")``, ``Node("head", layer, head)``,
    ``Node("mlp", layer)``, ``Node("logits")``. ``layer``/``head`` are ``-1`` where they do
    not apply. Hashable; ordered topologically (embed, then per layer its heads by index
    and its MLP, then the logits). ``.name``: ``"embed"``, ``"L3H5"``, ``"M3"``,
    ``"logits"``; :meth:`parse` reads a name back."""

    kind: str
    layer: int = -1
    head: int = -1

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise InvalidSelectionError(
                f"Node kind {self.kind!r} is not one of {KINDS}: write Node('head', layer, "
                f"head), Node('mlp', layer), Node('embed') or Node('logits')")
        if not (_is_index(self.layer) and _is_index(self.head)):
            raise InvalidSelectionError(
                f"Node layer/head must be ints, got layer={self.layer!r}, head={self.head!r}")
        wants_layer = self.kind in ("head", "mlp")
        wants_head = self.kind == "head"
        if wants_layer != (self.layer >= 0) or (not wants_layer and self.layer != -1):
            raise InvalidSelectionError(
                f"Node({self.kind!r}) takes {'a layer >= 0' if wants_layer else 'no layer'}, "
                f"got layer={self.layer}")
        if wants_head != (self.head >= 0) or (not wants_head and self.head != -1):
            raise InvalidSelectionError(
                f"Node({self.kind!r}) takes {'a head >= 0' if wants_head else 'no head'}, "
                f"got head={self.head}")

    @property
    def name(self) -> str:
        if self.kind == "head":
            return f"L{self.layer}H{self.head}"
        if self.kind == "mlp":
            return f"M{self.layer}"
        return self.kind

    @classmethod
    def parse(cls, name: str) -> "Node":
        """The node named ``name`` (``"embed"``, ``"L3H5"``, ``"M3"``, ``"logits"``)."""
        match = _NAME.match(name.strip()) if isinstance(name, str) else None
        if match is None:
            raise InvalidSelectionError(
                f"node name {name!r} is not 'embed', 'logits', 'L<layer>H<head>' (L3H5) or "
                f"'M<layer>' (M3)")
        if match.group(1) is not None:
            return cls("head", int(match.group(1)), int(match.group(2)))
        if match.group(3) is not None:
            return cls("mlp", int(match.group(3)))
        return cls(name.strip())

    @property
    def key(self) -> tuple[int, int, int]:
        """The topological sort key ``(layer, sub, head)``: embed ``(-1, 0, 0)``, a head
        ``(L, 0, h)``, an MLP ``(L, 1, 0)``, the logits last."""
        if self.kind == "embed":
            return (-1, 0, 0)
        if self.kind == "head":
            return (self.layer, 0, self.head)
        if self.kind == "mlp":
            return (self.layer, 1, 0)
        return (_LAST, 0, 0)

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, Node):
            return NotImplemented
        return self.key < other.key

    def __str__(self) -> str:
        return self.name

    def reads_from(self, sender: "Node", *, parallel_attn_mlp: bool = False) -> bool:
        """Whether ``sender``'s output is in the residual this node reads (see the module
        docstring): strictly upstream, and for an MLP the heads of its own layer too
        (unless attention and MLP run in parallel)."""
        if sender.kind == "logits" or self.kind == "embed":
            return False
        if self.kind == "logits":
            return True
        if sender.kind == "embed":
            return True
        if self.kind == "head":
            return sender.layer < self.layer
        # an MLP receiver
        if sender.kind == "head" and not parallel_attn_mlp:
            return sender.layer <= self.layer
        return sender.layer < self.layer


@total_ordering
@dataclass(frozen=True, eq=True)
class Edge:
    """``sender``'s output reaching ``receiver`` through ``channel``: ``"q"``, ``"k"`` or
    ``"v"`` for a head receiver, ``"in"`` for an MLP or the logits. The sender must be
    upstream of the receiver (a head of layer ``L`` reads layers ``< L``; an MLP reads its
    own layer's heads too). ``.name``: ``"L0H1->L2H3.k"``, ``"M0->logits"``. Ordered by
    receiver, then channel, then sender."""

    sender: Node
    receiver: Node
    channel: str = "in"

    def __post_init__(self) -> None:
        if not isinstance(self.sender, Node) or not isinstance(self.receiver, Node):
            raise InvalidSelectionError(
                f"Edge(sender, receiver, channel) takes two Nodes, got {self.sender!r}, "
                f"{self.receiver!r}: write Edge(Node.parse('L0H1'), Node.parse('L2H3'), 'k')")
        if self.receiver.kind == "head":
            if self.channel not in _HEAD_CHANNELS:
                raise InvalidSelectionError(
                    f"edge channel {self.channel!r} into head {self.receiver.name}: a head "
                    f"reads through 'q', 'k' or 'v'")
        elif self.channel != "in":
            raise InvalidSelectionError(
                f"edge channel {self.channel!r} into {self.receiver.name}: an MLP or the "
                f"logits read through 'in' only")
        if not self.receiver.reads_from(self.sender):
            raise InvalidSelectionError(
                f"{self.sender.name} is not upstream of {self.receiver.name}: a head of layer "
                f"L reads the embedding and layers < L, an MLP its own layer's heads too, "
                f"the logits every node")

    @property
    def name(self) -> str:
        suffix = "" if self.channel == "in" else f".{self.channel}"
        return f"{self.sender.name}->{self.receiver.name}{suffix}"

    @classmethod
    def parse(cls, name: str) -> "Edge":
        """The edge named ``name`` (``"L0H1->L2H3.k"``, ``"embed->M0"``)."""
        if not isinstance(name, str) or "->" not in name:
            raise InvalidSelectionError(
                f"edge name {name!r} is not 'SENDER->RECEIVER[.q|.k|.v]' (L0H1->L2H3.k)")
        sender, receiver = name.split("->", 1)
        channel = "in"
        if "." in receiver:
            receiver, channel = receiver.rsplit(".", 1)
        return cls(Node.parse(sender), Node.parse(receiver), channel)

    @property
    def key(self) -> tuple:
        return (self.receiver.key, CHANNELS.index(self.channel), self.sender.key)

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, Edge):
            return NotImplemented
        return self.key < other.key

    def __str__(self) -> str:
        return self.name


@dataclass(frozen=True)
class GraphShape:
    """What the graph of a model depends on: ``n_layers``, ``n_heads``, whether it has MLPs
    (``not cfg.attn_only``) and whether attention and MLP run in parallel."""

    n_layers: int
    n_heads: int
    mlps: bool = True
    parallel_attn_mlp: bool = False


def graph_shape(model: Any) -> GraphShape:
    """The :class:`GraphShape` of a TransformerLens model (or bridge, or its ``cfg``, or a
    :class:`GraphShape`)."""
    if isinstance(model, GraphShape):
        return model
    cfg = getattr(model, "cfg", model)
    n_layers, n_heads = getattr(cfg, "n_layers", None), getattr(cfg, "n_heads", None)
    if not (_is_index(n_layers) and _is_index(n_heads)) or n_layers < 1 or n_heads < 1:
        raise InvalidSelectionError(
            f"cannot read the graph of {type(model).__name__}: it needs cfg.n_layers and "
            f"cfg.n_heads (got {n_layers!r}, {n_heads!r}); pass a TransformerLens model")
    # attention-only: TransformerLens's attn_only, or a toy model's d_mlp=None
    mlps = not bool(getattr(cfg, "attn_only", False)) and getattr(cfg, "d_mlp", 1) is not None \
        and getattr(cfg, "d_mlp", 1) != 0
    return GraphShape(n_layers, n_heads, mlps=mlps,
                      parallel_attn_mlp=bool(getattr(cfg, "parallel_attn_mlp", False)))


def graph_nodes(model: Any, *, mlps: bool | None = None) -> list[Node]:
    """Every node of ``model``'s graph in topological order: the embedding, per layer its
    heads then its MLP (``mlps=False``, or an attention-only model: none), the logits."""
    shape = graph_shape(model)
    with_mlps = shape.mlps if mlps is None else (mlps and shape.mlps)
    nodes = [Node("embed")]
    for layer in range(shape.n_layers):
        nodes.extend(Node("head", layer, h) for h in range(shape.n_heads))
        if with_mlps:
            nodes.append(Node("mlp", layer))
    nodes.append(Node("logits"))
    return nodes


def graph_edges(model: Any, *, mlps: bool | None = None,
                channels: Iterable[str] = _HEAD_CHANNELS,
                receivers: Iterable[Node] | None = None) -> list[Edge]:
    """Every edge of ``model``'s graph, sorted (receiver, channel, sender): each receiver
    input (a head's ``channels``, default ``q``/``k``/``v``; an MLP's and the logits'
    ``in``) from every node upstream of it. ``receivers`` restricts to those receivers.
    """
    shape = graph_shape(model)
    nodes = graph_nodes(shape, mlps=mlps)
    chans = tuple(channels)
    bad = [c for c in chans if c not in _HEAD_CHANNELS]
    if bad or not chans:
        raise InvalidSelectionError(
            f"head channels {chans!r}: choose among 'q', 'k', 'v'")
    wanted = None if receivers is None else set(receivers)
    edges = []
    for receiver in nodes:
        if wanted is not None and receiver not in wanted:
            continue
        inputs = chans if receiver.kind == "head" else ("in",)
        for channel in inputs:
            for sender in nodes:
                if receiver.reads_from(sender, parallel_attn_mlp=shape.parallel_attn_mlp):
                    edges.append(Edge(sender, receiver, channel))
    return sorted(edges)


def edges_among(model: Any, nodes: Iterable[Node], *, mlps: bool | None = None) -> list[Edge]:
    """The edges of :func:`graph_edges` whose sender and receiver are both in ``nodes``
    (e.g. a few heads with ``embed`` and ``logits``: the candidate edges among them)."""
    keep = set(nodes)
    return [e for e in graph_edges(model, mlps=mlps) if e.sender in keep and e.receiver in keep]


def top_heads(grid: Any, k: int) -> list[Node]:
    """The ``k`` heads whose patching moves the metric most: the cells of a
    ``[n_layers, n_heads]`` heads grid by decreasing ``|effect|``, as :class:`Node` s.

    Args:
        grid: a heads :class:`~lens_possym.interventions.PatchingGrid` (``site="heads"``,
            all positions; ranked by its effect ``values − baseline`` averaged over prompts,
            ``grid.effect().mean(-1)``, so a noising grid ranks what each patch changes, not
            the metric's level), or a ``[n_layers, n_heads]`` tensor of effects.
        k: how many heads (>= 1); fewer come back when fewer cells were patched.

    Returns:
        ``k`` head nodes, largest ``|effect|`` first (ties in grid order, layer then head).

    A ``nan`` cell is a head the grid did **not patch** and is **excluded**: a grid run on
    some layers or heads (``layers=``, ``heads=``, an ``index_df``) fills the others with
    ``nan``, while a patched cell is never ``nan`` (the grid refuses a metric giving ``nan``
    or ``inf``). Ranking it as 0 would let an unpatched head be picked when fewer than
    ``k`` heads were patched, and ``argsort`` alone sorts ``nan`` first. A grid with no
    patched cell is an error.
    """
    import torch

    if not (isinstance(k, int) and not isinstance(k, bool) and k >= 1):
        raise InvalidSelectionError(f"top_heads needs k >= 1 heads, got {k!r}")
    if not (isinstance(grid, torch.Tensor) or callable(getattr(grid, "effect", None))):
        raise InvalidSelectionError(
            f"top_heads takes a heads PatchingGrid or a [n_layers, n_heads] tensor, got "
            f"{type(grid).__name__}")
    effect = grid if isinstance(grid, torch.Tensor) else grid.effect().mean(-1)
    if effect.ndim != 2:
        raise InvalidSelectionError(
            f"top_heads takes a [n_layers, n_heads] heads grid, got shape "
            f"{tuple(effect.shape)}; patch with site='heads' over all positions")
    flat = effect.detach().abs().flatten()
    patched = (~torch.isnan(flat)).nonzero().flatten()
    if patched.numel() == 0:
        raise InvalidSelectionError("the heads grid has no patched cell (every cell is nan)")
    order = patched[flat[patched].argsort(descending=True, stable=True)][:k].tolist()
    n_heads = int(effect.shape[1])
    return [Node("head", i // n_heads, i % n_heads) for i in order]
