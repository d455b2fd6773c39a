"""Names in Markdown (parastream.mdtext), checked by rendering with markdown-it (CommonMark,
installed with rich): no tag of the name's reaches the HTML, and a code span shows the
name exactly, backticks and all."""

from __future__ import annotations

import html
import re

from hypothesis import given, settings
from hypothesis import strategies as st
from markdown_it import MarkdownIt

from parastream.mdtext import cell, code, text

MD = MarkdownIt("commonmark").enable("table")
NAMES = st.text(alphabet=st.sampled_from(list("ab<>&`|/\\\"' =.x-_*[]()!#")), max_size=24)


def _no_tags(rendered: str, allowed: set[str]) -> bool:
    return all(t in allowed for t in re.findall(r"</?([a-zA-Z][a-zA-Z0-9]*)", rendered))


@settings(max_examples=300, deadline=None)
@given(NAMES)
def test_a_code_span_shows_the_name_exactly(name):
    if not name.strip():
        return
    out = MD.render(f"op {code(name)} ran")
    assert _no_tags(out, {"p", "code"})
    shown = re.search(r"<code>(.*)</code>", out, re.S)
    assert shown is not None
    if name == name.strip():  # CommonMark strips a space from both ends of a span
        assert html.unescape(shown.group(1)) == name


@settings(max_examples=300, deadline=None)
@given(NAMES)
def test_prose_and_cells_carry_no_tags(name):
    assert _no_tags(MD.render(f"a {text(name)} b"), {"p", "em", "strong", "a", "code"})
    table = MD.render(f"| h | k |\n|---|---|\n| {cell(name)} | {code(name, table=True)} |\n")
    assert _no_tags(table, {"table", "thead", "tbody", "tr", "th", "td", "code", "em",
                            "strong", "a"})
    assert table.count("<td") == 2  # the name's pipes split no cell


def test_the_known_hostile_names():
    for name in ("<script>alert(1)</script>", "</svg><img src=x onerror=alert(2)>", "a`b", "``"):
        assert "<script" not in MD.render(text(name)) and "<img" not in MD.render(cell(name))
        assert "<img" not in MD.render(code(name))


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=60))
def test_a_mermaid_label_stays_on_its_line_and_in_its_quotes(name):
    from parastream.mdtext import mermaid_label

    out = mermaid_label(name)
    assert not any(ch in out for ch in '\n\r<>"`')
    assert out == " ".join(out.split())  # one line, no control whitespace
    fence = MD.render(f"```mermaid\nflowchart LR\n  n0[\"{out}\"]\n```\n\nafter")
    assert fence.count("<pre>") == 1 and fence.rstrip().endswith("<p>after</p>")
