"""Paper B's verdicts from records: each rule on hand-made cells, the 2-of-3 verdict, the
report block (and the report script that writes it)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lens_possym.cli import main
from lens_possym.errors import InvalidSelectionError
from lens_possym.papers import b as v

PRESET = "paper-length"


def rec(task, scheme, acc, top=0.05, second=0.04, *, variant="intended", seed=0, probe=None):
    """A record as cell_record writes it, with the deposit rule applied to its drops."""
    deposit = acc >= 0.5 and top >= 0.25 * acc and top >= 2 * second
    return {"preset": PRESET, "task": task, "scheme": scheme, "variant": variant, "seed": seed,
            "accuracy": acc, "probe": probe,
            "ablation": {"top_drop": top, "second_drop": second, "top_head": [0, 3],
                         "heads_over_10": int(top > 0.1) + int(second > 0.1),
                         "deposit": deposit}}


def probe(a0, out, chance=0.2):
    return {"aligned": [a0, (a0 + out) / 2, out], "chance": chance}


def seed_cells(seed, *, rope=0.95, sat=False, mla_count=0.9, deposit_in_alibi=False):
    """One seed of a plausible grid: RoPE best on distance with a deposit, NoPE and ALiBi
    failing, the count order MLA > NoPE > RoPE."""
    d = [rec("distance", "nope", 0.10), rec("distance", "sinusoidal", 0.99 if sat else 0.80),
         rec("distance", "learned", 0.70), rec("distance", "t5", 0.30),
         rec("distance", "alibi", 0.60 if deposit_in_alibi else 0.20,
             *((0.4, 0.1) if deposit_in_alibi else ())),
         rec("distance", "rope", rope, 0.6, 0.1), rec("distance", "mla", 0.91, 0.2, 0.15),
         rec("distance", "rope-k1", 0.80, 0.5, 0.1), rec("distance", "rope-k2", 0.93),
         rec("distance", "hybrid", 0.94, probe=probe(0.6, 0.25)),
         rec("count", "nope", 0.80), rec("count", "rope", 0.70), rec("count", "mla", mla_count)]
    d[1]["probe"] = probe(0.6, 0.55)
    for r in d:
        r["seed"] = seed
    return d


def test_each_rule_on_one_seed():
    cells = v.seed_view(seed_cells(0), PRESET, "intended", 0)
    got = {c.number: c.apply(cells)[0] for c in v.CLAIMS}
    assert got == {"1": True, "2": True, "3": True, "4": True, "5": True, "6": True, "7": True,
                   "8": True, "9": True, "10": True, "11a": True, "11b": False, "12": True}
    holds, text = v.CLAIMS[1].apply(cells)
    assert "rope 95.0" in text and "next mla 91.0" in text


def test_saturation_and_additive_deposits_change_the_verdicts():
    cells = v.seed_view(seed_cells(0, rope=0.995, sat=True, deposit_in_alibi=True),
                        PRESET, "intended", 0)
    claims = {c.number: c for c in v.CLAIMS}
    assert claims["5"].apply(cells)[0] is None, "claim 5 is not judged on a saturated task"
    assert claims["2"].apply(cells)[0] is False, "a tie within a point is not a win"
    assert claims["8"].apply(cells) == (False, "deposits: RoPE models [rope, rope-k1], others "
                                               "[alibi]")
    assert claims["4"].apply(cells)[0] is False


def test_two_of_three_seeds_and_missing_cells():
    records = (seed_cells(0) + seed_cells(1, mla_count=0.75)
               + seed_cells(2, mla_count=0.75)[:-1])          # seed 2 lacks count/mla
    rows = {row["claim"].number: row for row in v.judge(records, PRESET)}
    six = rows["6"]["intended"]
    assert [h for h, _ in six["seeds"]] == [True, False, None]
    assert six["verdict"] == "does not hold" and six["held"] == 1 and six["judged"] == 2
    assert "missing count/mla" in six["seeds"][2][1]
    assert rows["1"]["intended"]["verdict"] == "holds"
    assert rows["1"]["faithful"]["verdict"] == "not judged"      # no faithful cell at all
    with pytest.raises(InvalidSelectionError, match="no record"):
        v.judge(records, "paper")


def test_a_partial_seed_is_not_judged_on_the_cells_that_finished_first():
    """"The best scheme" over a seed whose cells are still arriving could compare NoPE with
    itself; every rule that ranks schemes waits for all of them."""
    partial = [r for r in seed_cells(1) if r["scheme"] not in ("rope", "alibi")]
    rows = {row["claim"].number: row for row in v.judge(seed_cells(0) + partial, PRESET)}
    for number in ("1", "3", "4"):
        holds, text = rows[number]["intended"]["seeds"][1]
        assert holds is None and text.startswith("missing distance/"), (number, text)
    assert rows["1"]["intended"]["seeds"][1][1] == "missing distance/alibi,rope"


def test_deposit_table_counts_seeds():
    records = seed_cells(0) + seed_cells(1) + seed_cells(2, deposit_in_alibi=True)
    table = v.deposit_table(records, PRESET)
    assert table[("distance", "intended", "rope")] == 3
    assert table[("distance", "intended", "alibi")] == 1
    assert table[("count", "intended", "nope")] == 0


def _report_script():
    """Paper B's pipeline (``lens-possym paper-b``), as the tests call it."""
    from lens_possym.papers.b import pipeline
    return pipeline


