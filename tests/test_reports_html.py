"""The HTML renderer: self-contained (no network references), plotly.js once, strings escaped."""
from __future__ import annotations

import re

import numpy as np

from sitsprof.reports.html import (
    Figure,
    Report,
    Section,
    Table,
    format_value,
    html_safe_json,
    line_traces,
    plot_text,
    render_html,
)

HOSTILE = '<script>alert("x")</script><img src=x onerror=alert(1)>'


def hostile_report() -> Report:
    table = Table(["host", "p99"], [[HOSTILE, 1.5], ["ok", 2.0]], title=HOSTILE, row_classes=["outlier", ""])
    fig = Figure(HOSTILE, line_traces([(HOSTILE, np.arange(5), np.arange(5.0))]),
                 layout={"xaxis": {"title": {"text": plot_text(HOSTILE)}}}, caption=HOSTILE)
    return Report(title=HOSTILE, subtitle=HOSTILE, banners=[HOSTILE],
                  sections=[Section(HOSTILE, intro=HOSTILE, tables=[table], figures=[fig], notes=[HOSTILE])])


def test_no_network_references_and_plotly_embedded_once(html_refs):
    html = render_html(hostile_report())
    refs = html_refs(html)
    assert refs.external == []
    assert "link" not in refs.tags and "img" not in refs.tags and "iframe" not in refs.tags
    assert not re.search(r"<script[^>]+src=", html, flags=re.I)
    assert html.count("plotly.js v") == 1  # the bundle's banner comment appears once
    assert len(html) < 6_000_000


def test_user_strings_are_escaped_everywhere():
    html = render_html(hostile_report())
    assert HOSTILE not in html
    head = html[: html.find("window.PlotlyConfig")]  # everything we wrote before the scripts
    assert "<img" not in head and "<script>alert" not in head and "&lt;img src=x" in head
    # Every <script> element is one we wrote: the config, plotly.js, the JSON figures, the loader.
    assert html.count("<script") == 4
    # In the figure JSON, no '<' survives at all (html_safe_json) and labels are entity-escaped.
    start = html.find('id="sitsprof-figures"')
    blob = html[start: html.find("</script>", start)]
    assert "<" not in blob.split(">", 1)[1] and "\\u0026lt;script\\u0026gt;" in blob


def test_html_safe_json_round_trips():
    import json

    obj = {"a": "</script><!--", "b": [1.0, float("nan"), np.float32(2.5)], "c": np.arange(3)}
    text = html_safe_json(obj)
    assert "<" not in text and ">" not in text and "&" not in text
    assert json.loads(text) == {"a": "</script><!--", "b": [1.0, None, 2.5], "c": [0, 1, 2]}


def test_format_value():
    assert format_value(None) == "–" and format_value(float("nan")) == "–"
    assert format_value(1234567) == "1,234,567"
    assert format_value(612.345) == "612.3" and format_value(0.0421) == "0.0421"
    assert format_value(np.float64(3.5e9)) == "3.5e+09" and format_value(True) == "yes"


def test_the_reference_scanner_sees_references(html_refs):
    """The scanner behind the 'no network reference' checks finds each kind it looks for."""
    refs = html_refs('<img src="http://x/a.png"><a href="#top">t</a>'
                     '<style>@import "y.css"; b{background:url(z.png)}</style>')
    assert refs.external == ["http://x/a.png", "z.png", '"y.css"']
    assert refs.tags == ["img", "a", "style"]
