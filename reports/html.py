"""Self-contained HTML reports: Jinja2 templates (autoescaped) plus plotly.js embedded once.

A report is a plain data model (`Report` > `Section` > `Table` / `Figure`) built by the
analysis code; `render_html` turns it into one file that opens without a network: the
plotly.js bundle comes from the installed plotly package, figures are JSON specs drawn by
one small script, and nothing references an http(s) URL for scripts, styles or images.

User-supplied strings (hostnames, labels, run names) are escaped twice over: Jinja2
autoescaping for the HTML, and `plot_text` for plotly labels (plotly reads labels as a
subset of HTML, so a raw ``<`` in a hostname would otherwise become markup).
"""
from __future__ import annotations

import datetime as _dt
import html as _html
import json
import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

__all__ = [
    "PALETTE",
    "TEMPLATE_DIR",
    "Figure",
    "Report",
    "Section",
    "Table",
    "format_value",
    "html_safe_json",
    "line_traces",
    "plot_text",
    "plotly_js",
    "render_html",
    "write_html",
]

TEMPLATE_DIR = Path(__file__).resolve().parent / "templates"

#: Colours for series, in order (Okabe-Ito, then four of Paul Tol's; twelve before one repeats).
PALETTE = ["#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#C9B200", "#000000",
           "#882255", "#44AA99", "#999999", "#117733"]

_BASE_LAYOUT = {
    "margin": {"l": 70, "r": 10, "t": 30, "b": 55},
    "font": {"family": "system-ui, -apple-system, Segoe UI, sans-serif", "size": 12},
    "paper_bgcolor": "#ffffff",
    "plot_bgcolor": "#ffffff",
    "hovermode": "closest",
    "legend": {"orientation": "v", "x": 1.02, "xanchor": "left", "y": 1, "font": {"size": 11}},
    "colorway": PALETTE,
    "xaxis": {"gridcolor": "#e5e5e5", "zeroline": False, "automargin": True},
    "yaxis": {"gridcolor": "#e5e5e5", "zeroline": False, "automargin": True},
}


def plot_text(value: Any, limit: int = 40) -> str:
    """A user string made safe for a plotly label (plotly parses a subset of HTML).

    Only &, < and > are escaped: plotly decodes those entities back to text but shows
    ``&quot;`` literally. Longer than `limit` characters, it is cut with an ellipsis so a
    long host name cannot squeeze the plot out of its legend.
    """
    text = str(value)
    if len(text) > limit:
        text = text[: limit - 1] + "…"
    return _html.escape(text, quote=False)


@dataclass
class Figure:
    """One plotly figure: `data` (list of trace dicts) and `layout` (dict), as plotly.js takes them."""

    title: str
    data: list[dict]
    layout: dict = field(default_factory=dict)
    caption: str = ""
    height: int = 380
    wide: bool = False  # span the whole row instead of one grid column

    def spec(self) -> dict:
        layout = _merge(_BASE_LAYOUT, self.layout)
        layout.setdefault("height", self.height)
        return {"data": self.data, "layout": layout}


@dataclass
class Table:
    """A table; `row_classes` (one per row, e.g. "outlier") style whole rows."""

    columns: list[str]
    rows: list[list[Any]]
    title: str = ""
    caption: str = ""
    row_classes: list[str] | None = None
    collapsed: bool | None = None  # None: fold tables longer than 15 rows behind a summary line

    @property
    def text_columns(self) -> list[bool]:
        """Per column: does it hold text (then its header aligns left like its cells)?"""
        return [any(_is_text(row[i]) for row in self.rows if i < len(row)) for i in range(len(self.columns))]

    @property
    def folded(self) -> bool:
        return len(self.rows) > 15 if self.collapsed is None else self.collapsed

    def formatted_rows(self) -> list[tuple[str, list[tuple[str, bool]]]]:
        """Per row: (css class, [(text, is_text)]); text cells are left-aligned and may wrap."""
        classes = self.row_classes or [""] * len(self.rows)
        return [(cls, [(format_value(v), _is_text(v)) for v in row]) for cls, row in zip(classes, self.rows)]


@dataclass
class Section:
    title: str
    intro: str = ""
    tables: list[Table] = field(default_factory=list)
    figures: list[Figure] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    anchor: str = ""


@dataclass
class Report:
    title: str
    sections: list[Section]
    subtitle: str = ""
    banners: list[str] = field(default_factory=list)  # e.g. "reference data, not measured"
    generated_at: str = ""
    tool_version: str = ""


