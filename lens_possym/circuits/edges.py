r"""Edge attribution (EAP; Syed et al. 2023): every edge of the head/MLP graph scored from one
gradient, with each query/key edge split into the receiver's positional and content pairs.

**The estimate.** The residual stream a receiver reads is the sum of its senders' outputs
(:mod:`.graph`), so the edge ``s → r.c`` is ``s``'s term in the input of channel ``c`` of
``r``. Patching that term alone from the source run (denoising: clean into corrupted)
changes the metric by, to first order,

    score(s → r.c)[b] = Σ_{p, i} Δout_s[b, p, i] · G_{r,c}[b, p, i]

with ``Δout_s = out_s(source) − out_s(run)`` in the residual stream (the embedding's
``blocks.0.hook_resid_pre``; a head's ``z[:, :, h] @ W_O[L, h]``; an MLP's
``hook_mlp_out``) and ``G_{r,c} = ∂m/∂x_{r,c}`` the gradient with respect to the residual
``x`` *as read by that input alone*, at the run:

* a head's ``q``/``k``/``v``: ``G = J_ln1(x)^T W_c[h] g_c[h]``, where ``g_c[h]`` is the
  metric's gradient with respect to head ``h``'s own (un-rotated) query, key or value.
  A key or value is shared by a KV group, so its gradient is split per query head from the
  attention pattern: ``∂m/∂A[h,q,k] = Σ_d ∂m/∂z[q,h,d] v[k,d]``, the softmax's backward
  (and the softcap's) gives ``∂m/∂s[h,q,k]``, then ``g_k[h] = R^T (scale Σ_q ∂m/∂s[h,q,k]
  R q[h,q])`` and ``g_v[h][k] = Σ_q A[h,q,k] ∂m/∂z[q,h]``. Checked on every run: the
  per-head gradients summed over a group equal the model's own gradient at ``hook_q``/
  ``hook_k``/``hook_v``, and summed over every head and channel (and the MLP, where it
  reads the same norm) the model's gradient at ``ln1``'s input (else
  :class:`~lens_possym.errors.DecompositionMismatchError`);
* an MLP's ``in``: the gradient at its norm's input (``ln2.hook_in``; a parallel block
  whose MLP reads ``ln1``'s output, as GPT-J's: through ``ln1`` as the heads are);
* the logits' ``in``: the gradient at the last ``hook_resid_post``.

One source forward pass, one run forward and backward, and one vector-Jacobian product
per layer's norm: a fixed number of passes for every edge of the graph.

**Positional share of a query/key edge.** A RoPE receiver's query (key) dims split into
its *positional* frequency pairs ``P`` (``positional``: frequency ids, a band name, or per
head ``{"L3H5": ids}``; default ``"high"``, the fastest third, which rotate most between
nearby positions) and the rest ``C`` (the *content* pairs and any non-rotated tail). With
``g_c[h]`` masked to ``P`` or ``C`` the score splits exactly, ``score = e_pos + e_con``,
and the positional share is

    share = |e_pos| / (|e_pos| + |e_con|)       (``nan`` when both are 0)

the share :func:`~lens_possym.circuits.positional_share` measures by path patching, here
to first order. ``v``, MLP and logits edges have none (``nan``).

**Where it applies.** Pre-norm blocks whose outputs add into the residual stream
(Llama, Qwen2, NeoX, GPT-J, SmolLM2, ...). A model that normalises a block's output before
adding it (Gemma's post-attention norms) does not write a sum of its heads' outputs, so
its edges are not defined this way: it is refused (:class:`~lens_possym.errors.UnsupportedModelError`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

import torch
from torch import Tensor

from .._inputs import as_token_pair
from .._json import tensor_from_json
from .._precision import compute_dtype
from ..errors import DecompositionMismatchError, UnsupportedModelError
from ..interventions import engine
from ..interventions.selection import parse_freqs
from ..resolved import Resolved, resolve
from ..results_io import ResultIO, RunCost
from ..rope import RopeSpec, heads_view, rotate
from ..typing import HookedModel
from .attribution import attention_pattern, gradient_run, raw_scores, source_run, value_view
from .graph import Edge, Node, graph_edges, graph_shape

__all__ = ["EdgeAttribution", "edge_attribution"]

_RTOL = 1e-3


def _check(name: str, got: Tensor, want: Tensor) -> None:
    scale = max(float(want.abs().max()), 1e-12)
    err = float((got - want).abs().max())
    if not err <= _RTOL * scale + 1e-7:
        raise DecompositionMismatchError(
            f"edge attribution: {name} differs from the model's own gradient by {err:.3g} "
            f"(scale {scale:.3g}); this model's attention or norms are not the pre-norm "
            "kind edge attribution reads")


def _head_grads(spec: RopeSpec, acts: Mapping[str, Tensor], grads: Mapping[str, Tensor]
                ) -> dict[str, Tensor]:
    """Per query head gradients ``[b, p, H, d_head]`` of the metric w.r.t. head ``h``'s own
    un-rotated query, key and value (checked against the model's at the shared hooks)."""
    z_name = engine.z_hook_name(spec)
    dtype = compute_dtype(acts[z_name].dtype)
    q = heads_view(acts[spec.q_hook], spec).to(dtype)
    k = heads_view(acts[spec.k_hook], spec).to(dtype)
    v = value_view(acts, spec).to(dtype)
    b, n = q.shape[:2]
    device = q.device
    positions = torch.arange(n, device=device)
    at = spec.at_length(n)
    kv = torch.tensor([spec.kv_head(h) for h in range(spec.n_heads)], device=device)
    qr = rotate(q, positions, at).to(dtype)
    kr = rotate(k, positions, at).to(dtype)[:, :, kv]
    raw = raw_scores(spec, qr, kr)
    pattern = attention_pattern(spec, raw)
    gz = grads[z_name].reshape(b, n, spec.n_heads, spec.d_head).to(dtype)
    g_pattern = torch.einsum("bqhd,bkhd->bhqk", gz, v[:, :, kv])
    g_scores = pattern * (g_pattern - (pattern * g_pattern).sum(-1, keepdim=True))
    if spec.softcap:
        g_scores = g_scores * (1 - torch.tanh(raw / spec.softcap) ** 2)
    g_qr = torch.einsum("bhqk,bkhd->bqhd", g_scores, kr) * spec.scale
    g_kr = torch.einsum("bhqk,bqhd->bkhd", g_scores, qr) * spec.scale
    g_q = rotate(g_qr, -positions, at).to(dtype)  # R^T: the rotation at minus the angle
    g_k = rotate(g_kr, -positions, at).to(dtype)
    g_v = torch.einsum("bhqk,bqhd->bkhd", pattern, gz)

    def grouped(x: Tensor) -> Tensor:
        out = torch.zeros(b, n, spec.n_kv_heads, spec.d_head, dtype=dtype, device=device)
        out.index_add_(2, kv, x)
        return out

    _check(f"layer {spec.layer}'s query gradient", g_q,
           heads_view(grads[spec.q_hook], spec).to(dtype))
    _check(f"layer {spec.layer}'s key gradient", grouped(g_k),
           heads_view(grads[spec.k_hook], spec).to(dtype))
    _check(f"layer {spec.layer}'s value gradient", grouped(g_v),
           value_view(grads, spec).to(dtype))
    return {"q": g_q, "k": g_k, "v": g_v}


def _weights(model: Any, name: str, layer: int, spec: RopeSpec) -> Tensor:
    """``[n_heads, d_model, d_head]`` (per query head; KV weights repeated per group)."""
    w = getattr(model, name)[layer].detach()
    if w.shape[0] == spec.n_heads:
        return w
    kv = torch.tensor([spec.kv_head(h) for h in range(spec.n_heads)], device=w.device)
    return w[kv]


def _norm_vjp(norm: Any, x: Tensor, g_out: Tensor) -> Tensor:
    """``J_norm(x)^T g`` for each of ``g_out``'s ``C`` rows: ``x [b, p, d]``, ``g_out
    [b, p, C, d]`` -> ``[b, p, C, d]`` (the norm applied to ``x`` repeated ``C`` times)."""
    with torch.enable_grad():
        xe = x[:, :, None, :].expand(*g_out.shape).detach().clone().requires_grad_(True)
        y = norm(xe)
        (g,) = torch.autograd.grad(y, xe, g_out.to(y.dtype))
    return g


@dataclass(repr=False)
class EdgeAttribution(RunCost, ResultIO):
    """Edge-attribution scores (module docstring).

    Attributes:
        edges: edge names (``"L0H1->L2H3.k"``), sorted as :func:`~lens_possym.circuits.graph_edges`.
        values: ``[n_edges, n_prompts]`` each edge's first-order effect on the metric per
            prompt; ``scores`` their means (what :func:`~lens_possym.circuits.select_edges`
            reads).
        positional, content: ``[n_edges, n_prompts]`` a q/k edge's score through the
            receiver's positional pairs and through its other dims (they add up to
            ``values``); ``nan`` for v/MLP/logits edges.
        positional_freqs: ``{head name: frequency ids}`` the positional pairs used.
        baseline: ``[n_prompts]`` the metric on the run.
    """

    edges: list[str]
    values: Tensor
    positional: Tensor
    content: Tensor
    baseline: Tensor
    positional_freqs: dict = field(default_factory=dict)
    method: str = "attribution"

    FORMAT = "lens-possym/edge-attribution@1"

    @property
    def scores(self) -> Tensor:
        """``[n_edges]`` the mean first-order effect over prompts."""
        return self.values.mean(-1)

    @property
    def positional_share(self) -> Tensor:
        """``[n_edges]`` ``|e_pos| / (|e_pos| + |e_con|)`` of the prompt means (``nan`` for
        edges without pairs, or with both parts 0)."""
        pos, con = self.positional.mean(-1).abs(), self.content.mean(-1).abs()
        total = pos + con
        return torch.where(total > 0, pos / total.clamp_min(1e-30),
                           torch.full_like(total, float("nan")))

    def edge_list(self) -> list[Edge]:
        return [Edge.parse(e) for e in self.edges]

    def score(self, edge: Edge | str) -> float:
        name = edge.name if isinstance(edge, Edge) else Edge.parse(edge).name
        return float(self.scores[self.edges.index(name)])

    def top(self, k: int = 10) -> list[tuple[str, float, float]]:
        """The ``k`` edges of largest |score|: ``(name, score, positional share)``."""
        scores, share = self.scores, self.positional_share
        order = scores.abs().argsort(descending=True)[:k]
        return [(self.edges[i], float(scores[i]), float(share[i])) for i in order.tolist()]

    def to_dict(self) -> dict[str, Any]:
        return {"edges": list(self.edges), "values": self.values,
                "positional": self.positional, "content": self.content,
                "baseline": self.baseline,
                "positional_freqs": {k: list(v) for k, v in self.positional_freqs.items()},
                "method": self.method, **self.cost_dict()}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "EdgeAttribution":
        t = lambda v: v if isinstance(v, Tensor) else tensor_from_json(v)  # noqa: E731
        return cls(edges=list(data["edges"]), values=t(data["values"]),
                   positional=t(data["positional"]), content=t(data["content"]),
                   baseline=t(data["baseline"]),
                   positional_freqs={k: tuple(int(i) for i in v)
                                     for k, v in (data.get("positional_freqs") or {}).items()},
                   method=str(data.get("method", "attribution")), **cls.read_cost(data))

    def summary(self) -> dict[str, Any]:
        top = self.top(1)
        return {"n_edges": len(self.edges), "n_prompts": int(self.values.shape[-1]),
                "strongest": top[0][0] if top else None,
                "strongest_score": top[0][1] if top else None,
                "seconds": self.seconds, "n_passes": self.n_passes}

    def _table(self):
        import pandas as pd

        return pd.DataFrame({"edge": self.edges,
                             "score": self.scores.double().numpy(),
                             "positional": self.positional.mean(-1).double().numpy(),
                             "content": self.content.mean(-1).double().numpy(),
                             "positional_share": self.positional_share.double().numpy()})

    def _headline(self) -> list[str]:
        s = self.summary()
        return [f"edges={s['n_edges']}", f"prompts={s['n_prompts']}",
                f"strongest={s['strongest']}"]


def _positional_ids(positional: Any, node: Node, spec: RopeSpec) -> tuple[int, ...]:
    if isinstance(positional, Mapping):
        chosen = positional.get(node.name, ())
        return tuple(parse_freqs(chosen, spec)) if chosen not in ((), None) else ()
    return tuple(parse_freqs(positional, spec))


def edge_attribution(model: HookedModel | Resolved, run_tokens: Any, source_tokens: Any,
                     metric: Callable[[Tensor], Tensor], *, mlps: bool | None = None,
                     positional: Any = "high") -> EdgeAttribution:
    """Score every edge of ``model``'s graph (module docstring): the first-order effect on
    ``metric`` of patching each sender's output into one receiver input, from the
    ``source_tokens`` run into the ``run_tokens`` run (denoising: clean into corrupted).

    Args:
        run_tokens, source_tokens: ``[batch, pos]`` of equal shape.
        metric: ``logits -> [batch]``, differentiable, row-wise.
        mlps: include MLP nodes (default: when the model has them).
        positional: a q/k receiver's positional pairs: frequency ids or a band name for
            every head, or ``{"L3H5": ids}`` per head (heads not named: no split).

    Returns:
        :class:`EdgeAttribution` over :func:`~lens_possym.circuits.graph_edges` ``(model)``.
    """
    resolved = resolve(model)
    model = resolved.model
    run, src = as_token_pair(model, run_tokens, source_tokens, ("run tokens", "source tokens"))
    shape = graph_shape(model)
    if any(".ln1_post." in n or ".ln2_post." in n for n in model.hook_dict):
        raise UnsupportedModelError(
            "edge attribution needs blocks that add their heads' outputs to the residual "
            "stream; this model normalises them first (post-attention norms, as Gemma): "
            "use path patching (lens_possym.circuits.path_patch) for its edges")
    with_mlps = shape.mlps if mlps is None else (mlps and shape.mlps)
    specs = resolved.specs
    start = time.perf_counter()
    n_layers, n_heads = shape.n_layers, shape.n_heads
    last_post = f"blocks.{n_layers - 1}.hook_resid_post"
    z = [engine.z_hook_name(specs[L]) for L in range(n_layers)]
    mlp_out = [f"blocks.{L}.hook_mlp_out" for L in range(n_layers)]
    outputs = ["blocks.0.hook_resid_pre"] + z + (mlp_out if with_mlps else [])
    hooks = set(model.hook_dict)
    mlp_in: dict[int, str] = {}
    if with_mlps:
        for L in range(n_layers):
            name = f"blocks.{L}.ln2.hook_in"
            mlp_in[L] = name if name in hooks else f"blocks.{L}.mlp.hook_in"
    names = list(outputs) + [last_post]
    for L in range(n_layers):
        spec = specs[L]
        names += [spec.q_hook, spec.k_hook, engine.v_hook_name(spec), f"blocks.{L}.ln1.hook_in"]
        if with_mlps:
            names.append(mlp_in[L])
    source, _ = source_run(resolved, src, metric, outputs)
    acts, grads, baseline = gradient_run(resolved, run, metric, names)

    dtype = compute_dtype(acts[z[0]].dtype)
    batch, n_pos = run.shape
    # senders' output differences in the residual stream, [S, b, p, d_model]
    senders: list[Node] = [Node("embed")]
    diffs = [(source["blocks.0.hook_resid_pre"] - acts["blocks.0.hook_resid_pre"]).to(dtype)]
    sender_layer = [-1]
    for L in range(n_layers):
        dz = (source[z[L]] - acts[z[L]]).reshape(batch, n_pos, n_heads, -1).to(dtype)
        w_o = model.W_O[L].detach().to(dtype)  # [H, d_head, d_model]
        out = torch.einsum("bphd,hdm->hbpm", dz, w_o)
        for h in range(n_heads):
            senders.append(Node("head", L, h))
            diffs.append(out[h])
            sender_layer.append(L)
        if with_mlps:
            senders.append(Node("mlp", L))
            diffs.append((source[mlp_out[L]] - acts[mlp_out[L]]).to(dtype))
            sender_layer.append(L)
    diff = torch.stack(diffs)  # [S, b, p, d]
    index = {node: i for i, node in enumerate(senders)}

    # receiver-input gradients in the residual stream, per receiver and channel
    grad_of: dict[tuple[Node, str], Tensor] = {}
    freqs_used: dict[str, tuple[int, ...]] = {}
    for L in range(n_layers):
        spec = specs[L]
        g = _head_grads(spec, acts, grads)
        rows, keys = [], []
        for c in ("q", "k", "v"):
            w = _weights(model, {"q": "W_Q", "k": "W_K", "v": "W_V"}[c], L, spec).to(dtype)
            for h in range(n_heads):
                node = Node("head", L, h)
                gh = g[c][:, :, h]  # [b, p, d_head]
                if c == "v":
                    parts = {"all": gh}
                else:
                    ids = _positional_ids(positional, node, spec)
                    freqs_used[node.name] = ids
                    mask = torch.zeros(spec.d_head, dtype=dtype, device=gh.device)
                    for f in ids:
                        mask[spec.dims_of(f)] = 1
                    parts = {"pos": gh * mask, "con": gh * (1 - mask)}
                for part, value in parts.items():
                    rows.append(torch.einsum("bpd,md->bpm", value, w[h]))
                    keys.append((node, c, part))
        through_ln1_mlp = with_mlps and mlp_in[L].endswith("mlp.hook_in")
        if through_ln1_mlp:
            rows.append(grads[mlp_in[L]].to(dtype))
            keys.append((Node("mlp", L), "in", "all"))
        ln_in = f"blocks.{L}.ln1.hook_in"
        g_res = _norm_vjp(model.blocks[L].ln1, acts[ln_in].to(dtype),
                          torch.stack(rows, 2))  # [b, p, C, d]
        _check(f"layer {L}'s attention input gradient (summed over heads and channels)",
               g_res.sum(2), grads[ln_in].to(dtype))
        for i, key in enumerate(keys):
            grad_of[key] = g_res[:, :, i]
        if with_mlps and not through_ln1_mlp:
            grad_of[(Node("mlp", L), "in", "all")] = grads[mlp_in[L]].to(dtype)
    grad_of[(Node("logits"), "in", "all")] = grads[last_post].to(dtype)

    edges = graph_edges(shape, mlps=with_mlps)
    values = torch.empty(len(edges), batch)
    pos_t = torch.full((len(edges), batch), float("nan"))
    con_t = torch.full((len(edges), batch), float("nan"))
    # group by receiver input: one contraction over its senders
    by_input: dict[tuple[Node, str], list[int]] = {}
    for i, e in enumerate(edges):
        by_input.setdefault((e.receiver, e.channel), []).append(i)
    for (receiver, channel), members in by_input.items():
        sel = torch.tensor([index[edges[i].sender] for i in members])
        d = diff[sel]
        if receiver.kind == "head" and channel in ("q", "k"):
            gp = grad_of[(receiver, channel, "pos")]
            gc = grad_of[(receiver, channel, "con")]
            p = torch.einsum("sbpm,bpm->sb", d, gp).float().cpu()
            c = torch.einsum("sbpm,bpm->sb", d, gc).float().cpu()
            pos_t[members], con_t[members] = p, c
            values[members] = p + c
        else:
            values[members] = torch.einsum("sbpm,bpm->sb", d,
                                           grad_of[(receiver, channel, "all")]).float().cpu()
    return EdgeAttribution(edges=[e.name for e in edges], values=values, positional=pos_t,
                           content=con_t, baseline=baseline, positional_freqs=freqs_used,
                           seconds=time.perf_counter() - start, n_passes=3)
