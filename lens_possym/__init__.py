"""lens-possym: positional vs symbolic attention heads in RoPE models, per frequency.

Built on TransformerLens's ``TransformerBridge``. The top level holds what a notebook
reaches for; everything else lives in subpackages with their own ``__all__``:

* models: :func:`load_model`, :func:`list_models`, :func:`from_gguf`, :func:`from_hf`,
  :func:`tiny_model` (more in :mod:`lens_possym.models`);
* RoPE geometry: :class:`RopeSpec`, :func:`rope_specs`, :func:`rope_spec`
  (:mod:`lens_possym.rope`);
* capture and decomposition: :func:`capture_attention_inputs`, :func:`frequency_logits`,
  :func:`frequency_logits_all`, :func:`frequency_norms` (:mod:`lens_possym.decompose`);
* positional/symbolic scores: :func:`swap_scores`, :class:`ScoreConfig`,
  :class:`PosSymScores` (:mod:`lens_possym.scores`: cross logits, exact and re-run swaps,
  exclusion);
* tasks: :func:`binding_task`, :func:`evaluate_binding`, :func:`random_token_prompts`
  (:mod:`lens_possym.tasks`);
* interventions, each ``OP`` as ``OP_hook``/``OP_hooks``/``OP`` in
  :mod:`lens_possym.interventions`; here the context managers :func:`ablate_frequencies`,
  :func:`patch_heads`, :func:`patch_frequencies`, :func:`permute_content`, and
  :class:`FrequencyGate`, :class:`Intervention` (interventions as data), :func:`band_sweep`,
  :func:`compare_with_random_heads`;
* figures: :mod:`lens_possym.viz`; typed contracts: :mod:`lens_possym.typing`;
* training (tasks with known answers, trainable models, one resumable loop, runs and
  checkpoints, scores over training): :mod:`lens_possym.training`;
* the papers' experiments are plug-ins (:mod:`lens_possym.plugins`), imported only when
  used: ``lens_possym.papers.a`` (canonical tasks, toy model, hand-built heads, frequency
  sweeps), ``.b`` (scheme encoders, deposit pattern), ``.c`` (multi-hop dynamics).

Every name here is imported on first use (PEP 562), so ``import lens_possym`` is fast and
imports no model code (the command line's ``--help`` relies on it).
"""

from ._interrupt import install_if_command as _install_if_command

_install_if_command()  # the command: Ctrl-C while importing is one line, exit 130
__version__ = "0.1.0"

from ._quiet import quiet_tqdm as _quiet_tqdm

_quiet_tqdm()  # before anything imports tqdm.auto (Hugging Face does, on import)

from ._lazy import lazy_attributes

_EXPORTS = {
    "capture": ["capture_attention_inputs"],
    "decompose": ["frequency_logits", "frequency_logits_all", "frequency_norms"],
    "experiments": ["band_sweep", "compare_with_random_heads"],
    "interventions": ["FrequencyGate", "Intervention", "ablate_frequencies", "patch_frequencies",
                      "patch_heads", "permute_content"],
    "models": ["from_gguf", "from_hf", "list_models", "load_model", "tiny_model"],
    "rope": ["RopeSpec", "rope_spec", "rope_specs"],
    "scores": ["PosSymScores", "ScoreConfig", "swap_scores"],
    "tasks": ["binding_task", "evaluate_binding", "random_token_prompts"],
}
_SUBPACKAGES = ["errors", "execution", "interventions", "experiments", "models", "scores",
                "tasks", "training", "viz", "typing", "plugins"]
__getattr__, __dir__ = lazy_attributes(__name__, _EXPORTS, _SUBPACKAGES)

__all__ = [
    "__version__",
    # subpackages
    "errors",
    "models",
    "scores",
    "tasks",
    "interventions",
    "experiments",
    "training",
    "viz",
    # models
    "load_model",
    "list_models",
    "from_gguf",
    "from_hf",
    "tiny_model",
    # geometry, capture and decomposition
    "RopeSpec",
    "rope_specs",
    "rope_spec",
    "capture_attention_inputs",
    "frequency_logits",
    "frequency_logits_all",
    "frequency_norms",
    # positional / symbolic scores
    "swap_scores",
    "ScoreConfig",
    "PosSymScores",
    # tasks
    "binding_task",
    "evaluate_binding",
    "random_token_prompts",
    # interventions (the context managers; OP_hook / OP_hooks in lens_possym.interventions)
    "ablate_frequencies",
    "patch_heads",
    "patch_frequencies",
    "permute_content",
    "FrequencyGate",
    "Intervention",
    "band_sweep",
    "compare_with_random_heads",
]
