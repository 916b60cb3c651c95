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
runs other ones, and its records carry :func:`cpu_kernels`. :func:`evaluation_at` retrains a
run only to its first evaluation, so that a new machine can be checked against a committed
record in minutes before hours of retraining. The settings must be in the
environment before torch loads (a change after import would not take effect, and would be
a global change behind the user's back), so this module only reads them.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

import torch

from ..errors import InvalidSelectionError, TrainingError
from .loop import EvalResult, TrainConfig, evaluate, train
from .models import TrainableModel
from .tasks import Task

__all__ = ["AVX2_KERNELS", "AVX512_KERNELS", "cpu_kernels", "kernels_note", "evaluation_at",
           "RecordCheck"]

#: AVX2 kernels on any x86-64 CPU that has AVX2 (checked bit for bit on an AVX-512 CPU
#: against runs trained on an AVX2-only one: paper C, 2026-12-07)
AVX2_KERNELS = {"MKL_CBWR": "AVX2", "ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2"}
#: AVX-512 kernels, on a CPU with AVX-512 only (paper B's records, docs/paper_b_rules.md)
AVX512_KERNELS = {"MKL_CBWR": "AVX512", "ATEN_CPU_CAPABILITY": "avx512"}


def cpu_kernels() -> str:
    """This process's CPU kernels, as a record stores them: ATen's capability and MKL's
    reproducibility branch, e.g. ``"aten AVX512, MKL_CBWR=unset"``."""
    return (f"aten {torch.backends.cpu.get_cpu_capability()}, "
            f"MKL_CBWR={os.environ.get('MKL_CBWR', 'unset')}")


def kernels_note(reference: Mapping[str, str], consequence: str) -> str | None:
    """``None`` when the environment holds every setting of ``reference``, else one line:
    the kernels this process runs, ``consequence`` (what differs for the user), and the
    prefix that fixes it (only the settings missing or different)."""
    if not (isinstance(reference, Mapping) and reference and all(
            isinstance(k, str) and isinstance(v, str) for k, v in reference.items())):
        raise InvalidSelectionError(f"reference must map environment variables to their "
                                    f"values, e.g. AVX2_KERNELS; got {reference!r}")
    if not isinstance(consequence, str) or not consequence.strip():
        raise InvalidSelectionError(f"consequence must be a sentence saying what differs, got "
                                    f"{consequence!r}")
    missing = [f"{k}={v}" for k, v in reference.items() if os.environ.get(k) != v]
    if not missing:
        return None
    return (f"not the reference CPU kernels ({cpu_kernels()}): {consequence}; start the "
            f"command with {' '.join(missing)}")


class _Reached(Exception):
    """Raised at the evaluation asked for: the rest of the run is not trained."""


def evaluation_at(model: TrainableModel, task: Task, config: TrainConfig,
                  step: int) -> EvalResult:
    """Train ``model`` (in place, from its initial weights) with ``config``'s own schedule up
    to the loop's first evaluation at or after ``step`` and return that evaluation, computed
    as the loop computes it (its test sentences, eval mode, its evaluation batching),
    without training the rest of the run or writing anything (``config`` should have no
    ``out_dir``).

    Stopping early changes nothing before ``step``: the learning rate follows the whole
    run's schedule, and an evaluation draws nothing from the training stream.
    """
    if not 1 <= step <= config.steps:
        raise TrainingError(f"step must be in 1..{config.steps} (the run's steps), got {step}")
    seen: list = []

    def stop(at: int, trained) -> None:
        if at >= step:
            seen.append(evaluate(trained, task, task.test_set(config.eval_size),
                                 forward_batch=config.eval_batch))
            raise _Reached

    try:
        train(model, task, config, callbacks=[stop])
    except _Reached:
        return seen[0]
    raise TrainingError(f"the run evaluated at no step >= {step} (eval_every "
                        f"{config.eval_every}, {config.steps} steps)")


@dataclass(frozen=True)
class RecordCheck:
    """A committed record's evaluation beside this machine's retrain of it
    (:func:`evaluation_at`): ``run`` (its name), ``step``, the figures compared
    (``record`` and ``here``, the same keys: e.g. ``test_accuracy`` and ``test_loss``) and
    this process's ``kernels`` (:func:`cpu_kernels`).

    Equal figures are evidence, not proof, that the retrain is the committed run: two
    kernels can agree to the last digit for a while (paper C's ``letter-cpu-s0`` has one
    loss at step 100 under AVX2 and AVX-512 kernels), so a later ``step`` is a stronger
    check; a difference is proof that it is another run."""

    run: str
    step: int
    record: Mapping[str, float]
    here: Mapping[str, float]
    kernels: str

    @property
    def equal(self) -> bool:
        """Every figure equal to the last digit."""
        return dict(self.record) == dict(self.here)

    def line(self) -> str:
        """One line: the figures side by side and what they say."""
        pairs = ", ".join(f"{k} record {self.record[k]!r} here {self.here[k]!r}"
                          for k in self.record)
        verdict = (f"equal: this machine retrains the committed run up to step {self.step}"
                   if self.equal else
                   "different: this machine trains another run than the committed one")
        return f"{self.run}, step {self.step}: {pairs} ({self.kernels}): {verdict}"
