"""The training loop: configuration, schedule, metrics, checkpoints, determinism, learning."""

from __future__ import annotations

import json
import math

import pytest
import torch

from lens_possym.errors import TrainingError
from lens_possym.training.toy import ToyTransformer, toy_config_for
from lens_possym.training.runs import load_checkpoint
from lens_possym.papers.a.tasks import IndexTask, RetrievalTask
from lens_possym.training.loop import TrainConfig, evaluate, train

SMALL_INDEX = IndexTask(n_symbols=6, length=6, seed=1)


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def small_model(task=SMALL_INDEX, ids=(0,), seed=0, **kw):
    model = ToyTransformer(toy_config_for(task, n_freqs=4, seed=seed, **kw))
    return model.set_frequencies(list(ids))


@pytest.mark.parametrize("kwargs, match", [
    (dict(steps=0), "steps"),
    (dict(lr=0.0), "lr"),
    (dict(betas=(0.9, 1.0)), "betas"),
    (dict(grad_clip=0.0), "grad_clip"),
    (dict(target_accuracy=1.5), "target_accuracy"),
    (dict(checkpoint_every=10), "needs out_dir"),
    (dict(min_lr_ratio=2.0), "min_lr_ratio"),
    (dict(eval_batch=0), "eval_batch"),
])
def test_bad_train_configs_are_refused(kwargs, match):
    with pytest.raises(TrainingError, match=match):
        TrainConfig(**kwargs)


def test_learning_rate_schedule():
    cfg = TrainConfig(steps=1000, lr=1.0, warmup_steps=100, min_lr_ratio=0.1)
    assert cfg.lr_at(0) == pytest.approx(0.01)
    assert cfg.lr_at(99) == pytest.approx(1.0)
    assert cfg.lr_at(550) == pytest.approx(0.1 + 0.9 * 0.5)          # half-way down the cosine
    assert cfg.lr_at(999) == pytest.approx(0.1, abs=1e-4)
    values = [cfg.lr_at(s) for s in range(100, 1000)]
    assert all(a >= b for a, b in zip(values, values[1:]))


def test_linear_schedule_falls_in_a_straight_line_to_its_floor():
    cfg = TrainConfig(steps=1000, lr=1.0, warmup_steps=100, schedule="linear", min_lr_ratio=0.0)
    assert cfg.lr_at(99) == pytest.approx(1.0)
    assert cfg.lr_at(550) == pytest.approx(0.5)
    assert cfg.lr_at(1000) == pytest.approx(0.0)
    steps = [cfg.lr_at(s) - cfg.lr_at(s + 1) for s in range(100, 999)]
    assert max(steps) == pytest.approx(min(steps)) == pytest.approx(1 / 900)
    with pytest.raises(TrainingError, match="schedule must be one of"):
        TrainConfig(schedule="step")


def test_toy_config_for_sizes_the_model_to_the_task():
    cfg = toy_config_for(RetrievalTask())
    assert cfg.d_vocab == RetrievalTask().d_vocab and cfg.n_ctx == 9
    assert cfg.n_freqs == 17 and cfg.rotary_dim == 32 and cfg.d_head == 34
    narrow = toy_config_for(IndexTask(n_symbols=20), n_freqs=4, nope_dims=0)
    assert narrow.d_head == 20 and narrow.has_tail          # widened so values fit 20 answers
    assert toy_config_for(IndexTask(), angles=[0.5, 0.0]).angles == (0.5, 0.0)


def test_training_learns_and_writes_metrics_and_checkpoints(tmp_path):
    model = small_model()
    config = TrainConfig(steps=600, eval_every=100, eval_size=512, checkpoint_every=100,
                         out_dir=str(tmp_path), target_accuracy=0.97, device="cpu")
    result = train(model, SMALL_INDEX, config)
    assert result.test_accuracy >= 0.97 and result.reached_target_at == result.steps_run
    assert result.steps_run < 600                                   # stopped early
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    assert metrics["task"] == "index" and metrics["task_config"]["length"] == 6
    assert len(metrics["history"]) == len(result.history)
    last = metrics["history"][-1]
    assert len(last["test_accuracy_by_position"]) == 6
    assert last["test_accuracy"] == pytest.approx(result.test_accuracy)
    assert metrics["model_config"]["d_vocab"] == SMALL_INDEX.d_vocab
    assert (tmp_path / "checkpoint_000100.pt").is_file()
    loaded, task, info = load_checkpoint(tmp_path / "model.pt")
    assert info["step"] == result.steps_run and task.config() == SMALL_INDEX.config()
    t = SMALL_INDEX.test_set(64).tokens
    assert torch.equal(loaded(t), model(t))
    assert torch.equal(loaded.freq_gate, model.freq_gate)


