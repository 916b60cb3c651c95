"""Path patching equals a brute-force freeze-and-recompute on every tiny family, and
patching every reader of a last-layer head equals patching the head's output."""

from __future__ import annotations

import contextlib

import pytest
import torch

import lens_possym as lp
from lens_possym.circuits import Edge, Node, PathCell, Receiver, graph_edges, path_patch
from lens_possym.errors import InvalidSelectionError
from lens_possym.resolved import resolve

pytestmark = pytest.mark.usefixtures("one_torch_thread")

TOL = 1e-6     # float32 rounding
TOL64 = 1e-10  # float64 throughout


def _tokens(model, seed, batch=3, pos=7):
    g = torch.Generator().manual_seed(seed)
    toks = torch.randint(1, model.cfg.d_vocab, (batch, pos), generator=g)
    return toks


def _metric(logits):
    return logits[:, -1, 3] - logits[:, -1, 5]


def _brute(model, clean, corr, cell, cc, rc):
    """Freeze every node at its corrupted output, senders at their clean; read the
    receiver's input; recompute the receiver with the model's own attention (the whole KV
    group patched, then only the receiver head's hook_z kept); run again with it."""
    specs = resolve(model).specs
    n_layers = model.cfg.n_layers

    def freeze(act, hook, name):
        if name.endswith("hook_z"):
            layer = int(name.split(".")[1])
            out = rc[name].clone()
            for s in cell.senders:
                if s.kind == "head" and s.layer == layer:
                    out[:, :, s.head] = cc[name][:, :, s.head]
            return out
        if name.endswith("hook_mlp_out"):
            layer = int(name.split(".")[1])
            src = cc if Node("mlp", layer) in cell.senders else rc
            return src[name].clone()
        src = cc if Node("embed") in cell.senders else rc
        return src[name].clone()

    frozen = {}
    def keep(act, hook, name):
        frozen[name] = act.clone()

    def named(fn, name):  # bridges call hooks under aliases: bind the name we asked for
        return lambda act, hook: fn(act, hook, name)

    names = ["blocks.0.hook_resid_pre"] + [f"blocks.{l}.{n}" for l in range(n_layers)
                                           for n in ("attn.hook_z", "hook_mlp_out")]
    (r,) = cell.receivers
    node = r.node
    with torch.no_grad():
        if node.kind == "logits":
            logits = model.run_with_hooks(corr, fwd_hooks=[(n, named(freeze, n)) for n in names])
            return _metric(logits)
        spec = specs[node.layer]
        if node.kind == "mlp":
            want = f"blocks.{node.layer}.hook_mlp_out"
        else:
            want = {"q": spec.q_hook, "k": spec.k_hook, "v": f"blocks.{node.layer}.attn.hook_v"}[r.channel]
        model.run_with_hooks(corr, fwd_hooks=[(want, named(keep, want))] + [(n, named(freeze, n)) for n in names])
        src = frozen[want]
        if node.kind == "mlp":
            new_out = src
            target = want
            def put(act, hook):
                return new_out
        else:
            idx = node.head if r.channel == "q" else spec.kv_head(node.head)
            dims = (list(range(spec.d_head)) if r.freqs is None
                    else sorted(d for f in r.freqs for d in spec.dims_of(f)))
            def patch_in(act, hook):
                out = act.clone()
                view = lp.rope.heads_view(out, spec) if r.channel != "v" else out
                sview = lp.rope.heads_view(src, spec) if r.channel != "v" else src
                view[:, :, idx, dims] = sview[:, :, idx, dims]
                return out
            zname = f"blocks.{node.layer}.attn.hook_z"
            got = {}
            def keep_z(act, hook):
                got["z"] = act.clone()
            model.run_with_hooks(corr, fwd_hooks=[(want, patch_in), (zname, keep_z)])
            target = zname
            def put(act, hook):
                out = act.clone()
                out[:, :, node.head] = got["z"][:, :, node.head]
                return out
        logits = model.run_with_hooks(corr, fwd_hooks=[(target, put)])
        return _metric(logits)


@contextlib.contextmanager
def _float64_attention():
    """HF's eager attention computes the pattern as ``softmax(..., dtype=torch.float32)``
    even in a float64 model (llama, qwen2, gemma3, neox), a float32 rounding of ~1e-7 our
    recomputation (in the model's dtype) does not share: inside this, a float64 softmax
    stays float64, so both sides compute in float64 throughout."""
    original = torch.nn.functional.softmax

    def softmax(x, dim=None, _stacklevel=3, dtype=None):
        if dtype is not None and x.dtype == torch.float64:
            dtype = torch.float64
        return original(x, dim=dim, _stacklevel=_stacklevel, dtype=dtype)
    torch.nn.functional.softmax = softmax
    try:
        yield
    finally:
        torch.nn.functional.softmax = original


@pytest.fixture(scope="module", params=lp.models.TINY_FAMILIES)
def tiny64(request):
    """Each tiny RoPE family in float64."""
    return lp.tiny_model(request.param, dtype=torch.float64)


