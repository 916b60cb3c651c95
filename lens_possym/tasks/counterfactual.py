r"""Counterfactual prompt pairs for patching: a clean prompt, a corrupted one, both answers.

Activation patching compares two runs that differ in one controlled way: a **clean**
prompt, whose answer the model gets, and a **corrupted** one, edited so that the answer
changes (Meng et al. 2022; Wang et al. 2022; Heimersheim & Nanda 2024). Each corruption
here is named, keeps the token length (single-token words are swapped for single-token
words, so every position means the same in both runs), and records both answers:

=================== ====================================================================
``binding``
``swap_query``      the question asks about another entity of the prompt; the corrupted
                    answer is that entity's attribute (only the question's entity tokens
                    change).
``swap_attribute``  the queried entity's attribute is replaced by one not in the prompt,
                    which becomes the corrupted answer (one token changes).
``shuffle_order``   the entities are put in another order (every one moves; the
                    attributes keep their places), so the queried entity is now bound to
                    another attribute of the prompt: the corrupted answer. The prompt
                    holds the same tokens, in other positions. (Moving each entity *with*
                    its attribute would leave the answer unchanged, and no logit
                    difference could tell the runs apart.)
``distance``
``shift_cue``       the cue is taken from another place of the list (same spacing); the
                    corrupted answer is the word after it there (only the cue changes).
``swap_answer``     the answer word of the list is replaced by a word not in it, the
                    corrupted answer (one token changes).
=================== ====================================================================

**The metric** (:class:`NormalizedLogitDiff`): per prompt, the logit difference
``LD = logit(clean answer) − logit(corrupted answer)`` at the last position, normalised
between the two unpatched runs,

.. math::

    m = \frac{LD - \overline{LD}_{corr}}{\overline{LD}_{clean} - \overline{LD}_{corr}},

so ``m`` averages to **0 on the corrupted run and 1 on the clean run**, and a patch that
restores the clean behaviour scores 1. The baselines are means over the prompts (the
literature's convention): one scale for all prompts keeps a prompt whose two runs barely
differ from blowing up. ``per_prompt=True`` normalises each prompt by its own two runs
instead (exactly 0 and 1 per prompt; refused when a prompt's runs do not differ).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any, Sequence

import torch
from jaxtyping import Float, Int
from torch import Tensor

from .._checks import boundary
from .._inputs import as_tokens
from ..errors import InvalidSelectionError, TaskConfigError
from ..typing import HookedModel
from .binding import binding_template, binding_task, binding_task_from, check_words
from .binding import single_token_words
from .check import SOLVED_MARGIN, task_check
from .word_distance import DEFAULT_WORDS, word_distance_task, word_distance_task_from

__all__ = ["CORRUPTIONS", "CounterfactualPairs", "NormalizedLogitDiff", "counterfactual_pairs",
           "binding_pairs", "word_distance_pairs", "prompt_pairs", "answer_logit_diff"]

#: The named corruptions of each task (the first is the default).
CORRUPTIONS: dict[str, tuple[str, ...]] = {
    "binding": ("swap_query", "swap_attribute", "shuffle_order"),
    "distance": ("shift_cue", "swap_answer"),
}


def _last(logits: Tensor) -> Float[Tensor, "batch d_vocab"]:
    last = logits[:, -1] if logits.ndim == 3 else logits
    if last.ndim != 2:
        raise InvalidSelectionError(
            f"logits must be [batch, pos, d_vocab] or [batch, d_vocab], got {tuple(logits.shape)}")
    return last.to(torch.promote_types(last.dtype, torch.float32))


def answer_logit_diff(logits: Tensor, answers: Int[Tensor, "batch"],
                      others: Int[Tensor, "batch"]) -> Float[Tensor, "batch"]:
    """``logit(answers) − logit(others)`` at the last position, per prompt."""
    last = _last(logits)
    if last.shape[0] != answers.shape[0]:
        raise InvalidSelectionError(
            f"logits for {last.shape[0]} prompts, answers for {answers.shape[0]}")
    a, o = answers.to(last.device)[:, None], others.to(last.device)[:, None]
    return (last.gather(1, a) - last.gather(1, o))[:, 0]


@dataclass
class NormalizedLogitDiff:
    """The clean-vs-corrupted logit difference, normalised between the two runs (module doc).

    Call it on logits ``[batch, pos, d_vocab]`` (or ``[batch, d_vocab]``) to get ``[batch]``
    values: 0 on average on the corrupted run, 1 on the clean run.

    Attributes:
        clean_answers, corrupted_answers: ``[batch]`` token ids.
        clean_baseline, corrupted_baseline: ``[batch]`` the raw logit difference of the
            unpatched clean and corrupted runs.
        per_prompt: normalise each prompt by its own two runs instead of the means.
    """

    clean_answers: Int[Tensor, "batch"]
    corrupted_answers: Int[Tensor, "batch"]
    clean_baseline: Float[Tensor, "batch"]
    corrupted_baseline: Float[Tensor, "batch"]
    per_prompt: bool = False

    def __post_init__(self) -> None:
        scale = self.clean_baseline - self.corrupted_baseline
        if self.per_prompt:
            flat = (scale.abs() < 1e-6).nonzero().flatten().tolist()
            if flat:
                raise InvalidSelectionError(
                    f"prompt(s) {flat} have the same logit difference on the clean and the "
                    "corrupted run, so they cannot be normalised one by one; drop them or use "
                    "per_prompt=False (one scale from the means)")
        elif abs(float(scale.mean())) < 1e-6:
            raise InvalidSelectionError(
                "the clean and corrupted runs have the same mean logit difference "
                f"({float(self.clean_baseline.mean()):.4g}): the corruption does not change "
                "what the model answers, so there is nothing to restore")
        self.__name__ = "normalized_logit_diff"

    def logit_diff(self, logits: Tensor) -> Float[Tensor, "batch"]:
        """The raw ``logit(clean answer) − logit(corrupted answer)`` per prompt."""
        return answer_logit_diff(logits, self.clean_answers, self.corrupted_answers)

    @property
    def scale(self) -> Tensor:
        """The denominator: ``clean − corrupted`` (per prompt, or of the means)."""
        diff = self.clean_baseline - self.corrupted_baseline
        return diff if self.per_prompt else diff.mean()

    def __call__(self, logits: Tensor) -> Float[Tensor, "batch"]:
        ld = self.logit_diff(logits)
        corrupted = self.corrupted_baseline if self.per_prompt else self.corrupted_baseline.mean()
        return (ld - corrupted.to(ld)) / self.scale.to(ld)


@dataclass
class CounterfactualPairs:
    """Clean and corrupted prompts of equal token length, with both answers.

    Attributes:
        task: what the prompts are (``"binding"``, ``"distance"``, ``"prompts"``, ...).
        corruption: the corruption's name (see :data:`CORRUPTIONS`).
        clean_tokens, corrupted_tokens: ``[batch, pos]``.
        clean_answers, corrupted_answers: ``[batch]`` the next token each prompt asks for.
        clean_prompts, corrupted_prompts: the texts.
        info: how the pairs were made (seed, sizes).
        clean_task, corrupted_task: the task objects, when the pairs come from a task.
    """

    task: str
    corruption: str
    clean_tokens: Int[Tensor, "batch pos"]
    corrupted_tokens: Int[Tensor, "batch pos"]
    clean_answers: Int[Tensor, "batch"]
    corrupted_answers: Int[Tensor, "batch"]
    clean_prompts: list[str] = field(default_factory=list)
    corrupted_prompts: list[str] = field(default_factory=list)
    info: dict[str, Any] = field(default_factory=dict)
    clean_task: Any = field(default=None, repr=False)
    corrupted_task: Any = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if self.clean_tokens.shape != self.corrupted_tokens.shape:
            raise InvalidSelectionError(
                f"clean tokens {tuple(self.clean_tokens.shape)} and corrupted tokens "
                f"{tuple(self.corrupted_tokens.shape)} differ in shape; a corruption must keep "
                "the token length (positions would shift)")
        n = self.clean_tokens.shape[0]
        for name in ("clean_answers", "corrupted_answers"):
            value = torch.as_tensor(getattr(self, name)).reshape(-1)
            if value.shape[0] != n:
                raise InvalidSelectionError(f"{value.shape[0]} {name} for {n} prompts")
            setattr(self, name, value)
        same = (self.clean_answers.cpu() == self.corrupted_answers.cpu()).nonzero().flatten()
        if len(same):
            raise InvalidSelectionError(
                f"prompt(s) {same.tolist()} have the same clean and corrupted answer; a "
                "corruption must change the answer")

    @property
    def n_prompts(self) -> int:
        return self.clean_tokens.shape[0]

    @property
    def name(self) -> str:
        """``"task/corruption"``."""
        return f"{self.task}/{self.corruption}"

    def changed_positions(self) -> Int[Tensor, "pos"]:
        """Positions where some clean and corrupted prompt differ."""
        return (self.clean_tokens != self.corrupted_tokens).any(0).nonzero().flatten()

    def logit_diff(self, logits: Tensor) -> Float[Tensor, "batch"]:
        """``logit(clean answer) − logit(corrupted answer)`` at the last position."""
        return answer_logit_diff(logits, self.clean_answers, self.corrupted_answers)

    def baselines(self, model: HookedModel) -> tuple[Tensor, Tensor]:
        """The raw logit difference of the clean and the corrupted run: ``([batch], [batch])``."""
        kwargs = {"logits_to_keep": 1} if hasattr(model, "original_model") else {}
        with torch.no_grad():
            clean = self.logit_diff(model(self.clean_tokens, **kwargs))
            corrupted = self.logit_diff(model(self.corrupted_tokens, **kwargs))
        return clean.detach().cpu(), corrupted.detach().cpu()

    def raw_metrics(self, model: HookedModel, margin: float | None = None) -> dict[str, Any]:
        """Whether the model solves the pairs, from the raw (unnormalised) metric of both
        unpatched runs (one forward pass each), as :func:`~lens_possym.tasks.check.task_check`
        judges it.

        * ``clean_logit_diff`` / ``corrupted_logit_diff``: mean ``logit(clean answer) −
          logit(corrupted answer)`` on each run (with ``..._se``, the standard error over
          prompts); the normalised metric maps them to 1 and 0;
        * ``clean_accuracy`` / ``corrupted_accuracy``: share of prompts whose top token is
          the run's own answer;
        * ``accuracy`` (the verdict's): share of clean prompts where the clean answer's logit
          is above the corrupted answer's, chance 0.5 between the two answers.
        """
        kwargs = {"logits_to_keep": 1} if hasattr(model, "original_model") else {}
        with torch.no_grad():
            clean_logits = _last(model(self.clean_tokens, **kwargs))
            corrupted_logits = _last(model(self.corrupted_tokens, **kwargs))
        clean = self.logit_diff(clean_logits).detach().cpu().double()
        corrupted = self.logit_diff(corrupted_logits).detach().cpu().double()
        n = clean.shape[0]

        def se(values: Tensor) -> float:
            return float(values.std() / n ** 0.5) if n > 1 else float("nan")

        top = {name: float((logits.argmax(-1).cpu() == answers.cpu()).double().mean())
               for name, logits, answers in (("clean", clean_logits, self.clean_answers),
                                             ("corrupted", corrupted_logits,
                                              self.corrupted_answers))}
        return task_check(
            float((clean > 0).double().mean()), 0.5,
            what="clean answer above the corrupted one on clean prompts",
            margin=SOLVED_MARGIN if margin is None else margin,
            clean_logit_diff=float(clean.mean()), clean_logit_diff_se=se(clean),
            corrupted_logit_diff=float(corrupted.mean()), corrupted_logit_diff_se=se(corrupted),
            clean_accuracy=top["clean"], corrupted_accuracy=top["corrupted"])

    def metric(self, model: HookedModel, *, per_prompt: bool = False) -> NormalizedLogitDiff:
        """The normalised logit difference for ``model`` (runs both prompts once)."""
        clean, corrupted = self.baselines(model)
        return NormalizedLogitDiff(self.clean_answers, self.corrupted_answers, clean, corrupted,
                                   per_prompt=per_prompt)

    def describe(self) -> dict[str, Any]:
        """A JSON-ready description: task, corruption, sizes, an example pair."""
        out = {"task": self.task, "corruption": self.corruption, "n_prompts": self.n_prompts,
               "n_tokens": int(self.clean_tokens.shape[1]),
               "changed_positions": self.changed_positions().tolist(), **self.info}
        if self.clean_prompts:
            out["example_clean"] = self.clean_prompts[0]
            out["example_corrupted"] = self.corrupted_prompts[0]
        return out

    def to(self, device: str | torch.device) -> "CounterfactualPairs":
        for name in ("clean_tokens", "corrupted_tokens", "clean_answers", "corrupted_answers"):
            setattr(self, name, getattr(self, name).to(device))
        return self


# ---- binding ----------------------------------------------------------------------------


def _check_corruption(task: str, corruption: str | None) -> str:
    names = CORRUPTIONS[task]
    if corruption is None:
        return names[0]
    if corruption not in names:
        raise InvalidSelectionError(
            f"unknown {task} corruption {corruption!r}; use one of {', '.join(names)}")
    return corruption


def binding_pairs(model: HookedModel, task: Any = None, corruption: str | None = None, *,
                  corruption_seed: int = 0, **task_settings: Any) -> CounterfactualPairs:
    """Counterfactual pairs of binding prompts (module docstring for the corruptions).

    Args:
        task: a :class:`~lens_possym.tasks.BindingTask` (default: ``binding_task(model,
            **task_settings)``).
        corruption: ``"swap_query"`` (default), ``"swap_attribute"`` or ``"shuffle_order"``.
        corruption_seed: draws the corruption (another entity, attribute or order).
        task_settings: for :func:`~lens_possym.tasks.binding_task` (``n_prompts``,
            ``n_pairs``, ``seed``, ...).

    Raises:
        InvalidSelectionError: an unknown corruption, or prompts it cannot corrupt (one
            pair, no other attribute, an order that no entity can start).
    """

    corruption = _check_corruption("binding", corruption)
    if task is None:
        task = binding_task(model, **task_settings)
    elif task_settings:
        raise InvalidSelectionError("pass either a task or settings to build one, not both")
    if task.n_pairs < 2:
        raise InvalidSelectionError(
            "binding prompts of one pair cannot be corrupted (nothing to swap with); use "
            "n_pairs >= 2")
    template = binding_template(task.template)
    rng = random.Random(f"binding-{corruption}-{corruption_seed}")
    entities = [list(e) for e in task.entities]
    attributes = [list(a) for a in task.attributes]
    queries = [int(q) for q in task.query_pair.tolist()]
    if corruption == "swap_query":
        new_queries = []
        for b, (as_, q) in enumerate(zip(attributes, queries)):
            others = [i for i in range(task.n_pairs) if as_[i] != as_[q]]
            if not others:
                raise InvalidSelectionError(
                    f"binding prompt {b} binds one attribute to every entity; no other entity "
                    "has another answer")
            new_queries.append(rng.choice(others))
        corrupted = binding_task_from(model, entities, attributes, new_queries,
                                      template=template, seed=task.seed)
    elif corruption == "swap_attribute":
        pool = [c.word for c in check_words(model.tokenizer, template.attribute_pool, template,
                                            "attribute", entities[0][0]) if c.usable]
        new_attributes = []
        for b, (as_, q) in enumerate(zip(attributes, queries)):
            fresh = [a for a in pool if a not in as_]
            if not fresh:
                raise InvalidSelectionError(
                    f"binding prompt {b} already uses every usable attribute; none is left to "
                    "swap in (use fewer pairs)")
            edited = list(as_)
            edited[q] = rng.choice(fresh)
            new_attributes.append(edited)
        corrupted = binding_task_from(model, entities, new_attributes, queries,
                                      template=template, seed=task.seed)
    else:  # shuffle_order
        words = sorted({e for es in entities for e in es})
        filler = attributes[0][0]
        starters = {c.word for c in check_words(model.tokenizer, words, template, "entity", filler)
                    if c.can_start}
        new_entities, new_queries = [], []
        for b, (es, as_, q) in enumerate(zip(entities, attributes, queries)):
            order = _derangement(rng, len(es), lambda perm: es[perm[0]] in starters
                                 and as_[perm.index(q)] != as_[q])
            if order is None:
                raise InvalidSelectionError(
                    f"binding prompt {b}: no order moves every entity, puts one that can start "
                    "the text first and gives the queried entity another attribute")
            new_entities.append([es[i] for i in order])
            new_queries.append(order.index(q))
        corrupted = binding_task_from(model, new_entities, attributes, new_queries,
                                      template=template, seed=task.seed)
    return CounterfactualPairs(
        task="binding", corruption=corruption, clean_tokens=task.tokens,
        corrupted_tokens=corrupted.tokens, clean_answers=task.answers,
        corrupted_answers=corrupted.answers, clean_prompts=list(task.prompts),
        corrupted_prompts=list(corrupted.prompts),
        info={"n_pairs": task.n_pairs, "seed": task.seed, "corruption_seed": corruption_seed},
        clean_task=task, corrupted_task=corrupted)


def _derangement(rng: random.Random, n: int, accept, tries: int = 200) -> list[int] | None:
    """A random permutation moving every index, with ``accept(perm)``; ``None`` if none found."""
    for _ in range(tries):
        perm = list(range(n))
        rng.shuffle(perm)
        if all(p != i for i, p in enumerate(perm)) and accept(perm):
            return perm
    return None


# ---- word distance ----------------------------------------------------------------------


def word_distance_pairs(model: HookedModel, task: Any = None, corruption: str | None = None,
                        *, corruption_seed: int = 0, **task_settings: Any) -> CounterfactualPairs:
    """Counterfactual pairs of word-distance prompts (module docstring for the corruptions).

    Args:
        task: a :class:`~lens_possym.tasks.WordDistanceTask` (default:
            ``word_distance_task(model, **task_settings)``).
        corruption: ``"shift_cue"`` (default) or ``"swap_answer"``.
        corruption_seed: draws the corruption.
        task_settings: for :func:`~lens_possym.tasks.word_distance_task`.
    """

    corruption = _check_corruption("distance", corruption)
    if task is None:
        task = word_distance_task(model, **task_settings)
    elif task_settings:
        raise InvalidSelectionError("pass either a task or settings to build one, not both")
    rng = random.Random(f"distance-{corruption}-{corruption_seed}")
    lists = [list(ws) for ws in task.words]
    starts = task.cue_starts.tolist()
    step, span, n = task.distance, abs(task.distance) * task.n_cue, task.n_words
    if corruption == "shift_cue":
        valid = range(0, n - span) if step > 0 else range(span, n)
        if len(valid) < 2:
            raise TaskConfigError(
                f"the cue and answer fill all {n} words, so the cue cannot move; raise n_words")
        new_starts = [rng.choice([s for s in valid if s != start]) for start in starts]
        corrupted = word_distance_task_from(model, lists, new_starts, n_cue=task.n_cue,
                                            distance=step, seed=task.seed,
                                            separator=task.separator)
    else:  # swap_answer
        pool = single_token_words(model.tokenizer, DEFAULT_WORDS,
                                  ["{w} {w}" + task.separator + " {w}", "{w}" + task.separator])
        new_lists = []
        for b, (ws, i) in enumerate(zip(lists, task.answer_index.tolist())):
            fresh = [w for w in pool if w not in ws]
            if not fresh:
                raise TaskConfigError(f"word-distance prompt {b} uses every usable word")
            edited = list(ws)
            edited[i] = rng.choice(fresh)
            new_lists.append(edited)
        corrupted = word_distance_task_from(model, new_lists, starts, n_cue=task.n_cue,
                                            distance=step, seed=task.seed,
                                            separator=task.separator)
    return CounterfactualPairs(
        task="distance", corruption=corruption, clean_tokens=task.tokens,
        corrupted_tokens=corrupted.tokens, clean_answers=task.answers,
        corrupted_answers=corrupted.answers, clean_prompts=list(task.prompts),
        corrupted_prompts=list(corrupted.prompts),
        info={"n_words": n, "n_cue": task.n_cue, "distance": step, "seed": task.seed,
              "corruption_seed": corruption_seed},
        clean_task=task, corrupted_task=corrupted)


# ---- given prompts ----------------------------------------------------------------------


def _answer_token(model: HookedModel, answer: str | int) -> int:
    d_vocab = int(getattr(getattr(model, "cfg", None), "d_vocab", 0) or 0)
    if isinstance(answer, int) and not isinstance(answer, bool):
        if d_vocab and not 0 <= answer < d_vocab:
            raise InvalidSelectionError(
                f"the answer token id {answer} is outside the vocabulary (0..{d_vocab - 1})")
        return answer
    if not isinstance(answer, str) or not answer:
        raise InvalidSelectionError(
            f"an answer must be one token of text (e.g. ' blue') or a token id, got {answer!r}")
    ids = list(model.tokenizer.encode(answer, add_special_tokens=False))
    if len(ids) != 1:
        raise InvalidSelectionError(
            f"the answer {answer!r} is {len(ids)} tokens for this tokenizer; give answers of "
            "one token, with the space they follow the prompt with (e.g. ' blue')")
    return ids[0]


@boundary
def prompt_pairs(model: HookedModel, clean: Sequence[str], corrupted: Sequence[str],
                 clean_answers: Sequence[str | int], corrupted_answers: Sequence[str | int], *,
                 name: str = "custom") -> CounterfactualPairs:
    """Pairs from given texts and answers (answers as one-token text such as ``" blue"``, or
    token ids). Every prompt must tokenize to the same length."""
    for what, items in (("clean_answers", clean_answers), ("corrupted_answers",
                                                           corrupted_answers)):
        if isinstance(items, (str, bytes)) or not isinstance(items, (list, tuple)):
            raise InvalidSelectionError(
                f"{what} must be a list (one answer per prompt), got {items!r:.60}")
    if not (len(clean) == len(corrupted) == len(clean_answers) == len(corrupted_answers)) \
            or not clean:
        raise InvalidSelectionError(
            f"give as many clean prompts, corrupted prompts and answers of each (got "
            f"{len(clean)}, {len(corrupted)}, {len(clean_answers)}, {len(corrupted_answers)})")
    tokens = as_tokens(model, list(clean) + list(corrupted))
    n = len(clean)
    return CounterfactualPairs(
        task="prompts", corruption=name, clean_tokens=tokens[:n], corrupted_tokens=tokens[n:],
        clean_answers=torch.tensor([_answer_token(model, a) for a in clean_answers]),
        corrupted_answers=torch.tensor([_answer_token(model, a) for a in corrupted_answers]),
        clean_prompts=list(clean), corrupted_prompts=list(corrupted))


def counterfactual_pairs(model: HookedModel, task: str, corruption: str | None = None, *,
                         corruption_seed: int = 0, **task_settings: Any) -> CounterfactualPairs:
    """Pairs of a named task: ``"binding"`` or ``"distance"`` (see :data:`CORRUPTIONS`);
    ``task_settings`` go to the task's builder (``n_prompts``, ``n_pairs``, ...)."""
    builders = {"binding": binding_pairs, "distance": word_distance_pairs}
    if task not in builders:
        raise InvalidSelectionError(
            f"unknown task {task!r}; use one of {', '.join(builders)} (or prompt_pairs for "
            "your own prompts)")
    return builders[task](model, None, corruption, corruption_seed=corruption_seed,
                          **task_settings)
