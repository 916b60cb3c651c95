"""Results as tables and files: one mixin gives every result type the same three things.

* :meth:`ResultIO.to_dataframe`: a long-format ``pandas.DataFrame``, one row per number,
  with the columns ``layer, head, frequency, angle, score, value`` where they apply (a
  per-head number has ``frequency``/``angle`` missing; a result that is not per head, such
  as a toy-model sweep, names its own columns). Long format is what ``pivot_table``,
  ``groupby`` and plotting libraries take; ``df.pivot_table(index=["layer", "head"],
  columns="frequency", values="value")`` gives back the ``[layer × head, freq]`` grid.
* :meth:`ResultIO.save` / :meth:`ResultIO.load`: one JSON file holding ``to_dict()``
  (tensors as nested lists, ``nan`` as ``null``, their dtypes noted so that a float32
  tensor loads as float32, bit for bit), tagged with a ``format`` so that ``load`` refuses
  another type's file with a clear error.
* :meth:`ResultIO.summary`: the headline numbers as a ``dict`` of plain JSON values
  (numbers, strings, lists; never tensors), the one type every result's summary has: the
  command line prints it, reports show it, ``json.dumps`` takes it;
  :meth:`ResultIO.describe` is the same as text for people (a result with a better
  sentence, such as :class:`~lens_possym.interventions.HeadImportance`, writes its own).
* ``__repr__``: the type, its tensors' shapes and dtypes and a few headline numbers, never
  the tensors themselves (a printed :class:`~lens_possym.scores.PosSymScores` was 326 lines).

A result class supplies ``to_dict``/``from_dict`` (its file format), ``_table`` (its rows),
``_headline`` (a few ``name=value`` strings) and, where its scalar fields are not its
headline, ``summary``; it is a ``@dataclass(repr=False)`` so that the dataclass does not
write over the mixin's ``__repr__``. Every subclass is checked by one contract test
(``tests/test_result_contract.py``), which fails for a result type it cannot build.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence, TypeVar

import torch
from torch import Tensor

from ._json import dumps, tensor_from_json
from .errors import InvalidSelectionError, LensPossymError, ResultsFileError
from ._files import write_text_atomically

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["ResultIO", "RunCost", "content_digest", "head_frame", "tensor_dtypes",
           "restore_dtypes", "lists_to_tensors",
           "LONG_COLUMNS"]

LONG_COLUMNS = ["layer", "head", "frequency", "angle", "score", "value"]

R = TypeVar("R", bound="ResultIO")


@dataclasses.dataclass(kw_only=True, repr=False)
class RunCost:
    """What a computed result records of its run, shared by the grids and the attributions
    (``PatchingGrid``, ``Attribution``, ``EdgeAttribution``): ``seconds`` (wall time),
    ``n_passes`` (forward and backward passes) and ``info`` (free-form: model, prompts).
    Keyword-only, so they follow a subclass's own fields; :meth:`cost_dict` writes them,
    :meth:`read_cost` reads them back (missing: ``nan``, 0, ``{}``)."""

    seconds: float = float("nan")
    n_passes: int = 0
    info: dict = dataclasses.field(default_factory=dict)

    def cost_dict(self) -> dict[str, Any]:
        return {"seconds": self.seconds, "n_passes": self.n_passes, "info": self.info}

    @staticmethod
    def read_cost(data: dict[str, Any]) -> dict[str, Any]:
        """``{"seconds", "n_passes", "info"}`` of a ``to_dict`` for the constructor."""
        seconds = data.get("seconds")
        return {"seconds": float("nan") if seconds is None else float(seconds),
                "n_passes": int(data.get("n_passes") or 0),
                "info": dict(data.get("info") or {})}


def head_frame(tensors: dict[str, Tensor | None], angles: Tensor | None,
               layers: Sequence[int] | None = None, heads: Sequence[int] | None = None,
               dims: Sequence[str] = ("layer", "head", "frequency"), **extra: Any) -> "pd.DataFrame":
    """Long-format rows of per-head ``[layer, head]`` and per-frequency ``[layer, head, freq]``
    tensors: one row per finite entry, columns ``layer, head, frequency, angle, score, value``.

    Args:
        tensors: ``{score name: tensor}``; ``None`` entries are skipped. A tensor's last
            axis is the frequency when it has ``len(dims)`` axes, otherwise there is none.
        angles: ``[layer, freq]`` (or ``[freq]``, shared by all layers) angle per position
            of each frequency id, for the ``angle`` column.
        layers: the layer index of each row of the tensors (default ``0..``); entries that
            are ``nan`` (unscored layers and heads) give no rows.
        heads: the head index of each column (default ``0..``).
        dims: the axis names, frequency last (e.g. ``("batch", "head", "query_pos",
            "key_pos", "frequency")`` for one layer's logit terms).
        extra: constant columns added to every row (e.g. ``layer=3``).
    """
    import numpy as np
    import pandas as pd

    frames = []
    for score, tensor in tensors.items():
        if tensor is None:
            continue
        values = tensor.detach().double().cpu().numpy()
        names = list(dims) if values.ndim == len(dims) else [d for d in dims if d != "frequency"]
        if values.ndim != len(names):
            raise InvalidSelectionError(f"{score}: {values.ndim} axes, expected {len(dims)} or "
                                        f"{len(dims) - 1} ({', '.join(dims)})")
        index = np.nonzero(np.isfinite(values))
        columns: dict[str, Any] = {name: idx for name, idx in zip(names, index)}
        if layers is not None and "layer" in columns:
            columns["layer"] = np.asarray(layers)[columns["layer"]]
        if heads is not None and "head" in columns:
            columns["head"] = np.asarray(heads)[columns["head"]]
        frame = pd.DataFrame(columns)
        if "frequency" in columns:
            freq = index[names.index("frequency")]
            if angles is None:
                frame["angle"] = np.nan
            elif angles.dim() == 1:
                frame["angle"] = angles.double().cpu().numpy()[freq]
            else:
                frame["angle"] = angles.double().cpu().numpy()[index[0], freq]
            frame["frequency"] = pd.array(freq, dtype="Int64")
        else:
            frame["frequency"] = pd.array([pd.NA] * len(frame), dtype="Int64")
            frame["angle"] = np.nan
        for key, value in extra.items():
            frame[key] = value
        frame["score"] = score
        frame["value"] = values[index]
        frames.append(frame)
    if not frames:
        return pd.DataFrame(columns=LONG_COLUMNS)
    frame = pd.concat(frames, ignore_index=True)
    first = [c for c in ("layer", "head", "frequency", "angle") if c in frame]
    rest = [c for c in frame if c not in first + ["score", "value"]]
    return frame[first + rest + ["score", "value"]]


def tensor_dtypes(obj: Any, prefix: str = "") -> dict[str, str]:
    """``{dotted key: dtype name}`` of every tensor inside ``obj`` (dicts and dataclass fields)."""
    out: dict[str, str] = {}
    items = obj.items() if isinstance(obj, dict) else ()
    for key, value in items:
        name = f"{prefix}{key}"
        if isinstance(value, Tensor):
            out[name] = str(value.dtype).removeprefix("torch.")
        elif isinstance(value, dict):
            out.update(tensor_dtypes(value, name + "."))
    return out


def restore_dtypes(data: dict[str, Any], dtypes: dict[str, str]) -> dict[str, Any]:
    """Turn the lists named in ``dtypes`` (as :func:`tensor_dtypes` wrote them) back into
    tensors of those dtypes, in place; returns ``data``."""
    for key, dtype in dtypes.items():
        *path, last = key.split(".")
        node = data
        for part in path:
            node = node[part]
        if node.get(last) is not None:
            node[last] = tensor_from_json(node[last]).to(getattr(torch, dtype))
    return data


def lists_to_tensors(data: dict[str, Any], names: Sequence[str],
                     dtype: torch.dtype = torch.float32) -> dict[str, Any]:
    """A copy of ``data`` with the nested lists under ``names`` (a ``to_dict`` that wrote
    ``tensor.tolist()``; ``None`` as ``nan``) back as tensors of ``dtype``."""
    out = dict(data)
    for name in names:
        if out.get(name) is not None:
            out[name] = tensor_from_json(out[name]).to(dtype)
    return out


def content_digest(data: dict[str, Any]) -> str:
    """sha256 of a result file's JSON data (its ``digest`` field left out): the data as
    canonical JSON (sorted keys, no spaces), so it does not depend on the file's layout."""
    plain = {k: v for k, v in data.items() if k != "digest"}
    text = json.dumps(plain, sort_keys=True, separators=(",", ":"), allow_nan=True)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


class ResultIO:
    """Mixin: ``to_dataframe``, ``save``/``load`` and a short ``__repr__`` for a result.

    Subclasses define ``FORMAT`` (e.g. ``"lens-possym/scores@1"``), ``_table()`` (the
    long-format frame) and optionally ``_headline()`` and ``summary()``; ``to_dict()`` (JSON
    data; tensors may stay tensors, they are encoded here) and ``from_dict(data)`` default
    to the dataclass's fields, which is the whole format of a flat result.
    """

    FORMAT: str = ""
    #: accept files without a ``format`` tag (written before results carried one)
    UNTAGGED_OK: bool = False

    # ---- the file format (defaults for a flat dataclass) ------------------------------

    def to_dict(self) -> dict[str, Any]:
        """The fields as they are (tensors are encoded, with their dtypes, by ``save``)."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}  # type: ignore

    @classmethod
    def from_dict(cls: type[R], data: dict[str, Any]) -> R:
        """The result :meth:`to_dict` describes (keys that are not fields, such as derived
        numbers and the ``format`` tag, are left out)."""
        names = {f.name for f in dataclasses.fields(cls) if f.init}  # type: ignore[arg-type]
        return cls(**{k: v for k, v in data.items() if k in names})

    # ---- tables ------------------------------------------------------------------------

    def _table(self):  # pragma: no cover - every result defines it
        """The long-format ``DataFrame`` (built with :func:`head_frame` where it applies)."""
        raise NotImplementedError

    def to_dataframe(self) -> "pd.DataFrame":
        """Long format: one row per number (columns ``layer, head, frequency, angle, score,
        value`` where they apply; see the module docstring)."""
        return self._table()

    # ---- files -------------------------------------------------------------------------

    def save(self, path: str | Path) -> Path:
        """Write the result as one JSON file (parents created); returns the path."""
        data = self.to_dict()
        data = {"format": self.FORMAT, **{k: v for k, v in data.items() if k != "format"}}
        dtypes = tensor_dtypes(data)
        if dtypes:
            data["tensor_dtypes"] = dtypes
        path = Path(path)
        plain = json.loads(dumps(data))
        plain["digest"] = content_digest(plain)
        write_text_atomically(path, dumps(plain))
        return path

    @classmethod
    def load(cls: type[R], path: str | Path) -> R:
        """Read a file written by :meth:`save`.

        Raises:
            ResultsFileError: no such file, a folder, a file that is not UTF-8 JSON, or one
                of another format or shape.
        """
        path = Path(path)
        if path.is_dir():
            raise ResultsFileError(f"{path} is a folder; pass the {cls.__name__} file in it "
                                   "(e.g. scores.json)")
        try:
            data = json.loads(path.read_bytes().decode("utf-8"))
        except FileNotFoundError:
            raise ResultsFileError(f"no file at {path}; pass a file written by "
                                   f"{cls.__name__}.save") from None
        except OSError as exc:
            raise ResultsFileError(f"cannot read {path}: {exc.strerror or exc}") from None
        except UnicodeDecodeError:
            raise ResultsFileError(f"{path} is not a text file (not UTF-8); pass a file "
                                   f"written by {cls.__name__}.save") from None
        except (json.JSONDecodeError, RecursionError) as exc:
            raise ResultsFileError(f"{path} is not JSON ({exc}); pass a file written by "
                                  f"{cls.__name__}.save") from None
        return cls.from_data(data, source=str(path))

    @classmethod
    def from_data(cls: type[R], data: dict[str, Any], source: str = "the data") -> R:
        """Check the ``format`` tag, restore tensor dtypes and call ``from_dict``."""
        untagged = isinstance(data, dict) and "format" not in data and cls.UNTAGGED_OK
        if not untagged and (not isinstance(data, dict) or data.get("format") != cls.FORMAT):
            found = data.get("format") if isinstance(data, dict) else type(data).__name__
            raise ResultsFileError(f"{source} is not a {cls.__name__} file (format {found!r}, "
                                  f"expected {cls.FORMAT!r})")
        if "digest" in data:  # every file save writes; files of older versions have none
            data = dict(data)
            written = data.pop("digest")
            if written != content_digest(data):
                raise ResultsFileError(
                    f"{source} failed its digest: its content changed since it was written "
                    f"(edited or damaged); compute it again rather than editing it")
        try:
            data = restore_dtypes(dict(data), data.get("tensor_dtypes", {}))
            data.pop("tensor_dtypes", None)
            return cls.from_dict(data)
        except LensPossymError:
            raise
        except (ValueError, KeyError, TypeError, AttributeError, IndexError) as exc:
            # a tagged file with missing or malformed fields: the same problem for the user
            raise ResultsFileError(f"{source} is a damaged {cls.__name__} file "
                                   f"({type(exc).__name__}: {exc})") from exc

    # ---- summaries ---------------------------------------------------------------------

    def summary(self) -> dict[str, Any]:
        """The headline numbers as plain JSON values (default: the result's number, text and
        flag fields; a result overrides it with its own headline)."""
        out: dict[str, Any] = {}
        for f in _fields(self):
            value = getattr(self, f.name)
            if isinstance(value, (bool, int, float, str)):
                out[f.name] = value
        return out

    def describe(self) -> str:
        """The summary as text, one ``name: value`` a line under the type's name."""
        lines = [type(self).__name__]
        for key, value in self.summary().items():
            text = number(value) if isinstance(value, float) else str(value)
            lines.append(f"  {key}: {text}")
        return "\n".join(lines)

    # ---- printing ----------------------------------------------------------------------

    def _headline(self) -> list[str]:
        return []

    def __repr__(self) -> str:
        # tensors of one shape and dtype share an entry (``pos/sym=[18, 4] float32``), and
        # a headline item that repeats a field is left out: one line, a few hundred characters
        entries: dict[str, tuple[list[str], str]] = {}
        fields = _fields(self)
        for f in fields:
            value = getattr(self, f.name)
            text = _short(value) if f.repr else None
            if text is not None:
                key = f"tensor {text}" if isinstance(value, Tensor) else f"field {f.name}"
                entries.setdefault(key, ([], text))[0].append(f.name)
        parts = ["/".join(names) + "=" + text for names, text in entries.values()]
        shown = {f.name for f in fields}
        parts += [h for h in self._headline() if h.split("=")[0] not in shown]
        return f"{type(self).__name__}(" + ", ".join(parts) + ")"


def _fields(obj: Any) -> list:
    """A result's dataclass fields in its constructor's order: keyword-only ones (a base's,
    such as :class:`RunCost`'s) after the subclass's own."""
    if not dataclasses.is_dataclass(obj):
        return []
    return sorted(dataclasses.fields(obj), key=lambda f: f.kw_only is True)


def _short(value: Any) -> str | None:
    """A few characters for one field (``None``: leave it out of the repr)."""
    if value is None:
        return None
    if isinstance(value, Tensor):
        return f"[{', '.join(map(str, value.shape))}] {str(value.dtype).removeprefix('torch.')}"
    if isinstance(value, dict):
        if not value:
            return None
        if all(isinstance(v, Tensor) for v in value.values()):
            first = next(iter(value.values()))
            return "{" + ", ".join(map(str, value)) + "}: " + _short(first)  # type: ignore
        keys = list(value)
        shown = ", ".join(map(str, keys[:4])) + (", ..." if len(keys) > 4 else "")
        return f"{{{shown}}}"
    if isinstance(value, (list, tuple)):
        if len(value) <= 6 and all(isinstance(v, (int, float, str)) for v in value):
            return repr(list(value))
        return f"<{len(value)} items>"
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, (int, bool, str)):
        text = repr(value)
        return text if len(text) <= 60 else text[:57] + "...'"
    if hasattr(value, "to_dict") and hasattr(value, "replace"):  # a JsonConfig
        return f"{type(value).__name__}(...)"
    text = repr(value)
    return text if len(text) <= 60 else f"<{type(value).__name__}>"


def number(value: float) -> str:
    """A headline number: 3 significant digits, ``nan`` as ``–``."""
    return "–" if value is None or (isinstance(value, float) and math.isnan(value)) \
        else f"{value:.3g}"
