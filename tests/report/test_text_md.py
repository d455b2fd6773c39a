"""The text and Markdown reports of ``parastream analyze``: short op names (``--names``) on
a real CUDA trace with C++ template kernels, rows of at most three lines, Markdown without
HTML entities, and the cross-rank summary first (``--summary`` alone)."""

from __future__ import annotations

import copy
import gzip
import html
import json
import re
from pathlib import Path

import pytest
from markdown_it import MarkdownIt

from parastream.cli import main
from parastream.report.markdown import render_markdown
from parastream.report.text import render_text
from parastream.timeline.names import short_name

DATA = Path(__file__).resolve().parents[1] / "data" / "kineto"
#: a real A100 trace: its main-stream kernels are C++ templates of up to 724 characters
TEMPLATES = DATA / "synthetic_comm_partial.json.gz"
MD = MarkdownIt("commonmark").enable("table")


def analyze(capsys, *argv: str) -> str:
    assert main(["analyze", *argv, "--no-progress", "-j", "1"]) == 0
    return capsys.readouterr().out


def table_rows(out: str) -> list[list[list[str]]]:
    """The body rows of every rich table in ``out``: each row a list of its lines, each
    line the list of its cells. A row starts where the first cell is not empty."""
    rows: list[list[list[str]]] = []
    in_body = False
    for line in out.splitlines():
        if line.startswith(("┡", "┏")):
            in_body = line.startswith("┡")
            continue
        if line.startswith("└"):
            in_body = False
            continue
        if in_body and line.startswith("│"):
            cells = [c.strip() for c in line.strip("│").split("│")]
            if cells[0] or not rows:
                rows.append([])
            rows[-1].append(cells)
    return rows


def dominators(doc: dict) -> list[str]:
    return [p["dominator"]["name"] for c in doc["captures"] for p in c["parallel_points"]
            if p["dominator"]]


@pytest.fixture(scope="module")
def template_doc() -> dict:
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-m", "parastream", "analyze", str(TEMPLATES),
                        "--format", "json", "--no-progress"], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def test_the_trace_has_long_template_names(template_doc):
    assert max(len(n) for n in dominators(template_doc)) > 500


@pytest.mark.parametrize("width", [170, 120, 90])
def test_no_row_is_over_three_lines(template_doc, width):
    out = render_text(template_doc, width=width)
    rows = table_rows(out)
    assert len(rows) > 30
    assert max(len(r) for r in rows) <= 3
    assert "vectorized_elementwise_kernel<…>" in out or width < 170


def test_the_command_line_shows_short_names(capsys, template_doc):
    out = analyze(capsys, str(TEMPLATES))
    assert max(len(r) for r in table_rows(out)) <= 3
    assert "at::native::vectorized_elementwise_kernel<…>" in out
    assert "void at::" not in out and "Array<char*" not in out


def test_names_full_keeps_the_whole_name(capsys, template_doc):
    out = analyze(capsys, str(TEMPLATES), "--names", "full")
    full = max(dominators(template_doc), key=len)
    # the dominator column of each row, its lines joined (wrapping drops spaces only)
    cells = ["".join("".join(line[3] for line in row).split()) for row in table_rows(out)
             if len(row[0]) > 4]
    want = "".join(full.split())
    assert any(c.startswith(want) for c in cells)  # the name, then the window
    md = analyze(capsys, str(TEMPLATES), "--format", "md", "--names", "full")
    assert f"`{full}`" in md


def test_markdown_has_no_html_entities_and_renders_the_short_names(template_doc):
    md = render_markdown(template_doc)
    assert "&lt;" not in md and "&gt;" not in md and "&amp;" not in md
    table = [ln for ln in md.splitlines() if ln.startswith("| ") and "[" in ln]
    assert len(table) > 30
    page = MD.render(md)
    shown = {html.unescape(c) for c in re.findall(r"<td><code>(.*?)</code></td>", page)}
    assert {short_name(n) for n in dominators(template_doc)} <= shown
    for row in re.findall(r"<tr>(.*?)</tr>", page, re.S):
        assert row.count("<td") in (0, 8)  # a header, or a point: no name split a row