def _is_text(v: Any) -> bool:
    return not (v is None or isinstance(v, (bool, int, float, np.number, np.bool_)))


def format_value(v: Any) -> str:
    """Numbers to short text (3-4 significant digits, thousands separators); None/NaN to '–'."""
    if v is None:
        return "–"
    if isinstance(v, (bool, np.bool_)):
        return "yes" if v else "no"
    if isinstance(v, (int, np.integer)):
        return f"{int(v):,}"
    if isinstance(v, (float, np.floating)):
        x = float(v)
        if math.isnan(x):
            return "–"
        if math.isinf(x):
            return "∞" if x > 0 else "-∞"
        if x == 0:
            return "0"
        ax = abs(x)
        if ax >= 1e7 or ax < 1e-3:
            return f"{x:.3g}"
        if ax >= 1000:
            return f"{x:,.0f}"
        if ax >= 100:
            return f"{x:.1f}"
        if ax >= 1:
            return f"{x:.2f}"
        return f"{x:.4f}"
    return str(v)


def _merge(base: dict, over: dict) -> dict:
    out = dict(base)
    for k, v in over.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = _merge(out[k], v)
        else:
            out[k] = v
    return out


def _jsonable(obj: Any) -> Any:
    if isinstance(obj, np.ndarray):
        if obj.dtype.kind == "f":
            return [_float(x) for x in obj.tolist()]
        return obj.tolist()
    if isinstance(obj, (np.integer,)):
        return int(obj)
    if isinstance(obj, (np.floating, float)):
        return _float(float(obj))
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, (np.bool_,)):
        return bool(obj)
    return obj


def _float(x: float):
    if not math.isfinite(x):
        return None
    # 6 significant digits are plenty on screen and keep the file small.
    return float(f"{x:.6g}")


def html_safe_json(obj: Any) -> str:
    """JSON that can sit inside a <script> element (no '<', '>', '&' or U+2028/9 verbatim)."""
    text = json.dumps(_jsonable(obj), separators=(",", ":"), allow_nan=False)
    return (text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
            .replace("\u2028", "\\u2028").replace("\u2029", "\\u2029"))


@lru_cache(maxsize=1)
def plotly_js() -> str:
    """The plotly.js bundle shipped inside the installed plotly Python package."""
    from plotly.offline import get_plotlyjs

    js = get_plotlyjs()
    if "</script" in js.lower():  # cannot happen with the bundles we know; refuse rather than break
        raise RuntimeError("the installed plotly.js bundle contains '</script'; cannot embed it")
    return js


@lru_cache(maxsize=1)
def _environment():
    from jinja2 import Environment, FileSystemLoader, StrictUndefined

    env = Environment(
        loader=FileSystemLoader(str(TEMPLATE_DIR)),
        autoescape=True,
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["zip"] = lambda a, b: list(zip(a, b))
    return env


def _anchor(title: str, used: set[str]) -> str:
    base = "".join(c if c.isalnum() else "-" for c in title.lower()).strip("-") or "section"
    name, i = base, 2
    while name in used:
        name, i = f"{base}-{i}", i + 1
    used.add(name)
    return name


def render_html(report: Report) -> str:
    """The whole report as one HTML string."""
    used: set[str] = set()
    figures: list[dict] = []
    sections = []
    for section in report.sections:
        anchor = section.anchor or _anchor(section.title, used)
        figs = []
        for fig in section.figures:
            fig_id = f"fig-{len(figures)}"
            figures.append({"id": fig_id, **fig.spec()})
            figs.append({"id": fig_id, "title": fig.title, "caption": fig.caption, "height": fig.height,
                         "wide": fig.wide})
        sections.append({"anchor": anchor, "section": section, "figures": figs})
    template = _environment().get_template("report.html.j2")
    from markupsafe import Markup

    return template.render(
        report=report,
        sections=sections,
        generated_at=report.generated_at or _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        plotly_js=Markup(plotly_js()),
        figures_json=Markup(html_safe_json(figures)),
    )


def write_html(report: Report, path) -> Path:
    """Render and write atomically (temporary file, fsync, rename); returns the path."""
    from sitsprof.common.atomic import atomic_write_text, make_folder

    path = Path(path)
    make_folder(path.parent)
    atomic_write_text(path, render_html(report))
    return path


def line_traces(series: Iterable[tuple[str, Any, Any]], mode: str = "lines", **extra) -> list[dict]:
    """Scatter traces from (name, x, y) triples; names escaped for plotly."""
    return [{"type": "scatter", "mode": mode, "name": plot_text(name), "x": x, "y": y, **extra}
            for name, x, y in series]
