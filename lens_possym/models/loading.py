"""Load RoPE language models as TransformerLens ``TransformerBridge`` objects, offline.

Three entry points, all returning a ``TransformerBridge``:

* :func:`load_model` for the models in :mod:`lens_possym.models.registry` (GGUF files
  shipped by pip packages, the extra ``lens-possym[models]``), and for a GGUF file or a
  Hugging Face folder on disk given by its path (what ``--model`` takes on the command
  line),
* :func:`from_gguf` for any GGUF file on disk,
* :func:`from_hf` for a Hugging Face model object already in memory, or a folder saved by
  ``save_pretrained`` (model and tokenizer).

**Device.** Every loader defaults to ``device="auto"``, as the command line does: a CUDA
GPU when torch sees one, else the CPU (:func:`lens_possym._inputs.resolve_device`).
``from_hf`` of a model already in memory leaves it where it is unless ``device`` is given.
(:func:`~lens_possym.models.tiny.tiny_model` builds on the CPU unless told otherwise: its
models are for tests and examples, where a forward pass takes milliseconds.)

Nothing here touches the network: every ``from_pretrained`` call reads a local folder with
``local_files_only=True``, and the bridge is booted from the model object, never by name.
GGUF conversions are cached (see :mod:`lens_possym.models.cache`).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from .._checks import boundary
from .._inputs import resolve_device
from ..errors import (CorruptModelFileError, InvalidSelectionError, ModelNotInstalledError,
                      UnsupportedModelError)
from . import cache
from .overflow import check_activation_range
from .registry import DEFAULT_MODEL, KNOWN_MODELS, KnownModel, known_model

if TYPE_CHECKING:
    from transformer_lens.model_bridge import TransformerBridge

__all__ = ["load_model", "from_gguf", "from_hf"]

logger = logging.getLogger(__name__)


def float_dtype(dtype: Any) -> torch.dtype:
    """``dtype`` if it is a floating ``torch.dtype``, else a clear error."""
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise InvalidSelectionError(
            f"dtype must be a floating torch.dtype (torch.float32, torch.bfloat16, ...), got "
            f"{dtype!r}")
    return dtype


def load_model(
    name: str | Path = DEFAULT_MODEL,
    *,
    device: str | torch.device = "auto",
    dtype: torch.dtype = torch.float32,
    rebuild_cache: bool = False,
) -> TransformerBridge:
    """Load a RoPE model, hooked by TransformerLens, with no network access.

    ``name`` is a known model's name, or the path of a GGUF file or of a Hugging Face
    folder (``config.json``, weights and tokenizer, as ``save_pretrained`` writes them).
    A Hugging Face hub id (``"gpt2"``, ``"org/name"``) loads from the local Hugging Face
    cache when its files are there (:func:`hub_cache_folder`; never downloaded).
    The first load of a known model converts the GGUF file shipped by its pip package
    (about a minute for gemma-3-270m) and caches the result; later loads take a few
    seconds. GGUF files on disk are cached the same way (:func:`from_gguf`).

    Args:
        name: a key of :data:`~lens_possym.models.registry.KNOWN_MODELS`
            (``"gemma-3-270m"``, the default, or ``"smollm2-135m"``), a ``.gguf`` file or
            a Hugging Face folder.
        device: where the model runs: ``"auto"`` (a CUDA GPU when there is one, else the
            CPU; the default, as on the command line), ``"cpu"``, ``"cuda:N"``.
        dtype: the weights' dtype (the cache stores float32); ``torch.bfloat16`` and
            ``torch.float16`` work throughout (docs/families.md, "Half precision").
        rebuild_cache: convert again even if a valid cache entry exists.

    Raises:
        UnknownModelError: ``name`` is neither a known model nor an existing path.
        ModelNotInstalledError: the model's package is not installed (the message gives
            the pip command: ``pip install 'lens-possym[models]'``).
        CorruptModelFileError: the GGUF file or the folder cannot be read.
        InvalidSelectionError: ``dtype`` is not a floating torch dtype (refused before any
            cache entry is read or written).
    """
    dtype = float_dtype(dtype)
    device = resolve_device(device)
    path = Path(name).expanduser()
    if str(name) not in KNOWN_MODELS and path.exists():
        if path.is_dir():
            return from_hf(path, device=device, dtype=dtype)
        return from_gguf(path, device=device, dtype=dtype, rebuild_cache=rebuild_cache)
    if str(name) not in KNOWN_MODELS:
        cached = hub_cache_folder(str(name))
        if cached is not None:  # a hub id whose files are in the local Hugging Face cache
            return from_hf(cached, name=str(name), device=device, dtype=dtype)
    entry = known_model(str(name))
    if not entry.is_installed():
        raise ModelNotInstalledError(
            f"model {name!r} needs the package {entry.package!r}, which is not installed. "
            f"Install it with: {entry.install}"
        )
    sha = entry.content_sha256()
    folder = _ensure_converted(sha, lambda scratch: _materialize(entry, scratch), entry.name,
                               rebuild_cache)
    return _boot_entry(folder, sha, lambda s: _materialize(entry, s), entry.name, device, dtype)


def hub_cache_folder(repo_id: str) -> Path | None:
    """The local Hugging Face cache's snapshot of ``repo_id`` (``"gpt2"``,
    ``"HuggingFaceTB/SmolLM2-135M"``) when it holds a model's ``config.json``, else
    ``None``. Reads the cache only (``local_files_only``; ``$HF_HUB_CACHE``, or
    ``$HF_HOME/hub``, or ``~/.cache/huggingface/hub``): lens-possym never downloads."""
    if not repo_id or repo_id.startswith((".", "/", "~")) or repo_id.endswith(".gguf"):
        return None
    try:
        from huggingface_hub import snapshot_download
    except ImportError:
        return None
    cache_dir = os.environ.get("HF_HUB_CACHE") or (
        os.path.join(os.environ["HF_HOME"], "hub") if os.environ.get("HF_HOME") else None)
    try:
        folder = Path(snapshot_download(repo_id, local_files_only=True, cache_dir=cache_dir))
    except Exception:  # not cached, or not a valid hub id: the caller says what to do
        return None
    return folder if (folder / "config.json").is_file() else None


@boundary
def from_gguf(
    path: str | Path,
    *,
    name: str | None = None,
    device: str | torch.device = "auto",
    dtype: torch.dtype = torch.float32,
    rebuild_cache: bool = False,
) -> TransformerBridge:
    """Load any GGUF checkpoint that ``transformers`` can read (llama, qwen2, gemma3, ...).

    The conversion is cached under the file's sha256, exactly as for :func:`load_model`.
    ``device`` and ``dtype`` as there (a ``dtype`` that is not a floating torch dtype is
    refused before the cache is touched).
    """
    dtype = float_dtype(dtype)
    device = resolve_device(device)
    path = Path(path).expanduser()
    if not path.is_file():
        raise CorruptModelFileError(f"no GGUF file at {path}; check the path")
    sha = cache.file_sha256(path)
    display = name or path.stem
    folder = _ensure_converted(sha, lambda scratch: path, display, rebuild_cache)
    return _boot_entry(folder, sha, lambda scratch: path, display, device, dtype)


def from_hf(hf_model: Any, tokenizer: Any = None, *, name: str | None = None,
            device: str | torch.device | None = None,
            dtype: torch.dtype | None = None) -> TransformerBridge:
    """Wrap a Hugging Face causal LM in a ``TransformerBridge``, offline.

    ``hf_model`` is a model already in memory (with its ``tokenizer``), or the path of a
    folder that ``save_pretrained`` wrote (``config.json``, the weights, and the
    tokenizer's files; ``tokenizer`` then defaults to the folder's), read with
    ``local_files_only=True``.

    Takes care of the traps of doing this by hand: the bridge dispatches on
    ``config.architectures`` (set from the model class when missing, as for GGUF-loaded
    configs), needs a tokenizer that prepends BOS without reloading itself from the Hub,
    and must be booted under a neutral name so that no Hub alias is resolved.

    Args:
        hf_model: e.g. a ``LlamaForCausalLM``, or a folder; it is switched to eager
            attention by the bridge (that is what makes the attention-pattern hooks fire).
        tokenizer: its tokenizer (a folder's own by default).
        name: a label for ``model.cfg.model_name`` (prefixed with ``local/``; a folder's
            name by default).
        device: a model in memory stays on the device of its parameters unless this is
            given; a folder is loaded on ``"auto"`` (a CUDA GPU when there is one).
        dtype: a folder's weights are read in this dtype (float32 by default); a model
            in memory is cast to it when given.
    """
    from transformer_lens.model_bridge import TransformerBridge

    if isinstance(hf_model, (str, Path)):
        folder = Path(hf_model).expanduser()
        hf_model, folder_tokenizer = _read_folder(
            folder, torch.float32 if dtype is None else float_dtype(dtype))
        tokenizer = tokenizer if tokenizer is not None else folder_tokenizer
        name = name or folder.name
        device = resolve_device("auto" if device is None else device)
        hf_model = hf_model.to(device)
    elif getattr(hf_model, "config", None) is None or not callable(
            getattr(hf_model, "parameters", None)):
        raise UnsupportedModelError(
            f"from_hf needs a Hugging Face model (e.g. AutoModelForCausalLM.from_pretrained"
            f"(...)) or the folder it was saved to, got {type(hf_model).__name__}")
    elif dtype is not None:
        hf_model = hf_model.to(dtype=float_dtype(dtype))
    if tokenizer is None:
        raise InvalidSelectionError(
            "from_hf needs the model's tokenizer: from_hf(hf_model, tokenizer), or pass the "
            "folder the model was saved to (its tokenizer is read from there)")
    if not callable(getattr(tokenizer, "encode", None)):
        raise UnsupportedModelError(
            f"from_hf needs the model's tokenizer (AutoTokenizer.from_pretrained(...)), got "
            f"{type(tokenizer).__name__}")
    if device is not None:
        device = resolve_device(device)
        hf_model = hf_model.to(device)
    config = hf_model.config
    if not getattr(config, "architectures", None):
        config.architectures = [type(hf_model).__name__]
    if device is None:
        device = next(hf_model.parameters()).device
    label = "local/" + (name or getattr(config, "model_type", None) or "model")
    tokenizer = _tokenizer_with_bos(tokenizer)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*deprecated.*")
        try:
            bridge = TransformerBridge.boot_transformers(
                label, hf_model=hf_model, tokenizer=tokenizer, device=str(device)
            )
        except ValueError as exc:
            if "architecture" not in str(exc).lower():
                raise
            raise UnsupportedModelError(
                f"TransformerLens has no bridge for {type(hf_model).__name__} "
                f"({getattr(config, 'model_type', '?')}), so lens-possym cannot hook it; "
                "see `lens-possym models` and docs/positional_schemes.md for the families "
                "it reads") from None
    check_activation_range(bridge, name or getattr(config, "model_type", None) or "the model")
    return bridge


# --------------------------------------------------------------------------------------
# internals


def _read_folder(folder: Path, dtype: torch.dtype) -> tuple[Any, Any]:
    """A Hugging Face folder's model and tokenizer, offline."""
    if not folder.is_dir():
        raise CorruptModelFileError(f"no folder at {folder}; check the path")
    if not (folder / "config.json").is_file():
        raise CorruptModelFileError(
            f"{folder} has no config.json, so it is not a Hugging Face model folder; save "
            "one with model.save_pretrained(folder) and tokenizer.save_pretrained(folder), "
            "or pass a .gguf file")
    from transformers import AutoModelForCausalLM, AutoTokenizer

    try:
        model = AutoModelForCausalLM.from_pretrained(folder, dtype=dtype, local_files_only=True)
    except Exception as exc:
        raise CorruptModelFileError(
            f"could not read the model in {folder} ({type(exc).__name__}: "
            f"{' '.join(str(exc).split())[:300]})") from exc
    tokenizer = None
    if any((folder / f).is_file() for f in ("tokenizer.json", "tokenizer_config.json")):
        try:
            tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True)
        except Exception as exc:
            raise CorruptModelFileError(
                f"could not read the tokenizer in {folder} ({type(exc).__name__}: {exc})"
            ) from exc
    return model.eval(), tokenizer


