CELLS = [
("md", r"""
# 07 · The binding circuit of smollm2-135m: found, checked, read

Which heads matter is where a circuit study starts; how they connect is the next question:
which upstream head feeds which downstream head, through its **query**, its **key** or its
**value**, and, for a RoPE model, through the receiver's **positional** frequency pairs or
its content. `lens_possym.circuits` answers it with **path patching** (exact), checks the
answer with a **faithfulness curve** (only the circuit's edges clean, every other edge
corrupted) and reads it with the **s_POS/s_SYM** scores (see `docs/circuits.md`).

The task: binding pairs (`lp.tasks.binding_pairs`, corruption `swap_query`: the queried
entity changes, so the answer does); the metric the normalised logit difference (0 = the
corrupted run, 1 = the clean run).
"""),
("code", r"""
import time
import torch
import matplotlib.pyplot as plt
import lens_possym as lp
from lens_possym import circuits, interventions, viz

NOTEBOOK_START = time.perf_counter()
model = lp.load_model("smollm2-135m")
pairs = lp.tasks.binding_pairs(model, None, "swap_query", n_prompts=6, seed=0)
metric = pairs.metric(model)
clean, corrupted = pairs.clean_tokens, pairs.corrupted_tokens
print("clean:    ", pairs.clean_prompts[0][-80:])
print("corrupted:", pairs.corrupted_prompts[0][-80:])
print(clean.shape, "= [prompts, tokens]")
"""),
("md", r"""
## 1. The heads that matter (activation patching, the late layers)

Each head's output patched clean into the corrupted run, one at a time, batched;
`circuits.top_heads` ranks them by |effect| (the metric's change from the corrupted run),
leaving out the heads not patched. To keep the notebook short we patch the last ten layers
only; `lens-possym circuit` patches every head.
"""),
("code", r"""
grid = interventions.patch_grid(model, pairs, interventions.PatchGridConfig(
    site="heads", layers=list(range(20, 30))), progress=False)
effect = grid.effect().mean(-1)            # [n_layers, n_heads]; nan: not patched
top = circuits.top_heads(grid, 4)            # largest |effect| first, unpatched excluded
for node in top:
    print(f"{node.name}: {float(effect[node.layer, node.head]):+.3f}")
"""),
("md", r"""
## 2. How they connect (path patching, every edge among them)

Candidate edges: the embedding and those heads as senders; their queries, keys and values
and the logits as receivers. Each edge is path-patched alone: the sender's clean output
reaches only that input, every other node frozen at its corrupted output. The score is
`metric(edge) − metric(corrupted)`, averaged over prompts.
"""),
("code", r"""
keep = set(top) | {circuits.Node("embed"), circuits.Node("logits")}
edges = [e for e in circuits.graph_edges(model, mlps=False)
         if e.sender in keep and e.receiver in keep]
scores = circuits.path_edge_scores(model, clean, corrupted, metric, edges)
order = scores.scores.abs().argsort(descending=True).tolist()
print(f"{len(edges)} edges")
for i in order[:8]:
    print(f"{scores.edges[i]:>20}  {float(scores.scores[i]):+.3f}")
"""),
("md", r"""
## 3. Is it the circuit? (faithfulness over circuit sizes)

The top-k edges by |score| carry their value, every other edge (of the whole model, MLPs
included) its corrupted value; 1 = the whole model, 0 = the corrupted run. This is a strict
test: a head of the circuit whose own inputs are all outside it computes its corrupted
output, so clean information reaches the logits only along paths that start at the
embedding. Four late heads cannot pass it: what they read (the entity, moved there by
earlier heads and MLPs) is outside them, and the curve stays at 0 even with all 32
candidate edges. Path patching ranks how they connect; a faithful circuit of this
behaviour needs the earlier layers too (`lens-possym circuit --heads-top N`).
"""),
("code", r"""
labels = lp.swap_scores(model, clean)
circ = circuits.find_circuit(model, clean, corrupted, metric, scores=scores,
                             sizes=[1, 2, 4, 8, len(edges)], size=8, labels=labels)
for size, value in zip(circ.sizes, circ.normalised()):
    print(f"top {size:>2} edges: faithfulness {float(value):.3f}")
print("circuit:", ", ".join(circ.edges))
"""),
("md", r"""
## 4. Reading it: positional or symbolic

Each head of the circuit with its s_POS and s_SYM; each key edge with its **positional
share**: the part of its effect that goes through the receiver's positional frequency
pairs (those whose per-frequency s_POS exceeds s_SYM).
"""),
("code", r"""
for name, lab in sorted(circ.nodes.items()):
    print(f"{name}: s_POS {lab['pos']:.3f}  s_SYM {lab['sym']:.3f}")
for edge, share in circ.key_shares.items():
    print(f"{edge}: positional share {share:.2f}")
fig, axes = plt.subplots(1, 2, figsize=(13, 4.5))
viz.plot_circuit(circ, ax=axes[0], title="the circuit (node colour: s_POS − s_SYM)")
u = circ.curve()
axes[1].plot(circ.sizes, circ.normalised().tolist(), marker="o")
axes[1].set_xscale("log", base=2)
axes[1].set_xlabel("circuit size (edges)")
axes[1].set_ylabel("faithfulness")
plt.show()
print(f"notebook ran in {time.perf_counter() - NOTEBOOK_START:.0f} s")
"""),
]
