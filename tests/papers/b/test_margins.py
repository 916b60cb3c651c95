"""Paper B under the rules of 2026-11-29: margins in standard errors, undecided verdicts, the
deposit as "a single head in the first layer", claims judged only on models that learned,
the levelling-off rule and training, the 4,096-sentence scoring with paired errors."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from lens_possym.errors import InvalidSelectionError
from lens_possym.papers.b import levelled as lv
from lens_possym.papers.b import margins as m
from lens_possym.interventions import ablate_heads
from lens_possym.papers.b.cells import Cell
from lens_possym.papers.b.encoder import SchemeEncoder, encoder_config_for
from lens_possym.papers.b.deposit import ablation_grid, deposit_summary
from lens_possym.papers.b.presets import ENCODER_PRESETS, with_steps
from lens_possym.papers.b.tasks import DistanceTask
from lens_possym.papers.b.report_margins import margins_markdown, with_se
from lens_possym.training.loop import evaluate

pytestmark = pytest.mark.usefixtures("one_torch_thread")
PRESET = "paper-length+levelled"
N = 4096


def rec(task, scheme, acc, drops=None, *, seed=0, variant="intended", se=None, n=N):
    """A levelled record: ``drops`` {(layer, head): drop} on a 3 x 8 grid (others 0)."""
    grid = [[acc] * 8 for _ in range(3)]
    for (layer, head), d in (drops or {}).items():
        grid[layer][head] = acc - d
    return {"preset": PRESET, "task": task, "scheme": scheme, "variant": variant, "seed": seed,
            "accuracy": acc, "eval_size": n, "accuracy_se": se, "ablation_grid": grid,
            "ablation": deposit_summary(torch.tensor(grid), acc), "probe": None}


def test_a_margin_within_one_standard_error_is_undecided():
    assert m.Margin("x", 0.02, 0.01).outcome is True and m.Margin("x", 0.02, 0.01).z == 2.0
    assert m.Margin("x", -0.005, 0.01).outcome is None
    assert m.Margin("x", -0.02, 0.01).outcome is False
    assert m.Margin("x", 0.01, 0.0).z == math.inf and m.Margin("x", 0.0, 0.0).outcome is None
    assert m.all_of([True, None]) is None and m.all_of([True, None, False]) is False
    assert m.all_of([True, True]) is True
    assert m.any_of([False, None]) is None and m.any_of([None, True]) is True
    assert m.accuracy_se(0.9, 4096) == pytest.approx(math.sqrt(0.09 / 4096))
    with pytest.raises(InvalidSelectionError, match="n must"):
        m.accuracy_se(0.5, 0)
    # older records: their preset's analysis size
    assert m.record_size({"preset": "paper-length+copies"}) == 512
    with pytest.raises(InvalidSelectionError, match="eval_size"):
        m.record_size({"preset": "nowhere"})


def test_deposit_is_one_first_layer_head_with_the_others_negligible():
    one = rec("distance", "rope", 0.95, {(0, 3): 0.6, (1, 2): 0.02})
    outcome, margins, text = m.first_layer_deposit(one)
    assert outcome is True and "head 0.3" in text
    assert m.first_layer_deposit(rec("distance", "rope", 0.95, {(1, 3): 0.6}))[0] is False, "not layer 0"
    second = rec("distance", "rope", 0.95, {(0, 3): 0.6, (2, 1): 0.3})
    assert m.first_layer_deposit(second)[0] is False, "a second head of 30 points is not negligible"
    # a second head at 4.9 points on 64 sentences: within one standard error of 5
    near = rec("distance", "rope", 0.95, {(0, 3): 0.6, (2, 1): 0.049}, n=64)
    assert m.first_layer_deposit(near)[0] is None
    assert m.first_layer_deposit(rec("distance", "rope", 0.3, {(0, 3): 0.2}))[0] is False, "not learned"
    # the paired standard errors of the record are used when present
    paired = dict(near, ablation_se=[[1e-4] * 8 for _ in range(3)], eval_size=64)
    assert m.first_layer_deposit(paired)[0] is True


def _seed(seed, *, rope=0.95, nope=0.05, mla=0.90):
    return [rec("distance", "nope", nope, seed=seed),
            rec("distance", "sinusoidal", 0.80, {(0, 1): 0.3, (1, 1): 0.3}, seed=seed),
            rec("distance", "learned", 0.70, seed=seed), rec("distance", "t5", 0.30, seed=seed),
            rec("distance", "alibi", 0.20, seed=seed),
            rec("distance", "rope", rope, {(0, 3): 0.6}, seed=seed),
            rec("distance", "mla", mla, {(0, 1): 0.3, (2, 1): 0.3}, seed=seed),
            rec("distance", "rope-k1", 0.93, seed=seed), rec("distance", "rope-k2", 0.94, seed=seed),
            rec("count", "nope", 0.80, seed=seed), rec("count", "mla", 0.95, seed=seed),
            rec("count", "rope", 0.70, {(1, 0): 0.4}, seed=seed)]


def test_verdicts_with_margins_and_undecided_claims():
    # seed 0: rope clearly best; seeds 1 and 2: rope 0.2 points over mla + 1 point
    records = _seed(0) + _seed(1, rope=0.912, mla=0.90) + _seed(2, rope=0.912, mla=0.90)
    rows = {r["claim"].number: r for r in m.judge_margins(records, PRESET)}
    two = rows["2"]["intended"]
    assert [o for o, _ in two["seeds"]] == [True, None, None]
    assert two["verdict"] == "undecided" and "z=+0.3" in two["seeds"][1][1]
    assert rows["7"]["intended"]["verdict"] == "holds"
    assert rows["9a"]["intended"]["verdict"] == "not judged", "nope never learned distance"
    assert rows["9b"]["intended"]["verdict"] == "holds", "a layer-1 head is no deposit"
    assert rows["10"]["intended"]["verdict"] == "holds"
    assert rows["1"]["faithful"]["verdict"] == "not judged"
    assert m.CLAIM5_NOTE in {c.number: c for c in m.CLAIMS2}["5"].note
    learned_nope = _seed(0, nope=0.9)
    learned_nope[0]["ablation_grid"][0][2] = 0.2          # a layer-0 head of 70 points
    rows = {r["claim"].number: r for r in m.judge_margins(learned_nope, PRESET, seeds=(0,))}
    assert rows["9a"]["intended"]["seeds"][0][0] is False
    with pytest.raises(InvalidSelectionError, match="no record"):
        m.judge_margins(records, "paper")


def test_the_report_reads_every_number_from_the_records():
    records = _seed(0) + _seed(1, rope=0.912, mla=0.90) + _seed(2)
    for r in records:
        r["levelling"] = {"steps": 7200, "extensions": 1, "since": 4800, "gain_rule": 0.004,
                          "gain_last_fifth": 0.004, "gain_last_quarter": 0.006,
                          "levelled": True}
    records[5]["levelling"] = dict(records[5]["levelling"], gain_rule=0.03, since=14_400,
                                   levelled=False, steps=19200)
    text = margins_markdown(records, PRESET, command="cmd")
    row2 = next(line for line in text.splitlines() if line.startswith("| 2 |"))
    assert "s1: ? rope 91.2" in row2 and "**holds** (2✓ 1?)" in row2
    assert "35 of 36 cells levelled off by the rule; 1 did not: distance intended rope s0 (+3.00)" \
        in text
    assert "| rope | 95.0 ± 0.3 / 91.2 ± 0.4 / 95.0 ± 0.3 |" in text
    assert "4,096 scoring sentences" in text
    records[5]["accuracy"] = 0.96
    assert "96.0 ± 0.3" in margins_markdown(records, PRESET, command="cmd")
    # a record levelled under an earlier rule (no gain_rule) is refused, not misread
    del records[5]["levelling"]["gain_rule"]
    with pytest.raises(InvalidSelectionError, match="before the addendum of 2026-12-07 22:01"):
        margins_markdown(records, PRESET, command="cmd")


def test_a_nonzero_standard_error_never_prints_as_zero():
    for correct in (4092, 4094, 4095):      # errors of 0.047, 0.035 and 0.024 points
        p = correct / 4096
        se = m.accuracy_se(p, 4096)
        value, error = (float(x) for x in with_se(p, se).split(" ± "))
        assert error > 0 and abs(value - 100 * p) <= 0.005 and abs(error - 100 * se) <= 0.005
    assert with_se(1.0, 0.0) == "100.0 ± 0.0"             # the binomial error is exactly 0
    assert with_se(0.9264, m.accuracy_se(0.9264, 4096)) == "92.6 ± 0.4"


def test_the_committed_records_reread():
    """What the 2026-11-29 rules make of the committed paper-length records (512 sentences):
    the +copies claims 2 and 3 become undecided, claim 9a is not judged (NoPE never learned
    distance)."""
    records = json.loads(Path("docs/paper_b_results.json").read_text())["cells"]
    copies = {r["claim"].number: r for r in m.judge_margins(records, "paper-length+copies")}
    assert copies["2"]["intended"]["verdict"] == copies["3"]["faithful"]["verdict"] == "undecided"
    main = {r["claim"].number: r for r in m.judge_margins(records, "paper-length")}
    assert main["9a"]["intended"]["verdict"] == "not judged"
    assert main["7"]["faithful"]["verdict"] == "does not hold"   # the ~60-point head: layer 1-2


def test_levelling_rule():
    flat = [[600 * i, 0.5 + 0.1 * min(i, 5)] for i in range(1, 9)]     # plateau from 3,000
    assert lv.window_gain(flat, 0.2) == 0.0 and lv.levelled_off(flat)
    rising = [[600 * i, 0.1 * i] for i in range(1, 9)]          # 0.6 at 3,600 -> 0.8
    assert lv.window_gain(rising, 0.2) == pytest.approx(0.2) and not lv.levelled_off(rising)
    assert lv.window_gain([[10, 0.5]], 0.2) is None and not lv.levelled_off([])
    info = lv.levelling_summary([[100, 0.1], [19_200, 0.5]], 6)
    assert info["capped"] and not info["levelled"] and info["steps"] == 19_200
    assert lv.levelled_name("paper-length") == "paper-length+levelled"
    assert lv.levelled_name("paper-length+copies") == "paper-length+levelled+copies"


def test_the_window_starts_at_a_run_end():
    """Addendum of 2026-12-07 22:01 UTC: distance ALiBi seed 0's history, level at 1.000 from
    6,000 on, with its first extension's dip at 5,760 (0.988): a window of evaluations reads
    the dip's recovery (+1.2 points); the rule reads from the base run's end (+0.1)."""
    base = [[600 * i, a] for i, a in enumerate(
        (0.127, 0.178, 0.198, 0.322, 0.854, 0.869, 0.995, 0.999), start=1)]
    ext1 = [[4800 + 240 * i, a] for i, a in enumerate(
        (0.996, 0.999, 0.995, 0.988, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0), start=1)]
    # the base run alone: the last evaluation at or before 0.8 T (3,840 -> 3,600)
    assert lv.reference_step(base) == 3600 and not lv.levelled_off(base)
    assert lv.rule_gain(base) == pytest.approx(0.999 - 0.869)
    history = base + ext1
    assert lv.window_gain(history, 0.2) == pytest.approx(0.012)       # from 5,760, in the dip
    assert not lv.levelled_off(history)                              # no run end given
    assert lv.reference_step(history, [4800]) == 4800
    assert lv.rule_gain(history, [4800]) == pytest.approx(0.001)
    assert lv.levelled_off(history, [4800])
    info = lv.levelling_summary(history, 1, [4800])
    assert (info["since"], info["segment_ends"], info["levelled"]) == (4800, [4800], True)
    assert lv.WINDOW_RULE_DATE in info["rule"] and "0.1x the peak learning rate" in info["rule"]
    # after the k-th extension: T - 2,400 for k <= 3, T - 4,800 from k = 4 on (>= 20 %)
    ends = [4800 + 2400 * k for k in range(6)]
    for k in range(1, 7):
        T = 4800 + 2400 * k
        steps = [[s, 0.5] for s in range(240, T + 1, 240)]
        assert lv.reference_step(steps, ends[:k]) == T - (2400 if k <= 3 else 4800)


def test_scoring_equals_the_loop_accuracy_and_the_ablation_grid():
    task = DistanceTask(n_ctx=16, max_between=8, max_side=3, n_words=10)
    model = SchemeEncoder(encoder_config_for(task, "rope", n_layers=2, n_heads=2, d_model=16,
                                             d_head=8, d_ff=16, seed=1)).eval()
    batch = lv.scoring_batch(task, 0, size=200)
    got = lv.score_cell(model, batch)
    assert got["eval_size"] == 200
    assert got["accuracy"] == pytest.approx(evaluate(model, task, batch).accuracy, abs=1e-6)
    assert got["accuracy_se"] == pytest.approx(m.accuracy_se(got["accuracy"], 200))
    grid = ablation_grid(model, task, batch)
    assert torch.allclose(torch.tensor(got["ablation_grid"], dtype=torch.float64), grid.double(),
                          atol=1e-6)
    with ablate_heads(model, [(1, 0)], mode="zero"):       # the paired error, by hand
        ablated = model(batch.tokens)[:, -1].argmax(-1) == batch.answers
    clean = model(batch.tokens)[:, -1].argmax(-1) == batch.answers
    diff = clean.double() - ablated.double()
    assert got["ablation_se"][1][0] == pytest.approx(
        math.sqrt(float(((diff - diff.mean()) ** 2).mean()) / 200), abs=1e-12)


def test_training_extends_until_the_cap_and_resumes(tmp_path, monkeypatch):
    monkeypatch.setattr(lv, "EXTENSION_STEPS", 4)
    monkeypatch.setattr(lv, "EXTENSION_EVALS", 2)
    monkeypatch.setattr(lv, "STEP_CAP", 14)
    monkeypatch.setattr(lv, "LEVEL_GAIN", -1.0)            # never levelled: up to the cap
    base = replace(with_steps(ENCODER_PRESETS["cpu"], 6), eval_size=16, evals=2,
                   model=dict(n_layers=1, n_heads=2, d_model=16, d_head=8, d_ff=16, d_latent=8),
                   tasks={"distance": dict(n_ctx=16, max_between=8, max_side=3, n_words=10)})
    cell = Cell("distance", "nope", "intended", 0)
    model, _, info = lv.train_levelled(base, cell, tmp_path)
    assert info["steps"] == 14 and info["extensions"] == 2 and info["capped"]
    assert info["segment_ends"] == [6, 10] and info["since"] == 10
    assert [s for s, _ in info["history"]][-1] == 14
    assert (tmp_path / "cpu+levelled" / cell.key / "ext2" / "model.pt").exists()
    # the base run at the preset's peak rate, every extension at a tenth of it
    rates = [json.loads((folder / "metrics.json").read_text())["train_config"]["lr"]
             for folder in (tmp_path / "cpu" / cell.key,
                            *(tmp_path / "cpu+levelled" / cell.key / f"ext{k}" for k in (1, 2)))]
    assert rates == [base.lr, base.lr * lv.EXTENSION_LR_SCALE, base.lr * lv.EXTENSION_LR_SCALE]
    assert lv.EXTENSION_LR_SCALE == 0.1 and "0.1x the peak learning rate" in info["rule"]
    again, _, info2 = lv.train_levelled(base, cell, tmp_path)   # everything loads: no training
    assert info2["history"] == info["history"]
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(),
                                                 again.state_dict().values()))


def test_the_levelled_queue_writes_a_record_with_its_errors(tmp_path, monkeypatch, capsys):
    """`paper-b run --levelled` end to end on a tiny preset: base run, one extension,
    scoring, and the record with eval_size, standard errors, the budget check and the CPU
    kernels; the run says first that they are not the committed records' kernels."""
    from argparse import Namespace

    from lens_possym.papers.b import pipeline
    from lens_possym.training.kernels import cpu_kernels

    monkeypatch.setenv("MKL_CBWR", "AVX2")
    monkeypatch.delenv("ATEN_CPU_CAPABILITY", raising=False)

    monkeypatch.setattr(lv, "EXTENSION_STEPS", 4)
    monkeypatch.setattr(lv, "EXTENSION_EVALS", 2)
    monkeypatch.setattr(lv, "STEP_CAP", 10)
    monkeypatch.setattr(lv, "SCORING_SIZE", 48)
    tiny = replace(with_steps(ENCODER_PRESETS["paper-length"], 6), name="tiny", eval_size=16,
                   evals=2, model=dict(n_layers=1, n_heads=2, d_model=16, d_head=8, d_ff=16,
                                       d_latent=8),
                   tasks={"distance": dict(n_ctx=16, max_between=8, max_side=3, n_words=10)},
                   grid={"intended": ("nope",), "faithful": ()})
    monkeypatch.setitem(ENCODER_PRESETS, "tiny", tiny)
    records = tmp_path / "results.json"
    args = Namespace(preset="tiny", seeds=[0], tasks=["distance"], only=None, labels=None,
                     shard=None, data=None, epochs=None, steps=None, batch_size=None, lr=None,
                     trigger_copies=False, no_profile=True, levelled=True,
                     root=str(tmp_path / "runs"), records=str(records))
    pipeline.run(args)
    first = capsys.readouterr().out.splitlines()[0]
    assert first.startswith("[run] not the reference CPU kernels") and first.endswith(
        "start the command with MKL_CBWR=AVX512 ATEN_CPU_CAPABILITY=avx512")
    (record,) = json.loads(records.read_text())["cells"]
    assert record["preset"] == "tiny+levelled" and record["eval_size"] == 48
    assert record["levelling"]["cpu_kernels"] == cpu_kernels()
    assert record["levelling"]["steps"] == 10 and record["levelling"]["extensions"] == 1
    assert len(record["ablation_se"]) == 1 and len(record["ablation_se"][0]) == 2
    assert record["accuracy_se"] == pytest.approx(m.accuracy_se(record["accuracy"], 48))
    assert (tmp_path / "runs" / "tiny" / "distance/intended/nope/seed0" / "model.pt").exists()
    # the report's writers read a genuine levelled record (the one cell, and nothing else)
    from lens_possym.papers.b.report_levelled import levelled_reading_markdown

    tables = margins_markdown([record], "tiny+levelled", seeds=(0,), command="cmd")
    assert f"| tiny+levelled | distance | intended | nope | 0 | 48 | " \
           f"{100 * record['accuracy']:.1f} ± {100 * record['accuracy_se']:.1f} | 10 | 1 |" in tables
    reading = " ".join(levelled_reading_markdown([record], "tiny", seeds=(0,)).split())
    assert "1 of the 1 cells of `tiny+levelled` and 0 of the 14 of `tiny+levelled+copies` " \
           "have records" in reading and "scored on 48 held-out sentences" in reading


