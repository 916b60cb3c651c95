r"""Path patching (Wang et al. 2022): a sender's clean output reaching *only* chosen receiver
inputs, batched like the patching grid.

**Convention (denoising, as :func:`~lens_possym.interventions.patch_grid`'s default).** The
run is the corrupted one. For a cell with senders ``S`` and receivers ``R`` (each a
receiver input: a head's ``q``, ``k`` or ``v``, optionally only some of its frequency
pairs; an MLP's or the logits' ``in``):

1. *freeze*: a corrupted pass in which every node's output (each head's ``hook_z``, each
   MLP's ``hook_mlp_out``, the embedding at ``blocks.0.hook_resid_pre``) is frozen at its
   corrupted value, except the senders', which take their clean value. Every residual
   stream read in this pass is then ``r_corr + Σ_{s∈S} (out_s^clean − out_s^corr)``
   exactly: the senders' direct contributions and nothing else. The receivers' inputs are
   read here (``spec.q_hook``/``spec.k_hook``/``v``, ``hook_mlp_out``, the last
   ``hook_resid_post``);
2. *patch*: a corrupted pass in which each receiver input takes its frozen-pass value
   (only the chosen pairs of it, for a frequency band; every other input of the receiver
   keeps its corrupted value), and everything downstream of the receivers is recomputed.
   A head receiver's new output is recomputed from its (q, k, v) with the layer's own
   geometry (:func:`~lens_possym.interventions.engine.attend`, GQA-safe: a key or value
   edit for one query head of a KV group touches no other head), checked against the
   model's own ``hook_z`` on the unedited rows; an MLP receiver's output is its
   frozen-pass output; the logits receiver adds the senders' direct contribution to the
   final residual.

The value is ``metric(logits)`` per prompt; with the metric normalised as
:func:`~lens_possym.tasks.normalised_logit_diff` is (0 corrupted, 1 clean), a cell near 1
says the senders' effect through those inputs restores the clean answer. We denoise
(clean into corrupted) because that is what the grid does: a path-patching cell and a
grid cell are on the same scale, and "path patching into every reader = patching the
sender's output" compares the two directly.

**Where that identity holds.** Patching every input that reads a sender ``s`` (every
downstream head's q, k and v, every downstream MLP, the logits) in one cell equals
patching ``s``'s output (the grid's ``hook_z`` cell) exactly when no two readers of ``s``
other than the logits read one another: then each reader sees, in the grid's run, exactly
``r_corr + Δ_s`` (nothing between ``s`` and it changed). That is the case for a head of the
last layer (its readers: its layer's MLP in a sequential block, and the logits) and, in an
attention-only model, for a head of the last two layers. Earlier senders have readers
that feed one another, and the frozen pass deliberately drops those indirect paths.

**Frequency bands.** For a RoPE receiver's ``q`` or ``k``, ``freqs`` picks frequency ids
(:func:`~lens_possym.interventions.parse_freqs`: ids, ranges, ``"high"``/``"mid"``/
``"low"``): the senders' contribution enters those pairs only (the rest of the head's
query or key keeps its corrupted value). Pairs are patched at ``spec.q_hook``/``k_hook``
(after any q/k-norm, before the rotation): both runs rotate them at the same positions,
so this is patching the rotated pairs. Positional pairs plus content pairs (every other
id, the non-rotated tail included) make the whole channel.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping, Sequence

import torch
from torch import Tensor

from .._inputs import as_token_pair
from .._precision import model_tolerance
from ..errors import DecompositionMismatchError, InvalidSelectionError
from ..interventions import engine
from ..interventions.selection import FreqsLike, parse_freqs
from ..experiments.grid_data import check_patches_per_pass
from ..experiments.uncertainty import Uncertainty, uncertainty
from ..resolved import Resolved, resolve
from ..results_io import ResultIO
from ..rope import RopeSpec
from ..typing import HookedModel
from .graph import Edge, Node, graph_shape

__all__ = ["Receiver", "PathCell", "PathPatching", "path_patch", "node_outputs",
           "output_hooks", "OUTPUT_ACTS", "run_caches", "frozen_inputs", "band_freqs"]


@dataclass(frozen=True)
class Receiver:
    """One receiver input: ``node`` (a head, an MLP or ``logits``), ``channel`` (``"q"``,
    ``"k"``, ``"v"`` for a head, ``"in"`` otherwise) and, for a head's ``q``/``k``,
    ``freqs``: the frequency ids the senders' contribution enters (``None``: all dims)."""

    node: Node
    channel: str = "in"
    freqs: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.node, Node) or self.node.kind == "embed":
            raise InvalidSelectionError(
                f"receiver {self.node!r}: a head, an MLP or Node('logits')")
        # the channel is checked as an edge's would be
        Edge(Node("embed"), self.node, self.channel)
        if self.freqs is not None and self.channel not in ("q", "k"):
            raise InvalidSelectionError(
                f"frequency pairs belong to a query or a key; {self.node.name}.{self.channel} "
                f"has none (drop freqs=)")

    @property
    def name(self) -> str:
        suffix = "" if self.channel == "in" else f".{self.channel}"
        band = "" if self.freqs is None else "[" + ",".join(map(str, self.freqs)) + "]"
        return f"{self.node.name}{suffix}{band}"


