"""Perfetto / Chrome-trace export: processes, threads, ns-precise times, waits and flows,
overlap tracks and the analysis tracks, checked by a structural validator of the Chrome
trace event format (and by Perfetto's trace processor where one is installed)."""

from __future__ import annotations

import bisect
import json
import math
import os
import shutil
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest

from parastream.errors import InputError
from parastream.report.perfetto import lanes, stream_order, to_perfetto, write_perfetto
from parastream.timeline.analyze import Options, analyze, analyze_capture, capture_name, captures_of
from parastream.timeline.model import KIND_MEMCPY, TimelineBuilder, core_code, make_timeline

T0 = 1_736_413_971_558_972_912  # epoch ns; as float64 us this would lose ~0.25 us
DATA = Path(__file__).resolve().parents[1] / "data"
KINETO = DATA / "kineto" / "cuda_event_sync_multi_stream.json.gz"


def capture(source: str = "run/kernel_details.csv", **meta):
    b = TimelineBuilder(source, "ascend_csv")
    b.device.name = "Ascend910B3"
    b.meta.update(meta)
    b.add_op("10", "MatMul", T0 + 1_001, T0 + 21_001, type="MatMul", core=core_code("AI_CORE"),
             block_dim=20, mix_block_dim=4)
    b.add_op("10", "Cast", T0 + 21_235, T0 + 22_470, type="Cast")
    b.add_op("7", "Gate", T0, T0 + 5_000, type="MoeGating", core=core_code("AI_VECTOR_CORE"),
             block_dim=8)
    b.add_op("8", "Copy", T0 + 3_000, T0 + 4_001, kind=KIND_MEMCPY)
    b.add_wait("7", T0 + 5_100, T0 + 21_100, on_stream="10", name="EVENT_WAIT")
    b.add_wait("8", T0 + 4_100, T0 + 4_200, name="EVENT_WAIT")  # waited-on stream unknown
    return b.build()


def by_phase(doc: dict) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = defaultdict(list)
    for e in doc["traceEvents"]:
        out[e["ph"]].append(e)
    return out


def thread_names(doc: dict) -> dict[tuple[int, int], str]:
    return {(e["pid"], e["tid"]): e["args"]["name"] for e in doc["traceEvents"]
            if e["ph"] == "M" and e["name"] == "thread_name"}


def test_structure_processes_and_threads():
    doc = to_perfetto([capture(step=3), capture("other.csv", label="baseline")])
    assert doc["displayTimeUnit"] == "ns"
    ev = by_phase(doc)
    procs = {e["pid"]: e["args"]["name"] for e in ev["M"] if e["name"] == "process_name"}
    assert procs == {1: "kernel_details.csv step 3", 2: "baseline"}
    names = thread_names(doc)
    assert set(names.values()) == {"stream 10", "stream 7", "stream 8"}
    # threads sort numerically: 7, 8, 10
    sort = {(e["pid"], e["tid"]): e["args"]["sort_index"] for e in ev["M"]
            if e["name"] == "thread_sort_index"}
    order = sorted((k for k in sort if k[0] == 1), key=sort.get)
    assert [names[k] for k in order] == ["stream 7", "stream 8", "stream 10"]
    # every X event sits on a named thread of its process
    for e in ev["X"]:
        assert (e["pid"], e["tid"]) in names
    assert len([e for e in ev["X"] if e["pid"] == 1]) == 6  # 4 ops + 2 waits
    json.dumps(doc)  # plain JSON types only


def test_ops_relative_ns_precise_times_and_args():
    doc = to_perfetto([capture()])
    names = thread_names(doc)
    ops = {e["name"]: e for e in doc["traceEvents"] if e["ph"] == "X" and e.get("cat") != "wait"}
    assert ops["Gate"]["ts"] == 0.0 and ops["Gate"]["dur"] == 5.0
    assert ops["MatMul"]["ts"] == 1.001 and ops["MatMul"]["dur"] == 20.0
    assert ops["Cast"]["ts"] == 21.235 and ops["Cast"]["dur"] == 1.235
    assert names[(1, ops["Cast"]["tid"])] == "stream 10"
    assert ops["MatMul"]["cat"] == "compute" and ops["Copy"]["cat"] == "memcpy"
    assert ops["MatMul"]["args"] == {"type": "MatMul", "kind": "compute", "core": "AI_CORE",
                                     "block_dim": 20, "mix_block_dim": 4}
    assert ops["Copy"]["args"] == {"kind": "memcpy"}  # unknowns left out
    assert ops["Gate"]["args"]["core"] == "AI_VECTOR_CORE"


