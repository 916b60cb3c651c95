"""``lens-possym profile``: every head of a model on the positional-symbolic plane.

Writes ``DIR/scores.json`` (:class:`~lens_possym.scores.results.PosSymScores`), the
figures as PNGs and a self-contained ``DIR/report.html``, and prints a short summary.
"""

from __future__ import annotations

import shlex
import sys
import time
from pathlib import Path

from .. import _inputs, report, resolved, scores, tasks
from ..errors import UsageError
from ..scores.config import METHODS
from ._command import add_command
from ._model_args import add_model_args, load_from_args
from ._output import check_output_dir, staged_dir
from ._prompts import add_prompts_args, add_task_args, prompt_tokens
from ._score_args import add_score_args, score_config_from
from ._types import positive_int


HELP = "positional/symbolic scores of every head and frequency, with a report"
DESCRIPTION = ("Load a model offline, build prompts, score every attention head (and every RoPE "
               "frequency) as positional or symbolic by content swaps (paper A), and write "
               "scores.json, figures and report.html to --out.")


def register(sub) -> None:
    parser = add_command(sub, "profile", run, HELP, DESCRIPTION)
    add_model_args(parser)
    parser.add_argument("--task", choices=["binding", "random"], default=None,
                        help="binding prompts (entity-attribute; the default) or random word "
                        "tokens; not with --prompts")
    add_prompts_args(parser, "prompts of any lengths (grouped by length, no padding); the "
                     "scores are means over all of them")
    add_task_args(parser)
    parser.add_argument("--n-tokens", type=positive_int, default=64,
                        help="tokens per prompt (random)")
    parser.add_argument("--method", choices=METHODS, default="exact")
    add_score_args(parser)
    parser.add_argument("--keep-bos", action="store_true",
                        help="also swap position 0 (by default BOS is left out)")
    parser.add_argument("--no-report", action="store_true", help="only write scores.json")
    parser.add_argument("--out", default="profile", help="output folder (created)")


def _prompts(model, args):
    if args.prompts:
        rows = prompt_tokens(model, args.prompts, args.field)
        lengths = sorted({len(r) for r in rows})
        text = "".join(model.to_str_tokens(rows[0]))
        return rows, text, {"name": "prompts", "file": str(args.prompts), "n_prompts": len(rows),
                            "n_tokens": lengths[0] if len(lengths) == 1 else
                            f"{lengths[0]}-{lengths[-1]}"}
    if args.task in (None, "binding"):  # binding by default
        task = tasks.binding_task(model, n_prompts=args.n_prompts, n_pairs=args.n_pairs,
                                  seed=args.seed)
        result = tasks.evaluate_binding(model, task)
        info = {"name": "binding", "n_pairs": args.n_pairs, "seed": args.seed, **result.as_dict()}
        return task.tokens, task.prompts[0], info
    tokens = tasks.random_token_prompts(model, n_prompts=args.n_prompts, n_tokens=args.n_tokens,
                                  seed=args.seed)
    text = "".join(model.to_str_tokens(tokens[0]))
    return tokens, text, {"name": "random", "n_tokens": args.n_tokens, "seed": args.seed}


def run(args) -> int:
    start = time.perf_counter()
    if args.prompts and args.task is not None:
        raise UsageError(f"lens-possym profile: error: --task {args.task} builds prompts, and "
                         f"--prompts {args.prompts} gives them; pass one of the two")
    out = Path(args.out)
    check_output_dir(out)
    model = load_from_args(args)
    layers = args.layers  # text in the id grammar; swap_scores checks it against the model
    tokens, first_prompt, task = _prompts(model, args)
    mixed = isinstance(tokens, list)  # --prompts: one token tensor per prompt
    n_prompts = len(tokens)
    n_tokens = task["n_tokens"] if mixed else tokens.shape[1]
    what = (f"{n_prompts} prompts from {task['file']} ({n_tokens} tokens)" if mixed else
            f"{n_prompts} {task['name']} prompts of {n_tokens} tokens")
    print(f"{what}; scoring "
          f"{'all layers' if layers is None else f'layers {layers}'} ({args.method}, "
          f"{args.swap} swaps)", file=sys.stderr)
    config = score_config_from(args, method=args.method,
                               exclude_bos=False if args.keep_bos else "auto")
    geometry = resolved.resolve(model)  # once: every group of prompts below reads it
    if mixed:
        result = _scores_of_prompts(geometry, tokens, config, layers)
        tokens = tokens[0][None]  # the report's figures and views draw the first prompt
    else:
        result = scores.swap_scores(geometry, tokens, config, layers=layers, progress=True)
    result.task = task
    result.model_name = args.model
    with staged_dir(out) as stage:  # all of scores.json, figures and report, or none
        written = [result.save(stage / "scores.json")]
        if not args.no_report:
            figures = report.save_profile_figures(model, result, tokens, stage)
            written += list(figures.values())
            page = report.profile_report(model, result, tokens, command=command_line(args),
                                         prompt=first_prompt, figures=figures)
            written.append(page.save(stage / "report.html"))
    _print_summary(result, time.perf_counter() - start)
    print("wrote " + ", ".join(str(out / p.relative_to(stage)) for p in written))
    return 0


