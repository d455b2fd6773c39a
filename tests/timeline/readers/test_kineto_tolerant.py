"""Kineto reader on traces of other producers and on odd input: torch.compile / Triton,
MTIA and AMD traces, CUPTI range-profiler traces, fields of unexpected types, deep nesting,
byte order marks and UTF-16, events without a phase.

The bad-input cases run the command line in this process (``cli.main``): a traceback
fails the test; each refusal is exit 2 with one line on stderr."""

from __future__ import annotations

import collections
import gzip
import json
from pathlib import Path

import numpy as np
import pytest

from parastream import cli
from parastream.timeline.model import CORES, KIND_COMPUTE, KIND_MEMCPY, KINDS
from parastream.timeline.readers import kineto, read_path

DATA = Path(__file__).resolve().parents[2] / "data" / "kineto"
SAMPLE = DATA / "cuda_event_sync_multi_stream.json.gz"
ALEXNET = DATA / "alexnet.json.gz"
TRITON = DATA / "triton_example.json.gz"
INDUCTOR = DATA / "inductor_rank0.json.gz"
MTIA = DATA / "mtia_inference_rank_0.json.gz"
AMD = DATA / "amd_mi250_rocm6_2.json.gz"
RANGES = DATA / "cupti_range_profiler.json.gz"


def load(path: Path) -> dict:
    return json.loads(gzip.decompress(path.read_bytes()))


def analyze(capsys, path: Path) -> tuple[int, str, dict | None]:
    """``parastream analyze PATH --format json`` in this process: (exit code, stderr, the
    capture when it succeeded)."""
    code = cli.main(["analyze", str(path), "--format", "json", "--no-progress"])
    out, err = capsys.readouterr()
    return code, err, json.loads(out)["captures"][0] if code == 0 else None


def refused(capsys, path: Path) -> str:
    """The one line a refusal prints, after checking it is one line and exit 2."""
    code, err, _ = analyze(capsys, path)
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1, (code, err)
    assert lines[0].startswith(f"parastream: {path}: "), lines
    return lines[0]


def kernels(doc: dict) -> list[dict]:
    return [e for e in doc["traceEvents"] if e.get("cat") == "kernel"]


# --------------------------------------------------------------- other producers

def test_a_torch_compile_trace_with_a_triton_grid_as_text_is_read(capsys):
    """torch.compile's cpu_op event for a Triton launch carries ``"grid": "grid(100,)"``;
    the typed decoder refused the whole file for it ("Expected array | null, got str")."""
    doc = load(TRITON)
    assert any(e.get("cat") == "cpu_op" and isinstance(e.get("args", {}).get("grid"), str)
               for e in doc["traceEvents"])
    tl = kineto.read(str(TRITON))
    [k] = kernels(doc)
    assert [tl.names[i] for i in tl.name] == [k["name"]] == ["triton_poi_fused_add_cos_sin_0"]
    assert tl.streams == [str(k["args"]["stream"])]
    assert tl.block_dim.tolist() == [int(np.prod(k["args"]["grid"]))]
    # launched by the cuda_driver cuLaunchKernel with the kernel's correlation
    [launch] = [e for e in doc["traceEvents"] if e.get("cat") == "cuda_driver"]
    assert launch["args"]["correlation"] == k["args"]["correlation"]
    assert tl.launch_ns.tolist() == [round(launch["ts"] * 1000)]
    assert tl.warnings == []  # the cpu_op's grid is not read, so nothing to say about it
    code, err, cap = analyze(capsys, TRITON)
    assert code == 0 and err == "", err


def test_a_torch_compile_trace_of_triton_kernels_on_several_streams():
    """A compiled model's trace (aot_autograd CompiledFunction, Triton kernels beside
    ATen's) reads every kernel, memcpy and memset it has."""
    doc = load(INDUCTOR)
    device = [e for e in doc["traceEvents"] if e.get("cat") in ("kernel", "gpu_memcpy",
                                                                 "gpu_memset")]
    tl = kineto.read(str(INDUCTOR))
    assert len(tl) == len(device)
    names = {tl.names[i] for i in tl.name}
    assert {n for n in names if n.startswith("triton_")}  # inductor's kernels
    assert set(tl.streams) == {str(e["args"]["stream"]) for e in device}
    assert len(tl.streams) > 1


