"""Prompts for pretrained language models: binding prompts (:mod:`.binding`), word-distance
prompts (:mod:`.word_distance`) and their counterfactual pairs for patching
(:mod:`.counterfactual`).

Paper A's canonical toy tasks are synthetic experiments: :mod:`lens_possym.synthetic.tasks`.
"""

from .binding import (
    BINDING_TEMPLATES,
    BindingResult,
    BindingTask,
    BindingTemplate,
    binding_logit_diff,
    WordCheck,
    binding_task,
    check_words,
    evaluate_binding,
    random_token_prompts,
)
from .counterfactual import (
    CORRUPTIONS,
    CounterfactualPairs,
    NormalizedLogitDiff,
    binding_pairs,
    counterfactual_pairs,
    prompt_pairs,
    word_distance_pairs,
)
from .word_distance import (
    WordDistanceTask,
    evaluate_word_distance,
    word_distance_task,
)

__all__ = [
    "BindingTemplate",
    "BINDING_TEMPLATES",
    "BindingTask",
    "BindingResult",
    "binding_task",
    "evaluate_binding",
    "binding_logit_diff",
    "random_token_prompts",
    "check_words",
    "WordCheck",
    # word-distance prompts (position-dependent answers)
    "WordDistanceTask",
    "word_distance_task",
    "evaluate_word_distance",
    # counterfactual pairs for patching
    "CORRUPTIONS",
    "CounterfactualPairs",
    "NormalizedLogitDiff",
    "counterfactual_pairs",
    "binding_pairs",
    "word_distance_pairs",
    "prompt_pairs",
]
