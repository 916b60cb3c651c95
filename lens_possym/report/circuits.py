"""Report of ``lens-possym circuit``: the circuit's graph, faithfulness curve and labels."""

from __future__ import annotations

from typing import Any, Mapping

from .builder import Report
from .interventions import task_check_section
from ..viz.circuits import plot_circuit

__all__ = ["circuit_report", "circuit_figures"]


def circuit_figures(circuit, *, title: str = "") -> dict[str, Any]:
    """``{"circuit_graph": Figure, "circuit_faithfulness": Figure}`` (matplotlib, no pyplot)."""
    from matplotlib.figure import Figure

    graph = Figure(figsize=(9, 5.5), constrained_layout=True)
    plot_circuit(circuit, ax=graph.subplots(), title=title or None)
    curve = Figure(figsize=(6, 3.4), constrained_layout=True)
    ax = curve.subplots()
    u = circuit.curve()
    lo, hi = float(circuit.ablated.mean()), float(circuit.clean.mean())
    scale = (hi - lo) or 1.0
    norm = lambda t: ((t - lo) / scale).tolist()  # noqa: E731
    ax.errorbar(circuit.sizes, norm(u.mean), yerr=[
        [m - l for m, l in zip(norm(u.mean), norm(u.low))],
        [h - m for m, h in zip(norm(u.mean), norm(u.high))]], marker="o", capsize=3)
    ax.axhline(1.0, color="grey", lw=0.8, ls="--")
    ax.axhline(0.0, color="grey", lw=0.8, ls=":")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("circuit size (edges, by |score|)")
    ax.set_ylabel("faithfulness (0 ablated, 1 model)")
    return {"circuit_graph": graph, "circuit_faithfulness": curve}


def circuit_report(circuit, *, model: str, command: str = "",
                   figures: Mapping[str, Any] | None = None) -> Report:
    """The circuit: how it was found, its faithfulness curve, its graph, its edges."""
    info = circuit.info
    report = Report(f"lens-possym circuit: {model}", command=command, intro=(
        "Edges (a sender's output reaching a receiver's query, key or value, an MLP or the "
        f"logits) scored by {circuit.method} patching, the circuit the top edges by |score|. "
        "Faithfulness: the metric with only the circuit's edges carrying their value and "
        + ("every other edge of the model" if circuit.scope == "graph" else
           "every other candidate edge (the scored ones; the rest of the model keeps its "
           "value)")
        + f" its {circuit.ablation} value, 1 = the whole model, 0 = "
        + ("nothing" if circuit.scope == "graph" else "every candidate ablated")
        + "; means over prompts with 95% bootstrap intervals."))
    if info.get("task_check"):
        task_check_section(report, info["task_check"])
    report.section("How it was found")
    report.key_values([(k, v) for k, v in info.items()
                       if k not in ("task_check", "pairs") and not isinstance(v, (dict, list))])
    figures = figures or circuit_figures(circuit)
    report.section("Faithfulness over circuit sizes")
    report.image(figures["circuit_faithfulness"], alt="faithfulness curve")
    report.table([{"size": s, "faithfulness": float(f), "metric": circuit.curve().label(i)}
                  for i, (s, f) in enumerate(zip(circuit.sizes, circuit.normalised()))])
    report.section("The circuit", caption=(
        "Nodes coloured by s_POS − s_SYM (red positional, blue symbolic); edges' width by "
        "|score|, style by channel (q solid, k dashed, v dotted), key edges coloured by "
        "their positional share (the part of the edge's effect through the receiver's "
        "positional frequency pairs)."))
    report.image(figures["circuit_graph"], alt="circuit graph")
    report.table([{"edge": e, "score": s, "positional_share": circuit.key_shares.get(e)}
                  for e, s in zip(circuit.edges, circuit.scores)])
    if circuit.nodes:
        report.section("Heads")
        report.table([{"head": k, "s_pos": v["pos"], "s_sym": v["sym"]}
                      for k, v in sorted(circuit.nodes.items())])
    return report
