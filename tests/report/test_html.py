"""The HTML report: self-contained, escaped, small for large traces, written atomically."""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from parastream.errors import InputError
from parastream.report import html as rh
from parastream.atomic import check_folder, check_writable, make_folder, write_atomic
from parastream.report.html import busy_bins, gantt_data, render_html, script_json, write_html
from parastream.timeline.model import (KIND_COMM, KIND_MEMCPY, TimelineBuilder, core_code,
                                       make_timeline)

T0 = 1_736_413_971_558_972_912  # epoch ns: does not fit a float64 exactly
EVIL = "</script><img src=x onerror=alert(1)>"
KINETO = Path(__file__).resolve().parents[1] / "data" / "kineto" / "cuda_event_sync_multi_stream.json.gz"


def us(ns: int) -> float:
    return round((ns - T0) / 1000, 3)


def small_capture(op_name: str = "MoeGatingTopK", stream_id: str = "8", label: str = "run 1"):
    """Main stream 7 with a matmul, a side stream hiding work behind it, a wait, HCCL."""
    b = TimelineBuilder("PROF_x/kernel_details.csv", "ascend_csv")
    b.device.name, b.device.ai_core_num, b.device.vector_core_num = "Ascend910B3", 20, 40
    b.add_op("7", "RmsNorm", T0, T0 + 4_250, type="RmsNorm", core=core_code("AI_VECTOR_CORE"),
             block_dim=40)
    b.add_op("7", "in_proj_qkv/MatMul", T0 + 4_600, T0 + 27_350, type="MatMul",
             core=core_code("AI_CORE"), block_dim=20)
    b.add_op(stream_id, op_name, T0 + 6_600, T0 + 12_600, type="MoeGatingTopK", block_dim=8)
    b.add_op(stream_id, "Cast", T0 + 13_000, T0 + 18_600, type="Cast")
    b.add_wait("7", T0 + 27_500, T0 + 30_000, on_stream=stream_id, name="EVENT_WAIT")
    b.add_op("7", "Cast", T0 + 30_100, T0 + 31_334, type="Cast")
    b.add_op("7", "o_proj/MatMul", T0 + 31_500, T0 + 51_500, type="MatMul", block_dim=20)
    b.add_op("9", "KvReload/Memcpy", T0 + 40_000, T0 + 60_000, kind=KIND_MEMCPY)
    b.add_op("HCCL", "hcom_allReduce_", T0 + 45_000, T0 + 70_000, kind=KIND_COMM,
             core=core_code("HCCL"))
    tl = b.build()
    a = {
        "source": tl.source, "format": tl.format, "label": label, "t0_ns": T0,
        "wall_us": 70.0, "parallelism": 1.42,
        "device": {"name": "Ascend910B3", "ai_core_num": 20, "vector_core_num": 40,
                   "sm_count": None},
        "streams": [
            {"id": "7", "role": "main", "ops": 4, "busy_us": 48.1,
             "gaps": {"count": 3, "idle_us": 0.9, "wait_us": 2.5}, "corrupt_overlaps": 0},
            {"id": stream_id, "role": "side", "ops": 2, "busy_us": 11.6,
             "gaps": {"count": 1, "idle_us": 0.4, "wait_us": 0.0}, "corrupt_overlaps": 0},
            {"id": "9", "role": "side", "ops": 1, "busy_us": 20.0,
             "gaps": {"count": 0, "idle_us": 0.0, "wait_us": 0.0}, "corrupt_overlaps": 2},
            {"id": "HCCL", "role": "comm", "ops": 1, "busy_us": 25.0,
             "gaps": {"count": 0, "idle_us": 0.0, "wait_us": 0.0}, "corrupt_overlaps": 0},
        ],
        "overlaps": [{"main": "7", "side": stream_id, "intersection_us": 11.6, "hidden_frac": 1.0},
                     {"main": "7", "side": "9", "intersection_us": 11.5, "hidden_frac": 0.575}],
        "parallel_points": [
            {"side_stream": stream_id, "side_window_us": [6.6, 18.6], "side_ops": 2,
             "dominator": {"name": "in_proj_qkv/MatMul", "stream": "7", "window_us": [4.6, 27.35]},
             "overlap_us": 12.0, "overlap_pct": 1.0, "busy_overlap_pct": 0.967, "verdict": "true",
             "barrier": None},
            {"side_stream": "9", "side_window_us": [40.0, 60.0], "side_ops": 1,
             "dominator": {"name": "o_proj/MatMul", "stream": "7", "window_us": [31.5, 51.5]},
             "overlap_us": 11.5, "overlap_pct": 0.575, "busy_overlap_pct": 0.575,
             "verdict": "true", "barrier": None},
            {"side_stream": stream_id, "side_window_us": [13.0, 18.6], "side_ops": 1,
             "dominator": {"name": "o_proj/MatMul", "stream": "7", "window_us": [31.5, 51.5]},
             "overlap_us": 0.0, "overlap_pct": 0.0, "busy_overlap_pct": 0.0, "verdict": "false",
             "barrier": {"name": "Cast", "start_us": 30.1, "ops": ["55", "56"]}},
        ],
        "comm_comp_overlap_pct": 28.0,  # a percentage, as timeline.comm computes it
        "concurrency_us": {"0": 0.5, "1": 30.0, "2": 35.0, "3": 4.5},
        "contention": [{"streams": ["7", stream_id], "oversubscribed_us": 6.0, "max_demand": 28,
                        "cores": 20, "first_us": 6.6}],
        "warnings": ["corrupt data: 2 op(s) on stream 9 overlap an earlier op"],
    }
    return tl, a


