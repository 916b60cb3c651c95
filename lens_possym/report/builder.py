""":class:`Report`: one self-contained HTML page built from sections, tables and figures.

Every command that writes results (``profile``, ``ablate``, ``sweep``, and the training
runs to come) builds its ``report.html`` with this class, so every report looks alike and
has the same guarantees:

* **one file, offline**: PNGs are embedded as base64, plotly's JavaScript is inlined once
  (in the page head, only when a plotly figure is on the page: ~4.8 MB), circuitsvis views
  come with their JavaScript (``local_src``); the page references no outside resource;
* **every number explained**: :meth:`Report.glossary` lists the terms the page uses
  (definitions in :mod:`lens_possym.report.glossary`), key/value tables take labels and
  explanations from the same place, and figures carry captions.
"""

from __future__ import annotations

import base64
import html
import io
import json
import math
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from .glossary import TERMS, describe
from ..viz.interactive import PLOTLY_CONFIG
from .._files import write_text_atomically

__all__ = ["Report", "format_value"]

_STYLE = """
body { font-family: system-ui, sans-serif; max-width: 1180px; margin: 1.5em auto;
       padding: 0 1em; color: #222; line-height: 1.4; }
h1 { font-size: 1.5em; } h2 { font-size: 1.2em; margin-top: 1.6em;
     border-bottom: 1px solid #eee; padding-bottom: 2px; }
img { max-width: 100%; border: 1px solid #eee; margin: 0.3em 0; }
table { border-collapse: collapse; margin: 0.4em 0 0.8em; font-size: 0.88em; }
th, td { border: 1px solid #ddd; padding: 3px 8px; text-align: left; vertical-align: top; }
th { background: #f6f6f6; font-weight: 600; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
td.note { color: #555; font-size: 0.95em; max-width: 34em; }
.cols { display: grid; grid-template-columns: repeat(auto-fit, minmax(460px, 1fr));
        gap: 1.5em; align-items: start; }
.cols > div { min-width: 0; overflow-x: auto; }
.caption { color: #555; font-size: 0.9em; margin: 0.1em 0 0.6em; max-width: 60em; }
code { background: #f3f3f3; padding: 0 3px; border-radius: 2px; }
pre.command { background: #f6f6f6; padding: 6px 10px; white-space: pre-wrap;
              word-break: break-all; font-size: 0.85em; }
dl.glossary dt { font-weight: 600; margin-top: 0.4em; }
dl.glossary dd { margin-left: 1.5em; color: #333; }
details > summary { cursor: pointer; color: #333; margin: 0.6em 0; }
"""


def format_value(value: Any) -> str:
    """A table cell: 4 significant digits for floats, ``–`` for ``nan``/``None``."""
    if value is None:
        return "–"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return "–" if math.isnan(value) else f"{value:.4g}"
    if isinstance(value, (list, tuple)):
        return ", ".join(format_value(v) for v in value)
    return str(value)


