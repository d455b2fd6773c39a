"""Kineto reader in bounded memory: the file is read a chunk at a time and the events
array decoded piece by piece, with the same result as the document read whole.

Each test makes the chunks and pieces tiny so that a few kilobytes of trace cross many
chunk and piece boundaries, some of them inside strings that hold ``},{`` and escapes."""

from __future__ import annotations

import gzip
import json
import multiprocessing as mp
import tracemalloc
from pathlib import Path

import numpy as np
import pytest

from parastream.timeline.readers import kineto, read_chunks

DATA = Path(__file__).resolve().parents[2] / "data" / "kineto"
SAMPLE = DATA / "synthetic_comm_two_streams.json.gz"
COLUMNS = ("stream", "name", "type", "start_ns", "end_ns", "kind", "core", "block_dim",
           "step", "launch_ns", "sm_share", "wait_stream", "wait_on", "wait_start_ns",
           "wait_end_ns", "wait_name")
#: names whose text looks like event boundaries, escapes and the array's end
TRICKY = ['k},{"ph": "X"}, {x', 'q\\"},{\\"r', 'e\\\\}, {', "}]}, {\"traceEvents\": [",
          'u\u00e9\u4e2d}\t,\n{']


def tricky_doc(after: bool) -> dict:
    """The sample trace with kernels and host ops named :data:`TRICKY` spread through it;
    ``after``: its deviceProperties and distributedInfo after the events array."""
    doc = json.loads(gzip.decompress(SAMPLE.read_bytes()))
    events = doc["traceEvents"]
    kernels = [i for i, e in enumerate(events) if e.get("cat") == "kernel"]
    for j, i in enumerate(kernels[::7]):
        events[i]["name"] = TRICKY[j % len(TRICKY)] + events[i]["name"]
        events[i]["args"]["note"] = [{"a": TRICKY[j % len(TRICKY)]}, {"b": [{"c": 1}]}]
    for j, e in enumerate(events[::11]):
        if e.get("cat") == "cpu_op":
            e["name"] = TRICKY[j % len(TRICKY)]
    if after:
        head = {k: doc.pop(k) for k in ("deviceProperties", "distributedInfo")}
        doc = {"traceEvents": doc.pop("traceEvents"), **doc, **head}
    return doc


def whole(path: str, monkeypatch):
    """The timeline of the document read whole (the reader's path for malformed files)."""
    with monkeypatch.context() as m:
        m.setattr(kineto, "_decode_stream", lambda path, warnings: None)
        return kineto.read(path)


def streamed(path: str, monkeypatch, read_bytes: int, piece_bytes: int, workers: int = 1,
             how: str = "stream"):
    """The timeline read a piece at a time, ``how``: "spans" (each piece read where it
    lies in a plain file) or "stream" (the file read a chunk at a time, as a gzip file
    is); fails when the reader falls back to another way."""
    def refuse(path, warnings):
        raise AssertionError("read otherwise")

    with monkeypatch.context() as m:
        m.setattr(kineto, "READ_BYTES", read_bytes)
        m.setattr(kineto, "CHUNK_BYTES", piece_bytes)
        m.setattr(kineto, "PARALLEL_BYTES", 0 if workers > 1 else 1 << 60)
        m.setenv("PARASTREAM_WORKERS", str(workers))
        m.setattr(kineto, "_decode_whole", refuse)
        if how == "spans":
            m.setattr(kineto, "_decode_stream", refuse)
        else:
            m.setattr(kineto, "_decode_spans", lambda path, warnings: None)
        return kineto.read(path)


def assert_same(a, b) -> None:
    for col in COLUMNS:
        x, y = getattr(a, col), getattr(b, col)
        assert (x is None) == (y is None), col
        if x is not None:
            assert x.dtype == y.dtype and x.tobytes() == y.tobytes(), col
    assert a.names == b.names and a.streams == b.streams and a.types == b.types
    assert a.meta == b.meta and a.device == b.device and a.warnings == b.warnings
    ca, cb = a.collectives, b.collectives
    for col in ("op", "group", "seq", "nbytes", "peer", "start_ns", "end_ns"):
        assert np.array_equal(getattr(ca, col), getattr(cb, col)), col
    assert ca.group_ranks == cb.group_ranks


@pytest.mark.parametrize("how,workers", [("stream", 1), ("spans", 1), ("spans", 2)])
@pytest.mark.parametrize("after", [False, True])
@pytest.mark.parametrize("read_bytes,piece_bytes", [(7, 1), (64, 1), (1000, 300),
                                                    (4096, 50_000), (1 << 20, 1 << 20)])
