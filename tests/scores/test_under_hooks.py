"""Swap scores of a hooked model: the exact method equals the re-run, or refuses (issue 27).

Inside every intervention the toolkit offers, and under a user's hook on ``hook_q``,
``hook_k``, ``hook_rot_q`` and ``hook_rot_k``, the closed form either computes what the
re-run of the hooked model computes (to float64 rounding), or raises
:class:`~lens_possym.errors.ExactUnderHooksError` naming the hook and ``method='rerun'``;
never a silently different number (before: differences of 0.18 to 0.49).
"""

from __future__ import annotations

import pytest
import torch

import lens_possym as lp
from lens_possym.errors import ExactUnderHooksError
from lens_possym.interventions import (FrequencyGate, ablate_frequencies, ablate_heads,
                                       frequency_means, patch_frequencies, patch_heads,
                                       permute_content)
from lens_possym.scores import declare_hook, swap_scores
from tests.helpers import hooks_attached

PROMPT = "Alice likes red . Bob likes blue . Carol likes green . What"
OTHER = "Dave likes pink . Erin likes gold . Fred likes teal . Where"
LAYER = 1
TOL = 1e-5
SCORE = dict(layers=[LAYER], tau=1e-2, exclude_bos=False, exclusion=False)


@pytest.fixture(scope="module")
def model():
    return lp.tiny_model("llama", dtype=torch.float64)  # 4 query heads, 2 KV heads


@pytest.fixture(scope="module")
def tokens(model):
    return model.to_tokens(PROMPT)


def _interventions(model, tokens):
    """Every intervention of the toolkit at the scored layer, as context managers."""
    other = model.to_tokens(OTHER)
    assert other.shape == tokens.shape
    spec = lp.rope_spec(model, LAYER)
    pooled = frequency_means(model, [PROMPT, OTHER], [LAYER])
    per_pos = frequency_means(model, [PROMPT, OTHER], [LAYER], per_position=True)
    n = tokens.shape[1]
    perm = torch.arange(n)
    perm[[2, 5]] = perm[[5, 2]]
    gate_q = FrequencyGate(spec, kind="fixed", init=torch.rand(spec.n_heads, spec.n_freqs))
    gate_k = FrequencyGate(spec, kind="fixed", init=torch.rand(spec.n_kv_heads, spec.n_freqs),
                           side="k")
    ab = lambda sel, mode, **kw: ablate_frequencies(model, sel, mode, **kw)  # noqa: E731
    return {
        "zero q": ab(f"{LAYER}.*", "zero", freqs="low"),
        "zero k (whole KV groups)": ab(f"{LAYER}.*", "zero", freqs="low", side="k"),
        "zero k (part of a KV group)": ab(f"{LAYER}.1", "zero", freqs="0:3", side="k"),
        "zero qk, part of a group": ab({f"{LAYER}.0": "high", f"{LAYER}.3": "mid"}, "zero",
                                       side="qk"),
        "pooled mean q": ab(f"{LAYER}.*", "mean", freqs="mid", means=pooled),
        "pooled mean k": ab(f"{LAYER}.*", "mean", freqs="mid", side="k", means=pooled),
        "pooled mean k, part of a group": ab(f"{LAYER}.2", "mean", freqs="mid", side="k",
                                             means=pooled),
        "per-position mean q": ab(f"{LAYER}.*", "mean", freqs="low", means=per_pos,
                                  per_position=True),
        "per-position mean k": ab(f"{LAYER}.*", "mean", freqs="low", side="k",
                                  means=per_pos, per_position=True),
        "per-position mean k, part of a group": ab(f"{LAYER}.0", "mean", freqs="low",
                                                   side="k", means=per_pos,
                                                   per_position=True),
        "unrotate": ab(f"{LAYER}.*", "unrotate", freqs="high"),
        "unrotate, part of a group": ab(f"{LAYER}.1", "unrotate", freqs="high"),
        "gate q": model.hooks(fwd_hooks=gate_q.fwd_hooks()),
        "gate k": model.hooks(fwd_hooks=gate_k.fwd_hooks()),
        "patch frequencies q": patch_frequencies(model, other, f"{LAYER}.*", freqs="low"),
        "patch frequencies k": patch_frequencies(model, other, f"{LAYER}.*", freqs="low",
                                                 side="k"),
        "patch heads": patch_heads(model, other, f"{LAYER}.0,0.1"),
        "ablate heads": ablate_heads(model, f"{LAYER}.2,0.0"),
        "permute content (resid)": permute_content(model, LAYER, perm),
        "permute content (k)": permute_content(model, LAYER, perm, what="k"),
        "permute content (kv)": permute_content(model, LAYER, perm, what="kv"),
        "an earlier layer's unrotate": ab("0.*", "unrotate", freqs="all"),
    }


