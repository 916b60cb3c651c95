"""Where one paper B ``+levelled`` cell's CPU time goes, what the exact speed-ups of issue 42
saved, and what the options that change the numbers would save.

    cd benchmarks && OMP_NUM_THREADS=1 nice -n 5 python bench_paper_b_speed.py \
        [--task distance] [--label rope] [--variant intended] [--steps 60] \
        [--score-size 1024] [--compile]

One ``paper-length`` cell (one torch thread; CPU time of this process, which is what a
shared machine spends; compare figures from one run only):

1. a training step through the shared loop (``--steps`` steps after 3 warm-up ones), and its
   parts measured alone: the data (``task.sample`` of one batch; its split hash as the old
   column-by-column loop and as the vectorised form now in ``training/tasks.py``), forward +
   backward, gradient clipping, the AdamW step; one loop evaluation (1,024 sentences: in
   one pass as before, in passes of the preset's ``eval_batch`` now, checked identical) and
   one checkpoint write, spread over a base run's steps (8 evaluations and 5 checkpoints in
   4,800 steps) and an extension's (10 and 5 in 2,400);
2. the cell's scoring (:func:`lens_possym.papers.b.levelled.score_cell`, accuracy and 24
   single-head ablations) on ``--score-size`` sentences (the real size is 4,096: the cost
   is linear in it): as it was (a full forward pass per head under ``ablate_heads``) and
   now (``papers.b.deposit.single_head_ablations``), checked identical;
3. options that change the numbers (measured, not used): fused AdamW, three cells trained
   as one batch of 96 (what a vmapped ensemble of three cells costs at best), the
   written-out attention instead of the fused kernel, ``torch.compile`` (``--compile``);
   each timed in alternation with the step as it is (medians of 6 pairs), since the load
   of a shared machine moves a single timing by a quarter;
4. the ``+levelled`` grid's CPU-hours with the old and the new figures
   (``bench_paper_b_levelled.plan``, from the committed records).
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import statistics
import tempfile
import time
from pathlib import Path

import torch

from _timing import cost_clock
from bench_paper_b_levelled import plan
from lens_possym.interventions import ablate_heads
from lens_possym.papers import b as pb
from lens_possym.papers.b import levelled as lv
from lens_possym.training import tasks as core_tasks
from lens_possym.training.loop import TrainConfig, _param_groups, evaluate, train
from lens_possym.training.runs import save_checkpoint

CLOCK = cost_clock(torch.device("cpu"))


def per_call(fn, reps: int) -> float:
    """CPU seconds per call of ``fn`` (after one warm-up call)."""
    fn()
    start = CLOCK()
    for _ in range(reps):
        fn()
    return (CLOCK() - start) / reps


def paired(fn_a, fn_b, rounds: int = 6) -> tuple[float, float]:
    """Median CPU seconds per call of ``fn_a`` and ``fn_b``, timed in alternation (``rounds``
    pairs after a warm-up of each), so that a change in the machine's load hits both."""
    fn_a(), fn_b()
    a, b = [], []
    for _ in range(rounds):
        for fn, out in ((fn_a, a), (fn_b, b)):
            start = CLOCK()
            fn()
            out.append(CLOCK() - start)
    return statistics.median(a), statistics.median(b)


def horner_hash(tokens: torch.Tensor) -> torch.Tensor:
    """The split hash as it was: one pass per column."""
    prime, buckets = core_tasks._PRIME, core_tasks._HASH_BUCKETS
    h = torch.zeros(tokens.shape[0], dtype=torch.int64)
    for col in tokens.long().unbind(dim=1):
        h = (h * 1_000_003 + col + 1) % prime
    h = (h * 48_271) % prime
    return (h ^ (h >> 11)) % buckets


@torch.no_grad()
def score_reference(model, batch) -> dict:
    """``score_cell`` as it was: a full forward pass per head under ``ablate_heads``."""
    def correct():
        return torch.cat([model(batch.tokens[s: s + 512])[:, -1].argmax(-1)
                          == batch.answers[s: s + 512] for s in range(0, len(batch), 512)])
    clean = correct().double()
    n, shape = len(clean), (model.cfg.n_layers, model.cfg.n_heads)
    grid, se = torch.zeros(shape, dtype=torch.float64), torch.zeros(shape, dtype=torch.float64)
    for layer in range(shape[0]):
        for head in range(shape[1]):
            with ablate_heads(model, [(layer, head)], mode="zero"):
                ablated = correct().double()
            grid[layer, head] = ablated.mean()
            se[layer, head] = math.sqrt(float((clean - ablated).var(unbiased=False)) / n)
    p = float(clean.mean())
    return {"eval_size": n, "accuracy": p, "accuracy_se": math.sqrt(p * (1 - p) / n),
            "ablation_grid": grid.tolist(), "ablation_se": se.tolist()}