@dataclass(frozen=True)
class PathCell:
    """One path-patching cell: ``senders`` (heads, MLPs, the embedding) whose clean outputs
    reach only ``receivers``."""

    senders: tuple[Node, ...]
    receivers: tuple[Receiver, ...]

    @classmethod
    def edge(cls, edge: Edge, freqs: tuple[int, ...] | None = None) -> "PathCell":
        """The cell of one edge (its sender into its receiver's channel)."""
        return cls((edge.sender,), (Receiver(edge.receiver, edge.channel, freqs),))

    def __post_init__(self) -> None:
        if not self.senders or not self.receivers:
            raise InvalidSelectionError("a path-patching cell needs senders and receivers")
        for s in self.senders:
            if not isinstance(s, Node) or s.kind == "logits":
                raise InvalidSelectionError(f"sender {s!r}: an embed, head or MLP Node")
        for r in self.receivers:
            for s in self.senders:
                if not r.node.reads_from(s):
                    raise InvalidSelectionError(
                        f"{s.name} is not upstream of {r.node.name}: it cannot reach it")

    @property
    def name(self) -> str:
        return (",".join(s.name for s in self.senders) + "->"
                + ",".join(r.name for r in self.receivers))


# ---- node outputs: where each node writes into the residual stream ---------------------------

#: the activations node outputs are read and set at
OUTPUT_ACTS = ("blocks.0.hook_resid_pre", "hook_z", "hook_mlp_out")


def _z_name(resolved: Resolved, layer: int) -> str:
    return engine.z_hook_name(resolved.specs[layer])


def node_outputs(resolved: Resolved, cache: Mapping[str, Tensor], nodes: Iterable[Node]
                 ) -> dict[Node, Tensor]:
    """``{node: its output}`` read from ``cache``: the embedding's ``[batch, pos, d_model]``
    (``blocks.0.hook_resid_pre``), a head's ``[batch, pos, d_head]`` (its rows of
    ``hook_z``), an MLP's ``[batch, pos, d_model]`` (``hook_mlp_out``)."""
    out = {}
    for node in nodes:
        if node.kind == "embed":
            out[node] = cache["blocks.0.hook_resid_pre"]
        elif node.kind == "head":
            out[node] = cache[_z_name(resolved, node.layer)][:, :, node.head]
        elif node.kind == "mlp":
            out[node] = cache[f"blocks.{node.layer}.hook_mlp_out"]
    return out


def _output_names(resolved: Resolved, shape) -> list[str]:
    names = ["blocks.0.hook_resid_pre"]
    for layer in range(shape.n_layers):
        names.append(_z_name(resolved, layer))
        if shape.mlps:
            names.append(f"blocks.{layer}.hook_mlp_out")
    return names


