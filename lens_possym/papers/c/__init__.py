"""Paper C: "Positional versus Symbolic Attention Heads: Learning Dynamics, RoPE Geometry,
and Length Generalization".

The Number and Letter multi-hop tasks (:mod:`.tasks`), GPT-J through transformers
(:mod:`.gptj`), the presets and one run's training (:mod:`.presets`), scores over training
and purity (:mod:`.dynamics`), head roles (:mod:`.roles`), T_Index and T_Retrieval
(:mod:`.constructions`, with exact multi-layer chains), the answer along the hop path
(:mod:`.chain`: logit lens and residual patching per stop), discrepancy and Theorem 3.2
(:mod:`.discrepancy`), length generalisation (:mod:`.lengths`) and why it fails
(:mod:`.masking`), the length test under every reading of the extra symbols
(:mod:`.readings`), the verdict rules of docs/paper_c_rules.md (:mod:`.verdicts`), the
1-hop prompts for pretrained LMs (:mod:`.prompts`); the ``lens-possym multihop`` command;
and the reproduction pipeline (:mod:`.pipeline`: training queues, :mod:`.stages` the
cached analyses, :mod:`.report` docs/paper_c.md, :mod:`.settings_ablation` one setting at a
time) as ``lens-possym paper-c train | queue | analyse | grid | report | verdicts | ...``.
"""

from ...plugins import Plugin, lazy_attributes

PLUGIN = Plugin(
    name="paper-c",
    title="Positional versus Symbolic Attention Heads: Learning Dynamics, RoPE Geometry, "
          "and Length Generalization",
    tasks={"number": "lens_possym.papers.c.tasks:NumberTask",
           "letter": "lens_possym.papers.c.tasks:LetterTask"},
    models={"gptj": "lens_possym.papers.c.gptj:GPTJTaskModel"},
    commands=("lens_possym.papers.c.cli", "lens_possym.papers.c.cli_pipeline"),
)

_EXPORTS = {
    "tasks": ["MultiHopTask", "NumberTask", "LetterTask"],
    "gptj": ["GPTJTaskConfig", "GPTJTaskModel", "gptj_config_for"],
    "presets": ["MultiHopPreset", "MULTIHOP_PRESETS", "preset", "build_run",
                "train_multihop"],
    "dynamics": ["ScoreTrajectory", "score_run", "score_model", "path_scores", "Purity",
                 "purity"],
    "roles": ["AttentionRoles", "attention_roles", "label_roles", "CausalRoles",
              "causal_roles"],
    "constructions": ["t_index_model", "t_retrieval_model", "t_index_chain_model",
                      "t_retrieval_chain_model"],
    "chain": ["ChainLens", "chain_lens", "ChainPatching", "chain_patching", "decode_residual"],
    "discrepancy": ["Discrepancy", "head_discrepancy", "index_discrepancy", "index_bound",
                    "retrieval_bound", "LayerGaps", "layer_gaps"],
    "masking": ["ExtensionAccuracy", "extension_accuracy", "extension_hooks"],
    "lengths": ["LengthAccuracy", "accuracy_by_length", "lm_hop_accuracy"],
    "frequency": ["FrequencyProfile", "frequency_profile", "TABLE_1"],
    "readings": ["CellStore", "run_grid", "length_cell", "mask_cells", "reading_claims",
                 "all_readings_verdict", "fig5b_distances", "fig5b_readings", "grid_table",
                 "verdict_table"],
    "prompts": ["HopPrompt", "hop_prompts", "hop_pairs", "HOP_CORRUPTIONS"],
}
__getattr__, __dir__ = lazy_attributes(__name__, _EXPORTS)
__all__ = ["PLUGIN", *(name for names in _EXPORTS.values() for name in names)]
