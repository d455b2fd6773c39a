"""torch_npu trace_view.json reader."""

from __future__ import annotations

import gzip
import json
import pathlib

import numpy as np
import pytest

from parastream.errors import InputError
from parastream.timeline import model
from parastream.timeline.readers import trace_view

BASE_US = 1736413971550000


def meta(kind: str, pid, label: str, tid=0) -> dict:
    return {"ph": "M", "name": kind, "pid": pid, "tid": tid, "args": {"name": label}}


def x(name: str, rel_ts: str, dur, pid, tid, **args) -> dict:
    """A complete event; the Ascend exporter writes ``ts`` as a string of epoch us."""
    whole, frac = rel_ts.split(".")
    ev = {"ph": "X", "name": name, "ts": f"{BASE_US + int(whole)}.{frac}", "dur": dur,
          "pid": pid, "tid": tid}
    if args:
        ev["args"] = args
    return ev


def ns(rel_us: str) -> int:
    whole, frac = rel_us.split(".")
    return (BASE_US + int(whole)) * 1000 + int((frac + "000")[:3])


def sample_events(with_comm_ops: bool = True) -> list[dict]:
    ev = [
        meta("process_name", 100, "Python"), meta("thread_name", 100, "Thread 100", 100),
        meta("process_name", 200, "CANN"),
        meta("process_name", 300, "Ascend Hardware"),
        meta("thread_name", 300, "Stream 2", 2), meta("thread_name", 300, "Stream 7", 7),
        meta("thread_name", 300, "Stream 9", 9),
        meta("process_name", 400, "HCCL"),
        meta("thread_name", 400, "Plane 0", 0),
        meta("process_name", 500, "Overlap Analysis"),
        # CPU side: ignored
        x("ProfilerStep#3", "0.000", 500.0, 100, 100),
        x("aten::mm", "1.000", 4.0, 100, 100),
        x("aclnnMatmul", "1.500", 2.0, 200, 200),
        # device
        x("aclnnMatmul_MatMulV2", "10.125", 30.5, 300, 2, **{"Task Type": "AI_CORE",
                                                               "Stream Id": 2, "Block Dim": 24}),
        x("aclnnAdd_AddAiCore_Add", "41.000", 3.25, 300, 2, **{"Task Type": "AI_VECTOR_CORE",
                                                                 "Block Num": "40"}),
        x("aclnnFlashAttentionScore", "12.000", 20, 300, 7,
          **{"Task Type": "MIX_AIC", "Block Dim": 20, "Mix Block Dim": 40}),
        x("EVENT_WAIT_SQE", "33.000", 7.5, 300, 7, **{"Task Type": "EVENT_WAIT_SQE"}),
        x("EVENT_RECORD_SQE", "40.000", 0.02, 300, 2, **{"Task Type": "EVENT_RECORD_SQE"}),
        x("MemCopy", "50.000", 1.0, 300, 7, **{"Task Type": "SDMA_SQE"}),
        x("hcom_allReduce__123_0_1", "60.000", 2.0, 300, 9, **{"Task Type": "Notify_Wait"}),
        x("Notify_Wait", "60.000", 2.0, 400, 0),
        # overlap analysis: totals kept in meta
        x("Computing", "10.000", 40.0, 500, 1), x("Computing", "60.000", 5.0, 500, 1),
        x("Free", "50.000", 10.0, 500, 3),
    ]
    if with_comm_ops:
        ev += [meta("thread_name", 400, "Group hccl_world_group Communication", 5),
               x("hcom_allReduce__123_0_1", "59.500", 4.0, 400, 5)]
    return ev


def write(path: pathlib.Path, events) -> pathlib.Path:
    path.write_text(json.dumps(events))
    return path