def output_hooks(resolved: Resolved, base: Mapping[str, Tensor],
                 per_copy: Sequence[Mapping[Node, Tensor]], batch: int) -> list:
    """Hooks freezing every node's output at ``base``'s value (``[batch, ...]``, one copy)
    on a run of ``len(per_copy)`` stacked copies, copy ``c`` taking ``per_copy[c]``'s
    values (``{node: output}``) for its nodes instead."""
    shape = graph_shape(resolved.model)
    n = len(per_copy)

    def setter(name: str, pick: Callable[[Node], Any]):
        def hook(act: Tensor, hook: Any = None) -> Tensor:
            src = base[name].to(device=act.device, dtype=act.dtype)
            out = src.repeat(n, *([1] * (src.ndim - 1)))
            for c, values in enumerate(per_copy):
                for node, value in values.items():
                    where = pick(node)
                    if where is None:
                        continue
                    rows = out[c * batch:(c + 1) * batch]
                    if where == "all":
                        rows[...] = value.to(act.dtype)
                    else:
                        rows[:, :, where] = value.to(act.dtype)
            return out
        return hook

    hooks = [("blocks.0.hook_resid_pre",
              setter("blocks.0.hook_resid_pre", lambda nd: "all" if nd.kind == "embed" else None))]
    for layer in range(shape.n_layers):
        z = _z_name(resolved, layer)
        hooks.append((z, setter(z, lambda nd, L=layer: nd.head
                                if nd.kind == "head" and nd.layer == L else None)))
        if shape.mlps:
            m = f"blocks.{layer}.hook_mlp_out"
            hooks.append((m, setter(m, lambda nd, L=layer: "all"
                                    if nd.kind == "mlp" and nd.layer == L else None)))
    return hooks


def _input_name(spec: RopeSpec, channel: str) -> str:
    return {"q": spec.q_hook, "k": spec.k_hook, "v": engine.v_hook_name(spec)}[channel]


def _dims(spec: RopeSpec, freqs: tuple[int, ...] | None) -> Tensor | slice:
    if freqs is None:
        return slice(None)
    return torch.tensor(sorted(d for f in freqs for d in spec.dims_of(f)), dtype=torch.long)


def _view(tensor: Tensor, spec: RopeSpec, channel: str) -> Tensor:
    return engine.bphd(tensor, spec if channel in ("q", "k") else None)


# ---- the two passes ------------------------------------------------------------------------


class _Captured(Exception):
    """Raised by a hook to end a pass once what it reads has been read."""


def frozen_inputs(resolved: Resolved, tokens: Tensor, base: Mapping[str, Tensor],
                  per_copy: Sequence[Mapping[Node, Tensor]], wanted: Iterable[str], *,
                  stop_at: str | None = None) -> dict[str, Tensor]:
    """The freeze pass: ``tokens`` stacked ``len(per_copy)`` times, every node's output
    frozen at ``base`` except copy ``c``'s nodes at ``per_copy[c]``; returns the
    activations ``wanted`` (hook names) of the stacked run, and its ``"logits"`` unless
    ``stop_at`` (a hook name) ends the pass there."""
    model = resolved.model
    batch = tokens.shape[0]
    store: dict[str, Tensor] = {}
    wanted = list(dict.fromkeys(wanted))

    def keep(name):
        def hook(act: Tensor, hook: Any = None) -> Tensor:
            store[name] = act.detach().clone()
            return act
        return hook

    def stop(act: Tensor, hook: Any = None) -> Tensor:
        raise _Captured

    # read before the frozen outputs of the same hook are set: an MLP receiver's output is
    # what it computes from the frozen residual, not its frozen value
    hooks = [(name, keep(name)) for name in wanted]
    hooks += output_hooks(resolved, base, per_copy, batch)
    if stop_at is not None:
        hooks.append((stop_at, stop))
    stacked = tokens.repeat(len(per_copy), 1)
    try:
        with torch.no_grad(), model.hooks(fwd_hooks=hooks):
            store["logits"] = model(stacked)
    except _Captured:
        pass
    missing = [n for n in wanted if n not in store]
    if missing:
        raise InvalidSelectionError(f"the hooks {missing} did not fire on this model")
    return store