def test_report_writes_the_verdict_block(tmp_path, capsys):
    records = seed_cells(0) + seed_cells(1) + seed_cells(2)
    records += [dict(r, variant="faithful") for r in seed_cells(0)]
    text = v.verdict_markdown(records, PRESET)
    assert "| 7 | in RoPE models one head carries distance" in text
    assert "**holds** (3/3)" in text and "**not judged** (1/3)" in text
    assert "| rope | 95.0 / 95.0 / 95.0 | 95.0 / · / · | 70.0 / 70.0 / 70.0 | 70.0 / · / · |" in text
    assert "Claim 8 as the data say" in text and "distance intended rope (3/3)" in text
    assert all(d in text for d in v.faithful_departures())

    bench = _report_script()
    path = tmp_path / "results.json"
    bench.write_records(path, records[:5])
    rows = bench.write_records(path, records)                      # merged by key
    assert len(rows) == len(records) == len(json.loads(path.read_text())["cells"])
    begin, end = bench.MARKERS[PRESET]
    reread = "\n".join(bench.MARKERS[f"{PRESET} reread"])
    reading = "\n".join(bench.MARKERS[f"{PRESET} reading"])
    (tmp_path / "paper_b.md").write_text(
        f"intro\n{begin}\nSTALE\n{end}\nafter\n{reread}\n{reading}\n")
    assert main(["paper-b", "report", "--preset", PRESET, "--records", str(path),
                 "--out", str(tmp_path)]) == 0
    page = (tmp_path / "paper_b.md").read_text()
    assert page.startswith("intro\n") and f"{end}\nafter\n" in page and "STALE" not in page
    assert "under the rules of 2026-11-29" in page.split(f"{end}\nafter\n")[1]   # re-read
    # no +copies grid in these records: the reading says what it still needs
    assert "Not written yet: the reading needs every cell of `paper-length` and " in page
    assert text.split("\n", 1)[1] in page
    assert main(["paper-b", "report", "--preset", PRESET, "--records",
                 str(tmp_path / "none.json"), "--out", str(tmp_path)]) == 1
    assert "no paper-length record" in capsys.readouterr().err


def test_shards_split_the_grid():
    bench = _report_script()
    parser_args = lambda shard: bench.argparse.Namespace(  # noqa: E731
        preset="paper-length", seeds=[0, 1, 2], tasks=["distance", "count"], only=None,
        labels=None, shard=shard, data=None, epochs=None, steps=None, batch_size=None, lr=None)
    preset = bench.preset_for(parser_args(None))
    every = bench.select_cells(parser_args(None), preset)
    halves = [bench.select_cells(parser_args(f"{i}/2"), preset) for i in (0, 1)]
    assert len(every) == 114 and sorted(halves[0] + halves[1], key=every.index) == every
    assert abs(len(halves[0]) - len(halves[1])) <= 1
    assert {c.seed for c in halves[0][:19]} == {0} == {c.seed for c in halves[1][:19]}
    checked = bench.preset_for(bench.argparse.Namespace(preset="paper-length", data=None,
                                                     steps=600, batch_size=32, lr=2e-3))
    assert checked.name == "paper-length@600-b32-lr0.002" and checked.batch_size == 32
    with pytest.raises(InvalidSelectionError, match="--shard I/N needs 0 <= I < N"):
        bench.select_cells(parser_args("2/2"), preset)


def test_a_held_cell_is_left_to_its_queue(tmp_path, capsys):
    """Queues sharing a grid take only cells no other queue holds; the hold is a lock that
    ends with its holder."""
    bench = _report_script()
    cell = tmp_path / "cell"
    with bench._claimed(cell) as first:
        with bench._claimed(cell) as second:        # another open file: another queue
            assert (first, second) == (True, False)
    with bench._claimed(cell) as again:             # released with its holder
        assert again

    preset = v.ENCODER_PRESETS["cpu"]
    cells = [c for c in v.grid_cells(seeds=(0,), preset=preset)
             if c.label == "nope" and c.variant == "intended"]
    records = tmp_path / "records.json"
    with bench._claimed(tmp_path / "runs" / "cpu" / cells[0].key), \
            bench._claimed(tmp_path / "runs" / "cpu" / cells[1].key):
        assert main(["paper-b", "run", "--preset", "cpu", "--labels", "nope", "--only",
                     "intended", "--root", str(tmp_path / "runs"), "--records",
                     str(records)]) == 0
    out = capsys.readouterr().out
    assert out.count("held by another queue") == 2 and not records.exists()
    assert not list((tmp_path / "runs").rglob("*.pt"))          # nothing trained


