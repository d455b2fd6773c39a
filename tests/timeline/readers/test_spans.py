"""Spans of a JSON array read where they lie (:mod:`parastream.timeline.readers.spans`)."""

from __future__ import annotations

import json

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from parastream.errors import InputError
from parastream.timeline.readers import spans

_TEXT = st.text(alphabet=st.sampled_from(list('ab}{,[] "\\\n\té')), max_size=12)
_ELEMENT = st.fixed_dictionaries({"name": _TEXT, "n": st.integers(0, 10 ** 12)},
                                 optional={"args": st.lists(st.dictionaries(_TEXT, _TEXT,
                                                                            max_size=2),
                                                            max_size=2)})
_SEPARATOR = st.sampled_from([",", ", ", ",\n  ", " ,\n", ",\t"])


def _scanner(path: str):
    """``scan(a, b)``: the decoded elements of a span, or "decode" when it is no array."""
    reader = spans.SpanReader(path)

    def scan(a: int, b: int):
        try:
            return msgspec.json.decode(bytes(reader.framed(a, b)))
        except msgspec.DecodeError:
            return "decode"

    return scan


def _file(tmp_path, elements: list, seps: list[str]) -> tuple[str, int, int]:
    """A document ``{"x": 1, "a": [...]}`` with the elements joined by ``seps``; returns
    the path, the offset of the first element and of the array's "]"."""
    body = "".join(json.dumps(e) + (seps[i % len(seps)] if i < len(elements) - 1 else "")
                   for i, e in enumerate(elements))
    head = '{"x": 1, "a": ['
    path = tmp_path / "doc.json"
    path.write_bytes((head + body + "]}").encode())
    start = len(head.encode())
    return str(path), start, start + len(body.encode())


@settings(max_examples=60, deadline=None)
@given(elements=st.lists(_ELEMENT, min_size=1, max_size=30),
       seps=st.lists(_SEPARATOR, min_size=1, max_size=3), size=st.integers(1, 400))
def test_spans_cover_the_array_and_joined_failures_decode(tmp_path_factory, elements, seps, size):
    """The spans run in order over the array's bytes, leaving out only separators; a span
    that does not decode alone (a cut inside a string) is joined with the next ones, and
    the decoded spans together are the array's elements, in order."""
    path, start, end = _file(tmp_path_factory.mktemp("s"), elements, seps)
    cuts = spans.cut_spans(path, start, end, size)
    assert cuts[0][0] == start and cuts[-1][1] == end
    data = open(path, "rb").read()
    for (_, b), (c, _) in zip(cuts, cuts[1:]):
        assert b <= c and data[b - 1:b] == b"}" and data[c:c + 1] == b"{"
        assert data[b:c].strip() == b","
    scan = _scanner(path)
    out, carry = spans.join_failed(cuts, [scan(a, b) for a, b in cuts], scan, limit=1 << 30)
    assert carry is None  # the last span runs to the array's end: it always decodes
    assert [e for part in out for e in part] == elements


def test_a_join_past_the_limit_is_refused(tmp_path):
    path, start, end = _file(tmp_path, [{"name": "a},{b" * 50, "n": i} for i in range(20)],
                             [","])
    cuts = spans.cut_spans(path, start, end, 3)
    scan = _scanner(path)
    with pytest.raises(spans.TooLong):
        spans.join_failed(cuts, [scan(a, b) for a, b in cuts], scan, limit=100)
    out, carry = spans.join_failed(cuts, [scan(a, b) for a, b in cuts], scan, limit=1 << 20)
    assert carry is None and len([e for part in out for e in part]) == 20


def test_a_window_without_a_boundary_grows_until_one_is_found(tmp_path, monkeypatch):
    """An element far longer than the window: the cut lands after it, not inside it."""
    monkeypatch.setattr(spans, "WINDOW_BYTES", 16)
    elements = [{"name": "x" * 5000, "n": 1}, {"name": "y", "n": 2}, {"name": "z", "n": 3}]
    path, start, end = _file(tmp_path, elements, [",\n      "])
    cuts = spans.cut_spans(path, start, end, 10)
    assert len(cuts) == 3
    assert [msgspec.json.decode(bytes(spans.SpanReader(path).framed(a, b)))
            for a, b in cuts] == [[e] for e in elements]


def test_the_buffer_is_reused_and_grows_for_a_longer_span(tmp_path):
    path, start, end = _file(tmp_path, [{"name": "n" * k, "n": k} for k in (1, 3000, 2)],
                             [","])
    reader = spans.SpanReader(path)
    cuts = spans.cut_spans(path, start, end, 1)
    first = bytes(reader.framed(*cuts[0]))
    buffer = reader.buffer
    assert bytes(reader.framed(*cuts[2])).startswith(b'[{"name": "nn"')
    assert reader.buffer is buffer  # a shorter span: the same buffer
    assert json.loads(bytes(reader.framed(*cuts[1])))[0]["n"] == 3000
    assert json.loads(first) == [{"name": "n", "n": 1}]


def test_a_file_that_shrank_while_read_is_named(tmp_path):
    path, start, end = _file(tmp_path, [{"name": "a", "n": i} for i in range(10)], [","])
    reader = spans.SpanReader(path)
    with open(path, "r+b") as f:
        f.truncate(start + 5)
    with pytest.raises(InputError, match="changed while it was read"):
        reader.framed(start, end)
