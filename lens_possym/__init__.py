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
* figures: :mod:`lens_possym.viz` (imported on first use); typed contracts:
  :mod:`lens_possym.typing`.
* synthetic experiments (tasks with known answers, toy models, resumable training,
  sweeps, hand-built heads): :mod:`lens_possym.synthetic`.
"""

from ._interrupt import install_if_command as _install_if_command

_install_if_command()  # the command: Ctrl-C while importing is one line, exit 130
__version__ = "0.1.0"

from ._quiet import quiet_tqdm as _quiet_tqdm

_quiet_tqdm()  # before anything imports tqdm.auto (Hugging Face does, on import)

from . import errors, execution, interventions, models, scores, synthetic, tasks
from .capture import capture_attention_inputs
from .decompose import frequency_logits, frequency_logits_all, frequency_norms
from .interventions import (
    FrequencyGate,
    Intervention,
    ablate_frequencies,
    band_sweep,
    compare_with_random_heads,
    patch_frequencies,
    patch_heads,
    permute_content,
)
from .models import from_gguf, from_hf, list_models, load_model, tiny_model
from .rope import RopeSpec, rope_spec, rope_specs
from .scores import PosSymScores, ScoreConfig, swap_scores
from .tasks import binding_task, evaluate_binding, random_token_prompts


def __getattr__(name: str):
    # Figures pull in matplotlib; import them only when asked for (``lp.viz``).
    if name == "viz":
        import importlib

        return importlib.import_module(".viz", __name__)
    raise AttributeError(f"module 'lens_possym' has no attribute {name!r}")


__all__ = [
    "__version__",
    # subpackages
    "errors",
    "models",
    "scores",
    "tasks",
    "interventions",
    "synthetic",
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
