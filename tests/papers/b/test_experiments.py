"""Paper B's experiments: cells train through the shared loop and cache; the analyses."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
import torch

from lens_possym.errors import InvalidSelectionError, TrainingError
from lens_possym.papers import b as pb
from lens_possym.papers.b.encoder import SchemeEncoder, encoder_config_for
from lens_possym.papers.b.tasks import DistanceTask
from lens_possym.training.runs import load_checkpoint

pytestmark = pytest.mark.usefixtures("one_torch_thread")

TINY = replace(pb.with_steps(pb.ENCODER_PRESETS["cpu"], 3), eval_size=32, analysis_size=32,
               profile_prompts=2,
               model=dict(n_layers=2, n_heads=4, d_model=16, d_head=4, d_ff=16, d_latent=8),
               tasks={"distance": dict(n_ctx=12, max_between=5, max_side=3, n_words=8),
                      "count": dict(n_ctx=12, n_triggers=3, max_count=8, n_words=8)})


def test_presets():
    paper = pb.ENCODER_PRESETS["paper"]
    assert paper.model == dict(n_layers=6, n_heads=16, d_model=256, d_head=16, d_ff=512,
                               d_latent=128)
    assert paper.data == "fixed" and paper.sentences == {"distance": 100_000, "count": 50_000}
    config = paper.train_config("distance", "rope", 0, None, epoch_size=70_000)
    assert config.betas == (0.98, 0.9) and config.lr == 1e-4 and config.batch_size == 512
    assert config.steps == 100 * 137 and config.grad_clip is None   # 100 epochs, no clip
    assert config.warmup_steps == int(0.06 * config.steps)
    mla = paper.train_config("distance", "mla", 0, None, epoch_size=70_000)
    assert mla.batch_size == 1024 and mla.steps == 150 * 69
    with pytest.raises(InvalidSelectionError, match="epoch_size"):
        paper.train_config("distance", "rope", 0, None)
    length = pb.ENCODER_PRESETS["paper-length"]
    assert length.model == pb.ENCODER_PRESETS["cpu"].model and length.data == "stream"
    for preset in (paper, length):
        task = pb.preset_task(preset, "distance")
        assert task.n_ctx == 128 and task.max_len == 120 and task.n_classes == 72
        assert task.max_between == 70
        count = pb.preset_task(preset, "count")
        assert count.n_classes == 101 and count.max_len == 120 and count.n_triggers == 30
    assert pb.preset_task(paper, "count").n_sentences == 50_000
    faithful = pb.make_model(length, pb.preset_task(length, "count"), "rope-k1", "faithful")
    assert faithful.cfg.init == "torch" and faithful.cfg.dropout == 0.0
    assert faithful.cfg.activation == "relu" and faithful.cfg.rope_heads == 1
    assert paper.faithful_model == {"init": "torch", "dropout": 0.1}
    intended = pb.make_model(length, pb.preset_task(length, "count"), "mla", "intended")
    assert intended.cfg.init == "normal" and intended.cfg.dropout == 0.0


def test_paper_length_grid_names_every_claimed_scheme():
    cells = pb.grid_cells(seeds=(0, 1, 2), preset=pb.ENCODER_PRESETS["paper-length"])
    keys = {c.key for c in cells}
    assert len(cells) == len(keys) == 3 * 2 * (10 + 9)
    for label in ("nope", "sinusoidal", "learned", "alibi", "t5", "rope", "rope-k1",
                  "rope-k2", "mla", "hybrid"):
        assert f"distance/intended/{label}/seed2" in keys and f"count/intended/{label}/seed0" in keys
    assert "count/faithful/hybrid/seed0" not in keys and "count/faithful/rope-k2/seed1" in keys
    assert [c.seed for c in cells[:38]] == [0] * 38, "seed 0 first"


def test_data_regime_option():
    fixed = pb.with_data(pb.ENCODER_PRESETS["paper-length"], "fixed", epochs=3)
    assert fixed.name == "paper-length+fixed" and fixed.epochs == 3
    assert fixed.sentences == {"distance": 100_000, "count": 50_000}
    assert pb.with_data(pb.ENCODER_PRESETS["paper"], "stream").data == "stream"
    assert pb.with_data(pb.ENCODER_PRESETS["cpu"], "stream") is pb.ENCODER_PRESETS["cpu"]
    with pytest.raises(InvalidSelectionError):
        pb.with_data(pb.ENCODER_PRESETS["cpu"], "epochs")


def test_fixed_regime_cell_trains_for_epochs(tmp_path):
    preset = replace(pb.with_data(TINY, "fixed", sentences={"distance": 60, "count": 60},
                                  epochs=2), batch_size=16, eval_size=8, analysis_size=8)
    cell = pb.Cell("distance", "rope", "intended", 0)
    model, task, result = pb.train_cell(preset, cell, tmp_path)
    assert task.epoch_size == 42 and result.steps_run == 2 * 3     # ceil(42 / 16) per epoch
    assert result.train_config["steps"] == 6
    resumed = pb.train_cell(preset, cell, tmp_path)[2]
    assert resumed.steps_run == 6


def test_cell_record_has_the_committed_fields(tmp_path):
    data = pb.analyse_cell(TINY, pb.Cell("count", "mla", "faithful", 1), tmp_path,
                           profile=False)
    record = pb.cell_record(data)
    assert isinstance(record, pb.CellRecord)
    assert pb.record_key(record) == record.key == ("cpu", "count", "faithful", "mla", 1)
    assert record.accuracy == data["baseline"] and record.ablation_kind == "per head"
    assert set(record.ablation) >= {"top_drop", "second_drop", "heads_over_10", "deposit",
                                    "top_head"}
    assert record.ablation_grid == data["ablation_heads"] != data["ablation"]
    assert record.ablation_official_grid == data["ablation"]
    entry = record.to_dict()                       # the file's entry, and back
    assert json.loads(json.dumps(entry)) == entry and pb.CellRecord.from_dict(entry) == record
    assert pb.record_key(entry) == record.key and "note" not in entry


def test_cells_and_labels():
    assert pb.parse_label("rope-k3") == ("rope", 3) and pb.parse_label("mla") == ("mla", None)
    with pytest.raises(InvalidSelectionError):
        pb.parse_label("rope-kx")
    with pytest.raises(InvalidSelectionError):
        pb.Cell("sorting", "rope")
    cells = pb.grid_cells()
    keys = [c.key for c in cells]
    assert len(keys) == len(set(keys)) == 46
    assert "count/faithful/rope-k8/seed0" in keys and "distance/intended/rope-k8/seed0" not in keys
    assert cells[0].variant == "intended"


def test_cell_trains_once_and_caches(tmp_path):
    cell = pb.Cell("distance", "hybrid", "intended", 0)
    data = pb.analyse_cell(TINY, cell, tmp_path)
    folder = tmp_path / cell.key
    assert (folder / "model.pt").is_file() and (folder / "metrics.json").is_file()
    assert data["steps"] == 3 and len(data["ablation"]) == 2
    assert data["profile"]["site"] == "content" and len(data["probe"]["r2"]) == 3
    stamp = (folder / "analysis.json").stat().st_mtime_ns
    assert pb.analyse_cell(TINY, cell, tmp_path) == json.loads(
        (folder / "analysis.json").read_text())
    assert (folder / "analysis.json").stat().st_mtime_ns == stamp
    model, _, result = pb.train_cell(TINY, cell, tmp_path)   # loads, does not train
    assert result.steps_run == 3 and isinstance(model, SchemeEncoder)
    saved = load_checkpoint(folder / "model.pt")[0].state_dict()
    assert all(torch.equal(t, saved[k]) for k, t in model.state_dict().items())

    # the preset's steps changed after the cell ran: its folder is refused, not reported
    longer = pb.with_steps(TINY, 5)
    with pytest.raises(InvalidSelectionError, match="at 3 steps, not 'cpu' at 5; move"):
        pb.analyse_cell(longer, cell, tmp_path)
    (folder / "analysis.json").unlink()
    with pytest.raises(TrainingError, match="steps"):
        pb.train_cell(longer, cell, tmp_path)


@pytest.mark.parametrize("cell,site,has_probe", [
    (pb.Cell("count", "alibi"), "layer", False),
    (pb.Cell("count", "mla", "faithful"), "content", True),   # official zero-init table
])
def test_other_cells_analyse(cell, site, has_probe, tmp_path):
    data = pb.analyse_cell(TINY, cell, tmp_path)
    assert data["profile"]["site"] == site
    assert (data["probe"] is not None) == has_probe
    pos = torch.tensor(data["profile"]["pos"])
    assert pos.shape == (2, 4) and pos.isfinite().all()


@pytest.mark.parametrize("label, variant", [("rope", "intended"), ("t5", "intended"),
                                            ("alibi", "faithful")])
def test_ablation_grid_is_each_head_zeroed_alone_then_evaluated(label, variant):
    """The core's head_importance gives exactly the accuracies of the written-out loop (one
    head's hook_z zeroed, the loop's evaluate), and leaves the model in the mode it found."""
    from lens_possym.interventions import ablate_heads
    from lens_possym.training import evaluate

    task = pb.preset_task(TINY, "distance")
    model = pb.make_model(replace(TINY, faithful_model={"init": "torch", "dropout": 0.1}),
                          task, label, variant)
    batch = task.test_set(32, seed=1)
    grid = pb.ablation_grid(model.train(), task, batch)
    assert model.training
    model.eval()
    expected = torch.zeros(2, 4)
    with torch.no_grad():
        for layer in range(2):
            for head in range(4):
                with ablate_heads(model, [(layer, head)], mode="zero"):
                    expected[layer, head] = evaluate(model, task, batch).accuracy
    assert grid.dtype == torch.float32 and torch.equal(grid, expected)


def test_deposit_summary():
    grid = torch.full((2, 3), 0.9)
    grid[0, 1] = 0.3
    grid[1, 2] = 0.8
    d = pb.deposit_summary(grid, 0.9)
    assert d["top_head"] == [0, 1] and d["top_drop"] == pytest.approx(0.6)
    assert d["second_drop"] == pytest.approx(0.1) and d["deposit"]
    assert not pb.deposit_summary(grid * 0.4, 0.36)["deposit"], "an unlearned task"
    grid[1, 2] = 0.5                               # a second head nearly as important
    assert not pb.deposit_summary(grid, 0.9)["deposit"]


def test_positional_probe():
    task = DistanceTask(n_ctx=12, max_between=5, max_side=3, n_words=8)
    cfg = encoder_config_for(task, "learned", n_layers=2, n_heads=2, d_model=16, d_head=4,
                             d_ff=16)
    model = SchemeEncoder(cfg).eval()
    tokens = task.sample(64).tokens
    with torch.no_grad():
        model.W_E.zero_()                          # the stream is the encoding alone
    probe = pb.positional_probe(model, tokens)
    assert probe["r2"][0] == pytest.approx(1.0) and probe["pos_share"][0] == pytest.approx(1.0)
    assert probe["aligned"][0] >= 0.99 and probe["chance"] == probe["rank"] / 16
    assert pb.positional_probe(model, tokens, rank=12)["aligned"][0] == pytest.approx(1.0)
    assert all(0 <= a <= 1 + 1e-9 for a in probe["aligned"] + probe["pos_share"])
    with torch.no_grad():                          # tokens back: position is a part only
        model.W_E.normal_(generator=torch.Generator().manual_seed(0))
    mixed = pb.positional_probe(model, tokens)
    assert mixed["pos_share"][0] < 0.9 and mixed["r2"][0] < probe["r2"][0]
    rope = SchemeEncoder(encoder_config_for(task, "rope", n_layers=1, n_heads=2, d_model=16,
                                            d_head=4, d_ff=16))
    assert pb.positional_probe(rope, tokens) is None


def test_a_copies_cell_trains_on_the_official_filler_draw(tmp_path):
    preset = pb.with_trigger_copies(TINY)
    cell = pb.Cell("distance", "rope", "intended", 0)
    data = pb.analyse_cell(preset, cell, tmp_path)
    _, task, _ = load_checkpoint(tmp_path / cell.key / "model.pt")
    assert data["preset"] == "cpu+copies" and task.trigger_copies
    assert task.config() == pb.preset_task(preset, "distance", 0).config()
    assert "trigger_copies" not in pb.preset_task(TINY, "distance", 0).config()
