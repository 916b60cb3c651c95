"""``--model``, ``--dtype`` and ``--device``, shared by the subcommands that analyse a
language model."""

from __future__ import annotations

import argparse
import logging
import sys
import time
from typing import TYPE_CHECKING

from .. import _inputs, models

if TYPE_CHECKING:
    from ..typing import HookedModel

logger = logging.getLogger(__name__)

#: ``--dtype`` values and the torch dtypes they name
DTYPES = ("float32", "bfloat16", "float16", "float64")


def add_model_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", default="gemma-3-270m",
                        help="a known model name (see `lens-possym models`), the path of a "
                        ".gguf file or of a Hugging Face folder (config.json, weights and "
                        "tokenizer, as save_pretrained writes them; read offline), a "
                        "Hugging Face hub id (e.g. gpt2) whose files are in the local Hugging "
                        "Face cache (never downloaded), or "
                        "tiny-<family> for a tiny random model (llama, qwen2, gemma3, neox, "
                        "gptj; for trying a command quickly)")
    parser.add_argument("--dtype", choices=DTYPES, default="float32",
                        help="the weights' dtype (default float32; bfloat16 and float16 work "
                        "throughout, within the bounds of docs/families.md; a model whose "
                        "activations overflow the dtype, e.g. gemma-3-270m in float16, is "
                        "refused at load)")
    parser.add_argument("--device", default="auto",
                        help="auto (a CUDA GPU when there is one, else the CPU), cpu, cuda, "
                        "cuda:N (default auto)")


def load_from_args(args: argparse.Namespace) -> "HookedModel":
    """The model ``--model`` names, in ``--dtype`` on ``--device``; says which on stderr."""
    import torch

    device = _inputs.resolve_device(args.device)
    dtype = getattr(torch, getattr(args, "dtype", "float32"))
    print(f"loading {args.model} on {device} ...", file=sys.stderr)
    start = time.perf_counter()
    if args.model.startswith("tiny-") and args.model[5:] in models.TINY_FAMILIES:
        model = models.tiny_model(args.model[5:], device=device, dtype=dtype)
    else:
        model = models.load_model(args.model, device=device, dtype=dtype)
    cfg = model.cfg
    logger.info("loaded %s in %.1f s: %s layers × %s heads (%s KV heads), d_model %s, d_head "
                "%s, %s on %s", args.model, time.perf_counter() - start, cfg.n_layers,
                cfg.n_heads, getattr(cfg, "n_key_value_heads", None) or cfg.n_heads,
                cfg.d_model, cfg.d_head, str(dtype).replace("torch.", ""), device)
    return model
