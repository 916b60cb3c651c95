"""One contract for every result type and every config, checked for each automatically.

Every :class:`~lens_possym.results_io.ResultIO` subclass in the package (the papers' too)
is found by importing every module; each must have a factory in :data:`RESULTS` below that
builds a small instance (a tiny model or synthetic tensors), so a new result type without
one fails :func:`test_every_result_type_has_a_factory`. Each is then checked for:
``summary()`` a dict of plain JSON values, ``to_dataframe()`` a DataFrame with rows,
``save``/``load`` giving back an equal result (tensors equal, with their dtypes; the config
equal), and a short repr without a tensor's values. Every
:class:`~lens_possym._json.JsonConfig` subclass likewise: a JSON round trip equal to the
original, frozen, and a bad value refused with a :class:`LensPossymError` that names it.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import math
import pkgutil

import pandas as pd
import pytest
import torch

import lens_possym as lp

from .helpers import toy_frequency_sweep
from lens_possym._json import JsonConfig, dumps, to_jsonable
from lens_possym.errors import LensPossymError
from lens_possym.results_io import ResultIO

PROMPTS = ["the cat sat on the mat and the dog sat on the log", "one two three four five six "
           "seven eight nine ten eleven twelve"]
MAX_REPR = 400


def _import_everything() -> None:
    """Import every module of the package, so that every subclass is defined."""
    for info in pkgutil.walk_packages(lp.__path__, "lens_possym."):
        if not info.name.endswith("__main__"):
            importlib.import_module(info.name)


def _subclasses(base: type) -> list[type]:
    _import_everything()
    found, todo = set(), [base]
    while todo:
        for sub in todo.pop().__subclasses__():
            if sub not in found:
                found.add(sub)
                todo.append(sub)
    return sorted((c for c in found if c.__module__.startswith("lens_possym.")),
                  key=lambda c: f"{c.__module__}.{c.__qualname__}")


def _name(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


# ---- a small model and its prompts, built once ------------------------------------------


class Context:
    """What the factories share, built on first use (a tiny model, its tokens, a toy run)."""

    def __init__(self):
        self._cache: dict[str, object] = {}

    def get(self, key, make):
        if key not in self._cache:
            self._cache[key] = make()
        return self._cache[key]

    @property
    def model(self):
        return self.get("model", lambda: lp.tiny_model("llama"))

    @property
    def tokens(self):
        return self.get("tokens", lambda: self.model.to_tokens(PROMPTS)[:, :10])

    @property
    def toy(self):
        """A trained toy model, its task and the TrainResult (10 steps)."""
        def make():
            from lens_possym.training.toy import ToyTransformer, toy_config_for
            from lens_possym.training.loop import TrainConfig, train
            from lens_possym.training.tasks import make_task

            task = make_task("index", n_symbols=4, length=4)
            model = ToyTransformer(toy_config_for(task, n_freqs=4, seed=0))
            return model, task, train(model, task, TrainConfig(steps=10, eval_every=5, seed=0))
        return self.get("toy", make)


def _mean_logit(logits):
    return float(logits[:, -1].float().mean())


def _scores(ctx):
    return lp.swap_scores(ctx.model, ctx.tokens)


def _logits(ctx):
    return lp.frequency_logits(ctx.model, ctx.tokens, 1, relative=True)


def _norms(ctx):
    from lens_possym.decompose import frequency_norms

    return frequency_norms(ctx.model, ctx.tokens, per_token=True)


def _dataset(ctx):
    from lens_possym.scores import dataset_profile

    return dataset_profile(ctx.model, PROMPTS, shard_size=1)


def _band_sweep(ctx):
    return lp.band_sweep(ctx.model, ctx.tokens, {"mean_logit": _mean_logit}, layers=[1],
                         progress=False)


def _comparison(ctx):
    from lens_possym.interventions import compare_with_random_heads

    return compare_with_random_heads(ctx.model, ctx.tokens, {"mean_logit": _mean_logit},
                                     "1.0,1.1", n_random=2, modes=("zero",), progress=False)


def _grid(ctx):
    from lens_possym.interventions import PatchGridConfig, PatchingGrid

    g = torch.Generator().manual_seed(0)
    values = torch.randn(2, 3, 4, generator=g)
    values[1, 2] = math.nan                                   # a cell not patched
    return PatchingGrid(values=values, axis_names=["layer", "head_index"],
                        baseline=torch.randn(4, generator=g), metric="logit_diff",
                        source_baseline=torch.randn(4, generator=g), config=PatchGridConfig(),
                        seconds=0.5, n_passes=2, info={"model": "tiny"})


def _path_patching(ctx):
    from lens_possym.circuits import Edge, PathCell, path_patch

    model = ctx.model
    toks = ctx.tokens
    return path_patch(model, toks, toks.flip(0), lambda l: l[:, -1, 3] - l[:, -1, 5],
                      ["L0H0->L1H1.k", "L0H2->logits", PathCell.edge(
                          Edge.parse("L0H1->L1H0.q"), (0,))])


def _edge_scores(ctx):
    from lens_possym.circuits import path_edge_scores

    toks = ctx.tokens
    return path_edge_scores(ctx.model, toks, toks.flip(0), lambda l: l[:, -1, 3] - l[:, -1, 5],
                            ["L0H0->L1H1.k", "L0H2->logits", "embed->L1H0.v"])


def _circuit(ctx):
    from lens_possym.circuits import find_circuit

    toks = ctx.tokens
    return find_circuit(ctx.model, toks, toks.flip(0), lambda l: l[:, -1, 3] - l[:, -1, 5],
                        edges=["L0H0->L1H1.k", "L0H2->logits", "embed->L1H0.v"],
                        positional={"L1H1": [0, 1]}, info={"model": "tiny"})
def _attribution(ctx):
    from lens_possym.circuits import attribute

    return attribute(ctx.model, ctx.tokens, ctx.tokens.flip(0),
                     lambda l: l[:, -1, 3] - l[:, -1, 5], site="frequencies")


def _edge_attribution(ctx):
    from lens_possym.circuits import edge_attribution

    return edge_attribution(ctx.model, ctx.tokens, ctx.tokens.flip(0),
                            lambda l: l[:, -1, 3] - l[:, -1, 5])


def _binding_task(ctx):
    from lens_possym.tasks import binding_task

    return ctx.get("binding", lambda: binding_task(ctx.model, n_prompts=6, n_pairs=3, seed=1))


def _importance(ctx):
    from lens_possym.interventions import head_importance

    return head_importance(ctx.model, _binding_task(ctx), "logit_diff", layers=[0])


def _binding(ctx):
    from lens_possym.tasks import evaluate_binding

    return evaluate_binding(ctx.model, _binding_task(ctx))


def _word_distance(ctx):
    from lens_possym.tasks.word_distance import WordDistanceResult

    return WordDistanceResult(accuracy=0.25, candidate_accuracy=0.5, chance=1 / 3)


def _train(ctx):
    return ctx.toy[2]


def _eval(ctx):
    from lens_possym.training.loop import evaluate

    model, task, _ = ctx.toy
    return evaluate(model, task, task.test_set(32))


def _head_scores(ctx):
    from lens_possym.training.trajectories import head_scores

    model, task, _ = ctx.toy
    return head_scores(model, task.test_set(8).tokens)


def _checkpoint_scores(ctx):
    from lens_possym.training.trajectories import CheckpointScores

    return CheckpointScores(path="run/checkpoint_10.pt", step=10, scores=_head_scores(ctx))


def _toy_sweep(ctx):
    return toy_frequency_sweep()


def _hops_tensor(n_hops=2, n_layers=3, seed=0):
    """``[h, j, k]`` shares, ``nan`` for ``k > h`` (the chain results' shape)."""
    t = torch.rand(n_hops, n_layers + 1, n_hops + 1, generator=torch.Generator().manual_seed(seed))
    for h in range(n_hops):
        t[h, :, h + 2:] = math.nan
    return t


def _chain_lens(ctx):
    from lens_possym.papers.c.chain import ChainLens

    return ChainLens("number", _hops_tensor(), _hops_tensor(seed=1), [5, 3])


def _chain_patching(ctx):
    from lens_possym.papers.c.chain import ChainPatching

    return ChainPatching("number", _hops_tensor(), [5, 3], 0.1, 0.9)


def _layer_gaps(ctx):
    from lens_possym.papers.c.discrepancy import LayerGaps

    g = torch.Generator().manual_seed(0)
    return LayerGaps("number", [17, 40], *(torch.rand(2, 3, 1, generator=g, dtype=torch.float64)
                                          for _ in range(3)), n_inputs=8)


def _extension(ctx):
    from lens_possym.papers.c.masking import ExtensionAccuracy

    return ExtensionAccuracy("letter", [17, 40], 16, [0, 1],
                             accuracy={"none": [1.0, 0.5], "layer 0": [0.9, math.nan]},
                             by_hops={"none": [[1.0], [0.5]], "layer 0": [[0.9], [0.25]]})


def _frequency_profile(ctx):
    from lens_possym.papers.c.frequency import FrequencyProfile

    return FrequencyProfile("number", [[1.0, 0.5], [0.0, 2.0]], [[0.1, 0.1], [0.0, 0.2]],
                            [1.33, 2.0], [1.0, 0.01], 4, 1e-7)


def _trajectory(ctx):
    from lens_possym.papers.c.dynamics import ScoreTrajectory

    g = torch.Generator().manual_seed(0)
    return ScoreTrajectory("number", [0, 10, 20], *(torch.rand(3, 2, 1, generator=g)
                                                   for _ in range(3)),
                           accuracy=[0.1, 0.5, math.nan], accuracy_by_hops=[[0.1], [0.5], [1.0]],
                           n_prompts=8, method="exact", score_seconds=0.25, meta={"seed": 0})


def _purity(ctx):
    from lens_possym.papers.c.dynamics import purity

    pos = torch.tensor([[[0.5], [0.95]], [[0.02], [0.97]], [[0.01], [0.5]]])
    sym = torch.tensor([[[0.5], [0.03]], [[0.99], [0.02]], [[0.98], [0.5]]])
    return purity(pos, sym, [0, 10, 20])


def _discrepancy(ctx):
    from lens_possym.papers.c.discrepancy import Discrepancy

    return Discrepancy(17, torch.tensor([0.5, 1.25, 2.0], dtype=torch.float64), scale=2.0)


def _lengths(ctx):
    from lens_possym.papers.c.lengths import LengthAccuracy

    return LengthAccuracy("number", [17, 40], [1.0, 0.5], [[1.0, 1.0], [0.75, 0.25]], 8,
                          model="tiny")


def _attention_roles(ctx):
    from lens_possym.papers.c.roles import AttentionRoles

    g = torch.Generator().manual_seed(0)
    r = lambda *shape: torch.rand(*shape, generator=g)  # noqa: E731
    hop = r(2, 1)
    hop[1, 0] = math.nan
    return AttentionRoles(hop, r(2, 1), r(2, 1, 2, 2), r(2, 1, 2, 2), r(2, 1, 2, 3), r(2, 1),
                          r(2, 1), [["Index"], ["other"]], 0.5)


def _causal_roles(ctx):
    from lens_possym.papers.c.roles import CausalRoles

    restore = torch.full((2, 2, 2), math.nan)
    restore[0, :, 0] = torch.tensor([0.9, 0.1])
    restore[1, :, :] = torch.tensor([[0.2, 0.8], [0.7, 0.3]])
    return CausalRoles([1.0, 0.5], torch.tensor([[[0.5, 0.25]], [[1.0, 0.5]]]), restore, 0.05)


def _rule(ctx):
    from lens_possym.papers.c.verdicts import RuleResult

    return RuleResult("C1", True, "T = 300", {"T": 300.0})


def _uncertainty(ctx):
    from lens_possym.experiments.uncertainty import uncertainty

    values = torch.randn(2, 3, 6, generator=torch.Generator().manual_seed(0))
    values[1, 2] = math.nan
    return uncertainty(values, -1, n_resamples=50, allow_nan=True)  # a nan cell, on purpose


def _swap_scores(ctx):
    from lens_possym.scores.exact import SwapScores

    g = torch.Generator().manual_seed(0)
    r = lambda *shape: torch.rand(*shape, generator=g, dtype=torch.float64)  # noqa: E731
    return SwapScores(r(2, 4), r(2, 4), r(2, 4, 3), r(2, 4, 3))


def _toeplitz_terms(ctx):
    from lens_possym.positions import toeplitz_terms

    return toeplitz_terms(ctx.model, ctx.tokens[:, :6], 1)


def _term_magnitudes(ctx):
    from lens_possym.positions import toeplitz_magnitudes

    return toeplitz_magnitudes(ctx.model, ctx.tokens[:, :6])


def _profile_details(ctx):
    from lens_possym.report.profile import profile_details

    return profile_details(ctx.model, _scores(ctx), ctx.tokens)


def _cell_record(ctx):
    from lens_possym.papers.b.records import CellRecord

    return CellRecord(preset="cpu", task="distance", scheme="rope", variant="intended", seed=0,
                      accuracy=0.9, ablation={"top_drop": 0.5, "second_drop": 0.1,
                                              "top_head": [0, 1], "heads_over_10": 1,
                                              "deposit": True},
                      ablation_grid=[[0.9, 0.4], [0.85, 0.88]], steps=20,
                      history=[[10, 0.5], [20, 0.9]])


#: the factory of every result type (by its qualified name): a type missing here fails
RESULTS = {
    "lens_possym.scores.results.PosSymScores": _scores,
    "lens_possym.scores.dataset.DatasetProfile": _dataset,
    "lens_possym.decompose.FrequencyLogits": _logits,
    "lens_possym.decompose.FrequencyNorms": _norms,
    "lens_possym.experiments.sweep.BandSweep": _band_sweep,
    "lens_possym.experiments.compare.HeadSetComparison": _comparison,
    "lens_possym.experiments.grid_data.PatchingGrid": _grid,
    "lens_possym.circuits.path.PathPatching": _path_patching,
    "lens_possym.circuits.circuit.EdgeScores": _edge_scores,
    "lens_possym.circuits.circuit.Circuit": _circuit,
    "lens_possym.circuits.attribution.Attribution": _attribution,
    "lens_possym.circuits.edges.EdgeAttribution": _edge_attribution,
    "lens_possym.experiments.importance.HeadImportance": _importance,
    "lens_possym.tasks.binding.BindingResult": _binding,
    "lens_possym.tasks.word_distance.WordDistanceResult": _word_distance,
    "lens_possym.training.loop.TrainResult": _train,
    "lens_possym.training.loop.EvalResult": _eval,
    "lens_possym.training.trajectories.HeadScores": _head_scores,
    "lens_possym.training.trajectories.CheckpointScores": _checkpoint_scores,
    "lens_possym.report.profile.ProfileDetails": _profile_details,
    "lens_possym.experiments.uncertainty.Uncertainty": _uncertainty,
    "lens_possym.scores.exact.SwapScores": _swap_scores,
    "lens_possym.toeplitz.ToeplitzTerms": _toeplitz_terms,
    "lens_possym.toeplitz.TermMagnitudes": _term_magnitudes,
    "lens_possym.papers.a.sweeps.FrequencySweep": _toy_sweep,
    "lens_possym.papers.c.chain.ChainLens": _chain_lens,
    "lens_possym.papers.c.chain.ChainPatching": _chain_patching,
    "lens_possym.papers.c.discrepancy.LayerGaps": _layer_gaps,
    "lens_possym.papers.c.discrepancy.Discrepancy": _discrepancy,
    "lens_possym.papers.c.masking.ExtensionAccuracy": _extension,
    "lens_possym.papers.c.frequency.FrequencyProfile": _frequency_profile,
    "lens_possym.papers.c.dynamics.ScoreTrajectory": _trajectory,
    "lens_possym.papers.c.dynamics.Purity": _purity,
    "lens_possym.papers.c.lengths.LengthAccuracy": _lengths,
    "lens_possym.papers.c.roles.AttentionRoles": _attention_roles,
    "lens_possym.papers.c.roles.CausalRoles": _causal_roles,
    "lens_possym.papers.c.verdicts.RuleResult": _rule,
    "lens_possym.papers.b.records.CellRecord": _cell_record,
}

RESULT_TYPES = _subclasses(ResultIO)


def test_every_result_type_has_a_factory():
    missing = [_name(c) for c in RESULT_TYPES if _name(c) not in RESULTS]
    assert not missing, (f"result types without a factory in {__name__}.RESULTS: {missing}; "
                         "add one so that the contract covers them")
    stale = set(RESULTS) - {_name(c) for c in RESULT_TYPES}
    assert not stale, f"factories of types that are gone: {sorted(stale)}"


@pytest.fixture(scope="module")
def ctx():
    return Context()


@pytest.fixture(scope="module")
def built(ctx):
    cache: dict[str, ResultIO] = {}

    def build(name: str) -> ResultIO:
        if name not in cache:
            cache[name] = RESULTS[name](ctx)
            assert type(cache[name]).__name__ == name.rsplit(".", 1)[1]
        return cache[name]
    return build


def _is_plain(value) -> bool:
    """JSON data as Python gives it: no tensors, arrays or objects."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return True
    if isinstance(value, (list, tuple)):
        return all(_is_plain(v) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and _is_plain(v) for k, v in value.items())
    return False


def _same(a, b, where: str) -> None:
    """``a`` and ``b`` equal: tensors by value (``nan`` where ``nan``) and dtype, configs by
    ``==``, the rest through their JSON form."""
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor), where
        assert a.dtype == b.dtype and a.shape == b.shape, (where, a.dtype, b.dtype)
        if a.is_floating_point():
            assert torch.equal(a.isnan(), b.isnan()), where
            assert torch.equal(a.nan_to_num(), b.nan_to_num()), where
        else:
            assert torch.equal(a, b), where
    elif isinstance(a, JsonConfig):
        assert a == b, where
    elif isinstance(a, ResultIO):
        _same_result(a, b, where)
    elif isinstance(a, dict):
        assert isinstance(b, dict) and list(map(str, a)) == list(map(str, b)), where
        for (k, x), y in zip(a.items(), b.values()):
            _same(x, y, f"{where}.{k}")
    elif dataclasses.is_dataclass(a) and not isinstance(a, type):   # e.g. a RopeSpec
        assert type(a) is type(b), where
        for f in dataclasses.fields(a):
            _same(getattr(a, f.name), getattr(b, f.name), f"{where}.{f.name}")
    elif isinstance(a, (list, tuple)) and any(
            isinstance(x, torch.Tensor) or dataclasses.is_dataclass(x) for x in a):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            _same(x, y, f"{where}[{i}]")
    else:
        try:
            assert dumps(a) == dumps(b), where
        except TypeError:                                  # not JSON data: a dtype, ...
            assert a == b, where


def _close(a, b, where: str) -> None:
    """JSON data equal, numbers to 1e-9 relative."""
    if isinstance(a, dict):
        assert isinstance(b, dict) and a.keys() == b.keys(), where
        for k in a:
            _close(a[k], b[k], f"{where}.{k}")
    elif isinstance(a, list):
        assert isinstance(b, list) and len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            _close(x, y, f"{where}[{i}]")
    elif isinstance(a, float) and not isinstance(b, bool) and isinstance(b, (int, float)):
        assert math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12), (where, a, b)
    else:
        assert a == b, (where, a, b)


def _same_result(a: ResultIO, b: ResultIO, where: str) -> None:
    assert type(a) is type(b), where
    for f in dataclasses.fields(a):
        if f.repr:              # fields kept out of the repr are run-time extras, not saved
            _same(getattr(a, f.name), getattr(b, f.name), f"{where}.{f.name}")


@pytest.mark.parametrize("cls", RESULT_TYPES, ids=_name)
def test_result_contract(cls, built, tmp_path):
    name = _name(cls)
    if name not in RESULTS:
        pytest.fail(f"{name} has no factory (test_every_result_type_has_a_factory)")
    result = built(name)

    summary = result.summary()
    assert isinstance(summary, dict) and summary, f"{name}.summary() must be a non-empty dict"
    assert _is_plain(summary), f"{name}.summary() holds something that is not JSON data"
    json.loads(dumps(summary))                                   # strict JSON (nan as null)
    text = result.describe()
    assert isinstance(text, str) and text

    frame = result.to_dataframe()
    assert isinstance(frame, pd.DataFrame) and len(frame) > 0, f"{name}.to_dataframe()"

    path = result.save(tmp_path / "result.json")
    data = json.loads(path.read_text())
    assert data["format"] == cls.FORMAT and cls.FORMAT.startswith("lens-possym/")
    back = cls.load(path)
    _same_result(result, back, name)
    # the same numbers (to rounding: a reloaded tensor may be summed in another order)
    _close(json.loads(dumps(back.summary())), json.loads(dumps(summary)), f"{name}.summary()")
    pd.testing.assert_frame_equal(back.to_dataframe(), frame)
    if any(f.name == "config" for f in dataclasses.fields(result)) and result.config is not None:
        assert back.config == result.config              # the replayable settings inside

    text = repr(result)
    assert len(text) <= MAX_REPR and text.count("\n") <= 3, f"{name} repr: {text!r}"
    assert "tensor(" not in text and "array(" not in text, f"{name} repr: {text!r}"
    assert text.startswith(f"{cls.__name__}(")


def test_formats_are_distinct():
    formats = [c.FORMAT for c in RESULT_TYPES]
    assert len(set(formats)) == len(formats) and all(formats)


# ---- configs ------------------------------------------------------------------------------


def _paper_b_preset():
    from lens_possym.papers.b.presets import ENCODER_PRESETS

    return ENCODER_PRESETS["cpu"]


def _cell():
    from lens_possym.papers.b.cells import Cell

    return Cell("distance", "rope-k2", "faithful", seed=1)


def _multihop_preset():
    from lens_possym.papers.c.presets import MULTIHOP_PRESETS

    return MULTIHOP_PRESETS["paper"]


def _intervention():
    from lens_possym.interventions import Intervention

    return Intervention("ablate_frequencies", {"1.0": "low", "0.2": "0:4"}, mode="mean",
                        per_position=True)


def _intervention_spec():
    from lens_possym.interventions import Intervention, InterventionSpec

    return InterventionSpec((_intervention(), Intervention("patch_heads", "1.0", positions=-1)))


def _make(path: str, **kwargs):
    module, _, name = path.rpartition(".")

    def make():
        return getattr(importlib.import_module(module), name)(**kwargs)
    return make


#: ``(factory of a valid config, {setting: a bad value})`` of every config type
CONFIGS = {
    "lens_possym.scores.config.ScoreConfig": (_make("lens_possym.scores.config.ScoreConfig",
                                                    swap="block", n_blocks=4), {"method": "fast"}),
    "lens_possym.experiments.compare.HeadSetConfig": (
        _make("lens_possym.experiments.compare.HeadSetConfig", n_random=3), {"n_random": -1}),
    "lens_possym.experiments.grid_data.PatchGridConfig": (
        _make("lens_possym.experiments.grid_data.PatchGridConfig", layers=(0, 2)), {"side": "v"}),
    "lens_possym.circuits.attribution.AttributionConfig": (
        _make("lens_possym.circuits.attribution.AttributionConfig", site="frequencies",
              layers=(1,), side="k"), {"saturation_threshold": 2.0}),
    "lens_possym.experiments.sweep.BandSweepConfig": (
        _make("lens_possym.experiments.sweep.BandSweepConfig", bands=2, mode="mean"),
        {"bands": 0}),
    "lens_possym.experiments.importance.ImportanceConfig": (
        _make("lens_possym.experiments.importance.ImportanceConfig", positions=(-1, 2),
              mode="mean", per_position=True), {"top_k": 0}),
    "lens_possym.training.loop.TrainConfig": (
        _make("lens_possym.training.loop.TrainConfig", steps=10, betas=(0.9, 0.95),
              target_accuracy=0.9), {"schedule": "step"}),
    "lens_possym.training.toy.ToyConfig": (
        _make("lens_possym.training.toy.ToyConfig", d_vocab=8, n_ctx=6, angles=(1.0, 0.5, 0.0)),
        {"rope_base": 0.5}),
    "lens_possym.papers.b.encoder.EncoderConfig": (
        _make("lens_possym.papers.b.encoder.EncoderConfig", d_vocab=8, n_classes=3, n_ctx=6,
              scheme="mla", variant="faithful"), {"scheme": "xpos"}),
    "lens_possym.papers.b.presets.Preset": (_paper_b_preset, {"data": "daily"}),
    "lens_possym.papers.b.cells.Cell": (_cell, {"variant": "official"}),
    "lens_possym.papers.c.gptj.GPTJTaskConfig": (
        _make("lens_possym.papers.c.gptj.GPTJTaskConfig", d_vocab=8, rotary_dim=64),
        {"d_model": 100, "n_heads": 3}),
    "lens_possym.papers.c.presets.MultiHopPreset": (_multihop_preset, {"name": ""}),
    "lens_possym.interventions.spec.Intervention": (_intervention, {"mode": "half"}),
    "lens_possym.interventions.spec.InterventionSpec": (_intervention_spec,
                                                        {"interventions": ("12.0",)}),
}

CONFIG_TYPES = _subclasses(JsonConfig)


def test_every_config_type_has_a_factory():
    missing = [_name(c) for c in CONFIG_TYPES if _name(c) not in CONFIGS]
    assert not missing, f"config types without an entry in {__name__}.CONFIGS: {missing}"
    assert set(CONFIGS) <= {_name(c) for c in CONFIG_TYPES}


@pytest.mark.parametrize("cls", CONFIG_TYPES, ids=_name)
def test_config_contract(cls, tmp_path):
    name = _name(cls)
    if name not in CONFIGS:
        pytest.fail(f"{name} has no entry in CONFIGS (test_every_config_type_has_a_factory)")
    make, bad = CONFIGS[name]
    config = make()
    assert type(config) is cls and dataclasses.is_dataclass(cls)
    assert cls.__dataclass_params__.frozen, f"{name} must be a frozen dataclass"

    data = config.to_dict()
    assert _is_plain(data)
    assert cls.from_dict(json.loads(dumps(data))) == config
    assert cls.from_json(config.to_json(tmp_path / "config.json")) == config
    assert cls.from_json(tmp_path / "config.json") == config

    field = next(iter(data))
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(config, field, data[field])
    with pytest.raises(LensPossymError) as error:
        config.replace(**bad)
    message = str(error.value)
    assert any(str(v) in message or repr(v) in message or k in message
               for k, v in bad.items()), message
    with pytest.raises(LensPossymError, match="no_such_setting"):
        cls.from_dict({**data, "no_such_setting": 1})


def test_summary_is_what_to_jsonable_keeps():
    """``summary()`` needs no encoder of its own: ``to_jsonable`` leaves it as it is, but
    for non-finite numbers (``null``)."""
    summary = {"a": 1, "b": [0.5, "x"], "c": {"d": None}}
    assert to_jsonable(summary) == summary


@pytest.mark.parametrize("cls", CONFIG_TYPES, ids=_name)
def test_config_refuses_a_value_of_the_wrong_type(cls):
    """Every number, flag or text setting given a value of another type is a
    LensPossymError naming the setting (not a TypeError from inside the checks)."""
    make, _ = CONFIGS[_name(cls)]
    config = make()
    for f in dataclasses.fields(config):
        value = getattr(config, f.name)
        if isinstance(value, bool):
            wrong = "yes"
        elif isinstance(value, (int, float)):
            wrong = "3"
        elif isinstance(value, str):
            wrong = 3
        else:
            continue
        with pytest.raises(LensPossymError, match=f"{f.name}|{f.name.replace('_', ' ')}"):
            config.replace(**{f.name: wrong})
