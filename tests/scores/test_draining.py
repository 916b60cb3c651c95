"""Heads whose swaps drain the attention: exact = re-run = paper C's own scoring code.

A swap *drains* when, after it, neither swapped position holds attention any more (it moved
to a third position). Paper C scores its cosines with ``F.cosine_similarity``, whose norm
clamp at 1e-8 makes such a swap about (0, 0); a scale-free cosine would score the direction
of the leftover mass instead. The heads here are tiny GPT-J heads made near-one-hot (every
other key below ~1e-3..1e-12) or one-hot (below 1e-40) by scaling the rotary part of W_Q
and removing its content-only (NoPE) part, so the attended key is picked by content *and*
position together and a swap of it usually sends the mass elsewhere.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

import lens_possym as lp
from lens_possym.capture import (capture_attention_inputs, capture_with_layer_input,
                                 capture_with_rows)
from lens_possym.decompose import decompose_inputs
from lens_possym.errors import InvalidSelectionError
from lens_possym.resolved import resolve
from lens_possym.scores import cross_logit_factors, exact_swap_scores, swap_scores, swap_set
from lens_possym.scores.exact import OutsideMass
from lens_possym.scores.swaps import clamped_cosines

PROMPT = "Alice likes red . Bob likes blue . Carol likes green . What color does"
AMPLITUDES = {"near-one-hot": 100.0, "one-hot": 1000.0}
#: exact against the re-run and paper C: float64 leaves the model's own rounding (HF's
#: float32 rotation tables); float32 attention moves the weights at tau = 1e-4 by
#: ~6e-8 / 1e-4 in their logits, which a near tie turns into ~1e-4 of score.
TOL = {torch.float64: 1e-5, torch.float32: 1e-3}


def paper_c_scores(attn_weights_sample, swaps, taus=None):
    """Paper C's ``lib/metrics.py`` scoring, transcribed line for line.

    Source: jcalataiut-cli/CENIA @ 53de17a, ``Position_symbolic_dynamics/code/src/lib/
    metrics.py`` (the lines quoted in /work/shared/reference/companion_code.md, section 2);
    only the list-to-tensor stacking of the similarities, implied by its final sums, is
    written out. ``attn_weights_sample``: ``[n_layers, 1 + n_swaps, n_heads, seq, seq]``
    (permutation 0 the clean run, as ``cmds/get_attention_weights.py`` saves it); ``swaps``:
    list of ``(i, j)``. Returns ``[n_taus, n_layers, n_heads, 2]`` (pos, sym).
    """
    if taus is None:
        taus = [1e-4]
    taus_t = torch.tensor(taus, dtype=attn_weights_sample.dtype)
    swaps_t = torch.tensor(swaps)
    base = attn_weights_sample[:, 0, :, -1]
    deltas = abs(base[..., swaps_t[:, 0]] - base[..., swaps_t[:, 1]])
    weights = F.softmax(deltas / taus_t[..., None, None, None], dim=-1)
    pos_sims, sym_sims = [], []
    for idx_perm, (iii, jjj) in enumerate(swaps, start=1):
        current_perm = attn_weights_sample[:, idx_perm, :, -1]
        vij = base[..., [iii, jjj]]
        vij_perm = current_perm[..., [iii, jjj]]
        pos_sims.append(F.cosine_similarity(vij_perm, vij, dim=-1))
        sym_sims.append(F.cosine_similarity(vij_perm, torch.flip(vij, dims=[-1]), dim=-1))
    pos_scores = (weights * torch.stack(pos_sims, -1)).sum(axis=-1)
    sym_scores = (weights * torch.stack(sym_sims, -1)).sum(axis=-1)
    return torch.stack([pos_scores, sym_scores], -1)


def _swaps(n_keys: int) -> list[tuple[int, int]]:
    """Paper C's ``generate_swaps(n)``: all pairs of ``[0, n)``."""
    return [(i, j) for i in range(n_keys) for j in range(i + 1, n_keys)]


def _permutations(swaps, seq: int) -> torch.Tensor:
    """Paper C's ``build_permutations``: row order of each run, the identity first."""
    perms = [torch.arange(seq)]
    for i, j in swaps:
        perm = torch.arange(seq)
        perm[i], perm[j] = j, i
        perms.append(perm)
    return torch.stack(perms)


