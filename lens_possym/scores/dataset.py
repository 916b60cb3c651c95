r"""Dataset-scale profiles: swap scores over any stream of prompts, as mean and spread.

:func:`dataset_profile` scores every head (and frequency) of a model on each prompt of an
iterable of any length, prompts of mixed token lengths included, and keeps, per head and
frequency, the count, the mean and the spread over prompts:

* **no padding**: prompts are grouped by token length and each group runs as one batch,
  so every prompt keeps its own positions (padding would shift RoPE's rotations, or
  leave pad keys in the swaps);
* **bounded memory**: prompts are read ``shard_size`` at a time; a shard is scored, reduced
  to its moments, and dropped; only the running moments (``3 × layers × heads × freqs``
  numbers per score) and the shards in flight are held;
* **moments that merge exactly**: each shard keeps ``(n, mean, M2)`` per entry (Welford's
  sums: ``M2 = Σ (x - mean)²``), and shards merge in their order with Chan et al.'s
  update :math:`\delta = \bar x_b - \bar x_a`, :math:`\bar x = \bar x_a + \delta\, n_b/n`,
  :math:`M_2 = M_{2,a} + M_{2,b} + \delta^2 n_a n_b / n`: stable for any number of prompts,
  and the same numbers however the shards were computed (here, on Ray, before or after an
  interruption);
* **incremental and resumable**: with ``out_dir``, each finished shard is written at once
  (``shards/shard_000012.pt``, atomically) next to ``dataset.json`` (the settings); run the
  same call again after an interruption and the shards on disk are read back, not
  recomputed (the prompts of each are checked by digest);
* **nothing silent on disk**: every shard carries a digest of its own content and of the
  settings it was computed with, checked whenever it is read: a shard whose bytes changed
  (bit rot, a stray write) or that cannot be read is computed again, with a
  :class:`DatasetIntegrityWarning` saying so; an unreadable ``dataset.json`` is reported
  with what to do; ``out_dir`` is locked (``.lock``) while a run writes to it, so a second
  run on the same folder is refused instead of mixing its shards in; temporary files of
  killed runs are removed on the next run;
* **fans out**: shards are independent tasks for an
  :class:`~lens_possym.execution.Executor` (in process by default, or Ray).

A prompt's undefined values (a positional share 0/0, a head not scored) are left out of its
entry's count, as :func:`~lens_possym.scores.swap_scores` leaves them out of its mean.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Sequence

import torch
from torch import Tensor

from .._checks import boundary
from .._files import disk_error
from .._json import tensor_from_json, to_jsonable
from ..errors import InvalidSelectionError, LensPossymError, ResultsFileError
from ..execution import Executor, resolve_executor
from ..resolved import resolve
from ..results_io import ResultIO
from ..typing import HookedModel
from .config import ScoreConfig
from .inputs import resolve_exclude_bos
from .moments import Moments
from .profile import per_prompt_scores
from .results import PosSymScores, current_names
from ..results_io import head_frame
from ..models import TINY_FAMILIES, load_model, tiny_model
from .._inputs import as_tokens
from .._files import save_atomically
from .._files import remove_stale
from .._lock import folder_lock
from .._files import write_text_atomically

__all__ = ["Moments", "DatasetProfile", "dataset_profile", "read_prompts", "SCORES",
           "DatasetIntegrityWarning"]

#: The scores a dataset profile aggregates (those :func:`per_prompt_scores` returns).
SCORES = ("pos", "sym", "pos_freq", "sym_freq", "exclusion_ratio", "exclusion_ratio_freq",
          "positional_share", "positional_share_freq")
FORMAT = "lens-possym/dataset-profile@1"
SHARD_FORMAT = "lens-possym/dataset-shard@1"


class DatasetIntegrityWarning(UserWarning):
    """A shard on disk that failed its check and was computed again (the profile is
    right; the warning says which file was bad)."""
ModelSource = HookedModel | str | Callable[[], HookedModel]


@dataclass(repr=False)
class DatasetProfile(ResultIO):
    """Every head's (and frequency's) scores over a dataset: mean, spread and count.

    Attributes:
        moments: per score name (:data:`SCORES`, those computed), its :class:`Moments`
            ``[n_layers, n_heads(, n_freqs)]`` over prompts.
        angles: ``[n_layers, n_freqs]`` rotation angles.
        config: the :class:`ScoreConfig` as given (``exclude_bos``/``query_position``
            resolved per group of prompts).
        n_prompts, n_shards, shard_size: how much was read, in how many shards.
        n_tokens: ``{"min", "max", "mean"}`` token lengths of the prompts.
        model_name, layers: the model and the layers scored.
    """

    moments: dict[str, Moments]
    angles: Tensor
    config: ScoreConfig
    n_prompts: int
    n_shards: int
    shard_size: int
    n_tokens: dict[str, float] = field(default_factory=dict)
    model_name: str = ""
    layers: list[int] = field(default_factory=list)

    FORMAT = FORMAT

    def mean(self, name: str = "pos") -> Tensor:
        return self._get(name).mean

    def std(self, name: str = "pos") -> Tensor:
        return self._get(name).std

    def count(self, name: str = "pos") -> Tensor:
        return self._get(name).count

    def _get(self, name: str) -> Moments:
        if name not in self.moments:
            raise InvalidSelectionError(
                f"no {name!r} in this profile; it has {', '.join(self.moments)}")
        return self.moments[name]

    def scores(self) -> PosSymScores:
        """The means as a :class:`PosSymScores` (figures, reports, bands work on it)."""
        get = lambda name: self.moments[name].mean if name in self.moments else None  # noqa: E731
        return PosSymScores(**{name: get(name) for name in SCORES}, angles=self.angles,
                            layers=list(self.layers), config=self.config,
                            n_tokens=int(self.n_tokens.get("max", 0)),
                            model_name=self.model_name)

    def to_dict(self) -> dict[str, Any]:
        return to_jsonable({"format": FORMAT, "model_name": self.model_name,
                            "layers": self.layers, "config": self.config.to_dict(),
                            "n_prompts": self.n_prompts, "n_shards": self.n_shards,
                            "shard_size": self.shard_size, "n_tokens": self.n_tokens,
                            "angles": self.angles,
                            "moments": {k: m.to_dict() for k, m in self.moments.items()}})

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "DatasetProfile":
        if data.get("format") != FORMAT:
            raise ResultsFileError(f"not a lens-possym dataset profile (format "
                                   f"{data.get('format')!r}); load a profile.json that "
                                   "dataset_profile wrote")
        moments = {k: Moments(*(tensor_from_json(m[x]) for x in ("count", "mean", "m2")))
                   for k, m in current_names(data["moments"]).items()}
        return cls(moments=moments, angles=tensor_from_json(data["angles"]),
                   config=ScoreConfig.from_dict(data["config"]), n_prompts=data["n_prompts"],
                   n_shards=data["n_shards"], shard_size=data["shard_size"],
                   n_tokens=data.get("n_tokens", {}), model_name=data.get("model_name", ""),
                   layers=list(data.get("layers", [])))

    def _table(self):
        """Long format: one row per (score, layer, head[, freq_id]) with ``mean``, ``std``
        and ``count`` columns."""
        import pandas as pd


        keys = ["layer", "head", "frequency", "score"]
        out = head_frame({k: m.mean for k, m in self.moments.items()}, self.angles
                         ).rename(columns={"value": "mean"})
        for stat in ("std", "count"):
            frame = head_frame({k: getattr(m, stat) for k, m in self.moments.items()},
                               self.angles).rename(columns={"value": stat})
            out = out.merge(frame[[k for k in keys if k in frame] + [stat]], how="left",
                            on=[k for k in keys if k in frame])
        return pd.DataFrame(out)

    def _headline(self) -> list[str]:
        pos = self.moments["pos"].mean
        # the fields (model_name, n_prompts, n_shards, n_tokens) are in the repr already
        return [f"heads={int(pos.isfinite().sum())}"]


# ---- models in workers ---------------------------------------------------------------------

_LOADED: dict[str, HookedModel] = {}


def _model_key(source: ModelSource) -> str | None:
    if isinstance(source, str):
        return source
    if callable(source) and not hasattr(source, "run_with_hooks"):
        import pickle

        try:
            return "loader:" + hashlib.sha256(pickle.dumps(source)).hexdigest()
        except Exception:  # an unpicklable loader: called again each time
            return None
    return None


def _load(source: ModelSource) -> HookedModel:
    """The model ``source`` names, loaded once per process (a model: itself)."""
    if hasattr(source, "run_with_hooks") or not (isinstance(source, str) or callable(source)):
        return source  # type: ignore[return-value]
    key = _model_key(source)
    if key is not None and key in _LOADED:
        return _LOADED[key]
    if isinstance(source, str):

        model = (tiny_model(source[5:]) if source.startswith("tiny-")
                 and source[5:] in TINY_FAMILIES else load_model(source))
    else:
        model = source()
    if key is not None:
        _LOADED.clear()  # one model per worker at a time
        _LOADED[key] = model
    return model


# ---- one shard -----------------------------------------------------------------------------

@dataclass
class _Shard:
    index: int
    start: int        # the index of its first prompt in the stream
    prompts: list
    digest: str


@dataclass
class _ShardTask:
    """Score one shard (a picklable callable: it runs in a worker under Ray)."""

    model: Any
    config: ScoreConfig
    layers: Any
    heads: Any
    group_size: int

    def __call__(self, shard: _Shard) -> dict:
        model = _load(self.model)
        resolved = resolve(model)  # read once per shard, for every group of prompts below
        tokens = []
        for i, prompt in enumerate(shard.prompts):
            try:
                given = prompt if isinstance(prompt, str) else torch.tensor([prompt])
                row = as_tokens(model, given)[0]
            except LensPossymError as exc:
                raise _with_context(exc, f"prompt {shard.start + i} ({_short(prompt)}): {exc}") from None
            if len(row) < 3:
                raise InvalidSelectionError(
                    f"prompt {shard.start + i} ({_short(prompt)}) has {len(row)} tokens; a "
                    "profile needs at least 3 (two keys to swap before the query)")
            tokens.append(row)
        # one batch per token length (and, for exclude_bos="auto", per prompt's BOS: it is
        # decided per prompt, as swap_scores on that prompt alone would)
        groups: dict[tuple[int, bool | str], list[int]] = {}
        for i, t in enumerate(tokens):
            bos = (resolve_exclude_bos(model, t[None], "auto")
                   if self.config.exclude_bos == "auto" else self.config.exclude_bos)
            groups.setdefault((len(t), bos), []).append(i)
        moments: dict[str, Moments] = {}
        angles = None
        for (length, bos) in sorted(groups):
            rows = groups[(length, bos)]
            config = self.config.replace(exclude_bos=bos)
            for start in range(0, len(rows), self.group_size):
                group = rows[start : start + self.group_size]
                batch = torch.stack([tokens[i] for i in group])
                try:
                    values, angles, _ = per_prompt_scores(resolved, batch, config,
                                                          layers=self.layers, heads=self.heads)
                except LensPossymError as exc:
                    where = ", ".join(str(shard.start + i) for i in group[:3])
                    raise _with_context(exc, f"prompts {where} ({length} tokens): {exc}") from None
                for name, v in values.items():
                    if v is None:
                        continue
                    m = Moments.of(v)
                    moments[name] = m if name not in moments else moments[name].merge(m)
        return {"format": SHARD_FORMAT, "index": shard.index, "digest": shard.digest,
                "n_prompts": len(tokens), "lengths": [len(t) for t in tokens],
                "angles": angles, "moments": {k: m.to_dict() for k, m in moments.items()},
                "model_name": str(getattr(getattr(model, "cfg", None), "model_name", "")),
                "n_layers": None if angles is None else angles.shape[0]}


def _with_context(exc: LensPossymError, message: str) -> LensPossymError:
    """An error of ``exc``'s class saying which prompts it concerns."""
    return type(exc)(message)