def test_chunked_reading_is_the_whole_reading(tmp_path, monkeypatch, after, read_bytes,
                                              piece_bytes, how, workers):
    """Cuts at every "},{" (pieces of 1 byte) fall inside strings and nested lists: the
    pieces are joined until they decode, and every column is bitwise the same as the
    document's read whole; the top-level fields are read before or after the array."""
    if workers > 1 and "fork" not in mp.get_all_start_methods():
        pytest.skip("needs fork")
    f = tmp_path / "t.json"
    f.write_text(json.dumps(tricky_doc(after), indent=1))
    ref = whole(str(f), monkeypatch)
    assert any(n.startswith(TRICKY[0]) for n in ref.names)
    assert ref.device.name and ref.meta.get("rank") is not None
    assert_same(streamed(str(f), monkeypatch, read_bytes, piece_bytes, workers, how), ref)


def test_a_plain_trace_is_read_where_it_lies(tmp_path, monkeypatch):
    """A plain file takes the spans path (no chunked reading, no whole reading); a gzip
    file and a UTF-16 one cannot be read by offset and are not."""
    f = tmp_path / "t.json"
    f.write_text(json.dumps(tricky_doc(after=False)))
    ref = whole(str(f), monkeypatch)
    assert_same(streamed(str(f), monkeypatch, 1 << 20, 4096, 1, "spans"), ref)
    packed = tmp_path / "t.json.gz"
    packed.write_bytes(gzip.compress(f.read_bytes()))
    wide = tmp_path / "t16.json"
    wide.write_bytes(f.read_text().encode("utf-16"))
    for other in (packed, wide):
        assert kineto._decode_spans(str(other), []) is None
        assert_same(kineto.read(str(other)), ref)


def test_cuts_that_never_decode_fall_back_to_the_chunked_reading(tmp_path, monkeypatch):
    """A join that grows past MAX_JOIN_BYTES gives up the spans path; the chunked reading
    then reads the file, with the same result."""
    f = tmp_path / "t.json"
    f.write_text(json.dumps(tricky_doc(after=False)))
    ref = whole(str(f), monkeypatch)
    monkeypatch.setattr(kineto, "CHUNK_BYTES", 1)
    monkeypatch.setattr(kineto, "MAX_JOIN_BYTES", 64)
    assert kineto._decode_spans(str(f), []) is None
    monkeypatch.setattr(kineto, "MAX_JOIN_BYTES", 1 << 20)
    assert kineto._decode_spans(str(f), []) is not None
    assert_same(kineto.read(str(f)), ref)


@pytest.mark.parametrize("workers", [1, 2])
def test_gzip_is_read_a_chunk_at_a_time(tmp_path, monkeypatch, workers):
    doc = tricky_doc(after=True)
    plain = tmp_path / "t.json"
    plain.write_text(json.dumps(doc))
    packed = tmp_path / "t.json.gz"
    packed.write_bytes(gzip.compress(plain.read_bytes()))
    chunks = list(read_chunks(str(packed), 1000))
    assert len(chunks) > 10 and all(len(c) == 1000 for c in chunks[:-1])
    assert b"".join(chunks) == plain.read_bytes()
    ref = whole(str(plain), monkeypatch)
    assert_same(streamed(str(packed), monkeypatch, 1000, 2000, workers, "stream"), ref)


def test_a_traceevents_key_nested_before_the_array_is_not_taken_for_it(tmp_path, monkeypatch):
    """The first "traceEvents": [ met is inside another field: the document is then read
    whole, and the result is that of the document without the field."""
    doc = tricky_doc(after=False)
    f = tmp_path / "t.json"
    f.write_text(json.dumps(doc))
    ref = kineto.read(str(f))
    g = tmp_path / "nested.json"
    g.write_text(json.dumps({"otherData": {"traceEvents": [{"ph": "X", "cat": "kernel"}]},
                             **doc}))
    assert_same(kineto.read(str(g)), ref)


def test_an_empty_events_array_followed_by_the_fields(tmp_path):
    f = tmp_path / "t.json"
    f.write_text(json.dumps({"traceEvents": [], "deviceProperties": [{"id": 0}]}))
    with pytest.raises(kineto.InputError, match="empty trace"):
        kineto.read(str(f))