def paper_c_attention(model, tokens, swaps) -> torch.Tensor:
    """``attn_weights_sample`` as paper C's ``get_attention_weights.py`` makes it, with the
    Hugging Face model's own attention: per layer, the block input of the clean pass
    (``hidden_states[l]``) with its rows permuted, positions unchanged."""
    hf = model.original_model
    with torch.no_grad():
        hidden = hf(tokens, output_hidden_states=True).hidden_states
    perms = _permutations(swaps, tokens.shape[1])
    layers = []
    for layer, block in enumerate(hf.transformer.h):
        permuted = hidden[layer][0][perms]                          # [1 + n_swaps, seq, d]

        def swap_rows(module, args, kwargs):
            if args:
                return (permuted, *args[1:]), kwargs
            return args, {**kwargs, "hidden_states": permuted}

        handle = block.register_forward_pre_hook(swap_rows, with_kwargs=True)
        try:
            with torch.no_grad():
                out = hf(tokens.expand(len(perms), -1), output_attentions=True)
        finally:
            handle.remove()
        layers.append(out.attentions[layer])
    return torch.stack(layers)                                      # [L, perms, H, seq, seq]


def draining_gptj(dtype: torch.dtype, amplitude: float):
    model = lp.tiny_model("gptj", dtype=dtype)
    with torch.no_grad():
        for block in model.original_model.transformer.h:
            w_q = block.attn.q_proj.weight.view(4, 16, -1)         # [head, d_head, d_model]
            w_q[:, :8] *= amplitude                                 # rotary dims (rotary_dim 8)
            w_q[:, 8:] = 0                                          # no content-only tail
    return model


@pytest.fixture(scope="module", params=[torch.float64, torch.float32], ids=["fp64", "fp32"])
def dtype(request):
    return request.param


@pytest.fixture(scope="module", params=list(AMPLITUDES), ids=list(AMPLITUDES))
def drained(request, dtype):
    model = draining_gptj(dtype, AMPLITUDES[request.param])
    tokens = model.to_tokens(PROMPT)
    swaps = _swaps(tokens.shape[1] - 1)
    return model, tokens, swaps, paper_c_attention(model, tokens, swaps)


def _diff(a, b) -> float:
    return float((a - b).abs().max())


def test_the_heads_drain(drained):
    """The fixture is what it claims: a swap carrying weight leaves both positions < 1e-8,
    and the scale-free cosine would score these heads very differently."""
    model, tokens, swaps, attention = drained
    base = attention[:, 0, :, -1].double()                          # [L, H, seq]
    pairs = torch.tensor(swaps)
    weights = torch.softmax((base[..., pairs[:, 0]] - base[..., pairs[:, 1]]).abs() / 1e-4, -1)
    after = attention[:, 1:, :, -1].double()                        # [L, swaps, H, seq]
    norms = torch.stack([after[:, s][..., [i, j]].norm(dim=-1) for s, (i, j) in enumerate(swaps)], -1)
    assert ((norms < 1e-8) & (weights > 0.01)).any()
    kwargs = dict(exclude_bos=False, per_frequency=False, exclusion=False)
    clamped = swap_scores(model, tokens, **kwargs)
    free = swap_scores(model, tokens, cosine="scale_free", **kwargs)
    assert max(_diff(clamped.pos, free.pos), _diff(clamped.sym, free.sym)) > 0.3


def test_exact_equals_rerun_equals_paper_c(drained, dtype):
    model, tokens, swaps, attention = drained
    reference = paper_c_scores(attention, swaps)[0].double()        # [L, H, 2]
    kwargs = dict(exclude_bos=False, per_frequency=False, exclusion=False)
    exact = swap_scores(model, tokens, **kwargs)
    rerun = swap_scores(model, tokens, method="rerun", **kwargs)
    for name, index in (("pos", 0), ("sym", 1)):
        e, r = getattr(exact, name), getattr(rerun, name)
        assert _diff(e, r) <= TOL[dtype], name
        assert _diff(e, reference[..., index]) <= TOL[dtype], name
        assert _diff(r, reference[..., index]) <= TOL[dtype], name


