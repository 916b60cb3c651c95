"""``lens-possym multihop``: paper C's Number and Letter tasks on GPT-J.

    lens-possym multihop train --task letter --preset cpu --out runs/letter   # resumable
    lens-possym multihop dynamics runs/letter --gamma 0.1
    lens-possym multihop lengths runs/letter --lengths 17,100,300 --filler repeat
    lens-possym multihop discrepancy --theta 0.8 --lengths 17,100,850
"""

from __future__ import annotations

import json
from pathlib import Path

from ... import training
from ...plugins import (
    add_command, check_output_dir, checked_number, non_negative_int, positive_float, positive_int,
    positive_int_list, with_threads,
)
from ...errors import TrainingError
from . import discrepancy, dynamics, lengths, presets


#: tasks.FILLERS without importing torch for --help (a test keeps them equal)
FILLER_CHOICES = ("target", "answer", "duplicates", "pretarget", "mixed", "repeat", "reach")


def _gamma(text: str) -> float:
    return checked_number(text, float, lambda v: 0 < v < 0.5, "a number in (0, 0.5)")


def register(sub) -> None:
    parser = sub.add_parser(
        "multihop",
        help="paper C: train GPT-J on Number/Letter, scores over training, lengths, discrepancy",
        description="Paper C's multi-hop experiments: train a GPT-J (transformers' "
        "GPTJForCausalLM) on the Number or Letter task with checkpoints, score every head at "
        "every checkpoint, measure length generalisation and the discrepancy of T_Index.",
    )
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")

    train = add_command(actions, "train", run_train, "train (or resume) one run",
                        "Train GPT-J on a multi-hop task; checkpoints go to --out and a run "
                        "that stopped resumes from its last one.")
    train.add_argument("--task", required=True, choices=["number", "letter"])
    train.add_argument("--preset", default="cpu", choices=["cpu", "paper", "tiny"])
    train.add_argument("--steps", type=positive_int, default=None,
                       help="override the preset's steps")
    train.add_argument("--seed", type=int, default=0, help="weights, data and test-set seed")
    train.add_argument("--device", default="auto")
    train.add_argument("--out", required=True, metavar="DIR")
    _threads(train)

    dyn = add_command(actions, "dynamics", run_dynamics, "scores, entropy and accuracy per hop "
                      "at every checkpoint; pure heads")
    dyn.add_argument("run", metavar="RUN_DIR")
    dyn.add_argument("--prompts", type=positive_int, default=100)
    dyn.add_argument("--gamma", type=_gamma, default=0.1,
                     help="purity threshold γ in (0, 0.5): pure when one score >= 1-γ and "
                     "the other <= γ")
    dyn.add_argument("--method", choices=["exact", "rerun"], default="exact")
    dyn.add_argument("--json", metavar="FILE", default=None, help="also write the trajectory")
    _threads(dyn)

    by_length = add_command(actions, "lengths", run_lengths,
                            "accuracy against length (extra target tokens)")
    by_length.add_argument("run", metavar="RUN_DIR")
    by_length.add_argument("--lengths", type=positive_int_list, default=[17, 50, 100, 300],
                           help="input lengths, comma-separated (default 17,50,100,300)")
    by_length.add_argument("--prompts", type=positive_int, default=256)
    by_length.add_argument("--filler", choices=FILLER_CHOICES, default=None,
                           help="what the extra tokens are (default: the run's task's, 'target')")
    _threads(by_length)

    disc = add_command(actions, "discrepancy", run_discrepancy,
                       "T_Index's discrepancy against Theorem 3.2")
    disc.add_argument("--theta", type=positive_float, default=0.8)
    disc.add_argument("--lengths", type=positive_int_list, default=[8, 17, 50, 100, 300, 850],
                      help="lengths n, comma-separated (default 8,17,50,100,300,850)")


def _threads(parser) -> None:
    parser.add_argument("--threads", type=non_negative_int, default=1,
                        help="torch CPU threads (default 1; 0 = torch's default)")


@with_threads
def run_train(args) -> int:
    check_output_dir(args.out)
    overrides = {} if args.steps is None else {"steps": args.steps}
    model, task, result = presets.train_multihop(args.task, args.preset, seed=args.seed,
                                         out_dir=args.out, device=args.device, log=print,
                                         **overrides)
    print(f"task: {task.describe()}")
    print(f"model: {model.extra_repr()}")
    print(f"test accuracy {result.test_accuracy:.4f} after {result.steps_run} steps "
          f"({result.train_time_s:.1f} s); checkpoints in {args.out}")
    return 0


@with_threads
def run_dynamics(args) -> int:
    traj = dynamics.score_run(args.run, n_prompts=args.prompts, method=args.method)
    for i, step in enumerate(traj.steps):
        hops = " ".join(f"{h + 1}:{a:.2f}" for h, a in enumerate(traj.accuracy_by_hops[i]))
        pos = " ".join(f"{float(x):.2f}" for x in traj.pos[i, :, 0])
        sym = " ".join(f"{float(x):.2f}" for x in traj.sym[i, :, 0])
        print(f"step {step:>6}  acc {traj.accuracy[i]:.3f}  by hops {hops}\n"
              f"    s_POS {pos}\n    s_SYM {sym}")
    p = dynamics.purity(traj.pos, traj.sym, traj.steps, args.gamma)
    print(f"pure heads (γ={args.gamma}): positional in layers {p.layers_of('positional')}, "
          f"symbolic in layers {p.layers_of('symbolic')}")
    print(f"scores of {len(traj.steps)} checkpoints ({args.method}, {traj.n_prompts} prompts): "
          f"{traj.score_seconds:.1f} s")
    if args.json:
        Path(args.json).write_text(json.dumps({**traj.to_dict(), "purity": p.to_dict()}))
        print(f"wrote {args.json}")
    return 0


@with_threads
def run_lengths(args) -> int:
    found = training.latest_checkpoint(args.run)
    if found is None:
        raise TrainingError(f"no checkpoint in {args.run}; train one with "
                            "'lens-possym multihop train'")
    ckpt = training.read_checkpoint(found)
    result = lengths.accuracy_by_length(ckpt.model(), ckpt.make_task(), args.lengths,
                                n_prompts=args.prompts, filler=args.filler)
    print(f"extra tokens: {result.filler}")
    for n, acc, hops in zip(result.lengths, result.accuracy, result.by_hops):
        print(f"length {n:>5}: accuracy {acc:.3f}  by hops "
              + " ".join(f"{h + 1}:{a:.2f}" for h, a in enumerate(hops)))
    return 0


def run_discrepancy(args) -> int:
    print(f"T_Index, θ = {args.theta}: discrepancy over every 1-hop input of length n")
    print("|     n | Δ max (Def 3.1) | Δ min (Lemma F.1) | min{1-cos θ, 2π²/n²} |")
    print("|------:|----------------:|------------------:|---------------------:|")
    for r in discrepancy.index_bound_table(args.theta, args.lengths):
        print(f"| {r['n']:>5} | {r['delta_max']:.3e}{' ' if r['max_holds'] else '*'}      | "
              f"{r['delta_min']:.3e}{' ' if r['min_holds'] else '*'}        | "
              f"{r['bound']:.3e}            |")
    print("* above the bound")
    return 0