def test_waits_and_flow_arrows():
    doc = to_perfetto([capture(), capture()])
    names = thread_names(doc)
    ev = by_phase(doc)
    waits = [e for e in ev["X"] if e.get("cat") == "wait"]
    assert len(waits) == 4
    w = next(e for e in waits if e["pid"] == 1 and names[(1, e["tid"])] == "stream 7")
    assert w["name"] == "EVENT_WAIT" and w["ts"] == 5.1 and w["dur"] == 16.0
    assert w["args"] == {"wait_on": "10"}
    # one flow per wait whose waited-on stream is known, per capture; ids unique
    assert len(ev["s"]) == len(ev["f"]) == 2
    assert len({e["id"] for e in ev["s"]}) == 2
    for s in ev["s"]:
        f = next(x for x in ev["f"] if x["id"] == s["id"])
        assert f["bp"] == "e" and f["cat"] == s["cat"] == "wait" and f["name"] == s["name"]
        assert names[(s["pid"], s["tid"])] == "stream 10"
        assert names[(f["pid"], f["tid"])] == "stream 7"
        # the start lies inside an op of the waited-on stream (the MatMul running at the wait
        # start), the end inside the wait slice: viewers bind arrows to enclosing slices
        assert s["ts"] == 5.1
        assert 5.1 < f["ts"] < 21.1


def test_flow_start_when_waited_on_stream_idle_at_wait_start():
    b = TimelineBuilder("x", "kineto")
    b.add_op("1", "a", T0, T0 + 1_000)
    b.add_op("2", "b", T0 + 3_000, T0 + 4_000)
    b.add_wait("1", T0 + 2_000, T0 + 4_500, on_stream="2")
    doc = to_perfetto([b.build()])
    (s,) = by_phase(doc)["s"]
    (f,) = by_phase(doc)["f"]
    assert s["ts"] == 3.5  # the middle of the op it waited for
    assert 3.5 < f["ts"] < 4.5  # in the wait, after the start (not its middle, 3.25)
    assert check_chrome_trace(doc) == []


def test_flow_never_points_back_in_time():
    # the op waited for starts late in the wait and runs long: its middle (54.5 us) is
    # after the wait's middle (5 us); an arrow from there would end before it starts
    b = TimelineBuilder("x", "kineto")
    b.add_op("2", "long", T0 + 9_000, T0 + 100_000)
    b.add_op("1", "a", T0 + 10_000, T0 + 11_000)
    b.add_wait("1", T0, T0 + 10_000, on_stream="2")
    doc = to_perfetto([b.build()])
    (s,) = by_phase(doc)["s"]
    (f,) = by_phase(doc)["f"]
    assert 9.0 <= s["ts"] <= f["ts"] < 10.0
    assert check_chrome_trace(doc) == []


def test_empty_and_wait_only_timelines():
    empty = TimelineBuilder("e", "kineto").build()
    doc = to_perfetto([empty])
    assert [e["ph"] for e in doc["traceEvents"]] == ["M", "M", "M"]
    b = TimelineBuilder("w", "kineto")
    b.add_wait("3", T0, T0 + 10, on_stream="4")
    doc = to_perfetto([b.build()])
    ev = by_phase(doc)
    # the waited-on stream has no op that could hold the arrow's start: no arrow
    assert len(ev["X"]) == 1 and not ev["s"] and not ev["f"]
    assert check_chrome_trace(doc) == []