def _materialize(entry: KnownModel, scratch: Path) -> Path:
    """A readable GGUF path for ``entry`` (chunked packages are assembled into ``scratch``)."""
    if entry.assembler is not None:
        return entry.assembler(scratch / f"{entry.name}.gguf")
    return entry.gguf_path()


def _ensure_converted(sha: str, gguf_source, display: str, rebuild: bool) -> Path:
    """The entry for ``sha``, verified (sizes and content digests), converted if needed.

    A corrupt entry is rebuilt from the GGUF file, with a warning naming what was wrong;
    if it cannot be rebuilt (e.g. a read-only cache) it is refused with
    :class:`CorruptModelFileError` rather than loaded.
    """
    folder = cache.entry_dir(sha)
    cache.remove_stale()  # leftovers of conversions that were killed (a listing: cheap)
    problem = None
    if not rebuild and folder.exists():
        problem = cache.entry_problem(folder)
        if problem is None:
            return folder
        logger.warning("cache entry %s for %s is corrupt (%s); rebuilding it", folder, display,
                       problem)
    logger.info("converting %s from GGUF into %s (once; later loads read the cache)", display,
                folder)
    try:
        with tempfile.TemporaryDirectory(prefix=f"gguf.partial-{os.getpid()}-",
                                         dir=_scratch_parent()) as scratch:
            gguf_path = gguf_source(Path(scratch))
            cache.write_entry_atomically(
                folder,
                lambda staging: _convert_gguf(gguf_path, staging, display),
                {"source": display, "gguf_sha256": sha},
            )
    except OSError as exc:
        if isinstance(exc, CorruptModelFileError):
            raise
        why = f"it is corrupt ({problem}) and" if problem else "it"
        raise CorruptModelFileError(
            f"the cached conversion of {display} at {folder}: {why} could not be written "
            f"({exc}). Make the cache writable, delete the entry, or point LENS_POSSYM_CACHE "
            "at a writable folder"
        ) from exc
    return folder