def test_an_mtia_trace_is_read_as_device_activity():
    """MTIA commands (``mtia_ccp_events``) are device work on ``args.stream``: DMA
    requests are copies, event_wait a stream wait, event_record a marker; launches come from
    ``mtia_runtime`` with the same correlation. It was refused: "no device activity"."""
    doc = load(MTIA)
    ccp = [e for e in doc["traceEvents"] if e.get("cat") == "mtia_ccp_events"]
    by_name = collections.Counter(e["name"] for e in ccp)
    tl = kineto.read(str(MTIA))
    work = [e for e in ccp if e["name"] not in ("event_wait", "event_record")]
    assert len(tl) == len(work)
    assert collections.Counter(tl.names[i] for i in tl.name) == collections.Counter(
        e["name"] for e in work)
    assert set(tl.streams) >= {str(e["args"]["stream"]) for e in work}
    dma = np.array([tl.names[i].startswith("dma") for i in tl.name])
    assert (tl.kind[dma] == KIND_MEMCPY).all() and (tl.kind[~dma] == KIND_COMPUTE).all()
    assert {CORES[c] for c in tl.core[dma]} == {"DMA"}
    assert tl.n_waits == by_name["event_wait"]
    waited = collections.Counter(tl.streams[i] for i in tl.wait_on)
    assert waited == collections.Counter(str(e["args"]["wait_on_stream"]) for e in ccp
                                         if e["name"] == "event_wait")
    runtime = {e["args"]["correlation"]: e["ts"] for e in doc["traceEvents"]
               if e.get("cat") == "mtia_runtime" and "correlation" in e.get("args", {})}
    linked = sum(1 for e in work if e["args"].get("correlation") in runtime)
    assert linked and (tl.launch_ns >= 0).sum() >= linked
    assert tl.meta["device_id"] == "17" and tl.device.name == doc["deviceProperties"][0]["name"]


def test_an_amd_trace_is_read():
    """ROCm's Kineto trace spells device work as CUDA's does (kernel, gpu_memcpy)."""
    doc = load(AMD)
    device = [e for e in doc["traceEvents"] if e.get("cat") in ("kernel", "gpu_memcpy")]
    tl = kineto.read(str(AMD))
    assert len(tl) == len(device)
    assert collections.Counter(KINDS[k] for k in tl.kind) == collections.Counter(
        "compute" if e["cat"] == "kernel" else "memcpy" for e in device)
    assert tl.device.name == doc["deviceProperties"][0]["name"]


def test_a_cupti_range_profiler_trace_is_refused_as_such(capsys):
    """Range-profiler events (per-kernel counters, no stream) are not device timing."""
    doc = load(RANGES)
    assert not kernels(doc)
    n = sum(1 for e in doc["traceEvents"] if e.get("cat") == "cuda_profiler_range")
    line = refused(capsys, RANGES)
    assert f"CUPTI range-profiler trace ({n} cuda_profiler_range events" in line


def test_range_profiler_events_beside_kernels_are_ignored_with_a_warning(tmp_path):
    doc = load(SAMPLE)
    n = len(kineto.read(str(SAMPLE)))
    ranges = [e for e in load(RANGES)["traceEvents"] if e.get("cat") == "cuda_profiler_range"]
    doc["traceEvents"] += ranges[:3]
    f = tmp_path / "t.json"
    f.write_text(json.dumps(doc))
    tl = kineto.read(str(f))
    assert len(tl) == n
    assert "ignored 3 cuda_profiler_range event(s) (CUPTI range-profiler counters, without " \
           "streams)" in tl.warnings


# ------------------------------------------------------ fields of unexpected types

def odd_sample(tmp_path: Path) -> tuple[Path, dict]:
    """The sample trace with odd values in fields parastream reads and in fields it does
    not; returns the file and the kernels that were changed, by what."""
    doc = load(ALEXNET)
    ks = kernels(doc)
    ks[0]["args"]["grid"] = "grid(100,)"
    ks[1]["args"]["grid"] = {"x": 4}
    ks[2]["args"]["grid"] = [1, "2", 1]
    ks[3]["name"] = 5
    ks[4]["args"]["stream"] = [7]
    ks[5]["args"]["stream"] = float(ks[5]["args"]["stream"])  # 7.0 is stream 7
    cpu = [e for e in doc["traceEvents"] if e.get("cat") == "cpu_op"]
    cpu[0]["args"] = ["not", "an", "object"]  # not read: no warning
    cpu[1]["args"]["grid"] = {"deep": [[1]]}
    cpu[2]["name"] = {"n": 1}
    doc["traceEvents"].insert(3, 42)
    f = tmp_path / "odd.json"
    f.write_text(json.dumps(doc))
    return f, {"grid": ks[:3], "name": ks[3], "stream": ks[4], "float": ks[5]}


