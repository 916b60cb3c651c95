"""How heads are scored (``--swap``, ``--n-blocks``, ``--tau``, ``--layers``,
``--no-freq``), shared by ``profile`` and ``dataset``: one set of options, one
:class:`~lens_possym.scores.ScoreConfig` built from them."""

from __future__ import annotations

import argparse

from .. import scores
from ..scores.config import SWAPS
from ._types import layers_text, positive_float, positive_int


def add_score_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--swap", choices=SWAPS, default="token")
    parser.add_argument("--n-blocks", type=positive_int, default=8, help="blocks for --swap block")
    parser.add_argument("--tau", type=positive_float, default=1e-4, help="swap-weight temperature")
    parser.add_argument("--layers", type=layers_text,
                        help="layers: ids and half-open START:STOP ranges, comma-separated "
                        "(e.g. 0,5,17 or 0:6; default: all)")
    parser.add_argument("--no-freq", action="store_true", help="skip per-frequency scores")


def score_config_from(args: argparse.Namespace, **settings):
    """The :class:`~lens_possym.scores.ScoreConfig` of these options, with a command's own
    ``settings`` (e.g. ``method``) on top. ``--layers`` is not a setting of the config: it is
    passed to the scoring call."""
    return scores.ScoreConfig(swap=args.swap, n_blocks=args.n_blocks, tau=args.tau,
                       per_frequency=not args.no_freq, **settings)