SUMMARY = {"captures": 5, "dropped_cold": 2,
           "medians": {"wall_us": 70.25, "parallelism": 1.42, "overlap_pct": 0.575},
           "triage": {"step": "3b", "reason": "overlap_pct <= 0.05 at 1 of 3 points"},
           "notes": ["first", "second"]}


def big_timeline(n: int, streams: int = 4, seed: int = 0):
    rng = np.random.default_rng(seed)
    start = T0 + np.cumsum(rng.integers(100, 2000, n)).astype(np.int64)
    ops = dict(stream=rng.integers(0, streams, n).astype(np.int32),
               name=rng.integers(0, 50, n).astype(np.int32),
               type=rng.integers(0, 5, n).astype(np.int32), start_ns=start,
               end_ns=start + rng.integers(50, 3000, n), kind=rng.integers(0, 4, n).astype(np.int8),
               core=np.zeros(n, np.int8), block_dim=np.full(n, -1, np.int32),
               mix_block_dim=np.full(n, -1, np.int32), step=np.full(n, -1, np.int32))
    return make_timeline("big.json", "kineto", [str(i) for i in range(streams)],
                         [f"kernel_{i}" for i in range(50)], [f"T{i}" for i in range(5)], ops)


def big_analysis(tl, point_at: float = 0.5) -> dict:
    t0 = tl.t0_ns
    i = int(point_at * len(tl))
    a = (int(tl.start_ns[i]) - t0) / 1000
    return {
        "source": "big.json", "format": "kineto", "label": "big", "t0_ns": t0,
        "wall_us": (int(tl.end_ns.max()) - t0) / 1000, "parallelism": 1.7,
        "device": {"name": None, "ai_core_num": None, "vector_core_num": None, "sm_count": 108},
        "streams": [{"id": str(k), "role": r, "ops": 1, "busy_us": 1.0,
                     "gaps": {"count": 0, "idle_us": 0.0, "wait_us": 0.0}, "corrupt_overlaps": 0}
                    for k, r in enumerate(["main", "side", "side", "comm"])],
        "overlaps": [], "comm_comp_overlap_pct": None, "concurrency_us": {"0": 1.0},
        "contention": [], "warnings": [],
        "parallel_points": [{
            "side_stream": "1", "side_window_us": [a, a + 30], "side_ops": 9,
            "dominator": {"name": "kernel_3", "stream": "0", "window_us": [a + 10, a + 50]},
            "overlap_us": 20.0, "overlap_pct": 0.667, "busy_overlap_pct": 0.5,
            "verdict": "true", "barrier": None}],
    }