def _patched_run(resolved: Resolved, tokens: Tensor, corr: Mapping[str, Tensor],
                 cells: Sequence[PathCell], frozen: Mapping[str, Tensor]) -> Tensor:
    """The patch pass for ``cells`` (copy ``c`` = cell ``c``): logits ``[copies·batch, pos,
    vocab]``."""
    model = resolved.model
    specs = resolved.specs
    shape = graph_shape(model)
    batch = tokens.shape[0]
    n = len(cells)
    last_post = f"blocks.{shape.n_layers - 1}.hook_resid_post"
    heads: dict[int, dict[tuple[int, int], dict[str, Tensor | slice]]] = {}
    mlps: dict[int, list[int]] = {}
    logits_copies: list[int] = []
    for c, cell in enumerate(cells):
        for r in cell.receivers:
            node = r.node
            if node.kind == "head":
                spec = specs[node.layer]
                heads.setdefault(node.layer, {}).setdefault((c, node.head), {})[r.channel] = \
                    _dims(spec, r.freqs)
            elif node.kind == "mlp":
                mlps.setdefault(node.layer, []).append(c)
            else:
                logits_copies.append(c)

    hooks: list = []
    for layer, members in heads.items():
        spec = specs[layer]
        store: dict[str, Tensor] = {}

        def keep(channel, spec=spec, store=store):
            def hook(act: Tensor, hook: Any = None) -> Tensor:
                store[channel] = _view(act, spec, channel)
                return act
            return hook

        def replace_z(z: Tensor, hook: Any = None, spec=spec, store=store, members=members):
            q, k, v = store.pop("q"), store.pop("k"), store.pop("v")
            out = z.clone()
            rows_q, rows_k, rows_v, base_k, base_v, where = [], [], [], [], [], []
            for (c, h), channels in members.items():
                sl = slice(c * batch, (c + 1) * batch)
                kv = spec.kv_head(h)
                parts = {"q": q[sl, :, h], "k": k[sl, :, kv], "v": v[sl, :, kv]}
                base_k.append(parts["k"])
                base_v.append(parts["v"])
                rows_q.append(parts["q"])
                new = dict(parts)
                for channel, dims in channels.items():
                    src = _view(frozen[_input_name(spec, channel)], spec, channel)
                    idx = h if channel == "q" else kv
                    row = new[channel].clone()
                    row[..., dims] = src[sl, :, idx][..., dims].to(row.dtype)
                    new[channel] = row
                rows_k.append(new["k"])
                rows_v.append(new["v"])
                rows_q[-1] = new["q"]
                where.append((sl, h, parts["q"]))
            qs = torch.stack(rows_q + [w[2] for w in where], 2)
            ks = torch.stack(rows_k + base_k, 2)
            vs = torch.stack(rows_v + base_v, 2)
            # every cell's head in one call: [batch, pos, 2·cells, d_head] (each copy's head
            # is one more head); the second half, unedited, must reproduce the model's rows
            m = len(where)
            z_new = engine.attend(spec, qs, ks, vs)
            z_all = [z_new[:, :, i] for i in range(2 * m)]
            for i, (sl, h, _) in enumerate(where):
                check = z_all[m + i]
                model_rows = z[sl, :, h]
                err = float((check.double() - model_rows.double()).abs().max())
                tol = model_tolerance(z.dtype) * max(1.0, float(model_rows.abs().max()))
                if not err <= tol:
                    raise DecompositionMismatchError(
                        f"layer {spec.layer}: recomputing head {h} from its q, k, v differs "
                        f"from the model's hook_z by {err:.3g} (tolerance {tol:.3g}); another "
                        f"hook may edit q/k/v, or this attention variant is not supported "
                        f"({spec.describe()})")
                out[sl, :, h] = z_all[i].to(z.dtype)
            return out

        hooks += [(spec.q_hook, keep("q")), (spec.k_hook, keep("k")),
                  (engine.v_hook_name(spec), keep("v")), (engine.z_hook_name(spec), replace_z)]
    for layer, copies in mlps.items():
        name = f"blocks.{layer}.hook_mlp_out"

        def set_mlp(act: Tensor, hook: Any = None, name=name, copies=copies) -> Tensor:
            out = act.clone()
            for c in copies:
                sl = slice(c * batch, (c + 1) * batch)
                out[sl] = frozen[name][sl].to(act.dtype)
            return out
        hooks.append((name, set_mlp))
    if logits_copies:
        def add_direct(act: Tensor, hook: Any = None) -> Tensor:
            out = act.clone()
            base = corr[last_post].to(act.dtype)
            for c in logits_copies:
                sl = slice(c * batch, (c + 1) * batch)
                out[sl] = out[sl] + (frozen[last_post][sl].to(act.dtype) - base)
            return out
        hooks.append((last_post, add_direct))
    with torch.no_grad(), model.hooks(fwd_hooks=hooks):
        return model(tokens.repeat(n, 1))


