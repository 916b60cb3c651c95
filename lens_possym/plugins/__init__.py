r"""The plug-in API: everything a paper (or any extension) needs from the core, in one place.

A plug-in imports only this module and the core's public packages (``lens_possym.training``,
``lens_possym.scores``, ...), never a private (``_name``) module: ``tests/test_layering.py``
holds the in-tree papers to that, and ``docs/adding_a_paper.md`` builds a plug-in from it.

* **declaring a plug-in** (:mod:`lens_possym.registry`): :class:`Plugin`,
  :func:`register_plugin`, :func:`unregister_plugin`, :func:`plugins`, :func:`resolve`,
  :data:`ENTRY_POINT_GROUP`, :class:`Registry`; a broken plug-in is reported once as a
  :class:`PluginWarning` and left out;
* **commands**: :func:`add_command` (a subcommand's parser and the function its arguments go
  to); :func:`with_threads` / :func:`apply_threads` (``--threads``, restored afterwards);
  the argparse types (:func:`positive_int`, :func:`non_negative_int`,
  :func:`positive_float`, :func:`checked_number`, :func:`int_list`,
  :func:`positive_int_list`, :func:`freq_ids_text`, :func:`layers_text`, :func:`ids_text`,
  and :class:`ArgumentValueError` for a value that does not read);
* **outputs**: :func:`staged_dir` / :func:`staged_file` (a command's outputs appear whole or
  not at all), :func:`check_output_dir` / :func:`check_output_file` (refuse an unusable
  destination before any work), :func:`write_text_atomically`;
* **a package's public names**: :func:`lazy_attributes` (served on first use, so the
  plug-in's ``__init__`` stays light and ``lens-possym --help`` fast);
* **configs and records**: :class:`JsonConfig` (a frozen dataclass with JSON round trips
  and field type checks: :func:`check_field_types`), :func:`to_jsonable`,
  :func:`tensor_from_json`, :class:`ResultIO` (the result contract: ``save``/``load``,
  ``to_dict``/``from_dict``);
* **models**: :func:`batched_token_ids` (token ids as the training loop and the core's
  analyses pass them: ``[batch, pos]`` int64, checked against ``n_ctx`` and ``d_vocab``);
  :func:`boundary` (a public function's arguments checked with one error each);
* **figures**: :func:`axes_or_new`, :func:`to_numpy`, :func:`angle_label`.

Importing this module imports only the registry; every other name is imported the first
time it is used (a plug-in's ``__init__`` imports ``Plugin`` and ``lazy_attributes`` from
here and stays free of torch).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import lazy_attributes
from ..registry import (
    ENTRY_POINT_GROUP,
    Plugin,
    PluginWarning,
    Registry,
    plugins,
    register_plugin,
    resolve,
    unregister_plugin,
)

if TYPE_CHECKING:  # what the lazy table below serves, for type checkers and readers
    from .._checks import boundary
    from .._files import write_text_atomically
    from .._json import JsonConfig, check_field_types, tensor_from_json, to_jsonable
    from ..cli._command import add_command
    from ..cli._output import check_output_dir, check_output_file, staged_dir, staged_file
    from ..cli._threads import apply_threads, with_threads
    from ..cli._types import (ArgumentValueError, checked_number, freq_ids_text, ids_text,
                              int_list, layers_text, non_negative_int, positive_float,
                              positive_int, positive_int_list)
    from ..results_io import ResultIO
    from ..training.models import batched_token_ids
    from ..viz._axes import angle_label, axes_or_new, to_numpy

_EXPORTS = {
    "..cli._command": ["add_command"],
    "..cli._threads": ["with_threads", "apply_threads"],
    "..cli._types": ["ArgumentValueError", "positive_int", "non_negative_int", "positive_float",
                     "checked_number", "int_list", "positive_int_list", "freq_ids_text",
                     "layers_text", "ids_text"],
    "..cli._output": ["staged_dir", "staged_file", "check_output_dir", "check_output_file"],
    ".._files": ["write_text_atomically"],
    ".._json": ["JsonConfig", "check_field_types", "to_jsonable", "tensor_from_json"],
    "..results_io": ["ResultIO"],
    "..training.models": ["batched_token_ids"],
    ".._checks": ["boundary"],
    "..viz._axes": ["axes_or_new", "to_numpy", "angle_label"],
}
__getattr__, __dir__ = lazy_attributes(__name__, _EXPORTS, ["registry"])

__all__ = [
    "ENTRY_POINT_GROUP", "Plugin", "PluginWarning", "Registry", "plugins", "register_plugin",
    "resolve", "unregister_plugin", "lazy_attributes",
    *(name for names in _EXPORTS.values() for name in names),
]