def _short(prompt: Any, width: int = 40) -> str:
    text = prompt if isinstance(prompt, str) else str(list(prompt)[:8])
    text = " ".join(text.split())
    return repr(text if len(text) <= width else text[: width - 3] + "...")


def _digest(prompts: Sequence) -> str:
    h = hashlib.sha256()
    for p in prompts:
        h.update(json.dumps(p if isinstance(p, str) else [int(t) for t in p]).encode())
        h.update(b"\0")
    return h.hexdigest()[:32]


#: ids past this are no model's (and past 2**63 not even a tensor's): refused when read
MAX_TOKEN_ID = 2 ** 31


def _is_id(t: Any) -> bool:
    return isinstance(t, int) and not isinstance(t, bool)


def _shards(prompts: Iterable, shard_size: int) -> Iterator[_Shard]:
    batch: list = []
    index = 0
    for prompt in prompts:
        if isinstance(prompt, Tensor):
            prompt = prompt.tolist()
        if not isinstance(prompt, str) and not (isinstance(prompt, (list, tuple))
                                               and all(_is_id(t) for t in prompt)):
            raise InvalidSelectionError(
                f"prompt {index * shard_size + len(batch)} is "
                + (f"a list holding {_short(prompt)}" if isinstance(prompt, (list, tuple))
                   else f"a {type(prompt).__name__}")
                + "; give text or a list of integer token ids (not bools or floats)")
        batch.append(prompt)
        if len(batch) == shard_size:
            yield _Shard(index, index * shard_size, batch, _digest(batch))
            batch, index = [], index + 1
    if batch:
        yield _Shard(index, index * shard_size, batch, _digest(batch))


