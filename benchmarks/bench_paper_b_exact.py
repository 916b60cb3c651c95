"""Is paper B's levelled pipeline computing what it computed before a change? Two small
``+levelled`` cells trained and scored in one tree, their results printed as one digest to
compare with another tree's.

    OMP_NUM_THREADS=1 nice -n 5 python benchmarks/bench_paper_b_exact.py OUT [--json FILE]

Runs :func:`lens_possym.papers.b.levelled.analyse_levelled` on the ``cpu`` preset cut to 40
steps (faithful RoPE on distance, intended MLA on count, seed 1; extensions of 40 steps up to
120, never levelled off; 700 scoring sentences) into the folder ``OUT``, and prints the
sha256 of everything it computed: the loop's evaluation history, the scoring (accuracy,
24-head grid, standard errors), the deposit summary, the levelling summary, and the
parameters of every saved model. Wall times are left out, and so is the probe's held-out
``r2``: its float64 least squares (``torch.linalg.lstsq``) changes in the last bit with the
memory alignment of its input (the same model and sentences give either of two values
depending on what was allocated before), so no code change can keep it.

To compare two commits, run this file (from either tree) with each tree on ``PYTHONPATH``
(``git worktree add --detach /tmp/old <commit>``): equal digests, equal computations.
"""

from __future__ import annotations

import argparse
import hashlib
import json
from dataclasses import replace
from pathlib import Path

import torch

from lens_possym.papers.b import levelled as lv
from lens_possym.papers.b.cells import Cell
from lens_possym.papers.b.presets import ENCODER_PRESETS, with_steps

CELLS = (Cell("distance", "rope", "faithful", 1), Cell("count", "mla", "intended", 1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("out", help="an empty folder for the runs")
    parser.add_argument("--json", default=None, help="also write the results here")
    args = parser.parse_args()
    torch.set_num_threads(1)
    lv.EXTENSION_STEPS, lv.EXTENSION_EVALS, lv.STEP_CAP, lv.SCORING_SIZE = 40, 4, 120, 700
    lv.LEVEL_GAIN = -1.0                       # never levelled off: every extension runs
    base = replace(with_steps(ENCODER_PRESETS["cpu"], 40), eval_size=300, evals=4)
    results, digest = {}, hashlib.sha256()
    for cell in CELLS:
        data = lv.analyse_levelled(base, cell, args.out)
        data.pop("train_time_s")
        data["levelling"].pop("train_time_s", None)
        data["probe"] = {k: v for k, v in (data["probe"] or {}).items() if k != "r2"}
        results[cell.key] = data
    digest.update(json.dumps(results, sort_keys=True).encode())
    for path in sorted(Path(args.out).glob("**/model.pt")):
        state = torch.load(path, map_location="cpu", weights_only=False)
        weights = state.get("state_dict", state)
        for name in sorted(weights):
            value = weights[name]
            if isinstance(value, torch.Tensor):
                digest.update(name.encode() + value.detach().cpu().contiguous().numpy().tobytes())
    for key, data in results.items():
        print(f"{key}: {data['levelling']['steps']} steps, {data['levelling']['extensions']} "
              f"extensions, loop accuracy {data['test_accuracy']:.4f}, scoring accuracy "
              f"{data['baseline']:.4f} on {data['score']['eval_size']} sentences")
    print(f"sha256 of the results and weights: {digest.hexdigest()}")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1, sort_keys=True))


if __name__ == "__main__":
    main()