def fwd_bwd(model, batch) -> None:
    loss = torch.nn.functional.cross_entropy(model(batch.tokens)[:, -1], batch.answers)
    loss.backward()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--task", default="distance", choices=["distance", "count"])
    parser.add_argument("--label", default="rope")
    parser.add_argument("--variant", default="intended", choices=["intended", "faithful"])
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--score-size", type=int, default=1024)
    parser.add_argument("--compile", action="store_true")
    parser.add_argument("--records", default="../docs/paper_b_results.json")
    args = parser.parse_args()
    torch.set_num_threads(1)
    preset = pb.ENCODER_PRESETS["paper-length"]
    task = pb.preset_task(preset, args.task, 0)
    model = pb.make_model(preset, task, args.label, args.variant, 0)
    scheme = pb.parse_label(args.label)[0]
    bs = preset.batch_size_for(scheme)
    config = dict(batch_size=bs, lr=preset.lr, betas=preset.betas,
                  weight_decay=preset.weight_decay, eval_size=64, device="cpu")
    print(f"paper-length {args.task} {args.variant} {args.label}, batch {bs}, torch threads "
          f"{torch.get_num_threads()} (CPU-ms of this process)")

    # 1. the training step and its parts
    train(model, task, TrainConfig(steps=3, eval_every=3, **config))           # warm-up
    start = CLOCK()
    train(model, task, TrainConfig(steps=args.steps, eval_every=args.steps, **config))
    step = (CLOCK() - start) / args.steps
    gen = torch.Generator().manual_seed(0)
    data = per_call(lambda: task.sample(bs, split="train", generator=gen), 100)
    draw = task._generate(int(bs / 0.9 * 1.2) + 8, gen).tokens     # what one sample() hashes
    old_hash = per_call(lambda: horner_hash(draw), 200)
    new_hash = per_call(lambda: core_tasks._sequence_hash(draw), 200)
    assert torch.equal(horner_hash(draw), core_tasks._sequence_hash(draw))
    batch = task.sample(bs, generator=torch.Generator().manual_seed(1))
    model.train()
    compute = per_call(lambda: fwd_bwd(model, batch), 10)
    clip = per_call(lambda: torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0), 50)
    cfg = TrainConfig(**config)
    opts = {}
    for name, kw in (("AdamW", {}), ("AdamW fused", {"fused": True})):
        opt = torch.optim.AdamW(_param_groups(model, cfg), lr=1e-9, betas=preset.betas,
                                weight_decay=preset.weight_decay, **kw)
        opts[name] = per_call(opt.step, 50)
    loop_set = task.test_set(preset.eval_size)
    model.eval()
    evaluation_old = per_call(lambda: evaluate(model, task, loop_set), 1)
    evaluation = per_call(lambda: evaluate(model, task, loop_set,
                                           forward_batch=preset.eval_batch), 1)
    same_eval = (evaluate(model, task, loop_set).to_dict()
                 == evaluate(model, task, loop_set, forward_batch=preset.eval_batch).to_dict())
    if not same_eval:
        raise SystemExit("evaluating in pieces changed the accuracy or loss: not exact")
    folder = Path(tempfile.mkdtemp())
    checkpoint = per_call(lambda: save_checkpoint(model, task, folder / "c.pt", step=1), 3)
    base_extra = (8 * evaluation + 5 * checkpoint) / 4800
    ext_extra = (10 * evaluation + 5 * checkpoint) / 2400
    base_old = (8 * evaluation_old + 5 * checkpoint) / 4800
    ext_old = (10 * evaluation_old + 5 * checkpoint) / 2400
    print(f"training step through the loop: {1e3 * step:.1f} CPU-ms ({args.steps} steps); "
          f"measured alone: data {1e3 * data:.2f} (its split hash {1e3 * old_hash:.2f} as the "
          f"column loop, {1e3 * new_hash:.2f} vectorised, identical), forward+backward "
          f"{1e3 * compute:.1f}, clipping {1e3 * clip:.2f}, AdamW {1e3 * opts['AdamW']:.2f}")
    print(f"loop evaluation (1,024 sentences): {evaluation_old:.2f} CPU-s in one pass, "
          f"{evaluation:.2f} CPU-s in passes of {preset.eval_batch} (identical: {same_eval}); "
          f"checkpoint write {1e3 * checkpoint:.0f} CPU-ms; spread over the steps of a base "
          f"run {1e3 * base_old:.2f} -> {1e3 * base_extra:.2f} CPU-ms, of an extension "
          f"{1e3 * ext_old:.2f} -> {1e3 * ext_extra:.2f} CPU-ms")

    # 2. scoring, before and now
    model.eval()
    sentences = lv.scoring_batch(task, 0, size=args.score_size)
    start = CLOCK()
    before = score_reference(model, sentences)
    score_old = CLOCK() - start
    start = CLOCK()
    now = lv.score_cell(model, sentences)
    score_new = CLOCK() - start
    same = json.dumps(before) == json.dumps(now)
    scale = lv.SCORING_SIZE / args.score_size
    print(f"scoring on {args.score_size} sentences (x{scale:g} for the real "
          f"{lv.SCORING_SIZE}): before {score_old:.1f} CPU-s, now {score_new:.1f} CPU-s "
          f"({score_old / score_new:.2f}x), results identical: {same}")
    if not same:
        raise SystemExit("the scoring changed: the speed-up is not exact")

    # 3. options that change the numbers (not used)
    print(f"[changes numbers] fused AdamW: {1e3 * opts['AdamW fused']:.2f} CPU-ms per step "
          f"against {1e3 * opts['AdamW']:.2f} (parameters differ by ~1e-7 after 15 steps)")
    model.train()
    big = task.sample(3 * bs, generator=torch.Generator().manual_seed(2))
    parts = [big[i * bs: (i + 1) * bs] for i in range(3)]
    one, three = paired(lambda: [fwd_bwd(model, p) for p in parts], lambda: fwd_bwd(model, big))
    print(f"[changes numbers] three cells as one batch of {3 * bs}: {1e3 * three:.0f} CPU-ms "
          f"against {1e3 * one:.0f} for three batches of {bs} (timed in alternation; the most "
          f"a vmapped ensemble of three cells could save: {100 * (1 - three / one):.0f} %)")
    with torch.no_grad():
        eager = model(batch.tokens)[:, -1]
    listeners = []

    def written_out():
        # a listener on hook_pattern forces the written-out attention
        listeners.extend(block.attn.hook_pattern.register_forward_hook(lambda m, i, o: None)
                         for block in model.blocks)
        try:
            fwd_bwd(model, batch)
        finally:
            while listeners:
                listeners.pop().remove()
    fused, written = paired(lambda: fwd_bwd(model, batch), written_out)
    listeners.extend(block.attn.hook_pattern.register_forward_hook(lambda m, i, o: None)
                     for block in model.blocks)
    with torch.no_grad():
        diff = float((model(batch.tokens)[:, -1] - eager).abs().max())
    while listeners:
        listeners.pop().remove()
    print(f"[changes numbers] written-out attention: {1e3 * written:.1f} CPU-ms forward+"
          f"backward against {1e3 * fused:.1f} with the fused kernel (in alternation; logits "
          f"differ by up to {diff:.1e})")
    if args.compile:
        import logging

        torch._logging.set_logs(dynamo=logging.ERROR)       # its graph-break notes
        compiled = torch.compile(copy.deepcopy(model))
        start = CLOCK()
        fwd_bwd(compiled, batch)
        warm = CLOCK() - start
        plain, t_compiled = paired(lambda: fwd_bwd(model, batch),
                                   lambda: fwd_bwd(compiled, batch))
        with torch.no_grad():
            diff = float((compiled(batch.tokens)[:, -1] - eager).abs().max())
        print(f"[changes numbers] torch.compile: {1e3 * t_compiled:.1f} CPU-ms forward+backward "
              f"against {1e3 * plain:.1f} (in alternation) after {warm:.0f} CPU-s of "
              f"compiling (logits differ by up to {diff:.1e})")

    # 4. the grid's cost, before and now
    records = pb.as_dicts(pb.read_records(Path(args.records)))    # the file's "cells"
    hash_saving = old_hash - new_hash
    old = {"step": step + hash_saving, "eval": evaluation_old, "score": scale * score_old}
    new = {"step": step, "eval": evaluation, "score": scale * score_new}
    for name, t in (("before", old), ("now", new)):
        print(f"== +levelled grid, {name} (step {1e3 * t['step']:.1f} CPU-ms, scoring "
              f"{t['score']:.0f} CPU-s per cell)")
        for line in plan(t, records):
            print(line)


if __name__ == "__main__":
    main()
