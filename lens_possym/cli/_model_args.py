"""``--model`` and ``--device``, shared by the subcommands that analyse a language model."""

from __future__ import annotations

import argparse
import sys


def add_model_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", default="gemma-3-270m",
                        help="a known model name (see `lens-possym models`), or tiny-<family> "
                        "for a tiny random model (llama, qwen2, gemma3, neox, gptj; for trying "
                        "a command quickly)")
    parser.add_argument("--device", default="auto",
                        help="auto (a CUDA GPU when there is one, else the CPU), cpu, cuda, "
                        "cuda:N (default auto)")


def load_from_args(args):
    """The model ``--model`` names, on ``--device``; says which device on stderr."""
    from ..models import TINY_FAMILIES, load_model, tiny_model
    from .._inputs import resolve_device

    device = resolve_device(args.device)
    print(f"loading {args.model} on {device} ...", file=sys.stderr)
    if args.model.startswith("tiny-") and args.model[5:] in TINY_FAMILIES:
        return tiny_model(args.model[5:], device=device)
    return load_model(args.model, device=device)