def embedded_data(page: str) -> list[dict]:
    blobs = re.findall(r'<script type="application/json" class="gantt-data">(.*?)</script>',
                       page, re.S)
    return [json.loads(b) for b in blobs]


# ------------------------------------------------------------------ self-contained
def test_page_is_self_contained():
    page = render_html([small_capture()], SUMMARY, "demo")
    assert page.startswith("<!DOCTYPE html>")
    low = page.lower()
    for bad in ("http:", "https:", "//cdn", "<script src", "<link", "@import", "url(", "<iframe",
                "<img"):
        assert bad not in low, bad
    # one inline script plus one JSON block per capture, nothing else
    assert low.count("<script") == 2
    assert low.count("</script>") == 2


def test_content_sections():
    tl, a = small_capture()
    page = render_html([(tl, a)], SUMMARY, "demo <title>")
    assert "<title>demo &lt;title&gt;</title>" in page
    # facts
    for fact in ("Ascend910B3", "ascend_csv", "70.000 us", "1.420x", "28.0%"):
        assert fact in page, fact
    # verdict table: windows, dominators, badges, barrier
    assert "[6.600, 18.600]" in page and "[4.600, 27.350]" in page
    assert "in_proj_qkv/MatMul" in page
    for v in ("true", "false"):
        assert f'<span class="badge v-{v}">{v}</span>' in page
    assert "at 30.100 us; ops 55, 56" in page
    assert page.count('data-point="') == 3
    # streams (role badges, wait-covered gaps, corrupt overlaps flagged), overlaps, histogram
    assert '<span class="role r-main">main</span>' in page
    assert '<span class="role r-comm">comm</span>' in page
    assert '<td class="num bad">2</td>' in page
    assert "0.575" in page
    assert page.count('class="hrow"') == 4
    assert "7 + 8" in page  # contention streams
    assert "corrupt data: 2 op(s)" in page
    # summary: triage first, generic rendering of unknown keys
    assert page.index("Triage") < page.index("medians")
    assert "overlap_pct &lt;= 0.05 at 1 of 3 points" in page
    assert "first, second" in page


def test_escaping_of_trace_names():
    tl, a = small_capture(op_name=EVIL, stream_id="<b>s</b>", label="<script>alert(2)</script>")
    a["warnings"].append(EVIL)
    a["parallel_points"][0]["dominator"]["name"] = EVIL
    a["parallel_points"][2]["barrier"]["name"] = EVIL
    summary = dict(SUMMARY, triage={"reason": EVIL})
    page = render_html([(tl, a)], summary, EVIL)
    assert EVIL not in page
    assert "<img" not in page.lower()
    assert "<b>s</b>" not in page
    assert "<script>alert(2)" not in page
    assert page.lower().count("<script") == 2 and page.lower().count("</script>") == 2
    assert page.count("&lt;/script&gt;&lt;img src=x onerror=alert(1)&gt;") >= 4
    # the chart data still carries the exact name
    (data,) = embedded_data(page)
    assert EVIL in data["names"]
    assert "<b>s</b>" in [ln["id"] for ln in data["lanes"]]
    assert EVIL in [p["dom"]["name"] for p in data["points"]]


def test_script_json_cannot_break_out():
    text = script_json({"a": "</script><!-- & \u2028"})
    assert "<" not in text and ">" not in text and "&" not in text
    assert "\u2028" not in text
    assert json.loads(text) == {"a": "</script><!-- & \u2028"}


