"""Prompts for pretrained language models: binding prompts (:mod:`.binding`), word-distance
prompts (:mod:`.word_distance`) and their counterfactual pairs for patching
(:mod:`.counterfactual`).

Tasks with known answers for training (paper A's canonical tasks, papers B and C's) are in
:mod:`lens_possym.training` and the papers' plug-ins.
"""

from .._lazy import lazy_attributes

# imported on first use (lens_possym._lazy), so importing a light submodule of this
# package (a command line's choices) imports nothing heavy
_EXPORTS = {
    "binding": ["BINDING_TEMPLATES", "ImportanceBatch", "BindingResult", "BindingTask", "BindingTemplate",
        "binding_logit_diff", "WordCheck", "binding_task", "check_words", "evaluate_binding",
        "random_token_prompts"],
    "check": ["SOLVED_MARGIN", "task_check", "batch_check"],
    "counterfactual": ["CORRUPTIONS", "CounterfactualPairs", "NormalizedLogitDiff",
        "binding_pairs", "counterfactual_pairs", "prompt_pairs", "word_distance_pairs"],
    "word_distance": ["WordDistanceTask", "evaluate_word_distance", "word_distance_task"],
}
__getattr__, __dir__ = lazy_attributes(__name__, _EXPORTS)

__all__ = [name for names in _EXPORTS.values() for name in names]
