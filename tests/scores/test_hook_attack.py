"""The hook attack (issue 39): whatever hook is attached wherever, the exact method
returns the re-run's number of the same hooked model (within 1e-5) or refuses.

Hook kinds: multiply (a constant factor), add (a per-position vector), scale (a
per-position factor), row mix (each row mixed with its neighbour); on TransformerLens hook
points upstream of and inside the scored layer (the embeddings, ``blocks.0.hook_resid_pre``
— before the swap at the content and input sites —, the layer's input, norm, q and k), on
the rotary tables (``rotary_emb.hook_cos``/``hook_sin``, and one layer's ``hook_cos``
edited in place: the tensor every layer shares), as PyTorch forward and forward-pre hooks
on the wrapped Hugging Face modules (norm, q/k projections, rotary embedding, token
embedding), and as a global module hook; both ``check`` settings, every site, layers 0
and 1, every tiny family. Before: 0.04-0.67 off, silently (PyTorch hooks, rotary tables,
``blocks.0.hook_resid_pre`` at the content site).

Every target x site x layer x ``check`` runs on one family (``FULL``, each target meeting
every kind); every other family runs half the target x site pairs with the kind and the
layer rotating, so each family still meets every hook kind, target, site, both layers and
both ``check`` settings (``_cases``; the whole cross product on every family took 51 s).
"""

from __future__ import annotations

import contextlib
import itertools

import pytest
import torch

import lens_possym as lp
from lens_possym.errors import (DecompositionMismatchError, ExactUnderHooksError,
                                InvalidSelectionError, LensPossymError)
from lens_possym.models.tiny_schemes import tiny_scheme_model
from lens_possym.scores import declare_hook, swap_scores
from lens_possym.scores.guards import module_hooks
from tests.helpers import hooks_attached

PROMPT = "Alice likes red . Bob likes blue . Carol"
KINDS = ("multiply", "add", "scale", "rowmix")
SITES = ("layer", "content", "input")
TOL = 1e-5
FULL = "llama"


def _edit(kind, t, inplace=False):
    if not torch.is_tensor(t) or not t.is_floating_point() or t.ndim < 2:
        return t
    pos = torch.arange(t.shape[1], dtype=t.dtype).view([1, -1] + [1] * (t.ndim - 2))
    new = {"multiply": lambda: t * 1.7, "add": lambda: t + 0.3 * torch.sin(1.3 * pos),
           "scale": lambda: t * (1 + 0.2 * torch.cos(pos)),
           "rowmix": lambda: 0.6 * t + 0.4 * t.roll(1, dims=1)}[kind]()
    if inplace:
        t.copy_(new)
        return None
    return new


def _each(kind, out):
    return tuple(_edit(kind, o) for o in out) if isinstance(out, tuple) else _edit(kind, out)


_NORM = ("input_layernorm._original_component", "ln_1._original_component")
TARGETS = {
    "hook_embed": ("tl", "hook_embed"),
    "resid_pre 0": ("tl", "blocks.0.hook_resid_pre"),
    "resid_pre L": ("tl", "blocks.{L}.hook_resid_pre"),
    "ln1 L": ("tl", "blocks.{L}.ln1.hook_normalized"),
    "hook_k L": ("tl", "blocks.{L}.attn.hook_k"),
    "rotary cos": ("tl", "rotary_emb.hook_cos"),
    "rotary sin": ("tl", "rotary_emb.hook_sin"),
    "cos of layer 0, in place": ("tl", "blocks.0.attn.hook_cos"),
    "torch norm L": ("forward", (_NORM, "L")),
    "torch norm 0": ("forward", (_NORM, "0")),
    "torch q L": ("forward", (("q_proj._original_component", "attention.q._original_component"),
                              "L")),
    "torch k L": ("forward", (("k_proj._original_component", "attention.qkv._original_component"),
                              "L")),
    "torch rotary": ("forward", (("rotary_emb._original_component",), None)),
    "torch embed": ("forward", (("embed._original_component",), None)),
    "torch pre-hook norm L": ("pre", (_NORM, "L")),
    "global embedding hook": ("global", None),
}


def _module(model, suffixes, layer):
    for name, module in model.named_modules():
        inside = name.startswith(f"blocks.{layer}.") if layer is not None \
            else not name.startswith("blocks")
        if inside and name.endswith(suffixes):
            return name, module
    return None, None


@contextlib.contextmanager
def _attached(model, target, kind, layer):
    """Attach the attack; yields the name the refusal must mention (None: no such point)."""
    how, what = target
    handle = None
    if how == "tl":
        name = what.format(L=layer)
        if name not in model.hook_dict:
            yield None
            return
        inplace = "in place" in name or name.endswith(".attn.hook_cos") and name != \
            f"blocks.{layer}.attn.hook_cos"
        with model.hooks(fwd_hooks=[(name, lambda t, hook: _edit(kind, t, inplace))]):
            yield name
        return
    if how == "global":
        def on_embeddings(module, args, out):
            return _each(kind, out) if isinstance(module, torch.nn.Embedding) else None
        handle = torch.nn.modules.module.register_module_forward_hook(on_embeddings)
        name = "(global)"
    else:
        suffixes, where = what
        name, module = _module(model, suffixes, {"L": layer, "0": 0, None: None}[where])
        if module is None:
            yield None
            return
        if how == "forward":
            handle = module.register_forward_hook(lambda m, a, out: _each(kind, out))
        else:
            handle = module.register_forward_pre_hook(
                lambda m, args: tuple(_edit(kind, a) for a in args))
    try:
        yield name
    finally:
        handle.remove()