# ------------------------------------------------------------------ chart data
def test_gantt_data_relative_ns_precise_times():
    tl, a = small_capture()
    d = gantt_data(tl, a)
    assert d["mode"] == "detail"
    assert [ln["id"] for ln in d["lanes"]] == ["7", "8", "9", "HCCL"]
    assert [ln["role"] for ln in d["lanes"]] == ["main", "side", "side", "comm"]
    names = [d["names"][n] for n in d["ops"]["n"]]
    i = names.index("Cast")
    assert d["ops"]["s"][i] == 13.0
    j = [k for k, nm in enumerate(names) if nm == "Cast"][1]
    assert d["ops"]["s"][j] == 30.1 and d["ops"]["d"][j] == 1.234  # ns kept
    assert d["ops"]["lane"][names.index("hcom_allReduce_")] == 3
    assert d["waits"]["s"] == [27.5] and d["waits"]["d"] == [2.5]
    assert d["waits"]["lane"] == [0] and d["waits"]["on"] == [1]
    assert d["extent"] == 70.0
    p = d["points"][2]
    assert p["verdict"] == "false" and p["barrier"] == {"name": "Cast", "t": 30.1, "lane": 0}
    assert p["dom"]["lane"] == 0 and p["lane"] == 1
    assert len(d["bins"]["busy"]) == 4 and len(d["bins"]["busy"][0]) == rh.N_BINS
    assert d["bins"]["wait"][1] is None and max(d["bins"]["wait"][0]) == 100


def test_streams_missing_from_analysis_still_get_lanes():
    tl, a = small_capture()
    a["streams"] = a["streams"][:1]
    d = gantt_data(tl, a)
    assert [ln["id"] for ln in d["lanes"]] == ["7", "8", "9", "HCCL"]
    assert d["lanes"][1]["role"] == "?"


def test_empty_capture_renders():
    tl = TimelineBuilder("empty.csv", "ascend_csv").build()
    page = render_html([(tl, {"source": "empty.csv", "format": "ascend_csv", "t0_ns": 0})], {}, "e")
    (data,) = embedded_data(page)
    assert data["ops"]["s"] == [] and data["lanes"] == []
    assert "no parallel points found" in page


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 1000), st.integers(0, 300)), min_size=0, max_size=30),
       st.integers(1, 40))
def test_busy_bins_matches_brute_force(ivals, nb):
    starts = np.array([s for s, _ in ivals], float)
    ends = np.array([s + d for s, d in ivals], float)
    edges = np.linspace(0, 1300, nb + 1)
    got = busy_bins(starts, ends, edges)
    grid = np.arange(0, 1300, 0.5) + 0.25  # midpoints of half-unit cells
    covered = np.zeros(len(grid), bool)
    for s, e in zip(starts, ends):
        covered |= (grid >= s) & (grid < e)
    want = [covered[(grid >= lo) & (grid < hi)].mean() if ((grid >= lo) & (grid < hi)).any() else 0
            for lo, hi in zip(edges[:-1], edges[1:])]
    # cells straddle bin edges, so allow one cell of error per bin
    tol = 0.5 / np.diff(edges) + 1e-9
    assert np.all(np.abs(got - np.array(want)) <= tol + 1e-9)


# ------------------------------------------------------------------ large traces
def test_large_trace_binned_overview_is_fast_and_small():
    tl = big_timeline(100_000)
    a = big_analysis(tl)
    t = time.perf_counter()
    page = render_html([(tl, a)], {}, "big")
    elapsed = time.perf_counter() - t
    assert elapsed < 5.0, elapsed
    assert len(page.encode()) < 3_000_000
    (data,) = embedded_data(page)
    assert data["mode"] == "overview" and data["nOps"] == 100_000
    assert 0 < data["shownOps"] <= rh.NEIGHBOURHOOD_LIMIT
    assert len(data["ops"]["s"]) == data["shownOps"]
    assert "Overview mode: 100,000 ops" in page
    # the detailed ops cover the parallel point's neighbourhood
    side = a["parallel_points"][0]["side_window_us"]
    s = np.array(data["ops"]["s"])
    e = s + np.array(data["ops"]["d"])
    assert ((e >= side[0]) & (s <= side[1])).sum() > 5
    for lo, hi in data["detailWindows"]:
        assert lo <= side[0] and hi >= side[1] + 20
    # heat strips: a busy fraction per bin and stream
    busy = np.array(data["bins"]["busy"])
    assert busy.shape == (4, rh.N_BINS) and busy.max() <= 100 and busy.mean() > 10