def test_stream_order_and_label():
    assert [["2", "10", "HCCL", "1"][c] for c in stream_order(["2", "10", "HCCL", "1"])] == \
        ["1", "2", "10", "HCCL"]
    assert capture_name(capture("/a/b/trace.json", rank=3)) == "trace.json rank 3"
    # without a source the format names it; a label wins over both
    assert capture_name(capture("", step=3)) == "ascend_csv step 3"
    assert capture_name(capture("/a/b/trace.json", rank=3, label="mine")) == "mine"
    doc = to_perfetto([capture()], labels=["mine"])
    assert doc["traceEvents"][0]["args"]["name"] == "mine"


def test_write_perfetto_round_trip(tmp_path):
    out = tmp_path / "trace.json"
    tl = capture()
    write_perfetto(out, [tl])
    assert json.loads(out.read_text()) == to_perfetto([tl])
    assert [p.name for p in tmp_path.iterdir()] == ["trace.json"]


def test_large_export_is_vectorised():
    n = 200_000
    rng = np.random.default_rng(1)
    start = T0 + np.cumsum(rng.integers(100, 2000, n)).astype(np.int64)
    ops = dict(stream=rng.integers(0, 4, n).astype(np.int32), name=rng.integers(0, 30, n).astype(np.int32),
               type=rng.integers(0, 5, n).astype(np.int32), start_ns=start,
               end_ns=start + rng.integers(1, 3000, n), kind=rng.integers(0, 4, n).astype(np.int8),
               core=rng.integers(0, 3, n).astype(np.int8),
               block_dim=rng.integers(-1, 40, n).astype(np.int32),
               mix_block_dim=np.full(n, -1, np.int32), step=np.full(n, -1, np.int32))
    tl = make_timeline("big", "kineto", ["0", "1", "2", "3"], [f"k{i}" for i in range(30)],
                       [f"T{i}" for i in range(5)], ops)
    doc = to_perfetto([tl])
    # ops of one stream overlap here (streams drawn at random): overlap tracks keep them all
    assert check_chrome_trace(doc) == []
    xs = [e for e in doc["traceEvents"] if e["ph"] == "X"]
    assert len(xs) == n
    i = 12_345
    assert xs[i]["ts"] == round((int(tl.start_ns[i]) - tl.t0_ns) / 1000, 3)
    assert xs[i]["dur"] == round(int(tl.end_ns[i] - tl.start_ns[i]) / 1000, 3)
    bd = int(tl.block_dim[i])
    assert xs[i]["args"].get("block_dim", -1) == bd


def test_real_kineto_trace_flows():
    try:
        from parastream.timeline.readers import read_path
        tls = read_path(str(KINETO))
    except (ImportError, NotImplementedError) as exc:
        pytest.skip(f"kineto reader unavailable: {exc}")
    doc = to_perfetto(tls)
    ev = by_phase(doc)
    tl = tls[0]
    assert len([e for e in ev["X"] if e.get("cat") != "wait"]) == len(tl)
    assert len([e for e in ev["X"] if e.get("cat") == "wait"]) == tl.n_waits
    assert len(ev["s"]) == int((tl.wait_on >= 0).sum())
    assert min(e["ts"] for e in ev["X"]) == 0.0


# --- a structural validator of the Chrome trace event format --------------------------

#: metadata event name -> the args key it carries and that key's type
META_ARGS = {"process_name": ("name", str), "process_labels": ("labels", str),
             "process_sort_index": ("sort_index", int), "thread_name": ("name", str),
             "thread_sort_index": ("sort_index", int)}


