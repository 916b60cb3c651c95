"""Interventions as data: a printable, JSON-round-trippable description of what to change.

An :class:`Intervention` names one operation (the ``OP`` of ``OP_hook``/``OP_hooks``/``OP``)
and its target in the selection grammar, e.g.::

    spec = Intervention("ablate_frequencies", {"12.0": "0:16", "13.1": "low"}, mode="mean")
    print(spec)        # ablate_frequencies mode=mean side=q: 12.0 ← 0:16; 13.1 ← low
    with spec.apply(model, reference=ref_tokens):
        logits = model(tokens)
    Intervention.from_json(spec.to_json()) == spec   # True

Everything a spec says is data: heads and frequency ids are kept as the grammar's strings
(``"12.0"``, ``"12.*"``, ``"0:16,40"``, ``"low"``), so a spec is saved with its results and
replayed later; what is not data (a reference set for ``mode="mean"``, the source run of a
patch) is passed when the spec is turned into hooks (:meth:`Intervention.hooks`). The
hooks come from the same factories as always (:func:`ablate_frequencies_hooks`, ...), so a
spec and the call it describes attach identical hooks. :meth:`Intervention.resolved` pins
band names and ranges to explicit ids for one model. An :class:`InterventionSpec` is a
sequence of interventions applied together.

Operations and their fields:

=====================  ===========================================================
``ablate_frequencies``  ``selection``, ``mode`` (zero/mean/unrotate), ``side``, ``per_position``
``patch_frequencies``   ``selection``, ``side``; ``source=`` when compiled
``patch_heads``         ``selection`` (heads; frequencies ``"all"``), ``positions``;
                        ``source=`` when compiled
``permute_content``     ``layer``, ``perm``, ``what`` (resid/kv/k)
=====================  ===========================================================
"""

from __future__ import annotations

import dataclasses
import json
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Mapping

from .._json import JsonConfig, check_field_types
from ..errors import InvalidSelectionError
from ..resolved import Resolved, resolve
from ..typing import FwdHooks, HookedModel
from .modes import check_side, resolve_side
from .selection import freqs_label, heads_label, parse_selection
from .frequency import ablate_frequencies_hooks
from .patching import patch_frequencies_hooks, patch_heads_hooks
from .permute import permute_content_hooks
from .._files import write_text_atomically

__all__ = ["OPS", "Intervention", "InterventionSpec"]

OPS: tuple[str, ...] = ("ablate_frequencies", "patch_frequencies", "patch_heads",
                        "permute_content")
_FIELDS = {
    "ablate_frequencies": {"selection", "mode", "side", "per_position"},
    "patch_frequencies": {"selection", "side"},
    "patch_heads": {"selection", "positions"},
    "permute_content": {"layer", "perm", "what"},
}
_WHAT = ("resid", "kv", "k")
FORMAT = "lens-possym/interventions@1"


def _selection_pairs(selection: Any, freqs: Any) -> tuple[tuple[str, str], ...]:
    """``selection`` (any form :func:`parse_selection` reads) as ``((heads, freqs), ...)``."""
    if isinstance(selection, Mapping) and selection and all(
            isinstance(k, int) and isinstance(v, Mapping) for k, v in selection.items()):
        items = [((layer, head), ids) for layer, heads in selection.items()
                 for head, ids in heads.items()]            # normalised {layer: {head: ids}}
    elif isinstance(selection, Mapping) and selection and all(
            isinstance(k, int) for k in selection):         # heads alone: {layer: [heads]}
        heads = [(layer, h) for layer, hs in selection.items()
                 for h in ([hs] if hs is None or isinstance(hs, (int, str)) else hs)]
        items = [(heads, freqs)]
    elif isinstance(selection, Mapping):
        items = list(selection.items())
    elif isinstance(selection, (tuple, list)) and selection and all(
            isinstance(p, (tuple, list)) and len(p) == 2 and isinstance(p[0], str)
            for p in selection):                              # pairs, as stored
        items = [tuple(p) for p in selection]
    else:
        items = [(selection, freqs)]
    merged: dict[str, list[str]] = {}
    for heads, ids in items:
        merged.setdefault(heads_label(heads), []).append(freqs_label(ids))
    return tuple((heads, ",".join(dict.fromkeys(ids))) for heads, ids in merged.items())