# ---- the profile ---------------------------------------------------------------------------

def _settings(model: ModelSource, config: ScoreConfig, layers, heads, shard_size: int,
              group_size: int) -> dict:
    name = model if isinstance(model, str) else str(
        getattr(getattr(model, "cfg", None), "model_name", "") or _model_key(model) or "")
    as_list = lambda x: None if x is None else ([x] if isinstance(x, int) else list(x))  # noqa: E731
    return {"format": FORMAT + "/settings", "model": name, "config": config.to_dict(),
            "layers": as_list(layers), "heads": as_list(heads), "shard_size": shard_size,
            "group_size": group_size}


def _content_digest(data: dict) -> str:
    """sha256 of a shard's content: its fields (JSON) and every tensor's dtype, shape and
    bytes, in a fixed order; the ``content_digest`` field itself left out."""
    h = hashlib.sha256()

    def feed(value: Any) -> None:
        if isinstance(value, Tensor):
            t = value.detach().cpu().contiguous()
            h.update(f"T{t.dtype}{tuple(t.shape)}".encode())
            h.update(t.view(torch.uint8).numpy().tobytes() if t.numel() else b"")
        elif isinstance(value, dict):
            h.update(b"{")
            for key in sorted(value, key=str):
                h.update(json.dumps(str(key)).encode())
                feed(value[key])
            h.update(b"}")
        elif isinstance(value, (list, tuple)):
            h.update(b"[")
            for item in value:
                feed(item)
            h.update(b"]")
        else:
            h.update(json.dumps(value).encode())

    feed({k: v for k, v in data.items() if k != "content_digest"})
    return h.hexdigest()