def test_neighbourhood_is_capped(monkeypatch):
    monkeypatch.setattr(rh, "DETAIL_LIMIT", 100)
    monkeypatch.setattr(rh, "NEIGHBOURHOOD_LIMIT", 50)
    tl = big_timeline(2_000)
    a = big_analysis(tl)
    a["parallel_points"][0]["side_window_us"] = [0.0, a["wall_us"]]  # everything
    d = gantt_data(tl, a)
    assert d["mode"] == "overview" and d["shownOps"] == 50 and d["truncated"]


def test_small_trace_just_over_limit(monkeypatch):
    monkeypatch.setattr(rh, "DETAIL_LIMIT", 5)
    tl, a = small_capture()
    d = gantt_data(tl, a)
    assert d["mode"] == "overview"
    assert d["shownOps"] == len(tl)  # the points cover the whole short capture


# ------------------------------------------------------------------ writing
def test_write_html_is_atomic(tmp_path, monkeypatch):
    out = tmp_path / "report.html"
    write_html(out, [small_capture()], SUMMARY, "demo")
    assert out.read_text(encoding="utf-8").startswith("<!DOCTYPE html>")
    assert os.stat(out).st_mode & 0o044  # readable by others like any new file (umask)

    def boom(*args, **kwargs):
        raise OSError("disk full")

    out.write_text("previous")
    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(InputError, match="report.html: cannot write: disk full"):
        write_html(out, [small_capture()], SUMMARY, "demo")
    assert out.read_text() == "previous"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.html"]


def test_failed_render_leaves_no_file(tmp_path, monkeypatch):
    out = tmp_path / "new.html"

    def broken(*args, **kwargs):
        raise RuntimeError("render failed")

    monkeypatch.setattr(rh, "render_html", broken)
    with pytest.raises(RuntimeError):
        rh.write_html(out, [small_capture()], SUMMARY, "demo")
    assert list(tmp_path.iterdir()) == []


def test_write_atomic_failure_mid_write(tmp_path, monkeypatch):
    out = tmp_path / "x.bin"

    def fail_fsync(fd):
        raise OSError("io error")

    monkeypatch.setattr(os, "fsync", fail_fsync)
    with pytest.raises(InputError, match="cannot write: io error"):
        write_atomic(out, b"data")
    assert list(tmp_path.iterdir()) == []
    monkeypatch.undo()
    write_atomic(out, "text ✓")
    assert out.read_text(encoding="utf-8") == "text ✓"


def test_write_atomic_missing_directory(tmp_path):
    with pytest.raises(InputError, match="x.html: cannot write: No such file"):
        write_atomic(tmp_path / "nope" / "x.html", "x")
    assert list(tmp_path.iterdir()) == []


def test_a_fifo_or_device_output_is_written_in_place(tmp_path):
    """A named pipe (or /dev/stdout, /dev/null) is written into, as a shell redirection
    would: renaming a file over it replaced the node itself (-o /dev/null as root)."""
    import stat
    import threading

    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    got = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()), daemon=True)
    reader.start()
    check_writable(fifo)
    write_atomic(fifo, "report")
    reader.join(5)
    assert got == [b"report"] and stat.S_ISFIFO(os.stat(fifo).st_mode)
    assert [p.name for p in tmp_path.iterdir()] == ["pipe"]  # no temporary file left
    try:
        os.mknod(tmp_path / "null", 0o666 | stat.S_IFCHR, os.makedev(1, 3))
        with open(tmp_path / "null", "wb"):
            pass
    except OSError:
        return  # not allowed to make or open device nodes here (no root, a nodev mount)
    write_atomic(tmp_path / "null", "gone")
    assert stat.S_ISCHR(os.stat(tmp_path / "null").st_mode)


