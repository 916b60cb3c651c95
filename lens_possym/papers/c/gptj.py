r"""GPT-J for synthetic tasks: :class:`GPTJTaskModel`, a :class:`TrainableModel` around
transformers' ``GPTJForCausalLM`` (paper C's model, App C.2).

Because the network *is* a ``GPTJForCausalLM`` (``model.hf``), the same analysis code
serves a user's own GPT-J checkpoint: :meth:`GPTJTaskModel.bridge` wraps it in a
TransformerLens ``TransformerBridge`` (sharing the weights), where lens-possym reads the
rotation from ``hook_q``/``hook_k`` and the angles from the model (GPT-J's own rotation
hooks never fire; :mod:`lens_possym.rope` reads ``embed_positions`` on the attention module
up to transformers 5.23 and on the shared rotary module from 5.24).

Paper preset (:meth:`GPTJTaskConfig.paper`): 12 layers × 1 head, ``d_model = d_head = 128``,
full rotary (``rotary_dim = 128``: 64 frequencies ``10000^(-2k/128)``; paper_c.md §3 infers
this from its Table 1), GELU MLP ``4·d_model``, dropout 0.1, untied embeddings. GPT-J's
sinusoidal table hard-codes base 10000, so ``rope_base`` is fixed at 10000.

Loss on the last token only: the shared loop (:func:`lens_possym.training.loop.train`)
scores ``model(tokens)[:, -1]`` against the answer, i.e. ``-log P(x_n | x_<n)``.

Positions beyond ``n_positions``: GPT-J precomputes its sin/cos table up to
``n_positions``; :meth:`GPTJTaskModel.ensure_positions` rebuilds that (non-persistent)
table for longer inputs with the same formula, and :meth:`forward` calls it, so
length-generalisation sets of any length run.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

import torch
from jaxtyping import Float, Int
from torch import Tensor, nn

from ...plugins import JsonConfig, check_field_types
from ...errors import ToyConfigError
from ...models.loading import from_hf
from ...models.tiny import tiny_tokenizer

if TYPE_CHECKING:
    from transformer_lens.model_bridge import TransformerBridge
    from ...training.tasks import Task

__all__ = ["GPTJTaskConfig", "GPTJTaskModel", "gptj_config_for"]

#: MLP activations a GPTJTaskConfig may name (transformers' names)
ACTIVATIONS = ("gelu_new", "gelu")


@dataclass(frozen=True)
class GPTJTaskConfig(JsonConfig):
    """Sizes of a :class:`GPTJTaskModel` (validated on creation).

    Attributes:
        d_vocab: vocabulary size.
        n_ctx: ``n_positions`` of the GPT-J config (longer inputs still run, see module doc).
        n_layers, n_heads, d_model: blocks, heads per block, residual width
            (``d_head = d_model / n_heads``).
        rotary_dim: rotated dims per head (even, ``<= d_head``); ``None`` = ``d_head`` (full).
        d_mlp: MLP width; ``None`` = ``4·d_model``.
        dropout: residual and attention dropout (paper: 0.1).
        embedding_dropout: dropout on the embeddings; ``None`` = ``dropout``. Paper C's
            code passes ``embed_pdrop`` (a typo: ``GPTJConfig`` reads ``embd_pdrop``), so
            its embeddings have none: the ``paper`` preset sets 0.
        activation: the MLP's activation as ``transformers`` names it: ``"gelu_new"`` (the
            tanh approximation, GPT-J's default) or ``"gelu"`` (exact, paper C's code).
        init_range: std of the initial weights (HF's ``initializer_range``).
        tie_embeddings: tie the unembedding to the embedding (paper's code: untied).
        seed: seed of the initial weights (global RNG untouched).
    """

    d_vocab: int
    n_ctx: int = 128
    n_layers: int = 12
    n_heads: int = 1
    d_model: int = 128
    rotary_dim: int | None = None
    d_mlp: int | None = None
    dropout: float = 0.1
    embedding_dropout: float | None = None
    activation: str = "gelu_new"
    init_range: float = 0.02
    tie_embeddings: bool = False
    seed: int = 0

    def __post_init__(self) -> None:
        check_field_types(self, error=ToyConfigError)
        for name in ("d_vocab", "n_ctx", "n_layers", "n_heads", "d_model"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ToyConfigError(f"{name} must be a positive integer, got {value!r}")
        if self.d_model % self.n_heads:
            raise ToyConfigError(
                f"d_model ({self.d_model}) must be a multiple of n_heads ({self.n_heads})")
        if self.rotary_dim is None:
            object.__setattr__(self, "rotary_dim", self.d_head)
        if self.rotary_dim < 2 or self.rotary_dim % 2 or self.rotary_dim > self.d_head:
            raise ToyConfigError(
                f"rotary_dim must be even, >= 2 and <= d_head ({self.d_head}); got "
                f"{self.rotary_dim}")
        if self.d_mlp is None:
            object.__setattr__(self, "d_mlp", 4 * self.d_model)
        if self.d_mlp < 1:
            raise ToyConfigError(f"d_mlp must be positive, got {self.d_mlp}")
        if not 0.0 <= self.dropout < 1.0:
            raise ToyConfigError(f"dropout must be in [0, 1), got {self.dropout}")
        if self.embedding_dropout is not None and not 0.0 <= self.embedding_dropout < 1.0:
            raise ToyConfigError(
                f"embedding_dropout must be None or in [0, 1), got {self.embedding_dropout}")
        if self.activation not in ACTIVATIONS:
            raise ToyConfigError(f"activation must be one of {ACTIVATIONS}, got "
                                 f"{self.activation!r}")
        if not self.init_range > 0:
            raise ToyConfigError(f"init_range must be > 0, got {self.init_range}")

    @property
    def d_head(self) -> int:
        return self.d_model // self.n_heads

    @property
    def n_freqs(self) -> int:
        return self.rotary_dim // 2

    def angles(self) -> list[float]:
        """The RoPE angles ``10000^(-2k/rotary_dim)``, fastest first (GPT-J's formula)."""
        k = torch.arange(0, self.rotary_dim, 2, dtype=torch.int64) / self.rotary_dim
        return (1.0 / (10000 ** k)).tolist()

    # to_dict/from_dict and replace: JsonConfig

    @classmethod
    def paper(cls, d_vocab: int, **overrides) -> "GPTJTaskConfig":
        """Paper C's sizes: 12 layers × 1 head × 128, full rotary, dropout 0.1."""
        return cls(**{"d_vocab": d_vocab, "n_ctx": 128, "n_layers": 12, "n_heads": 1,
                      "d_model": 128, "dropout": 0.1, **overrides})

    def hf_config(self) -> "GPTJConfig":
        """The ``transformers.GPTJConfig`` these sizes make."""
        from transformers import GPTJConfig

        cfg = GPTJConfig(vocab_size=self.d_vocab, n_positions=self.n_ctx, n_embd=self.d_model,
                         n_layer=self.n_layers, n_head=self.n_heads, rotary_dim=self.rotary_dim,
                         n_inner=self.d_mlp, activation_function=self.activation,
                         resid_pdrop=self.dropout,
                         embd_pdrop=(self.dropout if self.embedding_dropout is None
                                     else self.embedding_dropout),
                         attn_pdrop=self.dropout, initializer_range=self.init_range,
                         tie_word_embeddings=self.tie_embeddings, bos_token_id=0,
                         eos_token_id=0, pad_token_id=0, use_cache=False)
        cfg.architectures = ["GPTJForCausalLM"]
        return cfg


def gptj_config_for(task: "Task", **overrides) -> GPTJTaskConfig:
    """A :class:`GPTJTaskConfig` sized for ``task`` (vocabulary; ``n_ctx`` = max(128,
    the task's length)); paper sizes unless overridden."""
    n_ctx = max(128, task.n_ctx)
    return GPTJTaskConfig(**{"d_vocab": task.d_vocab, "n_ctx": n_ctx, **overrides})


class GPTJTaskModel(nn.Module):
    """A ``GPTJForCausalLM`` (``self.hf``) mapping token ids ``[batch, pos]`` to logits
    ``[batch, pos, d_vocab]`` (positions ``0..pos-1``, no BOS: the tasks have none)."""

    kind: ClassVar[str] = "gptj"

    def __init__(self, cfg: GPTJTaskConfig):
        super().__init__()
        from transformers import GPTJForCausalLM

        self.cfg = cfg
        hf_cfg = cfg.hf_config()
        with torch.random.fork_rng(devices=[]):  # the caller's global RNG stays untouched
            torch.manual_seed(cfg.seed)
            self.hf = GPTJForCausalLM(hf_cfg)
        self.hf.config._attn_implementation = "eager"

    @classmethod
    def from_config(cls, data: dict) -> "GPTJTaskModel":
        return cls(GPTJTaskConfig.from_dict(data))

    @property
    def device(self) -> torch.device:
        return next(self.parameters()).device

    def ensure_positions(self, n: int) -> None:
        """Make GPT-J's sin/cos table cover positions ``0..n-1`` (rebuilt with the same
        formula; a no-op when it already does). Works whether the table lives on each
        attention module (transformers <= 5.23) or on a shared rotary module (5.24+)."""
        from transformers.models.gptj.modeling_gptj import create_sinusoidal_positions

        for module in self.hf.modules():
            table = getattr(module, "embed_positions", None)
            if isinstance(table, Tensor) and table.shape[-2] < n:
                new = create_sinusoidal_positions(n, table.shape[-1])
                new = new.to(device=table.device, dtype=table.dtype).reshape(
                    *table.shape[:-2], n, table.shape[-1])
                module.embed_positions = new
                if hasattr(module, "max_positions"):
                    module.max_positions = n
        bridge = self.__dict__.get("_bridge")
        if bridge is not None and getattr(bridge.cfg, "n_ctx", n) < n:
            bridge.cfg.n_ctx = n          # lens-possym checks inputs against it

    def forward(self, tokens: Int[Tensor, "batch pos"]) -> Float[Tensor, "batch pos d_vocab"]:
        self.ensure_positions(tokens.shape[1])
        return self.hf(input_ids=tokens, use_cache=False).logits

    def bridge(self, n_positions: int | None = None) -> "TransformerBridge":
        """This model (same weights, shared) as a TransformerLens ``TransformerBridge``,
        ready for every lens-possym analysis; ``n_positions`` extends the sin/cos table
        first for inputs longer than ``cfg.n_ctx``.

        Built once and kept (booting a bridge wraps the Hugging Face modules in place, so
        a second boot would not find GPT-J's attention class); the bridge is not a
        submodule, so ``state_dict`` and ``parameters`` are unchanged."""

        self.hf.eval()
        bridge = self.__dict__.get("_bridge")
        if bridge is None:
            bridge = from_hf(self.hf, tiny_tokenizer(), name="gptj-task", device=self.device)
            self.__dict__["_bridge"] = bridge
        if n_positions is not None:
            self.ensure_positions(n_positions)
        return bridge

    def n_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def extra_repr(self) -> str:
        c = self.cfg
        return (f"{c.n_layers} layers × {c.n_heads} heads × {c.d_head}, rotary {c.rotary_dim}, "
                f"d_vocab {c.d_vocab}, {math.floor(self.n_parameters() / 1e3)}k params")