class Report:
    """An HTML report under construction; :meth:`save` writes it as one file.

    Methods add content in order and return the report, so calls chain::

        Report("Band sweep of gemma-3-270m", command=cmd).section("Summary").key_values(rows)
    """

    def __init__(self, title: str, *, command: str = "", intro: str = "") -> None:
        self.title = title
        self._parts: list[str] = [f"<h1>{html.escape(title)}</h1>"]
        self._scripts: list[str] = []
        self._uses_plotly = False
        self._n_plots = 0
        if command:
            self._parts.append("<p>Written by:</p><pre class='command'>"
                               f"{html.escape(command)}</pre>")
        if intro:
            self.text(intro)

    # ---- content -----------------------------------------------------------------------

    def section(self, title: str, *, caption: str = "", anchor: str | None = None) -> "Report":
        """A heading, and an optional caption under it (plain text)."""
        anchor_attr = f" id='{html.escape(anchor)}'" if anchor else ""
        self._parts.append(f"<h2{anchor_attr}>{html.escape(title)}</h2>")
        if caption:
            self.caption(caption)
        return self

    def text(self, text: str, *, raw: bool = False) -> "Report":
        """A paragraph (escaped unless ``raw``)."""
        self._parts.append(f"<p>{text if raw else html.escape(text)}</p>")
        return self

    def caption(self, text: str) -> "Report":
        self._parts.append(f"<p class='caption'>{html.escape(text)}</p>")
        return self

    def raw(self, markup: str) -> "Report":
        """Markup as is (the caller escapes what it puts in)."""
        self._parts.append(markup)
        return self

    def key_values(self, rows: Iterable[tuple[str, Any]], *, explain: bool = True) -> "Report":
        """A two- or three-column table: label, value and (``explain``) what it means.

        Keys found in :data:`~lens_possym.report.glossary.TERMS` get its label and
        explanation; other keys are shown as given.
        """
        body = []
        for key, value in rows:
            label, note = describe(key)
            cells = (f"<th>{html.escape(label)}</th>"
                     f"<td class='num'>{html.escape(format_value(value))}</td>")
            if explain:
                cells += f"<td class='note'>{html.escape(note)}</td>"
            body.append(f"<tr>{cells}</tr>")
        self._parts.append("<table>" + "".join(body) + "</table>")
        return self

    def table(self, rows: Sequence[Mapping[str, Any]] | Any, *,
              columns: Sequence[str] | None = None, max_rows: int = 200) -> "Report":
        """A table of records (a list of dicts or a ``pandas.DataFrame``); headers that are
        glossary terms are shown by their label, with the explanation on hover."""
        if hasattr(rows, "to_dict"):  # a DataFrame
            rows = rows.to_dict("records")
        rows = list(rows)
        columns = list(columns or (rows[0].keys() if rows else []))
        head = "".join(f"<th title='{html.escape(describe(c)[1])}'>"
                       f"{html.escape(describe(c)[0])}</th>" for c in columns)
        body = []
        for row in rows[:max_rows]:
            cells = []
            for c in columns:
                value = row.get(c)
                cls = " class='num'" if isinstance(value, (int, float)) else ""
                cells.append(f"<td{cls}>{html.escape(format_value(value))}</td>")
            body.append("<tr>" + "".join(cells) + "</tr>")
        more = (f"<p class='caption'>{len(rows) - max_rows} more rows in the JSON file.</p>"
                if len(rows) > max_rows else "")
        self._parts.append(f"<table><tr>{head}</tr>{''.join(body)}</table>{more}")
        return self

    def image(self, figure: Any, *, caption: str = "", alt: str = "figure",
              dpi: int = 110) -> "Report":
        """A matplotlib figure (or a PNG file) embedded as base64, with a caption."""
        if isinstance(figure, (str, Path)):
            data = Path(figure).read_bytes()
        else:
            buffer = io.BytesIO()
            figure.savefig(buffer, format="png", dpi=dpi)
            data = buffer.getvalue()
        encoded = base64.b64encode(data).decode("ascii")
        self._parts.append(f"<img alt='{html.escape(alt)}' "
                           f"src='data:image/png;base64,{encoded}'>")
        if caption:
            self.caption(caption)
        return self

    def plotly(self, figure: Any, *, caption: str = "", div_id: str | None = None) -> "Report":
        """An interactive plotly figure; its JavaScript is inlined once for the page."""

        self._uses_plotly = True
        self._n_plots += 1
        div_id = div_id or f"plot{self._n_plots}"
        self._parts.append(figure.to_html(full_html=False, include_plotlyjs=False,
                                          div_id=div_id, config=PLOTLY_CONFIG))
        if caption:
            self.caption(caption)
        return self

    def script(self, javascript: str, data: Mapping[str, Any] | None = None) -> "Report":
        """JavaScript run after the page's content; ``data`` is bound to ``DATA`` (JSON)."""
        prefix = ""
        if data is not None:
            prefix = "const DATA = " + json.dumps(data, allow_nan=False).replace("</", "<\\/") \
                + ";\n"
        self._scripts.append(prefix + javascript)
        return self

    def glossary(self, terms: Sequence[str] | None = None, *,
                 title: str = "What the numbers mean") -> "Report":
        """Definitions of ``terms`` (keys of :data:`TERMS`; all by default)."""
        chosen = list(terms) if terms is not None else list(TERMS)
        items = []
        for key in chosen:
            label, note = describe(key)
            items.append(f"<dt>{html.escape(label)}</dt><dd>{html.escape(note)}</dd>")
        self.section(title, anchor="glossary")
        self._parts.append("<dl class='glossary'>" + "".join(items) + "</dl>")
        return self

    def details(self, summary: str) -> "Report":
        """Start a collapsed block (closed by :meth:`end_details`)."""
        self._parts.append(f"<details><summary>{html.escape(summary)}</summary>")
        return self

    def end_details(self) -> "Report":
        self._parts.append("</details>")
        return self

    # ---- output ------------------------------------------------------------------------

    def to_html(self) -> str:
        head = [f"<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>",
                f"<title>{html.escape(self.title)}</title>", f"<style>{_STYLE}</style>"]
        if self._uses_plotly:
            from plotly.offline import get_plotlyjs

            head.append(f"<script type='text/javascript'>{get_plotlyjs()}</script>")
        scripts = "".join(f"<script>{s}</script>" for s in self._scripts)
        return ("\n".join(head) + "</head><body>\n" + "\n".join(self._parts) + scripts
                + "\n</body></html>\n")

    def save(self, path: str | Path) -> Path:
        """Write the page (parents created); returns the path."""

        return write_text_atomically(Path(path), self.to_html())
