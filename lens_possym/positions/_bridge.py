"""Reading tensors from a bridge model for the non-RoPE schemes: one pass, hooks always removed."""

from __future__ import annotations

from typing import Sequence

import torch
from torch import Tensor

from ..errors import UnsupportedModelError
from ..typing import HookedModel, HookFn

__all__ = ["run_capturing", "keys_for_heads"]


class _Stop(Exception):
    """Raised by the last capturing hook to end the pass early."""


def run_capturing(model: HookedModel, tokens: Tensor, names: Sequence[str],
                  fwd_hooks: Sequence[tuple[str, HookFn]] = ()) -> dict[str, Tensor]:
    """Run ``model`` on ``tokens`` with ``fwd_hooks`` and return the tensors of ``names``.

    The pass stops once every name is captured. ``run_with_hooks`` removes the hooks when
    it returns or raises.
    """
    store: dict[str, Tensor] = {}
    wanted = set(names)

    def keep(name: str):
        def hook(tensor: Tensor, hook) -> Tensor:
            store[name] = tensor.detach().clone()
            if wanted <= store.keys():
                raise _Stop
            return tensor
        return hook

    hooks = list(fwd_hooks) + [(name, keep(name)) for name in wanted]
    with torch.no_grad():
        try:
            model.run_with_hooks(tokens, fwd_hooks=hooks, return_type=None)
        except _Stop:
            pass
        else:
            raise UnsupportedModelError(
                f"the hooks {sorted(wanted - store.keys())} did not fire during the forward pass")
    return store


def keys_for_heads(k: Tensor, heads: Sequence[int], n_heads: int) -> Tensor:
    """Keys ``[batch, pos, kv_head, d_head]`` picked for query ``heads`` (multi-query and
    grouped-query attention: query head ``h`` reads KV head ``h // (n_heads // n_kv)``)."""
    group = n_heads // k.shape[2]
    return k[:, :, [h // group for h in heads]]
