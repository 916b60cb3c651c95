"""Hand-built circuits are recovered exactly, with their positional labels.

A two-hop copy path (an induction circuit) built on the core's one-hot toy model with the
construction helpers (:mod:`lens_possym.training.constructions`): layer 0 head 0 is a
hand-built **positional** previous-token head (RoPE pair 0 at θ = 0.5: query phase −θ,
key ``r`` on every symbol; its value copies the token into a *carry* coordinate), layer 1
head 0 a hand-built **symbolic** induction head (the θ = 0 pair 1: its query at token
``t`` has phase ``tω``, the key of a position carrying ``s`` has phase ``sω``, so it
attends where the previous token equals the current one; its value copies that
position's token to the answer read-out). Every other weight is 0 (heads L0H1, L1H1 are
not built). Each symbol has a *twin* token with the same value but no key, so a corrupted
prompt with a twin in front breaks the positional head's key alone.

The constructed edges that carry token information are exactly
``embed->L0H0.k``, ``embed->L0H0.v``, ``L0H0->L1H0.k``, ``embed->L1H0.q``,
``embed->L1H0.v`` and ``L1H0->logits``; the positional head's query
(``embed->L0H0.q``) is the same vector for every token, so no token corruption can move
it (it is built, but carries nothing a prompt pair can measure). The found circuit must
be exactly those six edges, the key edge into the positional head positional (share 1:
all of it through the θ = 0.5 pair) and the key edge into the symbolic head not (share 0).
"""

from __future__ import annotations

import cmath
import itertools
import math

import pytest
import torch

from lens_possym.circuits import (circuit_metric, find_circuit, graph_edges, path_edge_scores,
                                  positional_share, select_edges)
from lens_possym.training.constructions import radius_for, set_pair
from lens_possym.training.toy import ToyConfig, ToyTransformer

pytestmark = pytest.mark.usefixtures("one_torch_thread")

S = 4                      # symbols 0..S-1; twins S..2S-1; carry 2S..3S-1; answers 3S..4S-1
BOS = 4 * S                # a key for the first symbol's previous-token query, no value
THETA, OMEGA = 0.5, 2 * math.pi / S
EXPECTED = {"embed->L0H0.k", "embed->L0H0.v", "L0H0->L1H0.k", "embed->L1H0.q",
            "embed->L1H0.v", "L1H0->logits"}


def induction_model() -> ToyTransformer:
    cfg = ToyConfig(d_vocab=4 * S + 1, n_ctx=8, n_layers=2, n_heads=2, d_head=4 + S,
                    angles=(THETA, 0.0), seed=0)
    model = ToyTransformer(cfg)
    spec = model.lens_possym_rope_specs()[0]
    pair0, pair1 = spec.dims_of(0), spec.dims_of(1)
    values = list(range(4, 4 + S))          # the non-rotated tail carries values
    with torch.no_grad():
        for block in model.blocks:
            for name in ("W_Q", "W_K", "W_V", "W_O"):
                getattr(block.attn, name).zero_()
        model.W_U.zero_()
        model.set_frequencies([0], layer=0, head=0)
        model.set_frequencies([1], layer=1, head=0)
        # L0H0: previous-token head, positional (margin ~30 nats over 1 - cos θ)
        r0 = radius_for(model, 30.0 / (1 - math.cos(THETA)))
        a0 = model.blocks[0].attn
        for s in range(S):
            for tok in (s, S + s):
                set_pair(a0.W_Q[0], tok, pair0, r0 * cmath.exp(-1j * THETA))
                a0.W_V[0, tok, values[s]] = 1.0
            set_pair(a0.W_K[0], s, pair0, complex(r0, 0.0))     # twins: no key
            a0.W_O[0, values[s], 2 * S + s] = 1.0               # carry "previous was s"
        set_pair(a0.W_K[0], BOS, pair0, complex(r0, 0.0))
        # L1H0: induction head, symbolic (θ = 0 pair)
        r1 = radius_for(model, 30.0 / (1 - math.cos(OMEGA)))
        a1 = model.blocks[1].attn
        for s in range(S):
            set_pair(a1.W_Q[0], s, pair1, r1 * cmath.exp(1j * s * OMEGA))
            set_pair(a1.W_K[0], 2 * S + s, pair1, r1 * cmath.exp(1j * s * OMEGA))
            for tok in (s, S + s):
                a1.W_V[0, tok, values[s]] = 1.0
            a1.W_O[0, values[s], 3 * S + s] = 10.0
            model.W_U[3 * S + s, s] = 1.0
    return model