def test_evaluate_matches_a_direct_count():
    model = small_model()
    batch = SMALL_INDEX.test_set(300)
    result = evaluate(model, SMALL_INDEX, batch, chunk=64)
    pred = model(batch.tokens)[:, -1].argmax(-1)
    correct = pred == batch.answers
    assert result.accuracy == pytest.approx(correct.float().mean().item())
    for p, acc in zip(result.answer_positions, result.accuracy_by_position):
        at = batch.answer_pos == p
        assert acc == pytest.approx(correct[at].float().mean().item())
    loss = torch.nn.functional.cross_entropy(model(batch.tokens)[:, -1], batch.answers)
    assert result.loss == pytest.approx(loss.item(), rel=1e-5)


def test_training_is_deterministic_and_leaves_the_global_rng_alone():
    config = TrainConfig(steps=30, eval_every=15, eval_size=128, device="cpu")
    state = torch.get_rng_state()
    a, b = small_model(), small_model()
    ra, rb = train(a, SMALL_INDEX, config), train(b, SMALL_INDEX, config)
    assert torch.equal(state, torch.get_rng_state())
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))
    assert [h.test_accuracy for h in ra.history] == [h.test_accuracy for h in rb.history]
    c = small_model()
    train(c, SMALL_INDEX, TrainConfig(steps=30, eval_every=15, eval_size=128, seed=1))
    assert not torch.equal(a.W_U, c.W_U)                             # another data stream


def test_gated_off_weights_get_no_gradient():
    model = small_model(ids=(2,))
    before = model.blocks[0].attn.W_Q.detach().clone()
    train(model, SMALL_INDEX, TrainConfig(steps=20, eval_every=20, eval_size=64,
                                          weight_decay=0.0))
    after = model.blocks[0].attn.W_Q.detach()
    dims_on = [2, 6]                                                 # pair 2 of 4 ("half" layout)
    off = [d for d in range(model.cfg.d_head) if d not in dims_on]
    assert torch.equal(after[..., off], before[..., off])
    assert not torch.equal(after[..., dims_on], before[..., dims_on])


def test_callbacks_run_at_every_evaluation():
    calls = []
    model = small_model()
    result = train(model, SMALL_INDEX, TrainConfig(steps=40, eval_every=20, eval_size=64),
                   callbacks=[lambda step, m: calls.append((step, m.training))])
    assert [c[0] for c in calls] == [0, 20, 40] and not any(c[1] for c in calls)
    assert [h.step for h in result.history] == [0, 20, 40]


def test_bad_training_inputs_are_refused(tmp_path):
    with pytest.raises(TrainingError, match="too small"):
        train(small_model(IndexTask(4, 4)), SMALL_INDEX, TrainConfig(steps=1))
    with pytest.raises(TrainingError, match="ToyTransformer"):
        train(torch.nn.Linear(2, 2), SMALL_INDEX)
    with pytest.raises(TrainingError, match="no checkpoint"):
        load_checkpoint(tmp_path / "missing.pt")
    (tmp_path / "junk.pt").write_bytes(b"not a checkpoint")
    with pytest.raises(TrainingError, match="not a readable"):
        load_checkpoint(tmp_path / "junk.pt")
    torch.save({"x": 1}, tmp_path / "other.pt")
    with pytest.raises(TrainingError, match="not a lens-possym toy checkpoint"):
        load_checkpoint(tmp_path / "other.pt")


def test_metrics_json_has_no_nan(tmp_path):
    """Unseen answer positions are NaN in memory and null in JSON (valid JSON)."""
    model = small_model()
    result = train(model, SMALL_INDEX, TrainConfig(steps=2, eval_every=1, eval_size=1,
                                                   out_dir=str(tmp_path)))
    assert any(math.isnan(a) for a in result.test_accuracy_by_position)
    text = (tmp_path / "metrics.json").read_text()
    assert "NaN" not in text and json.loads(text)["history"][0]["test_accuracy_by_position"]


def test_sequence_hash_equals_the_horner_loop():
    """The vectorised split hash is the column-by-column Horner hash, bit for bit (the
    train/test split of every synthetic task depends on it)."""
    from lens_possym.training.tasks import _HASH_BUCKETS, _PRIME, _sequence_hash

    def horner(tokens):
        h = torch.zeros(tokens.shape[0], dtype=torch.int64)
        for col in tokens.long().unbind(dim=1):
            h = (h * 1_000_003 + col + 1) % _PRIME
        h = (h * 48_271) % _PRIME
        return (h ^ (h >> 11)) % _HASH_BUCKETS

    gen = torch.Generator().manual_seed(0)
    for shape, high in (((64, 128), 600), ((7, 3), 2**31 + 5), ((5, 0), 2), ((3, 300), 10)):
        tokens = torch.randint(high, shape, generator=gen)
        assert torch.equal(_sequence_hash(tokens), horner(tokens))
    small = torch.randint(500, (9, 40), generator=gen).to(torch.int16)
    assert torch.equal(_sequence_hash(small), horner(small))
