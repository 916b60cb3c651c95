CELLS = [
("md", r"""
# 01 · Splitting attention logits by RoPE frequency

Every attention logit of a RoPE model is a sum over frequencies: each 2-D pair of the query
and key is rotated by its own angle θ_f per position, and the score adds up the pairs'
dot products (plus a non-rotated tail on partial-rotary models). `lens_possym` reads each
layer's RoPE geometry from the model itself, splits the logits into those terms, and
**checks that they add back up to the scores the model computed** on the same pass.

This notebook uses **gemma-3-270m**, loaded offline from the pip-installed GGUF package
(the first load converts it, about a minute; later loads take seconds).
"""),
("code", r"""
import torch
import matplotlib.pyplot as plt
import lens_possym as lp
from lens_possym import viz

model = lp.load_model("gemma-3-270m")
specs = lp.rope_specs(model)
for layer in (0, 4, 5):
    print(specs[layer].describe())
"""),
("md", r"""
Gemma 3 alternates five *sliding* layers (window 512, RoPE base 10⁴) with one *full* layer
(base 10⁶); the geometry above was read per layer from the Hugging Face rotary module and
checked against the `hook_cos`/`hook_sin` tables and the rotated queries on a probe input.

## The terms add up to the model's scores

We decompose every layer at once (one forward pass) for all query rows of a binding prompt.
`max_abs_error` is the largest difference between the summed terms and `hook_attn_scores`.
"""),
("code", r"""
prompt = ("Alice likes red. Bob likes blue. Carol likes green. Dave likes pink. "
          "What color does Carol like? Carol likes")
tokens = model.to_tokens(prompt)
print(len(tokens[0]), "tokens")
results = lp.frequency_logits_all(model, tokens, query_positions=None)
errors = torch.tensor([results[layer].max_abs_error for layer in sorted(results)])
print("terms:", tuple(results[5].terms.shape), " = [batch, head_index, query_pos, key_pos, freq]")
print(f"worst |Σ_f terms − model scores| over all 18 layers: {errors.max():.2e}")
"""),
("md", r"""
## Which frequencies carry a head's logits?

For the last token, the norm over keys of each frequency's logit row (paper A, Figure 1D)
shows where a head puts its attention logit. Low ids are fast rotations (position-sensitive),
high ids are slow (nearly content-only over a short prompt).
"""),
("code", r"""
last = lp.frequency_logits_all(model, tokens, layers=[1, 5, 11, 17])
fig, axes = plt.subplots(2, 2, figsize=(11, 6), constrained_layout=True, sharey=False)
for ax, layer in zip(axes.flat, sorted(last)):
    viz.plot_logit_norms(last[layer], ax=ax, share=True)
plt.show()
"""),
("md", r"""
## Frequency usage: per-frequency query and key norms

Barbero et al. (2024) measure how much a head *uses* each frequency by the mean 2-norm of
each 2-D chunk of its queries and keys. Rotation preserves these norms, so they are read
from the un-rotated q and k. Rows are normalised, so the heatmap shows *where* each head
puts its norm. A frequency id rotates by a different angle in the sliding layers (base 10⁴)
than in the full layers (base 10⁶), so the heatmap has one θ axis on top per base, each
naming its layers.
"""),
("code", r"""
norms = lp.frequency_norms(model, tokens)
fig, axes = plt.subplots(1, 2, figsize=(13, 5), constrained_layout=True)
viz.plot_usage_heatmap(norms, which="q", ax=axes[0])
viz.plot_usage_heatmap(norms, which="k", ax=axes[1])
plt.show()
"""),
("code", r"""
fig, axes = plt.subplots(1, 2, figsize=(12, 3.5), constrained_layout=True)
viz.plot_usage(norms, 5, which="q", ax=axes[0], logy=True)
viz.plot_usage(norms, 5, which="k", ax=axes[1], logy=True)
plt.show()
third = norms.q.shape[-1] // 3
low_share = (norms.q[..., -third:].sum(-1) / norms.q.sum(-1)).mean()
print(f"share of query norm in the slowest third of frequencies, averaged over heads: {low_share:.1%}")
"""),
("md", r"""
## The relative form: content and rotation

With φ = (j − n)·θ_f, each term splits into a *content* part `s(q_a k_a + q_b k_b)·cos φ` and
a *rotation* part `s(q_b k_a − q_a k_b)·sin φ`. For slow frequencies over a short prompt φ is
tiny, so almost everything is content; fast frequencies mix both.
"""),
("code", r"""
fl = lp.frequency_logits(model, tokens, 5, heads=[0], relative=True)
mask = fl.mask[0]
cos_part = fl.cos_terms[0, 0, 0][mask].norm(dim=0)
sin_part = fl.sin_terms[0, 0, 0][mask].norm(dim=0)
ax = viz.plot_frequency_profile(cos_part, fl.angles, label="content (cos φ)", logy=True)
viz.plot_frequency_profile(sin_part + 1e-9, fl.angles, ax=ax, label="rotation (sin φ)",
                           ylabel="norm over keys", logy=True)
ax.set_title("head 5.0, last token: the two parts of each frequency's logits")
plt.show()
print("cos + sin = terms:", torch.allclose(fl.cos_terms + fl.sin_terms, fl.terms, atol=1e-5))
"""),
]