def _model(family):
    if family in lp.models.TINY_FAMILIES:
        return lp.tiny_model(family, dtype=torch.float64)
    return tiny_scheme_model(family, dtype=torch.float64)


def _settings(site, layer, **extra):
    return dict(layers=[layer], tau=1e-2, exclude_bos=False, exclusion=False,
                per_frequency=False, swap_site=site, **extra)


def _cases(family):
    """(label, target, kind, site, layer). On ``FULL``: every target x site x layer, the
    kind rotating (each target meets every kind). Elsewhere: half the target x site pairs
    (each target at one or two sites, each site with half the targets), the kind and the
    layer rotating."""
    j = 0
    for t, (label, target) in enumerate(TARGETS.items()):
        for s, site in enumerate(SITES):
            layers = (0, 1) if family == FULL else ((j // len(KINDS)) % 2,) \
                if (t + s) % 2 == 0 else ()
            for layer in layers:
                yield label, target, KINDS[j % len(KINDS)], site, layer
                j += 1


def test_the_cases_cover_every_kind_site_layer_and_target():
    for family in (FULL, "gptj"):
        cases = list(_cases(family))
        for column, values in ((2, KINDS), (3, SITES), (4, (0, 1)), (0, tuple(TARGETS))):
            assert {c[column] for c in cases} == set(values), (family, column)
        assert {(c[2], c[3]) for c in cases} == set(itertools.product(KINDS, SITES))
    assert {(c[0], c[2]) for c in _cases(FULL)} == set(itertools.product(TARGETS, KINDS))


@pytest.mark.parametrize("family", tuple(lp.models.TINY_FAMILIES) + ("gpt2",))
def test_exact_equals_the_hooked_rerun_or_refuses(family):
    model = _model(family)
    tokens = model.to_tokens(PROMPT)
    before = hooks_attached(model)
    counts = {"equal": 0, "refused": 0}
    for label, target, kind, site, layer in _cases(family):
        with _attached(model, target, kind, layer) as name:
            if name is None:
                continue
            rerun = None
            for check in (True, False):
                try:
                    exact = swap_scores(model, tokens, method="exact",
                                        **_settings(site, layer, check=check))
                except ExactUnderHooksError as exc:
                    assert name.split("._original_component")[0] in str(exc) \
                        or name in str(exc), (label, str(exc))
                    counts["refused"] += 1
                    continue
                except (InvalidSelectionError, DecompositionMismatchError):
                    counts["refused"] += 1  # no closed form at this site; a caught misread
                    continue
                if rerun is None:
                    rerun = swap_scores(model, tokens, method="rerun", batch_size=64,
                                        **_settings(site, layer))
                diff = max(float((exact.pos - rerun.pos)[layer].abs().max()),
                           float((exact.sym - rerun.sym)[layer].abs().max()))
                assert diff <= TOL, (family, label, kind, site, layer, check, diff)
                counts["equal"] += 1
    assert hooks_attached(model) == before and not module_hooks(model)
    least = (30, 120) if family == FULL else (4, 20)
    assert counts["equal"] >= least[0] and counts["refused"] >= least[1], counts


def test_a_hook_declared_observe_is_read_through():
    model = lp.tiny_model("llama", dtype=torch.float64)
    tokens = model.to_tokens(PROMPT)
    seen = []
    module = _module(model, _NORM, 1)[1]
    handle = module.register_forward_hook(declare_hook(lambda m, a, out: seen.append(1),
                                                       "observe"))
    try:
        hooked = swap_scores(model, tokens, **_settings("layer", 1))
    finally:
        handle.remove()
    plain = swap_scores(model, tokens, **_settings("layer", 1))
    assert seen and torch.equal(hooked.pos[1], plain.pos[1])


def test_the_rotary_tables_are_refused_for_per_frequency_reruns_too():
    """An undeclared hook on the model's rotary tables may edit them: the per-frequency
    re-run (terms read from q and k with the model's tables) refuses it, as does the exact
    method with check=False; a table edit that moves the angles is caught either way."""
    model = lp.tiny_model("llama", dtype=torch.float64)
    tokens = model.to_tokens(PROMPT)
    with model.hooks(fwd_hooks=[("rotary_emb.hook_cos", lambda t, hook: t)]):
        with pytest.raises(ExactUnderHooksError, match="rotary_emb.hook_cos"):
            swap_scores(model, tokens, method="rerun", layers=[1], exclusion=False, tau=1e-2)
        with pytest.raises(ExactUnderHooksError, match="rotary_emb.hook_cos"):
            swap_scores(model, tokens, layers=[1], exclusion=False, check=False, tau=1e-2)
    with _attached(model, TARGETS["rotary cos"], "scale", 1):
        with pytest.raises(LensPossymError):
            swap_scores(model, tokens, method="rerun", layers=[1], exclusion=False, tau=1e-2)
