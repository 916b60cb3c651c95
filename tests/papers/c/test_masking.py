"""The masking diagnostic: extra tokens hidden from early layers, or given trained-range
position ids; checked against runs that do the same thing another way."""

from __future__ import annotations

import pytest
import torch

from lens_possym.errors import InvalidSelectionError
from lens_possym.papers.c.constructions import t_index_model
from lens_possym.papers.c.lengths import accuracy_by_length
from lens_possym.papers.c.masking import (
    ExtensionAccuracy,
    extension_accuracy,
    extension_hooks,
    extension_mask,
    trained_range_positions,
)
from lens_possym.papers.c.tasks import NumberTask

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_masks_and_positions_by_hand():
    mask = extension_mask(5, 2)[0, 0]
    hidden = mask < 0
    assert hidden.tolist() == [[False, True, True, True, True],
                               [False, False, True, True, True],
                               [True, True, False, True, True],
                               [True, True, False, False, True],
                               [True, True, False, False, False]]
    assert trained_range_positions(12, 5, 3).tolist() == [[5, 6, 7, 5, 6, 5, 6, 7, 8, 9, 10, 11]]


@torch.no_grad()
def test_hidden_extension_equals_running_without_it(tiny_multihop_run):
    """Masked from every layer, the extra tokens change nothing: the last token's logits
    are those of the effective 17 tokens run alone at their own positions."""
    _, model, task = tiny_multihop_run
    model.eval()
    tokens = task.at_length(40).test_set(6).tokens
    base = model(tokens)
    with extension_hooks(model, 40, 0, mode="mask", layers=[0, 1]):
        assert torch.equal(model(tokens), base)                   # nothing to hide
    with extension_hooks(model, 40, 23, mode="mask", layers=[0, 1]):
        hidden = model(tokens)[:, -1]
    alone = model.hf(input_ids=tokens[:, 23:], position_ids=torch.arange(23, 40)[None],
                     attention_mask=torch.ones(6, 17, dtype=torch.long)).logits[:, -1]
    assert torch.allclose(hidden, alone, atol=1e-5)
    with extension_hooks(model, 40, 23, mode="mask", layers=[0]):
        assert not torch.allclose(model(tokens)[:, -1], alone, atol=1e-5)
    assert torch.equal(model(tokens), base)                         # hooks removed


@torch.no_grad()
def test_trained_range_positions_equal_explicit_position_ids(tiny_multihop_run):
    _, model, task = tiny_multihop_run
    tokens = task.at_length(40).test_set(6).tokens
    ids = trained_range_positions(40, 23, 8)
    with extension_hooks(model, 40, 23, mode="positions"):
        moved = model(tokens)
    explicit = model.hf(input_ids=tokens, position_ids=ids,
                        attention_mask=torch.ones(6, 40, dtype=torch.long)).logits
    assert torch.allclose(moved, explicit, atol=1e-6)
    with pytest.raises(RuntimeError, match="inside"):
        with extension_hooks(model, 40, 23, mode="positions"):
            raise RuntimeError("inside")
    assert torch.allclose(model(tokens), model.hf(input_ids=tokens).logits)


def test_extension_accuracy_as_built_is_the_length_accuracy(tiny_multihop_run, tmp_path):
    _, model, task = tiny_multihop_run
    result = extension_accuracy(model, task, [17, 30], layers=[0], n_prompts=24, seed=4)
    plain = accuracy_by_length(model, task, [17, 30], n_prompts=24, seed=4)
    assert result.accuracy["as built"] == plain.accuracy
    assert result.by_hops["as built"] == plain.by_hops
    assert result.accuracy["mask"][0] == plain.accuracy[0]         # nothing extra at 17
    assert result.accuracy["positions"][0] == plain.accuracy[0]
    result.save(tmp_path / "ext.json")
    assert ExtensionAccuracy.load(tmp_path / "ext.json").accuracy == result.accuracy


def test_bad_inputs_are_refused(tiny_multihop_run):
    _, model, task = tiny_multihop_run
    with pytest.raises(InvalidSelectionError, match="mode must be one of"):
        with extension_hooks(model, 20, 3, mode="hide"):
            pass
    with pytest.raises(InvalidSelectionError, match="layers must lie"):
        with extension_hooks(model, 20, 3, mode="mask", layers=[5]):
            pass
    with pytest.raises(InvalidSelectionError, match="GPTJTaskModel"):
        toy, _ = t_index_model(NumberTask(max_hops=1), 0.8)
        extension_accuracy(toy, NumberTask(max_hops=1), [20])
    with pytest.raises(InvalidSelectionError, match="n_extra"):
        extension_mask(5, 5)
    with pytest.raises(InvalidSelectionError, match="modes"):
        extension_accuracy(model, task, [20], modes=["as is"])