def _scratch_parent() -> str:
    parent = cache.cache_root() / "scratch"
    parent.mkdir(parents=True, exist_ok=True)
    return str(parent)


def _convert_gguf(gguf_path: Path, staging: Path, display: str) -> None:
    """Dequantise a GGUF file into ``staging`` in Hugging Face layout, with a progress
    line on stderr (the first load of a model takes a minute: which step, how long)."""
    from tqdm.auto import tqdm

    stages = tqdm(total=3, desc=f"converting {display} (once; later loads read the cache)",
                  bar_format="{desc}: step {n_fmt}/{total_fmt} {postfix} [{elapsed}]")
    try:
        _convert_gguf_steps(gguf_path, staging, stages)
    finally:
        stages.close()


def _convert_gguf_steps(gguf_path: Path, staging: Path, stages: Any) -> None:
    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder, filename = str(gguf_path.parent), gguf_path.name
    try:
        stages.set_postfix_str("reading the tokenizer")
        tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=filename, local_files_only=True)
        stages.update()
        stages.set_postfix_str("dequantising the weights")
        model = AutoModelForCausalLM.from_pretrained(
            folder, gguf_file=filename, dtype=torch.float32, local_files_only=True
        )
        stages.update()
        stages.set_postfix_str("writing the cache")
    except ImportError as exc:
        raise ModelNotInstalledError(
            f"reading GGUF files needs the 'gguf' package ({exc}); install it with: pip install gguf"
        ) from exc
    except Exception as exc:
        raise CorruptModelFileError(
            f"could not read {gguf_path} as a GGUF model ({type(exc).__name__}: {exc}). "
            "If it came from a pip package, reinstall that package with "
            "`pip install --force-reinstall <package>`; if it is your own file, check it."
        ) from exc
    config = model.config
    # GGUF-loaded configs carry no architectures, and the bridge dispatches on them.
    config.architectures = [type(model).__name__]
    config_dict = config.to_dict()
    config_dict.pop("quantization_config", None)  # the cached weights are plain float32
    (staging / "config.json").write_text(json.dumps(config_dict, indent=1))
    state = {k: v.detach().contiguous() for k, v in model.state_dict().items()}
    if getattr(config, "tie_word_embeddings", False):
        state.pop("lm_head.weight", None)  # rebuilt from the embedding when loaded
    save_file(state, str(staging / "model.safetensors"), metadata={"format": "pt"})
    tokenizer.save_pretrained(staging)
    stages.update()
    del model, state


