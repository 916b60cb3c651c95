"""Interventions as data: a spec attaches exactly the hooks of the call it describes,
prints, survives JSON, is validated when made, and replays a sweep's cells."""

from __future__ import annotations

import json

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import lens_possym as lp
from tests.helpers import PROMPT, hooks_attached
from lens_possym.errors import InvalidSelectionError
from lens_possym.interventions import (
    Intervention,
    InterventionSpec,
    ablate_frequencies,
    band_sweep,
    parse_freqs,
    parse_selection,
    patch_heads,
    permute_content,
)
from lens_possym.interventions.selection import freqs_label, heads_label


@pytest.fixture(scope="module")
def llama():
    return lp.tiny_model("llama")


def _logits(model, tokens):
    with torch.no_grad():
        return model(tokens)


@pytest.mark.parametrize("mode", ["zero", "mean", "unrotate"])
def test_spec_equals_the_call_it_describes(llama, mode):
    tokens = llama.to_tokens(PROMPT)
    selection = {"1.0": "0:3", (1, 2): "low", "0.*": [5, 7]}
    kwargs = {"reference": tokens} if mode == "mean" else {}
    spec = Intervention("ablate_frequencies", selection, mode=mode)
    with spec.apply(llama, **kwargs):
        by_spec = _logits(llama, tokens)
    with ablate_frequencies(llama, selection, mode, **kwargs):
        by_call = _logits(llama, tokens)
    assert torch.equal(by_spec, by_call)
    assert not torch.equal(by_call, _logits(llama, tokens))
    assert not hooks_attached(llama)


def test_patch_and_permute_specs(llama):
    clean, corrupt = llama.to_tokens(PROMPT), llama.to_tokens(PROMPT.replace("Bob", "Dave"))
    _, cache = llama.run_with_cache(clean)
    spec = InterventionSpec([Intervention("patch_heads", "1.0,1.3"),
                             Intervention("permute_content", layer=1, perm=[0, 2, 1] + list(
                                 range(3, clean.shape[1])))])
    with spec.apply(llama, source=cache):
        by_spec = _logits(llama, corrupt)
    perm = torch.arange(clean.shape[1])
    perm[[1, 2]] = perm[[2, 1]]
    with patch_heads(llama, cache, "1.0,1.3"), permute_content(llama, 1, perm):
        by_call = _logits(llama, corrupt)
    assert torch.equal(by_spec, by_call)
    with pytest.raises(InvalidSelectionError, match="needs source"):
        spec.hooks(llama)


def test_printing_and_json_round_trip(tmp_path):
    spec = Intervention("ablate_frequencies", {"12.0": "0:16", (13, 1): "low"}, mode="mean",
                        per_position=True)
    assert str(spec) == ("ablate_frequencies mode=mean side=q per_position=True: "
                         "12.0 ← 0:16; 13.1 ← low")
    assert Intervention.from_json(spec.to_json()) == spec
    many = InterventionSpec([spec, Intervention("patch_heads", [(3, 1), (4, None)], positions=-1),
                             Intervention("permute_content", layer=2, perm=[1, 0, 2], what="kv")])
    assert str(many).splitlines()[1:] == ["patch_heads positions=(-1,): 3.1,4.*",
                                          "permute_content layer=2 what=kv: perm=[1, 0, 2]"]
    path = tmp_path / "spec.json"
    many.to_json(path)
    assert InterventionSpec.from_json(path) == many
    assert json.loads(path.read_text())["format"] == "lens-possym/interventions@1"


def test_resolved_pins_band_names_to_ids(llama):
    specs = lp.rope_specs(llama)
    spec = Intervention("ablate_frequencies", "1.0,1.1", freqs="low")
    resolved = spec.resolved(llama)
    assert resolved.selection == (("1.0", "6:8"), ("1.1", "6:8"))
    assert parse_selection(dict(resolved.selection), specs) == parse_selection(
        dict(spec.selection), specs)


@pytest.mark.parametrize("kwargs, message", [
    (dict(op="ablate"), "unknown intervention"),
    (dict(op="ablate_frequencies", selection="1.0", mode="shuffle"), "unknown ablation mode"),
    (dict(op="ablate_frequencies", selection="1.0", mode="unrotate", side="q"), "side='qk'"),
    (dict(op="ablate_frequencies", selection="1.0", per_position=True), "mode='mean' only"),
    (dict(op="ablate_frequencies"), "needs a selection"),
    (dict(op="ablate_frequencies", selection="1.0", layer=1), "does not take layer"),
    (dict(op="patch_heads", selection={"1.0": "low"}), "patches whole heads"),
    (dict(op="patch_frequencies", selection="1.0", side="v"), "unknown side"),
    (dict(op="permute_content", layer=1, perm=[0, 0, 1]), "not a permutation"),
    (dict(op="permute_content", layer=1, perm=[1, 0], what="q"), "unknown permutation target"),
    (dict(op="permute_content", perm=[1, 0]), "needs layer= and perm="),
])
def test_bad_specs_fail_when_made(kwargs, message):
    with pytest.raises(InvalidSelectionError, match=message):
        Intervention(**kwargs)


def test_a_bad_selection_fails_when_compiled_with_the_grammars_message(llama):
    spec = Intervention("ablate_frequencies", {"7.0": "low"})
    with pytest.raises(InvalidSelectionError, match="layer 7 out of range"):
        spec.hooks(llama)
    assert not hooks_attached(llama)


@settings(max_examples=60, deadline=None)
@given(st.sets(st.integers(0, 63), min_size=1, max_size=20))
def test_freqs_label_reads_back_to_the_same_ids(ids):
    label = freqs_label(sorted(ids, reverse=True))
    assert "-" not in label and len(label.split(",")) <= len(ids)
    assert parse_freqs(label, _FakeSpec(64)) == tuple(sorted(ids))


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 1), st.one_of(st.none(), st.integers(0, 3))),
                min_size=1, max_size=6),
       st.sampled_from(["zero", "mean", "unrotate"]))
def test_json_round_trip_of_any_ablation(heads, mode):
    spec = Intervention("ablate_frequencies", {h: "0:2" for h in heads}, mode=mode)
    assert Intervention.from_dict(json.loads(spec.to_json())) == spec
    assert spec.heads == heads_label(list(dict.fromkeys(heads)))


class _FakeSpec:
    """What parse_freqs reads of a RopeSpec."""

    def __init__(self, n_freqs):
        self.n_freqs, self.layer, self.has_tail = n_freqs, 0, False


def test_band_sweep_cells_replay_as_specs(llama):
    task = lp.binding_task(llama, n_prompts=2, n_pairs=3, seed=1)
    metrics = lp.interventions.binding_metrics(task)
    sweep = band_sweep(llama, task.tokens, metrics, layers=[1], heads=[2], progress=False)
    spec = sweep.intervention(1, 2, "low")
    assert str(spec) == "ablate_frequencies mode=zero side=q: 1.2 ← 6:8"
    with spec.apply(llama):
        logits = _logits(llama, task.tokens)
    assert sweep.values["logit_diff"][1, 2, 2] == pytest.approx(
        float(metrics["logit_diff"](logits)), abs=1e-5)
    again = band_sweep(llama, task.tokens, metrics, sweep.config, progress=False)
    assert torch.equal(again.values["logit_diff"].nan_to_num(7),
                       sweep.values["logit_diff"].nan_to_num(7))
    with pytest.raises(InvalidSelectionError, match="was not swept"):
        sweep.intervention(0, 2, "low")
