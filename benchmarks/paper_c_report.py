"""The report stage of ``benchmarks/paper_c.py``: docs/paper_c.md, docs/paper_c_results.json
and docs/figures/paper_c/.

Reads only what exists: the finished runs' records (``docs/paper_c_runs/*.json``) and the
cached analyses (``--cache``, one folder per ``(preset, seed)``). The verdicts apply the
rules of docs/paper_c_rules.md (``lens_possym.papers.c.verdicts``) per seed; a seed that
has not run, or not been analysed, is shown as pending, never filled in.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "paper_c.md"
RESULTS = ROOT / "docs" / "paper_c_results.json"
RECORDS = ROOT / "docs" / "paper_c_runs"
FIGS = ROOT / "docs" / "figures" / "paper_c"
TASKS = ("number", "letter")
SEEDS = (0, 1, 2)
PRESET_TEXT = {
    "paper": "12 layers × 1 head, d_model = d_head = 128 (64 RoPE frequencies), MLP 512 with "
             "exact GELU; dropout 0.1 on the residual and attention and none on the embeddings "
             "(the code's `embed_pdrop` typo), drawn from a seeded stream saved in every "
             "checkpoint (a resumed run equals an uninterrupted one bit for bit); AdamW lr 1e-4, "
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
PAPER_LENGTHS = {"number": {50: 0.83, 100: 0.75, 200: 0.64, 300: 0.47, 500: 0.31},
                 "letter": {100: 1.0, 200: 0.99, 300: 0.98, 500: 0.95}}
COMMANDS_MD = 'Commands (every stage caches its cells and resumes; training runs as two background queues, `benchmarks/paper_c_jobs.sh`, one thread each; `PAPER_C_RUNS` / `PAPER_C_CACHE` point at the runs and the cache, e.g. `/work/runs/paper_c/runs`):\n\n```\nmkdir -p out/paper_c\nnohup nice -n 10 benchmarks/paper_c_jobs.sh 0 > out/paper_c/queue0.log 2>&1 &   # train (hours;\nnohup nice -n 10 benchmarks/paper_c_jobs.sh 1 > out/paper_c/queue1.log 2>&1 &   #  resumes)\npython benchmarks/paper_c.py analyse --presets paper   # every analysis of every finished run\npython benchmarks/paper_c.py grid --presets paper      # run x reading x length, 1,000 prompts\npython benchmarks/paper_c.py report\npython benchmarks/paper_c.py verdicts   # every verdict recomputed from committed files\n```'
MARK = {True: "✓", False: "✗", None: "…"}


# ---- reading ---------------------------------------------------------------------------------

def _json(path: Path):
    return json.loads(path.read_text()) if path.is_file() else None


def _nan(x):
    """Nested lists with JSON nulls → float tensor with nan."""
    if isinstance(x, list):
        return [_nan(v) for v in x]
    return float("nan") if x is None else x


def _tensor(x) -> torch.Tensor:
    return torch.tensor(_nan(x), dtype=torch.float32)


def records() -> dict[tuple[str, str, int], dict]:
    out = {}
    for path in sorted(RECORDS.glob("*.json")):
        r = json.loads(path.read_text())
        out[(r["task"], r["preset"], int(r["seed"]))] = r
    return out


def load_run(cache: Path, task: str, preset: str, seed: int) -> dict:
    """Every cached analysis of one run (``None`` where missing)."""
    from lens_possym.papers.c.tasks import FILLERS, HEADLINE_FILLER

    folder = cache / f"{preset}-s{seed}"
    lengths: dict[str, dict[int, dict]] = {f: {} for f in FILLERS}
    for path in sorted(folder.glob(f"length_{task}_*.json")):
        data = json.loads(path.read_text())
        lengths[data.get("filler", HEADLINE_FILLER)][int(data["lengths"][0])] = data
    masking = {}
    for path in sorted(folder.glob(f"masking_{task}_*.json")):
        data = json.loads(path.read_text())
        masking[int(data["lengths"][0])] = data
    return {"dynamics": _json(folder / f"dynamics_{task}.json"),
            "roles": _json(folder / f"roles_{task}.json"),
            "gaps": _json(folder / f"gaps_{task}.json"),
            "timing": _json(folder / f"timing_{task}.json"),
            "frequency": _json(folder / f"frequency_{task}.json"),
            "lengths": lengths, "masking": masking}


def analyses_of(task: str, preset: str, seed: int, record: dict | None, run: dict):
    """The :class:`RunAnalyses` the verdict rules read (``None`` if the run does not exist)."""
    from lens_possym.papers.c.tasks import HEADLINE_FILLER
    from lens_possym.papers.c.verdicts import RunAnalyses

    if record is None:
        return None
    a = RunAnalyses(task, preset, seed,
                    history=[(h["step"], h["test_accuracy"]) for h in record["history"]])
    d = run["dynamics"]
    if d:
        a.steps, a.accuracy_by_hops = list(d["steps"]), _nan(d["accuracy_by_hops"])
        a.pos, a.sym = _tensor(d["pos"]), _tensor(d["sym"])
    r = run["roles"]
    if r:
        a.labels = r["attention"]["labels"]
        a.hop_by_stop = _tensor(r["attention"]["hop_by_stop"])
        if "lens" in r:
            a.lens_decoded = _tensor(r["lens"]["decoded"])
            a.patch_restore = _tensor(r["patching"]["restore"])
    head = run["lengths"][HEADLINE_FILLER]
    if head:
        a.lengths = {n: v["accuracy"][0] for n, v in head.items()}
    g = run["gaps"]
    if g:
        a.gap_min = {n: _tensor(g["min"][i]) for i, n in enumerate(g["lengths"])}
        a.gap_max = {n: _tensor(g["max"][i]) for i, n in enumerate(g["lengths"])}
    return a


def first_step(history, level=0.99):
    for h in history:
        if h["test_accuracy"] >= level:
            return h["step"]
    return None


# ---- figures ---------------------------------------------------------------------------------

def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig, name: str) -> str:
    fig.tight_layout()
    fig.savefig(FIGS / name, dpi=100)
    _plt().close(fig)
    return name


def fig_dynamics(name: str, dyn: dict) -> str:
    from lens_possym.papers.c.dynamics import purity

    plt = _plt()
    steps = dyn["steps"]
    pos, sym = _tensor(dyn["pos"]), _tensor(dyn["sym"])
    fig, axes = plt.subplots(1, 4, figsize=(17, 3.6))
    ax = axes[0]
    hops = _tensor(dyn["accuracy_by_hops"])
    for h in range(hops.shape[1]):
        ax.plot(steps, hops[:, h], label=f"{h + 1} hop{'s' if h else ''}")
    ax.plot(steps, dyn["accuracy"], "k--", label="all")
    ax.axhline(0.5, color="grey", lw=0.5)
    ax.set(title=f"{name}: test accuracy", xlabel="step", ylim=(0, 1.02))
    ax.legend(fontsize=7)
    for ax, data, label in ((axes[1], pos[:, :, 0], "s_POS"), (axes[2], sym[:, :, 0], "s_SYM")):
        im = ax.imshow(data.T, aspect="auto", origin="lower", vmin=0, vmax=1, cmap="viridis",
                       extent=(steps[0], steps[-1], -0.5, data.shape[1] - 0.5))
        ax.set(title=f"{label} (last token)", xlabel="step", ylabel="layer")
        fig.colorbar(im, ax=ax)
    ax = axes[3]
    for gamma, style in ((0.1, "-"), (0.05, ":")):
        p = purity(pos, sym, steps, gamma)
        state = p.state[:, :, 0]
        ax.plot(steps, (state == 1).sum(1), "C0" + style, label=f"positional γ={gamma}")
        ax.plot(steps, (state == -1).sum(1), "C3" + style, label=f"symbolic γ={gamma}")
    ax.set(title="pure heads at each checkpoint", xlabel="step", ylim=(-0.3, pos.shape[1] + 0.3))
    ax.legend(fontsize=7)
    return _save(fig, f"dynamics_{name}.png")


def fig_layers(name: str, dyn: dict) -> str:
    """Scores and entropy of every layer over training (the paper's Fig 6)."""
    plt = _plt()
    steps = dyn["steps"]
    pos, sym = _tensor(dyn["pos"])[:, :, 0], _tensor(dyn["sym"])[:, :, 0]
    ent = _tensor(dyn["entropy"])[:, :, 0]
    ent = (ent - ent.min(0).values) / (ent.max(0).values - ent.min(0).values).clamp_min(1e-12)
    n = pos.shape[1]
    cols = (n + 1) // 2
    fig, axes = plt.subplots(2, cols, figsize=(2.4 * cols, 4.6), sharey=True, squeeze=False)
    for layer, ax in enumerate(axes.flat[:n]):
        ax.plot(steps, pos[:, layer], "C0", label="s_POS")
        ax.plot(steps, sym[:, layer], "C3", label="s_SYM")
        ax.plot(steps, ent[:, layer], "k:", label="entropy (min-max)")
        ax.set_title(f"L{layer}", fontsize=9)
        ax.tick_params(labelsize=7)
    axes.flat[0].legend(fontsize=6)
    fig.suptitle(f"{name}: scores and entropy per layer over training (cf. paper Fig 6)")
    return _save(fig, f"layers_{name}.png")


def fig_chain(name: str, roles: dict) -> str:
    plt = _plt()
    lens = _tensor(roles["lens"]["decoded"])
    patch = _tensor(roles["patching"]["restore"])
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.4))
    H = lens.shape[0]
    for ax, table, title in ((axes[0], lens, "logit lens decodes the answer"),
                             (axes[1], patch, "residual patch restores")):
        im = ax.imshow(table[H - 1, :, :H].T, aspect="auto", origin="lower", vmin=0, vmax=1,
                       cmap="magma")
        for k in range(H):
            ax.plot([H - k], [k], "c+", ms=9)
        ax.set(title=f"{H}-hop: {title}", xlabel="blocks applied j", ylabel="stop k (p_k)")
        fig.colorbar(im, ax=ax)
    fig.suptitle(f"{name} (+: the schedule j = h - k)", fontsize=9)
    return _save(fig, f"chain_{name}.png")