def _one_edge_per_kind(edges):
    """One edge of each (sender kind and layer, receiver kind and layer, channel), the
    head indices rotating over the groups so every head index appears on both sides."""
    groups = {}
    for e in edges:
        key = (e.sender.kind, e.sender.layer, e.receiver.kind, e.receiver.layer, e.channel)
        groups.setdefault(key, []).append(e)
    return [group[i % len(group)] for i, group in enumerate(groups.values())]


def test_path_patching_equals_brute_force(tiny64):
    """float64 models, both sides in float64 (:func:`_float64_attention`): agreement to
    1e-10 of the metric's scale (measured: ~1e-15; in float32 the two differ by ~1e-6, the
    rounding of the model's float32 pattern). GPT-J's attention casts its query and key to
    float32 itself (``GPTJAttention._attn``), so there the floor stays float32's: 1e-6."""
    model = tiny64
    clean, corr = _tokens(model, 0), _tokens(model, 1)
    spec = resolve(model).specs[1]
    edges = graph_edges(model)
    if model.cfg.n_layers > 2:  # gemma3's three layers: the edges into the last two layers
        edges = [e for e in edges if e.receiver.layer != 1 or e.receiver.kind == "mlp"]
    cells = [PathCell.edge(e) for e in _one_edge_per_kind(edges)]
    # frequency bands into layer-1 queries and keys: the fastest pair alone, the rest
    n = spec.n_freqs
    for ch in ("q", "k"):
        for freqs in ((0,), tuple(range(1, n))):
            cells.append(PathCell((Node("head", 0, 1),), (Receiver(Node("head", 1, 2), ch, freqs),)))
    # two senders at once
    cells.append(PathCell((Node("head", 0, 0), Node("mlp", 0)), (Receiver(Node("head", 1, 3), "k"),)))
    with _float64_attention():
        result = path_patch(model, clean, corr, _metric, cells, patches_per_pass=7)
        assert result.values.shape == (len(cells), 3) and result.values.dtype == torch.float64
        worst, scale = 0.0, 1.0
        _, cc = model.run_with_cache(clean)
        _, rc = model.run_with_cache(corr)
        for i, cell in enumerate(cells):
            expected = _brute(model, clean, corr, cell, cc, rc)
            worst = max(worst, float((result.values[i] - expected).abs().max()))
            scale = max(scale, float(expected.abs().max()))
    tol = TOL if model.cfg.architecture == "GPTJForCausalLM" else TOL64
    assert worst <= tol * scale, (worst, scale)
    # not trivially zero: some edges move the metric
    assert float(result.values.std()) > 1e-3


def test_every_reader_of_a_last_layer_head_equals_patching_its_output(tiny64):
    model = tiny64
    clean, corr = _tokens(model, 2), _tokens(model, 3)
    last = model.cfg.n_layers - 1
    head = Node("head", last, 1)
    readers = tuple(Receiver(e.receiver, e.channel) for e in graph_edges(model)
                    if e.sender == head)
    # a sequential block's MLP reads its layer's heads; a parallel one's (neox, gptj) not
    kinds = {"logits"} if model.cfg.parallel_attn_mlp else {"mlp", "logits"}
    assert {r.node.kind for r in readers} == kinds
    got = path_patch(model, clean, corr, _metric, [PathCell((head,), readers)])
    _, cc = model.run_with_cache(clean)
    zname = f"blocks.{last}.attn.hook_z"
    def patch(act, hook):
        out = act.clone()
        out[:, :, 1] = cc[zname][:, :, 1]
        return out
    with torch.no_grad():
        expected = _metric(model.run_with_hooks(corr, fwd_hooks=[(zname, patch)]))
    scale = max(1.0, float(expected.abs().max()))
    # no attention is recomputed (the readers are an MLP and the logits): float64 exact
    assert torch.allclose(got.values[0], expected, atol=TOL64 * scale, rtol=0)
    # an earlier head's readers feed one another: the identity does not hold there
    early = Node("head", 0, 1)
    readers = tuple(Receiver(e.receiver, e.channel) for e in graph_edges(model)
                    if e.sender == early)
    got_early = path_patch(model, clean, corr, _metric, [PathCell((early,), readers)])
    assert got_early.values.shape == (1, 3)


def test_bad_cells_refused(tiny_by_family):
    model = tiny_by_family["llama"]
    toks = _tokens(model, 0)
    with pytest.raises(InvalidSelectionError):
        PathCell((Node("head", 1, 0),), (Receiver(Node("head", 0, 1), "q"),))
    with pytest.raises(InvalidSelectionError):
        Receiver(Node("mlp", 0), "in", (0,))
    with pytest.raises(InvalidSelectionError, match=r"clean tokens \(\d+, \d+\) and corrupted "
                       r"\(\d+, \d+\) differ in shape; path patching pairs prompts"):
        path_patch(model, toks, toks[:, :-1], _metric, ["L0H0->L1H0.q"])
    with pytest.raises(InvalidSelectionError):
        path_patch(model, toks, toks, _metric, [])
    with pytest.raises(InvalidSelectionError):
        path_patch(model, toks, toks, lambda l: l[:, -1], ["L0H0->L1H0.q"])
