"""Paper A: "Decoupling Positional and Symbolic Attention Behavior in Transformers".

Its synthetic side: the canonical tasks (:mod:`.tasks`: Index, Retrieval, Partial
Induction), the hand-built heads of Theorems 3, 5, 6 and 7 (:mod:`.constructions`) on the
core's frequency-controlled toy RoPE transformer (:mod:`lens_possym.training.toy`, served
here too), and frequency sweeps, one toy
model per frequency set (:mod:`.sweeps`); the ``lens-possym train`` and ``sweep`` commands.
(The scores, the exclusion principle and the per-frequency decomposition are the core.)
"""

from ...plugins import Plugin, lazy_attributes

PLUGIN = Plugin(
    name="paper-a",
    title="Decoupling Positional and Symbolic Attention Behavior in Transformers",
    tasks={"index": "lens_possym.papers.a.tasks:IndexTask",
           "retrieval": "lens_possym.papers.a.tasks:RetrievalTask",
           "partial-induction": "lens_possym.papers.a.tasks:PartialInductionTask"},
    commands=("lens_possym.papers.a.cli_train", "lens_possym.papers.a.cli_sweep"),
)

_EXPORTS = {
    "tasks": ["IndexTask", "RetrievalTask", "PartialInductionTask"],
    # the toy model and the plumbing of hand-built heads are the core's (paper C builds
    # heads on them too); served here under their old names
    "...training.toy": ["ToyConfig", "ToyTransformer", "rope_schedule", "toy_config_for"],
    "...training.constructions": ["HeadConstruction"],
    "constructions": ["build_index_head", "build_retrieval_head",
                      "build_partial_induction_head", "w_max_by_position", "w_max_positional",
                      "w_max_symbolic"],
    "sweeps": ["FrequencySweep", "FrequencySweepRun", "frequency_sweep", "single_ids",
               "pairs_with", "SweepResult", "SweepRun", "sweep"],
    "figures": ["plot_accuracy_vs_freq", "plot_accuracy_by_position", "plot_w_max",
                "plot_scores_vs_freq", "save_sweep_figures"],
    "report": ["toy_sweep_report"],
}
__getattr__, __dir__ = lazy_attributes(__name__, _EXPORTS)
__all__ = ["PLUGIN", *(name for names in _EXPORTS.values() for name in names)]
