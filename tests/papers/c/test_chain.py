"""The answer along the hop path: a logit lens per (stop, layer) and residual-stream
patching at each stop, on hand-built chains whose schedule is known exactly (the answer
reaches p_k after h-k blocks) and on a trained GPT-J (invariants)."""

from __future__ import annotations

import pytest
import torch

from lens_possym.errors import InvalidSelectionError, ResultsFileError
from lens_possym.papers.c.chain import (
    ChainLens,
    ChainPatching,
    chain_lens,
    chain_patching,
    decode_residual,
    residual_names,
)
from lens_possym.papers.c.constructions import t_index_chain_model, t_retrieval_chain_model
from lens_possym.papers.c.tasks import LetterTask, NumberTask
from lens_possym.training.loop import evaluate

pytestmark = pytest.mark.usefixtures("one_torch_thread")

CHAINS = [(NumberTask(), lambda t: t_index_chain_model(t, 0.8, n_layers=6)),
          (LetterTask(query_letter="filler"),
           lambda t: t_retrieval_chain_model(t, 0.0, n_layers=6))]


@pytest.mark.parametrize("task, build", CHAINS, ids=["index_chain", "retrieval_chain"])
def test_lens_and_patching_find_the_schedule_of_a_hand_built_chain(task, build):
    model, built = build(task)
    assert len(built) == 6
    batch = task.test_set(200)
    assert evaluate(model, task, batch).accuracy == 1.0
    lens = chain_lens(model, task, batch)
    patch = chain_patching(model, task, batch)
    assert lens.decoded.shape == patch.restore.shape == (4, 7, 5)
    assert patch.clean_accuracy == 1.0 and patch.corrupted_accuracy == 0.0
    for h in range(1, 5):
        for k in range(h):
            # the answer is at p_k after exactly h-k blocks, and stays
            assert lens.first_layer(h, k) == h - k
            assert (lens.decoded[h - 1, h - k:, k] == 1.0).all()
            # the clean stream restores exactly there (the query: from there on)
            restore = patch.restore[h - 1, :, k]
            expected = torch.tensor([float(j >= h if k == 0 else j == h - k) for j in range(7)])
            assert torch.equal(restore, expected), (h, k, restore)
            assert patch.first_layer(h, k) == h - k
        assert torch.isnan(lens.decoded[h - 1, :, h + 1:]).all()
    assert sum(lens.counts) == 200


def test_a_chain_too_short_for_its_hops_never_delivers():
    task = NumberTask()
    model, _ = t_index_chain_model(task, 0.8, n_layers=2)
    lens = chain_lens(model, task, task.test_set(120))
    assert lens.first_layer(4, 0) is None and lens.first_layer(4, 2) == 2


def test_lens_and_patching_on_a_trained_gptj(tiny_multihop_run, tmp_path):
    _, model, task = tiny_multihop_run
    bridge = model.bridge()
    batch = task.test_set(48)
    names = residual_names(bridge)
    assert names[0] == "blocks.0.hook_resid_pre" and names[-1] == "blocks.1.hook_resid_post"
    logits, cache = bridge.run_with_cache(batch.tokens, names_filter=names)
    # the lens at the last stream is the model itself
    assert torch.allclose(decode_residual(bridge, cache[names[-1]]), logits, atol=1e-5)
    lens = chain_lens(bridge, task, batch)
    patch = chain_patching(bridge, task, batch)
    hops, _ = task.hop_path(batch.tokens)
    pred = logits[:, -1].argmax(-1)
    for h in range(1, 5):
        clean = float((pred[hops == h] == batch.answers[hops == h]).float().mean())
        # decoding the final stream at the query is the prediction; patching it in, too
        assert float(lens.decoded[h - 1, -1, 0]) == pytest.approx(clean)
        assert float(patch.restore[h - 1, -1, 0]) == pytest.approx(clean)
        # the clean embeddings at the answer position make the corrupted run the clean one
        assert float(patch.restore[h - 1, 0, h]) == pytest.approx(clean)
    assert ((lens.answer_prob >= 0) | lens.answer_prob.isnan()).all()
    lens.save(tmp_path / "lens.json")
    again = ChainLens.load(tmp_path / "lens.json")
    assert torch.equal(again.decoded.nan_to_num(-1), lens.decoded.nan_to_num(-1))
    assert set(lens.to_dataframe()["score"]) == {"decoded", "answer_prob"}
    patch.save(tmp_path / "patch.json")
    assert ChainPatching.load(tmp_path / "patch.json").counts == patch.counts
    with pytest.raises(ResultsFileError):
        ChainPatching.load(tmp_path / "lens.json")


def test_bad_inputs_are_refused():
    with pytest.raises(InvalidSelectionError, match="n_layers"):
        residual_names(object())
    with pytest.raises(InvalidSelectionError, match="unembed"):
        decode_residual(object(), torch.zeros(2, 3))
    with pytest.raises(InvalidSelectionError, match="n_layers must be"):
        t_index_chain_model(NumberTask(), 0.8, n_layers=0)
