"""The report stage of ``lens-possym paper-c`` (:mod:`.pipeline`): docs/paper_c.md,
docs/paper_c_results.json, docs/paper_c_verdict_inputs.json and docs/figures/paper_c/.

Reads only what exists: the finished runs' records (``--docs``/paper_c_runs/*.json; a
record trained with another recipe than its preset builds today is listed and its run
pending, :mod:`.identity`), the cached analyses (``--cache``, one folder per ``(preset,
seed)``; each file stamped with the run it was computed from), the length cells already
in paper_c_results.json (written by ``grid``; those of the current runs, each carrying
its run's fingerprint), the ablation's record (paper_c_ablate.json)
and the GPU timing (device/h200_paper_c.txt). The verdicts apply the rules of
docs/paper_c_rules.md (:mod:`.verdicts`) per seed; a seed that has not run, or not been
analysed, is shown as pending, never filled in. The page's sections are
:mod:`.report_sections`, its figures :mod:`.report_figures`, what it reads
:mod:`.report_data`.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from ...plugins import to_jsonable
from .identity import cells_of_runs, read_records, run_name
from .readings import CellStore, reading_claims, report_lines
from .report_data import (SEEDS, TASKS, analyses_of, first_step, load_run,
                          read_json, result_record, verdict_cell)
from .report_sections import (ablation_section, device_section, dynamics_section,
                              frequency_section, gaps_section, lengths_section, roles_section,
                              theory_section, timing_and_lm_section)
from .tasks import FILLERS, HEADLINE_FILLER
from .verdicts import (ROW_KEYS, STRICT_KEYS, STRICT_RULES, analyses_to_dict, judge_seed,
                       judge_seed_strict, judge_theory, rule, verdict)

__all__ = ["PRESET_TEXT", "COMMANDS_MD", "write_report"]

PRESET_TEXT = {
    "paper": "12 layers × 1 head, d_model = d_head = 128 (64 RoPE frequencies), MLP 512 with "
             "exact GELU; dropout 0.1 on the residual and attention and none on the embeddings "
             "(the code's `embed_pdrop` typo), drawn from a seeded stream saved in every "
             "checkpoint (a resumed run equals an uninterrupted one bit for bit, and a run "
             "retrained on any x86-64 CPU equals the committed one when MKL and ATen run "
             "their AVX2 kernels, as the committed runs did: `MKL_CBWR=AVX2 "
             "ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2`; without them an AVX-512 "
             "machine's losses differed from the 8th digit, `identity.py`); "
             "AdamW lr 1e-4, "
             "betas (0.95, 0.999), weight decay 1e-4 on weight matrices only (the Hugging Face "
             "Trainer's rule: none on biases and LayerNorm weights), batch 64, warm-up 750, "
             "linear decay to 0 at 7,000 steps (the paper's code); Letter query letter drawn "
             "from the fillers' pool (the paper's code). Departures from the code that remain: "
             "float32 on the CPU, not fp16 mixed precision (effect not measured: fp16 training "
             "needs the GPU); the final checkpoint, not `load_best_model_at_end`; our training "
             "loop, not the Trainer (the same last-token loss, optimiser and schedule)",
    "cpu": "the quick preset, not the paper's recipe: 12 layers × 1 head, d_model = d_head = 64 "
           "(32 frequencies), MLP 256 (`gelu_new`), no dropout; the Letter query's left letter "
           "is the reserved letter (`LetterTask`'s default: a chain letter that occurs nowhere "
           "else, not the paper's data, whose query letter is drawn from the fillers' pool); "
           "AdamW lr 1e-3, batch 128, warm-up 100, cosine to 2,000 steps",
}
COMMANDS_MD = (
    "Commands (every stage caches its cells and resumes; training runs as two background "
    "queues, `lens-possym paper-c queue 0|1`, one thread each; `PAPER_C_RUNS` / "
    "`PAPER_C_CACHE` point at the runs and the cache, e.g. `/work/runs/paper_c/runs`; the "
    "reference CPU kernels, so that a run retrained on any machine is the committed one):\n\n"
    "```\n"
    "export MKL_CBWR=AVX2 ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2\n"
    "lens-possym paper-c kernels --preset paper   # a CPU-minute: does this machine "
    "retrain the committed runs?\n"
    "mkdir -p out/paper_c\n"
    "nohup nice -n 10 lens-possym paper-c queue 0 > out/paper_c/queue0.log 2>&1 &   # train (hours;\n"
    "nohup nice -n 10 lens-possym paper-c queue 1 > out/paper_c/queue1.log 2>&1 &   #  resumes)\n"
    "lens-possym paper-c analyse --presets paper   # every analysis of every finished run\n"
    "lens-possym paper-c grid --presets paper      # run x reading x length, 1,000 prompts\n"
    "lens-possym paper-c stamp --cache DIR --runs RUNS   # files and cells older code "
    "wrote: stamped with their run\n"
    "lens-possym paper-c report   # a record of a former recipe: listed, its run pending\n"
    "lens-possym paper-c verdicts   # every verdict recomputed from committed files\n"
    "```")


def write_report(args: argparse.Namespace) -> Path:
    """Write the page, the results and the verdicts' inputs into ``args.docs`` from the
    records there and the analyses cached in ``args.cache``, for ``args.presets``; returns
    the page's path."""

    docs, cache = Path(args.docs), Path(args.cache)
    page, results = docs / "paper_c.md", docs / "paper_c_results.json"
    # the length cells live in the results file itself (written by the grid stage)
    length_cells = CellStore(results).cells()
    figs = docs / "figures" / "paper_c"
    presets = list(args.presets or ("paper", "cpu"))
    figs.mkdir(parents=True, exist_ok=True)
    # a record of another recipe is not the run: listed, and the run pending (identity.py)
    found = read_records(docs / "paper_c_runs")
    recs = {k: r for k, r in found.current.items() if k[1] in presets and k[2] in SEEDS}
    fingerprints = {run_name(*k): found.fingerprints[run_name(*k)] for k in recs}
    former = found.former_lines(presets)
    for line in former:
        print(f"[report] {line} (read as not there)")
    # the cells read are those of the current runs, each carrying its run's fingerprint
    read_cells = cells_of_runs(length_cells, fingerprints, source=str(results))
    lines: list[str] = []
    add = lines.append

    runs: dict[str, dict] = {p: {} for p in presets}
    judged: dict[str, dict[int, dict]] = {p: {} for p in presets}
    strict: dict[str, dict[int, dict]] = {p: {} for p in presets}
    results_json = []
    inputs_json: dict = {"source": "lens-possym paper-c report: what every rule "
                                   "reads; 'lens-possym paper-c verdicts' recomputes "
                                   "the verdict table from this file and the length cells",
                         "runs": {p: {} for p in presets}, "records": fingerprints}
    for preset in presets:
        for seed in SEEDS:
            analyses = {}
            for task in TASKS:
                rec = recs.get((task, preset, seed))
                name = run_name(task, preset, seed)
                run = load_run(cache, task, preset, seed, fingerprint=fingerprints[name]) \
                    if rec else None
                runs[preset][(task, seed)] = run
                analyses[task] = analyses_of(task, preset, seed, rec, run)
                if rec:
                    results_json.append(result_record(rec, run, fingerprints[name]))
            if any(analyses.values()):
                judged[preset][seed] = judge_seed(analyses["number"], analyses["letter"])
                strict[preset][seed] = judge_seed_strict(analyses["number"],
                                                         analyses["letter"])
                inputs_json["runs"][preset][str(seed)] = {
                    t: analyses_to_dict(a) for t, a in analyses.items() if a is not None}

    curves = read_json(cache / "index_discrepancy_v2.json")
    constructions = read_json(cache / "constructions_accuracy.json")
    measured = read_json(cache / "discrepancy_measured.json")
    theory = judge_theory(constructions, (curves or {}).get("0.8000", {}).get("task_offsets_table"),
                          (curves or {}).get("0.8000", {}).get("table"))

    def _slim(table):
        return None if not table else [{"n": r["n"], "max_holds": r["max_holds"],
                                        "min_holds": r["min_holds"]} for r in table]
    inputs_json["theory"] = {
        "constructions": constructions,
        "index_table": _slim((curves or {}).get("0.8000", {}).get("task_offsets_table")),
        "index_table_all": _slim((curves or {}).get("0.8000", {}).get("table"))}
    verdicts_json: dict = {}
    for preset in presets:
        verdicts_json[preset] = {
            "lenient": {k: verdict([judged[preset].get(s, {}).get(k) for s in SEEDS])
                        for k in ROW_KEYS if k not in ("11", "12")},
            "strict": {k: verdict([strict[preset].get(s, {}).get(k) for s in SEEDS])
                       for k in STRICT_KEYS}}
        for row in reading_claims(read_cells, preset=preset):
            if row["rule"] == "strict" and row["reading"] == HEADLINE_FILLER:
                verdicts_json[preset]["strict"][row["claim"]] = row["verdict"]
    verdicts_json["theory"] = {k: verdict([r], n_seeds=1) for k, r in theory.items()}

    # ---- header
    add("# Paper C reproduced: multi-hop Number and Letter tasks on GPT-J")
    add("")
    add("_Generated by `lens-possym paper-c report` from the finished runs' records "
        "(`docs/paper_c_runs/`) and the cached analyses; every number below is measured, none "
        "is typed in. A seed not yet trained or analysed is shown as pending._")
    add("")
    add("Paper: Urrutia et al., *Positional versus Symbolic Attention Heads: Learning Dynamics, "
        "RoPE Geometry, and Length Generalization* (arXiv 2605.31558; read in "
        "`shared/reference/paper_c.md`). Code: `lens_possym.papers.c` (tasks `number`/`letter`, "
        "`gptj`, `presets`, `dynamics`, `roles`, `chain`, `constructions`, `discrepancy`, "
        "`lengths`, `masking`, `verdicts`, `prompts`), CLI `lens-possym multihop`, pipeline `lens-possym paper-c`, "
        "notebook 06. "
        "Design notes: `docs/design.md`, section *Paper C*. Verdict rules, fixed before the "
        "runs: `docs/paper_c_rules.md`. Numbers per run: `docs/paper_c_results.json`.")
    add("")
    add("**Presets.** Both run the same code on `GPTJForCausalLM`, loss on the last token, an "
        "evaluation on 2,048 test prompts and a checkpoint every 100 steps; seeds 0, 1, 2 seed "
        "the weights, the data stream and the test split; scores on 100 test prompts (seed 1), "
        "last-token query, τ = 1e-4, exact closed form. Machine: 2 shared CPU cores, 1 torch "
        "thread per job.")
    add("")
    for preset in presets:
        add(f"- **{preset}**: {PRESET_TEXT.get(preset, '')}.")
    add("")
    add("| run | steps | train time (wall min, shared cores) | final test accuracy | first ≥ 0.99 at |")
    add("|---|---:|---:|---:|---:|")
    for preset in presets:
        for seed in SEEDS:
            for task in TASKS:
                rec = recs.get((task, preset, seed))
                if rec:
                    add(f"| {task}-{preset}-s{seed} | {rec['steps']} | "
                        f"{rec['train_time_s'] / 60:.0f} | {rec['test_accuracy']:.4f} | "
                        f"{first_step(rec['history']) or '–'} |")
                elif (task, preset, seed) in found.former:
                    add(f"| {task}-{preset}-s{seed} | pending: trained with a former recipe, "
                        "retrain it | | | |")
                else:
                    add(f"| {task}-{preset}-s{seed} | pending | | | |")
    add("")
    if former:
        add("Records in `docs/paper_c_runs/` not read as their runs (another recipe than "
            "their preset builds today; `lens_possym/papers/c/identity.py`):")
        add("")
        for line in former:
            add(f"- {line.replace('|', '/')}.")
        add("")
    for line in COMMANDS_MD.splitlines():
        add(line)
    add("")

    # ---- verdicts
    add("## Verdicts")
    add("")
    add("Each rule is applied per seed (✓ holds, ✗ does not, … pending); a claim **holds** for "
        "a preset when its rule holds in at least two of the three seeds, **does not hold** "
        "when it fails in two, and is **pending** otherwise. Rules 6 and 10 name no task and "
        "are applied to each. Where the rules leave a choice, the reading is fixed in "
        "`lens_possym/papers/c/verdicts.py` (module docstring): `m_h = ∞` for a hop count that "
        "never reaches 0.5; \"decodes\" means the logit lens's argmax is the answer on at "
        "least half of the 4-hop prompts; layer indices count blocks applied (j = 0: "
        "embeddings); rule 10's \"3 of the 4 stops\" applies to the lens and to the patching.")
    add("")
    for preset in presets:
        add(f"### `{preset}` preset")
        add("")
        add("| # | claim | paper | seed 0 | seed 1 | seed 2 | rule (per seed) | verdict |")
        add("|---|---|---|---|---|---|---|---|")
        for key in ROW_KEYS:
            if key in ("11", "12"):
                continue
            r = rule(key)
            per_seed = [judged[preset].get(s, {}).get(key) for s in SEEDS]
            claim = r.claim + (f" ({key.split()[1]})" if " " in key else "")
            add(f"| {key.split()[0]} | {claim} | {r.paper} | "
                + " | ".join(verdict_cell(x) for x in per_seed)
                + f" | {r.rule} | **{verdict(per_seed)}** |")
        add("")
        add(f"Strict rules (docs/paper_c_rules.md, addendum of 2026-11-28; claims 13-15 "
            f"per reading in the length section), beside the lenient verdict above:")
        add("")
        add("| # | strict rule (per seed) | seed 0 | seed 1 | seed 2 | strict verdict | "
            "lenient verdict |")
        add("|---|---|---|---|---|---|---|")
        for key in ("4", "5", "6 number", "6 letter", "9", "16"):
            per_seed = [strict[preset].get(s, {}).get(key) for s in SEEDS]
            lenient = [judged[preset].get(s, {}).get(key) for s in SEEDS]
            add(f"| {key} | {STRICT_RULES[key.split()[0]]} | "
                + " | ".join(verdict_cell(x) for x in per_seed)
                + f" | **{verdict(per_seed)}** | {verdict(lenient)} |")
        add("")
    add("### Theory (no seed)")
    add("")
    add("| # | claim | paper | ours | rule | verdict |")
    add("|---|---|---|---|---|---|")
    for key in ("11", "12"):
        r = rule(key)
        add(f"| {key} | {r.claim} | {r.paper} | {verdict_cell(theory[key])} | {r.rule} | "
            f"**{verdict([theory[key]], n_seeds=1)}** |")
    add("")

    # ---- per preset detail
    for preset in presets:
        present = [(t, s) for (t, s), run in runs[preset].items() if run is not None]
        add(f"## `{preset}` preset: the runs")
        add("")
        if not present:
            add("_No finished run yet._")
            add("")
            continue
        dynamics_section(add, preset, runs[preset], recs, figs)
        roles_section(add, preset, runs[preset], figs)
        lengths_section(add, preset, runs[preset], FILLERS, HEADLINE_FILLER, figs)
        for line in report_lines(read_cells, preset=preset):
            add(line)
        gaps_section(add, preset, runs[preset])
        frequency_section(add, preset, runs[preset])

    ablation_section(add, read_json(docs / "paper_c_ablate.json"))
    theory_section(add, curves, measured, constructions, figs)
    # the timing is number-cpu-s0's, read only as that run's (identity.py)
    timing = None
    if ("number", "cpu", 0) in found.current:
        timing = load_run(cache, "number", "cpu", 0,
                          fingerprint=found.fingerprints["number-cpu-s0"])["timing"]
    timing_and_lm_section(add, cache, timing)
    device_section(add, docs / "device" / "h200_paper_c.txt")

    page.write_text("\n".join(lines))
    (docs / "paper_c_verdict_inputs.json").write_text(json.dumps(
        to_jsonable(inputs_json), indent=None, separators=(",", ":"), allow_nan=False) + "\n")
    results.write_text(json.dumps(to_jsonable({
        "verdicts": verdicts_json,
        "length_cells": length_cells,
        "source": "lens-possym paper-c report (records: docs/paper_c_runs/, "
                  "analyses: the stage cache); null = not measured yet",
        "headline_filler": HEADLINE_FILLER, "gamma": 0.1,
        "runs": results_json, "former_recipe": former}), indent=1, allow_nan=False) + "\n")
    print(f"wrote {page}, {results} and {figs}/")
    return page