def _boot_entry(folder: Path, sha: str, gguf_source, display: str, device, dtype):
    try:
        hf_model, tokenizer = _read_entry(folder, dtype)
    except Exception as exc:  # corrupt weights or tokenizer: convert again once
        logger.warning("cached conversion of %s at %s failed to load (%s); rebuilding",
                       display, folder, exc)
        shutil.rmtree(folder, ignore_errors=True)
        folder = _ensure_converted(sha, gguf_source, display, rebuild=True)
        hf_model, tokenizer = _read_entry(folder, dtype)
    hf_model = hf_model.to(device)
    return from_hf(hf_model, tokenizer, name=display, device=device)


def _read_entry(folder: Path, dtype: torch.dtype):
    from transformers import AutoModelForCausalLM

    tokenizer = _load_tokenizer(folder)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=dtype, local_files_only=True)
    return model.eval(), tokenizer


def _load_tokenizer(folder: Path) -> Any:
    """The entry's tokenizer, built straight from its ``tokenizer.json`` (no pickle).

    ``AutoTokenizer.from_pretrained`` spends most of a warm load on gemma-3-270m re-parsing
    the vocabulary and merges of its 262k-token ``tokenizer.json`` in Python, to rebuild a
    backend that the file already describes. Here the class named in
    ``tokenizer_config.json`` is constructed with ``tokenizer_file=`` instead, so the
    ``tokenizers`` library (Rust) reads the JSON once; the config's settings (special
    tokens, padding side, ...) are passed as they are. Both files are plain data: nothing
    in the cache can run code when loaded. Any failure falls back to ``from_pretrained``,
    logged. ``tests/models/test_loading.py`` checks that both give the same tokenizer.
    """
    from transformers import AutoTokenizer

    try:
        return _tokenizer_from_files(folder)
    except Exception as exc:  # an unexpected tokenizer class or config: the slow, sure path
        logger.warning("reading the tokenizer of %s directly failed (%s: %s); using "
                       "AutoTokenizer.from_pretrained", folder, type(exc).__name__, exc)
    return AutoTokenizer.from_pretrained(folder, local_files_only=True, add_bos_token=True)