def fig_discrepancy(curves: dict, measured: dict | None) -> str:
    """T_Index's Δ (max and min over inputs; all offsets and the task's own) against
    Theorem 3.2's bound, and T_Retrieval's measured Δ against 1 − cos(ω − nθ)."""
    plt = _plt()
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.8))
    ax = axes[0]
    c = curves["0.8000"]
    ax.loglog(c["n"], c["delta_max"], "C0", lw=1, label="Δ max, all offsets (Def 3.1)")
    ax.loglog(c["n"], c["delta_min"], "C2", lw=1, label="Δ min, all offsets (Lemma F.1)")
    own = c["task_offsets_table"]
    ax.loglog([r["n"] for r in own], [r["delta_max"] for r in own], "C3", lw=1,
              label=f"Δ max, task offsets {c['task_offsets'][0]}..{c['task_offsets'][-1]}")
    ax.loglog(c["n"], c["bound"], "k--", label="min{1-cos θ, 2π²/n²}")
    ax.set(title="T_Index, θ = 0.8", xlabel="n", ylabel="discrepancy / A")
    ax.legend(fontsize=7)
    ax = axes[1]
    for i, (theta, rows) in enumerate((measured or {}).get("retrieval", {}).items()):
        ns = sorted(int(n) for n in rows)
        ax.plot(ns, [rows[str(n)]["max"] for n in ns], f"C{i}-o", ms=3, label=f"θ={theta}: max")
        ax.plot(ns, [rows[str(n)]["min"] for n in ns], f"C{i}:s", ms=3, label=f"θ={theta}: min")
        ax.plot(ns, [max(rows[str(n)]["bound"], 1e-4) for n in ns], f"C{i}--", lw=0.8)
    ax.set(xscale="log", title="T_Retrieval, |ALPH| = 8 (dashed: 1-cos(ω-nθ))", xlabel="n",
           ylabel="discrepancy / A")
    ax.legend(fontsize=6)
    return _save(fig, "discrepancy.png")


