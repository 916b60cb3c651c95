"""The figures of paper C's report (:mod:`.report`), each drawn from cached analyses and
saved as a PNG into ``figs`` (``docs/figures/paper_c``); each returns the file's name."""

from __future__ import annotations

from pathlib import Path

from .dynamics import purity
from .report_data import SEEDS, TASKS, as_tensor
from .tasks import HEADLINE_FILLER

__all__ = ["PAPER_LENGTHS", "fig_dynamics", "fig_layers", "fig_chain", "fig_discrepancy",
           "fig_lengths"]

#: Fig 5B's accuracies, read off the figure (≈)
PAPER_LENGTHS = {"number": {50: 0.83, 100: 0.75, 200: 0.64, 300: 0.47, 500: 0.31},
                 "letter": {100: 1.0, 200: 0.99, 300: 0.98, 500: 0.95}}


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig, figs: Path, name: str) -> str:
    fig.tight_layout()
    fig.savefig(Path(figs) / name, dpi=100)
    _plt().close(fig)
    return name


def fig_dynamics(name: str, dyn: dict, figs: Path) -> str:
    plt = _plt()
    steps = dyn["steps"]
    pos, sym = as_tensor(dyn["pos"]), as_tensor(dyn["sym"])
    fig, axes = plt.subplots(1, 4, figsize=(17, 3.6))
    ax = axes[0]
    hops = as_tensor(dyn["accuracy_by_hops"])
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
    return _save(fig, figs, f"dynamics_{name}.png")


def fig_layers(name: str, dyn: dict, figs: Path) -> str:
    """Scores and entropy of every layer over training (the paper's Fig 6)."""
    plt = _plt()
    steps = dyn["steps"]
    pos, sym = as_tensor(dyn["pos"])[:, :, 0], as_tensor(dyn["sym"])[:, :, 0]
    ent = as_tensor(dyn["entropy"])[:, :, 0]
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
    return _save(fig, figs, f"layers_{name}.png")


def fig_chain(name: str, roles: dict, figs: Path) -> str:
    plt = _plt()
    lens = as_tensor(roles["lens"]["decoded"])
    patch = as_tensor(roles["patching"]["restore"])
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
    return _save(fig, figs, f"chain_{name}.png")


def fig_discrepancy(curves: dict, measured: dict | None, figs: Path) -> str:
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
    return _save(fig, figs, "discrepancy.png")


def fig_lengths(preset: str, runs: dict, figs: Path) -> str | None:
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
    return _save(fig, figs, f"lengths_{preset}.png")
