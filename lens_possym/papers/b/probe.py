r"""Paper B's positional probe: how much position the residual stream holds, per layer, and
whether it still lies along the input encoding's directions (claim 12's "displaced")."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from .encoder import SchemeEncoder

__all__ = ["positional_probe"]


@torch.no_grad()
def positional_probe(model: SchemeEncoder, tokens: Tensor, *, rank: int | None = None
                     ) -> dict[str, Any] | None:
    r"""How much positional information the residual stream holds, per layer, and whether it
    still lies along the input encoding's directions.

    Let :math:`P \in \mathbb{R}^{n\times d}` be the encoding added at the input (rows are
    positions), :math:`x^{(L)}_{b,p}` the residual stream entering block ``L`` (the last
    entry: after the last block), and :math:`m_p = \mathbb{E}_b\,x^{(L)}_{b,p}` its
    **positional part** (the mean over prompts at each position, centred over positions).
    Per ``L``:

    * ``r2``: held-out :math:`R^2` of a least-squares linear readout of :math:`P_p` from
      :math:`x^{(L)}_{b,p}` (fit on half the prompts, scored on the other half, over all
      coordinates of :math:`P`): is position still *linearly decodable*?
    * ``pos_share``: :math:`\sum_p\|m_p\|^2` over the stream's total centred variance: how
      much of the stream is position at all.
    * ``aligned``: the share of the positional part's variance lying in the span of the
      top ``rank`` principal directions of :math:`P` (default: those holding 99 % of its
      variance): does position still live along the **additive positional directions**?
      ``chance = rank / d_model`` is what a random direction would give. "Displaced" means
      ``aligned`` falls towards ``chance`` while ``pos_share`` or ``r2`` stay up (position
      is carried, but elsewhere).

    Returns ``None`` for a model without an input encoding.
    """
    if not hasattr(model, "W_pos"):
        return None
    n = tokens.shape[1]
    P = model.W_pos[:n].double().cpu()
    _, S, Vh = torch.linalg.svd(P - P.mean(0), full_matrices=False)
    if rank is None:
        energy = (S ** 2).cumsum(0) / (S ** 2).sum().clamp_min(1e-30)
        rank = int((energy < 0.99).sum()) + 1
    basis = Vh[:rank].T                                            # [d_model, rank]
    names = [f"blocks.{L}.hook_resid_pre" for L in range(model.cfg.n_layers)]
    names.append(f"blocks.{model.cfg.n_layers - 1}.hook_resid_post")
    _, cache = model.run_with_cache(tokens, names_filter=lambda name: name in names)
    half = tokens.shape[0] // 2
    target = P[None].expand(tokens.shape[0], -1, -1)
    out: dict[str, Any] = {"r2": [], "pos_share": [], "aligned": [], "rank": rank,
                           "chance": rank / P.shape[1]}
    for name in names:
        x = cache[name].double().cpu()                             # [b, p, d]
        xa = torch.cat([x, torch.ones_like(x[..., :1])], dim=-1)
        fit = torch.linalg.lstsq(xa[:half].reshape(-1, xa.shape[-1]),
                                 target[:half].reshape(-1, P.shape[-1])).solution
        pred = xa[half:].reshape(-1, xa.shape[-1]) @ fit
        truth = target[half:].reshape(-1, P.shape[-1])
        sst = ((truth - truth.mean(0)) ** 2).sum()
        out["r2"].append(float(1 - ((pred - truth) ** 2).sum() / sst))
        total = ((x - x.mean((0, 1))) ** 2).sum() / x.shape[0]
        m = x.mean(0)
        m = m - m.mean(0)                                          # positional part [p, d]
        out["pos_share"].append(float((m ** 2).sum() / total))
        out["aligned"].append(float(((m @ basis) ** 2).sum() / (m ** 2).sum().clamp_min(1e-30)))
    return out