def test_output_to_dev_stdout_from_the_command_line(tmp_path):
    """`-o /dev/stdout` writes there; its link resolves to a pipe that is no path."""
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-m", "parastream", "graph", "two_chains", "--scale",
                        "tiny", "--format", "json", "-o", "/dev/stdout"],
                       capture_output=True, text=True, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert '"parastream.graph-analysis/1"' in r.stdout
    # stdout appended to a file (>> log): written to the descriptor, the file not replaced
    log = tmp_path / "log.txt"
    log.write_text("earlier line\n")
    with open(log, "ab") as out:
        r = subprocess.run([sys.executable, "-m", "parastream", "graph", "two_chains",
                            "--scale", "tiny", "--format", "json", "-o", "/dev/stdout",
                            "--device", "cpu"], stdout=out, stderr=subprocess.PIPE, text=True,
                           cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    head, doc = log.read_text().split("\n", 1)
    assert head == "earlier line" and json.loads(doc)["schema"] == "parastream.graph-analysis/1"
    # two outputs on one stream lose no file; a closed stdout is said so, in one line
    from parastream.atomic import check_outputs

    check_outputs({"-o": "/dev/null", "--html": "/dev/null"}, ["/dev/null"])
    r = subprocess.run([sys.executable, "-m", "parastream", "graph", "two_chains", "--scale",
                        "tiny", "-o", "/dev/stdout"], stdout=subprocess.DEVNULL,
                       stderr=subprocess.PIPE, text=True, cwd=tmp_path,
                       preexec_fn=lambda: os.close(1))
    assert r.returncode == 2 and r.stderr.strip().splitlines() == [
        "parastream: /dev/stdout: cannot write: descriptor 1 is not open"]


def test_a_gz_trace_name_gets_gzip(tmp_path):
    import gzip

    from parastream.atomic import gzipped_if_named

    assert gzip.decompress(gzipped_if_named(tmp_path / "t.json.gz", b'{"a": 1}')) == b'{"a": 1}'
    assert gzipped_if_named("t.json", b"{}") == b"{}"
    check_writable("")  # an empty name is no file output (stdout)


def test_outputs_are_checked_before_any_work(tmp_path):
    """check_writable / check_folder refuse what write_atomic / make_folder would fail on,
    before a command measures anything; what they pass can be written."""
    (tmp_path / "adir").mkdir()
    (tmp_path / "afile").write_text("x")
    for bad, why in ((tmp_path / "nope" / "x.json", "no directory"),
                     (tmp_path / "adir", "it is a directory"),
                     (f"{tmp_path / 'adir2'}{os.sep}", "ends with a slash")):
        with pytest.raises(InputError, match=why):
            check_writable(bad)
    check_writable(None)
    check_writable(tmp_path / "ok.json")
    # a file in an output folder the command makes first (run --json inside --trace)
    check_writable(tmp_path / "tr" / "r.json", made=tmp_path / "tr")
    with pytest.raises(InputError, match="no directory"):
        check_writable(tmp_path / "tr" / "deeper" / "r.json", made=tmp_path / "tr")
    write_atomic(tmp_path / "ok.json", "{}")
    with pytest.raises(InputError, match="it is a file, not a folder"):
        check_folder(tmp_path / "afile")
    with pytest.raises(InputError, match="is not a folder"):
        check_folder(tmp_path / "afile" / "below")
    check_folder(None)
    check_folder(tmp_path / "new" / "deeper")
    make_folder(tmp_path / "new" / "deeper")
    assert (tmp_path / "new" / "deeper").is_dir()
    with pytest.raises(InputError, match="cannot write"):
        make_folder(tmp_path / "afile" / "below")
    if os.geteuid() != 0:  # root writes anywhere
        (tmp_path / "ro").mkdir(mode=0o500)
        with pytest.raises(InputError, match="not writable"):
            check_writable(tmp_path / "ro" / "x.json")
    # a file where a folder of the path should be is named as such
    with pytest.raises(InputError, match=f"cannot write: {tmp_path / 'afile'} is a file, not a folder"):
        check_writable(tmp_path / "afile" / "x.json")
    # permission bits say nothing to root or of /proc: a write is tried (and undone)
    if os.path.isdir("/proc/self"):
        with pytest.raises(InputError, match="cannot write in /proc"):
            check_writable("/proc/x.json")
        with pytest.raises(InputError, match="cannot write in /proc"):
            check_folder("/proc/demo")
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".parastream-probe-")]


