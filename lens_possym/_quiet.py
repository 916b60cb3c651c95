"""No warnings on ``import lens_possym`` that are not about lens-possym.

``tqdm.auto`` (which Hugging Face's libraries import when they are imported, and which
lens-possym's progress bars use) warns ``TqdmWarning: IProgress not found. Please update
jupyter and ipywidgets`` the first time it is imported in a Jupyter kernel without
ipywidgets, and then falls back to the plain text bar. The fallback is all lens-possym
needs, so the first import happens here with that one warning silenced; every later
``import tqdm.auto`` reuses the module and says nothing. (If something imported
``tqdm.auto`` before lens-possym, the warning was already printed by then.)
"""

from __future__ import annotations

import warnings

__all__ = ["quiet_tqdm"]


def quiet_tqdm() -> None:
    """Import ``tqdm.autonotebook`` with its missing-ipywidgets warning silenced."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*IProgress not found.*")
        import tqdm.autonotebook  # noqa: F401
