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


def _toy_run():
    from lens_possym.papers.a.tasks import IndexTask
    from lens_possym.training.loop import TrainConfig
    from lens_possym.training.toy import ToyTransformer, toy_config_for

    task = IndexTask(n_symbols=6, length=6, seed=1)

    def model():
        return ToyTransformer(toy_config_for(task, n_freqs=4, seed=0)).set_frequencies([0])

    return task, model, TrainConfig(steps=12, eval_every=4, eval_size=64, batch_size=8,
                                    lr=3e-3, warmup_steps=2)


def test_evaluation_at_is_the_whole_runs_evaluation_at_that_step():
    """Stopping at an evaluation changes nothing before it: the schedule is the whole run's,
    and the evaluation is the loop's (accuracy and loss to the last digit)."""
    from lens_possym.training.kernels import evaluation_at
    from lens_possym.training.loop import train

    task, model, config = _toy_run()
    history = train(model(), task, config).history
    for record in history[:2]:
        here = evaluation_at(model(), task, config, record.step)
        assert (here.accuracy, here.loss) == (record.test_accuracy, record.test_loss)
    between = evaluation_at(model(), task, config, 5)          # the next evaluation: step 8
    assert (between.accuracy, between.loss) == (history[1].test_accuracy, history[1].test_loss)


@pytest.mark.parametrize("step", [0, 13])
def test_evaluation_at_refuses_a_step_outside_the_run(step):
    from lens_possym.errors import TrainingError
    from lens_possym.training.kernels import evaluation_at

    task, model, config = _toy_run()
    with pytest.raises(TrainingError, match=f"step must be in 1..12 .*got {step}"):
        evaluation_at(model(), task, config, step)


@pytest.mark.parametrize("reference, consequence, match", [
    ({}, "x", "reference must map environment variables"),
    ({"MKL_CBWR": 2}, "x", "reference must map"),
    (["MKL_CBWR"], "x", "reference must map"),
    ({"MKL_CBWR": "AVX2"}, "", "consequence must be a sentence"),
])
def test_a_bad_reference_or_sentence_is_refused(reference, consequence, match):
    from lens_possym.errors import InvalidSelectionError

    with pytest.raises(InvalidSelectionError, match=match):
        kernels_note(reference, consequence)
