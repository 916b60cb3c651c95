"""The sections of docs/paper_c.md (:mod:`.report`), one function per section: each
appends Markdown lines through ``add`` from the runs' cached analyses (``runs``: ``(task,
seed) -> load_run(...)`` or ``None`` for a run that does not exist) and draws its figures
into ``figs``."""

from __future__ import annotations

import json
import math
from pathlib import Path

from .dynamics import purity
from .frequency import TABLE_1
from .report_data import as_tensor, fmt, nan_list, run_order
from .report_figures import (PAPER_LENGTHS, fig_chain, fig_discrepancy, fig_dynamics,
                             fig_layers, fig_lengths)
from .tasks import FILLER_SUMMARIES
from .verdicts import convergence_step, mid_rise

__all__ = ["dynamics_section", "roles_section", "frequency_section", "lengths_section",
           "gaps_section", "ablation_section", "device_section", "theory_section",
           "timing_and_lm_section"]


def dynamics_section(add, preset, runs, recs, figs: Path) -> None:
    """Mid-rise steps, convergence and the heads pure at the end; Fig 6's curves."""
    add("### Learning dynamics")
    add("")
    add("Mid-rise step `m_h` (first evaluation with hop count h's accuracy ≥ 0.5) and "
        "convergence `T` (overall ≥ 0.99), heads pure at the end (γ = 0.1; P positional, S "
        "symbolic, with the step from which they stay so).")
    add("")
    add("| run | m_1 | m_2 | m_3 | m_4 | T | pure at the end (γ = 0.1), per layer |")
    add("|---|---:|---:|---:|---:|---:|---|")
    for (task, seed), run in sorted(runs.items(), key=run_order):
        if run is None:
            continue
        rec = recs[(task, preset, seed)]
        T = convergence_step([(h["step"], h["test_accuracy"]) for h in rec["history"]])
        d = run["dynamics"]
        name = f"{task}-{preset}-s{seed}"
        if not d:
            add(f"| {name} | … | … | … | … | {'∞' if math.isinf(T) else int(T)} | … (not analysed) |")
            continue
        per_hop = list(zip(*nan_list(d["accuracy_by_hops"])))
        m = [mid_rise(d["steps"], v) for v in per_hop]
        p = purity(as_tensor(d["pos"]), as_tensor(d["sym"]), d["steps"], 0.1)
        cells = []
        for layer in range(p.state.shape[1]):
            key = (layer, 0)
            if key in p.settled_kind:
                cells.append(f"L{layer} {'P' if p.settled_kind[key] == 'positional' else 'S'}"
                             f"{p.settled_step[key]}")
        show = lambda x: "∞" if math.isinf(x) else str(int(x))  # noqa: E731
        add(f"| {name} | " + " | ".join(show(x) for x in m) + f" | {show(T)} | "
            + (", ".join(cells) or "none") + " |")
        fig_dynamics(name, d, figs)
    add("")
    for (task, seed), run in sorted(runs.items(), key=run_order):
        if run is not None and run["dynamics"]:
            name = f"{task}-{preset}-s{seed}"
            add(f"![{name}](figures/paper_c/dynamics_{name}.png)")
            add("")
            if seed == 0:
                add(f"![{name} per layer](figures/paper_c/{fig_layers(name, run['dynamics'], figs)})")
                add("")


def roles_section(add, preset, runs, figs: Path) -> None:
    """Head roles from attention, the logit lens and residual patching per stop."""
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
    for (task, seed), run in sorted(runs.items(), key=run_order):
        if run is None:
            continue
        r = run["roles"]
        name = f"{task}-{preset}-s{seed}"
        if not r:
            add(f"| {name} | … | … | … | … | … |")
            continue
        labels = "".join(short[row[0]] for row in r["attention"]["labels"])
        hop = ", ".join(fmt(row[0]) for row in nan_list(r["attention"]["hop"])[:4])
        firsts = []
        for table, level in ((r["lens"]["decoded"], 0.5), (r["patching"]["restore"], 0.8)):
            t = as_tensor(table)
            H = t.shape[0]
            out = []
            for k in range(H):
                hit = (t[H - 1, :, k] >= level).nonzero()
                out.append(str(int(hit[0])) if len(hit) else "–")
            firsts.append(", ".join(out))
        on, off = r["causal"]["chain_restore"]
        add(f"| {name} | `{labels}` | {hop} | {firsts[0]} | {firsts[1]} | {fmt(on)} / "
            f"{fmt(off)} |")
        if seed == 0:
            fig_chain(name, r, figs)
    add("")
    add("Labels: I Index, R Retrieval, F Reflexive, · other.")
    add("")
    for (task, seed), run in sorted(runs.items(), key=run_order):
        if run is not None and run["roles"] and seed == 0:
            add(f"![{task}-{preset}-s{seed} chain](figures/paper_c/chain_{task}-{preset}-s{seed}.png)")
            add("")


