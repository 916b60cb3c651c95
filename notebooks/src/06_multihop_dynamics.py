CELLS = [
("md", r"""
# 06 · Paper C: multi-hop tasks, pure heads over training, discrepancy

Paper C trains GPT-J (12 layers × 1 head) on two structurally equivalent multi-hop tasks:
**Number** (follow backward offsets: positional) and **Letter** (follow letter chains:
symbolic), watches every head's positional and symbolic scores over training, builds
single-head RoPE constructions for one hop of each, and bounds their **discrepancy** (the gap
between a head's two largest attention logits).

This notebook runs every piece on a tiny budget (seconds). The CPU-preset runs and their
results (reproduction table, figures) are in `docs/paper_c.md`, made by
`lens-possym paper-c`.
"""),
("code", r"""
import math, tempfile, time
import torch
import matplotlib.pyplot as plt
from lens_possym.papers import c as paper_c
from lens_possym import training
from lens_possym.papers.c import dynamics, discrepancy, lengths, roles
from lens_possym.papers.c import constructions as hop_constructions
from lens_possym.papers.c.presets import train_multihop

NOTEBOOK_START = time.perf_counter()
torch.set_num_threads(1)
number, letter = paper_c.NumberTask(), paper_c.LetterTask()
for task in (number, letter):
    batch, hops, path = task.sample_with_paths(3, seed=1)
    print(task.describe())
    for row, answer, h, p in zip(batch.tokens, batch.answers, hops, path):
        stops = [q for q in p.tolist() if q >= 0]
        print(f"    {task.decode(row)}  →  {task.token_names()[answer]}   ({h} hops: {stops})")
"""),
("md", r"""
Both tasks have a target window (8 tokens), a pre-target window (8) and the query; hops run
from the query leftwards and land in the target window; 1–4 hops in equal shares, answer
position and value balanced. `task.at_length(n)` puts `n - 17` extra target tokens in front
(the length-generalisation sets).

## GPT-J through transformers, trained with checkpoints

`GPTJTaskModel` wraps `transformers.GPTJForCausalLM` (full rotary, loss on the last token);
the shared training loop writes resumable checkpoints. The `tiny` preset (2 layers × 16)
trains for 60 steps here; the `cpu` preset (12 × 64) learns both tasks in about 13 minutes.
"""),
("code", r"""
run_dir = tempfile.mkdtemp()
model, task, result = train_multihop("number", "tiny", out_dir=run_dir, device="cpu",
                                     steps=120, checkpoint_every=20, eval_every=20)
print(model.extra_repr())
print(f"test accuracy {result.test_accuracy:.3f} after {result.steps_run} steps (tiny: learns little)")
bridge = model.bridge(n_positions=300)          # a TransformerBridge over the same weights
print("positions past n_positions work:", model(task.at_length(300).sample(2).tokens).shape)
"""),
("md", r"""
## Scores of every head at every checkpoint, and purity

`dynamics.score_run` scores each checkpoint with the exact closed form (last-token query,
token swaps, τ = 1e-4) and records attention entropy and accuracy per hop count.
`dynamics.purity` marks a head pure positional when s_POS ≥ 1 − γ and s_SYM ≤ γ (and the
reverse for symbolic).
"""),
("code", r"""
traj = dynamics.score_run(run_dir, n_prompts=32, eval_size=256)
p = dynamics.purity(traj.pos, traj.sym, traj.steps, gamma=0.1)
print(f"{len(traj.steps)} checkpoints scored in {traj.score_seconds:.2f} s")
print("pure positional layers:", p.layers_of("positional"), " symbolic:", p.layers_of("symbolic"))
fig, axes = plt.subplots(1, 2, figsize=(9, 3))
for layer in range(traj.n_layers):
    axes[0].plot(traj.steps, traj.pos[:, layer, 0], label=f"s_POS L{layer}")
    axes[0].plot(traj.steps, traj.sym[:, layer, 0], "--", label=f"s_SYM L{layer}")
axes[0].set(xlabel="step", title="scores over training"); axes[0].legend(fontsize=7)
axes[1].plot(traj.steps, traj.accuracy_by_hops, label=[f"{h} hops" for h in range(1, 5)])
axes[1].set(xlabel="step", title="accuracy per hop count"); axes[1].legend(fontsize=7)
fig.tight_layout()
"""),
("md", r"""
## Constructions: one RoPE head solves one hop

`T_Index` (every key the same vector, an offset σ rotates the query by −σθ) and
`T_Retrieval` (letters as phases 2πφ/8 in query and key) set a one-layer toy model's weights.
Their roles read from attention, and confirmed by ablation and patching:
"""),
("code", r"""
one_number, one_letter = paper_c.NumberTask(max_hops=1), paper_c.LetterTask(max_hops=1)
t_index, _ = hop_constructions.t_index_model(one_number, 0.8)
t_retr, _ = hop_constructions.t_retrieval_model(one_letter, 0.0027)
for name, m, t in (("T_Index", t_index, one_number), ("T_Retrieval", t_retr, one_letter)):
    acc = training.evaluate(m, t, t.test_set(512)).accuracy
    batch = t.test_set(64)
    r = roles.attention_roles(m, t, batch)
    c = roles.causal_roles(m, t, batch)
    print(f"{name}: accuracy {acc:.3f}; role {r.labels[0][0]!r}; ablated accuracy "
          f"{float(c.ablated_accuracy_by_hops[0, 0, 0]):.2f}; patch restores {float(c.restore[0, 0, 0]):.2f}")
"""),
("md", r"""
## Discrepancy and Theorem 3.2

For T_Index the gap has a closed form, `1 − max_{t ∈ T(σ)} cos(tθ)`, checked here against the
constructed head. Theorem 3.2 bounds it by `min{1 − cos θ, 2π²/n²}`; Definition 3.1 takes the
maximum over inputs, the proof's pigeonhole argument needs every offset to compete, which
the minimum over inputs has:
"""),
("code", r"""
measured = discrepancy.head_discrepancy(*[hop_constructions.t_index_model(
    paper_c.NumberTask(max_hops=1, length=40), 0.8, amplitude=1.0)[0],
    paper_c.NumberTask(max_hops=1, length=40).test_set(64).tokens])
print(f"T_Index at n=40, measured: max {measured.max:.5f}; closed form over the task's offsets: "
      f"{discrepancy.index_discrepancy(0.8, 40, range(9, 17)):.5f}")
table = discrepancy.index_bound_table(0.8, range(2, 400))
ns = [r["n"] for r in table]
plt.figure(figsize=(5, 3))
plt.loglog(ns, [r["delta_max"] for r in table], label="max over inputs")
plt.loglog(ns, [r["delta_min"] for r in table], label="min over inputs")
plt.loglog(ns, [r["bound"] for r in table], "k--", label="min{1-cos θ, 2π²/n²}")
plt.xlabel("n"); plt.legend(fontsize=7); plt.title("T_Index, θ = 0.8")
print("bound fails for the max at", sum(not r["max_holds"] for r in table), "lengths; for the min at",
      sum(not r["min_holds"] for r in table))
"""),
("md", r"""
## Length generalisation

`lengths.accuracy_by_length` evaluates a model on the longer sets (here the construction,
built for inputs up to 300 tokens, and the tiny GPT-J). `lengths.lm_hop_accuracy` does the
same for a pretrained LM on paper C's 1-hop prompts (`lens_possym.papers.c.prompts`).
"""),
("code", r"""
wide, _ = hop_constructions.t_index_model(one_number, 0.8, max_length=300)
print("T_Index:", lengths.accuracy_by_length(wide, one_number, [17, 100, 300], n_prompts=64).accuracy)
print("tiny GPT-J:", lengths.accuracy_by_length(model, task, [17, 100], n_prompts=32).accuracy)
print(f"notebook ran in {time.perf_counter() - NOTEBOOK_START:.0f} s")
"""),
]