def _paper_c_freq_attention(model, tokens, swaps, layer):
    """Per-frequency attention of every re-run, ``[1, 1 + n_swaps, heads x freqs, seq, seq]``
    (the frequencies as extra heads), for :func:`paper_c_scores`."""
    resolved = resolve(model)
    _, residual = capture_with_layer_input(resolved, tokens, layer, tokens.shape[1] - 1)
    runs = capture_with_rows(resolved, tokens, layer, tokens.shape[1] - 1, residual,
                             _permutations(swaps, tokens.shape[1]))
    fl = decompose_inputs(runs, list(range(runs.spec.n_heads)), dtype=torch.float64)
    terms = fl.terms.masked_fill(~fl.mask[..., None], float("-inf"))  # [runs, h, 1, p, f]
    attention = torch.softmax(terms, dim=-2).movedim(-1, 2)          # [runs, h, f, 1, p]
    return attention.flatten(1, 2)[None]


def test_per_frequency_exact_equals_rerun_equals_paper_c(drained, dtype):
    model, tokens, swaps, _ = drained
    kwargs = dict(exclude_bos=False, exclusion=False)
    exact = swap_scores(model, tokens, **kwargs)
    tensor_code = swap_scores(model, tokens, max_elements=50_000, **kwargs)  # no kernel: blocks
    rerun = swap_scores(model, tokens, method="rerun", **kwargs)
    for layer in exact.layers:
        reference = paper_c_scores(_paper_c_freq_attention(model, tokens, swaps, layer), swaps)
        reference = reference[0, 0].view(*exact.pos_freq.shape[1:], 2)
        for name, index in (("pos_freq", 0), ("sym_freq", 1)):
            e, r = getattr(exact, name)[layer], getattr(rerun, name)[layer]
            assert _diff(e, r) <= TOL[dtype], (layer, name)
            assert _diff(e, reference[..., index]) <= TOL[dtype], (layer, name)
            assert _diff(e, getattr(tensor_code, name)[layer]) <= 1e-12
    assert not torch.allclose(exact.pos_freq, swap_scores(model, tokens, cosine="scale_free",
                                                          **kwargs).pos_freq, atol=0.1)


def test_kernel_equals_tensor_code_on_draining_heads(drained):
    model, tokens, _, _ = drained
    for layer in (0, 1):
        inputs = capture_attention_inputs(model, tokens, layer)[layer]
        factors = cross_logit_factors(inputs, [0, 1, 2, 3])
        swaps = swap_set("token", factors.query_position, factors.visible)
        fast = exact_swap_scores(factors, swaps, kernel=True)
        slow = exact_swap_scores(factors, swaps, kernel=False, max_elements=5000)
        assert _diff(fast.pos_freq, slow.pos_freq) <= 1e-12
        assert _diff(fast.sym_freq, slow.sym_freq) <= 1e-12
        # the whole-head scores by the loop (its matrix variant), with rows where the
        # normaliser's pair loop runs: the clamp within reach, lam1 + max|C| + 1 above
        # log((1/eps - 2) / n)
        assert _diff(fast.pos, slow.pos) <= 1e-12 and _diff(fast.sym, slow.sym) <= 1e-12
        logits, keys = factors.head_diagonal(), swaps.keys
        reach = factors.head_full()[:, :, keys][..., keys].abs().amax((-1, -2))
        within = logits.amax(-1) + reach + 1 > math.log((1e8 - 2) / logits.shape[-1])
        assert within.any(), layer
    with pytest.raises(ValueError, match="scale_free"):
        exact_swap_scores(factors, swaps, cosine="scale_free", kernel=True)


@pytest.mark.parametrize("swap", ["token", "block"])
def test_scale_free_exact_equals_scale_free_rerun(drained, dtype, swap):
    """The scale-free variant is the same number both ways (the re-run reads its logits)."""
    model, tokens, _, _ = drained
    kwargs = dict(swap=swap, n_blocks=5, exclude_bos=False, exclusion=False, cosine="scale_free")
    exact = swap_scores(model, tokens, **kwargs)
    rerun = swap_scores(model, tokens, method="rerun", **kwargs)
    for name in ("pos", "sym", "pos_freq", "sym_freq"):
        assert _diff(getattr(exact, name), getattr(rerun, name)) <= TOL[dtype], name