def _tokenizer_from_files(folder: Path) -> Any:
    from transformers.models.auto.tokenization_auto import tokenizer_class_from_name
    from transformers.tokenization_utils_tokenizers import TokenizersBackend

    config = json.loads((folder / "tokenizer_config.json").read_text())
    name = config.pop("tokenizer_class", None) or "TokenizersBackend"
    cls = tokenizer_class_from_name(name)
    if cls is None or not issubclass(cls, TokenizersBackend):
        # caught by the caller, which falls back to from_pretrained
        raise UnsupportedModelError(f"{name} is not a tokenizers-backed tokenizer class")
    for key in ("is_local", "local_files_only", "name_or_path"):
        config.pop(key, None)
    config["add_bos_token"] = True
    template = folder / "chat_template.jinja"
    if template.is_file() and "chat_template" not in config:
        config["chat_template"] = template.read_text()
    return cls(tokenizer_file=str(folder / "tokenizer.json"), name_or_path=str(folder), **config)


def _tokenizer_with_bos(tokenizer: Any) -> Any:
    """A tokenizer that prepends BOS (TransformerLens's convention) and never reloads by name.

    The bridge re-creates the tokenizer from ``name_or_path`` unless ``add_bos_token`` is
    already set; for a tokenizer built in memory or named after a Hub repo that reload
    would fail offline, so it is saved to a local folder and loaded back from there.
    """
    from transformers import AutoTokenizer

    if tokenizer.bos_token is None or getattr(tokenizer, "add_bos_token", False):
        return tokenizer
    source = getattr(tokenizer, "name_or_path", "") or ""
    if source and Path(source).is_dir():
        return AutoTokenizer.from_pretrained(source, add_bos_token=True, local_files_only=True)
    with tempfile.TemporaryDirectory(prefix="lens_possym_tok_") as folder:
        tokenizer.save_pretrained(folder)
        return AutoTokenizer.from_pretrained(folder, add_bos_token=True, local_files_only=True)
