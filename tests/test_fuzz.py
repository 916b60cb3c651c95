"""Property-based: every public function and every command, driven with generated bad input
(issue 27), in the spirit of ``test_error_contract.py``.

* **Functions.** Every function in the public ``__all__`` of the packages below is either a
  case here (or in ``test_error_contract.py``) or listed in :data:`EXEMPT` with the reason;
  :func:`test_every_public_function_is_driven_or_exempt` fails on a new one. A case is a
  good call on the tiny llama model; each example replaces one argument (any argument that
  is user input: selections, prompts, tokens, numbers, modes, names, configs, files) by a
  generated value, often a bad one. Whatever is raised must be a ``LensPossymError``;
  whatever is returned must pass :func:`_check_result` (no ``nan`` where a number is due,
  scores in their range, shapes that fit).
* **Commands.** Every subcommand, with options drawn from its own parser and values from
  a pool of bad and good strings: the command ends with exit 0, 1 or 2 and, on failure,
  one line that is not "internal error"; never a traceback.

Arguments that are *objects* the toolkit made (a model, a RopeSpec, a PosSymScores, a
task) are kept good: passing a string where a model is expected is a programming error,
not an input. Examples are few per target (derandomized, a few seconds each).
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
import io
import math
import os
from pathlib import Path
from typing import Any, Callable

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import lens_possym as lp
from lens_possym.errors import LensPossymError
from tests.test_error_contract import CASE_NAMES as CONTRACT_CASES
from tests.test_error_contract import KIND, anything

MODULES = ["lens_possym", "lens_possym.interventions", "lens_possym.scores", "lens_possym.tasks",
           "lens_possym.models", "lens_possym.positions", "lens_possym.viz",
           "lens_possym.report", "lens_possym.training", "lens_possym.papers.a",
           "lens_possym.papers.b", "lens_possym.papers.c"]
PROMPT = "Alice likes red . Bob likes blue . What color does Bob like ?"
FAST = settings(max_examples=15, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.function_scoped_fixture,
                                       HealthCheck.too_slow, HealthCheck.data_too_large])

# parameters that hold objects the toolkit made: kept good
OBJECTS = {"model", "spec", "specs", "scores", "factors", "swaps", "inputs", "task", "fn",
           "ax", "axes", "sweep", "result", "results", "norms", "fl", "traj", "magnitudes",
           "hf_model", "tokenizer", "template", "executor", "callbacks", "log", "metric",
           "patching_metric", "clean_cache", "patch_setter", "progress", "means", "mean",
           "batch", "pairs", "source_z", "figures", "train_config"}

texts = st.one_of(st.text(max_size=12), st.sampled_from(
    ["", " ", "\x00", "Alice likes red", "１", "0,,1", "1.0,1.0", "nan", "-1", "all", "x" * 50]))
more_kinds = {
    "input": st.one_of(anything, texts, st.sampled_from(
        [torch.zeros(1, 0, dtype=torch.long), torch.tensor([[1, 2, 3]], dtype=torch.int8),
         torch.tensor([[1.0, 2.0]]), torch.tensor([[True, False]]), [[1, 2], [3, 4]],
         " ".join(["red"] * 300), ["Alice likes red", "Bob"]])),
    "prompts": st.one_of(anything, st.lists(texts, max_size=3),
                         st.sampled_from([[[True, 5, 6]], [[1.5, 2]], [[]], [""]])),
    "reference": st.one_of(anything, texts),
    "source": st.one_of(anything, texts),
    "tokens": st.one_of(anything, st.sampled_from([torch.tensor([[1, 2, 3]]), torch.zeros(0)])),
    "config": st.one_of(anything, st.sampled_from([{"tau": 1.0}, "exact", 3])),
    "path": st.one_of(anything, texts), "run_dir": st.one_of(anything, texts),
    "out_dir": st.one_of(anything, texts),
    "effect": st.one_of(anything, texts), "key": st.one_of(anything, texts),
    "device": st.sampled_from(["cuda", "cuda:7", "tpu", "", "meta", 3, None, "cpu"]),
    "dtype": st.sampled_from(["float16", torch.int64, 3, None, "x", torch.float32]),
    "view": st.one_of(anything, texts), "which": st.one_of(anything, texts),
    "cosine": st.one_of(anything, texts), "kind": st.one_of(anything, texts),
    "swap": st.one_of(anything, texts), "corruption": st.one_of(anything, texts),
    "shard_size": st.integers(-2, 3), "group_size": st.integers(-2, 3),
    "stop_after": st.integers(-2, 3), "n_prompts": st.integers(-2, 4),
    "n_resamples": st.integers(-2, 50), "confidence": st.floats(allow_nan=True),
    "probe": st.one_of(st.integers(-2, 4), anything),
    "max_elements": st.one_of(st.integers(-2, 64), anything),
}


def strategy(param: str):
    return more_kinds.get(param) or KIND.get(param, anything)


# ---- the cases: name -> builder(world) -> (args, kwargs, run, check) ------------------------


def _world():
    model = lp.tiny_model("llama")
    tokens = model.to_tokens(PROMPT)
    specs = lp.rope_specs(model)
    scores = lp.swap_scores(model, tokens, layers=[1])
    inputs = lp.capture_attention_inputs(model, tokens, 1)[1]
    factors = lp.scores.cross_logit_factors(inputs, [0, 1])
    swaps = lp.scores.swap_set("token", factors.query_position, factors.visible)
    task = lp.binding_task(model, n_prompts=2, n_pairs=2)
    return dict(model=model, tokens=tokens, specs=specs, spec=specs[1], scores=scores,
                inputs=inputs, factors=factors, swaps=swaps, task=task,
                norms=lp.frequency_norms(model, tokens, layers=[1]),
                fl=lp.frequency_logits(model, tokens, 1))


def _enter(cm):
    with cm:
        pass


CASES: dict[str, Callable[[dict], tuple]] = {
    "frequency_logits": lambda w: ((w["model"], w["tokens"], 1), dict(heads=[0]), None),
    "kernels_note": lambda w: (({"MKL_CBWR": "AVX2"}, "a run trained here differs"), {}, None),
    "frequency_norms": lambda w: ((w["model"], w["tokens"]), dict(layers=[1]), None),
    "swap_scores": lambda w: ((w["model"], w["tokens"]), dict(layers=[1], heads=[0]), None),
    "capture_attention_inputs": lambda w: ((w["model"], w["tokens"], [1]), {}, None),
    "dataset_profile": lambda w: ((w["model"], [PROMPT, "Carol likes green ."]),
                                  dict(layers=[1], per_frequency=False, shard_size=1), None),
    "read_prompts": lambda w: ((w["prompts_file"],), {}, list),
    "task_check": lambda w: ((0.5, 0.25), dict(what="top-1 accuracy"), dict),
    "cross_logit_factors": lambda w: ((w["inputs"], [0, 1]), {}, None),
    "exact_swap_scores": lambda w: ((w["factors"], w["swaps"]), dict(tau=1e-2), None),
    "rerun_swap_scores": lambda w: ((w["model"], w["tokens"], 1, [0], w["swaps"]),
                                    dict(per_frequency=False), None),
    "exclusion_from_factors": lambda w: ((w["factors"], torch.arange(1, 6)), {}, None),
    "exclusion_from_matrix": lambda w: ((torch.randn(2, 5, 5),), {}, None),
    "exclusion_by_enumeration": lambda w: ((w["model"], w["tokens"], 1, [0],
                                            torch.tensor([1, 2, 3])), {}, None),
    "swap_set": lambda w: (("token", 5, torch.ones(8, dtype=torch.bool)), {}, None),
    "swap_cosines": lambda w: ((torch.tensor(0.1), torch.tensor(0.2), torch.tensor(0.3),
                                torch.tensor(0.4)), {}, None),
    "clamped_cosines": lambda w: ((torch.tensor(0.1), torch.tensor(0.2), torch.tensor(0.3),
                                   torch.tensor(0.4)), {}, None),
    "pearson_r": lambda w: ((torch.randn(5), torch.randn(5)), {}, None),
    "declare_hook": lambda w: ((lambda t, hook: t, "observe"), {}, None),
    "frequency_means": lambda w: ((w["model"], w["tokens"]), dict(layers=[1]), None),
    "ablate_frequencies_hooks": lambda w: ((w["model"], "1.0"), dict(freqs="0:2"), None),
    "ablate_frequencies_hook": lambda w: ((w["spec"], [0], "0:2"), {}, None),
    "ablate_heads": lambda w: ((w["model"], "1.0"), {}, _enter),
    "ablate_heads_hooks": lambda w: ((w["model"], "1.0"), {}, None),
    "ablate_heads_hook": lambda w: (([0],), {}, None),
    "head_means": lambda w: ((w["model"], w["tokens"]), dict(layers=[1]), None),
    "patch_heads_hooks": lambda w: ((w["model"], w["tokens"], "1.0"), {}, None),
    "patch_frequencies_hooks": lambda w: ((w["model"], w["tokens"], "1.0"), dict(freqs="0"),
                                          None),
    "permute_content_hooks": lambda w: ((w["model"], 1, list(range(w["tokens"].shape[1]))),
                                        {}, None),
    "permute_content_hook": lambda w: (([1, 0, 2],), {}, None),
    "swap_permutation": lambda w: ((5, 1, 3), {}, None),
    "frequency_index_df": lambda w: ((w["model"],), dict(layers=[1], heads=[0]), None),
    "qk_activation_name": lambda w: ((w["model"],), {}, None),
    "source_activations": lambda w: ((w["model"], w["tokens"], ["blocks.1.attn.hook_q"]), {},
                                     None),
    "resolve_bands": lambda w: ((w["spec"], 3), {}, None),
    "head_importance": lambda w: ((w["model"], w["task"]), dict(layers=[1], progress=False),
                                  None),
    "standard_error": lambda w: ((torch.randn(4, 3),), {}, None),
    "bootstrap_interval": lambda w: ((torch.randn(6),), dict(n_resamples=20), None),
    "uncertainty": lambda w: ((torch.randn(6),), dict(n_resamples=20), None),
    "evaluate_binding": lambda w: ((w["model"], w["task"]), {}, None),
    "binding_pairs": lambda w: ((w["model"],), dict(n_prompts=2, n_pairs=2), None),
    "word_distance_task": lambda w: ((w["model"],), dict(n_prompts=2, n_words=4), None),
    "word_distance_pairs": lambda w: ((w["model"],), dict(n_prompts=2, n_words=4), None),
    "counterfactual_pairs": lambda w: ((w["model"], "binding"), dict(n_prompts=2, n_pairs=2),
                                       None),
    "prompt_pairs": lambda w: ((w["model"], ["Alice likes red"], ["Bob likes red"],
                                [" red"], [" blue"]), {}, None),
    "schemes": lambda w: ((w["model"],), {}, None),
    "positional_scheme": lambda w: ((w["model"], 1), {}, None),
    "causal_visible": lambda w: ((5, 8), {}, None),
    "alibi_slopes": lambda w: ((4,), {}, None),
    "t5_bucket": lambda w: ((torch.arange(-5, 5),), dict(bidirectional=True), None),
    "toeplitz_terms": lambda w: ((w["model"], w["tokens"], 1), {}, None),
    "toeplitz_magnitudes": lambda w: ((w["model"], w["tokens"]), dict(layers=[1]), None),
    "rope_specs": lambda w: ((w["model"],), {}, None),
    "tiny_hf_model": lambda w: (("llama",), dict(n_layers=1), None),
    "from_gguf": lambda w: ((w["prompts_file"],), {}, None),
    "rope_schedule": lambda w: ((4,), {}, None),
    "w_max_positional": lambda w: ((0.3, 5, 2.0), {}, None),
    "w_max_symbolic": lambda w: ((0.3, 5, 2.0), {}, None),
    "pairs_with": lambda w: ((0, [1, 2, 3]), {}, None),
    "single_ids": lambda w: (([0, 1, 2],), {}, None),
    "latest_checkpoint": lambda w: ((w["tmp"],), {}, None),
    "load_checkpoint": lambda w: ((w["prompts_file"],), {}, None),
    "resume": lambda w: ((w["tmp"],), {}, None),
    "describe": lambda w: (("tau",), {}, None),
    "read_checkpoint": lambda w: ((w["prompts_file"],), {}, None),
    "checkpoint_paths": lambda w: ((w["tmp"],), {}, None),
    "format_value": lambda w: ((0.5,), {}, None),
    "logit_share": lambda w: ((w["norms"].q,), {}, None),
    "atlas_values": lambda w: ((w["scores"], "sym"), {}, None),
    "plot_usage": lambda w: ((w["norms"], 1), {}, "close"),
    "plot_logit_norms": lambda w: ((w["fl"],), {}, "close"),
    "plot_frequency_atlas": lambda w: ((w["scores"],), {}, "close"),
    "plot_frequency_plane": lambda w: ((w["scores"], 1, 0), {}, "close"),
    "plot_score_heatmaps": lambda w: ((w["scores"],), {}, "close"),
    "plot_frequency_profile": lambda w: ((torch.rand(8), torch.rand(8)), {}, "close"),
    "plot_swap_attention": lambda w: ((w["model"], w["tokens"], {"a": (1, 0)}), {}, "close"),
    "top_swap_attention": lambda w: ((w["inputs"], [0]), {}, None),
    "pick_example_heads": lambda w: ((w["scores"],), {}, None),
    "frequency_profile_figure": lambda w: ((w["scores"], 1, 0), {}, None),
    "atlas_figure": lambda w: ((w["scores"],), {}, None),
    "plot_effects": lambda w: ((["a", "b"], torch.tensor([0.1, -0.2])), {}, "close"),
    "compare_with_random_heads": lambda w: (
        (w["model"], w["tokens"], {"last": lambda logits: logits[:, -1].mean(-1)}, "1.0"),
        dict(progress=False), None),
    "from_hf": lambda w: ((w["hf"][0], w["hf"][1]), {}, None),
    "patch_frequencies_hook": lambda w: ((w["spec"], torch.zeros(1, 14, 64), [0], "0"), {},
                                         None),
    "patch_heads_hook": lambda w: ((torch.zeros(1, 14, 4, 16), [0]), {}, None),
}

# what is not driven here, and why (each a whole category, not a hard case)
EXEMPT = {
    # their only arguments are results and figures the toolkit made (OBJECTS)
    **dict.fromkeys(["plane_figure", "heatmaps_figure", "plot_band_sweep", "plot_training_curves",
                     "plot_circuit",
                     "plot_accuracy_by_position", "plot_accuracy_vs_freq",
                     "plot_scores_vs_freq", "plot_qk_trajectory", "plot_toeplitz_terms",
                     "plot_usage_heatmap", "plot_w_max", "plot_ablation_comparison",
                     "frequency_axis", "save_sweep_figures", "save_profile_figures",
                     "profile_report", "profile_details", "render_profile_report",
                     "write_report", "band_sweep_report", "train_report",
                     "toy_sweep_report", "ablation_report", "attention_view_html",
                     "plot_patching_grid", "plot_patching_top",
                     "swap_attention_figure", "binding_logit_diff", "binding_metrics",
                     "evaluate_word_distance", "check_words", "frequency_patch_setter",
                     "rope_hadamard_terms", "frequency_axes", "head_importance_report",
                     "batch_check"],
                    "arguments are objects the toolkit made"),
    # TransformerLens's activation-patching grids with lens-possym's setters: their
    # arguments are TransformerLens's (a cache, a metric), driven by patch_grid's tests
    **dict.fromkeys(["generic_patch_grid", "patch_attn_out", "patch_attn_out_all_pos",
                     "patch_frequencies_grid", "patch_head_out_all_pos",
                     "patch_head_out_by_pos", "patch_mlp_out", "patch_mlp_out_all_pos",
                     "patch_resid_pre", "patch_resid_pre_all_pos", "patch_grid"],
                    "TransformerLens patching grids"),
    # training and toy constructions (paper code, moving to lens_possym/papers): configs
    # are driven through TrainConfig/ToyConfig/make_task in test_error_contract.py
    **dict.fromkeys(["train", "evaluation_at", "sweep", "frequency_sweep", "evaluate",
                     "checkpoint_scores", "head_scores", "build_index_head",
                     "build_partial_induction_head",
                     "build_retrieval_head", "w_max_by_position", "toy_config_for"],
                    "paper training code; its configs are driven elsewhere"),
    # the plumbing of hand-built heads (lens_possym.training.constructions): its arguments
    # are a one-hot toy model and a task the toolkit made; driven through build_*_head
    # (tests/papers/a/test_constructions.py, tests/papers/c/test_constructions.py)
    **dict.fromkeys(["check_construction_site", "frequency_pair", "radius_for",
                     "reset_to_head", "set_pair", "write_copy_path"],
                    "hand-built head plumbing on a toy model the toolkit made"),
    # a real model by name or memory: slow, and their inputs are driven in test_loading.py
    **dict.fromkeys(["list_models", "tiny_tokenizer"], "no arguments"),
    **dict.fromkeys(["register_model", "register_task"],
                    "plug-in registration (a name and a class)"),
    "save_checkpoint": "arguments are objects the toolkit made",
    "cpu_kernels": "no arguments (it reads the environment)",
}
# paper B's and C's experiments (lens_possym/papers/b, c): each reproduces one paper's
# runs from its presets; their settings are configs driven in test_error_contract.py
EXEMPT_PACKAGES = ("lens_possym.papers.b", "lens_possym.papers.c")


@pytest.fixture(scope="module", autouse=True)
def in_a_temporary_folder(tmp_path_factory):
    """The fuzz draws relative paths ("", "x", "Alice likes red") for out_dir, path and
    run_dir: whatever a call writes there lands in a temporary folder, never in the
    checkout (an empty out_dir once left dataset.json, profile.json, shards/ and .lock at
    the repository's root)."""
    cwd = os.getcwd()
    os.chdir(tmp_path_factory.mktemp("fuzz-cwd"))
    yield
    os.chdir(cwd)


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    w = _world()
    tmp = tmp_path_factory.mktemp("fuzz")
    w["tmp"] = tmp
    w["prompts_file"] = tmp / "prompts.txt"
    w["prompts_file"].write_text(PROMPT + "\n")
    w["hf"] = lp.models.tiny_hf_model("llama", n_layers=1)
    return w


def _public_functions(exempt_packages: bool = True) -> dict[str, Callable]:
    out = {}
    for name in MODULES:
        module = importlib.import_module(name)
        if exempt_packages and name in EXEMPT_PACKAGES:
            continue
        for attr in getattr(module, "__all__", []):
            obj = getattr(module, attr, None)
            if inspect.isfunction(obj) and attr not in out:
                out[attr] = obj
    return out


def test_every_public_function_is_driven_or_exempt():
    functions = _public_functions()
    covered = set(CASES) | set(CONTRACT_CASES) | set(EXEMPT)
    missing = sorted(set(functions) - covered)
    assert not missing, (f"public functions {missing} are neither driven by tests/test_fuzz.py "
                         "(CASES) or tests/test_error_contract.py, nor EXEMPT with a reason")
    stale = sorted((set(CASES) | set(EXEMPT)) - set(functions))
    assert not stale, f"{stale} are no public functions any more: update tests/test_fuzz.py"
    assert len(set(CASES) | set(CONTRACT_CASES)) >= 0.6 * len(functions)


def _check_result(result: Any) -> None:
    """A returned value must be usable: no nan where a number is due, scores in range."""
    from lens_possym.scores import PosSymScores

    if isinstance(result, PosSymScores):
        for layer in result.layers:
            scored = result.pos[layer].isfinite()
            assert scored.any(), f"layer {layer} was scored but holds no number"
            for name in ("pos", "sym"):
                values = getattr(result, name)[layer][scored]
                assert values.isfinite().all() and (values >= -1e-9).all() and (
                    values <= 1 + 1e-9).all(), (name, values)
    elif isinstance(result, torch.Tensor) and result.is_floating_point():
        assert not result.isinf().any(), "an inf was returned"
    elif isinstance(result, float):
        assert not math.isinf(result)
    elif isinstance(result, (tuple, list)) and len(result) < 50:
        for item in result:
            _check_result(item)


def _call(fn, args, kwargs, param, value):
    sig = inspect.signature(fn)
    names = list(sig.parameters)
    args = list(args)
    if param in names[: len(args)]:
        args[names.index(param)] = value
    else:
        kwargs = {**kwargs, param: value}
    return fn(*args, **kwargs)


def _params(fn, args) -> list[str]:
    sig = inspect.signature(fn)
    out = []
    for p in sig.parameters.values():
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) or p.name in OBJECTS:
            continue
        out.append(p.name)
    return out


