"""Kineto reader: the collective calls of a trace (``Timeline.collectives``), one per
NCCL kernel of the analysed device, with the arguments PyTorch records for it on the
kernel (newer PyTorch) or on the record_param_comms host op with its External id."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np

from parastream.timeline.collectives import normalize_op
from parastream.timeline.readers import kineto

DATA = Path(__file__).resolve().parents[2] / "data" / "kineto"
INDUCTOR = DATA / "inductor_rank0.json.gz"  # real: a compiled model's rank 0 (NCCL send/recv)
TWO_STREAMS = DATA / "synthetic_comm_two_streams.json.gz"


def load(path: Path) -> dict:
    return json.loads(gzip.decompress(path.read_bytes()))


def nccl_kernels(doc: dict) -> list[dict]:
    ks = [e for e in doc["traceEvents"]
          if e.get("cat") == "kernel" and kineto.COMM_NAME.search(e["name"])]
    return sorted(ks, key=lambda e: (e["ts"], e["ts"] + e["dur"]))


def test_a_real_trace_gives_one_call_per_nccl_kernel():
    """inductor_rank0 (PyTorch 2.0, no collective arguments recorded): 80 NCCL SendRecv
    kernels, each a sendrecv call in start order, with nothing else known."""
    tl = kineto.read(str(INDUCTOR))
    calls = tl.collectives
    ks = nccl_kernels(load(INDUCTOR))
    assert len(calls) == len(ks) == 80
    assert set(calls.op) == {"sendrecv"}
    assert np.array_equal(calls.start_ns, [round(k["ts"] * 1000) for k in ks])
    assert np.array_equal(calls.end_ns - calls.start_ns, [round(k["dur"] * 1000) for k in ks])
    assert set(calls.group) == {""} and set(calls.seq) == {-1} and set(calls.nbytes) == {-1}
    assert not calls.group_ranks


def test_arguments_come_from_the_record_param_comms_op_of_the_kernel():
    """Traces whose kernels carry only an External id: the collective's name and group
    are those of the record_param_comms op with that id."""
    doc = load(TWO_STREAMS)
    by_ext = {e["args"]["External id"]: e["args"] for e in doc["traceEvents"]
              if e.get("name") == "record_param_comms"}
    ks = nccl_kernels(doc)
    calls = kineto.read(str(TWO_STREAMS)).collectives
    assert len(calls) == len(ks) > 10
    want = [normalize_op(by_ext[k["args"]["External id"]]["Collective name"]) for k in ks]
    assert list(calls.op) == want
    assert {"reducescatter", "allgather", "send"} <= set(want)
    assert set(calls.group) == {"0"}


def kernel(ts: float, name: str, corr: int, **args) -> dict:
    return {"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": 7, "ts": ts, "dur": 5,
            "args": {"stream": 7, "device": 0, "correlation": corr, **args}}


def test_arguments_on_the_kernel(tmp_path, capsys):
    """A trace with known arguments: size from elements times the dtype's bytes, group
    ranks from their text (not when cut short), Seq, the peer of a send and a recv, the
    record_param_comms op's arguments for a kernel without them; compute kernels are no
    calls; an argument of an unexpected type is dropped with a warning."""
    ranks = "[0, 1, 2, 3]"
    events = [
        kernel(100, "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*)", 1,
               **{"Collective name": "allreduce", "In msg nelems": 1024,
                  "Out msg nelems": 1024, "dtype": "Float", "Process Group Name": "3",
                  "Process Group Ranks": ranks, "Seq": 7}),
        kernel(110, "sm80_gemm", 2),
        kernel(120, "ncclDevKernel_AllGather_RING_LL(ncclDevComm*)", 3,
               **{"Collective name": "_allgather_base", "In msg nelems": 10,
                  "Out msg nelems": 40, "dtype": "BFloat16", "Process Group Name": "5",
                  "Process Group Ranks": "[0, 1, 2, ..., 63]", "seq": "8"}),
        kernel(130, "ncclDevKernel_SendRecv(ncclDevComm*)", 4,
               **{"Collective name": "send", "Dst Rank": 2, "Src Rank": 0, "Seq": [1],
                  "In msg nelems": 6, "dtype": "Half", "Process Group Name": 0}),
        kernel(140, "ncclDevKernel_SendRecv(ncclDevComm*)", 5,
               **{"Collective name": "recv", "Dst Rank": 0, "Src Rank": 2}),
        {"ph": "X", "cat": "cpu_op", "name": "record_param_comms", "pid": 1, "tid": 1,
         "ts": 145, "dur": 1, "args": {"External id": 99, "Collective name": "broadcast",
                                      "Process Group Name": "3", "Seq": 9}},
        kernel(150, "ncclDevKernel_Broadcast_RING_LL(ncclDevComm*)", 6, **{"External id": 99}),
    ]
    f = tmp_path / "t.json"
    f.write_text(json.dumps({"traceEvents": events}))
    tl = kineto.read(str(f))
    c = tl.collectives
    assert list(c.op) == ["allreduce", "allgather", "send", "recv", "broadcast"]
    assert list(c.group) == ["3", "5", "0", "", "3"]
    assert list(c.seq) == [7, 8, -1, -1, 9]
    assert list(c.nbytes) == [4096, 80, 12, -1, -1]
    assert list(c.peer) == [-1, -1, 2, 2, -1]
    assert c.group_ranks == {"3": [0, 1, 2, 3]}
    assert list(c.start_ns) == [100_000, 120_000, 130_000, 140_000, 150_000]
    assert "ignored args.Seq of 1 trace event(s) (a list where an integer or text was " \
           "expected)" in tl.warnings


def test_a_trace_without_nccl_kernels_has_an_empty_table():
    tl = kineto.read(str(DATA / "simple_add.json.gz"))
    assert tl.collectives is not None and len(tl.collectives) == 0