# what must happen: "equal" (exact == rerun) or "refused" (exact raises)
EXPECTED = {
    "zero q": "equal", "zero k (whole KV groups)": "equal",
    "zero k (part of a KV group)": "equal", "zero qk, part of a group": "equal",
    "pooled mean q": "equal", "pooled mean k": "equal",
    "pooled mean k, part of a group": "equal", "per-position mean q": "equal",
    "per-position mean k": "refused", "per-position mean k, part of a group": "refused",
    "unrotate": "refused", "unrotate, part of a group": "refused",
    "gate q": "equal", "gate k": "equal",
    "patch frequencies q": "equal", "patch frequencies k": "refused",
    "patch heads": "equal", "ablate heads": "equal",
    "permute content (resid)": "equal", "permute content (k)": "refused",
    "permute content (kv)": "refused", "an earlier layer's unrotate": "equal",
}


def _compare(model, tokens, context, expected, **extra):
    before = hooks_attached(model)
    with context:
        rerun = swap_scores(model, tokens, method="rerun", batch_size=50, **SCORE, **extra)
        if expected == "refused":
            with pytest.raises(ExactUnderHooksError, match="method='rerun'"):
                swap_scores(model, tokens, **SCORE, **extra)
            exact = None
        else:
            exact = swap_scores(model, tokens, **SCORE, **extra)
    assert hooks_attached(model) == before
    plain = swap_scores(model, tokens, **SCORE, **extra)
    return exact, rerun, plain


