"""The CPU kernels a process runs, and the note that says when they are not a paper's."""

import pytest

from lens_possym.training.kernels import (AVX2_KERNELS, AVX512_KERNELS, cpu_kernels,
                                          kernels_note)


@pytest.mark.parametrize("reference", [AVX2_KERNELS, AVX512_KERNELS])
def test_no_note_when_every_setting_is_there(monkeypatch, reference):
    for name, value in reference.items():
        monkeypatch.setenv(name, value)
    assert kernels_note(reference, "it differs") is None


def test_the_note_names_only_what_is_missing_or_different(monkeypatch):
    monkeypatch.setenv("MKL_CBWR", "AVX2")                  # right
    monkeypatch.setenv("ATEN_CPU_CAPABILITY", "avx512")     # different
    monkeypatch.delenv("ONEDNN_MAX_CPU_ISA", raising=False)  # missing
    note = kernels_note(AVX2_KERNELS, "a run trained here differs")
    assert note == (f"not the reference CPU kernels ({cpu_kernels()}): a run trained here "
                    "differs; start the command with ATEN_CPU_CAPABILITY=avx2 "
                    "ONEDNN_MAX_CPU_ISA=AVX2")


def test_cpu_kernels_names_aten_and_mkl(monkeypatch):
    import torch

    monkeypatch.setenv("MKL_CBWR", "AVX512")
    assert cpu_kernels() == f"aten {torch.backends.cpu.get_cpu_capability()}, MKL_CBWR=AVX512"
    monkeypatch.delenv("MKL_CBWR")
    assert cpu_kernels().endswith("MKL_CBWR=unset")


def test_reading_the_settings_changes_none():
    import os

    before = dict(os.environ)
    kernels_note(AVX512_KERNELS, "x")
    cpu_kernels()
    assert dict(os.environ) == before
