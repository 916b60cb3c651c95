CELLS = [
("md", r"""
# 02 · Positional or symbolic? Profiling every head of gemma-3-270m and smollm2-135m

Paper A (Urrutia et al., ICLR 2026) calls an attention head **positional** when its logits
depend only on *where* a key is, and **symbolic** when they depend only on *what* it is.
It measures how close a head is to each by swapping contents of key positions: take the
last token's attention `a`, swap the contents of positions *i* and *j* (keeping the
positions, so RoPE still rotates by *i* and *j*), and compare the mass on (*i*, *j*) after
the swap with the mass before:

* **s_POS** = cos((a′ᵢ, a′ⱼ), (aᵢ, aⱼ)): the mass stayed with the positions;
* **s_SYM** = cos((a′ᵢ, a′ⱼ), (aⱼ, aᵢ)): the mass moved with the content;

weighted over all swaps by softmax(|aᵢ − aⱼ| / τ) with τ = 1e-4 (paper C's code).
Each RoPE frequency can be scored on its own, as a 2-D head.

lens-possym computes this **in closed form**: swapping two rows of the layer input changes
the last-row logits at *i* and *j* to C[i, j] and C[j, i], where C[p, c] is the logit the
head gives content *c* at position *p*, and the cosines need nothing else. No forward pass
per swap; the literal re-run is kept as the reference it is tested against.
"""),
("code", r"""
import time
import torch
import matplotlib.pyplot as plt
import lens_possym as lp
from lens_possym import viz

gemma = lp.load_model("gemma-3-270m")
task = lp.binding_task(gemma, n_prompts=16, n_pairs=8, seed=0)
print(task.prompts[0])
result = lp.evaluate_binding(gemma, task)
print(f"\n{task.n_prompts} prompts of {task.tokens.shape[1]} tokens; accuracy {result.accuracy:.0%}, "
      f"among the prompt's colours {result.candidate_accuracy:.0%} (chance {1 / task.n_pairs:.0%}), "
      f"logit difference {result.logit_diff:.2f}")
"""),
("md", r"""
## Every head on the positional-symbolic plane

One call scores every layer, head and frequency id on all prompts (BOS, the attention sink,
is left out of the swaps by default: with it, the weights would be decided by where the
sink's mass goes). How the scores are computed is one frozen `lp.ScoreConfig`, given as
keywords (`swap="block"`, `tau=...`) or as an object, and kept in the result
(`scores.config`, saved with it).
"""),
("code", r"""
start = time.perf_counter()
scores = lp.swap_scores(gemma, task.tokens)
print(f"{time.perf_counter() - start:.1f} s for {len(scores.layers)} layers x {scores.n_heads} heads "
      f"x {scores.pos_freq.shape[-1]} frequencies x {task.n_prompts} prompts")
print(scores.config)
summary = scores.summary()
for key in ("median_pos_first_half", "median_pos_second_half", "median_sym_first_half",
            "median_sym_second_half", "pearson_pos_sym", "sym_low_minus_high_freq",
            "pos_low_minus_high_freq", "median_exclusion_ratio"):
    print(f"{key:>26}: {summary[key]:+.3f}")
fig, axes = plt.subplots(1, 3, figsize=(15, 4.3), constrained_layout=True)
viz.plot_plane(scores, ax=axes[0], annotate=2)
viz.plot_score_heatmaps(scores, axes=axes[1:])
plt.show()
"""),
("md", r"""
Paper A reports, for gemma-2-2b-it on its binding task, median s_POS 0.83 in the first half
of the layers and 0.56 in the second, and Pearson r = −0.91 between the two scores. The
numbers above are for a ten-times smaller model on our own binding prompts: the strong
negative correlation (the exclusion principle at work: few heads are high on both, and
those attend almost uniformly) holds; compare the layer trend yourself.

## Which frequencies make a head positional or symbolic?

For a clearly positional, a clearly symbolic and a mixed head, each frequency id scored as
a 2-D head (id 0 is the fastest rotation).
"""),
("code", r"""
examples = viz.pick_example_heads(scores)
print(examples)
fig, axes = plt.subplots(3, 1, figsize=(9, 8), constrained_layout=True)
for ax, (label, (layer, head)) in zip(axes, examples.items()):
    viz.plot_frequency_scores(scores, layer, head, ax=ax)
    ax.set_title(f"{label}: " + ax.get_title(), fontsize="small")
plt.show()
bands = scores.band_means(3)
for name in ("pos", "sym"):
    print(f"mean s_{name.upper()} over all heads, fast / middle / slow thirds of ids:",
          [round(float(x), 3) for x in bands[name].flatten(0, 1).nanmean(0)])
"""),
("code", r"""
fig, axes = plt.subplots(1, 2, figsize=(12, 4.5), constrained_layout=True)
viz.plot_frequency_plane(scores, *examples["symbolic"], ax=axes[0])
viz.plot_frequency_plane(scores, *examples["positional"], ax=axes[1])
plt.show()
"""),
("md", r"""
## Every head, every frequency: the frequency atlas

Three example heads are a sample; the scores cover every head. The atlas puts them in one
view: one row per head (layer by layer), one column per frequency id (θ on the top axis),
coloured by s_SYM − s_POS (red: that frequency, alone, makes the head symbolic; blue:
positional). `view="sym"`, `"pos"` or `"share"` (the logit share, with `share=...`) show
the other quantities; `viz.atlas_figure(scores)` is the interactive (plotly) version that
the report shows.
"""),
("code", r"""
ax = viz.plot_frequency_atlas(scores, "sym-pos")
ax.figure.set_size_inches(12, 6)
plt.show()
"""),
("md", r"""
## Scores as a table

Every result converts to a long-format pandas DataFrame (`layer, head, frequency, angle,
score, value`: one row per number), the form `pivot_table`, `groupby` and plotting
libraries take. Here: mean s_SYM per layer over the fast, middle and slow thirds of the
frequency ids. `scores.save(path)` / `lp.PosSymScores.load(path)` keep the same numbers in
one JSON file, and printing a result shows its shapes and headline numbers.
"""),
("code", r"""
import pandas as pd

print(scores)
df = scores.to_dataframe()
print(df.head())
per_freq = df[df.score == "sym_freq"]
per_freq = per_freq.assign(third=pd.cut(per_freq.frequency.astype(int), 3,
                                        labels=["fast", "middle", "slow"]))
per_freq.pivot_table(index="layer", columns="third", values="value", aggfunc="mean",
                     observed=True).round(2)
"""),
("md", r"""
## What a swap does to the attention

The swap that weighs most for each example head: a positional head keeps its mass where
it was; a symbolic head moves it with the content; a mixed head spreads it thinly.
"""),
("code", r"""
viz.plot_swap_attention(gemma, task.tokens[:1], examples)
plt.show()
"""),
("md", r"""
## Exact equals re-run

The closed form against paper C's procedure (swap two rows of the layer input, re-run the
block), on one layer and a short prompt, per head and per frequency. The model runs in
float32 here, so they agree to float32 rounding; the test suite checks ≤ 1e-5 in float64 on
every model family and on gemma-3-270m.
"""),
("code", r"""
short = task.tokens[:1, :24]
t0 = time.perf_counter()
exact = lp.swap_scores(gemma, short, layers=[5])
t1 = time.perf_counter()
rerun = lp.swap_scores(gemma, short, layers=[5], method="rerun")
t2 = time.perf_counter()
print(f"exact {t1 - t0:.2f} s, re-run {t2 - t1:.2f} s for {(22 * 21) // 2} swaps")
for name in ("pos", "sym", "pos_freq", "sym_freq"):
    diff = (getattr(exact, name)[5] - getattr(rerun, name)[5]).abs().max()
    print(f"max |exact - rerun| {name:>8}: {diff:.1e}")
"""),
("md", r"""
## The exclusion principle

Theorem 1: Var(λ) ≤ (‖δ_pos‖² + ‖δ_sym‖²) / ((n−1)!(n−1)), where the deviations are summed
over all permutations of the keys; lens-possym computes both sums exactly in O(n²) per head
(and O(n) per frequency). The ratio Var / bound is at most 1: a head close to *both*
behaviours must have nearly constant logits. The share S_sym / (S_pos + S_sym) of the two
deviations is a logit-level counterpart of the attention-level scores: 1 when the logits
depend on position only, 0 when they depend on content only.
"""),
("code", r"""
fig, axes = plt.subplots(1, 2, figsize=(12, 4), constrained_layout=True)
image = axes[0].imshow(scores.exclusion_ratio.numpy(), vmin=0, vmax=1, aspect="auto", cmap="cividis")
axes[0].set(xlabel="head", ylabel="layer", title="Var(λ) / bound, mean over prompts")
plt.colorbar(image, ax=axes[0])
axes[1].scatter(scores.positional_share.flatten().numpy(), scores.pos.flatten().numpy(), s=15)
axes[1].set(xlabel="S_sym / (S_pos + S_sym)  (logits)", ylabel="s_POS  (attention swaps)",
            title="two views of the same head")
plt.show()
print(f"Pearson r between the positional share and s_POS over heads: "
      f"{lp.scores.pearson_r(scores.positional_share.flatten(), scores.pos.flatten()):.2f}")
"""),
("md", r"""
## Token swaps or block swaps?

Paper A's relaxation swaps contiguous blocks and compares block means; paper C swaps single
tokens. How different are the two profiles?
"""),
("code", r"""
blocks = lp.swap_scores(gemma, task.tokens, swap="block", n_blocks=8, per_frequency=False)
print(f"Pearson r, token vs block swaps: s_POS {lp.scores.pearson_r(scores.pos.flatten(), blocks.pos.flatten()):.2f}, "
      f"s_SYM {lp.scores.pearson_r(scores.sym.flatten(), blocks.sym.flatten()):.2f}")
fig, axes = plt.subplots(1, 2, figsize=(10, 4.3), constrained_layout=True)
viz.plot_plane(scores, ax=axes[0]); axes[0].set_title("token swaps")
viz.plot_plane(blocks, ax=axes[1]); axes[1].set_title("8 block swaps")
plt.show()
"""),
("md", r"""
## SmolLM2-135M

A Llama-architecture model: 30 layers of 9 heads on 3 KV heads, 32 frequencies (base 1e5).
"""),
("code", r"""
smol = lp.load_model("smollm2-135m")
smol_task = lp.binding_task(smol, n_prompts=16, n_pairs=8, seed=0)
smol_result = lp.evaluate_binding(smol, smol_task)
smol_scores = lp.swap_scores(smol, smol_task.tokens)
smol_summary = smol_scores.summary()
print(f"binding accuracy {smol_result.accuracy:.0%} (among colours {smol_result.candidate_accuracy:.0%})")
print(f"{'':>26}  gemma-3-270m  smollm2-135m")
for key in ("median_pos_first_half", "median_pos_second_half", "pearson_pos_sym",
            "sym_low_minus_high_freq", "pos_low_minus_high_freq"):
    print(f"{key:>26}  {summary[key]:+12.3f}  {smol_summary[key]:+12.3f}")
fig, axes = plt.subplots(1, 3, figsize=(15, 4.5), constrained_layout=True)
viz.plot_plane(smol_scores, ax=axes[0], annotate=2)
viz.plot_score_heatmaps(smol_scores, axes=axes[1:])
plt.show()
"""),
("md", r"""
Everything above is in `lens-possym profile --model NAME --out DIR`, which also writes
`scores.json` (reload it with `lp.PosSymScores.load`) and a self-contained `report.html`:
open it offline, hover a head on the plane, the heatmaps or the frequency atlas for its
numbers, click it for its per-frequency profile and its attention before and after a swap.
"""),
]
