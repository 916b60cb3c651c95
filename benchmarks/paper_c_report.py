"""The report stage of ``benchmarks/paper_c.py``: docs/paper_c.md and docs/figures/paper_c/.

Reads only the cached stage results (``out/paper_c/cache``); a missing stage is reported
as missing, never invented. Verdicts follow the rules printed beside them.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
CACHE = ROOT / "out" / "paper_c" / "cache"
DOC = ROOT / "docs" / "paper_c.md"
FIGS = ROOT / "docs" / "figures" / "paper_c"
TASKS = ("number", "letter")

# the paper's numbers (docs: paper_c.md sections 4 and 7; ≈ = read off a figure)
PAPER_LENGTHS = {"number": {50: 0.83, 100: 0.75, 200: 0.64, 300: 0.47, 500: 0.31},
                 "letter": {100: 1.0, 200: 0.99, 300: 0.98, 500: 0.95}}


def load(name: str):
    path = CACHE / f"{name}.json"
    return json.loads(path.read_text()) if path.is_file() else None


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def first_step(steps, values, threshold):
    for s, v in zip(steps, values):
        if v is not None and v >= threshold:
            return s
    return None


# ---- figures --------------------------------------------------------------------------------

def _save(fig, name: str) -> str:
    """Lay out, write ``docs/figures/paper_c/<name>`` and close ``fig``; return ``name``."""
    fig.tight_layout()
    fig.savefig(FIGS / name, dpi=110)
    _plt().close(fig)
    return name


def fig_dynamics(task: str, dyn: dict, purity_by_gamma: dict) -> str:
    plt = _plt()
    steps = dyn["steps"]
    pos, sym = torch.tensor(dyn["pos"])[:, :, 0], torch.tensor(dyn["sym"])[:, :, 0]
    fig, axes = plt.subplots(1, 4, figsize=(17, 3.6))
    ax = axes[0]
    hops = torch.tensor(dyn["accuracy_by_hops"])
    for h in range(hops.shape[1]):
        ax.plot(steps, hops[:, h], label=f"{h + 1} hop{'s' if h else ''}")
    ax.plot(steps, dyn["accuracy"], "k--", label="all")
    ax.set(title=f"{task}: test accuracy", xlabel="step", ylim=(0, 1.02))
    ax.legend(fontsize=7)
    for ax, data, name in ((axes[1], pos, "s_POS"), (axes[2], sym, "s_SYM")):
        im = ax.imshow(data.T, aspect="auto", origin="lower", vmin=0, vmax=1, cmap="viridis",
                       extent=(steps[0], steps[-1], -0.5, data.shape[1] - 0.5))
        ax.set(title=f"{name} (last token)", xlabel="step", ylabel="layer")
        fig.colorbar(im, ax=ax)
    ax = axes[3]
    for gamma, style in ((0.1, "-"), (0.05, ":")):
        p = purity_by_gamma[gamma]
        ax.plot(steps, p["cum_pos"], "C0" + style, label=f"positional γ={gamma}")
        ax.plot(steps, p["cum_sym"], "C3" + style, label=f"symbolic γ={gamma}")
    ax.set(title="pure heads (cumulative)", xlabel="step", ylim=(-0.3, 12.3))
    ax.legend(fontsize=7)
    return _save(fig, f"dynamics_{task}.png")


def fig_layers(task: str, dyn: dict) -> str:
    plt = _plt()
    steps = dyn["steps"]
    pos, sym = torch.tensor(dyn["pos"])[:, :, 0], torch.tensor(dyn["sym"])[:, :, 0]
    ent = torch.tensor(dyn["entropy"])[:, :, 0]
    ent = (ent - ent.min(0).values) / (ent.max(0).values - ent.min(0).values).clamp_min(1e-12)
    n = pos.shape[1]
    fig, axes = plt.subplots(2, (n + 1) // 2, figsize=(2.4 * ((n + 1) // 2), 4.6), sharey=True)
    for layer, ax in enumerate(axes.flat[:n]):
        ax.plot(steps, pos[:, layer], "C0", label="s_POS")
        ax.plot(steps, sym[:, layer], "C3", label="s_SYM")
        ax.plot(steps, ent[:, layer], "k:", label="entropy (min-max)")
        ax.set_title(f"L{layer}", fontsize=9)
        ax.tick_params(labelsize=7)
    axes.flat[0].legend(fontsize=6)
    fig.suptitle(f"{task}: scores and entropy per layer over training (cf. paper Fig 6)")
    return _save(fig, f"layers_{task}.png")


def fig_roles(task: str, roles: dict) -> str:
    plt = _plt()
    restore = torch.tensor([[[math.nan if v is None else v for v in row] for row in h]
                            for h in roles["causal"]["restore"]])
    ablated = torch.tensor(roles["causal"]["ablated_accuracy_by_hops"])[:, 0]
    H = restore.shape[0]
    fig, axes = plt.subplots(1, H + 1, figsize=(3 * (H + 1), 3.4))
    for h in range(H):
        ax = axes[h]
        ax.imshow(restore[h, :, : h + 1], aspect="auto", origin="lower", vmin=0, vmax=1,
                  cmap="magma")
        ax.set(title=f"{h + 1}-hop: patch restores", xlabel="stop k (p_k)", ylabel="layer",
               xticks=range(h + 1))
    im = axes[H].imshow(ablated, aspect="auto", origin="lower", vmin=0, vmax=1, cmap="viridis")
    axes[H].set(title="mean-ablated: accuracy", xlabel="hop count", ylabel="layer",
                xticks=range(H), xticklabels=[str(i + 1) for i in range(H)])
    fig.colorbar(im, ax=axes[H])
    fig.suptitle(f"{task}: causal roles (final checkpoint)")
    return _save(fig, f"roles_{task}.png")


def fig_discrepancy(curves: dict, measured: dict) -> str:
    plt = _plt()
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.8))
    ax = axes[0]
    c = curves["0.8000"]
    ax.loglog(c["n"], c["delta_max"], "C0", lw=1, label="Δ max over inputs (Def 3.1)")
    ax.loglog(c["n"], c["delta_min"], "C2", lw=1, label="Δ min over inputs (Lemma F.1)")
    ax.loglog(c["n"], c["bound"], "k--", label="min{1-cos θ, 2π²/n²}")
    ns = sorted(int(n) for n in measured["index"])
    ax.loglog(ns, [measured["index"][str(n)]["max"] for n in ns], "C3o",
              label="measured on task inputs (max)")
    ax.set(title="T_Index, θ = 0.8", xlabel="n", ylabel="discrepancy / A")
    ax.legend(fontsize=7)
    ax = axes[1]
    for i, (theta, rows) in enumerate(measured["retrieval"].items()):
        ns = sorted(int(n) for n in rows)
        ax.plot(ns, [rows[str(n)]["max"] for n in ns], f"C{i}-o", ms=3, label=f"θ={theta}: max")
        ax.plot(ns, [rows[str(n)]["min"] for n in ns], f"C{i}:s", ms=3, label=f"θ={theta}: min")
        ax.plot(ns, [max(rows[str(n)]["bound"], 1e-4) for n in ns], f"C{i}--", lw=0.8)
    ax.set(xscale="log", title="T_Retrieval, |ALPH| = 8 (dashed: 1-cos(ω-nθ))", xlabel="n",
           ylabel="discrepancy / A")
    ax.legend(fontsize=6)
    return _save(fig, "discrepancy.png")


def fig_lengths(lengths: dict, lm: dict) -> str:
    plt = _plt()
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.8))
    ax = axes[0]
    for i, task in enumerate(TASKS):
        rows = lengths.get(task) or {}
        ns = sorted(rows)
        if ns:
            ax.plot(ns, [rows[n] for n in ns], f"C{i}-o", label=f"{task} (ours)")
        paper = PAPER_LENGTHS[task]
        ax.plot(sorted(paper), [paper[n] for n in sorted(paper)], f"C{i}x:", label=f"{task} (paper ≈)")
    ax.set(xscale="log", ylim=(0, 1.02), xlabel="length (tokens)", ylabel="accuracy",
           title="trained GPT-J (training length 17)")
    ax.legend(fontsize=7)
    ax = axes[1]
    for i, (key, rows) in enumerate(sorted(lm.items())):
        ns = sorted(rows)
        ax.plot(ns, [rows[n] for n in ns], f"C{i}-o", ms=3, label=key)
    ax.set(xscale="log", ylim=(-0.02, 1.02), xlabel="target window", ylabel="accuracy",
           title="1-hop prompts, small LMs (greedy)")
    ax.legend(fontsize=7)
    return _save(fig, "lengths.png")


# ---- the page ---------------------------------------------------------------------------------

def write_report(args=None) -> Path:
    from lens_possym.papers.c.dynamics import purity

    FIGS.mkdir(parents=True, exist_ok=True)
    lines: list[str] = []
    add = lines.append
    missing: list[str] = []
    summary: dict = {}

    dyn = {t: load(f"dynamics_{t}") for t in TASKS}
    train = {t: load(f"train_{t}") for t in TASKS}
    roles = {t: load(f"roles_{t}") for t in TASKS}
    timing = load("timing_number")
    curves, measured = load("index_discrepancy"), load("discrepancy_measured")
    constructions = load("constructions_accuracy")
    lengths = {t: {} for t in TASKS}
    length_hops = {t: {} for t in TASKS}
    for t in TASKS:
        for path in sorted(CACHE.glob(f"length_{t}_*.json")):
            data = json.loads(path.read_text())
            lengths[t][data["lengths"][0]] = data["accuracy"][0]
            length_hops[t][data["lengths"][0]] = data["by_hops"][0]
    lm: dict = {}
    for path in sorted(CACHE.glob("lm_*.json")):
        data = json.loads(path.read_text())
        lm.setdefault(f"{data['model']} {data['task']}", {})[data["lengths"][0]] = data["accuracy"][0]
    lm_prompts = sorted({json.loads(p.read_text())["n_prompts"] for p in CACHE.glob("lm_*.json")})

    # ---- per-task numbers
    pur: dict = {}
    for t in TASKS:
        if dyn[t] is None:
            missing.append(f"dynamics of {t}")
            continue
        d = dyn[t]
        pos, sym = torch.tensor(d["pos"]), torch.tensor(d["sym"])
        pur[t] = {}
        for gamma in (0.1, 0.05):
            p = purity(pos, sym, d["steps"], gamma)
            pur[t][gamma] = {"obj": p, "cum_pos": p.cumulative("positional"),
                             "cum_sym": p.cumulative("symbolic")}
        hops = list(zip(*d["accuracy_by_hops"]))
        summary[t] = {
            "hop_095": [first_step(d["steps"], h, 0.95) for h in hops],
            "hop_099": [first_step(d["steps"], h, 0.99) for h in hops],
            "acc_099": first_step(d["steps"], d["accuracy"], 0.99),
            "final_pos": pos[-1, :, 0].tolist(), "final_sym": sym[-1, :, 0].tolist(),
        }
        fig_dynamics(t, d, pur[t])
        fig_layers(t, d)
        if roles[t] is not None:
            fig_roles(t, roles[t])
        else:
            missing.append(f"roles of {t}")
    if curves and measured:
        fig_discrepancy(curves, measured)
    else:
        missing.append("discrepancy")
    fig_lengths(lengths, lm)

    # ---- header
    add("# Paper C reproduced: multi-hop Number and Letter tasks on GPT-J")
    add("")
    add("_Generated by `python benchmarks/paper_c.py report` from the cached stage results; "
        "every number below is measured, none is typed in. Re-run a stage to update it._")
    add("")
    add("Paper: Urrutia et al., *Positional versus Symbolic Attention Heads: Learning Dynamics, "
        "RoPE Geometry, and Length Generalization* (arXiv 2605.31558; read in "
        "`shared/reference/paper_c.md`). Code: `lens_possym.training` (tasks `number`/`letter`, "
        "`GPTJTaskModel`, `multihop`, `dynamics`, `roles`, `hop_constructions`, `discrepancy`, "
        "`lengths`), `lens_possym.papers.c.prompts`, CLI `lens-possym multihop`, notebook 06. "
        "Design notes: `docs/design.md`, section *Paper C*.")
    add("")
    add("**Setup.** One run per task, seed 0 (weights, data stream, test split); scores on 100 "
        "test prompts (seed 1). Model: `GPTJForCausalLM`, **cpu preset**: 12 layers × 1 head, "
        "d_model = d_head = 64 (full rotary: 32 frequencies, base 10000), MLP 256, no dropout; "
        "AdamW lr 1e-3, batch 128, warm-up 100, cosine to 2,000 steps; loss on the last token; "
        "checkpoint every 100 steps. The paper's model is 12 × 1 × 128 with dropout 0.1 and "
        "unstated optimiser settings (the `paper` preset; not run here: no GPU in this session). "
        "Machine: 2 shared CPU cores, 1 torch thread per job.")
    add("")
    for t in TASKS:
        tr = train[t]
        if tr:
            add(f"- **{t}**: {tr['steps']} steps in {tr['train_time_s'] / 60:.1f} min, final test "
                f"accuracy {tr['test_accuracy']:.4f}"
                + (f"; test accuracy first ≥ 0.99 at step {summary[t]['acc_099']}"
                   if t in summary else "") + ".")
        else:
            missing.append(f"training of {t}")
    add("")
    add("Commands (each stage caches its cells in `out/paper_c/cache/` and resumes):")
    add("")
    add("```")
    add("python benchmarks/paper_c.py train        # ~13 min per task on one core")
    add("python benchmarks/paper_c.py dynamics && python benchmarks/paper_c.py timing")
    add("python benchmarks/paper_c.py roles && python benchmarks/paper_c.py discrepancy")
    add("python benchmarks/paper_c.py lengths && python benchmarks/paper_c.py lm")
    add("python benchmarks/paper_c.py report")
    add("```")
    add("")

    # ---- reproduction table
    add("## Reproduction table")
    add("")
    add("| claim | paper | ours (seed 0, cpu preset) | verdict |")
    add("|---|---|---|---|")
    rows = reproduction_rows(summary, pur, roles, curves, measured, constructions, lengths, lm)
    for claim, paper, ours, verdict in rows:
        add(f"| {claim} | {paper} | {ours} | {verdict} |")
    add("")

    # ---- timing
    add("## Must-show: scoring every checkpoint, exact against re-run")
    add("")
    if timing:
        add(f"`python benchmarks/paper_c.py timing --force` (task {timing['task']}): all "
            f"**{timing['n_checkpoints']} checkpoints** × {timing['n_layers']} layers, last-token "
            f"query, {timing['n_prompts']} prompts, exact closed form: **{timing['exact_all_s']:.1f} s** "
            f"({timing['exact_per_checkpoint_s']:.2f} s per checkpoint). The re-run method on "
            f"step {timing['rerun_subset']}: {timing['rerun_s']:.1f} s, **{timing['ratio']:.0f}× "
            f"slower** per checkpoint; largest |exact − re-run| = {timing['max_abs_diff']:.1e}. "
            f"Load average {timing['load']:.1f} on 2 cores, {timing['threads']} torch thread. "
            "The paper reports 5 GPU-hours (attention under every swap) and 8.5 CPU-hours (scores) "
            "per model.")
    else:
        missing.append("timing")
        add("_missing: run `python benchmarks/paper_c.py timing`._")
    add("")

    # ---- dynamics
    add("## Learning dynamics")
    add("")
    for t in TASKS:
        if t not in summary:
            continue
        s = summary[t]
        add(f"### {t.capitalize()}")
        add("")
        add(f"![{t}](figures/paper_c/dynamics_{t}.png)")
        add("")
        add(f"![{t} per layer](figures/paper_c/layers_{t}.png)")
        add("")
        add("Step at which each hop count first reaches 0.95 / 0.99 test accuracy: "
            + ", ".join(f"{h + 1} hop{'s' if h else ''}: {a} / {b}"
                        for h, (a, b) in enumerate(zip(s["hop_095"], s["hop_099"]))) + ".")
        add("")
        add("| layer | " + " | ".join(f"L{i}" for i in range(len(s["final_pos"]))) + " |")
        add("|---|" + "---:|" * len(s["final_pos"]))
        add("| s_POS (final) | " + " | ".join(f"{v:.2f}" for v in s["final_pos"]) + " |")
        add("| s_SYM (final) | " + " | ".join(f"{v:.2f}" for v in s["final_sym"]) + " |")
        for gamma in (0.1, 0.05):
            p = pur[t][gamma]["obj"]
            cells = []
            for layer in range(len(s["final_pos"])):
                if (layer, 0) in p.first_step:
                    kind = "P" if p.kind[(layer, 0)] == "positional" else "S"
                    cells.append(f"{kind} {p.first_step[(layer, 0)]}")
                else:
                    cells.append("–")
            add(f"| first pure, γ={gamma} | " + " | ".join(cells) + " |")
            settled = [(f"{'P' if p.settled_kind[(layer, 0)] == 'positional' else 'S'} "
                        f"{p.settled_step[(layer, 0)]}") if (layer, 0) in p.settled_step else "–"
                       for layer in range(len(s["final_pos"]))]
            add(f"| pure to the end, γ={gamma} | " + " | ".join(settled) + " |")
        if roles.get(t):
            r = roles[t]
            add("| role (attention) | " + " | ".join(
                {"Selective Index": "Index", "Retrieval": "Retr.", "Reflexive": "Refl.",
                 "other": "–"}[row[0]] for row in r["attention"]["labels"]) + " |")
            add("| hop share | " + " | ".join(f"{row[0]:.2f}" for row in r["attention"]["hop"]) + " |")
        add("")
        add("P/S = pure positional/symbolic, with the first checkpoint at which the head was pure "
            "(\"pure to the end\": from which it stayed pure of that kind to the last checkpoint). "
            "Hop share: attention from each stop of the hop path on the next stop.")
        add("")

    # ---- roles
    add("## Head roles, confirmed causally")
    add("")
    add("Patching: the answer token's value is changed (corrupted run); one head's output at one "
        "stop p_k of the hop path is copied from the clean run; the map shows the share of "
        "prompts whose prediction returns to the clean answer. In the paper's chain the answer "
        "reaches p_k at layer h−1−k. Ablation: each head mean-ablated (per position), accuracy "
        "per hop count.")
    add("")
    for t in TASKS:
        r = roles.get(t)
        if not r:
            continue
        on, off = r["causal"]["chain_restore"]
        add(f"**{t}** (200 prompts): clean accuracy by hops "
            f"{[round(a, 3) for a in r['causal']['clean_accuracy_by_hops']]}; restoration on the "
            f"chain ℓ = h−1−k: {on:.2f}, off it: {off:.2f}.")
        add("")
        add(f"![{t} roles](figures/paper_c/roles_{t}.png)")
        add("")
        sm = r["attention"].get("stop_mass")
        if sm:
            H = len(sm[0][0])
            add(f"Attention of the last token on each stop of the path, 4-hop prompts "
                f"(p_0 = itself, p_{H} = the answer), per layer:")
            add("")
            add("| stop | " + " | ".join(f"L{i}" for i in range(len(sm))) + " |")
            add("|---|" + "---:|" * len(sm))
            for j in range(H + 1):
                add(f"| p_{j} | " + " | ".join(f"{sm[layer][0][H - 1][j]:.2f}"
                                               for layer in range(len(sm))) + " |")
            add("")
        restore = r["causal"]["restore"]
        best = []
        for h in range(len(restore)):
            for k in range(h + 1):
                col = [restore[h][layer][k] for layer in range(len(restore[h]))]
                layer = max(range(len(col)), key=lambda i: -1 if col[i] is None else col[i])
                best.append(f"h={h + 1},k={k}: L{layer} ({col[layer]:.2f})")
        add("Layer whose patch restores most, per (hop count, stop): " + "; ".join(best) + ".")
        add("")

    # ---- discrepancy
    add("## Discrepancy and Theorem 3.2")
    add("")
    if curves and measured:
        add("![discrepancy](figures/paper_c/discrepancy.png)")
        add("")
        for theta, c in curves.items():
            add(f"- T_Index, θ = {theta}, every 1-hop input of length n = 2..1000 (closed form, "
                f"checked against the constructed head to 1e-6 in the tests): the bound "
                f"min{{1−cos θ, 2π²/n²}} fails for the **max** over inputs (Def 3.1) at "
                f"{c['max_fails']} of 999 lengths and for the **min** (Lemma F.1) at "
                f"{c['min_fails']}.")
        add("- T_Retrieval (measured on 256 Letter inputs per length):")
        add("")
        add("| θ | n | Δ max | Δ min | 1−cos(ω−nθ) | accuracy |")
        add("|---|---:|---:|---:|---:|---:|")
        for theta, rows_ in measured["retrieval"].items():
            for n, r in rows_.items():
                add(f"| {theta} | {n} | {r['max']:.4f} | {r['min']:.4f} | {r['bound']:.4f} | "
                    f"{r['accuracy']:.3f} |")
        add("")
    for t in TASKS:
        d = load(f"discrepancy_trained_{t}")
        if d:
            add(f"- Trained {t} model, mean top-2 logit gap per layer at length 17 / 100 / 300: "
                + "; ".join(f"L{i}: {d['17'][i]['mean']:.2f} / {d['100'][i]['mean']:.2f} / "
                            f"{d['300'][i]['mean']:.2f}" for i in range(len(d["17"]))) + ".")
    add("")

    # ---- lengths
    add("## Length generalisation")
    add("")
    add("![lengths](figures/paper_c/lengths.png)")
    add("")
    add("Longer inputs put extra target-window tokens in front of the effective target window "
        "(pre-target window and query unchanged); 256 test prompts per length, hops 1–4 in equal "
        "shares. GPT-J's sin/cos table is extended past n_positions = 128.")
    add("")
    all_n = sorted({n for t in TASKS for n in lengths[t]} | {n for t in TASKS for n in PAPER_LENGTHS[t]})
    add("| length | " + " | ".join(str(n) for n in all_n) + " |")
    add("|---|" + "---:|" * len(all_n))
    for t in TASKS:
        add(f"| {t} (ours) | " + " | ".join(
            f"{lengths[t][n]:.3f}" if n in lengths[t] else "" for n in all_n) + " |")
        add(f"| {t} (paper ≈) | " + " | ".join(
            f"{PAPER_LENGTHS[t][n]:.2f}" if n in PAPER_LENGTHS[t] else "" for n in all_n) + " |")
    add("")
    add("Accuracy per hop count (1 / 2 / 3 / 4 hops):")
    add("")
    ns = sorted({n for t in TASKS for n in length_hops[t]})
    add("| length | " + " | ".join(str(n) for n in ns) + " |")
    add("|---|" + "---:|" * len(ns))
    for t in TASKS:
        add(f"| {t} | " + " | ".join(
            " / ".join(f"{a:.2f}" for a in length_hops[t][n]) if n in length_hops[t] else ""
            for n in ns) + " |")
    add("")
    add("### Small pretrained LMs on the 1-hop prompts (paper Table 3's protocol)")
    add("")
    if lm:
        ns = sorted({n for rows_ in lm.values() for n in rows_})
        add(f"Greedy decoding, {', '.join(map(str, lm_prompts))} prompts per cell (seed 0), "
            "3 worked examples; a cell is the share answered exactly.")
        add("")
        add("| model, task | " + " | ".join(str(n) for n in ns) + " |")
        add("|---|" + "---:|" * len(ns))
        for key, rows_ in sorted(lm.items()):
            add(f"| {key} | " + " | ".join(f"{rows_[n]:.2f}" if n in rows_ else "" for n in ns) + " |")
        add("")
    else:
        missing.append("LM prompts")
    if missing:
        add("## Missing")
        add("")
        add("Not measured in this build: " + ", ".join(missing) + ".")
        add("")
    DOC.write_text("\n".join(lines))
    print(f"wrote {DOC} and {FIGS}/")
    return DOC


def reproduction_rows(summary, pur, roles, curves, measured, constructions, lengths, lm):
    rows = []
    # hop order
    if "number" in summary:
        h = summary["number"]["hop_095"]
        ordered = all(a is not None for a in h) and h == sorted(h)
        rows.append(("Number learns one hop count after another (hop 1 first, 3–4 last)",
                     "hop 1 → 1.0 at ≈2.2–2.5k, hop 2 ≈3k, hops 3–4 ≈4.5k (Fig 2A)",
                     f"first ≥ 0.95 at steps {h} (hops 1..4)",
                     ("reproduced" if ordered and h[0] < h[-1] else "not reproduced")
                     + " (rule: steps non-decreasing in hop count, hop 1 before hop 4)"))
    if "letter" in summary:
        h = summary["letter"]["hop_095"]
        spread = (max(h) - min(h)) if all(a is not None for a in h) else None
        nspread = None
        if "number" in summary and all(a is not None for a in summary["number"]["hop_095"]):
            nh = summary["number"]["hop_095"]
            nspread = max(nh) - min(nh)
        rows.append(("Letter learns all hop counts together",
                     "all hops rise together, 1.0 at ≈2.8k",
                     f"first ≥ 0.95 at steps {h}; spread {spread} (Number's: {nspread})",
                     ("reproduced" if spread is not None and nspread is not None
                      and spread < nspread else "not reproduced")
                     + " (rule: Letter's spread < Number's)"))
    if "number" in summary and "letter" in summary:
        n99, l99 = summary["number"]["acc_099"], summary["letter"]["acc_099"]
        if n99 is not None and l99 is not None:
            rows.append(("Letter converges before Number",
                         "max accuracy at ≈3,400 (Letter) vs ≈4,800 (Number)",
                         f"test accuracy first ≥ 0.99 at step {l99} (Letter) vs {n99} (Number)",
                         "reproduced" if l99 < n99 else "not reproduced"))
    for t, paper in (("number", "4 positional (L0–L3, one per hop) + 8 symbolic (L4–L11)"),
                     ("letter", "11 symbolic (L1–L11), 0 positional, L0 never pure")):
        if t in pur:
            p = pur[t][0.1]["obj"]
            pos_l, sym_l = p.layers_of("positional"), p.layers_of("symbolic")
            pos_s, sym_s = (p.layers_of("positional", settled=True),
                            p.layers_of("symbolic", settled=True))
            ours = (f"ever pure (paper's cumulative count): positional {pos_l}, symbolic {sym_l}; "
                    f"pure to the end: positional {pos_s}, symbolic {sym_s}")
            if t == "number":
                both = pos_l and sym_l
                verdict = ("reproduced" if both and set(pos_l) == {0, 1, 2, 3} else
                           "partly: both kinds, fewer positional layers" if both else
                           "not reproduced") + " (rule: both kinds; fully if positional = L0–L3)"
            else:
                verdict = ("reproduced" if not pos_l and sym_l else
                           "partly: symbolic only once settled; transient positional heads early"
                           if not pos_s and sym_s else "not reproduced") + \
                    " (rule: no positional head)"
            rows.append((f"{t.capitalize()}: pure heads by kind (γ = 0.1)", paper, ours, verdict))
    dyn_l = load("dynamics_letter")
    if dyn_l:
        sym = torch.tensor(dyn_l["sym"])[:, :, 0]
        pos = torch.tensor(dyn_l["pos"])[:, :, 0]
        late = [layer for layer in (9, 10, 11) if layer < sym.shape[1]]
        dips = {f"L{layer}": (round(float(sym[:, layer].min()), 2),
                              dyn_l["steps"][int(sym[:, layer].argmin())],
                              round(float(sym[-1, layer]), 2)) for layer in late}
        ok = all(d[0] < 0.3 and d[2] > 0.8 for d in dips.values())
        rows.append(("Letter L9–L11: s_SYM dips (s_POS ≈ 1) before flipping to symbolic",
                     "L11 s_SYM ≈ 0.2 while s_POS ≈ 1, flips at ≈2.5–2.8k (Fig 6)",
                     "min s_SYM (step) → final: " + ", ".join(
                         f"{k} {v[0]} ({v[1]}) → {v[2]}" for k, v in dips.items()),
                     ("reproduced" if ok else "not reproduced")
                     + " (rule: min < 0.3, final > 0.8)"))
    for t in ("number", "letter"):
        if t in pur and t in summary and summary[t]["acc_099"] is not None:
            p = pur[t][0.1]["obj"]
            conv = summary[t]["acc_099"]
            firsts = sorted(p.first_step.values())
            before = sum(s <= conv for s in firsts)
            rows.append((f"{t.capitalize()}: pure heads emerge as accuracy converges",
                         "accuracy peaks only once heads are pure; all pure at convergence",
                         f"accuracy ≥ 0.99 at step {conv}; {before} of {len(firsts)} pure heads "
                         f"pure by then (first pure steps {firsts})",
                         ("reproduced" if firsts and before >= 0.5 * len(firsts) else "partly")
                         + " (rule: most pure heads pure by convergence)"))
    for t in ("number", "letter"):
        r = roles.get(t)
        if r:
            on, off = r["causal"]["chain_restore"]
            labels = [row[0] for row in r["attention"]["labels"]]
            sm = r["attention"].get("stop_mass")
            reads = ""
            if sm:
                H = len(sm[0][0])
                direct = [layer for layer in range(len(sm))
                          if (sm[layer][0][H - 1][H] or 0) > 0.5]
                reads = f"; the last token reads the answer stop directly (mass > 0.5, 4-hop prompts) in layers {direct}"
            rows.append((f"{t.capitalize()}: heads realise the chain Reflexive∘{'Index' if t == 'number' else 'Retrieval'}^h "
                         "(paper: from attention patterns only)",
                         "Fig 3: one hop per layer in L0–L3 (Number), symbolic retrieval (Letter)",
                         f"attention roles {labels}; patching restores {on:.2f} on the chain "
                         f"ℓ = h−1−k vs {off:.2f} off it{reads}",
                         ("reproduced" if on >= 0.8 else "partly" if on > off + 0.2 else
                          "not reproduced") + " (rule: chain restore ≥ 0.8)"))
    if constructions:
        worst = min(constructions.values())
        rows.append(("T_Index and T_Retrieval solve one hop (Thm 3.1)", "exactly, any length ≤ n0",
                     "accuracy at length 17: " + ", ".join(f"{k} {v:.3f}" for k, v in constructions.items()),
                     ("reproduced" if worst >= 0.99 else "not reproduced") + " (rule: ≥ 0.99)"))
    if curves:
        c = curves["0.8000"]
        rows.append(("Δ_Index(n) ≤ min{1−cos θ, 2π²/n²} (Thm 3.2), θ = 0.8",
                     "holds; decays like 1/n² (Fig 5A: ≈0.30 until n≈8, ≈0 by 100)",
                     f"max over inputs (Def 3.1) above the bound at {c['max_fails']}/999 lengths; "
                     f"min over inputs at {c['min_fails']}/999",
                     "reproduced for the min over inputs; not as stated (Def 3.1's max)"
                     if c["min_fails"] == 0 and c["max_fails"] > 0 else
                     "reproduced" if c["max_fails"] == 0 else "not reproduced"))
    if measured:
        r0 = measured["retrieval"].get("0.00000") or {}
        r1 = measured["retrieval"].get("0.00270") or {}
        if r0 and r1:
            flat = max(v["max"] for v in r0.values()) - min(v["min"] for v in r0.values())
            n_last = max(r1, key=int)
            rows.append(("Δ_Retrieval ≤ 1−cos(ω−nθ): slow decay, none at θ = 0",
                         "≈0.29 → ≈0.13 by n = 100 (θ = 0.0027); flat for NoPE",
                         f"θ = 0: flat (spread {flat:.1e}); θ = 0.0027: min "
                         f"{r1['17']['min']:.3f} → {r1['100']['min']:.3f} (n = 100) vs bound "
                         f"{r1['100']['bound']:.3f}; max stays {r1['100']['max']:.3f}; accuracy at "
                         f"n = {n_last}: {r1[n_last]['accuracy']:.2f}",
                         "partly: the min over inputs follows the bound's shape (slightly above "
                         "it); the max does not decay"))
    if lengths.get("number") and lengths.get("letter"):
        ln, ll = lengths["number"], lengths["letter"]
        common = sorted(set(ln) & set(ll))
        better = all(ll[n] >= ln[n] for n in common if n > 17)
        rows.append(("Letter generalises better than Number",
                     "Letter > 0.9 up to 850; Number ≈0.47 at 300",
                     "; ".join(f"{n}: L {ll[n]:.2f} / N {ln[n]:.2f}" for n in common),
                     ("reproduced" if better else "not reproduced") + " (rule: Letter ≥ Number "
                     "at every length > 17)"))
        if 850 in ll:
            rows.append(("Letter > 90% at length 850 (53× training length)", "> 0.90",
                         f"{ll[850]:.3f}", "reproduced" if ll[850] > 0.9 else "not reproduced"))
        if 300 in ln:
            rows.append(("Number barely generalises", "≈0.47 at 300, ≈0.83 at 50",
                         f"{ln.get(50, float('nan')):.2f} at 50, {ln[300]:.2f} at 300",
                         "reproduced" if ln[300] < 0.6 else "not reproduced"))
    if lm:
        cells = "; ".join(f"{k}: mean {sum(r.values()) / len(r):.2f}, best {max(r.values()):.1f} "
                          f"over lengths {min(r)}–{max(r)}" for k, r in sorted(lm.items()))
        rows.append(("1-hop prompts: Letter easier than Number for LMs (Table 3)",
                     "GPT 5.x / Sonnet 3.7: Number < 0.5 at 32, Letter ≥ 0.88 at 32",
                     cells + " (Number's chance ≈ 1/26)",
                     "not comparable: the 135M–270M models fail both (measured as is)"
                     if max(max(r.values()) for r in lm.values()) < 0.5 else "see table"))
    return rows
