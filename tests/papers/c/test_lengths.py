"""Length generalisation: accuracy by length for trained and constructed heads (past
GPT-J's n_positions), and greedy scoring of LM prompts."""

from __future__ import annotations

import pytest
import torch

from lens_possym.errors import InvalidSelectionError
from lens_possym.papers.c.constructions import t_index_model
from lens_possym.papers.c.lengths import accuracy_by_length, lm_hop_accuracy
from lens_possym.papers.c.tasks import NumberTask
from lens_possym.papers.c.prompts import hop_prompts

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_a_construction_generalises_to_every_length_it_was_built_for():
    task = NumberTask(max_hops=1)
    model, _ = t_index_model(task, 0.8, max_length=120)
    result = accuracy_by_length(model, task, [17, 60, 120], n_prompts=64)
    assert result.accuracy == [1.0, 1.0, 1.0] and result.by_hops == [[1.0]] * 3


def test_trained_gptj_runs_past_n_positions(tiny_multihop_run):
    _, model, task = tiny_multihop_run
    result = accuracy_by_length(model, task, [17, 150], n_prompts=16, chunk=8)
    assert model.cfg.n_ctx < 150 and result.lengths == [17, 150]
    assert all(0.0 <= a <= 1.0 for a in result.accuracy)
    assert len(result.by_hops[1]) == task.max_hops
    with pytest.raises(InvalidSelectionError, match="at least one length"):
        accuracy_by_length(model, task, [])


class _AlwaysSays:
    """A stand-in language model whose greedy continuation is always ``word`` then '.'."""

    def __init__(self, word: str):
        self.vocab = [word, ".", "x"]
        self.tokenizer = self

    def to_tokens(self, text: str) -> torch.Tensor:
        return torch.zeros(1, 3, dtype=torch.long)

    def decode(self, ids) -> str:
        return " " + self.vocab[ids[0]] if ids[0] == 0 else self.vocab[ids[0]]

    def __call__(self, tokens: torch.Tensor) -> torch.Tensor:
        logits = torch.zeros(1, tokens.shape[1], 3)
        logits[0, -1, 0 if tokens.shape[1] == 3 else 1] = 1.0
        return logits


def test_lm_scoring_counts_exact_answers():
    prompts = hop_prompts("number", 12, 20, seed=5)
    expected = sum(p.answer == "q" for p in prompts) / 20
    result = lm_hop_accuracy(_AlwaysSays("q"), "number", [12], n_prompts=20, seed=5)
    assert result.accuracy == [expected]


def test_every_filler_reading_is_measured_and_named():
    """T_Index reads the answer by its offset alone, so every reading of the extension
    leaves it exact; the result names its reading."""
    from lens_possym.papers.c.tasks import FILLERS

    task = NumberTask(max_hops=1)
    model, _ = t_index_model(task, 0.8, max_length=60)
    for filler in FILLERS:
        result = accuracy_by_length(model, task, [60], n_prompts=32, filler=filler)
        assert result.filler == filler and result.accuracy == [1.0]
    assert accuracy_by_length(model, task, [17], n_prompts=8).filler == "target"
