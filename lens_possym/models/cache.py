"""Where converted models live, and how a cache entry is named, validated and written.

A GGUF file is slow to load (GGUF parsing, dequantisation, tokenizer conversion: about a
minute for gemma-3-270m), so the first load writes the dequantised weights, the config and
the tokenizer in Hugging Face layout under::

    <cache root>/models/<first 20 hex digits of the GGUF's sha256>/
        config.json  model.safetensors  tokenizer.json  tokenizer_config.json  manifest.json

and later loads read that folder (seconds). The folder name is the GGUF's content hash,
so a different file can never be served from a stale entry. ``manifest.json`` is written
last and records the size of every file; an entry whose manifest is missing, of another
format version, or disagrees with the files is treated as corrupt and rebuilt.

Hashing a 250 MB file on every warm load would cost a second, so the hash of each GGUF
path is memoised in ``<cache root>/fingerprints.json`` together with the file's size and
modification time; a file that changed is hashed again.

The cache root is ``$LENS_POSSYM_CACHE`` if set, else ``$XDG_CACHE_HOME/lens_possym``,
else ``~/.cache/lens_possym``.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path

__all__ = ["cache_root", "file_sha256", "entry_dir", "entry_is_valid", "write_entry_atomically",
           "CACHE_FORMAT"]

CACHE_FORMAT = 1
_MANIFEST = "manifest.json"


def cache_root() -> Path:
    """The folder lens-possym writes converted models to (see module docstring)."""
    explicit = os.environ.get("LENS_POSSYM_CACHE")
    if explicit:
        return Path(explicit).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "lens_possym"


def _sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 22), b""):
            digest.update(block)
    return digest.hexdigest()


def file_sha256(path: Path) -> str:
    """sha256 of a file's contents, memoised by (path, size, mtime) under the cache root."""
    path = Path(path).resolve()
    stat = path.stat()
    memo_path = cache_root() / "fingerprints.json"
    try:
        memo = json.loads(memo_path.read_text())
    except (OSError, ValueError):
        memo = {}
    key = str(path)
    seen = memo.get(key)
    if seen and seen.get("size") == stat.st_size and seen.get("mtime_ns") == stat.st_mtime_ns:
        return seen["sha256"]
    sha = _sha256_of(path)
    memo[key] = {"size": stat.st_size, "mtime_ns": stat.st_mtime_ns, "sha256": sha}
    try:
        memo_path.parent.mkdir(parents=True, exist_ok=True)
        _write_json_atomically(memo_path, memo)
    except OSError:
        pass  # a read-only cache only costs a re-hash next time
    return sha


def entry_dir(sha256: str) -> Path:
    """The cache folder for the conversion of the GGUF file with this hash."""
    return cache_root() / "models" / sha256[:20]


def entry_is_valid(folder: Path) -> bool:
    """True when ``folder`` holds a complete entry of the current format."""
    try:
        manifest = json.loads((folder / _MANIFEST).read_text())
    except (OSError, ValueError):
        return False
    if manifest.get("format") != CACHE_FORMAT:
        return False
    files = manifest.get("files", {})
    if not files:
        return False
    for name, size in files.items():
        candidate = folder / name
        if not candidate.is_file() or candidate.stat().st_size != size:
            return False
    return True


def write_entry_atomically(folder: Path, fill, metadata: dict) -> None:
    """Create ``folder`` by calling ``fill(tmp_folder)`` and renaming the result into place.

    A crash halfway leaves only a ``*.partial-*`` folder beside the entry, never a
    half-written entry. ``metadata`` is stored in the manifest next to the file sizes.
    """
    folder.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=folder.name + ".partial-", dir=folder.parent))
    try:
        fill(staging)
        files = {p.name: p.stat().st_size for p in sorted(staging.iterdir()) if p.is_file()}
        manifest = {"format": CACHE_FORMAT, "files": files, **metadata}
        _write_json_atomically(staging / _MANIFEST, manifest)
        if folder.exists():
            shutil.rmtree(folder)
        os.replace(staging, folder)
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)


def _write_json_atomically(path: Path, data: dict) -> None:
    tmp = path.with_name(path.name + f".tmp-{os.getpid()}")
    tmp.write_text(json.dumps(data, indent=1, sort_keys=True))
    os.replace(tmp, path)