def _write_shard(data: dict, path: Path) -> None:

    save_atomically({**data, "content_digest": _content_digest(data)}, path)


def _warn(message: str) -> None:
    import warnings

    warnings.warn(message, DatasetIntegrityWarning, stacklevel=3)


def _read_shard(path: Path, shard: _Shard, settings_digest: str) -> dict | None:
    """The shard at ``path`` if it is intact and of this run's prompts and settings;
    ``None`` (it is computed again, and a warning says why) if it is damaged."""
    try:
        data = torch.load(path, weights_only=True)
    except Exception as exc:  # noqa: BLE001 - a torn or foreign file: computed again
        _warn(f"{path} cannot be read ({type(exc).__name__}); computing shard {shard.index} "
              "again")
        return None
    if not isinstance(data, dict) or data.get("format") != SHARD_FORMAT:
        _warn(f"{path} is not a dataset shard; computing shard {shard.index} again")
        return None
    if data.get("content_digest") != _content_digest(data):
        _warn(f"{path} failed its content digest (its bytes changed since it was written); "
              f"computing shard {shard.index} again")
        return None
    if data.get("digest") != shard.digest:
        raise ResultsFileError(
            f"{path} holds other prompts than shard {shard.index} of this run; the prompts "
            "changed since the profile was started: use a new out_dir (or delete this one "
            "to start over)")
    if data.get("settings") != settings_digest:
        _warn(f"{path} was computed with other settings; computing shard {shard.index} "
              "again")
        return None
    return data


