"""Where converted models live, and how a cache entry is named, validated and written.

A GGUF file is slow to load (GGUF parsing, dequantisation, tokenizer conversion: about a
minute for gemma-3-270m), so the first load writes the dequantised weights, the config and
the tokenizer in Hugging Face layout under::

    <cache root>/models/<first 20 hex digits of the GGUF's sha256>-v<format>/
        config.json  model.safetensors  tokenizer.json  tokenizer_config.json  manifest.json

and later loads read that folder (seconds). The folder name is the GGUF's content hash,
so a different file can never be served from a stale entry. ``manifest.json`` is written
last and records the size and a content digest of every file; an entry whose manifest is
missing, of another format version, or disagrees with the files is treated as corrupt and
rebuilt (see :func:`entry_problem`).

**The content digest, and why it is cheap.** A file corrupted in place (same size: bit rot,
a stray write) would load silently and give NaN or wrong logits, so sizes are not enough:
every load re-hashes every file of the entry and compares with the manifest. The digest is
xxHash's XXH3-128 (``xxhash`` package; hashlib's BLAKE2b where it is missing, recorded per
entry), computed once when the entry is written (the files are still in the page cache) and
read from a memory map on load. It is not a cryptographic check, and need not be: the
folder is the user's own, and the GGUF it came from is identified by its sha256. On the
1.1 GB weights of gemma-3-270m, on a busy shared CPU: XXH3 0.2-0.6 s, BLAKE2b 3.9 s,
sha256 3.1 s, a plain read 0.5 s (`python benchmarks/bench_load.py --cache DIR` prints the
check's share of a warm load; docs/performance.md). A sampled check (a few MB) would cost
nothing but miss most single-byte faults, which are exactly the ones that give NaN logits;
so the whole file is hashed. Entries of format 1 (sizes only) cannot be trusted and are
not read: the first load after upgrading converts again, into a new folder.

Hashing a 250 MB GGUF file with sha256 on every warm load would cost a second, so the
sha256 of each GGUF path (which names the entry) is memoised in
``<cache root>/fingerprints.json`` together with the file's fast content digest (the same
XXH3-128, about 0.1 s for 250 MB), recomputed on every load: a file whose content changed
is hashed again, even one replaced in place with the same size and modification time
(size and time alone served the old conversion for such a file).

The cache root is ``$LENS_POSSYM_CACHE`` if set, else ``$XDG_CACHE_HOME/lens_possym``,
else ``~/.cache/lens_possym``.
"""

from __future__ import annotations

import hashlib
import json
import logging
import mmap
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Callable
from .._files import remove_stale as remove

__all__ = ["cache_root", "file_sha256", "file_digest", "entry_dir", "entry_is_valid",
           "entry_problem", "write_entry_atomically", "remove_stale", "CACHE_FORMAT"]

logger = logging.getLogger(__name__)

#: 2: per-file content digests in the manifest (1 had sizes only: such entries are rebuilt).
CACHE_FORMAT = 2
_MANIFEST = "manifest.json"


def _hashers() -> dict[str, Callable[[], Any]]:
    hashers: dict[str, Callable[[], Any]] = {"blake2b": hashlib.blake2b}
    try:
        import xxhash

        hashers["xxh3_128"] = xxhash.xxh3_128
    except ImportError:  # blake2b is about six times slower, but always there
        pass
    return hashers


def _preferred_digest() -> str:
    return "xxh3_128" if "xxh3_128" in _hashers() else "blake2b"


def file_digest(path: Path, algorithm: str) -> str:
    """Hex digest of a file's contents with ``algorithm`` (``"xxh3_128"`` or ``"blake2b"``).

    Hashes a read-only memory map, so the file is not copied into Python memory.
    """
    hasher = _hashers()[algorithm]()
    with Path(path).open("rb") as handle:
        if os.fstat(handle.fileno()).st_size:
            with mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
                hasher.update(mapped)
    return hasher.hexdigest()


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
    """sha256 of a file's contents, memoised under the cache root by (path, fast content
    digest): the fast digest is taken on every call, so the memo is keyed by content."""
    path = Path(path).resolve()
    algorithm = _preferred_digest()
    fast = file_digest(path, algorithm)
    memo_path = cache_root() / "fingerprints.json"
    try:
        memo = json.loads(memo_path.read_text())
    except (OSError, ValueError):
        memo = {}
    key = str(path)
    seen = memo.get(key)
    if isinstance(seen, dict) and seen.get(algorithm) == fast and seen.get("sha256"):
        return seen["sha256"]
    sha = _sha256_of(path)
    memo[key] = {algorithm: fast, "sha256": sha}
    try:
        memo_path.parent.mkdir(parents=True, exist_ok=True)
        _write_json_atomically(memo_path, memo)
    except OSError as exc:  # a read-only cache only costs a re-hash next time
        logger.debug("could not write %s: %s", memo_path, exc)
    return sha