def test_memory_holds_the_kept_events_not_the_file(tmp_path, monkeypatch):
    """A trace of mostly host events (read and dropped) is read with a peak of Python
    allocations far below the file's size: the file is never held whole."""
    doc = json.loads(gzip.decompress(SAMPLE.read_bytes()))
    host = [e for e in doc["traceEvents"]
            if e.get("cat") == "cpu_op" and e["name"] != kineto.PARAM_COMMS][:50]
    doc["traceEvents"] = doc["traceEvents"] + host * 1600  # 80,000 host events
    f = tmp_path / "big.json"
    f.write_text(json.dumps(doc, indent=2))
    size = f.stat().st_size
    assert size > 25 << 20
    monkeypatch.setattr(kineto, "READ_BYTES", 512 << 10)
    monkeypatch.setattr(kineto, "CHUNK_BYTES", 256 << 10)
    monkeypatch.setattr(kineto, "PARALLEL_BYTES", 1 << 60)
    tracemalloc.start()
    try:
        tl = kineto.read(str(f))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(tl) > 0
    assert peak < size / 4, (peak, size)  # read whole: more than the size


def _op_count(path: str) -> int:
    return len(kineto.read(path))


@pytest.mark.skipif("fork" not in mp.get_all_start_methods(), reason="needs fork")
def test_a_daemonic_process_reads_a_big_trace_without_worker_processes(monkeypatch):
    """A pool's worker (daemonic: it may not start processes) reads in-process, even
    when the trace is big enough for worker processes and PARASTREAM_WORKERS asks two."""
    monkeypatch.setattr(kineto, "PARALLEL_BYTES", 0)
    monkeypatch.setattr(kineto, "CHUNK_BYTES", 4096)
    monkeypatch.setenv("PARASTREAM_WORKERS", "2")
    with mp.get_context("fork").Pool(1) as pool:
        n = pool.apply(_op_count, (str(SAMPLE),))
    assert n == len(kineto.read(str(SAMPLE))) > 0


REAL = sorted(p.name for p in DATA.glob("*.json.gz") if p.name != "cupti_range_profiler.json.gz")


@pytest.mark.parametrize("name", REAL)
def test_real_traces_read_where_they_lie_are_read_whole(tmp_path, monkeypatch, name):
    """Every real capture shipped for tests (CUDA, ROCm, MTIA, torch.compile, Triton),
    written out plain and cut into 4 KB spans read by two worker processes, gives the
    timeline of the document read whole."""
    f = tmp_path / name.removesuffix(".gz")
    f.write_bytes(gzip.decompress((DATA / name).read_bytes()))
    ref = whole(str(f), monkeypatch)
    workers = 2 if "fork" in mp.get_all_start_methods() else 1
    assert_same(streamed(str(f), monkeypatch, 1 << 20, 4096, workers, "spans"), ref)


@pytest.mark.parametrize("workers", [1, 2])
def test_a_cut_inside_the_last_event_joins_the_last_spans(tmp_path, monkeypatch, workers):
    """The last cut falls inside the last event's name: the last span does not read
    alone, and is read joined with the spans before it, still where it lies."""
    if workers > 1 and "fork" not in mp.get_all_start_methods():
        pytest.skip("needs fork")
    doc = tricky_doc(after=True)
    doc["traceEvents"].append({"ph": "X", "cat": "cpu_op", "name": 'tail"}, {"ph": "X"',
                               "pid": 1, "tid": 1, "ts": 1.0, "dur": 1.0})
    f = tmp_path / "t.json"
    f.write_text(json.dumps(doc))
    text = f.read_bytes()
    assert text.rfind(b"}, {") > text.rfind(b'"tail')  # the last boundary is a false one
    ref = whole(str(f), monkeypatch)
    assert_same(streamed(str(f), monkeypatch, 1 << 20, 1, workers, "spans"), ref)


def test_a_plain_trace_cut_short_is_refused_before_its_spans_are_read(tmp_path, monkeypatch):
    """A file that does not end with the document's "}" is truncated: the error comes
    at once, without reading the file three ways (spans, chunks, whole)."""
    f = tmp_path / "t.json"
    text = json.dumps(tricky_doc(after=False), indent=1)
    f.write_text(text[: len(text) * 2 // 3])

    def refuse(*args):
        raise AssertionError("read")

    monkeypatch.setattr(kineto, "_scan_span", refuse)
    monkeypatch.setattr(kineto, "_decode_stream", refuse)
    with pytest.raises(kineto.InputError, match="truncated JSON"):
        kineto.read(str(f))