def test_oddly_typed_fields_are_skipped_with_one_warning_per_field(tmp_path, capsys):
    f, changed = odd_sample(tmp_path)
    clean = kineto.read(str(ALEXNET))
    tl = kineto.read(str(f))
    assert len(tl) == len(clean)  # no kernel is lost for a field
    grid = [w for w in tl.warnings if "args.grid" in w]
    assert grid == ["ignored args.grid of 3 trace event(s) (a list or an object or text where "
                    "a list of integers was expected)"]
    assert "ignored name of 1 trace event(s) (a number where text was expected)" in tl.warnings
    assert "ignored args.stream of 1 trace event(s) (a list where an integer or text was " \
           "expected)" in tl.warnings
    assert "skipped 1 trace event(s) that are not JSON objects (a number)" in tl.warnings
    assert not [w for w in tl.warnings if "args " in w or "args of" in w]  # the cpu_op's
    # the kernels with an odd grid have no block count; the others keep theirs
    starts = {round(k["ts"] * 1000) for k in changed["grid"]}
    odd_grid = np.isin(tl.start_ns, list(starts))
    assert np.array_equal(tl.start_ns, clean.start_ns) and odd_grid.sum() == 3
    assert (tl.block_dim[odd_grid] == -1).all() and (clean.block_dim[odd_grid] > 0).all()
    assert np.array_equal(tl.block_dim[~odd_grid], clean.block_dim[~odd_grid])
    # 7.0 is read as stream 7, the same lane as the clean trace's
    assert set(tl.streams) >= set(clean.streams)
    code, err, cap = analyze(capsys, f)
    assert code == 0 and err == "", err
    assert [w for w in cap["warnings"] if "args.grid" in w] == grid


@pytest.mark.parametrize("workers", [1, 2])
def test_an_odd_field_in_one_piece_of_a_big_trace(tmp_path, monkeypatch, workers):
    """A big trace is decoded in pieces (in worker processes with 2): an odd value in one
    piece sends that piece through the tolerant decoder, and the result is the same as
    for the trace read in one piece."""
    f, _ = odd_sample(tmp_path)
    whole = kineto.read(str(f))
    monkeypatch.setattr(kineto, "CHUNK_BYTES", 2048)
    monkeypatch.setattr(kineto, "PARALLEL_BYTES", 0 if workers > 1 else 1 << 60)
    monkeypatch.setenv("PARASTREAM_WORKERS", str(workers))
    assert len(kineto._boundaries(memoryview(f.read_bytes()))) > 10
    pieces = kineto.read(str(f))
    assert sorted(pieces.warnings) == sorted(whole.warnings)
    for col in ("start_ns", "end_ns", "block_dim", "launch_ns", "kind"):
        assert np.array_equal(getattr(pieces, col), getattr(whole, col)), col
    assert [pieces.names[i] for i in pieces.name] == [whole.names[i] for i in whole.name]


def test_odd_document_parts_are_skipped_with_a_warning(tmp_path):
    doc = load(SAMPLE)
    doc["distributedInfo"] = [0]
    doc["deviceProperties"] = [dict(p, numSms="108") for p in doc["deviceProperties"]] + [3]
    f = tmp_path / "t.json"
    f.write_text(json.dumps(doc))
    tl = kineto.read(str(f))
    assert tl.device.sm_count == 108  # a count given as text
    assert "ignored distributedInfo: a list where an object was expected" in tl.warnings
    assert "ignored deviceProperties entries that are not JSON objects" in tl.warnings


# ----------------------------------------------------------------- bad input

KERNEL = {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 100.5, "dur": 3,
          "args": {"stream": 7, "device": 0, "correlation": 1}}


def write(tmp_path: Path, name: str, data: bytes | str) -> Path:
    f = tmp_path / name
    f.write_bytes(data.encode() if isinstance(data, str) else data)
    return f