def entry_dir(sha256: str) -> Path:
    """The cache folder for the conversion of the GGUF file with this hash.

    The name carries the cache format (``<20 hex digits>-v2``), so that versions of
    lens-possym with different formats sharing one cache never rebuild each other's
    entries. Folders of an older format (``<20 hex digits>`` for format 1) are not read
    any more and can be deleted.
    """
    return cache_root() / "models" / f"{sha256[:20]}-v{CACHE_FORMAT}"


def entry_problem(folder: Path, *, check_content: bool = True) -> str | None:
    """Why ``folder`` is not a complete, intact entry of the current format, or ``None``.

    Checks the manifest, then every file's size, then (unless ``check_content=False``)
    every file's content digest against the manifest's (see the module docstring for the
    cost).
    """
    try:
        manifest = json.loads((folder / _MANIFEST).read_text())
    except FileNotFoundError:
        return "it has no manifest (an interrupted or foreign entry)"
    except (OSError, ValueError) as exc:
        return f"its manifest is unreadable ({exc})"
    if manifest.get("format") != CACHE_FORMAT:
        return (f"it is of cache format {manifest.get('format')!r}, this version reads "
                f"{CACHE_FORMAT}")
    files, algorithm = manifest.get("files") or {}, manifest.get("digest")
    if not files or not isinstance(files, dict):
        return "its manifest lists no files"
    if algorithm not in _hashers():
        return f"its digest {algorithm!r} cannot be computed here"
    for name, expected in files.items():
        candidate = folder / name
        if not candidate.is_file():
            return f"{name} is missing"
        if candidate.stat().st_size != expected.get("size"):
            return (f"{name} has {candidate.stat().st_size} bytes, the manifest says "
                    f"{expected.get('size')}")
    if check_content:
        for name, expected in files.items():
            if file_digest(folder / name, algorithm) != expected.get(algorithm):
                return f"the content of {name} differs from the manifest's {algorithm} digest"
    return None


def entry_is_valid(folder: Path, *, check_content: bool = True) -> bool:
    """True when ``folder`` holds a complete, intact entry of the current format."""
    return entry_problem(folder, check_content=check_content) is None


def write_entry_atomically(folder: Path, fill, metadata: dict) -> None:
    """Create ``folder`` by calling ``fill(tmp_folder)`` and renaming the result into place.

    A crash halfway leaves only a ``*.partial-<pid>-*`` folder beside the entry, never a
    half-written entry; :func:`remove_stale` removes it on a later load. ``metadata`` is stored in the manifest next to each file's size and
    content digest (hashed here, while the files just written are in the page cache).
    """
    folder.parent.mkdir(parents=True, exist_ok=True)
    # NAME.partial-<pid>-<random>: the next load removes it if this process was killed
    staging = Path(tempfile.mkdtemp(prefix=f"{folder.name}.partial-{os.getpid()}-",
                                    dir=folder.parent))
    algorithm = _preferred_digest()
    try:
        fill(staging)
        files = {p.name: {"size": p.stat().st_size, algorithm: file_digest(p, algorithm)}
                 for p in sorted(staging.iterdir()) if p.is_file()}
        manifest = {"format": CACHE_FORMAT, "digest": algorithm, "files": files, **metadata}
        _write_json_atomically(staging / _MANIFEST, manifest)
        if folder.exists():
            shutil.rmtree(folder)
        os.replace(staging, folder)
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)


def remove_stale() -> list[Path]:
    """Remove what conversions that were killed left in the cache: staging folders
    (``models/*.partial-<pid>-*``) and scratch folders (``scratch/*.partial-<pid>-*``, a
    GGUF assembled from chunks: 250 MB to GBs) of processes that are gone."""

    root = cache_root()
    removed = remove(root / "models") + remove(root / "scratch")
    for path in removed:
        logger.info("removed %s, left by a conversion that was interrupted", path)
    return removed


def _write_json_atomically(path: Path, data: dict) -> None:
    tmp = path.with_name(path.name + f".tmp-{os.getpid()}")
    tmp.write_text(json.dumps(data, indent=1, sort_keys=True))
    os.replace(tmp, path)
