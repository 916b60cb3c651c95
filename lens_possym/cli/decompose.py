"""``lens-possym decompose``: one head's attention logits split by RoPE frequency."""

from __future__ import annotations

import json
import math

from .. import bands, decompose, resolved
from ._command import add_command
from ._model_args import add_model_args, load_from_args
from ._output import check_output_file, staged_file
from ._types import positive_int

DEFAULT_PROMPT = (
    "Alice likes red. Bob likes blue. Carol likes green. Dave likes pink. "
    "What color does Carol like? Carol likes"
)


HELP = "split one head's last-token attention logits by RoPE frequency"
DESCRIPTION = ("Load a model offline, decompose one head's attention logits at the last token into"
               " one term per RoPE frequency, check they add up to the model's own scores, and "
               "print which frequencies carry the logit.")


def register(sub) -> None:
    parser = add_command(sub, "decompose", run, HELP, DESCRIPTION)
    add_model_args(parser)
    parser.add_argument("--layer", type=int, default=5)
    parser.add_argument("--head", type=int, default=0)
    parser.add_argument("--prompt", default=DEFAULT_PROMPT)
    parser.add_argument("--top", type=positive_int, default=10, help="how many frequencies to list")
    parser.add_argument("--json", metavar="PATH", help="also write the numbers to this file")


def run(args) -> int:
    import torch

    if args.json:
        check_output_file(args.json)
    model = load_from_args(args)
    geometry = resolved.resolve(model)       # once: both readings below use it
    fl = decompose.frequency_logits(geometry, args.prompt, args.layer, heads=[args.head],
                                    relative=True)
    norms = decompose.frequency_norms(geometry, args.prompt, args.layer)
    spec = fl.spec
    tokens = model.to_str_tokens(args.prompt)
    row_norms = fl.norms()[0, 0, 0]                      # [freq]
    share = row_norms / row_norms.sum()
    pattern = fl.pattern()[0, 0, 0]
    angles = spec.angles

    print(f"{args.model}, {spec.describe()}")
    print(f"prompt: {len(tokens)} tokens; query = last token {tokens[-1]!r}; head {args.head}")
    print(f"check: Σ_f terms vs the model's {fl.checked_against}: "
          f"max |error| = {fl.max_abs_error:.2e}")
    top_keys = torch.topk(pattern, k=min(5, len(tokens)))
    print("attention of the last token: " + ", ".join(
        f"{tokens[i]!r}@{i} {w:.2f}" for w, i in zip(top_keys.values.tolist(), top_keys.indices.tolist())
    ))
    print(f"\nfrequencies carrying the logit row (norm over the {int(fl.mask[0].sum())} visible keys):")
    print(f"  {'id':>4} {'θ rad/tok':>10} {'period':>9} {'‖λ_f‖':>8} {'share':>6} "
          f"{'‖cos‖':>7} {'‖sin‖':>7} {'‖q_f‖':>7} {'‖k_f‖':>7}")
    mask = fl.mask[0]
    cos_n = fl.cos_terms[0, 0, 0][mask].norm(dim=0)
    sin_n = fl.sin_terms[0, 0, 0][mask].norm(dim=0)
    layer_index = norms.layers.index(spec.layer)
    for f in torch.argsort(row_norms, descending=True)[: args.top].tolist():
        theta = float(angles[f])
        period = 2 * math.pi / theta if theta > 0 else math.inf
        print(f"  {f:>4} {theta:>10.3g} {period:>9.3g} {float(row_norms[f]):>8.3f} "
              f"{float(share[f]):>6.1%} {float(cos_n[f]):>7.3f} {float(sin_n[f]):>7.3f} "
              f"{float(norms.q[layer_index, args.head, f]):>7.2f} "
              f"{float(norms.k[layer_index, args.head, f]):>7.2f}")
    band_shares = {name: float(share[ids].sum()) for name, ids in
                   zip(bands.BAND_NAMES, bands.band_partition(spec.n_freqs, 3))}
    print("\nshare by band (ids split in thirds, fast to slow): " + ", ".join(
        f"{name} {value:.1%}" for name, value in band_shares.items()))
    if args.json:
        payload = {
            "model": args.model, "layer": spec.layer, "head": args.head, "tokens": tokens,
            "angles": angles.tolist(), "logit_norms": row_norms.tolist(),
            "terms": fl.terms[0, 0, 0].tolist(), "pattern": pattern.tolist(),
            "q_norms": norms.q[layer_index, args.head].tolist(),
            "k_norms": norms.k[layer_index, args.head].tolist(),
            "max_abs_error": fl.max_abs_error, "bands": band_shares,
        }
        with staged_file(args.json) as path:
            path.write_text(json.dumps(payload, indent=1))
        print(f"wrote {args.json}")
    return 0