def _scores_of_prompts(geometry, rows: list, config, layers):
    """Scores of prompts of any lengths: each length's prompts as one batch, then the
    mean over all prompts (a prompt's scores do not depend on the others'). ``geometry``:
    the model, resolved once (:class:`~lens_possym.resolved.Resolved`)."""
    import torch

    groups: dict[int, list] = {}
    for row in rows:
        groups.setdefault(len(row), []).append(row)
    if len(groups) == 1:
        return scores.swap_scores(geometry, torch.stack(rows), config, layers=layers,
                                  progress=True)
    parts, angles = [], None
    for n, group in groups.items():
        print(f"  {len(group)} prompt(s) of {n} tokens ...", file=sys.stderr)
        per_prompt, angles, _ = scores.profile.per_prompt_scores(
            geometry, torch.stack(group), config, layers=layers)
        parts.append(per_prompt)
    joined = {name: None if parts[0][name] is None else torch.cat([p[name] for p in parts])
              for name in parts[0]}
    n_layers = int(angles.shape[0])
    return scores.profile.mean_over_prompts(
        joined, angles, config, layers=_inputs.as_layers(layers, n_layers),
        n_tokens=max(groups), model_name=str(geometry.model.cfg.model_name))


def command_line(args) -> str:
    """The command that reproduces this run, every option spelled out (for the report's
    header): rebuilt from the parsed ``args``, so it is right however ``main`` was called.

    Only the command's own options are written: the parser's bookkeeping (``func``, the
    list of ``commands``, ``--verbose``, ``--debug``) is not an option of the subcommand.
    A list (``--seeds 0,1`` parsed) is written back comma-separated, and a value that starts
    with ``-`` as ``--flag=value``, so that the command parses back to the same arguments."""
    words = ["lens-possym", args.command]
    for dest, value in vars(args).items():
        if dest in _NOT_OPTIONS or dest.startswith("_") or value is None or value is False:
            continue
        flag = "--" + dest.replace("_", "-")
        if isinstance(value, (list, tuple)):  # a type that parsed "0,1,2" into a list
            value = ",".join(str(v) for v in value)
        if value is True:
            words.append(flag)
        elif str(value).startswith("-"):
            words.append(f"{flag}={value}")
        else:
            words += [flag, str(value)]
    return " ".join(shlex.quote(w) for w in words)


#: ``args`` entries that are not options of a subcommand (set by ``build_parser``)
_NOT_OPTIONS = ("command", "func", "commands", "verbose", "debug")


def _print_top_heads(result, k: int = 5) -> None:
    """The most positional and most symbolic heads, ranked as the report ranks them (the
    score to two decimals, then the positional share)."""
    for by, what in (("pos", "positional"), ("sym", "symbolic")):
        rows = report.profile.heads_rows(result, by, k)
        tie = " (ties by positional share)" if result.positional_share is not None else ""
        print(f"most {what} heads{tie}: " + ", ".join(
            f"{r['head']} (s_POS {r['s_POS']:.2f}, s_SYM {r['s_SYM']:.2f}"
            + (f", positional share {r['positional_share']:.4f}"
               if "positional_share" in r else "") + ")" for r in rows))


def _print_summary(result, seconds: float) -> None:
    s = result.summary()
    task = s.get("task") or {}
    if "accuracy" in task:
        print(f"binding accuracy {task['accuracy']:.1%} (among the prompt's attributes "
              f"{task['candidate_accuracy']:.1%}), logit difference {task['logit_diff']:.2f}")
    if s["first_half_layers"]:
        print(f"median s_POS: layers {s['first_half_layers'][0]}-{s['first_half_layers'][1]} "
              f"{s['median_pos_first_half']:.2f}, layers {s['second_half_layers'][0]}-"
              f"{s['second_half_layers'][1]} {s['median_pos_second_half']:.2f}  "
              f"(s_SYM {s['median_sym_first_half']:.2f} / {s['median_sym_second_half']:.2f})")
    else:  # one layer scored: no halves to compare
        print(f"median s_POS {s['median_pos_second_half']:.2f}, s_SYM "
              f"{s['median_sym_second_half']:.2f} (layer {s['second_half_layers'][0]})")
    print(f"Pearson r(s_POS, s_SYM) over {s['n_heads_scored']} heads: {s['pearson_pos_sym']:.2f}")
    _print_top_heads(result)
    if "sym_low_minus_high_freq" in s:
        print(f"low- minus high-frequency third, mean over heads: s_SYM "
              f"{s['sym_low_minus_high_freq']:+.3f}, s_POS {s['pos_low_minus_high_freq']:+.3f}")
    print(f"done in {seconds:.0f} s")
