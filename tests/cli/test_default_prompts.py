"""One default prompt set per task: ``profile``, ``heads``, ``ablate`` and ``patch`` build
the same prompts (the same pairs and seed) unless told otherwise, and say so in --help."""

from __future__ import annotations

import torch

import lens_possym as lp
from lens_possym.cli import ablate, build_parser, heads, patch, profile
from lens_possym.cli._prompts import TASK_DEFAULTS


def _args(command: str, *extra: str):
    return build_parser().parse_args([command, "--model", "tiny-llama", *extra])


def test_the_four_commands_use_the_same_binding_prompts_by_default():
    model = lp.tiny_model("llama")
    by_profile = profile._prompts(model, _args("profile"))[0]
    by_heads = heads._batch(_args("heads"), model, TASK_DEFAULTS["seed"],
                            TASK_DEFAULTS["n_prompts"])[0].tokens
    by_ablate = ablate._task(model, _args("ablate", "--heads", "0.0"))[0]
    by_patch = patch.pairs_from_args(model, _args("patch")).clean_tokens
    assert by_profile.shape == (TASK_DEFAULTS["n_prompts"], by_profile.shape[1])
    for other in (by_heads, by_ablate, by_patch):
        assert torch.equal(other, by_profile)


def test_heads_and_patch_use_the_same_distance_prompts_by_default():
    model = lp.tiny_model("llama")  # its tokenizer has few one-token words: a short list
    args = _args("heads", "--task", "distance", "--n-words", "4")
    by_heads = heads._batch(args, model, args.seed, args.n_prompts)[0].tokens
    by_patch = patch.pairs_from_args(model, _args("patch", "--task", "distance", "--n-words",
                                         "4")).clean_tokens
    assert torch.equal(by_heads, by_patch)


def test_the_defaults_are_the_same_and_stated_in_help():
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command").choices
    for command in ("profile", "heads", "ablate", "patch"):
        args = parser.parse_args([command])
        for name in ("n_prompts", "n_pairs", "seed") + (
                ("distance", "n_words", "n_cue") if command in ("heads", "patch") else ()):
            assert getattr(args, name) == TASK_DEFAULTS[name], (command, name)
        assert "same prompts in profile, heads, ablate and patch" in " ".join(
            sub[command].format_help().split())
