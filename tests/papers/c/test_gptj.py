"""GPTJTaskModel: a transformers GPT-J that trains in the shared loop, reads through the
bridge with its true geometry, and runs past n_positions."""

from __future__ import annotations

import pytest
import torch

from lens_possym.errors import ToyConfigError
from lens_possym.rope import rope_specs
from lens_possym.training.models import MODELS
from lens_possym.papers.c.gptj import GPTJTaskConfig, GPTJTaskModel, gptj_config_for
from lens_possym.papers.c.tasks import LetterTask

SMALL = dict(n_layers=2, n_heads=1, d_model=16, d_mlp=32, dropout=0.0)


def test_paper_sizes_and_full_rotary():
    cfg = GPTJTaskConfig.paper(136)
    assert (cfg.n_layers, cfg.n_heads, cfg.d_head, cfg.rotary_dim) == (12, 1, 128, 128)
    assert cfg.n_freqs == 64 and cfg.dropout == 0.1
    hf = cfg.hf_config()
    assert hf.rotary_dim == 128 and hf.n_positions == 128 and not hf.tie_word_embeddings
    angles = cfg.angles()
    assert angles[0] == 1.0 and abs(angles[1] - 10000 ** (-2 / 128)) < 1e-7


def test_bridge_reads_the_geometry_and_the_same_logits():
    task = LetterTask()
    model = GPTJTaskModel(gptj_config_for(task, **SMALL)).eval()
    tokens = task.sample(4).tokens
    bridge = model.bridge()
    with torch.no_grad():
        assert torch.allclose(bridge(tokens), model(tokens), atol=1e-5)
    spec = rope_specs(bridge)[1]
    assert spec.rotary_dim == 16 and spec.pairing == "adjacent" and spec.n_heads == 1
    assert torch.allclose(spec.inv_freq, torch.tensor(model.cfg.angles()), atol=1e-7)
    assert MODELS["gptj"] is GPTJTaskModel


def test_positions_beyond_n_positions_match_a_larger_table():
    task = LetterTask(length=300)
    short = GPTJTaskModel(GPTJTaskConfig(d_vocab=task.d_vocab, n_ctx=32, **SMALL)).eval()
    wide = GPTJTaskModel(GPTJTaskConfig(d_vocab=task.d_vocab, n_ctx=512, **SMALL)).eval()
    tokens = task.sample(2).tokens
    with torch.no_grad():
        assert torch.allclose(short(tokens), wide(tokens), atol=1e-5)
    table = short.hf.transformer.h[0].attn.embed_positions
    assert table.shape[-2] == 300
    assert "embed_positions" not in " ".join(short.state_dict())   # not a weight
    from lens_possym.papers.c.discrepancy import head_discrepancy
    bridge = short.bridge(n_positions=300)                         # analyses run there too
    assert bridge.cfg.n_ctx == 300
    assert head_discrepancy(bridge, tokens, layer=1).gaps.shape == (2,)


def test_same_seed_same_weights_global_rng_untouched():
    torch.manual_seed(123)
    before = torch.rand(1)
    torch.manual_seed(123)
    a = GPTJTaskModel(GPTJTaskConfig(d_vocab=20, seed=5, **SMALL))
    after = torch.rand(1)
    b = GPTJTaskModel.from_config(a.cfg.to_dict())
    assert torch.equal(before, after)
    assert all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values()))


@pytest.mark.parametrize("kwargs, match", [
    (dict(d_model=10, n_heads=3), "multiple of n_heads"),
    (dict(rotary_dim=7), "rotary_dim must be even"),
    (dict(dropout=1.0), "dropout"),
    (dict(n_layers=0), "n_layers"),
])
def test_bad_sizes_are_refused(kwargs, match):
    with pytest.raises(ToyConfigError, match=match):
        GPTJTaskConfig(d_vocab=10, **kwargs)
