"""The HTML report's names and rank summary: short names in the tables and chart labels,
the whole name on hover, and the ranks slowest first before anything else."""

from __future__ import annotations

import html
import json
import re
from pathlib import Path

from parastream.report.html import gantt_data, render_html
from parastream.timeline.analyze import analyze_capture
from parastream.timeline.names import short_name
from parastream.timeline.readers import read_path

TEMPLATES = Path(__file__).resolve().parents[1] / "data" / "kineto" / "synthetic_comm_partial.json.gz"


def _captures():
    return [(tl, analyze_capture(tl)) for tl in read_path(str(TEMPLATES))]


def _dominators(caps) -> list[str]:
    return [p["dominator"]["name"] for _, a in caps for p in a["parallel_points"]
            if p["dominator"]]


def test_tables_show_short_names_with_the_full_one_on_hover():
    caps = _captures()
    page = render_html(caps, {"captures": len(caps)}, "t")
    full = max(_dominators(caps), key=len)
    assert len(full) > 500
    spans = re.findall(r'<span class="opname" title="([^"]*)">([^<]*)</span>', page)
    assert (html.escape(full, quote=True), html.escape(short_name(full))) in spans
    # no full template name as visible text of a table cell
    assert f">{html.escape(full)}<" not in page


def test_names_full_shows_the_whole_name():
    caps = _captures()
    page = render_html(caps, {"captures": len(caps)}, "t", names="full")
    full = max(_dominators(caps), key=len)
    assert f'<span class="opname">{html.escape(full)}</span>' in page


def test_chart_labels_are_short_and_tooltips_keep_the_full_name():
    tl, a = _captures()[0]
    data = gantt_data(tl, a)
    assert len(data["short"]) == len(data["names"])
    assert all(s == short_name(n) for s, n in zip(data["short"], data["names"]))
    assert max(len(s) for s in data["short"]) <= 60 < max(len(n) for n in data["names"])
    doms = [p["dom"] for p in data["points"] if p["dom"]]
    assert any(d.get("short") and d["short"] != d["name"] for d in doms)
    assert "short" not in gantt_data(tl, a, names="full")


def test_the_rank_summary_is_first():
    caps = _captures()
    rows = [{"rank": r, "source": f"/x/rank{r}.json.gz", "captures": 1, "median_wall_us": w,
             "median_parallelism": 1.2, "median_comm_comp_overlap_pct": 30.0,
             "median_comm_exposed_us": e, "verdict_counts": {"true": 1, "false": 2}}
            for r, w, e in ((0, 100.0, 5.0), (1, 130.0, None), (2, 110.0, 7.5))]
    summary = {"captures": 3, "slowest_rank": 1, "fastest_rank": 0, "wall_spread_pct": 30.0,
               "per_rank": rows, "units": 4, "units_analysed": 3,
               "broken": [{"source": "/x/rank3.json", "error": "not JSON <here>"}]}
    page = render_html(caps, summary, "ranks")
    ranks = page.index('id="ranks"')
    assert ranks < page.index('id="summary"') < page.index('id="capture-1"')
    section = page[ranks:page.index('id="summary"')]
    assert "3 of 4 analysed" in section and "not JSON &lt;here&gt;" in section
    assert "wall spread" in section and "30.0%" in section
    order = re.findall(r'title="/x/rank(\d)\.json\.gz"', section)
    assert order == ["1", "2", "0"]
    json.dumps(summary)  # the document is still plain JSON
