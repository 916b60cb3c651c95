"""Per-head ablation importance on a real model: binding and word-distance prompts.

    python benchmarks/head_importance.py [--model gemma-3-270m] [--seed 0]
        [--binding-prompts 16] [--distance-prompts 32] [--heads-per-pass 16]
        [--probe] [--speed] [--no-docs]

Zero-ablates every query head alone (``lens_possym.interventions.head_importance``,
metric: logit difference of the answer against the prompt's other candidates) on

* the binding task (``lp.binding_task``, 4 entity-colour pairs, seed ``--seed``);
* the word-distance task (``lens_possym.tasks.word_distance_task``: 8 listed words, a cue
  of 2 of them, answer = the next word; seed ``--seed``),

then measures the accuracy with the top head removed, and with the top 3 removed together.
Writes ``docs/figures/head_importance_binding.png`` and ``..._distance.png``, the results
as JSON (``docs/figures/head_importance.json``), and the numbers table into
``docs/head_importance.md`` between its ``results`` markers (``--no-docs`` only prints).

``--probe`` first prints the baseline accuracy of every prompt variant tried for the
position-sensitive task (32 prompts each). ``--speed`` times the batched sweep against one
head per pass on the last 3 layers of the binding task.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import time
from pathlib import Path

import torch

import lens_possym as lp
from lens_possym.interventions import ImportanceBatch, ablate_heads, head_importance
from lens_possym.tasks import evaluate_word_distance, word_distance_task
from lens_possym.tasks.binding import single_token_words
from lens_possym.tasks.word_distance import DEFAULT_WORDS

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"


# ---- prompt variants tried for the position-sensitive task -------------------------------------


def _score_texts(model, texts: list[str], answers: list[str], candidates: list[list[str]]):
    """Accuracy (whole vocabulary) and among the candidates; the answer is the last token of
    prompt + answer."""
    rows = [model.to_tokens(t + a)[0] for t, a in zip(texts, answers)]
    if len({len(r) for r in rows}) > 1:
        return None
    tokens = torch.stack(rows)
    inputs, target = tokens[:, :-1], tokens[:, -1]
    tk = model.tokenizer
    cand = [[tk.encode(c, add_special_tokens=False)[-1] for c in cs] for cs in candidates]
    with torch.no_grad():
        last = model(inputs, logits_to_keep=1)[:, -1].float()
    acc = float((last.argmax(-1) == target).float().mean())
    cand_acc = sum(int(cs[int(last[b, cs].argmax())] == int(target[b]))
                   for b, cs in enumerate(cand)) / len(cand)
    chance = sum(1 / len(cs) for cs in cand) / len(cand)
    return acc, cand_acc, chance


def _variants(words: list[str]):
    def between(rng, shots=0):
        def one():
            ws = rng.sample(words, 6)
            i, j = sorted(rng.sample(range(6), 2))
            marked = " ".join(f"[{w}]" if k in (i, j) else w for k, w in enumerate(ws))
            return f"{marked} ->", f" {j - i - 1}", [f" {k}" for k in range(5)]
        return _with_shots(one, shots)

    def between_question(rng):
        ws = rng.sample(words, 6)
        i, j = sorted(rng.sample(range(6), 2))
        return (f"Words: {' '.join(ws)}\nQuestion: How many words are between {ws[i]} and "
                f"{ws[j]}?\nAnswer: ", str(j - i - 1), [str(k) for k in range(5)])

    def neighbour_question(rng, side):
        ws = rng.sample(words, 6)
        i = rng.randrange(1, 6) if side == "before" else rng.randrange(0, 5)
        a = ws[i - 1] if side == "before" else ws[i + 1]
        return (f"Words: {' '.join(ws)}\nQuestion: Which word comes right {side} {ws[i]}?\n"
                f"Answer:", " " + a, [" " + w for w in ws])

    def order(rng, shots=0):
        def one():
            ws = rng.sample(words, 6)
            i, j = sorted(rng.sample(range(6), 2))
            a, b = (ws[i], ws[j]) if rng.random() < 0.5 else (ws[j], ws[i])
            return (f"Words: {' '.join(ws)}\nQuestion: Which comes first in the list, {a} or "
                    f"{b}?\nAnswer:", " " + ws[i], [" " + a, " " + b])
        return _with_shots(one, shots)

    return {
        "how many words between X and Y? (question)": between_question,
        "words between two [bracketed] words (3 worked examples)": lambda rng: between(rng, 3),
        "which word comes right before X? (question)":
            lambda rng: neighbour_question(rng, "before"),
        "which word comes right after X? (question)": lambda rng: neighbour_question(rng, "after"),
        "which of X, Y comes first? (2 worked examples)": lambda rng: order(rng, 2),
    }


def _with_shots(one, shots: int):
    parts = [one() for _ in range(shots)]
    text, answer, cands = one()
    return "".join(t + a + "\n" for t, a, _ in parts) + text, answer, cands


def probe(model, seed: int) -> list[tuple[str, float, float, float]]:
    words = single_token_words(model.tokenizer, DEFAULT_WORDS, ["The list: {w} and more."])
    rows = []
    for name, make in _variants(words).items():
        rng = random.Random(seed)
        texts, answers, cands = zip(*(make(rng) for _ in range(32)))
        scored = _score_texts(model, list(texts), list(answers), list(cands))
        if scored:
            rows.append((name, *scored))
    for distance, n_cue in ((1, 1), (1, 2), (1, 3), (2, 2), (2, 3), (-1, 2), (-1, 3)):
        task = word_distance_task(model, n_prompts=32, distance=distance, n_cue=n_cue, seed=seed)
        r = evaluate_word_distance(model, task)
        rows.append((f"word_distance_task(distance={distance:+d}, n_cue={n_cue})",
                     r.accuracy, r.candidate_accuracy, r.chance))
    return rows


# ---- importance ----------------------------------------------------------------------------------


def accuracy_without(model, batch: ImportanceBatch, heads: str) -> float:
    with torch.no_grad(), ablate_heads(model, heads, "zero"):
        last = model(batch.tokens, logits_to_keep=1)[:, -1]
    return float((last.argmax(-1) == batch.answers).float().mean())


def sweep(model, name: str, batch: ImportanceBatch, per_pass: int, seed: int, description: str):
    result = head_importance(model, batch, "logit_diff", heads_per_pass=per_pass)
    result.info.update({"task": name, "seed": seed, "description": description})
    with torch.no_grad():
        last = model(batch.tokens, logits_to_keep=1)[:, -1]
    base_acc = float((last.argmax(-1) == batch.answers).float().mean())
    (layer, head), top3 = result.top_head, result.top(3)
    row = {
        "task": name, "description": description, "baseline_logit_diff": result.baseline,
        "baseline_accuracy": base_acc, "top_head": f"{layer}.{head}",
        "top_drop": float(result.importance[layer, head]), "top_relative": result.top_relative,
        "top_share": result.top_share, "top3_share": result.top_k_share, "gini": result.gini,
        "accuracy_without_top": accuracy_without(model, batch, f"{layer}.{head}"),
        "top3": ",".join(f"{l}.{h}" for l, h, _ in top3),
        "accuracy_without_top3": accuracy_without(
            model, batch, ",".join(f"{l}.{h}" for l, h, _ in top3)),
        "carried_by_one_head": result.carried_by_one_head(),
        "seconds": result.seconds, "passes": result.n_passes,
    }
    return result, row


def figure(result, path: Path, title: str) -> None:
    from matplotlib.figure import Figure

    from lens_possym.viz.importance import plot_head_importance

    n_layers, n_heads = result.ablated.shape
    fig = Figure(figsize=(2.4 + 0.7 * n_heads, 1.8 + 0.3 * n_layers), constrained_layout=True)
    plot_head_importance(result, ax=fig.subplots(), title=title)
    fig.savefig(path, dpi=120)


def markdown(rows, probe_rows, speed, args, seconds: float) -> str:
    lines = [f"Measured by `python benchmarks/head_importance.py{' --probe' if probe_rows else ''}"
             f"{' --speed' if speed else ''}` (model {args.model}, seed {args.seed}, zero "
             f"ablation, metric: logit difference; {seconds:.0f} s in all on a shared 2-core "
             "CPU).", "",
             "| task | prompts | baseline acc. / logit diff | top head | its drop (share of "
             "baseline) | top share | top-3 share | Gini | acc. without top head | acc. without "
             "top 3 | one head carries it? |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(
            f"| {r['task']} | {r['description']} | {r['baseline_accuracy']:.2f} / "
            f"{r['baseline_logit_diff']:.2f} | {r['top_head']} | {r['top_drop']:+.2f} "
            f"({100 * r['top_relative']:.0f}%) | {r['top_share']:.2f} | {r['top3_share']:.2f} "
            f"| {r['gini']:.2f} | {r['accuracy_without_top']:.2f} | "
            f"{r['accuracy_without_top3']:.2f} ({r['top3']}) | "
            f"{'yes' if r['carried_by_one_head'] else 'no'} |")
    lines.append("")
    lines.append("Sweep time: " + "; ".join(f"{r['task']} {r['seconds']:.0f} s in {r['passes']} "
                                            "passes" for r in rows) + ".")
    if probe_rows:
        lines += ["", "| prompt variant (32 prompts) | accuracy | among candidates | chance |",
                  "|---|---|---|---|"]
        lines += [f"| {n} | {a:.2f} | {c:.2f} | {ch:.2f} |" for n, a, c, ch in probe_rows]
    if speed:
        lines += ["", f"Batching (binding task, last 3 layers = {speed['heads']} heads): one head "
                  f"per pass {speed['one']:.1f} s, {speed['per_pass']} heads per pass "
                  f"{speed['batched']:.1f} s ({speed['one'] / speed['batched']:.1f}x); results "
                  f"agree to {speed['max_diff']:.1e}."]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="gemma-3-270m")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--binding-prompts", type=int, default=16)
    parser.add_argument("--distance-prompts", type=int, default=32)
    parser.add_argument("--heads-per-pass", type=int, default=16)
    parser.add_argument("--probe", action="store_true")
    parser.add_argument("--speed", action="store_true")
    parser.add_argument("--no-docs", action="store_true")
    args = parser.parse_args()

    start = time.perf_counter()
    model = lp.load_model(args.model)
    probe_rows = []
    if args.probe:
        probe_rows = probe(model, args.seed)
        for row in probe_rows:
            print(f"{row[0]:<58} acc {row[1]:.2f}  among candidates {row[2]:.2f}  "
                  f"chance {row[3]:.2f}")

    binding = lp.binding_task(model, n_prompts=args.binding_prompts, n_pairs=4, seed=args.seed)
    distance = word_distance_task(model, n_prompts=args.distance_prompts, seed=args.seed)
    tasks = {
        "binding": (ImportanceBatch.from_binding(binding),
                    f"{binding.n_prompts} × {binding.tokens.shape[1]} tokens, 4 pairs"),
        "distance": (distance.importance_batch(),
                     f"{distance.n_prompts} × {distance.tokens.shape[1]} tokens, 8 words, cue 2, "
                     f"distance +1"),
    }
    rows, results = [], {}
    for name, (batch, description) in tasks.items():
        result, row = sweep(model, name, batch, args.heads_per_pass, args.seed, description)
        results[name], rows = result, rows + [row]
        print(f"{name}: {result.describe()} ({result.seconds:.0f} s, {result.n_passes} passes)")
        print(f"  accuracy {row['baseline_accuracy']:.2f} -> {row['accuracy_without_top']:.2f} "
              f"without {row['top_head']}, {row['accuracy_without_top3']:.2f} without "
              f"{row['top3']}")

    speed = None
    if args.speed:
        batch = tasks["binding"][0]
        last3 = list(range(model.cfg.n_layers - 3, model.cfg.n_layers))
        one = head_importance(model, batch, "logit_diff", heads_per_pass=1, layers=last3)
        many = head_importance(model, batch, "logit_diff", heads_per_pass=args.heads_per_pass,
                               layers=last3)
        diff = float((one.ablated[last3] - many.ablated[last3]).abs().max())
        speed = {"heads": 3 * model.cfg.n_heads, "one": one.seconds, "batched": many.seconds,
                 "per_pass": args.heads_per_pass, "max_diff": diff}
        print(f"speed: one head per pass {one.seconds:.1f} s, {args.heads_per_pass} per pass "
              f"{many.seconds:.1f} s, max difference {diff:.1e}")

    seconds = time.perf_counter() - start
    table = markdown(rows, probe_rows, speed, args, seconds)
    print(table)
    if args.no_docs:
        return
    figures = DOCS / "figures"
    figures.mkdir(parents=True, exist_ok=True)
    for name, result in results.items():
        figure(result, figures / f"head_importance_{name}.png", f"{args.model}, {name} task")
    (figures / "head_importance.json").write_text(json.dumps(
        {name: r.to_dict() for name, r in results.items()}, indent=1, allow_nan=False))
    page = DOCS / "head_importance.md"
    text = page.read_text()
    pattern = re.compile(r"(<!-- results:start -->\n).*?(\n<!-- results:end -->)", re.S)
    if not pattern.search(text):
        raise SystemExit(f"{page} has no <!-- results:start/end --> markers")
    page.write_text(pattern.sub(lambda m: m.group(1) + table + m.group(2), text))
    print(f"wrote {figures}/head_importance_*.png, head_importance.json and the table in {page}")


if __name__ == "__main__":
    main()