def test_cells_still_rising_and_budget_checks_are_reported():
    flat = dict(rec("distance", "rope", 0.99), steps=2400,
                history=[[300, 0.5], [1800, 0.98], [2400, 0.99]])
    rising = dict(rec("distance", "alibi", 0.75), steps=2400,
                  history=[[300, 0.1], [1800, 0.43], [2100, 0.7], [2400, 0.75]])
    assert v.late_gain(flat) == pytest.approx(0.01)
    assert v.late_gain(rising) == pytest.approx(0.32)      # from the evaluation at 3/4
    assert v.late_gain(rec("count", "nope", 0.9)) is None  # no history, no claim
    longer = dict(rising, preset=PRESET + "@4800", accuracy=0.9, steps=4800,
                  history=[[3600, 0.85], [4800, 0.9]])
    climbed = dict(rec("count", "nope", 0.995), history=[[3600, 0.9], [4800, 0.995]])
    text = v.verdict_markdown([flat, rising, longer, climbed], PRESET)
    assert ("1 of 3 cells ended below 99 % and gained more than 5 points: distance intended "
            "alibi s0 (+32.0)") in text                    # count nope reached the ceiling
    assert "| distance | intended | alibi | 0 | 75.0 at 2,400 steps | 90.0 at 4,800 steps |" in text
    assert "| alibi | 75.0 / · / · |" in text              # the check is not a seed of the grid


def test_the_copies_preset_judges_the_distance_claims_beside_the_main_table():
    copies = v.with_trigger_copies(v.ENCODER_PRESETS[PRESET])
    assert copies.name == "paper-length+copies" == v.with_trigger_copies_name(PRESET)
    assert v.with_trigger_copies(copies) is copies
    assert copies.tasks["distance"]["trigger_copies"] and set(copies.tasks) == {"distance"}
    assert copies.steps == {"distance": v.PAPER_LENGTH_STEPS["distance"]}
    cells = v.grid_cells(seeds=(0, 1, 2), tasks=("distance",), preset=copies)
    assert len(cells) == 42 and {c.label for c in cells} == set(v.MAIN)

    bench = _report_script()
    args = bench.argparse.Namespace(preset=PRESET, trigger_copies=True, seeds=[0],
                                    tasks=["distance", "count"], only=None, labels=None,
                                    shard=None, data=None, steps=None, batch_size=None, lr=None)
    chosen = bench.select_cells(args, bench.preset_for(args))
    assert len(chosen) == 14 and {c.task for c in chosen} == {"distance"}

    main = seed_cells(0) + seed_cells(1) + seed_cells(2)
    noisy = [dict(rec("distance", s, acc, seed=seed), preset=copies.name)
             for seed in (0, 1, 2) for s, acc in
             [("nope", 0.05), ("sinusoidal", 0.84), ("learned", 0.8), ("alibi", 0.82),
              ("t5", 0.3), ("rope", 0.86), ("mla", 0.83)]]
    text = v.verdict_markdown(main + noisy, PRESET)
    block = text.split("on the official filler draw", 1)[1].split("### Accuracy", 1)[0]
    assert "| 5 | MLA is near-optimal on distance" in block and "| 6 |" not in block
    assert "s0: ✓" in block.split("| 5 |", 1)[1] and "**holds** (3/3)" in block
    assert "| mla | 83.0 / 83.0 / 83.0 | · / · / · |" in block
    ceilings = [v.copies_ceiling(v.ENCODER_PRESETS[PRESET], seed)[0] for seed in (0, 1, 2)]
    assert all(0.9 < c < 0.99 for c in ceilings)      # above first-A-first-B, below saturated
    best = " / ".join(f"{c * 100:.1f}" for c in ceilings)
    assert f"| *best possible* | {best} | {best} |" in block and "below the 99 %" in block
    head = text.split("on the official filler draw (preset", 1)[0]
    assert ("Claim 5's verdict of record" in head and "intended **holds** (3/3), faithful "
            "**not judged** (0/3)" in text.split("Claim 5's verdict of record", 1)[1])


def test_the_pipeline_command_offers_every_preset():
    from lens_possym.papers.b import cli_grid, pipeline

    assert set(cli_grid.PRESETS) == set(v.ENCODER_PRESETS)
    assert set(cli_grid.DATA) == set(v.DATA_REGIMES) and set(cli_grid.TASKS) == set(v.TASK_NAMES)
    assert cli_grid.RECORDS == str(pipeline.RECORDS)