def fig_lengths(preset: str, runs: dict) -> str | None:
    from lens_possym.papers.c.tasks import HEADLINE_FILLER

    plt = _plt()
    fig, ax = plt.subplots(figsize=(6, 3.8))
    drawn = False
    for i, task in enumerate(TASKS):
        for seed in SEEDS:
            run = runs.get((task, seed))
            rows = (run or {}).get("lengths", {}).get(HEADLINE_FILLER) or {}
            if rows:
                ns = sorted(rows)
                ax.plot(ns, [rows[n]["accuracy"][0] for n in ns], f"C{i}-o", ms=3, lw=1,
                        label=f"{task} s{seed}")
                drawn = True
        paper = PAPER_LENGTHS[task]
        ax.plot(sorted(paper), [paper[n] for n in sorted(paper)], f"C{i}x:", label=f"{task} (paper ≈)")
    if not drawn:
        _plt().close(fig)
        return None
    ax.set(xscale="log", ylim=(0, 1.02), xlabel="length (tokens)", ylabel="accuracy",
           title=f"{preset} preset (training length 17), headline reading")
    ax.legend(fontsize=6, ncol=2)
    return _save(fig, f"lengths_{preset}.png")


# ---- the page --------------------------------------------------------------------------------

def _order(item):
    """Runs by seed, Number before Letter."""
    (task, seed), _ = item
    return seed, TASKS.index(task)


def _cell(result) -> str:
    if result is None:
        return "… not run"
    text = result.ours.replace("|", "/")
    return f"{MARK[result.holds]} {text}"


def _fmt(x, digits=2) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "–"
    return f"{x:.{digits}f}"