@pytest.mark.parametrize("name", sorted(CASES))
@FAST
@given(data=st.data())
def test_a_public_function_raises_only_lens_possym_errors(world, name, data):
    fn = _public_functions()[name]
    args, kwargs, run = CASES[name](world)
    params = _params(fn, args)
    if not params:
        pytest.skip(f"{name} takes only objects")
    param = data.draw(st.sampled_from(params), label="argument")
    value = data.draw(strategy(param), label="value")
    if name in ("tiny_hf_model",) and param in ("n_ctx", "d_model", "n_layers") and isinstance(
            value, int) and value > 64:
        return  # a good size, and a slow one
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            result = _call(fn, args, kwargs, param, value)
            if callable(run):
                result = run(result)
            elif run == "close":
                import matplotlib.pyplot as plt

                plt.close("all")
                result = None
    except LensPossymError:
        return
    except Exception as exc:  # noqa: BLE001 - what this test is about
        pytest.fail(f"{name}({param}={value!r}) raised {type(exc).__name__}: {exc}")
    _check_result(result)


def test_the_good_calls_are_good(world):
    """Each case's own call succeeds: the examples above start from a working call."""
    failed = {}
    for name, build in CASES.items():
        if name in ("from_gguf", "load_checkpoint", "resume", "latest_checkpoint",
                    "read_checkpoint", "checkpoint_paths"):
            continue  # given a file that is not one on purpose
        args, kwargs, run = build(world)
        try:
            result = _public_functions()[name](*args, **kwargs)
            if callable(run):
                run(result)
        except Exception as exc:  # noqa: BLE001
            failed[name] = f"{type(exc).__name__}: {exc}"
    import matplotlib.pyplot as plt

    plt.close("all")
    assert not failed, failed