def _settings_digest(settings: dict) -> str:
    return hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:32]


def _read_manifest(manifest: Path, out: Path) -> dict | None:
    """The settings ``dataset.json`` holds, or ``None`` when there is none yet."""
    try:
        raw = manifest.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise ResultsFileError(f"cannot read {manifest}: {exc.strerror or exc}") from None
    try:
        found = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        found = None
    if not isinstance(found, dict) or not str(found.get("format", "")).startswith(FORMAT):
        what = "is empty" if not raw.strip() else "is not a dataset manifest (damaged)"
        raise ResultsFileError(
            f"{manifest} {what}, so the settings of the profile in {out} cannot be checked; "
            f"delete {manifest} to go on with this run's settings (shards computed with "
            "other settings or prompts are detected and computed again), or use another "
            "out_dir")
    return found


def _normalised(settings: dict) -> dict:
    """Settings with the config's defaults filled in (a manifest written before a config
    field existed reads as that field's default)."""
    out = dict(settings)
    config = out.get("config")
    if isinstance(config, dict):
        try:
            out["config"] = ScoreConfig.from_dict(config).to_dict()
        except LensPossymError:
            pass
    return out


@boundary
def dataset_profile(model: ModelSource, prompts: Iterable[str | Sequence[int]],
                    config: ScoreConfig | None = None, *,
                    layers: int | Sequence[int] | None = None,
                    heads: int | Sequence[int] | None = None, shard_size: int = 64,
                    group_size: int = 16, out_dir: str | Path | None = None,
                    executor: Executor | str | None = None, n_prompts: int | None = None,
                    progress: bool | Callable[[int, int | None, float], None] = False,
                    stop_after: int | None = None, **settings: Any) -> DatasetProfile:
    """Swap scores of every head (and frequency) over a stream of prompts: mean and spread.

    Args:
        model: a model, a model name (``"gemma-3-270m"``, ``"tiny-llama"``) or a
            zero-argument loader; executors that run elsewhere (Ray) need a name or a
            picklable loader (each worker loads the model once).
        prompts: any iterable of text prompts or token-id lists, of any lengths (read
            lazily, ``shard_size`` at a time; a generator over a file is fine).
        config, settings: how to score (:class:`ScoreConfig`; keywords override it).
        layers, heads: which to score (all by default).
        shard_size: prompts per shard: the unit of work, of writing and of resuming.
        group_size: most prompts of one length scored in one batch.
        out_dir: write ``dataset.json``, one file per finished shard under ``shards/`` and,
            at the end, ``profile.json``; a later call with the same settings and prompts
            continues from the shards there.
        executor: where shards run (:class:`~lens_possym.execution.InProcess` by default;
            a :class:`~lens_possym.execution.RayExecutor`, or ``"ray"``).
        n_prompts: the number of prompts, if known, for the progress estimate.
        progress: ``True`` for a bar with the time left, or ``fn(done, total, seconds)``
            called after each shard.
        stop_after: stop after this many shards were computed in this call (leaving the
            profile unfinished on disk, as an interruption would; for tests and for
            running a long profile in slices). Returns ``None`` then.

    Returns:
        :class:`DatasetProfile` (also saved as ``out_dir/profile.json``).

    Raises:
        InvalidSelectionError: no prompts, a prompt too short for the swaps (named by
            ``shard:index``), a bad setting.
        ResultsFileError: ``out_dir`` holds a profile with other settings or prompts.
    """
    if prompts is None or isinstance(prompts, (str, bytes)) or not hasattr(prompts, "__iter__"):
        raise InvalidSelectionError(
            f"dataset_profile: prompts must be an iterable of prompts (a list, a generator, "
            f"read_prompts(path)), got {repr(prompts)[:40]} ({type(prompts).__name__})")
    config = ScoreConfig.coerce(config, **settings)
    for name, value, low in (("shard_size", shard_size, 1), ("group_size", group_size, 1)):
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise InvalidSelectionError(f"{name} must be an integer >= {low}, got {value!r}")
    runner = resolve_executor(executor)
    if getattr(runner, "remote", False) and hasattr(model, "run_with_hooks"):
        raise InvalidSelectionError(
            f"{runner!r} runs shards in other processes: pass the model's name (e.g. "
            "'gemma-3-270m') or a picklable loader, not a loaded model")
    task = _ShardTask(model, config, layers, heads, group_size)
    out = Path(out_dir) if out_dir is not None else None
    if out is None:
        return _profile(prompts, task, runner, config, shard_size, None, None, "",
                        _progress(progress, n_prompts), stop_after)

    with folder_lock(out, what="a dataset profile"):
        shard_dir = out / "shards"
        wanted = _settings(model, config, layers, heads, shard_size, group_size)
        manifest = out / "dataset.json"
        found = _read_manifest(manifest, out)
        if found is not None:
            if _normalised(found) != _normalised(wanted):
                diff = sorted(k for k in wanted if _normalised(found).get(k) != _normalised(wanted)[k])
                raise ResultsFileError(
                    f"{out} holds a dataset profile with other settings ({', '.join(diff)}); "
                    "use another out_dir, or delete it to start over")
        try:
            shard_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise disk_error(exc, shard_dir) from exc
        remove_stale(shard_dir)  # temporary files of runs that were killed mid-write
        remove_stale(out, names={"dataset.json", "profile.json"})
        if found is None:

            write_text_atomically(manifest, json.dumps(wanted, indent=1))
        return _profile(prompts, task, runner, config, shard_size, out, shard_dir,
                        _settings_digest(_normalised(wanted)), _progress(progress, n_prompts),
                        stop_after)


