"""Why Letter fails at length: one setting at a time from a base preset, with the
toolkit's own instruments tracked over training (issue 22, Build item 4).

    lens-possym paper-c ablate-settings                      # cpu base, Letter
    lens-possym paper-c ablate-settings --variants base dropout --tasks letter
    lens-possym paper-c ablate-settings --base tiny --track-every 20   # a dry run

Variants (:func:`variants`), each the base with exactly one setting changed to the `paper`
preset's value (scaled for another base):

========== =========================================================================
``base``        the base preset as it is (``cpu``: d_model 64, no dropout, lr 1e-3,
                cosine, warm-up 100, 2,000 steps)
``dropout``     dropout 0.1
``width``       d_model and d_mlp doubled (cpu: 128 / 512, the paper's width)
``lr_schedule`` the paper's optimiser: lr / 10, betas (0.95, 0.999), warm-up × 7.5,
                linear decay to 0 (cpu: 1e-4, warm-up 750)
``steps``       3.5 × the steps (cpu: 7,000), the schedule stretched with them
========== =========================================================================

At every ``--track-every`` steps (and the last) of each run the script measures, on the
checkpoint there: accuracy at ``--lengths`` (headline filler reading, 256 prompts, seed
11); the **masking diagnostic** (:func:`lens_possym.papers.c.masking.extension_accuracy`:
the extra tokens hidden from layers 0-3, and at trained-range position ids) at
``--mask-lengths``; and the **early heads' top-2 logit gaps** (layers 0-3, Lemma F.1's
min and the mean over 64 inputs, :func:`lens_possym.papers.c.discrepancy.layer_gaps`) at
17 and the longest mask length. Runs go to ``--out``/runs (resumable), every measurement to
``--out``/cache (one file per (run, step), so the command resumes), the table to stdout and
``--out``/summary.json (and ``--record``: the committed record the report reads,
docs/paper_c_ablate.json). Everything on one CPU thread unless ``--threads`` says otherwise.

The ``base`` variant is the base preset's own run: when ``--preset-runs`` (default
``$PAPER_C_RUNS`` or ``out/paper_c/runs``, where ``lens-possym paper-c train`` writes) holds a
finished ``{task}-{base}-s{seed}`` run trained with exactly the variant's model, task and
training settings, that run is read instead of training it again (the command says so;
anything that differs, and it trains its own).
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...training.loop import TrainConfig, train
from ...training.runs import checkpoint_paths, latest_checkpoint, read_checkpoint
from ...training.tasks import make_task
from .discrepancy import layer_gaps
from .gptj import GPTJTaskConfig, GPTJTaskModel
from .lengths import accuracy_by_length
from .masking import extension_accuracy
from .presets import preset

__all__ = ["OUT", "VARIANTS", "Variant", "variants", "settings", "track", "same_run",
           "run_variant", "format_row", "command_line", "run"]

#: the default output folder (relative to the working directory)
OUT = Path("out") / "paper_c" / "ablate"
VARIANTS = ("base", "dropout", "width", "lr_schedule", "steps")


@dataclass(frozen=True)
class Variant:
    name: str
    model: dict
    train: dict


def variants(base: str) -> dict[str, Variant]:
    """The base preset and each one-setting change (module docstring)."""
    p = preset(base)
    m, t = p.model, p.train
    return {
        "base": Variant("base", {}, {}),
        "dropout": Variant("dropout", {"dropout": 0.1}, {}),
        "width": Variant("width", {"d_model": 2 * m["d_model"],
                                   "d_mlp": 2 * (m.get("d_mlp") or 4 * m["d_model"])}, {}),
        "lr_schedule": Variant("lr_schedule", {}, {
            "lr": t["lr"] / 10, "betas": (0.95, 0.999),
            "warmup_steps": int(round(t.get("warmup_steps", 100) * 7.5)),
            "schedule": "linear", "min_lr_ratio": 0.0}),
        "steps": Variant("steps", {}, {"steps": int(round(t["steps"] * 3.5))}),
    }


def settings(base: str, name: str, task_name: str, seed: int,
             out_dir: Path) -> tuple[GPTJTaskModel, Any, TrainConfig]:
    """``(model, task, TrainConfig)`` of one variant's run."""
    p, v = preset(base), variants(base)[name]
    task = make_task(task_name, seed=seed, **p.task.get(task_name, {}))
    model = GPTJTaskModel(GPTJTaskConfig(d_vocab=task.d_vocab, n_ctx=max(128, task.n_ctx),
                                         seed=seed, **{**p.model, **v.model}))
    config = TrainConfig(seed=seed, out_dir=str(out_dir), device="cpu", **{**p.train, **v.train})
    return model, task, config


def say(*parts) -> None:
    print(*parts, flush=True)


def cached(path: Path, compute):
    if path.is_file():
        return json.loads(path.read_text())
    value = compute()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(value, indent=1))
    return value


