"""Half precision that fails honestly: a probe pass at load time that finds activations the
dtype cannot hold.

float16 holds magnitudes up to 65,504. Some models' residual streams grow past that: on
gemma-3-270m the largest entry of the residual stream is 41,952 after layer 5 and 54,688
after layer 6, and layer 7's output is ``inf`` (then ``nan`` everywhere after). Every call
on such a model returns nan, and what reports it downstream (a score, a metric) can only
say that something was not finite. So :func:`check_activation_range` runs one short prompt
through a model loaded in float16 or bfloat16, watches each layer's residual stream
(``blocks.L.hook_resid_post``) and refuses the model at load time, naming the dtype, the
first layer whose output overflowed, the largest magnitude before it and the dtype's
range, and suggesting bfloat16 (float32's range) or float32. bfloat16 cannot overflow
where float32 does not (same exponent range); it is probed all the same (a nan in the
weights shows up here too). About one second on gemma-3-270m on a CPU.
"""

from __future__ import annotations

from typing import Any

import torch

from .._precision import is_half
from ..errors import NonFiniteResultError

__all__ = ["check_activation_range", "PROBE_TEXT"]

#: the probe prompt (any short text: the residual stream's largest entries sit on the
#: first tokens)
PROBE_TEXT = "Alice likes red. Bob likes blue. Carol likes green. What does Bob like? Bob likes"


def check_activation_range(model: Any, name: str = "the model") -> dict[int, float]:
    """Run :data:`PROBE_TEXT` once and check that every layer's output is finite.

    Only for a model held in float16 or bfloat16 (others return ``{}`` at once).

    Returns:
        ``{layer: largest |x| of its residual stream output}`` on the probe.

    Raises:
        NonFiniteResultError: a layer's output overflowed (``inf``/``nan``); the message
            names the dtype, the layer, the largest magnitude before it and what to load
            the model in instead.
    """
    dtype = next((p.dtype for p in model.parameters() if p.is_floating_point()), None)
    if not is_half(dtype):
        return {}
    n_layers = int(model.cfg.n_layers)
    largest: dict[int, float] = {}
    finite: dict[int, bool] = {}

    def watch(layer: int):
        def hook(tensor: torch.Tensor, hook: Any) -> None:
            magnitude = tensor.detach().abs()
            ok = magnitude.isfinite()
            finite[layer] = bool(ok.all())
            largest[layer] = float(magnitude[ok].max()) if bool(ok.any()) else float("nan")
        return hook

    hooks = [(f"blocks.{layer}.hook_resid_post", watch(layer)) for layer in range(n_layers)]
    tokens = model.to_tokens(PROBE_TEXT)
    with torch.no_grad():
        model.run_with_hooks(tokens, fwd_hooks=hooks, return_type=None)
    bad = [layer for layer in range(n_layers) if not finite.get(layer, True)]
    if bad:
        layer = bad[0]
        limit = torch.finfo(dtype).max
        before = (f"; the largest entry after layer {layer - 1} is {largest[layer - 1]:,.0f}"
                  if layer > 0 and layer - 1 in largest else "")
        dtype_name = str(dtype).replace("torch.", "")
        raise NonFiniteResultError(
            f"{name} overflows {dtype_name}: its residual stream is inf/nan after layer "
            f"{layer} on a probe prompt ({dtype_name} holds magnitudes up to {limit:,.0f}"
            f"{before}), so every result would be nan. Load it in "
            + ("bfloat16 (float32's range) or float32" if dtype == torch.float16 else
               "float32")
            + " (--dtype bfloat16 / float32; dtype=torch.bfloat16 in Python)")
    return largest
