"""lens-possym: positional vs symbolic attention heads in RoPE models, per frequency.

Built on TransformerLens's ``TransformerBridge``. The public surface:

* models: :func:`load_model`, :func:`list_models`, :func:`from_gguf`, :func:`from_hf`,
  :func:`tiny_model`;
* RoPE geometry: :class:`RopeSpec`, :func:`rope_specs`, :func:`rope_spec`;
* capture and decomposition: :func:`capture_attention_inputs`, :func:`frequency_logits`,
  :func:`frequency_logits_all`, :class:`FrequencyLogits`, :func:`frequency_norms`;
* positional/symbolic scores: :func:`swap_scores`, :class:`PosSymScores` (and the
  :mod:`lens_possym.scores` package: cross logits, exact and re-run swaps, exclusion);
* tasks: :func:`binding_task`, :func:`evaluate_binding`, :func:`random_token_prompts`;
* interventions (hook functions; :mod:`lens_possym.interventions`): :func:`ablate_frequencies`,
  :func:`frequency_ablation_hooks`, :class:`FrequencyGate`, :func:`patch_heads`,
  :func:`patch_frequencies`, :func:`permute_content`, :func:`band_sweep`,
  :func:`compare_with_random_heads`.
* toy models and canonical tasks: :class:`ToyConfig`, :class:`ToyTransformer`,
  :class:`IndexTask`, :class:`RetrievalTask`, :class:`PartialInductionTask`,
  :func:`train`, :class:`TrainConfig`, :func:`sweep`, the hand-built heads
  (:func:`build_index_head`, ...) and ``w_max`` (Theorem 7).
"""

__version__ = "0.1.0"

from . import errors
from .capture import AttentionInputs, capture_attention_inputs
from .decompose import (
    FrequencyLogits,
    FrequencyNorms,
    decompose_inputs,
    frequency_logits,
    frequency_logits_all,
    frequency_norms,
)
from .models import (
    DEFAULT_MODEL,
    KNOWN_MODELS,
    TINY_FAMILIES,
    from_gguf,
    from_hf,
    list_models,
    load_model,
    tiny_model,
)
from .rope import RopeSpec, rope_spec, rope_specs
from .scores import PosSymScores, swap_scores
from .tasks import BindingTask, binding_task, evaluate_binding, random_token_prompts
from . import interventions
from .interventions import (
    BandSweep,
    FrequencyGate,
    FrequencyGates,
    FrequencyMeans,
    ablate_frequencies,
    ablate_frequencies_hook,
    band_sweep,
    binding_metrics,
    compare_with_random_heads,
    content_permutation_hooks,
    frequency_ablation_hooks,
    frequency_means,
    frequency_patch_hooks,
    head_patch_hooks,
    patch_frequencies,
    patch_heads,
    permute_content,
    swap_permutation,
)
from .synthetic import (
    IndexTask,
    PartialInductionTask,
    QKTrajectory,
    RetrievalTask,
    SweepResult,
    ToyConfig,
    ToyTransformer,
    TrainConfig,
    build_index_head,
    build_partial_induction_head,
    build_retrieval_head,
    evaluate,
    head_scores,
    load_checkpoint,
    make_task,
    pairs_with,
    single_ids,
    sweep,
    toy_config_for,
    train,
    w_max_by_position,
    w_max_positional,
    w_max_symbolic,
)

def __getattr__(name: str):
    # Figures pull in matplotlib; import them only when asked for (``lp.viz``).
    if name == "viz":
        import importlib

        return importlib.import_module(".viz", __name__)
    raise AttributeError(f"module 'lens_possym' has no attribute {name!r}")


__all__ = [
    "__version__",
    "errors",
    "viz",
    # models
    "load_model",
    "list_models",
    "from_gguf",
    "from_hf",
    "tiny_model",
    "TINY_FAMILIES",
    "KNOWN_MODELS",
    "DEFAULT_MODEL",
    # geometry
    "RopeSpec",
    "rope_specs",
    "rope_spec",
    # capture and decomposition
    "AttentionInputs",
    "capture_attention_inputs",
    "FrequencyLogits",
    "frequency_logits",
    "frequency_logits_all",
    "decompose_inputs",
    "FrequencyNorms",
    "frequency_norms",
    # positional / symbolic scores
    "swap_scores",
    "PosSymScores",
    # tasks
    "BindingTask",
    "binding_task",
    "evaluate_binding",
    "random_token_prompts",
    # interventions
    "interventions",
    "ablate_frequencies",
    "ablate_frequencies_hook",
    "frequency_ablation_hooks",
    "FrequencyMeans",
    "frequency_means",
    "FrequencyGate",
    "FrequencyGates",
    "patch_heads",
    "head_patch_hooks",
    "patch_frequencies",
    "frequency_patch_hooks",
    "permute_content",
    "content_permutation_hooks",
    "swap_permutation",
    "band_sweep",
    "BandSweep",
    "binding_metrics",
    "compare_with_random_heads",
    # toy models, canonical tasks, training
    "ToyConfig",
    "ToyTransformer",
    "IndexTask",
    "RetrievalTask",
    "PartialInductionTask",
    "make_task",
    "TrainConfig",
    "train",
    "evaluate",
    "toy_config_for",
    "load_checkpoint",
    "sweep",
    "SweepResult",
    "single_ids",
    "pairs_with",
    "head_scores",
    "QKTrajectory",
    "build_index_head",
    "build_retrieval_head",
    "build_partial_induction_head",
    "w_max_by_position",
    "w_max_positional",
    "w_max_symbolic",
]