@dataclass(frozen=True)
class Intervention(JsonConfig):
    """One intervention, as data (module docstring).

    Args:
        op: ``"ablate_frequencies"``, ``"patch_frequencies"``, ``"patch_heads"`` or
            ``"permute_content"``.
        selection: ``{heads: freqs}`` in any form the hook factories take
            (``{"12.0": "0:16", (13, 1): "low"}``, the normalised ``{layer: {head: ids}}``),
            or heads alone (``"12.0,13.1"``) with ``freqs``; stored as
            ``(("12.0", "0:16"), ("13.1", "low"))``.
        freqs: frequency ids for heads given alone (default ``"all"``); folded into
            ``selection``.
        mode, side, per_position: as in :func:`ablate_frequencies_hooks` (``side`` is stored
            resolved: ``"q"``, or ``"qk"`` for unrotate).
        positions: positions to patch (``patch_heads``; all by default).
        layer, perm, what: as in :func:`permute_content_hooks`.

    Raises:
        InvalidSelectionError: an unknown op, mode, side or target, a field the op does not
            take, an empty selection, or a ``perm`` that is not a permutation.
    """

    op: str
    selection: Any = ()
    freqs: dataclasses.InitVar[Any] = None
    mode: str | None = None
    side: str | None = None
    per_position: bool = False
    positions: tuple[int, ...] | None = None
    layer: int | None = None
    perm: tuple[int, ...] | None = None
    what: str | None = None

    def __post_init__(self, freqs: Any) -> None:
        if self.op not in OPS:
            raise InvalidSelectionError(
                f"unknown intervention {self.op!r} (op); choose one of {', '.join(OPS)}")
        set_ = lambda name, value: object.__setattr__(self, name, value)  # noqa: E731
        if self.selection not in ((), None, [], {}):
            set_("selection", _selection_pairs(self.selection, freqs))
        else:
            set_("selection", ())
        if self.op == "ablate_frequencies":
            set_("mode", self.mode or "zero")
            set_("side", resolve_side(self.mode, self.side))
            if self.per_position and self.mode != "mean":
                raise InvalidSelectionError("per_position applies to mode='mean' only")
        elif self.op == "patch_frequencies":
            set_("side", check_side(self.side or "q"))
        elif self.op == "patch_heads":
            if any(ids != "all" for _, ids in self.selection):
                raise InvalidSelectionError(
                    "patch_heads patches whole heads; give heads only (e.g. '12.0,13.1'), or "
                    "use patch_frequencies for some frequency ids")
            if self.positions is not None:
                positions = [self.positions] if isinstance(self.positions, int) else self.positions
                set_("positions", tuple(int(p) for p in positions))
        else:
            self._check_permutation()
        unused = sorted(f.name for f in dataclasses.fields(self)
                        if f.name not in _FIELDS[self.op] | {"op"}
                        and getattr(self, f.name) != f.default)
        if unused:
            raise InvalidSelectionError(
                f"{self.op} does not take {', '.join(unused)}; it takes "
                f"{', '.join(sorted(_FIELDS[self.op]))}")
        if self.op != "permute_content" and not self.selection:
            raise InvalidSelectionError(
                f"{self.op} needs a selection, e.g. {{'12.0': '0:16'}} or '12.0,13.1'")
        check_field_types(self)

    def _check_permutation(self) -> None:
        if self.what is None:
            object.__setattr__(self, "what", "resid")
        if self.what not in _WHAT:
            raise InvalidSelectionError(
                f"unknown permutation target {self.what!r}; choose one of {', '.join(_WHAT)}")
        if self.layer is None or self.perm is None:
            raise InvalidSelectionError("permute_content needs layer= and perm=")
        perm = tuple(int(p) for p in self.perm)
        if sorted(perm) != list(range(len(perm))):
            raise InvalidSelectionError(
                f"{list(perm)} is not a permutation of the positions 0..{len(perm) - 1}")
        object.__setattr__(self, "perm", perm)
        object.__setattr__(self, "layer", int(self.layer))

    # ---- reading ------------------------------------------------------------------------

    @property
    def heads(self) -> str:
        """The heads the intervention touches, in the grammar (``"12.0,13.1"``)."""
        return ",".join(heads for heads, _ in self.selection)

    def __str__(self) -> str:
        shown = [name for name in ("mode", "side", "per_position", "positions", "layer", "what")
                 if name in _FIELDS[self.op] and getattr(self, name) not in (None, False)]
        settings = " ".join(f"{name}={getattr(self, name)}" for name in shown)
        head = f"{self.op} {settings}".strip()
        if self.op == "permute_content":
            return f"{head}: perm={list(self.perm or ())}"
        if self.op == "patch_heads":
            return f"{head}: {self.heads}"
        return f"{head}: " + "; ".join(f"{heads} ← {ids}" for heads, ids in self.selection)

    def resolved(self, model: HookedModel | Resolved) -> "Intervention":
        """The same intervention with explicit frequency ids of ``model`` for every head.

        Band names and open ranges (``"low"``, ``"8:"``) depend on the model's number of
        frequency ids; the resolved spec replays identically on any model with these heads.
        """
        if self.op in ("permute_content", "patch_heads"):
            return self
        chosen = parse_selection(dict(self.selection), resolve(model).specs)
        return dataclasses.replace(self, selection=chosen)

    # ---- hooks --------------------------------------------------------------------------

    def hooks(self, model: HookedModel | Resolved, *, source: Any = None, reference: Any = None,
              means: Any = None) -> FwdHooks:
        """``[(hook name, hook fn)]`` for ``model``, from the op's hook factory.

        Args:
            source: the source run (cache or input) of ``patch_*`` ops.
            reference, means: the reference prompts (or precomputed
                :class:`~lens_possym.interventions.FrequencyMeans`) of ``mode="mean"``.
        """

        if self.op.startswith("patch") and source is None:
            raise InvalidSelectionError(f"{self.op} needs source=<a cache or the source input>")
        model = resolve(model)  # every factory below reads the same specs
        if self.op == "ablate_frequencies":
            return ablate_frequencies_hooks(model, dict(self.selection), self.mode,
                                            side=self.side, per_position=self.per_position,
                                            reference=reference, means=means)
        if self.op == "patch_frequencies":
            return patch_frequencies_hooks(model, source, dict(self.selection), side=self.side)
        if self.op == "patch_heads":
            return patch_heads_hooks(model, source, self.heads, self.positions)
        return permute_content_hooks(model, self.layer, list(self.perm), self.what)

    @contextmanager
    def apply(self, model: HookedModel | Resolved, **runtime: Any) -> Iterator[HookedModel]:
        """Context manager: the hooks of :meth:`hooks` attached inside the block, then removed."""
        resolved = resolve(model)
        model = resolved.model
        with model.hooks(fwd_hooks=self.hooks(resolved, **runtime)):
            yield model

    # ---- saving -------------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        """The op and the fields it takes (``selection`` as ``{heads: freqs}``)."""
        data: dict[str, Any] = {"op": self.op}
        for name in sorted(_FIELDS[self.op]):
            value = getattr(self, name)
            if name == "selection":
                value = dict(value)
            elif isinstance(value, tuple):
                value = list(value)
            data[name] = value
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Intervention":
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - names)
        if unknown or "op" not in data:
            raise InvalidSelectionError(
                f"not an intervention: {dict(data)!r} (unknown fields {unknown}, or no 'op')")
        return cls(**data)

    def to_json(self, path: str | Path | None = None) -> str:
        """One line of JSON (also written to ``path`` when given); ``from_json`` reads it
        back (JsonConfig)."""
        text = json.dumps(self.to_dict())
        if path is not None:
            write_text_atomically(Path(path), text)
        return text


