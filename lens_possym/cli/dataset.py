"""``lens-possym dataset``: a dataset-scale profile of prompts read from a file.

Reads prompts from a text file (one a line) or a JSONL file (``--field``, default
``text``; or bare strings or token-id lists), scores every head and frequency on each
(grouped by length, no padding), and writes ``DIR/dataset.json`` (the settings),
``DIR/shards/`` (one file per finished shard) and, at the end, ``DIR/profile.json``
(:class:`~lens_possym.scores.dataset.DatasetProfile`: mean, spread and count per head and
frequency). Interrupted, the same command continues from the shards written. A progress
bar on stderr shows the time left.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from .. import scores
from ..errors import InvalidSelectionError
from ..execution import RayExecutor
from ._command import add_command
from ._model_args import add_model_args, load_from_args
from ._output import check_output_dir
from ._score_args import add_score_args, score_config_from
from ._types import positive_int


HELP = "mean and spread of every head's scores over prompts from a file (resumable)"
DESCRIPTION = ("Score every attention head (and RoPE frequency) on each prompt of a text or JSONL "
               "file, and write their mean, spread and count over prompts to --out, shard by "
               "shard: run the same command again to continue an interrupted profile.")


def register(sub) -> None:
    parser = add_command(sub, "dataset", run, HELP, DESCRIPTION)
    add_model_args(parser)
    parser.add_argument("--prompts", required=True,
                        help="a text file (one prompt a line) or .jsonl (one object a line)")
    parser.add_argument("--field", default="text", help="the JSONL field holding the prompt")
    parser.add_argument("--out", default="dataset_profile", help="output folder (created)")
    parser.add_argument("--shard-size", type=positive_int, default=64,
                        help="prompts per shard: the unit written to disk and resumed")
    add_score_args(parser)
    parser.add_argument("--ray", nargs="?", const="local", metavar="ADDRESS",
                        help="run shards on Ray: a local cluster (no ADDRESS), or an existing "
                        "one ('auto', 'ray://host:10001'); needs lens-possym[ray]")
    parser.add_argument("--ray-cpus", type=positive_int, default=2,
                        help="CPUs of the local Ray cluster (default 2)")


def _count(path: Path) -> int:
    with path.open("rb") as f:  # bytes: a bad line is reported by read_prompts, by number
        return sum(1 for line in f if line.strip())


def run(args) -> int:
    start = time.perf_counter()
    out = Path(args.out)
    check_output_dir(out)
    path = Path(args.prompts)
    if not path.is_file():
        raise InvalidSelectionError(f"no prompts file at {path}; pass a text or .jsonl file")
    total = _count(path)
    if total == 0:
        raise InvalidSelectionError(f"{path} holds no prompts (every line is blank)")
    config = score_config_from(args)
    executor = None
    if args.ray:
        executor = RayExecutor(None if args.ray == "local" else args.ray, num_cpus=args.ray_cpus)
        model = args.model  # each worker loads it by name
        print(f"{total} prompts from {path}; shards of {args.shard_size} on Ray "
              f"({args.ray}) ...", file=sys.stderr)
    else:
        model = load_from_args(args)
        print(f"{total} prompts from {path}; shards of {args.shard_size} ...", file=sys.stderr)
    try:
        profile = scores.dataset_profile(model, scores.read_prompts(path, field=args.field), config,
                                  layers=args.layers, shard_size=args.shard_size, out_dir=out,
                                  executor=executor, n_prompts=total, progress=True)
    finally:
        if executor is not None:
            executor.shutdown()
    seconds = time.perf_counter() - start
    pos, sym = profile.mean("pos"), profile.mean("sym")
    finite = pos.isfinite()
    print(f"{profile.n_prompts} prompts ({profile.n_tokens['min']}-{profile.n_tokens['max']} "
          f"tokens) in {profile.n_shards} shards; {int(finite.sum())} heads: median s_POS "
          f"{float(pos[finite].median()):.2f}, s_SYM {float(sym[finite].median()):.2f}; "
          f"spread over prompts (median std of s_POS) "
          f"{float(profile.std('pos')[finite].nanmedian()):.3f}")
    print(f"done in {seconds:.0f} s; wrote {out / 'profile.json'}")
    return 0
