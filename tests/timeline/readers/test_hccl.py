"""HCCL task recognition and the merging of a collective's small tasks."""

from __future__ import annotations

import numpy as np
import pytest

from parastream.timeline import model
from parastream.timeline.readers import ascend_csv, hccl
from parastream.timeline.streams import stream_stats


@pytest.mark.parametrize("task_type", ["Notify Wait", "Notify_Wait", "NOTIFY_WAIT_SQE",
                                       "Write Value", "Reduce_Inline", "RDMASend", "HCCL",
                                       "COMMUNICATION"])
def test_hccl_task_types(task_type):
    assert hccl.is_hccl_task_type(task_type)


@pytest.mark.parametrize("task_type", ["SDMA", "SDMA_SQE", "AI_CORE", "MIX_AIV",
                                       "EVENT_WAIT_SQE", "MEMCPY_ASYNC", ""])
def test_shared_task_types_are_not_hccl_by_themselves(task_type):
    assert not hccl.is_hccl_task_type(task_type)


def test_groups_by_key_or_overlap_per_lane():
    lane = np.array([0, 0, 0, 0, 1, 0])
    start = np.array([0, 5, 20, 30, 1, 100])
    end = np.array([10, 6, 25, 31, 2, 101])
    key = np.array([-1, -1, 7, 7, -1, 7])
    g = hccl.collective_groups(lane, start, end, key)
    # 0,1 overlap; 2,3 share a key despite the gap; lane 1 apart; 5 shares a key with 3
    assert g[0] == g[1] and g[2] == g[3] == g[5]
    assert len({g[0], g[2], g[4]}) == 3
    first, s, e, count = hccl.fold_groups(g, start, end)
    assert sorted(zip(s.tolist(), e.tolist(), count.tolist())) == [(0, 10, 2), (1, 2, 1),
                                                                   (20, 101, 3)]


KD_HEADER = ("Step Id,Stream ID,Name,Type,Accelerator Core,Start Time(us),Duration(us),"
             "Block Dim")
BASE = 1736408883700000


def kd(rows: list[tuple]) -> str:
    lines = [KD_HEADER]
    for stream, name, typ, core, start, dur in rows:
        lines.append(f'1,{stream},{name},{typ},{core},"{BASE + start}.000\t",{dur},8')
    return "\n".join(lines) + "\n"


COMPUTE = [("2", f"MatMul_{i}", "MatMulV2", "AI_CORE", 10 * i, 5.0) for i in range(8)]
SMALL = [("4", "Notify Wait", "Notify Wait", "Notify Wait", 12, 20.0),  # spans the rest
         ("4", "SDMA", "SDMA", "SDMA", 13, 2.0),
         ("4", "Write Value", "Write Value", "Write Value", 16, 1.0),
         ("4", "Notify Wait", "Notify Wait", "Notify Wait", 50, 3.0)]


def test_csv_small_tasks_without_whole_collectives_are_merged(tmp_path):
    p = tmp_path / "kernel_details.csv"
    p.write_text(kd(COMPUTE + SMALL))
    tl = ascend_csv.read(p)
    stats = {s.id: s for s in stream_stats(tl)}
    assert stats["2"].role == "main" and stats["4"].role == "comm"
    assert stats["4"].corrupt_overlaps == 0
    comm = np.flatnonzero(tl.kind == model.KIND_COMM)
    assert [(int(tl.start_ns[i] - BASE * 1000), int(tl.end_ns[i] - BASE * 1000))
            for i in comm] == [(12_000, 32_000), (50_000, 53_000)]
    assert tl.op_name(int(comm[0])) == hccl.GROUP_NAME
    assert tl.meta["ascend_hccl_tasks_merged"] == 2


def test_csv_small_tasks_fold_into_whole_collectives(tmp_path):
    whole = [("N/A", "hcom_allReduce__1_0_1", "hcom_allReduce_", "HCCL", 11, 45.0)]
    p = tmp_path / "kernel_details.csv"
    p.write_text(kd(COMPUTE + SMALL + whole))
    tl = ascend_csv.read(p)
    assert "4" not in [tl.streams[s] for s in tl.stream]
    comm = tl.kind == model.KIND_COMM
    assert [tl.streams[s] for s in tl.stream[comm]] == [model.COMM_LANE]
    assert tl.meta["ascend_hccl_tasks_folded"] == 4


def test_csv_compute_stream_with_an_odd_hccl_task_stays_compute(tmp_path):
    p = tmp_path / "kernel_details.csv"
    p.write_text(kd(COMPUTE + [("2", "Notify Wait", "Notify Wait", "Notify Wait", 200, 1.0)]))
    tl = ascend_csv.read(p)
    assert int((tl.kind == model.KIND_COMM).sum()) == 1
    assert int((tl.kind == model.KIND_COMPUTE).sum()) == len(COMPUTE)