@dataclass(frozen=True)
class InterventionSpec(JsonConfig):
    """Interventions applied together, in order (their hooks are concatenated).

    ``InterventionSpec([Intervention(...), ...])``; iterate, index, ``print`` it (one line
    per intervention), save it with :meth:`to_json` (a string, or a file with ``path=``).
    """

    interventions: tuple[Intervention, ...] = ()

    def __post_init__(self) -> None:
        items = tuple(self.interventions)
        bad = [i for i in items if not isinstance(i, Intervention)]
        if bad:
            raise InvalidSelectionError(
                f"an InterventionSpec holds Intervention objects (interventions), got "
                f"{bad[0]!r}; build each with Intervention(op, selection, ...)")
        object.__setattr__(self, "interventions", items)

    def __iter__(self) -> Iterator[Intervention]:
        return iter(self.interventions)

    def __len__(self) -> int:
        return len(self.interventions)

    def __getitem__(self, index: int) -> Intervention:
        return self.interventions[index]

    def __str__(self) -> str:
        return "\n".join(str(i) for i in self.interventions) or "(no intervention)"

    def hooks(self, model: HookedModel | Resolved, **runtime: Any) -> FwdHooks:
        """Every intervention's hooks, in order (``runtime`` as in :meth:`Intervention.hooks`)."""
        resolved = resolve(model)
        return [hook for item in self.interventions for hook in item.hooks(resolved, **runtime)]

    @contextmanager
    def apply(self, model: HookedModel | Resolved, **runtime: Any) -> Iterator[HookedModel]:
        """Context manager: every intervention attached inside the block, then removed."""
        resolved = resolve(model)
        with resolved.model.hooks(fwd_hooks=self.hooks(resolved, **runtime)):
            yield resolved.model

    def resolved(self, model: HookedModel | Resolved) -> "InterventionSpec":
        resolved = resolve(model)
        return InterventionSpec(tuple(i.resolved(resolved) for i in self.interventions))

    def to_dict(self) -> dict[str, Any]:
        return {"format": FORMAT, "interventions": [i.to_dict() for i in self.interventions]}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "InterventionSpec":
        if data.get("format") != FORMAT:
            raise InvalidSelectionError(
                f"not a lens-possym intervention spec (format {data.get('format')!r}, "
                f"expected {FORMAT!r})")
        unknown = sorted(set(data) - {"format", "interventions"})
        if unknown:
            raise InvalidSelectionError(
                f"an intervention spec holds 'format' and 'interventions', not {unknown}")
        return cls(tuple(Intervention.from_dict(d) for d in data.get("interventions", [])))

    # to_json(path) / from_json(text or path): JsonConfig (indented JSON)