def frequency_section(add, preset, runs) -> None:
    """Table 1 / Fig 8: each layer's weighted-average frequency ID beside the paper's."""
    have = {k: run["frequency"] for k, run in runs.items() if run and run.get("frequency")}
    add("### Which RoPE frequencies each layer uses (Table 1 / Fig 8)")
    add("")
    add("`lens_possym.papers.c.frequency`: per layer, the max logit term per frequency ID "
        "(Fig 4C's quantity; IDs 1..64, ID 1 the fastest), mean over 100 test prompts "
        "(seed 1, last-token query), and its weighted-average ID (the centroid over the "
        "positive part), beside Table 1's IDs.")
    add("")
    if not have:
        add(f"_Pending: `lens-possym paper-c analyse --presets {preset} "
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


def lengths_section(add, preset, runs, fillers, headline, figs: Path) -> None:
    """Accuracy against length per reading (Fig 5B beside), per hop count, and the masking
    diagnostic."""
    add("### Length generalisation")
    add("")
    add("Extra tokens in front of the effective target window (pre-target "
        "window and query unchanged), 256 test prompts per length (seed 11), hops 1-4 in "
        f"equal shares. **Headline reading: `{headline}`** (extra tokens "
        f"{FILLER_SUMMARIES[headline]}); the other readings (`lens_possym/papers/c/tasks.py`, "
        "`FILLERS`): " + ", ".join(f"`{f}` ({FILLER_SUMMARIES[f]})" for f in fillers
                                   if f != headline) + ".")
    add("")
    fig = fig_lengths(preset, runs, figs)
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
    for (task, seed), run in sorted(runs.items(), key=run_order):
        if run is None:
            continue
        for f in fillers:
            rows = run["lengths"][f]
            if rows:
                mark = " (headline)" if f == headline else ""
                add(f"| {task}-s{seed} {f}{mark} | " + " | ".join(
                    fmt(rows[n]["accuracy"][0], 3) if n in rows else "" for n in all_n) + " |")
    for task in ("number", "letter"):
        paper = PAPER_LENGTHS[task]
        add(f"| {task} (paper ≈) | " + " | ".join(
            fmt(paper.get(n)) if n in paper else "" for n in all_n) + " |")
    add("")
    add("Accuracy per hop count (1 / 2 / 3 / 4 hops), headline reading:")
    add("")
    ns = sorted({n for run in runs.values() if run for n in run["lengths"][headline]})
    add("| run | " + " | ".join(str(n) for n in ns) + " |")
    add("|---|" + "---:|" * len(ns))
    for (task, seed), run in sorted(runs.items(), key=run_order):
        if run is None or not run["lengths"][headline]:
            continue
        rows = run["lengths"][headline]
        add(f"| {task}-s{seed} | " + " | ".join(
            " / ".join(fmt(a) for a in nan_list(rows[n]["by_hops"][0])) if n in rows else ""
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
        for (task, seed), run in sorted(masked, key=run_order):
            cells = []
            for n in ns:
                m = run["masking"].get(n)
                cells.append(" / ".join(fmt(m["accuracy"][mode][0], 3) for mode in
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


def gaps_section(add, preset, runs) -> None:
    """The trained heads' top-2 logit gaps per layer (Lemma F.1's min, Def 3.1's max)."""
    present = [(k, run) for k, run in runs.items() if run and run["gaps"]]
    if not present:
        return
    add("### Trained heads' discrepancy (top-2 attention-logit gap, 64 inputs per length)")
    add("")
    add("Lemma F.1's **min** and Def 3.1's **max** over inputs, per layer, at lengths "
        "17 → 300 (not means).")
    add("")
    for (task, seed), run in sorted(present, key=run_order):
        g = run["gaps"]
        ns = g["lengths"]
        i17, i300 = ns.index(17), ns.index(300)
        n_layers = len(g["min"][0])
        add(f"- **{task}-s{seed}**: " + "; ".join(
            f"L{layer} min {g['min'][i17][layer][0]:.2f}→{g['min'][i300][layer][0]:.2f}, max "
            f"{g['max'][i17][layer][0]:.2f}→{g['max'][i300][layer][0]:.2f}"
            for layer in range(n_layers)) + ".")
    add("")


def ablation_section(add, ablate: dict | None) -> None:
    """Build 4: why Letter falls short at length, one setting at a time from the `cpu`
    preset towards the `paper` preset (``lens-possym paper-c ablate-settings``,
    :mod:`.settings_ablation`)."""
    add("## Why Letter falls short at length: one setting at a time")
    add("")
    if not ablate or not ablate.get("rows"):
        add("_Not run in this build: `lens-possym paper-c ablate-settings --record "
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
    add(f"`{ablate.get('command', 'lens-possym paper-c ablate-settings')}` (Letter, "
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
            + " | ".join(fmt(r["lengths"].get(str(n)), 3) for n in ns) + " | "
            + " | ".join(f"{fmt(r['masking']['mask'][i], 3)} / "
                         f"{fmt(r['masking']['positions'][i], 3)}"
                         for i, _ in enumerate(r["mask_lengths"]))
            + " | " + ", ".join(fmt(g) for g in r["gap_min"][-1]) + " |")
    add("")
    far = str(max(ns))
    base = last.get("base")
    if base:
        gains = {n: r["lengths"][far] - base["lengths"][far] for n, r in last.items()
                 if n != "base"}
        if gains:
            best = max(gains, key=gains.get)
            add(f"At {far} tokens the base scores {fmt(base['lengths'][far], 3)}; one change at "
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
            (" / ".join(fmt(by_step[s]["lengths"][str(n)]) for n in ns[1:])
             + f"; {fmt(by_step[s]['masking']['mask'][-1])}") if s in by_step else ""
            for s in steps) + " |")
    add("")


def device_section(add, path: Path) -> None:
    """The GPU timing of ``benchmarks/bench_paper_c.py`` (``docs/device/h200_paper_c.txt``)."""
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


def theory_section(add, curves, measured, constructions, figs: Path) -> None:
    """The constructions' accuracy and Theorem 3.2 against the measured discrepancy."""
    add("## Constructions and Theorem 3.2")
    add("")
    if constructions:
        add("T_Index / T_Retrieval accuracy at length 17 (2,048 one-hop prompts): " + ", ".join(
            f"{k} {v:.3f}" for k, v in constructions.items()) + ".")
        add("")
    if curves:
        add(f"![discrepancy](figures/paper_c/{fig_discrepancy(curves, measured, figs)})")
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
        add("_Not measured yet: `lens-possym paper-c discrepancy`._")
        add("")


def timing_and_lm_section(add, cache: Path, timing: dict | None) -> None:
    """Exact scoring of every checkpoint against re-run (``timing``: number-cpu-s0's
    ``timing_number.json``, read as that run's by the caller); the pretrained LMs' 1-hop
    table."""
    add("## Scoring every checkpoint: exact against re-run")
    add("")
    if timing:
        add(f"`lens-possym paper-c timing --force` (cpu preset, seed 0, "
            f"{timing['task']}): all **{timing['n_checkpoints']} checkpoints** × "
            f"{timing['n_layers']} layers, last-token query, {timing['n_prompts']} prompts, exact "
            f"closed form: **{timing['exact_all_s']:.1f} s** ({timing['exact_per_checkpoint_s']:.2f} "
            f"s per checkpoint); the re-run method on step {timing['rerun_subset']}: "
            f"{timing['rerun_s']:.1f} s, **{timing['ratio']:.0f}× slower** per checkpoint; largest "
            f"|exact − re-run| = {timing['max_abs_diff']:.1e} (load average {timing['load']:.1f}).")
    else:
        add("_Not measured in this build: `lens-possym paper-c timing --force` once "
            "`number-cpu-s0` is trained._")
    add("")
    lm: dict = {}
    for path in sorted(cache.glob("lm_*.json")):
        data = json.loads(path.read_text())
        lm.setdefault(f"{data['model']} {data['task']}", {})[data["lengths"][0]] = data
    add("## Small pretrained LMs on the 1-hop prompts (paper Table 3's protocol)")
    add("")
    if not lm:
        add("_Not measured in this build: `lens-possym paper-c lm`._")
        add("")
        return
    ns = sorted({n for rows in lm.values() for n in rows})
    add("Greedy decoding, 3 worked examples; a cell is the share answered exactly.")
    add("")
    add("| model, task | " + " | ".join(str(n) for n in ns) + " |")
    add("|---|" + "---:|" * len(ns))
    for key, rows in sorted(lm.items()):
        add(f"| {key} | " + " | ".join(fmt(rows[n]["accuracy"][0]) if n in rows else ""
                                      for n in ns) + " |")
    add("")