# ------------------------------------------------------------------ real trace
def _read_kineto():
    try:
        from parastream.timeline.readers import read_path
        return read_path(str(KINETO))
    except (ImportError, NotImplementedError) as exc:  # reader not there yet
        pytest.skip(f"kineto reader unavailable: {exc}")


def test_real_kineto_trace():
    tls = _read_kineto()
    try:
        from parastream.timeline.analyze import analyze_capture
        caps = [(tl, analyze_capture(tl)) for tl in tls]
    except ImportError:
        caps = [(tl, {"source": tl.source, "format": tl.format, "t0_ns": tl.t0_ns}) for tl in tls]
    page = render_html(caps, {"captures": len(caps)}, "kineto")
    (data,) = embedded_data(page)[:1]
    tl = tls[0]
    assert sorted(ln["id"] for ln in data["lanes"]) == sorted(tl.streams)
    assert len(data["ops"]["s"]) == len(tl)
    assert "ampere_sgemm_128x64_nn" in data["names"]
    assert len(data["waits"]["s"]) == tl.n_waits
    assert min(data["ops"]["s"] + data["waits"]["s"]) == 0.0


def test_a_dangling_symlink_is_checked_where_it_points(tmp_path):
    # the write goes through the link: a link into a missing folder fails up front, not
    # after the work
    link = tmp_path / "out.md"
    link.symlink_to(tmp_path / "missing" / "out.md")
    with pytest.raises(InputError, match="no directory"):
        check_writable(link)


def test_write_atomic_writes_through_a_symlink(tmp_path):
    # renaming over the link made it a plain file and left its target as it was
    target = tmp_path / "target.txt"
    target.write_text("old")
    link = tmp_path / "link.json"
    link.symlink_to(target.name)
    write_atomic(link, "new")
    assert link.is_symlink() and target.read_text() == "new"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link.json", "target.txt"]


def test_the_plan_check_is_in_the_page():
    # analyze --plan printed it in text and JSON only: the HTML report left it out
    tl, a = small_capture()
    a["plan_check"] = {"candidate": "moe/side-serial", "ops_planned": 5, "ops_found": 5,
                       "stream_mapping": {"0": "7", "1": "8"}, "misplaced_count": 1,
                       "misplaced": [{"op": EVIL, "planned_stream": 1,
                                      "expected_trace_stream": "8", "trace_stream": "7"}],
                       "side_stream_never_ran": False,
                       "shared_trace_streams": [{"trace_stream": "8", "plan_streams": [1, 2]}],
                       "parallel_points": []}
    page = render_html([(tl, a)], SUMMARY, "t")
    assert "Plan check" in page and "moe/side-serial" in page and "1 misplaced" in page
    assert "side streams 1, 2 all ran on trace stream 8" in page
    assert EVIL not in page and "&lt;/script&gt;&lt;img src=x onerror=alert(1)&gt;" in page