def track(model, task, args) -> dict:
    """The diagnostics on one checkpoint's model (module docstring)."""
    early = list(range(min(4, model.cfg.n_layers)))
    acc = accuracy_by_length(model, task, args.lengths, n_prompts=args.n_prompts, seed=11)
    mask = extension_accuracy(model, task, args.mask_lengths, layers=early,
                              n_prompts=args.n_prompts, seed=11)
    longest = max(args.mask_lengths)
    gaps = layer_gaps(model.bridge(n_positions=longest), task, [17, longest], layers=early,
                      n_inputs=args.gap_inputs, seed=5)
    return {"lengths": dict(zip(map(str, acc.lengths), acc.accuracy)),
            "by_hops": dict(zip(map(str, acc.lengths), acc.by_hops)),
            "masking": mask.accuracy, "mask_lengths": mask.lengths,
            "gap_lengths": gaps.lengths,
            "gap_min": [[float(gaps.min[i, layer, 0]) for layer in early] for i in range(2)],
            "gap_mean": [[float(gaps.mean[i, layer, 0]) for layer in early] for i in range(2)]}


def same_run(folder: Path, model, task, config) -> bool:
    """Whether ``folder`` is a finished run of exactly these settings (its last checkpoint
    differs in nothing the training loop would refuse to resume with)."""
    found = checkpoint_paths(folder) if (folder / "model.pt").is_file() else []
    return bool(found) and not read_checkpoint(found[-1][1]).differs_from(model, task, config)


def run_variant(name: str, task_name: str, args) -> list[dict]:
    run = f"{task_name}-{args.base}-{name}-s{args.seed}"
    out_dir = args.out / "runs" / run
    model, task, config = settings(args.base, name, task_name, args.seed, out_dir)
    own = args.preset_runs / f"{task_name}-{args.base}-s{args.seed}"
    if name == "base" and same_run(own, model, task, config):
        say(f"[{run}] the {args.base} preset's own run, read from {own}")
        out_dir = own
    elif (out_dir / "model.pt").is_file():
        say(f"[{run}] trained")
    else:
        start = time.perf_counter()
        result = train(model, task, config, resume=latest_checkpoint(out_dir) is not None,
                       log=lambda line: say(f"  {run}: {line}"))
        say(f"[{run}] {result.steps_run} steps, test accuracy {result.test_accuracy:.4f}, "
            f"{time.perf_counter() - start:.0f} s")
    found = checkpoint_paths(out_dir)
    last = found[-1][0]
    rows = []
    for step, path in found:
        if step % args.track_every and step != last:
            continue
        def compute(path=path, step=step):
            ckpt = read_checkpoint(path)
            return {"run": run, "variant": name, "task": task_name, "step": step,
                    **track(ckpt.model(), ckpt.make_task(), args)}
        row = cached(args.out / "cache" / run / f"step_{step:06d}.json", compute)
        rows.append(row)
        say(format_row(row))
    return rows


def format_row(row: dict) -> str:
    lengths = ", ".join(f"{n}: {a:.2f}" for n, a in row["lengths"].items())
    mask = "; ".join(f"{n}: mask {row['masking']['mask'][i]:.2f} pos "
                     f"{row['masking']['positions'][i]:.2f}"
                     for i, n in enumerate(row["mask_lengths"]))
    gaps = " / ".join(f"{n}: " + ",".join(f"{g:.2f}" for g in row["gap_min"][i])
                      for i, n in enumerate(row["gap_lengths"]))
    return (f"  {row['variant']:<11} step {row['step']:>5}  acc {lengths}  |  {mask}  |  "
            f"early min gaps {gaps}")


def command_line(args: argparse.Namespace) -> str:
    """The command that measures what ``args`` measure (every setting spelt out; where the
    outputs go left out, but for ``--record``)."""
    text = (f"lens-possym paper-c ablate-settings --base {args.base} --variants "
            f"{' '.join(args.variants)} --tasks {' '.join(args.tasks)} --seed {args.seed} "
            f"--track-every {args.track_every} --lengths {' '.join(map(str, args.lengths))} "
            f"--mask-lengths {' '.join(map(str, args.mask_lengths))} --n-prompts "
            f"{args.n_prompts} --gap-inputs {args.gap_inputs}")
    return text + (f" --record {args.record}" if args.record else "")


def run(args: argparse.Namespace) -> list[dict]:
    """Every variant of ``args.variants`` for every task of ``args.tasks``: trained (or
    read), tracked, and summarised into ``args.out``/summary.json (and ``args.record``);
    returns the tracked rows."""
    args.out, args.preset_runs = Path(args.out), Path(args.preset_runs)
    rows = []
    for task_name in args.tasks:
        for name in args.variants:
            rows += run_variant(name, task_name, args)
    summary = json.dumps({
        "command": command_line(args),
        "base": args.base, "seed": args.seed, "n_prompts": args.n_prompts,
        "variants": {n: {"model": v.model, "train": v.train}
                     for n, v in variants(args.base).items() if n in args.variants},
        "rows": rows}, indent=1)
    args.out.mkdir(parents=True, exist_ok=True)
    for path in filter(None, (args.out / "summary.json", args.record)):
        Path(path).write_text(summary + "\n")
        say(f"wrote {path}")
    return rows