@pytest.mark.parametrize("where", ["args", "event", "document"])
def test_deep_nesting_is_one_line(tmp_path, capsys, where):
    deep = "[" * 10000 + "]" * 10000
    k = json.dumps(KERNEL)
    doc = {"args": '{"traceEvents": [%s, {"ph": "X", "cat": "cpu_op", "args": {"a": %s}}]}',
           "event": '{"traceEvents": [%s, %s]}',
           "document": '{"traceEvents": [%s], "other": %s}'}[where] % (k, deep)
    line = refused(capsys, write(tmp_path, "deep.json", doc))
    assert "invalid JSON: nested too deeply to decode" in line


@pytest.mark.parametrize("encoding,bom", [("utf-8", b"\xef\xbb\xbf"), ("utf-16-le", b"\xff\xfe"),
                                          ("utf-16-be", b""), ("utf-32-le", b""),
                                          ("utf-16-be", b"\xfe\xff")])
def test_byte_order_marks_and_utf16_are_read(tmp_path, capsys, encoding, bom):
    text = gzip.decompress(SAMPLE.read_bytes()).decode()
    f = write(tmp_path, "t.json", bom + text.encode(encoding))
    code, err, cap = analyze(capsys, f)
    assert code == 0 and err == "", err
    assert len(read_path(f)[0]) == len(kineto.read(str(SAMPLE)))


def test_broken_utf16_is_one_line(tmp_path, capsys):
    raw = b"\xff\xfe" + json.dumps({"traceEvents": [KERNEL]}).encode("utf-16-le")
    raw = raw[:40] + b"\x00\xdc" + raw[40:]  # a lone low surrogate
    line = refused(capsys, write(tmp_path, "t.json", raw))
    assert "not valid UTF-16-LE text" in line


def test_events_without_a_phase(tmp_path, capsys):
    bare = {k: v for k, v in KERNEL.items() if k != "ph"}
    line = refused(capsys, write(tmp_path, "none.json", json.dumps({"traceEvents": [bare]})))
    assert "no device activity" in line and "1 event(s) have no ph" in line
    f = write(tmp_path, "some.json", json.dumps({"traceEvents": [bare, KERNEL]}))
    code, err, cap = analyze(capsys, f)
    assert code == 0 and err == "", err
    assert "skipped 1 trace event(s) without a ph (the Chrome trace phase)" in cap["warnings"]


def test_text_timestamps_and_missing_durations(tmp_path, capsys):
    f = write(tmp_path, "ts.json", json.dumps({"traceEvents": [dict(KERNEL, ts="100.5")]}))
    assert kineto.read(str(f)).start_ns.tolist() == [100_500]
    no_dur = {k: v for k, v in KERNEL.items() if k != "dur"}
    line = refused(capsys, write(tmp_path, "d.json", json.dumps({"traceEvents": [no_dur]})))
    assert "usable ts and dur" in line
    f = write(tmp_path, "d2.json", json.dumps({"traceEvents": [no_dur, dict(KERNEL, ts=200)]}))
    code, err, cap = analyze(capsys, f)
    assert code == 0 and "skipped 1 device op(s) without a usable ts/dur" in cap["warnings"]


@pytest.mark.parametrize("doc", ['[{"traceEvents": []}]', '{"traceEvents": {"a": 1}}',
                                 '{"traceEvents": [1, "x", null]}',
                                 '{"traceEvents": [{"ph": ["X"], "cat": {"k": 1}}]}'])
def test_documents_of_the_wrong_shape_are_one_line(tmp_path, capsys, doc):
    refused(capsys, write(tmp_path, "t.json", doc))


def test_integers_past_int64_are_unknown(tmp_path, capsys):
    """A correlation id, flow id or grid too big for int64 is no id / no block count, not
    an OverflowError traceback."""
    big = 10**30
    ev = [dict(KERNEL, args=dict(KERNEL["args"], correlation=big, grid=[big, big, 1])),
          dict(KERNEL, ts=200, args=dict(KERNEL["args"], correlation=2, grid=[2, 1, 1])),
          {"ph": "s", "cat": "ac2g", "id": big, "ts": 50},
          {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": 40, "dur": 1,
           "args": {"correlation": big}},
          {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": 190, "dur": 1,
           "args": {"correlation": 2}}]
    f = write(tmp_path, "big.json", json.dumps({"traceEvents": ev}))
    code, err, cap = analyze(capsys, f)
    assert code == 0 and err == "", err
    tl = kineto.read(str(f))
    assert tl.block_dim.tolist() == [-1, 2]
    assert tl.launch_ns.tolist() == [-1, 190_000]  # the big id joins nothing