def test_streams_ops_waits_and_comm(tmp_path):
    path = write(tmp_path / "trace_view.json", sample_events())
    assert trace_view.sniff(path.read_bytes())
    tl = trace_view.read(path)
    assert tl.format == trace_view.FORMAT
    lanes = [tl.streams[s] for s in tl.stream]
    names = [tl.op_name(i) for i in range(len(tl))]
    assert names == ["aclnnMatmul_MatMulV2", "aclnnFlashAttentionScore", "aclnnAdd_AddAiCore_Add",
                     "MemCopy", "hcom_allReduce__123_0_1"]
    assert lanes == ["2", "7", "2", "7", model.COMM_LANE]
    assert tl.start_ns[0] == ns("10.125") and tl.dur_ns[0] == 30500
    assert tl.block_dim.tolist() == [24, 20, 40, -1, -1]
    assert tl.mix_block_dim.tolist() == [-1, 40, -1, -1, -1]
    assert [model.CORES[c] for c in tl.core] == ["AI_CORE", "MIX_AIC", "AI_VECTOR_CORE", "DMA",
                                                 "HCCL"]
    assert tl.kind.tolist() == [model.KIND_COMPUTE, model.KIND_COMPUTE, model.KIND_COMPUTE,
                                model.KIND_MEMCPY, model.KIND_COMM]
    # the wait is recorded on stream 7, not as an op
    assert tl.n_waits == 1
    assert tl.streams[tl.wait_stream[0]] == "7" and tl.wait_on[0] == -1
    assert (tl.wait_start_ns[0], tl.wait_end_ns[0]) == (ns("33.000"), ns("40.500"))
    assert tl.names[tl.wait_name[0]] == "EVENT_WAIT_SQE"
    # HCCL's small task on stream 9 is folded into the whole op on the comm lane
    assert "9" not in lanes and tl.meta["ascend_hccl_tasks_folded"] == 1
    assert tl.meta["ascend_overlap_analysis"] == {"Computing": 45000, "Free": 10000}
    assert tl.meta["ascend_marker_tasks"] == 1


def test_without_whole_comm_ops_the_hardware_hccl_tasks_stay(tmp_path):
    events = [e for e in sample_events(with_comm_ops=False) if e["pid"] != 400]
    tl = trace_view.read(write(tmp_path / "t.json", events))
    comm = tl.kind == model.KIND_COMM
    assert [tl.streams[s] for s in tl.stream[comm]] == ["9"]
    assert model.CORES[tl.core[comm][0]] == "HCCL"
    assert "ascend_hccl_tasks_folded" not in tl.meta


def test_comm_process_without_communication_threads_feeds_the_comm_lane(tmp_path):
    # some exports have only Plane threads: their tasks are the communication there is
    tl = trace_view.read(write(tmp_path / "t.json", sample_events(with_comm_ops=False)))
    comm = tl.kind == model.KIND_COMM
    assert [tl.streams[s] for s in tl.stream[comm]] == [model.COMM_LANE]
    assert [tl.op_name(i) for i in np.flatnonzero(comm)] == ["Notify_Wait"]


def test_numeric_ts_gzip_and_wrapped_object(tmp_path):
    # written as JSON text: a Python float could not even hold this literal
    text = ('[{"ph": "M", "name": "process_name", "pid": 1, "tid": 0, '
            '"args": {"name": "Ascend Hardware"}}, '
            '{"ph": "X", "name": "k", "ts": 1736413971558972.912, "dur": 185.504, "pid": 1, '
            '"tid": 3, "args": {"Task Type": "AI_CORE"}}]')
    gz = tmp_path / "trace_view.json.gz"
    gz.write_bytes(gzip.compress(text.encode()))
    tl = trace_view.read(gz)
    assert tl.start_ns.tolist() == [1736413971558972912]
    assert tl.end_ns.tolist() == [1736413971558972912 + 185504]
    assert tl.streams == ["3"]
    wrapped = tmp_path / "w.json"
    wrapped.write_text('{"traceEvents": ' + text + "}")
    assert trace_view.read(wrapped).start_ns.tolist() == [1736413971558972912]


