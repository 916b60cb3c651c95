"""Options shared by paper A's commands ``lens-possym train`` and ``lens-possym sweep``: the
canonical task, the toy model's frequencies, the training settings."""

from __future__ import annotations

import argparse

from ... import interventions, training
from ...plugins import non_negative_int, positive_float, positive_int


def add_task_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--task", required=True,
                        choices=["index", "retrieval", "partial-induction"])
    parser.add_argument("--length", type=positive_int, default=None,
                        help="Index: number of symbols before the marker (default 16); "
                        "Retrieval: number of pairs (default 8); partial induction: number of "
                        "pairs (default 16)")
    parser.add_argument("--vocab", type=positive_int, default=None,
                        help="Index: symbol alphabet (default 16); Retrieval / partial "
                        "induction: number of entities (default 8)")


def task_from_args(args):
    kwargs = {}
    if args.task == "index":
        if args.length is not None:
            kwargs["length"] = args.length
        if args.vocab is not None:
            kwargs["n_symbols"] = args.vocab
    else:
        if args.length is not None:
            kwargs["n_pairs"] = args.length
        if args.vocab is not None:
            kwargs["n_entities"] = args.vocab
    return training.make_task(args.task, **kwargs)


def add_toy_model_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--n-freqs", type=positive_int, default=16,
                        help="rotating frequency ids on the standard schedule (default 16); "
                        "the θ=0 tail is id N")
    parser.add_argument("--rope-base", type=positive_float, default=10000.0)


def toy_model_kwargs(args) -> dict:
    return {"n_freqs": args.n_freqs, "rope_base": args.rope_base}


def add_train_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--steps", type=positive_int, default=None,
                        help="optimiser steps (default 2000)")
    parser.add_argument("--batch-size", type=positive_int, default=None, help="default 128")
    parser.add_argument("--lr", type=positive_float, default=None,
                        help="AdamW learning rate (default 3e-2)")
    parser.add_argument("--eval-every", type=positive_int, default=None, help="default 250")
    parser.add_argument("--target-accuracy", type=float, default=None,
                        help="stop at the first evaluation reaching this test accuracy")
    parser.add_argument("--device", default="auto", help="auto (GPU if present), cpu, cuda")
    parser.add_argument("--verbose-train", action="store_true", help="print every evaluation")
    parser.add_argument("--threads", type=non_negative_int, default=1,
                        help="torch CPU threads for this command (default 1: toy models are too "
                        "small to gain from more, and extra threads slow down on a busy "
                        "machine); 0 keeps torch's default")


def train_config_from(args, **overrides):
    given = dict(steps=args.steps, batch_size=args.batch_size, lr=args.lr,
                 eval_every=args.eval_every, target_accuracy=args.target_accuracy)
    settings = {k: v for k, v in given.items() if v is not None}
    settings["device"] = args.device
    settings.update(overrides)
    return training.TrainConfig(**settings)


def parse_ids(text: str | None, config) -> list[int] | None:
    """Frequency ids written in the one id grammar (``"3"``, ``"16,4"``, ``"0:4,8"``,
    ``"low"``), checked against a toy model's ``config``; ``None``/``"all"`` → ``None``."""
    if text is None or text.strip().lower() == "all":
        return None
    return list(interventions.parse_freqs(text, config))