def test_block_swaps_on_draining_heads(drained, dtype):
    model, tokens, _, _ = drained
    kwargs = dict(swap="block", n_blocks=5, exclude_bos=False, exclusion=False)
    exact = swap_scores(model, tokens, **kwargs)
    small = swap_scores(model, tokens, max_elements=40, **kwargs)
    rerun = swap_scores(model, tokens, method="rerun", **kwargs)
    for name in ("pos", "sym", "pos_freq", "sym_freq"):
        assert _diff(getattr(exact, name), getattr(rerun, name)) <= TOL[dtype], name
        assert _diff(getattr(exact, name), getattr(small, name)) <= 1e-13, name


def test_the_variants_agree_where_nothing_drains():
    model = lp.tiny_model("llama", dtype=torch.float64)
    clamped = swap_scores(model, PROMPT, tau=1e-2)
    free = swap_scores(model, PROMPT, tau=1e-2, cosine="scale_free")
    for name in ("pos", "sym", "pos_freq", "sym_freq"):
        assert _diff(getattr(clamped, name), getattr(free, name)) <= 1e-12, name
    assert clamped.config.cosine == "clamped"


def test_an_unknown_cosine_is_refused():
    model = lp.tiny_model("llama")
    with pytest.raises(InvalidSelectionError, match="scale_free"):
        swap_scores(model, PROMPT, cosine="unclamped")


@settings(max_examples=200, deadline=None)
@given(logits=st.lists(st.one_of(st.floats(-800, 800), st.just(float("-inf"))),
                       min_size=3, max_size=12).filter(lambda v: max(v) > float("-inf")),
       spread=st.sampled_from([1.0, 1e-3, 1e3]))
def test_outside_mass_is_accurate_however_small(logits, spread):
    """log of the mass outside each pair equals the sum of the other terms, computed
    directly (positive terms only), to a few ulps relative: also when the pair holds the
    two largest terms and the rest is 1e-300 of the total."""
    lam = torch.tensor(logits, dtype=torch.float64) * spread
    n = len(logits)
    outside = OutsideMass(lam[None])
    i, j = torch.triu_indices(n, n, offset=1)
    got = outside.log_outside(i[:, None], j[:, None])[0]
    for s in range(len(i)):
        others = [p for p in range(n) if p not in (int(i[s]), int(j[s]))]
        want = torch.logsumexp(lam[others], 0)
        if want == float("-inf"):
            assert got[s] == float("-inf") or got[s] < float(lam.max()) - 700
        else:
            assert math.isclose(float(got[s]), float(want), rel_tol=1e-13, abs_tol=1e-12)


def test_outside_mass_of_blocks():
    lam = torch.tensor([[30.0, 0.0, -5.0, 29.0, -700.0, 2.0]], dtype=torch.float64)
    outside = OutsideMass(lam)
    got = outside.log_outside(torch.tensor([[0, 3]]), torch.tensor([[1, 5]]))[0, 0]
    assert math.isclose(float(got), float(torch.logsumexp(lam[0, [2, 4]], 0)), rel_tol=1e-14)


@settings(max_examples=200, deadline=None)
@given(x=st.tuples(*[st.floats(0, 1) | st.floats(0, 1e-7) | st.just(0.0)] * 4),
       dtype=st.sampled_from([torch.float64, torch.float32]))
def test_clamped_cosines_are_torchs(x, dtype):
    """torch 2.x: x / max(|x|, eps) · y / max(|y|, eps), each norm clamped on its own; and
    what torch's own ``cosine_similarity`` gives, to rounding."""
    a1, a2, d1, d2 = (torch.tensor(v, dtype=dtype) for v in x)
    pos, sym = clamped_cosines(a1, a2, d1, d2)
    after, clean = torch.stack([a1, a2]), torch.stack([d1, d2])
    tol = 1e-12 if dtype == torch.float64 else 1e-6
    assert math.isclose(float(pos), float(F.cosine_similarity(after, clean, dim=0)), abs_tol=tol)
    assert math.isclose(float(sym), float(F.cosine_similarity(after, clean.flip(0), dim=0)),
                        abs_tol=tol)
    na, nd = max(math.hypot(x[0], x[1]), 1e-8), max(math.hypot(x[2], x[3]), 1e-8)
    assert math.isclose(float(pos), (x[0] * x[2] + x[1] * x[3]) / (na * nd), abs_tol=10 * tol)
    assert math.isclose(float(sym), (x[0] * x[3] + x[1] * x[2]) / (na * nd), abs_tol=10 * tol)