def _stop_hook(resolved: Resolved, cells: Sequence[PathCell]) -> str | None:
    """Where the freeze pass may end: the ``hook_z`` of the last layer whose inputs it reads
    (a head's q/k/v fire before its layer's ``hook_z``; an MLP's output before the next
    layer's); ``None`` (run it all) when a cell reads the logits or the last MLP."""
    n_layers = graph_shape(resolved.model).n_layers
    last = 0
    for cell in cells:
        for r in cell.receivers:
            if r.node.kind == "logits":
                return None
            last = max(last, r.node.layer + (1 if r.node.kind == "mlp" else 0))
    return None if last >= n_layers else engine.z_hook_name(resolved.specs[last])


def _wanted(resolved: Resolved, cells: Sequence[PathCell]) -> list[str]:
    specs = resolved.specs
    shape = graph_shape(resolved.model)
    names = []
    for cell in cells:
        for r in cell.receivers:
            if r.node.kind == "head":
                names.append(_input_name(specs[r.node.layer], r.channel))
            elif r.node.kind == "mlp":
                names.append(f"blocks.{r.node.layer}.hook_mlp_out")
            else:
                names.append(f"blocks.{shape.n_layers - 1}.hook_resid_post")
    return names


# ---- the result ----------------------------------------------------------------------------


@dataclass(repr=False)
class PathPatching(ResultIO):
    """Path-patching values: ``values[cell, prompt]`` (the metric per prompt) for the cells
    named ``cells``; ``uncertainty`` their means, standard errors and bootstrap intervals
    over prompts; ``seconds`` the time taken, ``n_passes`` the forward passes."""

    cells: list[str]
    values: Tensor
    seconds: float = 0.0
    n_passes: int = 0

    FORMAT = "lens-possym/path-patching@1"

    @property
    def uncertainty(self) -> Uncertainty:
        return uncertainty(self.values, -1, allow_nan=True)

    @property
    def mean(self) -> Tensor:
        """``[n_cells]`` the metric averaged over prompts."""
        return self.values.mean(-1)

    def to_dict(self) -> dict[str, Any]:
        return {"cells": list(self.cells), "values": self.values, "seconds": self.seconds,
                "n_passes": self.n_passes}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "PathPatching":
        values = data["values"]
        return cls(cells=list(data["cells"]),
                   values=values if isinstance(values, Tensor) else torch.tensor(values),
                   seconds=float(data["seconds"]), n_passes=int(data["n_passes"]))

    def summary(self) -> dict[str, Any]:
        mean = self.mean
        top = int(mean.abs().argmax()) if mean.numel() else None
        return {"n_cells": len(self.cells), "n_prompts": int(self.values.shape[-1]),
                "strongest": None if top is None else self.cells[top],
                "strongest_value": None if top is None else float(mean[top]),
                "seconds": self.seconds, "n_passes": self.n_passes}

    def _table(self):
        import pandas as pd

        u = self.uncertainty
        return pd.DataFrame({"cell": self.cells, "value": u.mean.double().numpy(),
                             "se": u.se.double().numpy(), "ci_low": u.low.double().numpy(),
                             "ci_high": u.high.double().numpy()})

    def _headline(self) -> list[str]:
        s = self.summary()
        return [f"cells={s['n_cells']}", f"prompts={s['n_prompts']}",
                f"strongest={s['strongest']}"]


