r"""Token-swap positional/symbolic scores by re-running one block (a private stand-in).

The toolkit's scores module (``lens_possym.swap_scores``, issue 3) is the real
implementation; this file is used only when it is not available, so the sweeps can report
the scores of trained toy heads either way. It is paper C's exact procedure (credited to
paper A), by brute force:

for every key pair ``0 <= i < j < q`` (``q`` the query, the last position), swap rows ``i``
and ``j`` of the layer input, re-run the block at the original positions and read the
query's attention ``a'``; with the clean attention ``a``,

.. math::

    \mathrm{pos}_{ij} = \cos\big((a'_i, a'_j), (a_i, a_j)\big), \quad
    \mathrm{sym}_{ij} = \cos\big((a'_i, a'_j), (a_j, a_i)\big), \quad
    w = \mathrm{softmax}_{(i,j)}(|a_i - a_j| / \tau),

``s_POS = Σ w·pos``, ``s_SYM = Σ w·sym``, averaged over prompts. The swapped copies are fed
to the model through a ``hook_resid_pre`` hook that returns a larger batch.
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["reference_swap_scores"]


@torch.no_grad()
def reference_swap_scores(model, tokens: Tensor, *, layer: int = 0, head: int = 0,
                          tau: float = 1e-4, chunk: int = 32) -> tuple[float, float]:
    """``(s_POS, s_SYM)`` of one head at the last position, mean over the prompts."""
    n = tokens.shape[1]
    q = n - 1
    ii, jj = torch.triu_indices(q, q, offset=1)
    n_pairs = ii.numel()
    resid_name = f"blocks.{layer}.hook_resid_pre"
    pattern_name = f"blocks.{layer}.attn.hook_pattern"
    stop = layer + 1 if layer + 1 < model.cfg.n_layers else None
    pos_all, sym_all = [], []
    for start in range(0, tokens.shape[0], chunk):
        part = tokens[start: start + chunk]
        B = part.shape[0]
        store: dict[str, Tensor] = {}

        def keep_resid(x, hook):
            store["resid"] = x.detach().clone()
            return x

        def keep_pattern(p, hook):
            store["pattern"] = p[:, head, q].detach().clone()
            return p

        model.run_with_hooks(part, fwd_hooks=[(resid_name, keep_resid), (pattern_name, keep_pattern)],
                             return_type=None, stop_at_layer=stop)
        clean, a = store["resid"], store["pattern"]                 # [B, n, d], [B, n]
        swapped = clean[:, None].repeat(1, n_pairs, 1, 1)            # [B, P, n, d]
        rows = torch.arange(n_pairs)
        swapped[:, rows, ii] = clean[:, jj]
        swapped[:, rows, jj] = clean[:, ii]
        flat = swapped.reshape(B * n_pairs, n, -1)

        def swap_in(x, hook):
            return flat.to(x.dtype)

        model.run_with_hooks(part, fwd_hooks=[(resid_name, swap_in), (pattern_name, keep_pattern)],
                             return_type=None, stop_at_layer=stop)
        a2 = store["pattern"].reshape(B, n_pairs, n)
        ai, aj = a[:, ii], a[:, jj]                                   # [B, P]
        bi, bj = a2[:, rows, ii], a2[:, rows, jj]
        norm = (bi.square() + bj.square()).sqrt() * (ai.square() + aj.square()).sqrt()
        norm = norm.clamp_min(1e-30)
        pos = (bi * ai + bj * aj) / norm
        sym = (bi * aj + bj * ai) / norm
        w = torch.softmax((ai - aj).abs() / tau, dim=1)
        pos_all.append((w * pos).sum(1))
        sym_all.append((w * sym).sum(1))
    return float(torch.cat(pos_all).mean()), float(torch.cat(sym_all).mean())