def prompts():
    """Clean ``<bos> a b c d a`` (answer ``b``); each corrupted prompt breaks one constructed
    edge's information: the first symbol replaced by its twin (same value, no key), ``a``
    and ``c`` swapped before the query, another last token, ``b`` and ``d`` swapped."""
    perms = list(itertools.permutations(range(S)))[::4]
    clean, corr, answers = [], [], []
    for i, p in enumerate(perms):
        clean.append([BOS] + list(p) + [p[0]])
        answers.append(p[1])
        a, b, c, d = p
        corr.append([[BOS, S + a, b, c, d, a],      # the positional head's key
                     [BOS, c, b, a, d, a],          # what it carries (its value)
                     [BOS, a, b, c, d, c],          # the induction head's query
                     [BOS, a, d, c, b, a]][i % 4])  # the induction head's value
    return torch.tensor(clean), torch.tensor(corr), torch.tensor(answers)


def test_the_hand_built_model_solves_its_prompts():
    model = induction_model()
    clean, corr, answers = prompts()
    with torch.no_grad():
        pred = model(clean)[:, -1, :S].argmax(-1)
        broken = model(corr)[:, -1, :S].argmax(-1)
    assert torch.equal(pred, answers)
    assert (broken != answers).any()


def test_the_constructed_circuit_is_recovered_exactly():
    model = induction_model()
    clean, corr, answers = prompts()

    def metric(logits):
        last = logits[:, -1, :S]
        return last.gather(1, answers[:, None])[:, 0] - last.mean(-1)

    scores = path_edge_scores(model, clean, corr, metric)
    assert len(scores.edges) == len(graph_edges(model))
    top = float(scores.scores.abs().max())
    found = {e.name for e in select_edges(scores, threshold=1e-3 * top)}
    assert found == EXPECTED
    # the key edge into the positional head goes through its rotating pair only; the key
    # edge into the symbolic head through its θ = 0 pair only
    assert positional_share(model, clean, corr, metric, "embed->L0H0.k", [0]) == \
        pytest.approx(1.0, abs=1e-4)
    assert positional_share(model, clean, corr, metric, "L0H0->L1H0.k", [0]) == \
        pytest.approx(0.0, abs=1e-4)
    # the circuit alone is the whole model
    with torch.no_grad():
        whole = metric(model(clean))
    alone = circuit_metric(model, clean, corr, metric, sorted(found))
    assert torch.allclose(alone, whole, atol=1e-3)
    # end to end: selected by size, positional pairs given as built
    circ = find_circuit(model, clean, corr, metric, scores=scores, size=len(EXPECTED),
                        positional={"L0H0": [0], "L1H0": [0]}, sizes=[1, 3, 6, 12])
    assert set(circ.edges) == EXPECTED
    assert circ.key_shares["embed->L0H0.k"] == pytest.approx(1.0, abs=1e-4)
    assert circ.key_shares["L0H0->L1H0.k"] == pytest.approx(0.0, abs=1e-4)
    assert float(circ.normalised()[2]) == pytest.approx(1.0, abs=1e-3)


def test_paper_a_index_head_is_recovered():
    """Paper A's hand-built H_POS (Theorem 3) on a one-layer, two-head toy: the second head
    is not built. Index ``s_0 … s_5 IDX_j -> s_j`` with the pairs built to break the
    query (another index, same symbols) or the value (another symbol at ``j``): the found
    circuit is exactly the query, value and read-out of the built head (its keys are
    ``r`` on every symbol, so no pair moves them)."""
    from lens_possym.papers import a as paper_a

    task = paper_a.IndexTask(n_symbols=6, length=6)
    model = paper_a.ToyTransformer(paper_a.toy_config_for(task, n_heads=2))
    built = paper_a.build_index_head(model, task, freq=2)
    assert (built.layer, built.head, built.kind) == (0, 0, "positional")
    clean, corr, answers = [], [], []
    for i, p in enumerate(list(itertools.permutations(range(6)))[::97][:8]):
        j = i % 6
        clean.append(list(p) + [6 + j])
        answers.append(p[j])
        if i % 2:
            corr.append(list(p) + [6 + (j + 1) % 6])            # another index
        else:
            q = list(p)
            k = (j + 2) % 6
            q[j], q[k] = q[k], q[j]                             # another symbol at j
            corr.append(q + [6 + j])
    clean, corr, answers = torch.tensor(clean), torch.tensor(corr), torch.tensor(answers)
    with torch.no_grad():
        assert torch.equal(model(clean)[:, -1, :6].argmax(-1), answers)

    def metric(logits):
        last = logits[:, -1, :6]
        return last.gather(1, answers[:, None])[:, 0] - last.mean(-1)

    scores = path_edge_scores(model, clean, corr, metric)
    top = float(scores.scores.abs().max())
    found = {e.name for e in select_edges(scores, threshold=1e-3 * top)}
    assert found == {"embed->L0H0.q", "embed->L0H0.v", "L0H0->logits"}
    # the built head's query reaches it through its one rotating pair: positional
    assert positional_share(model, clean, corr, metric, "embed->L0H0.q", built.freq_ids) == \
        pytest.approx(1.0, abs=1e-4)


