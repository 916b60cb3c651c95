r"""Paper B's ``cpu`` report: docs/paper_b.md's measured tables (accuracy per scheme, the
single-head ablations and their deposit pattern, the positional probe) and
docs/figures/paper_b/, written from the grid's records (:func:`record_rows`: what
``paper-b run`` recorded for each cell in docs/paper_b_results.json, so no run folder is
needed); the head profiles, which no record holds, from the cells' ``analysis.json``
(:func:`profiles_markdown`). :func:`lens_possym.papers.b.pipeline.report` writes them
between :data:`BEGIN` / :data:`END` and :data:`PROFILES`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

from .records import CellRecord

__all__ = ["BEGIN", "END", "PROFILES", "ORDER", "load_analyses", "record_rows",
           "measured_markdown", "profiles_markdown", "draw_figures"]

BEGIN, END = "<!-- BEGIN MEASURED TABLES -->", "<!-- END MEASURED TABLES -->"
#: the ``cpu`` cells' head profiles: from their ``analysis.json`` (no record holds them)
PROFILES = ("<!-- BEGIN CPU PROFILES -->", "<!-- END CPU PROFILES -->")
ORDER = ["nope", "sinusoidal", "learned", "alibi", "t5", "rope", "mla", "hybrid"]


def load_analyses(root: Path) -> list[dict[str, Any]]:
    """Every ``analysis.json`` under ``root`` (a grid's run folders), in path order."""
    return [json.loads(p.read_text()) for p in sorted(root.glob("**/analysis.json"))]


def record_rows(records: list[CellRecord]) -> list[dict[str, Any]]:
    """The tables' rows from records, in the shape of a cell's ``analysis.json``: ``cell``,
    ``baseline`` (the accuracy), ``deposit`` (the ablation summary), ``ablation`` (its grid
    ``[n_layers][n_heads]``) and ``probe``."""
    return [{"cell": {"task": r.task, "label": r.scheme, "variant": r.variant, "seed": r.seed},
             "baseline": r.accuracy, "deposit": r.ablation, "ablation": r.ablation_grid,
             "probe": r.probe} for r in records]


def _pct(x: float | None) -> str:
    return "—" if x is None else f"{100 * x:.1f}"


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _critical(row: dict, points: float = 10.0) -> int:
    """Heads whose ablation alone costs more than ``points`` accuracy points."""
    drops = (row["baseline"] - torch.tensor(row["ablation"])) * 100
    return int((drops > points).sum())


def _accuracy(rows: list[dict]):
    """``acc(task, variant, label)``: the mean accuracy over the seeds of that cell (``None``
    without one) and their count; and the rows by ``(task, variant, label)``."""
    by: dict[tuple[str, str, str], list[dict]] = {}
    for r in rows:
        c = r["cell"]
        by.setdefault((c["task"], c["variant"], c["label"]), []).append(r)

    def acc(task: str, variant: str, label: str) -> tuple[float | None, int]:
        got = by.get((task, variant, label), [])
        return _mean([r["baseline"] for r in got]), len(got)

    return acc, by


def _probe_rows(rows: list[dict], seed: int) -> list[dict]:
    return [r for r in rows if r.get("probe") and r["cell"]["seed"] == seed
            and "aligned" in r["probe"]]


def measured_markdown(rows: list[dict], preset: str, *, command: str) -> str:
    """The measured tables' block (``rows``: :func:`record_rows` or analyses): accuracy per
    scheme (seed 0; a cell with more seeds shows their mean and each), the single-head
    ablations of seed 0 (top drop, second drop, heads over 10 points, the deposit), the
    positional probe of seed 0 where a model has an input encoding."""
    acc, by = _accuracy(rows)
    seeds = sorted({r["cell"]["seed"] for r in rows})
    lines = [f"<!-- written by `{command}`; "
             "do not edit -->", "",
             f"### Accuracy (test set, %), preset `{preset}`", "",
             f"Seed {seeds[0]} everywhere; where a cell has more seeds ({seeds}), their mean "
             "and each seed's number.", "",
             "| scheme | distance (intended) | distance (faithful) | count (intended) | "
             "count (faithful) |", "|---|---|---|---|---|"]
    for label in ORDER + [f"rope-k{k}" for k in (0, 1, 2, 3, 8)]:
        cells = []
        for task in ("distance", "count"):
            for variant in ("intended", "faithful"):
                a, n = acc(task, variant, label)
                seeds_of = sorted(by.get((task, variant, label), []),
                                  key=lambda r: r["cell"]["seed"])
                each = ", ".join(_pct(r["baseline"]) for r in seeds_of)
                cells.append(_pct(a) + (f" (mean of seeds: {each})" if n > 1 else ""))
        if any(c != "—" for c in cells):
            lines.append(f"| {label} | " + " | ".join(cells) + " |")
    lines += ["", "`rope-k0` is NoPE (intended: the `nope` row); `rope-k8` is RoPE on all 8 heads "
              "(intended: the `rope` row; faithful: the official `partialrope.py` at k=all, "
              "without the absolute encoding that the faithful `rope` row adds). The faithful "
              "hybrid is not a separate model: the official RoPE model already adds an absolute "
              "encoding (the faithful `rope` row).", ""]

    # deposit table
    lines += ["### Single-head ablation (seed 0): the deposit pattern", "",
              "Drops in accuracy points when one head is ablated; *heads > 10* counts the heads "
              "whose ablation alone costs more than 10 points.", "",
              "| task | variant | scheme | accuracy | top head | top drop | second drop | "
              "top drop / accuracy | heads > 10 | deposit? |",
              "|---|---|---|---|---|---|---|---|---|---|"]
    for r in sorted(rows, key=lambda r: (r["cell"]["task"], r["cell"]["variant"],
                                         (ORDER + [r["cell"]["label"]]).index(r["cell"]["label"]))):
        c, d = r["cell"], r["deposit"]
        if c["seed"] != seeds[0]:
            continue
        lines.append(f"| {c['task']} | {c['variant']} | {c['label']} | {_pct(r['baseline'])} | "
                     f"{d['top_head'][0]}.{d['top_head'][1]} | {_pct(d['top_drop'])} | "
                     f"{_pct(d['second_drop'])} | {100 * d['top_relative']:.0f}% | "
                     f"{_critical(r)} | {'yes' if d['deposit'] else 'no'} |")
    lines.append("")

    # probe
    probe_rows = _probe_rows(rows, seeds[0])
    if probe_rows:
        n_layers = len(probe_rows[0]["probe"]["r2"]) - 1
        head = " | ".join(f"L{L}" for L in range(n_layers)) + " | out"
        lines += ["### Positional probe (seed 0)", "",
                  "Per layer input (and after the last block): **aligned** share of the "
                  "stream's positional part along the input encoding's principal directions "
                  "(chance = rank / d_model in the last column) · share of the stream that is "
                  "positional · R² of a linear readout of the encoding.", "",
                  f"| task | variant | scheme | {head} | chance |",
                  "|---|---|---|" + "---|" * (n_layers + 2)]
        for r in probe_rows:
            c, p = r["cell"], r["probe"]
            vals = " | ".join(f"{a:.2f} · {s:.2f} · {q:.2f}" for a, s, q in
                              zip(p["aligned"], p["pos_share"], p["r2"]))
            lines.append(f"| {c['task']} | {c['variant']} | {c['label']} | {vals} | "
                         f"{p['chance']:.2f} |")
        lines.append("")
    return "\n".join(lines) + "\n"


def profiles_markdown(analyses: list[dict], seed: int, *, command: str) -> str:
    """The head-profile block of the ``analyses`` of ``seed`` that hold a profile: mean
    ``s_POS`` / ``s_SYM`` over each layer's heads; ``""`` when none does."""
    rows = [r for r in analyses if r.get("profile") and r["cell"]["seed"] == seed]
    if not rows:
        return ""
    lines = [f"<!-- written by `{command}` from the cells' analysis.json (no record "
             "holds the profiles); do not edit -->", "",
             f"### Head profiles (seed {seed}): mean s_POS / s_SYM per layer (block swaps, query at "
             "the last position)", "", "| task | variant | scheme | site | per layer s_POS/s_SYM |",
             "|---|---|---|---|---|"]
    for r in rows:
        c, p = r["cell"], r["profile"]
        per = "; ".join(f"L{L} {sum(pl) / len(pl):.2f}/{sum(sl) / len(sl):.2f}"
                        for L, (pl, sl) in enumerate(zip(p["pos"], p["sym"])))
        lines.append(f"| {c['task']} | {c['variant']} | {c['label']} | {p['site']} | {per} |")
    return "\n".join(lines) + "\n\n"


def draw_figures(rows: list[dict], figs: Path) -> None:
    """The report's figures in ``figs`` (``rows``: :func:`record_rows` or analyses):
    per-head ablation heatmaps per task and variant (seed 0), accuracy against the number
    of RoPE heads, the probe's aligned share per layer."""
    acc, _ = _accuracy(rows)
    seeds = sorted({r["cell"]["seed"] for r in rows})
    probe_rows = _probe_rows(rows, seeds[0])
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figs.mkdir(parents=True, exist_ok=True)
    # ablation heatmaps per task and variant
    for task in ("distance", "count"):
        for variant in ("intended", "faithful"):
            chosen = [r for r in rows if r["cell"]["task"] == task and r["cell"]["variant"] ==
                      variant and r["cell"]["seed"] == seeds[0]]
            chosen.sort(key=lambda r: (ORDER + [r["cell"]["label"]]).index(r["cell"]["label"]))
            if not chosen:
                continue
            cols = 4
            rows_n = (len(chosen) + cols - 1) // cols
            fig, axes = plt.subplots(rows_n, cols, figsize=(3.2 * cols, 2.4 * rows_n),
                                     squeeze=False)
            for ax in axes.flat:
                ax.axis("off")
            for ax, r in zip(axes.flat, chosen):
                drop = torch.tensor(r["ablation"]).neg().add(r["baseline"]) * 100
                ax.axis("on")
                im = ax.imshow(drop, cmap="Reds", vmin=0, vmax=100)  # one scale: comparable
                ax.set_title(f"{r['cell']['label']} (acc {100 * r['baseline']:.0f}%)", fontsize=9)
                ax.set_xlabel("head", fontsize=8)
                ax.set_ylabel("layer", fontsize=8)
                fig.colorbar(im, ax=ax, fraction=0.046)
            fig.suptitle(f"{task}, {variant}: accuracy drop (points) when one head is ablated")
            fig.tight_layout()
            fig.savefig(figs / f"ablation_{task}_{variant}.png", dpi=110)
            plt.close(fig)

    # accuracy vs number of RoPE heads
    fig, ax = plt.subplots(figsize=(5, 3.4))
    n_heads = None
    for task, marker in (("distance", "o"), ("count", "s")):
        for variant, style in (("intended", "-"), ("faithful", "--")):
            xs, ys = [], []
            for k in range(0, 17):
                label = {0: "nope" if variant == "intended" else "rope-k0"}.get(k, f"rope-k{k}")
                a, _ = acc(task, variant, label)
                if a is None and variant == "intended":
                    a, _ = acc(task, variant, "rope") if k == 8 else (None, 0)
                if a is not None:
                    xs.append(k)
                    ys.append(100 * a)
            if xs:
                ax.plot(xs, ys, style, marker=marker, label=f"{task}, {variant}")
                n_heads = max(xs)
    ax.set_xlabel("heads with RoPE (of 8 per layer)")
    ax.set_ylabel("test accuracy (%)")
    ax.legend(fontsize=8)
    ax.set_title("Accuracy vs number of RoPE heads")
    fig.tight_layout()
    fig.savefig(figs / "rope_heads.png", dpi=110)
    plt.close(fig)

    # probe figure
    if probe_rows:
        fig, ax = plt.subplots(figsize=(5, 3.4))
        for r in probe_rows:
            c = r["cell"]
            ax.plot(r["probe"]["aligned"], marker="o",
                    label=f"{c['task'][:4]} {c['variant'][:4]} {c['label']}")
        ax.set_xlabel("layer (last point: after the last block)")
        ax.set_ylabel("positional part along input PE")
        ax.legend(fontsize=6)
        fig.tight_layout()
        fig.savefig(figs / "probe.png", dpi=110)
        plt.close(fig)
