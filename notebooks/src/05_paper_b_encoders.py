CELLS = [
("md", r"""
# 05 · Paper B: positional schemes in an encoder, and the deposit pattern

Paper B trains a bidirectional encoder with each positional encoding on a
**position-sensitive** task (the distance between two trigger words) and a
**position-agnostic** one (how many trigger words occur), then ablates heads one at a time:
in RoPE models one first-layer head carries the distance task (the "deposit pattern").

This notebook shows the pieces on a budget of seconds: the tasks, the encoder family
(`SchemeEncoder`: NoPE, sinusoidal, learned, ALiBi, T5, RoPE on k heads, MLA, Absolute+RoPE,
each in an *intended* and a *faithful* variant), the Toeplitz structure of their logits,
what the official code's quirks change, a small training run with its ablation grid, and
the measured grid of `docs/paper_b.md` (`lens-possym paper-b run`, minutes per
model on a CPU).
"""),
("code", r"""
import json, time
from pathlib import Path
import torch
import matplotlib.pyplot as plt
import lens_possym as lp
from lens_possym import training
from lens_possym.papers import b as pb
from lens_possym.papers.b.encoder import SchemeEncoder, encoder_config_for, faithful_mla_rotate
from lens_possym.papers.b.tasks import DistanceTask, CountTask
from lens_possym.training import TrainConfig, train

NOTEBOOK_START = time.perf_counter()
torch.set_num_threads(1)
distance, count = DistanceTask(n_ctx=20, max_between=8, max_side=4, n_words=16), CountTask(n_ctx=24, max_count=12, n_words=16)
for task in (distance, count):
    batch = task.sample(2, seed=1)
    print(task.describe())
    for row, label in zip(batch.tokens, batch.answers):
        print(f"    {task.decode(row)}  →  class {label.item()}")
"""),
("md", r"""
Labels are correct by construction (fillers never include a trigger); the count task never
draws zero triggers, which is what the official code's `ignore_index=0` amounts to.

## Toeplitz logits, and a rotation that is not one

Feed the same token at every position: the content is constant, so whatever varies in a
head's logits comes from position. An additive bias (ALiBi, T5) and RoPE give **Toeplitz**
matrices (constant along diagonals, i.e. functions of `n − m`); the official MLA "rotation"
does not, and it changes norms:
"""),
("code", r"""
def constant_scores(scheme, variant="intended"):
    cfg = encoder_config_for(distance, scheme, variant=variant, n_layers=1, n_heads=2, d_model=16, d_head=8, d_ff=16, seed=3)
    model = SchemeEncoder(cfg).eval()
    _, cache = model.run_with_cache(torch.full((1, 20), 5))
    return cache["blocks.0.attn.hook_attn_scores"][0, 0]

panels = [("alibi", "intended"), ("rope", "intended"), ("mla", "intended"), ("mla", "faithful")]
fig, axes = plt.subplots(1, 4, figsize=(13, 3))
for ax, (scheme, variant) in zip(axes, panels):
    s = constant_scores(scheme, variant)
    spread = max(float(torch.diagonal(s, d).std()) if abs(d) < 19 else 0.0 for d in range(-19, 20))
    ax.imshow(s, cmap="RdBu_r"); ax.set_title(f"{scheme} ({variant})\nmax std along a diagonal {spread:.2g}", fontsize=9)
plt.tight_layout(); plt.show()

x = torch.randn(1, 20, 8, generator=torch.Generator().manual_seed(0))
ratio = faithful_mla_rotate(x, torch.arange(20)).norm(dim=-1) / x.norm(dim=-1)
print(f"official MLA 'rotation': |R(p)x| / |x| ranges {ratio.min():.2f} … {ratio.max():.2f}")
"""),
("md", r"""
## Every lens-possym analysis runs on the encoders

`SchemeEncoder` has TransformerLens hook names and describes its layers with the same
`lens_possym.positions` objects as pretrained models, so the swap scores, the ablations and
the Toeplitz view need nothing new. A quick run (200 steps on the small distance task, a
few seconds) of RoPE, then the accuracy with each head ablated:
"""),
("code", r"""
model = SchemeEncoder(encoder_config_for(distance, "rope", n_layers=2, n_heads=4, d_model=32, d_head=8, d_ff=64))
result = train(model, distance, TrainConfig(steps=200, batch_size=64, lr=3e-3, warmup_steps=10, eval_every=100, eval_size=256, device="cpu"))
model.eval()
test = distance.test_set(256, seed=1)
baseline = training.evaluate(model, distance, test).accuracy
grid = pb.ablation_grid(model, distance, test)
print(f"test accuracy {baseline:.3f} after {result.steps_run} steps ({result.train_time_s:.1f} s)")
print(pb.deposit_summary(grid, baseline))
scores = lp.swap_scores(model, test.tokens[:4], swap="block", n_blocks=5, per_frequency=False, exclusion=False, exclude_bos=False)
fig, axes = plt.subplots(1, 2, figsize=(8, 2.6))
im = axes[0].imshow((baseline - grid) * 100, cmap="Reds"); axes[0].set_title("accuracy drop (points), one head ablated", fontsize=9)
fig.colorbar(im, ax=axes[0]); axes[0].set_xlabel("head"); axes[0].set_ylabel("layer")
axes[1].scatter(scores.pos.flatten(), scores.sym.flatten()); axes[1].set_xlabel("s_POS"); axes[1].set_ylabel("s_SYM"); axes[1].set_title("head profile", fontsize=9)
plt.tight_layout(); plt.show()
"""),
("md", r"""
## The measured grid

`lens-possym paper-b run` trains every scheme on both tasks, intended and faithful,
and RoPE on k ∈ {0, 1, 2, 3, all} heads, at the CPU preset (3 layers × 8 heads, `d_model`
64, 1,000 steps); `report` writes `docs/paper_b.md`'s tables from the cached cells. When the
repository's results file is present, its accuracies are plotted here:
"""),
("code", r"""
results = Path(lp.__file__).resolve().parents[1] / "docs" / "paper_b_results.json"
if results.exists():
    rows = pb.as_dicts(pb.read_records(results))   # the file's "cells" (it also holds verdicts)
    labels = ["nope", "sinusoidal", "learned", "alibi", "t5", "rope", "mla", "hybrid"]
    fig, ax = plt.subplots(figsize=(9, 3))
    for i, (task, variant) in enumerate([("distance", "intended"), ("distance", "faithful"), ("count", "intended"), ("count", "faithful")]):
        acc = {r["scheme"]: r["accuracy"] for r in rows if r["preset"] == "cpu" and r["task"] == task and r["variant"] == variant and r["seed"] == 0}
        ax.bar([j + 0.2 * i for j in range(len(labels))], [100 * acc.get(l, float("nan")) for l in labels], width=0.2, label=f"{task}, {variant}")
    ax.set_xticks([j + 0.3 for j in range(len(labels))], labels); ax.set_ylabel("test accuracy (%)"); ax.legend(fontsize=7)
    plt.tight_layout(); plt.show()
else:
    print("docs/paper_b_results.json not found (an installed copy without the repository)")
print(f"notebook ran in {time.perf_counter() - NOTEBOOK_START:.1f} s")
"""),
]
