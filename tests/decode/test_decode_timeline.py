"""Every mode's run yields a timeline that ``parastream analyze`` reads back: one stream
per request in ``streams`` mode, the device's step spans in the batch modes, and the
host's scheduling stream beside them."""

from __future__ import annotations

import pytest

from parastream.decode.metrics import request_gantt
from parastream.decode.modes import HOST_LANE, MODES, ModeSettings, run_mode
from parastream.report.kineto import write_kineto
from parastream.workflow.analyze import analyze

from .helpers import requests


@pytest.fixture(scope="module")
def runs(tiny):
    reqs = requests(5, output=4)
    st = ModeSettings(concurrency=3, kv_blocks=32, context=tiny.config.context)
    return {m: run_mode(tiny, m, reqs, st) for m in MODES}


def test_the_lanes_of_each_mode(runs):
    assert set(runs["streams"].timeline.streams) == {*(f"request-{i}" for i in range(5)),
                                                     HOST_LANE}
    for mode in ("sequential", "batch", "batch+overlap"):
        assert runs[mode].timeline.streams == ["device", HOST_LANE]
    names = runs["batch"].timeline.names
    assert any(n.startswith("decode B=3") for n in names)
    assert sum(n.startswith("prefill r") for n in names) == 5


def test_fewer_streams_than_requests_are_shared(tiny, runs):
    """Two hardware queues for three running requests: each request keeps its own lane,
    the tokens are the same, and at most two steps run at once."""
    reqs = requests(5, output=4)
    st = ModeSettings(concurrency=3, kv_blocks=32, context=tiny.config.context, streams=2)
    run = run_mode(tiny, "streams", reqs, st)
    assert [lv.tokens for lv in run.lives] == [lv.tokens for lv in runs["sequential"].lives]
    tl = run.timeline
    host = tl.streams.index(HOST_LANE)
    edges = sorted((t, d) for s, e, k in zip(tl.start_ns, tl.end_ns, tl.stream) if k != host
                   for t, d in ((int(s), 1), (int(e), -1)))
    level = peak = 0
    for _, d in sorted(edges, key=lambda x: (x[0], x[1])):
        level += d
        peak = max(peak, level)
    assert peak <= 2


def test_overlap_mode_schedules_while_the_device_steps(runs):
    """In batch+overlap the host's spans fall inside device steps; in batch they do not
    (the host waits for each step)."""
    def host_inside_device(run) -> int:
        tl = run.timeline
        host = tl.streams.index(HOST_LANE)
        dev = [(s, e) for s, e, k in zip(tl.start_ns, tl.end_ns, tl.stream) if k != host]
        return sum(any(ds < s and e < de for ds, de in dev)
                   for s, e, k in zip(tl.start_ns, tl.end_ns, tl.stream) if k == host)

    assert host_inside_device(runs["batch"]) == 0
    assert host_inside_device(runs["batch+overlap"]) > 0


@pytest.mark.parametrize("mode", MODES)
def test_analyze_reads_the_trace_back(runs, tmp_path, mode):
    tl = runs[mode].timeline
    path = tmp_path / "decode.json"
    write_kineto(path, tl, f"decode {mode}")
    doc = analyze(str(path), progress=False).to_dict()
    (cap,) = doc["captures"]
    assert {s["id"] for s in cap["streams"]} == set(tl.streams)
    assert cap["ops"] == len(tl)


def test_the_per_request_gantt(runs):
    for run in runs.values():
        g = request_gantt(run)
        assert g.streams == [f"request-{i}" for i in range(5)]
        assert sorted(set(g.names)) == ["decoding", "waiting"] and len(g) == 10
        for lv in run.lives:
            s = g.streams.index(f"request-{lv.request.rid}")
            assert int(g.end_ns[g.stream == s].max()) >= lv.times_ns[-1]


def test_analyze_reads_a_split_and_chunked_run_back(tiny, tmp_path):
    """batch+overlap with chunked prefill and every step of 2 rows or more split: the
    micro-batch lane and the chunk spans read back like the rest."""
    st = ModeSettings(concurrency=3, kv_blocks=32, context=tiny.config.context,
                      prefill_chunk=8, tbo=2)
    tl = run_mode(tiny, "batch+overlap", requests(5, output=4), st).timeline
    assert "device micro-batch" in tl.streams and any(n.startswith("chunk") for n in tl.names)
    path = tmp_path / "decode.json"
    write_kineto(path, tl, "decode split")
    (cap,) = analyze(str(path), progress=False).to_dict()["captures"]
    assert {s["id"] for s in cap["streams"]} == set(tl.streams)
    assert cap["ops"] == len(tl)
