CELLS = [
("md", r"""
# 03 · Taking frequencies away: ablation, patching and sweeps on gemma-3-270m

Paper A's causal claim is that what a head can do depends on which RoPE frequencies it can
use. `lens_possym.interventions` makes that testable with ordinary TransformerLens hooks:

* **frequency ablation** of chosen (layer, head, frequency ids): `zero` (remove the term
  from the head's scores), `mean` (replace the query pair by its mean over reference
  prompts), `unrotate` (keep the pair, at angle 0: the p-RoPE idea of Barbero et al.);
* **gates**, **head and frequency patching**, **content permutations**, and a **band sweep**
  over every head.

Here we check the mechanism on the real model, then run the experiment: on the binding task,
remove the **low-frequency** band of the **most symbolic heads**, and compare with removing
their **high-frequency** band and with the same ablations of **random heads** of equal count.
Frequency id 0 is the fastest rotation; the thirds of the 128 ids are called `high`,
`mid` and `low` (frequency).
"""),
("code", r"""
import torch
import matplotlib.pyplot as plt
import lens_possym as lp
from lens_possym import viz
from lens_possym.rope import to_pairs
from lens_possym.decompose import apply_softcap, decompose_inputs

model = lp.load_model("gemma-3-270m")
task = lp.binding_task(model, n_prompts=16, n_pairs=4, seed=0)
print(task.prompts[0])
print(task.tokens.shape, "= [prompts, tokens]")

with torch.no_grad():  # only the last position's logits: all the task reads
    baseline = lp.evaluate_binding(model, task, logits=model(task.tokens, logits_to_keep=1))
print(f"baseline: accuracy {baseline.accuracy:.3f}, logit difference {baseline.logit_diff:.3f}")
"""),
("md", r"""
## 1. The mechanism, checked on the real model

Edits act on the **un-rotated** query and key pairs (`hook_q_normed`/`hook_k_normed` on
Gemma 3, after the q/k-norm) and the model's own RoPE runs afterwards. For `unrotate` the
pair at position `p` is pre-rotated by `R(−pθ_f)` with the model's own angle table, so the
model's rotation lands it at angle 0. We compare the scores under the hooks with a direct
float64 computation in which the chosen pairs are taken at angle 0.

gemma-3-270m has 4 query heads on **one** KV head, so unrotating the keys of one query head
would change its three neighbours. lens-possym leaves the shared key alone and recomputes
only the chosen head with its own unrotated key (written into `hook_z`); the neighbours stay
bit-identical.
"""),
("code", r"""
layer, freqs = 11, list(range(64, 128))
spec = lp.rope_spec(model, layer)
tokens = task.tokens[:2]
inputs = lp.capture_attention_inputs(model, tokens, layer, query_positions=None)[layer]
fl = decompose_inputs(inputs, dtype=torch.float64)
q_pairs, _ = to_pairs(inputs.q.double(), spec)
k_pairs, _ = to_pairs(inputs.k_for_heads().double(), spec)
angle0 = torch.einsum("bqhfc,bkhfc->bhqkf", q_pairs, k_pairs) * spec.scale
terms = fl.terms.clone()
terms[..., freqs] = angle0[..., freqs]                      # every head, ids 64..127 at angle 0
direct = apply_softcap(terms.sum(-1), spec.softcap)

name = spec.scores_hook
with lp.ablate_frequencies(model, f"{layer}.*", "unrotate", freqs=freqs):
    _, cache = model.run_with_cache(tokens, names_filter=[name])
error = (cache[name].double() - direct)[..., fl.mask].abs().max()
print(f"all heads of layer {layer}: |scores under hooks − direct angle-0 computation| ≤ {error:.1e}"
      f" (scores up to {direct[..., fl.mask].abs().max():.1f})")

z = f"blocks.{layer}.attn.hook_z"
_, clean = model.run_with_cache(tokens, names_filter=[z])
with lp.ablate_frequencies(model, {(layer, 2): freqs}, "unrotate"):
    _, edited = model.run_with_cache(tokens, names_filter=[z])
print("head 2 changed:", not torch.equal(edited[z][:, :, 2], clean[z][:, :, 2]),
      "| heads 0, 1, 3 bit-identical:", torch.equal(edited[z][:, :, [0, 1, 3]], clean[z][:, :, [0, 1, 3]]))
"""),
("md", r"""
## 2. Which heads are the most symbolic?

`lp.swap_scores` places every head on paper A's positional–symbolic plane (token swaps at the
last query, closed form). A head with both scores near 1 is close to uniform (the exclusion
principle), so we rank by **s_SYM − s_POS** and take the top 8 of the 72 heads.
"""),
("code", r"""
scores = lp.swap_scores(model, task.tokens[:8], per_frequency=False, exclusion=False)
K = 8
symbolic = scores.ranked_heads("sym-pos", k=K)
for l, h in symbolic:
    print(f"head {l}.{h}: s_SYM {scores.sym[l, h]:.3f}  s_POS {scores.pos[l, h]:.3f}")
"""),
("md", r"""
## 3. The experiment

`lp.compare_with_random_heads` ablates a band of **all** chosen heads at once, then does the
same for random sets of as many heads (drawn from all 72), and reports the task metrics. We
ablate the `low` third of the frequency ids (86–127, the slowest rotations) or the `high`
third (0–42) of the 8 most symbolic heads and of 2 random sets of 8 heads, with

* `zero`: remove those terms from the heads' scores;
* `mean`: replace those query pairs by their mean over 16 other binding prompts (pooled over
  positions), which keeps the frequencies' average use but removes their dependence on the
  query's content;
* `unrotate`: keep the pairs, at angle 0 (p-RoPE style).

16 prompts, 4 bindings each; accuracy is over the whole vocabulary (31 forward passes).
"""),
("code", r"""
reference = lp.binding_task(model, n_prompts=16, n_pairs=4, seed=1000).tokens
comparison = lp.compare_with_random_heads(
    model, task.tokens, lp.interventions.binding_metrics(task), symbolic, bands=["low", "high"],
    modes=["zero", "mean", "unrotate"], n_random=2, seed=0, reference=reference, progress=False)
print(comparison.table(["accuracy", "logit_diff"]))
"""),
("code", r"""
rows = {r["condition"].replace("chosen", "symbolic"): r for r in comparison.rows()}
errors = {name: {m: r.get(f"{m}_sd", 0.0) for m in ("accuracy", "logit_diff")} for name, r in rows.items()}
fig = viz.plot_ablation_comparison(rows, errors=errors)
fig.suptitle("gemma-3-270m binding: a frequency band of 8 heads ablated (random: mean ± sd)",
             fontsize="medium")
plt.show()
"""),
("md", r"""
**Reading the numbers.** The table above is what this notebook measured; `docs/interventions.md`
records runs of it (and a larger one) with our interpretation. Three things to keep in mind:

* `unrotate` of the low band is close to a no-op on prompts this short: those pairs turn by
  at most a few hundredths of a radian over 31 tokens, so setting their angle to 0 changes
  almost nothing. What the heads use in the low band is content, not rotation.
* `zero` removes the terms, and with them most of a head's logit magnitude when the head
  keeps its query norm in the slow pairs (Barbero et al. report that Gemma does): the head's
  attention flattens, which is a different intervention from removing what the band
  *encodes*. `mean` keeps the band's average contribution and removes only its dependence on
  the query's content.
* the binding task is hard for a 270M model (baseline accuracy around 0.5), and 16 prompts
  give accuracy steps of 1/16: compare logit differences first, and the random sets' spread.
"""),
("md", r"""
## 4. Sweeping bands of every head

`lp.band_sweep` ablates each band of each head alone and returns `[n_layers, n_heads,
n_bands]`. The whole model is 216 forward passes (`lens-possym ablate --sweep bands`); here
we sweep layer 11, a global-attention layer (RoPE base 10⁶), on 8 prompts. Each pass starts
at the ablated layer from the cached clean residual, and only the last position's logits
are computed.
"""),
("code", r"""
small = lp.binding_task(model, n_prompts=8, n_pairs=4, seed=0)
sweep = lp.band_sweep(model, small.tokens, lp.interventions.binding_metrics(small), layers=[11],
                      mode="zero", progress=False)
fig = viz.plot_band_sweep(sweep, "logit_diff")
plt.show()
for layer, head, band, delta in sweep.top(5, "logit_diff"):
    print(f"{layer}.{head} {band:>6}: Δ logit diff {delta:+.3f}")
"""),
("md", r"""
Every result keeps how it was made: `sweep.config` (a frozen `BandSweepConfig`) runs the
sweep again, and each cell is an `lp.Intervention`, a spec that prints, saves as JSON and
replays. Here the cell that hurt most, written out and applied again:
"""),
("code", r"""
layer, head, band, delta = sweep.top(1, "logit_diff")[0]
spec = sweep.intervention(layer, head, band)
print(spec)
print(spec.to_json())
with torch.no_grad(), lp.Intervention.from_json(spec.to_json()).apply(model):
    replayed = lp.evaluate_binding(model, small, logits=model(small.tokens, logits_to_keep=1))
print(f"replayed Δ logit diff {replayed.logit_diff - sweep.baseline['logit_diff']:+.3f} "
      f"(sweep: {delta:+.3f})")
"""),
("md", r"""
## 5. The same from the command line

```
lens-possym ablate --model gemma-3-270m --task binding --heads 5.1,5.2 --freqs low --mode zero --out out/
lens-possym ablate --model gemma-3-270m --task binding --sweep bands --out out/
```

Other tools used the same way: `lp.patch_heads(model, clean_cache, "11.2")`,
`lp.patch_frequencies(model, clean_cache, {"11.2": "low"})`, `lp.FrequencyGate` for training
with learnable per-head frequency masks, `lp.permute_content(model, layer, perm)` for the
scores' content swaps. Each operation `OP` also comes as `OP_hook` (one hook function) and
`OP_hooks` (the `(name, fn)` list) in `lens_possym.interventions`. See
`docs/interventions.md`.
"""),
("md", r"""
## 6. Patching on smollm2-135m: which head, which frequencies

Activation patching asks which activations carry what the answer depends on. It needs two
prompts that differ in one controlled way: `lp.tasks.word_distance_pairs` builds them from
the word-distance task (continue a listed sequence after a cue of two words), with the
corruption `shift_cue`: the cue is taken from another place of the list, so the answer is
another list word, and only the two cue tokens change. The metric is the logit difference
between the clean and the corrupted answer, normalised so that the corrupted run scores 0
and the clean run 1.

`lp.interventions.patch_grid` patches each head's output (`hook_z`, all positions) from the
clean run into the corrupted one, several heads per forward pass, and keeps every prompt's
value: each cell comes with its standard error and a bootstrap interval. Then the same for
every RoPE frequency pair of the head that restores most. (`lens-possym patch --model
smollm2-135m --task distance --out DIR` writes the same as `patch.json`, figures and a
report; `docs/patching.md`.)
"""),
("code", r"""
small_model = lp.load_model("smollm2-135m")
pairs = lp.tasks.word_distance_pairs(small_model, None, "shift_cue", n_prompts=8)
print("clean:    ", pairs.clean_prompts[0], "→", small_model.to_string(pairs.clean_answers[:1]))
print("corrupted:", pairs.corrupted_prompts[0], "→",
      small_model.to_string(pairs.corrupted_answers[:1]))

grid = lp.interventions.patch_grid(small_model, pairs)          # [n_layers, n_heads, prompts]
print(grid)
print(grid.describe(5))
fig, axes = plt.subplots(1, 2, figsize=(13, 6), constrained_layout=True)
viz.plot_patching_grid(grid, ax=axes[0], annotate=False)
viz.plot_patching_top(grid, 10, ax=axes[1])
plt.show()
"""),
("code", r"""
(layer, head), effect, se = grid.top(1)[0]
freqs = lp.interventions.patch_grid(small_model, pairs, site="frequencies", layers=[layer],
                                    heads=[head])
print(freqs.describe(5))
table = freqs.to_dataframe()   # one row per frequency: value; effect with se, ci_low, ci_high
print(table.sort_values("effect", ascending=False).head(5)[
    ["frequency", "value", "effect", "se", "ci_low", "ci_high"]])
"""),
("md", r"""
The head's scores on the same prompts, read from an `ActivationCache` of the clean run (the
layer's q/k hooks and `hook_embed`, which tells the scores that position 0 is BOS):
"""),
("code", r"""
from lens_possym.capture import cache_hook_names

_, cache = small_model.run_with_cache(
    pairs.clean_tokens, names_filter=cache_hook_names(small_model, layer) + ["hook_embed"])
scores = lp.swap_scores(small_model, cache, layers=layer)
print(f"head {layer}.{head}: s_POS {float(scores.pos[layer, head]):.3f}, "
      f"s_SYM {float(scores.sym[layer, head]):.3f}")
"""),
]