def test_invalid_and_truncated_json(tmp_path):
    text = json.dumps(sample_events())
    bad = tmp_path / "trace_view.json"
    bad.write_text(text[: len(text) // 2])
    with pytest.raises(InputError, match="invalid JSON"):
        trace_view.read(bad)
    bad.write_text("[{]")
    with pytest.raises(InputError, match="invalid JSON"):
        trace_view.read(bad)


def test_no_device_tasks(tmp_path):
    cpu_only = [meta("process_name", 1, "Python"), x("aten::mm", "0.000", 1.0, 1, 1)]
    with pytest.raises(InputError, match="no device tasks"):
        trace_view.read(write(tmp_path / "t.json", cpu_only))
    empty_hw = [meta("process_name", 1, "Ascend Hardware")]
    with pytest.raises(InputError, match="no device tasks"):
        trace_view.read(write(tmp_path / "u.json", empty_hw))


def test_bad_times_are_skipped_with_a_warning(tmp_path):
    events = [meta("process_name", 1, "Ascend Hardware"),
              x("a", "0.000", 1.0, 1, 2, **{"Task Type": "AI_CORE"}),
              {"ph": "X", "name": "b", "ts": "not a time", "dur": 1, "pid": 1, "tid": 2},
              {"ph": "X", "name": "c", "ts": f"{BASE_US}.5", "dur": -3, "pid": 1, "tid": 2}]
    tl = trace_view.read(write(tmp_path / "t.json", events))
    assert len(tl) == 1
    assert any("skipped 2 task(s)" in w for w in tl.warnings)


def test_several_hardware_processes_keep_the_busiest(tmp_path):
    events = [meta("process_name", 1, "Ascend Hardware"), meta("process_name", 2,
                                                                "Ascend Hardware"),
              x("a", "0.000", 1.0, 1, 2), x("b", "1.000", 1.0, 2, 2), x("c", "2.000", 1.0, 2, 2)]
    tl = trace_view.read(write(tmp_path / "t.json", events))
    assert [tl.op_name(i) for i in range(len(tl))] == ["b", "c"]
    assert any("several 'Ascend Hardware'" in w for w in tl.warnings)


def test_sniff():
    assert trace_view.sniff(b' [{"ph": "M", "name": "process_name"}')
    assert not trace_view.sniff(b'{"traceEvents": [{"ph": "X"}]}')
    assert not trace_view.sniff(b"Name,Start Time(us)\n")
    assert not trace_view.sniff(b"[1, 2, 3]")


def test_sorted_by_start():
    # make_timeline's contract holds for this reader too
    events = [meta("process_name", 1, "Ascend Hardware")] + [
        x(f"k{i}", f"{100 - i}.000", 0.5, 1, 2) for i in range(10)]
    import tempfile
    with tempfile.TemporaryDirectory() as d:
        tl = trace_view.read(write(pathlib.Path(d) / "t.json", events))
    assert np.all(np.diff(tl.start_ns) > 0)


def test_odd_args_fall_back_to_generic_decoding(tmp_path):
    events = [meta("process_name", 1, "Ascend Hardware"),
              x("a", "0.000", 1.0, 1, 2, **{"Task Type": "AI_CORE", "Block Dim": 16}),
              {"ph": "X", "name": "b", "ts": f"{BASE_US + 1}.000", "dur": 1, "pid": 1, "tid": 2,
               "args": ["not", "an", "object"]},
              {"ph": "i", "name": "marker", "ts": "5", "pid": 1, "tid": 2, "args": 7}]
    tl = trace_view.read(write(tmp_path / "t.json", events))
    assert [tl.op_name(i) for i in range(len(tl))] == ["a", "b"]
    assert tl.block_dim.tolist() == [16, -1]
    bad = write(tmp_path / "u.json", [1, 2, 3])
    with pytest.raises(InputError, match="not a trace_view event list"):
        trace_view.read(bad)


@pytest.mark.parametrize("bad", [{"a": 1}, [1, 2]])
def test_an_object_or_list_as_thread_or_process_id_is_refused(tmp_path, bad):
    # found by a docs audit: a dict tid reached a dict key (TypeError, traceback)
    for field in ("tid", "pid"):
        events = sample_events()
        events[-3][field] = bad
        with pytest.raises(InputError, match="not a trace_view event list"):
            trace_view.read(write(tmp_path / "t.json", events))


def test_numeric_and_named_ids_still_read(tmp_path):
    numeric = trace_view.read(write(tmp_path / "n.json", sample_events()))
    events = sample_events()
    for ev in events:
        if ev.get("pid") == 300:
            ev["pid"] = "300"
    named = trace_view.read(write(tmp_path / "t.json", events))
    assert len(named) == len(numeric) > 0
    assert sorted(named.streams) == sorted(numeric.streams)


def test_waits_alone_are_refused(tmp_path):
    # a wait shows no work to overlap; it was read as a "0 ops" capture, exit 0
    events = [meta("process_name", 1, "Ascend Hardware"),
              x("w", "0.000", 10.0, 1, 2, **{"Task Type": "EVENT_WAIT_SQE"})]
    with pytest.raises(InputError, match=r"only wait tasks \(1\)"):
        trace_view.read(write(tmp_path / "t.json", events))


def test_a_block_dim_past_int32_is_clipped(tmp_path):
    events = [meta("process_name", 1, "Ascend Hardware"),
              x("mm", "0.000", 10.0, 1, 2, **{"Task Type": "AI_CORE", "Block Dim": 2**32 - 1,
                                               "Mix Block Dim": -7})]
    tl = trace_view.read(write(tmp_path / "t.json", events))
    assert int(tl.block_dim[0]) == 2**31 - 1 and int(tl.mix_block_dim[0]) == -1


def hccl_stream_events(compute_notify: bool) -> list[dict]:
    """Stream 2 computes; stream 4 runs one collective's small tasks, tied to it only by
    ``connection_id`` (the Level0 shape: no Plane threads)."""
    ev = [meta("process_name", 300, "Ascend Hardware"),
          meta("process_name", 400, "HCCL"),
          meta("thread_name", 400, "Group 0 Communication", 0)]
    ev += [x(f"MatMul_{i}", f"{10 * i}.000", 5.0, 300, 2, **{"Task Type": "AI_CORE",
                                                             "connection_id": 10 + i})
           for i in range(6)]
    if compute_notify:
        ev.append(x("Notify Wait", "70.000", 1.0, 300, 2, **{"Task Type": "Notify Wait"}))
    ev += [x("SDMA", "12.000", 2.0, 300, 4, **{"Task Type": "SDMA", "connection_id": 99}),
           x("Notify Wait", "12.500", 20.0, 300, 4, **{"Task Type": "Notify Wait",
                                                       "connection_id": 99}),
           x("SDMA", "14.000", 2.0, 300, 4, **{"Task Type": "SDMA", "connection_id": 99}),
           x("hcom_allReduce__1_0_1", "12.000", 21.0, 400, 0, connection_id=99)]
    return ev


def test_tasks_tied_to_a_collective_by_connection_id_are_folded(tmp_path):
    tl = trace_view.read(write(tmp_path / "t.json", hccl_stream_events(False)))
    assert "4" not in tl.streams
    assert tl.meta["ascend_hccl_tasks_folded"] == 3
    comm = tl.kind == model.KIND_COMM
    assert [tl.op_name(i) for i in np.flatnonzero(comm)] == ["hcom_allReduce__1_0_1"]


def test_without_the_collective_its_tasks_merge_into_one_op(tmp_path):
    events = [e for e in hccl_stream_events(False) if e["pid"] != 400]
    tl = trace_view.read(write(tmp_path / "t.json", events))
    comm = np.flatnonzero(tl.kind == model.KIND_COMM)
    assert len(comm) == 1 and tl.streams[tl.stream[comm[0]]] == "4"
    assert (tl.start_ns[comm[0]], tl.end_ns[comm[0]]) == (ns("12.000"), ns("32.500"))
    assert tl.meta["ascend_hccl_tasks_merged"] == 2


def test_a_compute_stream_with_an_odd_hccl_task_keeps_its_compute(tmp_path):
    events = [e for e in hccl_stream_events(True) if e["pid"] != 400]
    tl = trace_view.read(write(tmp_path / "t.json", events))
    on2 = tl.stream == tl.streams.index("2")
    assert int((tl.kind[on2] == model.KIND_COMPUTE).sum()) == 6
    assert int((tl.kind[on2] == model.KIND_COMM).sum()) == 1