def test_every_intervention_is_listed(model, tokens):
    assert sorted(_interventions(model, tokens)) == sorted(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_exact_equals_rerun_inside_an_intervention_or_refuses(model, tokens, name):
    context = _interventions(model, tokens)[name]
    exact, rerun, plain = _compare(model, tokens, context, EXPECTED[name])
    for field in ("pos", "sym", "pos_freq", "sym_freq"):
        assert getattr(rerun, field)[LAYER].isfinite().all()
        if exact is not None:
            diff = float((getattr(exact, field) - getattr(rerun, field))[LAYER].abs().max())
            assert diff <= TOL, (name, field, diff)


def test_the_interventions_change_the_scores(model, tokens):
    """The comparison above can fail: most interventions move the re-run's scores."""
    moved = []
    for name, context in _interventions(model, tokens).items():
        _, rerun, plain = _compare(model, tokens, context, EXPECTED[name])
        if float((rerun.pos - plain.pos)[LAYER].abs().max()) > 1e-3:
            moved.append(name)
    assert len(moved) >= 12, moved
    assert "per-position mean k" in moved and "unrotate" in moved


def test_partial_key_edits_are_read_by_both_methods(model, tokens):
    """A key edit for one head of a KV group leaves the model's pattern alone and
    recomputes the head at hook_z; both methods score the edited head, not the pattern
    the model's hook shows."""
    with ablate_frequencies(model, f"{LAYER}.1", "zero", freqs="all", side="k"):
        exact = swap_scores(model, tokens, **SCORE)
        rerun = swap_scores(model, tokens, method="rerun", **SCORE)
    plain = swap_scores(model, tokens, **SCORE)
    assert float((exact.pos - rerun.pos)[LAYER].abs().max()) <= TOL
    # all of head 1's keys zeroed: uniform attention over the visible keys
    assert float((exact.pos - plain.pos)[LAYER, 1].abs()) > 1e-2
    assert torch.equal(exact.pos[LAYER, [0, 2, 3]], plain.pos[LAYER, [0, 2, 3]])


def _user_hooks(spec):
    def add_by_position(tensor, hook):  # edits each row by its position
        pos = torch.arange(tensor.shape[1], dtype=tensor.dtype)
        shape = [1, -1] + [1] * (tensor.ndim - 2)
        return tensor + 0.3 * torch.sin(pos).view(shape)

    def scale(tensor, hook):  # the same for every row
        return tensor * 1.7

    return {"position": add_by_position, "scale": scale}


@pytest.mark.parametrize("point", ["hook_q", "hook_k", "hook_rot_q", "hook_rot_k"])
@pytest.mark.parametrize("kind", ["position", "scale", "declared scale"])
def test_a_user_hook_on_q_k_or_the_rotation(model, tokens, point, kind):
    """An undeclared user hook on the points the exact method reads is refused; one
    declared to edit every row alike is read through, and equals the re-run."""
    spec = lp.rope_spec(model, LAYER)
    fn = _user_hooks(spec)["scale" if "scale" in kind else kind]
    if kind == "declared scale":
        fn = declare_hook(fn, "position_free")
    name = f"blocks.{LAYER}.attn.{point}"
    readable = kind == "declared scale" and point in ("hook_q", "hook_k")
    extra = {} if point in ("hook_q", "hook_k") else dict(per_frequency=False, check=False)
    context = model.hooks(fwd_hooks=[(name, fn)])
    exact, rerun, plain = _compare(model, tokens, context, "equal" if readable else "refused",
                                   **extra)
    assert rerun.pos[LAYER].isfinite().all()
    if readable:
        assert float((exact.pos - rerun.pos)[LAYER].abs().max()) <= TOL
        assert float((exact.sym - rerun.sym)[LAYER].abs().max()) <= TOL
    if kind == "position":
        assert float((rerun.pos - plain.pos)[LAYER].abs().max()) > 1e-3


def test_a_permanent_hook_is_seen_too_and_the_message_names_it(model, tokens):
    point = model.hook_dict[f"blocks.{LAYER}.attn.hook_k"]

    def my_key_hook(tensor, hook):
        return tensor.flip(1)  # mixes rows

    point.add_hook(my_key_hook, is_permanent=True)
    try:
        with pytest.raises(ExactUnderHooksError, match="hook_k.*my_key_hook.*method='rerun'"):
            swap_scores(model, tokens, **SCORE)
    finally:
        model.reset_hooks(including_permanent=True)
    swap_scores(model, tokens, **SCORE)  # gone: scored again


def test_the_rerun_refuses_what_it_cannot_read(model, tokens):
    """Theorem 1's exclusion has only a closed form, and per-frequency terms are read from
    q and k: under hooks they cannot see, the re-run refuses them too (whole-head scores
    re-run fine)."""
    fn = _user_hooks(None)["position"]
    with model.hooks(fwd_hooks=[(f"blocks.{LAYER}.attn.hook_k", fn)]):
        with pytest.raises(ExactUnderHooksError, match="exclusion=False"):
            swap_scores(model, tokens, method="rerun", **dict(SCORE, exclusion=True))
    with model.hooks(fwd_hooks=[(f"blocks.{LAYER}.attn.hook_rot_k", fn)]):
        with pytest.raises(ExactUnderHooksError, match="per_frequency=False"):
            swap_scores(model, tokens, method="rerun", **SCORE, check=False)
        swap_scores(model, tokens, method="rerun", per_frequency=False, check=False, **SCORE)