def _profile(prompts, task: _ShardTask, runner: Executor, config: ScoreConfig, shard_size: int,
             out: Path | None, shard_dir: Path | None, settings_digest: str, reporter,
             stop_after: int | None) -> DatasetProfile:
    """Score the shards not on disk, then merge every shard in order."""
    done_prompts = 0
    order: list[tuple[int, str]] = []  # every shard's index and prompts digest, in order

    def todo() -> Iterator[_Shard]:
        nonlocal done_prompts
        for shard in _shards(prompts, shard_size):
            order.append((shard.index, shard.digest))
            path = shard_dir / f"shard_{shard.index:06d}.pt" if shard_dir else None
            if path is not None and path.exists():
                found = _read_shard(path, shard, settings_digest)
                if found is not None:
                    done_prompts += found["n_prompts"]
                    reporter(done_prompts)
                    continue
            yield shard

    computed: dict[int, dict] = {}
    n_computed = 0
    try:
        for result in runner.imap(task, todo()):
            index = result["index"]
            result["settings"] = settings_digest
            if shard_dir is not None:
                _write_shard(result, shard_dir / f"shard_{index:06d}.pt")
            else:
                computed[index] = result
            done_prompts += result["n_prompts"]
            n_computed += 1
            reporter(done_prompts)
            if stop_after is not None and n_computed >= stop_after:
                return None  # type: ignore[return-value]
    finally:
        reporter(done_prompts, final=True)
    if not order:
        raise InvalidSelectionError("no prompts: give at least one prompt")

    # merge every shard in order (read back one at a time when on disk, and checked again:
    # nothing another process or the disk changed since is merged)
    moments: dict[str, Moments] = {}
    angles, lengths, model_name = None, [], ""
    for index, digest in order:
        if shard_dir is None:
            data = computed.pop(index)
        else:
            path = shard_dir / f"shard_{index:06d}.pt"
            data = _read_shard(path, _Shard(index, 0, [], digest), settings_digest) \
                if path.exists() else None
            if data is None:
                raise ResultsFileError(
                    f"{path} changed or went missing while this profile ran; run the same "
                    "call again (it computes that shard again)")
        for name, m in current_names(data["moments"]).items():
            m = Moments.from_dict(m)
            moments[name] = m if name not in moments else moments[name].merge(m)
        angles = data["angles"] if data["angles"] is not None else angles
        lengths.extend(data["lengths"])
        model_name = data.get("model_name") or model_name
    lengths_t = torch.tensor(lengths, dtype=torch.float64)
    chosen = sorted(int(i) for i in torch.nonzero(
        moments["pos"].count.sum(-1) > 0).flatten().tolist())
    profile = DatasetProfile(
        moments={k: moments[k] for k in SCORES if k in moments}, angles=angles, config=config,
        n_prompts=len(lengths), n_shards=len(order), shard_size=shard_size,
        n_tokens={"min": int(lengths_t.min()), "max": int(lengths_t.max()),
                  "mean": float(lengths_t.mean())},
        model_name=model_name, layers=chosen)
    if out is not None:
        profile.save(out / "profile.json")
    return profile


