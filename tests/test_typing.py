"""The model Protocol admits the models lens-possym reads and refuses others."""

from __future__ import annotations

import torch

import lens_possym as lp
from lens_possym.training.toy import ToyConfig, ToyTransformer
from lens_possym.typing import HookedModel


def test_bridges_and_hooked_modules_are_hooked_models():
    assert isinstance(lp.tiny_model("llama"), HookedModel)
    toy = ToyTransformer(ToyConfig(d_vocab=8, n_ctx=8, n_layers=1, n_heads=1, d_head=4))
    assert isinstance(toy, HookedModel)
    assert not isinstance(torch.nn.Linear(2, 2), HookedModel)


def test_hook_factories_return_what_the_protocol_attaches():
    model = lp.tiny_model("llama")
    hooks = lp.interventions.ablate_frequencies_hooks(model, "1.0", freqs="low")
    assert hooks and all(isinstance(name, str) and name in model.hook_dict for name, _ in hooks)
    tokens = model.to_tokens("Alice likes red")
    with model.hooks(fwd_hooks=hooks):
        edited = model(tokens)
    assert not torch.equal(edited, model(tokens))


def _public_functions():
    """Every function named in a module's ``__all__``, and the public methods of every
    class named there, once each (the module that defines it names it)."""
    import importlib
    import inspect
    import pkgutil

    seen = {}
    for info in pkgutil.walk_packages(lp.__path__, "lens_possym."):
        if info.name.endswith("__main__"):
            continue
        module = importlib.import_module(info.name)
        for name in getattr(module, "__all__", []):
            obj = getattr(module, name, None)
            if inspect.isfunction(obj):
                seen.setdefault(f"{obj.__module__}.{obj.__qualname__}", obj)
            elif inspect.isclass(obj) and obj.__module__.startswith("lens_possym"):
                for attr, member in vars(obj).items():
                    if not attr.startswith("_") and inspect.isfunction(member):
                        seen.setdefault(f"{obj.__module__}.{obj.__qualname__}.{attr}", member)
    return seen


def test_every_public_function_says_what_it_returns():
    functions = _public_functions()
    assert len(functions) > 400  # the walk found the package
    missing = sorted(name for name, fn in functions.items() if "return" not in fn.__annotations__)
    assert missing == []
