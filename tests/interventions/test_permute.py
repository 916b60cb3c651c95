"""Content permutations at a layer: the scores' swap, keys/values only, and checks."""

from __future__ import annotations

import pytest
import torch

import lens_possym as lp
from lens_possym.errors import InvalidSelectionError
from lens_possym.interventions import (
    permute_content_hooks,
    permute_content,
    permute_content_hook,
    swap_permutation,
)
from tests.helpers import PROMPT, hooks_attached


def test_swap_permutation():
    assert swap_permutation(5, 1, 3).tolist() == [0, 3, 2, 1, 4]
    assert swap_permutation(3, 2, 2).tolist() == [0, 1, 2]
    with pytest.raises(InvalidSelectionError, match="cannot swap positions 1 and 5"):
        swap_permutation(5, 1, 5)


def test_permuting_the_first_layer_input_is_permuting_the_tokens(tiny):
    """Layer 0's input is the token embedding, row by row: moving its rows is moving tokens."""
    tokens = tiny.to_tokens(PROMPT)
    perm = torch.randperm(tokens.shape[1], generator=torch.Generator().manual_seed(0))
    with permute_content(tiny, 0, perm):
        moved = tiny(tokens)
    assert torch.equal(moved, tiny(tokens[:, perm]))
    assert hooks_attached(tiny) == 0


def test_moving_keys_and_values_equals_moving_the_layer_input_for_a_fixed_query(tiny):
    """With the last position fixed, its attention row is the same whether the whole layer
    input moves ("resid", the scores' procedure) or only the keys and values ("kv")."""
    tokens = tiny.to_tokens(PROMPT)
    n = tokens.shape[1]
    spec = lp.rope_spec(tiny, 1)
    perm = torch.arange(n)
    perm[:-1] = torch.randperm(n - 1, generator=torch.Generator().manual_seed(1))
    names = [spec.pattern_hook, "blocks.1.attn.hook_z"]
    rows = {}
    for what in ("resid", "kv"):
        with permute_content(tiny, 1, perm, what=what):
            _, cache = tiny.run_with_cache(tokens, names_filter=names)
        rows[what] = [cache[name][..., -1, :] if name == spec.pattern_hook else cache[name][:, -1]
                      for name in names]
    _, clean = tiny.run_with_cache(tokens, names_filter=names)
    for a, b in zip(rows["resid"], rows["kv"]):
        assert torch.allclose(a, b, atol=1e-6)
    assert not torch.allclose(rows["kv"][0], clean[spec.pattern_hook][..., -1, :], atol=1e-4)


def test_moving_keys_only_moves_the_logits_not_what_is_read(tiny_by_family):
    model = tiny_by_family["gemma3"]  # keys at hook_k_normed: [batch, head, pos, d_head]
    spec = lp.rope_spec(model, 2)
    tokens = model.to_tokens(PROMPT)
    n = tokens.shape[1]
    perm = swap_permutation(n, 2, 6)
    hooks = permute_content_hooks(model, 2, perm, what="k")
    assert [name for name, _ in hooks] == [spec.k_hook]
    with model.hooks(fwd_hooks=hooks):
        _, moved = model.run_with_cache(tokens, names_filter=[spec.k_hook, "blocks.2.attn.hook_v"])
    _, clean = model.run_with_cache(tokens, names_filter=[spec.k_hook, "blocks.2.attn.hook_v"])
    assert torch.equal(moved[spec.k_hook], clean[spec.k_hook][:, :, perm])
    assert torch.equal(moved["blocks.2.attn.hook_v"], clean["blocks.2.attn.hook_v"])


def test_one_permutation_per_prompt(tiny_by_family):
    model = tiny_by_family["llama"]
    tokens = model.to_tokens([PROMPT, PROMPT.replace("Bob", "Dave")])
    n = tokens.shape[1]
    perms = torch.stack([swap_permutation(n, 1, 2), swap_permutation(n, 3, 8)])
    with permute_content(model, 0, perms):
        both = model(tokens)
    for b in range(2):
        assert torch.equal(both[b], model(tokens[b:b + 1, perms[b]])[0])


def test_bad_permutations(tiny_by_family):
    model = tiny_by_family["llama"]
    tokens = model.to_tokens(PROMPT)
    n = tokens.shape[1]
    for bad, message in [(torch.zeros(n, dtype=torch.long), "is not a permutation"),
                         (torch.arange(n - 1), f"pos = {n} and batch = 1"),
                         (torch.arange(n).float(), "must be integer")]:
        with pytest.raises(InvalidSelectionError, match=message):
            with permute_content(model, 1, bad):
                model(tokens)
    with pytest.raises(InvalidSelectionError, match="unknown permutation target 'q'"):
        permute_content_hooks(model, 1, torch.arange(n), what="q")
    with pytest.raises(InvalidSelectionError, match="layer 9 out of range"):
        permute_content_hooks(model, 9, torch.arange(n))
    assert hooks_attached(model) == 0
    hook = permute_content_hook([1, 0, 2])
    x = torch.arange(6.0).reshape(1, 3, 2)
    assert hook(x).tolist() == [[[2.0, 3.0], [0.0, 1.0], [4.0, 5.0]]]