# ---- commands ----------------------------------------------------------------------------------

VALUES = ["", "-1", "0", "1", "2", "3", "x", "nan", "inf", "1e-320", "0,,1", "1.0,1.0",
          "\uff11", "0-3", "0:2", "all", "1.0", "1.*", "q", "qk", "zero", "mean", "cuda",
          "cpu", "float16", "/dev/null", "NOFILE", "BINARY", "FOLDER", "PROMPTS"]
# options whose good values would run long, with the values that keep them short
SMALL = {"--steps": ["-1", "0", "1", "2", "x"], "--n-prompts": ["-1", "0", "1", "2", "x"],
         "--length": ["-1", "0", "3", "x", "100000"], "--preset": ["cpu", "x"],
         "--eval-every": ["0", "1", "x"], "--batch-size": ["-1", "0", "2", "x"],
         "--n-tokens": ["-1", "0", "3", "9", "x"], "--seeds": ["0", "0,a", ""],
         "--ray": ["nonsense::x", "ray://"], "--ray-cpus": ["0", "1", "x"],
         "--threads": ["0", "1", "x"], "--vocab": ["-1", "0", "4", "x"],
         "--n-pairs": ["0", "1", "2", "x"], "--n-words": ["0", "2", "4", "x"]}
BASE = {  # the least each command needs to run quickly on the tiny model
    "models": [], "decompose": ["--layer", "1"],
    "profile": ["--n-prompts", "2", "--n-pairs", "2", "--no-report", "--layers", "1"],
    "ablate": ["--n-prompts", "2", "--n-pairs", "2", "--heads", "1.0"],
    "patch": ["--n-prompts", "2", "--n-pairs", "2", "--layers", "1"],
    "heads": ["--n-prompts", "2", "--n-pairs", "2", "--layers", "1"],
    "circuit": ["--n-prompts", "2", "--n-pairs", "2", "--heads-top", "2", "--no-labels"],
    "dataset": ["--prompts", "PROMPTS"],
    "train": ["--task", "index", "--steps", "2", "--eval-every", "1", "--length", "4",
              "--vocab", "4", "--out", "run"],
    "sweep": ["--task", "index", "--steps", "2", "--eval-every", "1", "--length", "4",
              "--vocab", "4", "--seeds", "0", "--ids", "0", "--no-scores", "--out", "sweep"],
    "encoder": ["--task", "distance", "--scheme", "rope", "--steps", "2", "--out", "enc"],
    "multihop": ["lengths"],
    # the pipeline of paper B (lens_possym/papers/b/pipeline.py): its report, from records
    # that are not there (one line, exit 1; its steps' options are tested in tests/papers/b)
    "paper-b": ["report", "--preset", "paper-length", "--records", "NOFILE", "--out", "FOLDER"],
    # paper C's (lens_possym/papers/c/pipeline.py): its verdicts, from a folder with no
    # report in it (one line, exit 1; its steps' options are tested in tests/papers/c)
    "paper-c": ["verdicts", "--docs", "FOLDER"],
}