def _cells(cells: Any) -> list[PathCell]:
    out = []
    for cell in cells:
        if isinstance(cell, PathCell):
            out.append(cell)
        elif isinstance(cell, Edge):
            out.append(PathCell.edge(cell))
        elif isinstance(cell, str):
            out.append(PathCell.edge(Edge.parse(cell)))
        else:
            raise InvalidSelectionError(
                f"path-patching cell {cell!r}: a PathCell, an Edge or an edge name "
                f"('L0H1->L1H2.k')")
    if not out:
        raise InvalidSelectionError("no path-patching cells given")
    return out


def path_patch(model: HookedModel | Resolved, clean_tokens: Any, corrupted_tokens: Any,
               metric: Callable[[Tensor], Tensor], cells: Iterable[PathCell | Edge | str], *,
               patches_per_pass: int = 16,
               caches: tuple[Mapping[str, Tensor], Mapping[str, Tensor]] | None = None
               ) -> PathPatching:
    """Path-patch each cell (module docstring): ``cells`` are :class:`PathCell` s, edges
    (one sender into one receiver channel) or edge names.

    Args:
        clean_tokens, corrupted_tokens: ``[batch, pos]`` (or prompts) of equal shape.
        metric: ``logits [batch, pos, vocab] -> [batch]`` one value per prompt.
        patches_per_pass: cells per forward pass (each pass runs ``batch · cells`` rows;
            two passes per chunk of cells: freeze, then patch).
        caches: ``(clean, corrupted)`` caches holding :data:`OUTPUT_ACTS` and the last
            ``hook_resid_post``, if you have them (else two passes make them).

    Returns:
        :class:`PathPatching` with ``values [n_cells, batch]``.
    """
    check_patches_per_pass(patches_per_pass)
    resolved = resolve(model)
    model = resolved.model
    cell_list = _cells(cells)
    clean, corr = as_token_pair(model, clean_tokens, corrupted_tokens,
                                ("clean tokens", "corrupted"), "path patching")
    start = time.perf_counter()
    clean_cache, corr_cache = caches if caches is not None else run_caches(resolved, clean, corr)
    n_passes = 0 if caches is not None else 2
    batch = corr.shape[0]
    rows: list[Tensor] = []
    for lo in range(0, len(cell_list), patches_per_pass):
        chunk = cell_list[lo:lo + patches_per_pass]
        per_copy = [node_outputs(resolved, clean_cache, cell.senders) for cell in chunk]
        frozen = frozen_inputs(resolved, corr, corr_cache, per_copy, _wanted(resolved, chunk),
                               stop_at=_stop_hook(resolved, chunk))
        logits = _patched_run(resolved, corr, corr_cache, chunk, frozen)
        n_passes += 2
        rows += [_per_prompt(metric(logits[i * batch:(i + 1) * batch]), batch)
                 for i in range(len(chunk))]
    return PathPatching(cells=[c.name for c in cell_list], values=torch.stack(rows),
                        seconds=time.perf_counter() - start, n_passes=n_passes)


def run_caches(resolved: Resolved, clean: Tensor, corr: Tensor
               ) -> tuple[dict[str, Tensor], dict[str, Tensor]]:
    """The clean and corrupted caches path patching reads: every node's output and the
    last ``hook_resid_post``."""
    shape = graph_shape(resolved.model)
    names = _output_names(resolved, shape) + [f"blocks.{shape.n_layers - 1}.hook_resid_post"]
    out = []
    for tokens in (clean, corr):
        with torch.no_grad():
            _, cache = resolved.model.run_with_cache(tokens, names_filter=names,
                                                     return_type=None)
        out.append({n: cache[n] for n in names})
    return out[0], out[1]


def _per_prompt(value: Any, batch: int) -> Tensor:
    """The metric's ``[batch]`` values on the CPU, float32 (float64 kept: a float64 model's
    path patching is checked to 1e-10)."""
    value = torch.as_tensor(value).detach().cpu()
    value = value if value.dtype == torch.float64 else value.float()
    if value.shape != (batch,):
        raise InvalidSelectionError(
            f"the metric returned shape {tuple(value.shape)}; it must give one value per "
            f"prompt ([{batch}])")
    return value


def band_freqs(spec: RopeSpec, freqs: FreqsLike) -> tuple[int, ...]:
    """Frequency ids of ``freqs`` on ``spec``'s layer (ids, ranges, band names)."""
    return parse_freqs(freqs, spec)