def test_markdown_escapes_names_that_look_like_markup():
    doc = {"captures": [], "triage": {"verdict": "3a", "summary": "a <b>|c</b> & *d*",
                                      "baseline": {"wall_us": 1.0}, "multi": {"wall_us": 2.0},
                                      "wall_change_pct": 100.0, "evidence": ["x|<i>y</i>"]}}
    md = render_markdown(doc)
    assert "&lt;" not in md and "&amp;" not in md
    page = MD.render(md)
    assert "<b>" not in page and "<i>" not in page
    assert "a &lt;b&gt;|c&lt;/b&gt; &amp; *d*" in page


# ------------------------------------------------------------------ several ranks
def _rank_file(dst: Path, rank: int, extra_us: int) -> None:
    """The template trace as rank ``rank`` of a job; its kernels ``extra_us`` longer."""
    raw = json.loads(gzip.decompress(TEMPLATES.read_bytes()))
    raw["distributedInfo"] = {"backend": "nccl", "rank": rank, "world_size": 3}
    for e in raw["traceEvents"]:
        if e.get("cat") == "kernel":
            e["dur"] = e["dur"] + extra_us
    dst.write_bytes(gzip.compress(json.dumps(raw).encode()))


@pytest.fixture(scope="module")
def ranks_dir(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("ranks")
    for rank, extra in ((0, 0), (1, 40), (2, 15)):
        _rank_file(d / f"rank{rank}.json.gz", rank, extra)
    return d


def test_summary_alone_is_short_and_names_the_slowest_rank(capsys, ranks_dir):
    out = analyze(capsys, str(ranks_dir), "--summary")
    full = analyze(capsys, str(ranks_dir))
    assert len(out.splitlines()) < 25 < len(full.splitlines())
    assert "slowest rank 1" in out and "fastest rank 0" in out
    assert re.search(r"wall spread \d+\.\d%", out)
    rows = table_rows(out)
    assert [r[0][0] for r in rows] == ["1", "2", "0"]  # slowest first
    md = analyze(capsys, str(ranks_dir), "--summary", "--format", "md")
    assert "Slowest rank **1**" in md and "wall spread" in md
    assert "### " not in md.replace("### Summary across 3 ranks", "")
    assert len(md.splitlines()) < 20


def test_the_rank_summary_comes_first(capsys, ranks_dir):
    doc = json.loads(analyze(capsys, str(ranks_dir), "--format", "json"))
    out = render_text(doc)
    first_capture = out.index(doc["captures"][0]["label"])
    assert out.index("slowest rank") < first_capture
    assert out.index("per rank, slowest first") < first_capture
    md = render_markdown(doc)
    assert md.index("Summary across 3 ranks") < md.index(doc["captures"][0]["label"])


def test_rank_rows_show_exposed_communication_and_envelope_only(capsys, ranks_dir):
    doc = json.loads(analyze(capsys, str(ranks_dir), "--format", "json"))
    doc = copy.deepcopy(doc)
    doc["ranks"][0]["median_comm_exposed_us"] = 123.456
    doc["ranks"][1].pop("median_comm_exposed_us", None)
    doc["ranks"][1]["verdict_counts"]["envelope_only"] = 2
    doc["captures"][0]["parallel_points"][0]["verdict"] = "envelope-only"
    out = render_text(doc, summary_only=True)
    rows = {r[0][0]: r[0] for r in table_rows(out)}
    assert "123.456" in rows["0"] and rows["1"][6] == "-"
    assert "2 env-only" in rows["1"][7]
    assert "envelope-only" in render_text(doc)  # a point's verdict, not a KeyError
    md = render_markdown(doc, summary_only=True)
    assert "123.456" in md


def test_broken_members_are_listed_near_the_top(capsys, ranks_dir):
    doc = json.loads(analyze(capsys, str(ranks_dir), "--format", "json"))
    doc["broken"] = [{"source": "ranks/rank3.json", "error": "not JSON: line 1"},
                     {"source": "ranks/rank4.json.gz", "error": "truncated gzip"}]
    doc["summary"]["units"], doc["summary"]["units_analysed"] = 5, 3
    for text in (render_text(doc, summary_only=True), render_markdown(doc, summary_only=True)):
        head = "\n".join(text.splitlines()[:6])
        assert "3 of 5 analysed" in head
        assert "rank3.json" in head and "not JSON: line 1" in head and "truncated gzip" in head