def write_report(args=None) -> Path:
    from lens_possym.papers.c.dynamics import purity
    from lens_possym.papers.c.tasks import FILLERS, HEADLINE_FILLER
    from lens_possym.papers.c.verdicts import (
        ROW_KEYS,
        convergence_step,
        STRICT_KEYS,
        STRICT_RULES,
        analyses_to_dict,
        judge_seed,
        judge_seed_strict,
        judge_theory,
        rule,
        verdict,
    )

    global DOC, RESULTS, RECORDS, FIGS
    docs = Path(getattr(args, "docs", None) or ROOT / "docs")
    DOC, RESULTS = docs / "paper_c.md", docs / "paper_c_results.json"
    from lens_possym.papers.c.readings import CellStore, report_lines
    # the length cells live in the results file itself (written by the grid stage)
    length_cells = CellStore(RESULTS).cells()
    RECORDS, FIGS = docs / "paper_c_runs", docs / "figures" / "paper_c"
    cache = Path(getattr(args, "cache", None) or ROOT / "out" / "paper_c" / "cache")
    presets = list(getattr(args, "presets", None) or ("paper", "cpu"))
    FIGS.mkdir(parents=True, exist_ok=True)
    recs = records()
    lines: list[str] = []
    add = lines.append

    runs: dict[str, dict] = {p: {} for p in presets}
    judged: dict[str, dict[int, dict]] = {p: {} for p in presets}
    strict: dict[str, dict[int, dict]] = {p: {} for p in presets}
    results_json = []
    inputs_json: dict = {"source": "python benchmarks/paper_c.py report: what every rule "
                                   "reads; 'python benchmarks/paper_c.py verdicts' recomputes "
                                   "the verdict table from this file and the length cells",
                         "runs": {p: {} for p in presets}}
    for preset in presets:
        for seed in SEEDS:
            analyses = {}
            for task in TASKS:
                rec = recs.get((task, preset, seed))
                run = load_run(cache, task, preset, seed)
                runs[preset][(task, seed)] = run if rec else None
                analyses[task] = analyses_of(task, preset, seed, rec, run)
                if rec:
                    results_json.append(result_record(rec, run))
            if any(analyses.values()):
                judged[preset][seed] = judge_seed(analyses["number"], analyses["letter"])
                strict[preset][seed] = judge_seed_strict(analyses["number"],
                                                         analyses["letter"])
                inputs_json["runs"][preset][str(seed)] = {
                    t: analyses_to_dict(a) for t, a in analyses.items() if a is not None}

    curves = _json(cache / "index_discrepancy_v2.json")
    constructions = _json(cache / "constructions_accuracy.json")
    measured = _json(cache / "discrepancy_measured.json")
    theory = judge_theory(constructions, (curves or {}).get("0.8000", {}).get("task_offsets_table"),
                          (curves or {}).get("0.8000", {}).get("table"))

    def _slim(table):
        return None if not table else [{"n": r["n"], "max_holds": r["max_holds"],
                                        "min_holds": r["min_holds"]} for r in table]
    inputs_json["theory"] = {
        "constructions": constructions,
        "index_table": _slim((curves or {}).get("0.8000", {}).get("task_offsets_table")),
        "index_table_all": _slim((curves or {}).get("0.8000", {}).get("table"))}
    from lens_possym.papers.c.readings import reading_claims
    verdicts_json: dict = {}
    for preset in presets:
        verdicts_json[preset] = {
            "lenient": {k: verdict([judged[preset].get(s, {}).get(k) for s in SEEDS])
                        for k in ROW_KEYS if k not in ("11", "12")},
            "strict": {k: verdict([strict[preset].get(s, {}).get(k) for s in SEEDS])
                       for k in STRICT_KEYS}}
        for row in reading_claims(length_cells, preset=preset):
            if row["rule"] == "strict" and row["reading"] == HEADLINE_FILLER:
                verdicts_json[preset]["strict"][row["claim"]] = row["verdict"]
    verdicts_json["theory"] = {k: verdict([r], n_seeds=1) for k, r in theory.items()}

    # ---- header
    add("# Paper C reproduced: multi-hop Number and Letter tasks on GPT-J")
    add("")
    add("_Generated by `python benchmarks/paper_c.py report` from the finished runs' records "
        "(`docs/paper_c_runs/`) and the cached analyses; every number below is measured, none "
        "is typed in. A seed not yet trained or analysed is shown as pending._")
    add("")
    add("Paper: Urrutia et al., *Positional versus Symbolic Attention Heads: Learning Dynamics, "
        "RoPE Geometry, and Length Generalization* (arXiv 2605.31558; read in "
        "`shared/reference/paper_c.md`). Code: `lens_possym.papers.c` (tasks `number`/`letter`, "
        "`gptj`, `presets`, `dynamics`, `roles`, `chain`, `constructions`, `discrepancy`, "
        "`lengths`, `masking`, `verdicts`, `prompts`), CLI `lens-possym multihop`, notebook 06. "
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
                else:
                    add(f"| {task}-{preset}-s{seed} | pending | | | |")
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
                + " | ".join(_cell(x) for x in per_seed)
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
                + " | ".join(_cell(x) for x in per_seed)
                + f" | **{verdict(per_seed)}** | {verdict(lenient)} |")
        add("")
    add("### Theory (no seed)")
    add("")
    add("| # | claim | paper | ours | rule | verdict |")
    add("|---|---|---|---|---|---|")
    for key in ("11", "12"):
        r = rule(key)
        add(f"| {key} | {r.claim} | {r.paper} | {_cell(theory[key])} | {r.rule} | "
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
        _dynamics_section(add, preset, runs[preset], recs, purity, convergence_step)
        _roles_section(add, preset, runs[preset])
        _lengths_section(add, preset, runs[preset], FILLERS, HEADLINE_FILLER)
        for line in report_lines(length_cells, preset=preset):
            add(line)
        _gaps_section(add, preset, runs[preset])
        _frequency_section(add, preset, runs[preset])

    _ablation_section(add, _json(docs / "paper_c_ablate.json"))
    _theory_section(add, curves, measured, constructions)
    _timing_and_lm(add, cache)
    _device_section(add, docs / "device" / "h200_paper_c.txt")

    DOC.write_text("\n".join(lines))
    (docs / "paper_c_verdict_inputs.json").write_text(
        json.dumps(inputs_json, indent=None, separators=(",", ":"), default=_plain_json) + "\n")
    RESULTS.write_text(json.dumps({
        "verdicts": verdicts_json,
        "length_cells": length_cells,
        "source": "python benchmarks/paper_c.py report (records: docs/paper_c_runs/, "
                  "analyses: the stage cache); null = not measured yet",
        "headline_filler": HEADLINE_FILLER, "gamma": 0.1,
        "runs": results_json}, indent=1) + "\n")
    print(f"wrote {DOC}, {RESULTS} and {FIGS}/")
    return DOC


def result_record(rec: dict, run: dict) -> dict:
    from lens_possym.papers.c.dynamics import purity
    from lens_possym.papers.c.tasks import FILLERS, HEADLINE_FILLER

    head = run["lengths"][HEADLINE_FILLER]
    pos_end = sym_end = None
    d = run["dynamics"]
    if d:
        p = purity(_tensor(d["pos"]), _tensor(d["sym"]), d["steps"], 0.1)
        counts = p.final_counts()
        pos_end, sym_end = counts["positional"], counts["symbolic"]
    return {
        "task": rec["task"], "preset": rec["preset"], "seed": rec["seed"],
        "steps": rec["steps"], "test_accuracy": rec["test_accuracy"],
        "accuracy_by_length": {str(n): head[n]["accuracy"][0] for n in sorted(head)} or None,
        "accuracy_by_length_by_reading": {
            f: {str(n): v["accuracy"][0] for n, v in sorted(run["lengths"][f].items())}
            for f in FILLERS if run["lengths"][f]} or None,
        "first_step_at_0.99": first_step(rec["history"]),
        "pure_positional_end": pos_end, "pure_symbolic_end": sym_end,
        "train_time_s": rec["train_time_s"],
    }


def _dynamics_section(add, preset, runs, recs, purity, convergence_step):
    add("### Learning dynamics")
    add("")
    add("Mid-rise step `m_h` (first evaluation with hop count h's accuracy ≥ 0.5) and "
        "convergence `T` (overall ≥ 0.99), heads pure at the end (γ = 0.1; P positional, S "
        "symbolic, with the step from which they stay so).")
    add("")
    add("| run | m_1 | m_2 | m_3 | m_4 | T | pure at the end (γ = 0.1), per layer |")
    add("|---|---:|---:|---:|---:|---:|---|")
    from lens_possym.papers.c.verdicts import mid_rise

    for (task, seed), run in sorted(runs.items(), key=_order):
        if run is None:
            continue
        rec = recs[(task, preset, seed)]
        T = convergence_step([(h["step"], h["test_accuracy"]) for h in rec["history"]])
        d = run["dynamics"]
        name = f"{task}-{preset}-s{seed}"
        if not d:
            add(f"| {name} | … | … | … | … | {'∞' if math.isinf(T) else int(T)} | … (not analysed) |")
            continue
        per_hop = list(zip(*_nan(d["accuracy_by_hops"])))
        m = [mid_rise(d["steps"], v) for v in per_hop]
        p = purity(_tensor(d["pos"]), _tensor(d["sym"]), d["steps"], 0.1)
        cells = []
        for layer in range(p.state.shape[1]):
            key = (layer, 0)
            if key in p.settled_kind:
                cells.append(f"L{layer} {'P' if p.settled_kind[key] == 'positional' else 'S'}"
                             f"{p.settled_step[key]}")
        show = lambda x: "∞" if math.isinf(x) else str(int(x))  # noqa: E731
        add(f"| {name} | " + " | ".join(show(x) for x in m) + f" | {show(T)} | "
            + (", ".join(cells) or "none") + " |")
        fig_dynamics(name, d)
    add("")
    for (task, seed), run in sorted(runs.items(), key=_order):
        if run is not None and run["dynamics"]:
            name = f"{task}-{preset}-s{seed}"
            add(f"![{name}](figures/paper_c/dynamics_{name}.png)")
            add("")
            if seed == 0:
                add(f"![{name} per layer](figures/paper_c/{fig_layers(name, run['dynamics'])})")
                add("")


def _roles_section(add, preset, runs):
    add("### Roles, the logit lens and residual patching (final checkpoint, 200 test prompts)")
    add("")
    add("Roles from attention: hop share on the schedule ℓ = h−1−k (layer ℓ's stops), "
        "Reflexive = the query's mass on itself and on the stops that carry the answer, the "
        "answer position excluded. Chain: the first number of blocks j after which the logit "
        "lens decodes the answer at stop p_k (4-hop prompts, k = 0..3; the schedule says "
        "j = 4, 3, 2, 1) and after which patching the clean residual stream at p_k restores "
        "≥ 0.8; beside them the single-head test (one head's output at p_k, on the chain vs "
        "off it).")
    add("")
    add("| run | labels L0…L11 | hop share on schedule L0-L3 | lens: first j (k = 0..3) | "
        "residual patch: first j | single head on / off chain |")
    add("|---|---|---|---|---|---|")
    short = {"Index": "I", "Retrieval": "R", "Reflexive": "F", "other": "·"}
    for (task, seed), run in sorted(runs.items(), key=_order):
        if run is None:
            continue
        r = run["roles"]
        name = f"{task}-{preset}-s{seed}"
        if not r:
            add(f"| {name} | … | … | … | … | … |")
            continue
        labels = "".join(short[row[0]] for row in r["attention"]["labels"])
        hop = ", ".join(_fmt(row[0]) for row in _nan(r["attention"]["hop"])[:4])
        firsts = []
        for table, level in ((r["lens"]["decoded"], 0.5), (r["patching"]["restore"], 0.8)):
            t = _tensor(table)
            H = t.shape[0]
            out = []
            for k in range(H):
                hit = (t[H - 1, :, k] >= level).nonzero()
                out.append(str(int(hit[0])) if len(hit) else "–")
            firsts.append(", ".join(out))
        on, off = r["causal"]["chain_restore"]
        add(f"| {name} | `{labels}` | {hop} | {firsts[0]} | {firsts[1]} | {_fmt(on)} / "
            f"{_fmt(off)} |")
        if seed == 0:
            fig_chain(name, r)
    add("")
    add("Labels: I Index, R Retrieval, F Reflexive, · other.")
    add("")
    for (task, seed), run in sorted(runs.items(), key=_order):
        if run is not None and run["roles"] and seed == 0:
            add(f"![{task}-{preset}-s{seed} chain](figures/paper_c/chain_{task}-{preset}-s{seed}.png)")
            add("")


def _plain_json(x):
    import math as _math
    if isinstance(x, float) and not _math.isfinite(x):
        return None
    raise TypeError(type(x))


def _frequency_section(add, preset, runs):
    """Table 1 / Fig 8: each layer's weighted-average frequency ID beside the paper's."""
    from lens_possym.papers.c.frequency import TABLE_1

    have = {k: run["frequency"] for k, run in runs.items() if run and run.get("frequency")}
    add("### Which RoPE frequencies each layer uses (Table 1 / Fig 8)")
    add("")
    add("`lens_possym.papers.c.frequency`: per layer, the max logit term per frequency ID "
        "(Fig 4C's quantity; IDs 1..64, ID 1 the fastest), mean over 100 test prompts "
        "(seed 1, last-token query), and its weighted-average ID (the centroid over the "
        "positive part), beside Table 1's IDs.")
    add("")
    if not have:
        add(f"_Pending: `python benchmarks/paper_c.py analyse --presets {preset} "
            "--analyses frequency`._")
        add("")
        return
    n_layers = max(len(f["weighted"]) for f in have.values())
    add("| run | " + " | ".join(f"L{i}" for i in range(n_layers)) + " | L0-L3 / L4-L11 |")
    add("|---|" + "---:|" * n_layers + "---|")
    for (task, seed), f in sorted(have.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        w = f["weighted"]
        early, late = w[:4], w[4:]
        add(f"| {task}-{preset}-s{seed} | " + " | ".join(f"{x:.1f}" for x in w)
            + f" | {sum(early) / len(early):.1f} / {sum(late) / max(1, len(late)):.1f} |")
    for task in ("number", "letter"):
        add(f"| {task} (Table 1) | " + " | ".join(str(x) for x in TABLE_1[task])
            + f" | {sum(TABLE_1[task][:4]) / 4:.1f} / {sum(TABLE_1[task][4:]) / 8:.1f} |")
    add("")


def _lengths_section(add, preset, runs, fillers, headline):
    add("### Length generalisation")
    add("")
    add("Extra target-window tokens in front of the effective target window (pre-target "
        "window and query unchanged), 256 test prompts per length (seed 11), hops 1-4 in "
        f"equal shares. **Headline reading: `{headline}`** (extra tokens drawn like the target "
        "window's fillers); the other readings (`lens_possym/papers/c/tasks.py`, `FILLERS`): "
        "`pretarget` (drawn like the pre-target fillers), `mixed` (either, with probability "
        "1/2), `repeat` (the effective target window tiled leftwards).")
    add("")
    fig = fig_lengths(preset, runs)
    if fig:
        add(f"![lengths {preset}](figures/paper_c/{fig})")
        add("")
    all_n = sorted({n for run in runs.values() if run for f in fillers
                    for n in run["lengths"][f]})
    if not all_n:
        add("_Not measured yet._")
        add("")
        return
    add("| run, reading | " + " | ".join(str(n) for n in all_n) + " |")
    add("|---|" + "---:|" * len(all_n))
    for (task, seed), run in sorted(runs.items(), key=_order):
        if run is None:
            continue
        for f in fillers:
            rows = run["lengths"][f]
            if rows:
                mark = " (headline)" if f == headline else ""
                add(f"| {task}-s{seed} {f}{mark} | " + " | ".join(
                    _fmt(rows[n]["accuracy"][0], 3) if n in rows else "" for n in all_n) + " |")
    for task in ("number", "letter"):
        paper = PAPER_LENGTHS[task]
        add(f"| {task} (paper ≈) | " + " | ".join(
            _fmt(paper.get(n)) if n in paper else "" for n in all_n) + " |")
    add("")
    add("Accuracy per hop count (1 / 2 / 3 / 4 hops), headline reading:")
    add("")
    ns = sorted({n for run in runs.values() if run for n in run["lengths"][headline]})
    add("| run | " + " | ".join(str(n) for n in ns) + " |")
    add("|---|" + "---:|" * len(ns))
    for (task, seed), run in sorted(runs.items(), key=_order):
        if run is None or not run["lengths"][headline]:
            continue
        rows = run["lengths"][headline]
        add(f"| {task}-s{seed} | " + " | ".join(
            " / ".join(_fmt(a) for a in _nan(rows[n]["by_hops"][0])) if n in rows else ""
            for n in ns) + " |")
    add("")
    masked = [(k, run) for k, run in runs.items() if run and run["masking"]]
    if masked:
        add("**Why it fails: the masking diagnostic** (`lens_possym.papers.c.masking`): the "
            "same prompts as built, with the extra tokens hidden from layers 0-3 (no query "
            "at an effective position attends to them there), and with the extra tokens at "
            "trained-range position ids (extra token i at the id of effective target "
            "position i mod 8).")
        add("")
        ns = sorted({n for _, run in masked for n in run["masking"]})
        add("| run | " + " | ".join(f"{n}: as built / masked L0-3 / positions" for n in ns) + " |")
        add("|---|" + "---|" * len(ns))
        for (task, seed), run in sorted(masked, key=_order):
            cells = []
            for n in ns:
                m = run["masking"].get(n)
                cells.append(" / ".join(_fmt(m["accuracy"][mode][0], 3) for mode in
                                        ("as built", "mask", "positions")) if m else "")
            add(f"| {task}-s{seed} | " + " | ".join(cells) + " |")
        add("")
        longest = ns[-1]
        at = [run["masking"][longest]["accuracy"] for _, run in masked
              if longest in run["masking"]]
        if at:
            lo = min(a["mask"][0] for a in at)
            built = max(a["as built"][0] for a in at)
            pos = max(a["positions"][0] for a in at)
            add(f"At {longest} tokens, over these {len(at)} runs: as built at most "
                f"{built:.3f}; with the extra tokens hidden from layers 0-3 at least "
                f"**{lo:.3f}**; at trained-range position ids at most {pos:.3f}. "
                + ("The later layers solve the long prompts once layers 0-3 do not see the "
                   "extra tokens, and unseen distances are not what fails: the failure is in "
                   "layers 0-3's attention to the extra tokens."
                   if lo >= 0.9 and lo - built >= 0.2 else
                   "Hiding the extra tokens from layers 0-3 does not restore these runs, so "
                   "layers 0-3 are not the whole cause here."))
            add("")


def _gaps_section(add, preset, runs):
    present = [(k, run) for k, run in runs.items() if run and run["gaps"]]
    if not present:
        return
    add("### Trained heads' discrepancy (top-2 attention-logit gap, 64 inputs per length)")
    add("")
    add("Lemma F.1's **min** and Def 3.1's **max** over inputs, per layer, at lengths "
        "17 → 300 (not means).")
    add("")
    for (task, seed), run in sorted(present, key=_order):
        g = run["gaps"]
        ns = g["lengths"]
        i17, i300 = ns.index(17), ns.index(300)
        n_layers = len(g["min"][0])
        add(f"- **{task}-s{seed}**: " + "; ".join(
            f"L{layer} min {g['min'][i17][layer][0]:.2f}→{g['min'][i300][layer][0]:.2f}, max "
            f"{g['max'][i17][layer][0]:.2f}→{g['max'][i300][layer][0]:.2f}"
            for layer in range(n_layers)) + ".")
    add("")


def _ablation_section(add, ablate: dict | None) -> None:
    """Build 4: why Letter falls short at length, one setting at a time from the `cpu`
    preset towards the `paper` preset (benchmarks/paper_c_ablate_settings.py)."""
    add("## Why Letter falls short at length: one setting at a time")
    add("")
    if not ablate or not ablate.get("rows"):
        add("_Not run in this build: `python benchmarks/paper_c_ablate_settings.py --record "
            "docs/paper_c_ablate.json`._")
        add("")
        return
    rows, base_preset = ablate["rows"], ablate["base"]
    changes = {name: ", ".join(f"{k} {v}" for k, v in {**v["model"], **v["train"]}.items())
               or f"none (the `{base_preset}` preset)" for name, v in ablate["variants"].items()}
    last = {}
    for r in rows:
        if r["step"] >= last.get(r["variant"], {"step": -1})["step"]:
            last[r["variant"]] = r
    ns = sorted({int(n) for r in rows for n in r["lengths"]})
    mask_ns = sorted({int(n) for r in rows for n in r["mask_lengths"]})
    gap_n = max(int(n) for r in rows for n in r["gap_lengths"])
    add(f"`{ablate.get('command', 'python benchmarks/paper_c_ablate_settings.py')}` (Letter, "
        f"seed {ablate['seed']}, {ablate.get('n_prompts', 256)} prompts per length, headline "
        f"filler reading). Each variant is the `{base_preset}` preset with exactly one setting "
        f"changed to the `paper` preset's value; the `base` variant is the `{base_preset}` "
        "preset's own run. At the "
        "last step of each: accuracy per length; the masking diagnostic (the extra tokens "
        "hidden from layers 0-3 / the extra tokens at trained-range position ids, "
        "`lens_possym.papers.c.masking.extension_accuracy`); the early heads' top-2 logit gap "
        f"(Lemma F.1's min over 64 inputs, layers 0-3) at length {gap_n}.")
    add("")
    add("| variant | change | steps | " + " | ".join(f"acc {n}" for n in ns) + " | "
        + " | ".join(f"{n}: masked L0-3 / positions" for n in mask_ns)
        + f" | min gap L0-L3 at {gap_n} |")
    add("|---|---|---:|" + "---:|" * len(ns) + "---|" * len(mask_ns) + "---|")
    for name, r in last.items():
        add(f"| {name} | {changes[name]} | {r['step']} | "
            + " | ".join(_fmt(r["lengths"].get(str(n)), 3) for n in ns) + " | "
            + " | ".join(f"{_fmt(r['masking']['mask'][i], 3)} / "
                         f"{_fmt(r['masking']['positions'][i], 3)}"
                         for i, _ in enumerate(r["mask_lengths"]))
            + " | " + ", ".join(_fmt(g) for g in r["gap_min"][-1]) + " |")
    add("")
    far = str(max(ns))
    base = last.get("base")
    if base:
        gains = {n: r["lengths"][far] - base["lengths"][far] for n, r in last.items()
                 if n != "base"}
        if gains:
            best = max(gains, key=gains.get)
            add(f"At {far} tokens the base scores {_fmt(base['lengths'][far], 3)}; one change at "
                "a time moves it by " + ", ".join(f"{n} {gains[n]:+.3f}" for n in gains)
                + f"; the largest single change is **{best}**.")
            add("")
    short = [n for n, r in last.items() if r["lengths"].get(str(min(ns)), 1.0) < 0.9]
    if short:
        add(f"Not trained to the task at its last step (accuracy at {min(ns)} below 0.9): "
            f"{', '.join(short)}; its length figures say nothing about length.")
        add("")
    add("Over training (accuracy at " + " / ".join(str(n) for n in ns[1:])
        + f"; masked L0-3 at {mask_ns[-1]}):")
    add("")
    steps = sorted({r["step"] for r in rows})
    add("| variant | " + " | ".join(f"step {s}" for s in steps) + " |")
    add("|---|" + "---|" * len(steps))
    for name in last:
        by_step = {r["step"]: r for r in rows if r["variant"] == name}
        add(f"| {name} | " + " | ".join(
            (" / ".join(_fmt(by_step[s]["lengths"][str(n)]) for n in ns[1:])
             + f"; {_fmt(by_step[s]['masking']['mask'][-1])}") if s in by_step else ""
            for s in steps) + " |")
    add("")


def _device_section(add, path: Path) -> None:
    add("## On a GPU")
    add("")
    text = path.read_text() if path.is_file() else ""
    rows = [line.split() for line in text.splitlines()
            if line.split()[:1] in (["paper"], ["cpu"]) and len(line.split()) == 5]
    if not rows:
        add("_Not measured: `python benchmarks/bench_paper_c.py --device cuda --steps 50` on a "
            "GPU machine (docs/device/)._")
        add("")
        return
    add("`python benchmarks/bench_paper_c.py --device cuda --steps 50` on one NVIDIA H200 "
        "(`docs/device/h200_paper_c.txt`, one torch thread, CUDA time): a whole run of each "
        "preset and task, evaluations included. The runs above trained on the CPU because the "
        "checkpoints every 100 steps (1.9 GB per `paper` run) cannot come back from the lent "
        "machine.")
    add("")
    add("| preset | task | ms per step | run (min) |")
    add("|---|---|---:|---:|")
    for preset, task, ms, _eval, minutes in rows:
        add(f"| {preset} | {task} | {ms} | {minutes} |")
    add("")


def _theory_section(add, curves, measured, constructions):
    add("## Constructions and Theorem 3.2")
    add("")
    if constructions:
        add("T_Index / T_Retrieval accuracy at length 17 (2,048 one-hop prompts): " + ", ".join(
            f"{k} {v:.3f}" for k, v in constructions.items()) + ".")
        add("")
    if curves:
        add(f"![discrepancy](figures/paper_c/{fig_discrepancy(curves, measured)})")
        add("")
        for theta, c in curves.items():
            add(f"- T_Index, θ = {theta} (closed form, every 1-hop input): the bound "
                f"min{{1−cos θ, 2π²/n²}} fails for the **max** over inputs (Def 3.1) at "
                f"{c['max_fails']} of 999 lengths 2..1000 over all offsets, and at "
                f"{c['task_offsets_max_fails']} of 984 lengths 17..1000 over the task's own "
                f"offsets {c['task_offsets'][0]}..{c['task_offsets'][-1]}; for the **min** "
                f"(Lemma F.1) at {c['min_fails']} (all offsets) and "
                f"{c['task_offsets_min_fails']} (task offsets).")
        add("")
    if measured:
        add("T_Retrieval (256 Letter inputs per length; Δ max / min over inputs, the bound "
            "1−cos(ω−nθ), accuracy):")
        add("")
        add("| θ | n | Δ max | Δ min | 1−cos(ω−nθ) | accuracy |")
        add("|---|---:|---:|---:|---:|---:|")
        for theta, rows in measured["retrieval"].items():
            for n, r in rows.items():
                add(f"| {theta} | {n} | {r['max']:.4f} | {r['min']:.4f} | {r['bound']:.4f} | "
                    f"{r['accuracy']:.3f} |")
        add("")
    if not (curves or measured or constructions):
        add("_Not measured yet: `python benchmarks/paper_c.py discrepancy`._")
        add("")


def _timing_and_lm(add, cache: Path):
    timing = _json(cache / "cpu-s0" / "timing_number.json")
    add("## Scoring every checkpoint: exact against re-run")
    add("")
    if timing:
        add(f"`python benchmarks/paper_c.py timing --force` (cpu preset, seed 0, "
            f"{timing['task']}): all **{timing['n_checkpoints']} checkpoints** × "
            f"{timing['n_layers']} layers, last-token query, {timing['n_prompts']} prompts, exact "
            f"closed form: **{timing['exact_all_s']:.1f} s** ({timing['exact_per_checkpoint_s']:.2f} "
            f"s per checkpoint); the re-run method on step {timing['rerun_subset']}: "
            f"{timing['rerun_s']:.1f} s, **{timing['ratio']:.0f}× slower** per checkpoint; largest "
            f"|exact − re-run| = {timing['max_abs_diff']:.1e} (load average {timing['load']:.1f}).")
    else:
        add("_Not measured in this build: `python benchmarks/paper_c.py timing --force` once "
            "`number-cpu-s0` is trained._")
    add("")
    lm: dict = {}
    for path in sorted(cache.glob("lm_*.json")):
        data = json.loads(path.read_text())
        lm.setdefault(f"{data['model']} {data['task']}", {})[data["lengths"][0]] = data
    add("## Small pretrained LMs on the 1-hop prompts (paper Table 3's protocol)")
    add("")
    if not lm:
        add("_Not measured in this build: `python benchmarks/paper_c.py lm`._")
        add("")
        return
    ns = sorted({n for rows in lm.values() for n in rows})
    add("Greedy decoding, 3 worked examples; a cell is the share answered exactly.")
    add("")
    add("| model, task | " + " | ".join(str(n) for n in ns) + " |")
    add("|---|" + "---:|" * len(ns))
    for key, rows in sorted(lm.items()):
        add(f"| {key} | " + " | ".join(_fmt(rows[n]["accuracy"][0]) if n in rows else ""
                                      for n in ns) + " |")
    add("")