def test_paper_c_hop_chain_is_recovered():
    """Paper C's hand-built two-hop chain (``t_index_chain_model``: T_Index in each of two
    layers, built with the core's construction helpers) with a second, unbuilt head in
    every layer. Prompt: letters at 0..7, offset tokens at 8..11; the query (11, offset 2)
    hops to p1 = 9, whose offset 6 hops to p2 = 3: the answer is the letter at 3, copied
    into p1's carry by L0H0 and read from there by L1H0. Each corrupted prompt breaks one
    link: the query's offset (L1H0's query), p1's offset (L0H0's query), the letter at p2
    (L0H0's value). Found: exactly those edges, the carry L0H0 -> L1H0.v and the read-out;
    nothing of the unbuilt heads. T_Index is positional in its query (the offset token's
    phase −σθ on the θ pair) and its keys are ``r`` on every token: the query edges into
    both positional heads are labelled positional (share 1), their key edges carry nothing
    a prompt can move and are, rightly, not found."""
    from lens_possym.papers.c.constructions import t_index_chain_model
    from lens_possym.papers.c.tasks import NumberTask

    task = NumberTask()
    model, built = t_index_chain_model(task, 0.8, n_layers=2, n_heads=2)
    assert [(b.layer, b.head, b.kind) for b in built] == [(0, 0, "positional"),
                                                           (1, 0, "positional")]
    off = lambda sigma: task.n_letters + sigma - 1  # noqa: E731
    g = torch.Generator().manual_seed(0)
    clean, corr, answers = [], [], []
    for i in range(6):
        letters = torch.randperm(task.n_letters, generator=g)[:8].tolist()
        prompt = letters + [off(5), off(6), off(4), off(2)]
        broken = list(prompt)
        if i % 3 == 0:
            broken[11] = off(1)            # the query hops to 10 (-> letter 6)
        elif i % 3 == 1:
            broken[9] = off(4)             # p1 hops to 5
        else:
            broken[3] = next(t for t in range(task.n_letters) if t not in letters)
        clean.append(prompt)
        corr.append(broken)
        answers.append(letters[3])
    clean, corr, answers = torch.tensor(clean), torch.tensor(corr), torch.tensor(answers)
    with torch.no_grad():
        assert torch.equal(model(clean)[:, -1, :task.n_letters].argmax(-1), answers)
        assert (model(corr)[:, -1, :task.n_letters].argmax(-1) != answers).all()

    def metric(logits):
        last = logits[:, -1, :task.n_letters]
        return last.gather(1, answers[:, None])[:, 0] - last.mean(-1)

    scores = path_edge_scores(model, clean, corr, metric)
    assert len(scores.edges) == len(graph_edges(model))
    top = float(scores.scores.abs().max())
    found = {e.name for e in select_edges(scores, threshold=1e-3 * top)}
    assert found == {"embed->L0H0.q", "embed->L0H0.v", "embed->L1H0.q", "L0H0->L1H0.v",
                     "L1H0->logits"}
    for edge in ("embed->L0H0.q", "embed->L1H0.q"):
        assert positional_share(model, clean, corr, metric, edge, built[0].freq_ids[:1]) == \
            pytest.approx(1.0, abs=1e-4)
    with torch.no_grad():
        whole = metric(model(clean))
    assert torch.allclose(circuit_metric(model, clean, corr, metric, sorted(found)), whole,
                          atol=1e-3)
