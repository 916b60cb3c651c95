"""What every number in a report means: one label and one sentence per key.

Reports show a result's keys (``median_exclusion_ratio``, ``n_blocks``, ...) by the label
and explanation given here, so a number is never shown raw and unexplained; a key that is
not listed is shown as is (``describe`` makes a label from it). Keep explanations short and
true to ``docs/scores.md`` and ``docs/interventions.md``.
"""

from __future__ import annotations
from .._checks import boundary

__all__ = ["TERMS", "describe"]

TERMS: dict[str, tuple[str, str]] = {
    # ---- scores (paper A) -------------------------------------------------------------
    "s_POS": ("s_POS (positional score)",
              "How much the last token's attention stays with the key *positions* when the "
              "contents of two positions are swapped: a cosine between the attention before "
              "and after, weighted towards the swaps that move most attention. 1 = the head "
              "attends by position only."),
    "s_SYM": ("s_SYM (symbolic score)",
              "The same cosine against the attention with the two weights exchanged: 1 = the "
              "attention moves with the content (the head attends by symbol). A head with "
              "uniform attention scores 1 on both (no focus)."),
    "per_frequency": ("per-frequency scores",
                      "Each RoPE frequency id scored as a 2-D head of its own: its term of the "
                      "attention logits, softmaxed over the keys, with the same swaps."),
    "frequency_id": ("frequency id",
                     "Index of a RoPE rotation pair; 0 is the fastest rotation (largest angle "
                     "θ per token), higher ids rotate slower; a partial-rotary tail is the last "
                     "id with θ = 0."),
    "theta": ("θ (rad/token)",
              "The angle a frequency pair turns per token of distance: θ_f = base^(−2f/R)."),
    "logit_share": ("logit share",
                    "A frequency's share of the head's logit row: the norm of its logit term "
                    "over the keys the last token sees, divided by the sum over frequencies "
                    "(first prompt). Shows which frequencies carry the head's attention."),
    "exclusion_ratio": ("Var/bound",
                        "Theorem 1 (exclusion principle): the variance of the head's logits "
                        "divided by the largest variance that the positional and symbolic "
                        "parts allow. Near 1: the logits use both; near 0: the head is "
                        "close to uniform."),
    "positional_share": ("positional share",
                         "S_sym / (S_pos + S_sym) of Theorem 1's sums (S_sym: how much the "
                         "logits move when a key keeps its content and changes position): "
                         "1 when the logits depend on position only, 0 when on content "
                         "only; it points the way s_POS does."),
    "n_heads_scored": ("heads scored", "Attention heads (query heads) with scores."),
    "first_half_layers": ("first half: layers", "The first half of the scored layers."),
    "second_half_layers": ("second half: layers", "The second half of the scored layers."),
    "median_pos_first_half": ("median s_POS, first half",
                              "Median over the heads of the first half of the layers (paper A: "
                              "0.83 on gemma-2-2b-it, early layers more positional)."),
    "median_pos_second_half": ("median s_POS, second half",
                               "Median over the heads of the second half (paper A: 0.56)."),
    "median_sym_first_half": ("median s_SYM, first half",
                              "Median s_SYM over the heads of the first half of the layers."),
    "median_sym_second_half": ("median s_SYM, second half",
                               "Median s_SYM over the heads of the second half."),
    "pearson_pos_sym": ("Pearson r(s_POS, s_SYM)",
                        "Correlation of the two scores over heads (paper A: −0.91: a head is "
                        "mostly one or the other, the exclusion principle)."),
    "sym_low_minus_high_freq": ("s_SYM: slow minus fast frequencies",
                                "Mean over heads of s_SYM on the slowest third of frequency "
                                "ids minus the fastest third (paper A: slow frequencies are "
                                "more symbolic, so positive)."),
    "pos_low_minus_high_freq": ("s_POS: slow minus fast frequencies",
                                "The same for s_POS (paper A: negative, fast frequencies are "
                                "positional)."),
    "median_exclusion_ratio": ("median Var/bound",
                               "Median over heads of Var/bound (see Var/bound)."),
    # ---- binding task --------------------------------------------------------------------
    "accuracy": ("accuracy",
                 "Share of prompts whose top next token is the bound attribute."),
    "candidate_accuracy": ("accuracy among the prompt's attributes",
                           "Share of prompts where the bound attribute beats the other "
                           "attributes named in the prompt."),
    "logit_diff": ("logit difference",
                   "Logit of the bound attribute minus the mean logit of the prompt's other "
                   "attributes, mean over prompts."),
    "loss": ("loss", "Cross-entropy of the answer token (your prompts: each prompt's last "
             "token, predicted from the tokens before it), mean over prompts; lower is "
             "better."),
    "n_pairs": ("bindings per prompt", "Entity-attribute pairs in each prompt."),
    "name": ("task", "The prompts scored."),
    "seed": ("seed", "Seed of the prompt generator."),
    "n_tokens": ("tokens per prompt", "Length of every prompt in tokens."),
    "n_prompts": ("prompts", "Number of prompts the numbers are averaged over."),
    # ---- score settings (ScoreConfig) ----------------------------------------------------
    "method": ("method",
               "exact: all swaps at once in closed form; rerun: swap the layer input and run "
               "the block again (the reference procedure)."),
    "swap": ("swap kind",
             "token: every pair of key positions before the query; block: contiguous blocks "
             "of positions swapped whole."),
    "n_blocks": ("blocks", "Number of contiguous blocks the keys are cut into (block swaps)."),
    "tau": ("τ (swap-weight temperature)",
            "Swap weights are softmax(|a_i − a_j| / τ): small τ lets the swap that moves most "
            "attention decide."),
    "cosine": ("cosine", "How a swap's cosine treats the attention masses (docs/scores.md)."),
    "exclude_bos": ("leave out BOS", "Position 0 (an attention sink) is not swapped."),
    "query_position": ("query position", "The query row scored (−1: the last token)."),
    "exclusion": ("Theorem 1 numbers", "Var/bound and positional share were computed."),
    "check": ("checked", "Frequency terms checked to add up to the model's scores per layer."),
    "dtype": ("dtype", "Computation dtype of the exact method."),
    "batch_size": ("re-run batch", "Swaps per re-run batch (method rerun)."),
    "max_elements": ("memory bound", "Largest intermediate of the exact method, in elements."),
    # ---- interventions -------------------------------------------------------------------
    "mode": ("ablation mode",
             "zero: the pair set to 0; mean: replaced by its mean over reference prompts; "
             "unrotate: the rotation removed (position information gone, content kept)."),
    "side": ("side", "Which vectors are edited: q (queries), k (keys) or qk (both)."),
    "band": ("band", "A set of frequency ids ablated together; high = the fastest third of "
             "ids, middle, low = the slowest third."),
    "effect": ("effect", "Metric with the intervention (ablation or patch) minus the metric "
               "without it (intervened − baseline: every effect in lens-possym has this "
               "sign), per prompt, then averaged over prompts."),
    "bands": ("bands", "The frequency bands each head was ablated in, one at a time."),
    "per_position": ("per-position means", "mode mean: one mean per position, not pooled."),
    "last_token_only": ("last token only", "Only the last position's logits were computed."),
    "selection": ("ablated", "Heads and the frequency ids taken from each."),
    # ---- patching and uncertainty ---------------------------------------------------------
    "normalized_logit_diff": ("normalised logit difference",
                              "logit(clean answer) − logit(corrupted answer) at the last "
                              "position, rescaled so that the unpatched corrupted run averages "
                              "0 and the clean run 1."),
    "corruption": ("corruption", "How the corrupted prompts differ from the clean ones "
                   "(docs/patching.md): the answer changes, the token length does not."),
    "changed_positions": ("changed positions", "Positions where a clean and a corrupted "
                          "prompt hold different tokens."),
    "corruption_seed": ("corruption seed", "Seed of the corruption's draws."),
    "denoise": ("denoising", "Patching clean activations into the corrupted run: which "
                "activations restore the clean answer."),
    "noise": ("noising", "Patching corrupted activations into the clean run: which "
              "activations destroy the clean answer."),
    "direction": ("direction", "denoise: clean activations into the corrupted run; noise: "
                  "corrupted activations into the clean run."),
    "site": ("patched", "heads: a head's output (hook_z); frequencies: one RoPE pair of a "
             "head's query or key; resid_pre / attn_out / mlp_out: a layer's residual input, "
             "attention output, MLP output."),
    "patch_per_position": ("one cell per position",
                           "Each position patched alone instead of all at once."),
    "patches_per_pass": ("patches per pass", "Cells patched together in one forward pass "
                         "(each on its own copy of the batch)."),
    "per_prompt_normalization": ("per-prompt normalisation", "Each prompt normalised by its "
                                 "own clean and corrupted runs instead of the means."),
    "value": ("value", "The metric with that cell patched, averaged over prompts."),
    "standard_error": ("standard error", "Spread of the mean over prompts: standard deviation "
                       "/ √n (unbiased)."),
    "effect_standard_error": ("effect standard error", "Standard error of the per-prompt "
                              "effect (a paired difference)."),
    "bootstrap_interval": ("95% bootstrap interval", "Percentile interval of the mean over "
                           "1000 resamplings of the prompts with replacement (ci_low, "
                           "ci_high). A constant gives a point; few prompts give wide, "
                           "skewed intervals."),
    "ci_low": ("95% interval: low", "Lower end of the bootstrap interval of the mean."),
    "ci_high": ("95% interval: high", "Upper end of the bootstrap interval of the mean."),
    "p_value": ("p", "Sign-flip permutation p-value that the mean effect is 0 (exact for 12 "
                "prompts or fewer)."),
    "change_se": ("change: standard error", "Standard error over prompts of the per-prompt "
                  "change (after − before)."),
    # ---- toy sweeps ----------------------------------------------------------------------
    "test_accuracy": ("test accuracy", "Accuracy of the trained toy model on held-out data."),
    "edges_minus_middle": ("edges − middle",
                           "Accuracy at the first and last quarter of answer positions minus "
                           "in the middle: positive is U-shaped."),
}


@boundary
def describe(key: str) -> tuple[str, str]:
    """``(label, explanation)`` of a key; an unknown key gets a label made from its name."""
    if key in TERMS:
        return TERMS[key]
    if key.startswith("task "):
        label, note = describe(key[5:])
        return f"task: {label}", note
    return key.replace("_", " "), ""