def _progress(progress, total: int | None):
    """``reporter(done, final=False)``: a tqdm bar (with the time left when ``total`` is
    known), a user callback ``fn(done, total, elapsed_s)``, or nothing."""
    start = time.perf_counter()
    if callable(progress) and not isinstance(progress, bool):
        return lambda done, final=False: progress(done, total, time.perf_counter() - start)
    if not progress:
        return lambda done, final=False: None
    from tqdm.auto import tqdm

    bar = tqdm(total=total, unit="prompt", desc="dataset profile")

    def report(done: int, final: bool = False) -> None:
        bar.update(done - bar.n)
        if final:
            bar.close()

    return report


@boundary
def read_prompts(path: str | Path, *, field: str = "text") -> Iterator[str | list[int]]:
    """Prompts from a file, lazily: ``.jsonl`` (one JSON object a line, its ``field``; or a
    bare JSON string or list of token ids a line) or text (one prompt a line; blank lines
    skipped).

    Raises:
        InvalidSelectionError: a line that is not valid JSON, or an object without
            ``field``, named by its line number.
    """
    path = Path(path)
    if not path.is_file():
        raise InvalidSelectionError(f"no prompts file at {path}")
    jsonl = path.suffix.lower() in (".jsonl", ".ndjson")
    with path.open("rb") as f:
        for number, raw in enumerate(f, 1):
            try:
                line = raw.decode("utf-8").rstrip("\r\n")
                if number == 1 and line.startswith("\ufeff"):  # a UTF-8 byte-order mark
                    line = line[1:]
            except UnicodeDecodeError:
                raise InvalidSelectionError(
                    f"{path}:{number} is not UTF-8 text; save the prompts as UTF-8 (one a "
                    "line, or .jsonl)") from None
            if "\x00" in line:
                raise InvalidSelectionError(
                    f"{path}:{number} holds a NUL byte: {path} looks like a binary file, not "
                    "prompts")
            if not line.strip():
                continue
            if not jsonl:
                yield line
                continue
            try:
                item = json.loads(line)
            except (json.JSONDecodeError, RecursionError) as exc:
                why = getattr(exc, "msg", "nested too deeply")
                raise InvalidSelectionError(f"{path}:{number} is not valid JSON ({why})") from None
            if isinstance(item, dict):
                if field not in item:
                    raise InvalidSelectionError(
                        f"{path}:{number} has no {field!r} field (fields: "
                        f"{', '.join(map(str, item)) or 'none'}); pick one with --field")
                item = item[field]
            if isinstance(item, list) and all(map(_is_id, item)) and not all(
                    0 <= t < MAX_TOKEN_ID for t in item):
                bad = next(t for t in item if not 0 <= t < MAX_TOKEN_ID)
                raise InvalidSelectionError(
                    f"{path}:{number}: token id {bad if abs(bad) < 10**12 else format(bad, '.3g')} is out of range (an id is at "
                    f"least 0 and below {MAX_TOKEN_ID}, and below the model's vocabulary "
                    "size)")
            if isinstance(item, str) or (isinstance(item, list) and all(map(_is_id, item))):
                yield item
            else:
                raise InvalidSelectionError(
                    f"{path}:{number}: a prompt must be text or a list of integer token ids, "
                    f"got {_short(item) if isinstance(item, list) else type(item).__name__}")