def test_eval_batch_changes_no_number_and_may_differ_on_resume(tmp_path):
    """Evaluations in pieces (TrainConfig.eval_batch, paper B's presets: 64) give the
    history and weights of one pass, bit for bit, and a run resumes under another piece
    size."""
    from dataclasses import asdict

    from lens_possym.training.loop import TrainConfig, train

    task = DistanceTask(n_ctx=16, max_between=8, max_side=3, n_words=10)

    def run(eval_batch, steps=8, out=None, resume=False):
        model = SchemeEncoder(encoder_config_for(task, "alibi", n_layers=2, n_heads=2,
                                                 d_model=16, d_head=8, d_ff=16, seed=1))
        config = TrainConfig(steps=steps, batch_size=8, lr=1e-2, eval_every=4, eval_size=40,
                             eval_batch=eval_batch, checkpoint_every=4 if out else None,
                             out_dir=out, device="cpu")
        return model, train(model, task, config, resume=resume)

    (a, ra), (b, rb) = run(None), run(7)
    assert [asdict(h) | {"elapsed_s": 0} for h in ra.history] == \
        [asdict(h) | {"elapsed_s": 0} for h in rb.history]
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))
    run(None, out=str(tmp_path / "r"))
    for name in ("model.pt", "checkpoint_000008.pt"):       # interrupted after step 4
        (tmp_path / "r" / name).unlink()
    _, resumed = run(7, out=str(tmp_path / "r"), resume=True)
    assert [h.test_loss for h in resumed.history] == [h.test_loss for h in ra.history]