def _is_num(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _is_int(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _event_problems(e) -> list[str]:
    """What the event lacks for its phase (the phases the exporter may write)."""
    if not isinstance(e, dict):
        return [f"not an object: {e!r}"]
    ph = e.get("ph")
    out = []
    if ph not in ("X", "i", "M", "s", "f"):
        return [f"unexpected phase {ph!r}: {e}"]
    if not (_is_int(e.get("pid")) and _is_int(e.get("tid"))):
        out.append(f"pid/tid not integers: {e}")
    if not (isinstance(e.get("name"), str) and e["name"]):
        out.append(f"no name: {e}")
    if "args" in e and not isinstance(e["args"], dict):
        out.append(f"args not an object: {e}")
    if "cat" in e and not isinstance(e["cat"], str):
        out.append(f"cat not a string: {e}")
    if ph != "M" and not _is_num(e.get("ts")):
        out.append(f"ts missing or not a finite number: {e}")
    if ph == "X" and not (_is_num(e.get("dur")) and e["dur"] >= 0):
        out.append(f"complete event without a non-negative dur: {e}")
    if ph == "i" and e.get("s", "t") not in ("t", "p", "g"):
        out.append(f"instant with scope {e.get('s')!r}: {e}")
    if ph in ("s", "f"):
        if not (_is_int(e.get("id")) or isinstance(e.get("id"), str)) or "cat" not in e:
            out.append(f"flow event without id or cat: {e}")
        if ph == "f" and e.get("bp") != "e":
            out.append(f"flow end not bound to its enclosing slice (bp 'e'): {e}")
    if ph == "M":
        key, typ = META_ARGS.get(e.get("name"), (None, None))
        if key is None:
            out.append(f"unknown metadata event: {e}")
        elif not isinstance(e.get("args"), dict) or not isinstance(e["args"].get(key), typ) \
                or isinstance(e["args"].get(key), bool):
            out.append(f"metadata event without args.{key} ({typ.__name__}): {e}")
    return out


def _ns(us: float) -> int:
    return round(us * 1000)


class _Track:
    """The slices of one (pid, tid), sorted by (start, -end), with each one's parent."""

    def __init__(self, slices: list[tuple[int, int, str]]):
        self.slices = sorted(slices, key=lambda x: (x[0], -x[1]))
        self.starts = [a for a, _, _ in self.slices]
        self.parent: list[int] = []

    def nesting_problems(self) -> list[str]:
        out, stack = [], []
        for k, (a, b, name) in enumerate(self.slices):
            while stack and self.slices[stack[-1]][1] <= a:
                stack.pop()
            if stack and b > self.slices[stack[-1]][1]:
                pa, pb, pn = self.slices[stack[-1]]
                out.append(f"{name!r} [{a}, {b}] ns starts inside {pn!r} [{pa}, {pb}] "
                           "but ends after it")
            self.parent.append(stack[-1] if stack else -1)
            stack.append(k)
        return out

    def encloses(self, ts: int) -> bool:
        """A slice holds ``ts`` (start <= ts < end, or a zero-length one at ts)."""
        k = bisect.bisect_right(self.starts, ts) - 1
        while k >= 0:
            a, b, _ = self.slices[k]
            if a <= ts < b or a == b == ts:
                return True
            k = self.parent[k] if b <= ts else -1
        return False


def check_chrome_trace(doc: dict) -> list[str]:
    """Problems of a Chrome-trace JSON object, as Perfetto's JSON importer would meet them:
    fields each phase needs, slices of each thread that do not nest, flows whose start and
    end do not pair up by id, point back in time or have no slice to bind to, metadata that
    repeats, and slices on unnamed threads. Empty when the trace is well formed."""
    if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
        return ["no traceEvents list"]
    if doc.get("displayTimeUnit", "ms") not in ("ms", "ns"):
        return [f"displayTimeUnit {doc['displayTimeUnit']!r}"]
    problems: list[str] = []
    slices: dict[tuple, list] = defaultdict(list)
    flows: dict = defaultdict(list)
    meta: set[tuple] = set()
    for e in doc["traceEvents"]:
        bad = _event_problems(e)
        problems += bad
        if bad:
            continue
        key = (e["pid"], e["tid"])
        if e["ph"] == "X":
            slices[key].append((_ns(e["ts"]), _ns(e["ts"]) + _ns(e["dur"]), e["name"]))
        elif e["ph"] == "i" and e.get("s", "t") == "t":
            slices[key].append((_ns(e["ts"]), _ns(e["ts"]), e["name"]))
        elif e["ph"] in ("s", "f"):
            flows[e["id"]].append(e)
        elif e["ph"] == "M":
            m = (e["pid"], e["tid"] if e["name"].startswith("thread") else 0, e["name"])
            if m in meta:
                problems.append(f"repeated metadata {m}")
            meta.add(m)
    tracks = {k: _Track(v) for k, v in slices.items()}
    for key, tr in tracks.items():
        problems += [f"{key}: {p}" for p in tr.nesting_problems()]
        if (key[0], key[1], "thread_name") not in meta:
            problems.append(f"slices on unnamed thread {key}")
    for fid, ends in flows.items():
        phs = sorted(x["ph"] for x in ends)
        if phs != ["f", "s"]:
            problems.append(f"flow {fid}: phases {phs}, want one s and one f")
            continue
        f, s = sorted(ends, key=lambda x: x["ph"])
        if (s["name"], s["cat"]) != (f["name"], f["cat"]):
            problems.append(f"flow {fid}: start and end differ in name or cat")
        if s["ts"] > f["ts"]:
            problems.append(f"flow {fid}: ends at {f['ts']} before it starts at {s['ts']}")
        for x in (s, f):
            tr = tracks.get((x["pid"], x["tid"]))
            if tr is None or not tr.encloses(_ns(x["ts"])):
                problems.append(f"flow {fid}: no slice holds its {x['ph']} at {x['ts']} on "
                                f"({x['pid']}, {x['tid']})")
    return problems


def test_validator_catches_what_importers_drop():
    # each broken trace is caught, for the reason it is broken
    def doc(*events):
        named = [{"ph": "M", "name": "thread_name", "pid": 1, "tid": 1, "args": {"name": "t"}}]
        return {"traceEvents": named + list(events)}

    x = {"ph": "X", "name": "a", "pid": 1, "tid": 1, "ts": 0.0, "dur": 10.0}
    assert check_chrome_trace(doc(x)) == []
    assert check_chrome_trace(doc(x, x | {"name": "b", "ts": 2.0, "dur": 3.0})) == []  # nested
    assert "ends after it" in check_chrome_trace(doc(x, x | {"ts": 5.0}))[0]
    assert "dur" in check_chrome_trace(doc(x | {"dur": -1.0}))[0]
    assert "ts" in check_chrome_trace(doc({k: v for k, v in x.items() if k != "ts"}))[0]
    assert "unnamed" in check_chrome_trace(doc(x | {"tid": 2}))[0]
    s = {"ph": "s", "name": "w", "cat": "c", "id": 1, "pid": 1, "tid": 1, "ts": 1.0}
    f = s | {"ph": "f", "bp": "e", "ts": 5.0}
    assert check_chrome_trace(doc(x, s, f)) == []
    assert "one s and one f" in check_chrome_trace(doc(x, s))[0]
    assert "before it starts" in check_chrome_trace(doc(x, s | {"ts": 6.0}, f))[0]
    assert "no slice holds" in check_chrome_trace(doc(x, s, f | {"ts": 10.0}))[0]
    assert "metadata" in check_chrome_trace(doc({"ph": "M", "name": "thread_name", "pid": 1,
                                                 "tid": 1, "args": {}}))[-1]


# --- overlapping ops on one stream ---------------------------------------------------


def test_overlapping_ops_of_one_stream_go_to_overlap_tracks():
    b = TimelineBuilder("x", "kineto")
    b.add_op("7", "A", T0, T0 + 10_000)
    b.add_op("7", "B", T0 + 2_000, T0 + 5_000)  # inside A
    b.add_op("7", "C", T0 + 4_000, T0 + 12_000)  # starts inside A, ends after it
    b.add_op("7", "D", T0 + 11_000, T0 + 13_000)  # after A, overlapping C
    b.add_op("8", "E", T0, T0 + 1_000)
    b.add_wait("7", T0 + 12_500, T0 + 14_000, on_stream="8")  # overlaps D
    tl = b.build()
    doc = to_perfetto([tl])
    assert check_chrome_trace(doc) == []
    names = thread_names(doc)
    ev = by_phase(doc)
    track = {e["name"]: names[(1, e["tid"])] for e in ev["X"]}
    assert track == {"A": "stream 7", "B": "stream 7 (overlap 1)", "C": "stream 7 (overlap 2)",
                     "D": "stream 7", "E": "stream 8", "wait": "stream 7 (overlap 1)"}
    sort = {names[(e["pid"], e["tid"])]: e["args"]["sort_index"] for e in ev["M"]
            if e["name"] == "thread_sort_index"}
    assert sorted(sort, key=sort.get) == ["stream 7", "stream 7 (overlap 1)",
                                          "stream 7 (overlap 2)", "stream 8"]
    assert len({e["tid"] for e in ev["X"]}) == 4  # every track its own tid


def _overlapping_timeline(n: int, seed: int, n_streams: int = 3):
    """Ops placed at random, so ops of one stream overlap (several deep), plus waits."""
    rng = np.random.default_rng(seed)
    start = T0 + np.sort(rng.integers(0, n * 400, n))
    end = start + rng.integers(0, 3_000, n)  # zero-length ones too
    b = TimelineBuilder("gen", "kineto")
    for i, (s, e) in enumerate(zip(start.tolist(), end.tolist())):
        b.add_op(str(rng.integers(0, n_streams)), f"k{i % 7}", s, e)
    for s in start[:: max(1, n // 50)].tolist():
        b.add_wait(str(rng.integers(0, n_streams)), s, s + 2_000,
                   on_stream=str(rng.integers(0, n_streams)))
    return b.build()


def _max_depth(starts: np.ndarray, ends: np.ndarray) -> int:
    """The most intervals running at once, an interval ending at t not running at t."""
    at = np.concatenate([starts, ends])
    step = np.concatenate([np.ones_like(starts), -np.ones_like(ends)])
    order = np.lexsort((step, at))  # at one time, ends before starts
    return int(np.cumsum(step[order]).max())


def test_generated_overlaps_keep_every_op_on_as_few_tracks_as_possible():
    tl = _overlapping_timeline(5_000, seed=3)
    caps = analyze([tl], Options(cold=0, max_points=0))["captures"]
    doc = to_perfetto([tl], caps)
    assert check_chrome_trace(doc) == []
    names = thread_names(doc)
    ev = by_phase(doc)
    ops = [e for e in ev["X"] if e["cat"] not in ("wait", "analysis")]
    assert len(ops) == len(tl)  # nothing dropped
    assert [e["ts"] for e in ops] == [round((s - tl.t0_ns) / 1000, 3) for s in tl.start_ns.tolist()]
    assert len([e for e in ev["X"] if e["cat"] == "wait"]) == tl.n_waits
    for code, sid in enumerate(tl.streams):
        # as many tracks as ops and waits of the stream ever run at once
        w = tl.wait_stream == code
        st = np.concatenate([tl.start_ns[tl.stream == code], tl.wait_start_ns[w]])
        en = np.concatenate([tl.end_ns[tl.stream == code], tl.wait_end_ns[w]])
        tracks = [n for n in names.values() if n == f"stream {sid}"
                  or n.startswith(f"stream {sid} (overlap ")]
        assert len(tracks) == max(1, _max_depth(st, en)) > 1


def test_lanes_of_sequential_intervals_stay_on_one_track():
    st = np.array([0, 10, 10, 20, 5], np.int64)
    en = np.array([10, 10, 20, 30, 6], np.int64)
    assert lanes(np.array([0, 0, 0, 0, 1]), st, en).tolist() == [0, 0, 0, 0, 0]
    assert lanes(np.array([0, 0, 0, 0, 0]), st, en).tolist() == [0, 0, 0, 0, 1]


# --- the analysis tracks --------------------------------------------------------------


def _two_side_streams():
    """Main stream 1 with long ops; side streams 2 and 3 whose windows overlap each other,
    each overlapping a main op (its dominator); a false point on stream 4, with a barrier."""
    b = TimelineBuilder("x", "kineto")
    b.add_op("1", "gemm_a", T0, T0 + 100_000)
    b.add_op("1", "gemm_b", T0 + 100_000, T0 + 200_000)
    b.add_op("1", "after", T0 + 300_000, T0 + 310_000)
    b.add_op("2", "side2", T0 + 20_000, T0 + 80_000)
    b.add_op("3", "side3", T0 + 50_000, T0 + 150_000)
    b.add_op("4", "side4", T0 + 250_000, T0 + 299_000)
    return b.build()


def test_analysis_tracks_show_side_windows_dominators_and_barriers():
    tl = _two_side_streams()
    cap = analyze_capture(tl)
    points = cap["parallel_points"]
    assert {p["side_stream"] for p in points} == {"2", "3", "4"}
    doc = to_perfetto([tl], [cap])
    assert check_chrome_trace(doc) == []
    names = thread_names(doc)
    ev = by_phase(doc)
    windows = [e for e in ev["X"] if e["cat"] == "analysis"]
    assert len(windows) == len(points)
    for p in points:
        (w,) = [e for e in windows if names[(1, e["tid"])] == f"analysis: side {p['side_stream']}"]
        assert w["name"] == f"side window {p['side_stream']}: {p['verdict']}"
        assert [w["ts"], round(w["ts"] + w["dur"], 3)] == p["side_window_us"]
        for k in ("overlap_pct", "busy_overlap_pct", "verdict", "side_ops"):
            assert w["args"][k] == p[k]
        assert w["args"].get("dominator") == p["dominator"]
    # the analysis tracks sort above the streams
    sort = {names[(e["pid"], e["tid"])]: e["args"]["sort_index"] for e in ev["M"]
            if e["name"] == "thread_sort_index"}
    assert sorted(sort, key=sort.get)[:3] == ["analysis: side 2", "analysis: side 3",
                                              "analysis: side 4"]
    # one dominator arrow per point that has a dominator, between its window and that op
    by_id = defaultdict(list)
    for e in ev["s"] + ev["f"]:
        if e["name"] == "dominator":
            by_id[e["id"]].append(e)
    doms = [p for p in points if p["dominator"]]
    assert doms and len(by_id) == len(doms)
    ops = {(e["tid"], e["name"]): e for e in ev["X"] if e["cat"] != "analysis"}
    linked = set()
    for ends in by_id.values():
        on_op = [x for x in ends if not names[(1, x["tid"])].startswith("analysis")]
        (x,) = on_op
        (op,) = [o for (t, _), o in ops.items()
                 if t == x["tid"] and o["ts"] <= x["ts"] < o["ts"] + o["dur"]]
        linked.add(op["name"])
    assert linked == {p["dominator"]["name"] for p in doms}
    # barriers: an instant at the barrier op's start, on the side stream's analysis track
    bars = [p for p in points if p["barrier"]]
    assert bars
    for p in bars:
        (i,) = [e for e in ev["i"] if e["name"] == f"barrier {p['barrier']['name']}"]
        assert i["ts"] == p["barrier"]["start_us"] and i["s"] == "t"
        assert names[(1, i["tid"])] == f"analysis: side {p['side_stream']}"
        assert i["args"]["ops"] == p["barrier"]["ops"]
    labels = next(e for e in ev["M"] if e["name"] == "process_labels")["args"]["labels"]
    assert "verdicts true" in labels


def test_analysis_track_nests_any_verdict_and_overlapping_windows():
    tl = _two_side_streams()
    cap = analyze_capture(tl)
    p = cap["parallel_points"][0]
    # windows of one side stream that overlap, and verdicts of any name
    extra = [p | {"side_window_us": [p["side_window_us"][0] + 1, p["side_window_us"][1] + 5],
                  "verdict": "envelope-only"},
             p | {"verdict": "some new verdict", "dominator": None, "barrier": None}]
    cap = cap | {"parallel_points": cap["parallel_points"] + extra,
                 "parallel_points_total": 40}
    doc = to_perfetto([tl], [cap])
    assert check_chrome_trace(doc) == []
    names = thread_names(doc)
    side = p["side_stream"]
    got = sorted((names[(1, e["tid"])], e["name"]) for e in by_phase(doc)["X"]
                 if e["cat"] == "analysis" and e["args"]["side_stream"] == side)
    assert got == [(f"analysis: side {side}", f"side window {side}: {p['verdict']}"),
                   (f"analysis: side {side} (overlap 1)", f"side window {side}: some new verdict"),
                   (f"analysis: side {side} (overlap 2)", f"side window {side}: envelope-only")]
    labels = next(e for e in doc["traceEvents"] if e["name"] == "process_labels")
    assert f"{len(cap['parallel_points'])} of 40 side windows shown" in labels["args"]["labels"]


def test_analyses_must_match_timelines():
    with pytest.raises(ValueError):
        to_perfetto([capture()], [])


def test_write_perfetto_with_analyses(tmp_path):
    tl = _two_side_streams()
    caps = analyze([tl], Options(cold=0))["captures"]
    out = tmp_path / "trace.json.gz"
    write_perfetto(out, [tl], caps)
    import gzip

    doc = json.loads(gzip.decompress(out.read_bytes()))
    assert doc == json.loads(json.dumps(to_perfetto([tl], caps)))
    assert any(e["ph"] == "X" and e["cat"] == "analysis" for e in doc["traceEvents"])


# --- every real trace in tests/data ---------------------------------------------------


def _real_traces() -> list[Path]:
    found = sorted((DATA / "kineto").glob("*.json.gz")) + sorted((DATA / "ascend").glob("*.csv"))
    # profiler output folders (any depth): the *_ascend_pt folder of each rank
    found += sorted(p for p in (DATA / "ascend").rglob("*_ascend_pt") if p.is_dir())
    return found


@pytest.mark.parametrize("path", _real_traces(), ids=lambda p: str(p.relative_to(DATA)))
def test_real_traces_export_well_formed(path):
    from parastream.timeline.readers import read_path

    try:
        read = read_path(str(path))
    except InputError as exc:  # a reader another part of the project is still adding
        pytest.skip(f"not readable here: {exc}")
    tls = captures_of(read)
    caps = analyze(read, Options(cold=0, max_points=0))["captures"]
    doc = to_perfetto(tls, caps)
    assert check_chrome_trace(doc) == []
    ev = by_phase(doc)
    assert len([e for e in ev["X"] if e["cat"] not in ("wait", "analysis")]) == sum(map(len, tls))
    assert len([e for e in ev["X"] if e["cat"] == "wait"]) == sum(t.n_waits for t in tls)
    assert len([e for e in ev["X"] if e["cat"] == "analysis"]) == \
        sum(len(c["parallel_points"]) for c in caps)


# --- Perfetto's own trace processor, where one is installed ---------------------------

TP_ENV = "PARASTREAM_TRACE_PROCESSOR"


def _trace_processor_shell() -> str | None:
    path = os.environ.get(TP_ENV) or shutil.which("trace_processor_shell") \
        or shutil.which("trace_processor")
    return path if path and os.access(path, os.X_OK) else None


def test_trace_processor_imports_every_slice_and_flow(tmp_path):
    tp_api = pytest.importorskip(
        "perfetto.trace_processor",
        reason="Perfetto's Python package is not installed (pip install perfetto)")
    shell = _trace_processor_shell()
    if shell is None:
        pytest.skip("no trace_processor_shell binary: the perfetto package downloads it at "
                    "first use, which needs the network, and no package registry ships it; "
                    f"set {TP_ENV} to a local copy to run this check")
    tl = _overlapping_timeline(2_000, seed=5)
    caps = analyze([tl], Options(cold=0, max_points=0))["captures"]
    out = tmp_path / "trace.json"
    write_perfetto(out, [tl], caps)
    doc = json.loads(out.read_text())
    ev = by_phase(doc)
    config = tp_api.TraceProcessorConfig(bin_path=shell)
    with tp_api.TraceProcessor(trace=str(out), config=config) as tp:
        def one(sql):
            return next(iter(tp.query(sql))).n

        assert one("select count(*) as n from slice") == len(ev["X"]) + len(ev["i"])
        assert one("select count(*) as n from flow") == len(ev["s"])
        errors = [(r.name, r.value) for r in tp.query(
            "select name, value from stats where value > 0 and severity in ('error', 'data_loss')")]
        assert errors == []
