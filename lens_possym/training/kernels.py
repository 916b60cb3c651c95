"""Which CPU vector kernels a process runs, and pinning them so that a run retrains bit for bit.

MKL and ATen pick their vector kernels by CPU (AVX2, AVX-512, ...), and two kernels sum in
different orders: the same seeded run trained on an AVX-512 machine and on an AVX2 one has
losses that part in the 8th digit after its first steps (paper C's seed 2, 2026-12-07), so
it is another run, and every analysis of the committed run stops applying to it. Three
environment variables, read by the libraries when they load, pin the kernels:

* ``MKL_CBWR``: MKL's conditional numerical reproducibility branch (``AVX2``, ``AVX512``);
* ``ATEN_CPU_CAPABILITY``: the vector width of ATen's own kernels (``avx2``, ``avx512``);
* ``ONEDNN_MAX_CPU_ISA``: the widest instructions oneDNN may use.

A paper names the settings its committed runs were trained under (:data:`AVX2_KERNELS`,
:data:`AVX512_KERNELS`); its training commands print :func:`kernels_note` when this process
runs other ones, and its records carry :func:`cpu_kernels`. The settings must be in the
environment before torch loads, so this module only reads them: it never sets one (a
change after import would not take effect and would be a global change behind the user's
back).
"""

from __future__ import annotations

import os
from collections.abc import Mapping

__all__ = ["AVX2_KERNELS", "AVX512_KERNELS", "cpu_kernels", "kernels_note"]

#: AVX2 kernels on any x86-64 CPU that has AVX2 (checked bit for bit on an AVX-512 CPU
#: against runs trained on an AVX2-only one: paper C, 2026-12-07)
AVX2_KERNELS = {"MKL_CBWR": "AVX2", "ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2"}
#: AVX-512 kernels, on a CPU with AVX-512 only (paper B's records, docs/paper_b_rules.md)
AVX512_KERNELS = {"MKL_CBWR": "AVX512", "ATEN_CPU_CAPABILITY": "avx512"}


def cpu_kernels() -> str:
    """This process's CPU kernels, as a record stores them: ATen's capability and MKL's
    reproducibility branch, e.g. ``"aten AVX512, MKL_CBWR=unset"``."""
    import torch

    return (f"aten {torch.backends.cpu.get_cpu_capability()}, "
            f"MKL_CBWR={os.environ.get('MKL_CBWR', 'unset')}")


def kernels_note(reference: Mapping[str, str], consequence: str) -> str | None:
    """``None`` when the environment holds every setting of ``reference``, else one line:
    the kernels this process runs, ``consequence`` (what differs for the user), and the
    prefix that fixes it (only the settings missing or different)."""
    missing = [f"{k}={v}" for k, v in reference.items() if os.environ.get(k) != v]
    if not missing:
        return None
    return (f"not the reference CPU kernels ({cpu_kernels()}): {consequence}; start the "
            f"command with {' '.join(missing)}")