def _subparsers():
    from lens_possym.cli import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    return sub.choices


def test_every_command_is_driven():
    assert sorted(_subparsers()) == sorted(BASE)


def _options(name: str) -> list[tuple[str, list[str]]]:
    out = []
    for action in _subparsers()[name]._actions:
        if not action.option_strings or action.dest in ("help", "debug", "model"):
            continue
        flag = action.option_strings[-1]
        if action.nargs == 0:
            out.append((flag, ()))
            continue
        choices = [str(c) for c in action.choices] if action.choices else []
        out.append((flag, tuple(SMALL.get(flag, choices + VALUES))))
    return out


def _resolve(value: str, where: Path) -> str:
    files = {"NOFILE": where / "missing.txt", "BINARY": where / "binary.txt",
             "FOLDER": where, "PROMPTS": where / "prompts.txt"}
    return str(files[value]) if value in files else value


@pytest.mark.parametrize("command", sorted(BASE))
@settings(max_examples=10, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(data=st.data())
def test_a_command_answers_bad_input_in_one_line(command, data, tmp_path_factory):
    from lens_possym.cli import main

    where = tmp_path_factory.mktemp("cmd")
    (where / "binary.txt").write_bytes(b"\xff\xfe\x00\x81\x00")
    (where / "prompts.txt").write_text("Alice likes red . Bob likes blue\n")
    options = _options(command)
    argv = [command] + list(BASE[command])
    if any(flag == "--device" for flag, _ in options):
        argv[1:1] = ["--model", "tiny-llama", "--device", "cpu"]
    for flag, values in data.draw(st.lists(st.sampled_from(options), max_size=3, unique=True)
                                  if options else st.just([]), label="options"):
        argv.append(flag)
        if values:
            argv.append(data.draw(st.sampled_from(values), label=flag))
    argv = [_resolve(a, where) for a in argv]
    err = io.StringIO()
    cwd = os.getcwd()
    os.chdir(where)
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            code = main(argv)
    finally:
        os.chdir(cwd)
        import matplotlib.pyplot as plt

        plt.close("all")
    text = err.getvalue()
    lines = [line for line in text.splitlines() if line.startswith("lens-possym")
             and ("error" in line or "interrupted" in line)]
    assert code in (0, 1, 2), (argv, code, text)
    assert "Traceback" not in text and "internal error" not in text, (argv, text)
    if code != 0:
        usage = [line for line in text.splitlines() if "error:" in line]
        assert len(lines) + len(usage) >= 1 and len(set(lines)) <= 1, (argv, text)


# ---- the API attack of issue 39: wrong types, absurd sizes, undefined numbers --------------

def _attack_cases(tiny=None):
    from lens_possym.interventions import FrequencyGate, standard_error, uncertainty
    from lens_possym.positions.bias import t5_bucket
    from lens_possym.scores import dataset_profile, pearson_r, swap_set
    from lens_possym.training import register_task

    class Impostor:
        pass

    def model():
        return tiny

    return {
        "dataset_profile(m, None)": lambda: dataset_profile(model(), None),
        "tiny_model(dtype='float64')": lambda: lp.tiny_model(dtype="float64"),
        "tiny_model(dtype=torch.int8)": lambda: lp.tiny_model(dtype=torch.int8),
        "tiny_model(device='mps')": lambda: lp.tiny_model(device="mps"),
        "tiny_model(n_layers=10**6)": lambda: lp.tiny_model(n_layers=10 ** 6),
        "tiny_model(d_model=4096, n_layers=64)": lambda: lp.tiny_model(d_model=4096,
                                                                        n_layers=64),
        "binding_task(n_prompts=2.5)": lambda: lp.binding_task(model(), n_prompts=2.5),
        "binding_task(n_prompts=10**9)": lambda: lp.binding_task(model(), n_prompts=10 ** 9),
        "random_token_prompts(n_prompts=10**9)": lambda: lp.random_token_prompts(
            model(), n_prompts=10 ** 9),
        "band_sweep(metric=5)": lambda: lp.band_sweep(model(), PROMPT, metric=5),
        "t5_bucket(num_buckets=0)": lambda: t5_bucket(torch.arange(4), bidirectional=False,
                                                      num_buckets=0),
        "t5_bucket(num_buckets=2, bidirectional)": lambda: t5_bucket(
            torch.arange(4), bidirectional=True, num_buckets=2),
        "swap_set(visible mis-sized)": lambda: swap_set("token", 7, torch.ones(3, dtype=bool)),
        "register_task('index', X)": lambda: register_task("index", Impostor),
        "pearson_r(constant)": lambda: pearson_r(torch.arange(4.0), torch.ones(4)),
        "standard_error(one value)": lambda: standard_error(torch.tensor([[2.0]])),
        "uncertainty(a nan value)": lambda: uncertainty(torch.tensor([[1.0, float("nan")]])),
        "FrequencyGate(init=nan)": lambda: FrequencyGate(lp.rope_spec(model(), 0),
                                                          init=float("nan")),
    }


ATTACK = sorted(_attack_cases())


@pytest.fixture(scope="module")
def tiny_llama():
    return lp.tiny_model("llama")


@pytest.mark.parametrize("name", ATTACK)
def test_the_attack_s_inputs_are_refused_at_once(name, tiny_llama):
    """Each raised a foreign exception, hung (no size check) or returned nan before."""
    import signal

    case = _attack_cases(tiny_llama)[name]
    from lens_possym.interventions import FrequencyGate  # noqa: F401 - imported untimed

    def hung(*_):
        raise TimeoutError(f"{name} still running after 20 s: no size check")

    before = signal.signal(signal.SIGALRM, hung)
    signal.alarm(20)
    try:
        with pytest.raises(LensPossymError):
            case()
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, before)


def test_refused_undefined_numbers_are_still_there_on_request(tiny_llama):
    from lens_possym.interventions import FrequencyGate, standard_error, uncertainty
    from lens_possym.scores import pearson_r
    from lens_possym.training import TASKS, register_task

    assert math.isnan(pearson_r(torch.arange(4.0), torch.ones(4), undefined="nan"))
    assert standard_error(torch.tensor([[2.0]]), undefined="nan").isnan().all()
    assert uncertainty(torch.tensor([[1.0, float("nan")]]), allow_nan=True).mean.isnan().all()
    assert uncertainty(torch.tensor([[3.0]])).se.isnan().all()  # one prompt: no spread
    gate = FrequencyGate(lp.rope_spec(tiny_llama, 0), init=0.5, kind="raw")
    assert gate.gate_values().eq(0.5).all()

    class Mine:
        pass

    original = TASKS["index"]
    register_task("index", original)  # the same class again: fine
    register_task("index", Mine, replace=True)
    try:
        assert TASKS["index"] is Mine
    finally:
        TASKS.unregister("index")
    assert TASKS["index"] is original
