"""communication.json, communication_matrix.json and analysis.db's CommAnalyzer tables of
real Ascend captures (MindStudio Insight and msprof-analyze test data, see
tests/data/README.md): each rank's own measure of its HCCL ops and its communication
matrix."""

from __future__ import annotations

import json
import pathlib

import pytest

from parastream.errors import InputError
from parastream.timeline.readers import ascend_comm
from parastream.timeline.readers.directory import read_dir

DATA = pathlib.Path(__file__).resolve().parents[2] / "data" / "ascend"
TWO_RANKS = DATA / "msinsight_level1_text_2rank"
CLUSTER = DATA / "msprof_analyze_cluster" / "cluster_communication.json"
DB_CAPTURE = DATA / "msinsight_level1_db" / "rank0_ascend_pt"


def out(rank: int) -> pathlib.Path:
    return TWO_RANKS / f"rank{rank}_ascend_pt" / "ASCEND_PROFILER_OUTPUT"


def test_communication_json_ops_exact():
    ops = ascend_comm.read_communication(out(0) / "communication.json")
    assert [o.key for o in ops] == [f"hcom_allReduce__586_{i}_1" for i in range(4)]
    first = ops[0]
    assert first.group == "17522688603477080586"
    assert (first.kind, first.step, first.rank) == ("collective", "step50", -1)
    assert first.start_ns == 1736408883732241500  # "1736408883732241.5", not via a float
    assert first.elapse_ns == 79089520
    assert first.wait_ns == 5646633 and first.sync_ns == 5615692
    assert first.transit_ns == 239185 and first.idle_ns == 73203703


def test_cluster_communication_json_has_each_ranks_record():
    """msprof-analyze's merged file: the same op key on both ranks; rank 1 came 99 ms
    late, and rank 0's own wait says so."""
    ops = ascend_comm.read_communication(CLUSTER)
    assert [(o.key, o.rank) for o in ops] == [("hcom_broadcast__501_0", 0),
                                              ("hcom_broadcast__501_0", 1),
                                              ("hcom_broadcast__501_1", 0),
                                              ("hcom_broadcast__501_1", 1)]
    assert {o.group for o in ops} == {"6297232067196334501"}
    r0, r1 = ops[0], ops[1]
    assert r1.start_ns - r0.start_ns == 99117200
    assert r0.wait_ns > r1.start_ns - r0.start_ns > 1000 * r1.wait_ns


def test_matrix_json_rows():
    rows = ascend_comm.read_matrix(out(0) / "communication_matrix.json")
    assert len(rows) == 48
    assert {r.src for r in rows} == {0} and {r.dst for r in rows} == set(range(8))
    assert {r.op for r in rows} == {"allreduce-top1", "allreduce-middle", "allreduce-bottom1",
                                    "allreduce-bottom2", "allreduce-bottom3", "allreduce-total"}
    top = next(r for r in rows if r.op == "allreduce-top1" and r.dst == 1)
    assert (top.transport, top.bytes, top.time_ns) == ("HCCS", 37781504, 2153383)
    assert top.bandwidth_gbps == pytest.approx(17.5452)
    assert top.op_name == "hcom_allReduce__586_2_1" and top.group == "17522688603477080586"
    total = next(r for r in rows if r.op == "allreduce-total" and r.dst == 0)
    assert total.op_name == "" and total.transport == "LOCAL"
    # bandwidth is bytes over time, as recorded
    for r in rows:
        if r.time_ns > 0:
            assert r.bytes / r.time_ns == pytest.approx(r.bandwidth_gbps, rel=1e-3)


def test_matrix_of_each_rank_starts_at_that_rank():
    for rank in (0, 1):
        rows = ascend_comm.read_comm_matrix(out(rank).parent)
        assert {r.src for r in rows} == {rank}


def test_analysis_db_tables():
    rows = ascend_comm.read_comm_matrix(DB_CAPTURE)
    assert len(rows) == 48 and {r.src for r in rows} == {0}
    first = rows[0]
    assert (first.op, first.dst, first.transport, first.bytes) == ("allreduce-top1", 0,
                                                                   "LOCAL", 4128776)
    assert first.op_name == "hcom_allReduce__210_0_1"
    ops = ascend_comm.read_comm_ops(DB_CAPTURE)
    assert [o.key for o in ops] == [f"hcom_allReduce__210_{i}_1" for i in range(4)]
    assert ops[0].wait_ns == 3568891 and ops[0].group == "17148521525495523210"


def test_directory_attaches_matrix_and_waits():
    (tl,) = read_dir(DB_CAPTURE)
    assert len(tl.meta["comm_matrix"]) == 48
    assert set(tl.meta["comm_matrix"][0]) == set(ascend_comm.MatrixRow._fields)
    assert tl.meta["hccl_wait_ns"]["hcom_allReduce__210_0_1"] == 3568891
    # the database names the group by its communicator, analysis.db by its hash: kept
    assert tl.collectives.group[0].startswith("90.91.105.46%")


def test_capture_without_communication_files_has_no_keys():
    (tl,) = read_dir(DATA / "msinsight_level1_text" / "rank0_ascend_pt")
    assert "comm_matrix" not in tl.meta and "hccl_wait_ns" not in tl.meta
    assert tl.collectives.group.tolist() == ["586"] * 4


def test_broken_communication_json_is_a_warning_not_a_failure(tmp_path):
    import shutil

    cap = tmp_path / "rank0_ascend_pt"
    shutil.copytree(TWO_RANKS / "rank0_ascend_pt", cap)
    (cap / "ASCEND_PROFILER_OUTPUT" / "communication.json").write_text("{not json")
    with pytest.raises(InputError, match="communication.json"):
        ascend_comm.read_communication(cap / "ASCEND_PROFILER_OUTPUT" / "communication.json")
    (tl,) = read_dir(cap)
    assert any("communication.json" in w and "not valid JSON" in w for w in tl.warnings)
    assert "hccl_wait_ns" not in tl.meta and len(tl.meta["comm_matrix"]) == 48


def test_cluster_file_records_are_filtered_by_rank(tmp_path):
    """A capture folder holding a cluster file takes its own rank's waits only."""
    import shutil

    cap = tmp_path / "rank1_ascend_pt"
    shutil.copytree(TWO_RANKS / "rank1_ascend_pt", cap)
    (cap / "ASCEND_PROFILER_OUTPUT" / "communication.json").unlink()
    shutil.copy(CLUSTER, cap / "ASCEND_PROFILER_OUTPUT" / "cluster_communication.json")
    (tl,) = read_dir(cap)
    assert tl.meta["rank"] == 1
    assert tl.meta["hccl_wait_ns"] == {"hcom_broadcast__501_0": 150,
                                       "hcom_broadcast__501_1": 200}


def test_p2p_and_odd_records(tmp_path):
    doc = {"step3": {"p2p": {"hcom_send__123_4_1@999123": {
        "Communication Time Info": {"Start Timestamp(us)": 10.25, "Elapse Time(ms)": "x",
                                    "Wait Time(ms)": 0.5},
        "Communication Bandwidth Info": {}}},
        "collective": {"Total Op Info": {"Communication Time Info": {"Wait Time(ms)": 1}}}}}
    p = tmp_path / "communication.json"
    p.write_text(json.dumps(doc))
    (op,) = ascend_comm.read_communication(p)
    assert (op.key, op.group, op.kind, op.step) == ("hcom_send__123_4_1", "999123", "p2p",
                                                    "step3")
    assert (op.start_ns, op.elapse_ns, op.wait_ns, op.idle_ns) == (10250, -1, 500000, -1)
    m = {"step3": {"p2p": {"send@g": {"0-1": {"Transport Type": "RDMA",
                                              "Transit Size(MB)": 2, "Transit Time(ms)": 1,
                                              "Bandwidth(GB/s)": 2.0}},
                           "odd@g": {"total": {"Transport Type": "RDMA"}}}}}
    q = tmp_path / "communication_matrix.json"
    q.write_text(json.dumps(m))
    (row,) = ascend_comm.read_matrix(q)
    assert (row.op, row.src, row.dst, row.bytes, row.time_ns) == ("send", 0, 1, 2000000,
                                                                  1000000)


FOUR_RANKS = DATA / "msinsight_st_level2_4rank"


def four_rank_ops() -> dict[int, dict]:
    return {r: {o.key: o for o in ascend_comm.read_comm_ops(FOUR_RANKS / f"rank_{r}_ascend_pt")}
            for r in range(4)}


def test_four_ranks_share_their_groups_collectives():
    """A 2-D layout: the all-reduces of group ...612 on all four ranks, the pipeline's
    send/receive pairs (0, 2) and (1, 3) as p2p, other groups on pairs of ranks."""
    ops = four_rank_ops()
    assert [len(ops[r]) for r in range(4)] == [15, 15, 23, 23]
    key = "hcom_allReduce__612_4_1"
    assert all(key in ops[r] for r in range(4))
    assert len({ops[r][key].group for r in range(4)}) == 1
    assert ops[0]["hcom_batchSendRecv__128_3_1"].kind == "p2p"
    assert "hcom_batchSendRecv__128_3_1" in ops[2]
    assert "hcom_batchSendRecv__128_3_1" not in ops[1]
    assert "hcom_batchSendRecv__764_3_1" in ops[1] and "hcom_batchSendRecv__764_3_1" in ops[3]


def test_four_ranks_each_waited_for_the_last_arrival():
    """Per all-reduce of the four-rank group, each rank's own recorded wait is close to
    the time from its arrival to the last rank's, and the last rank waited least."""
    ops = four_rank_ops()
    for key in ("hcom_allReduce__612_4_1", "hcom_allReduce__612_5_1",
                "hcom_allReduce__612_6_1"):
        start = {r: ops[r][key].start_ns for r in range(4)}
        last = max(start, key=start.get)
        assert last == 3
        for r in range(4):
            assert abs(ops[r][key].wait_ns - (start[last] - start[r])) < 150_000, (key, r)
        assert ops[last][key].wait_ns == min(ops[r][key].wait_ns for r in range(4))


def test_four_ranks_matrices():
    """Links are written with ranks within the op's group: rank 2's send/receive with
    rank 0 (a two-rank group) is the link 0-1 of rank 0's matrix."""
    for r in range(4):
        rows = ascend_comm.read_comm_matrix(FOUR_RANKS / f"rank_{r}_ascend_pt")
        assert rows and {x.src for x in rows} | {x.dst for x in rows} <= set(range(4))
        assert all(x.bytes >= 0 and x.time_ns >= 0 for x in rows)
        assert {x.transport for x in rows} <= {"HCCS", "LOCAL", "SIO", "PCIE", "RDMA", "SDMA"}
    rows = ascend_comm.read_comm_matrix(FOUR_RANKS / "rank_0_ascend_pt")
    p2p = {(x.src, x.dst) for x in rows if x.op_name == "hcom_batchSendRecv__128_4_1"}
    assert p2p == {(0, 0), (0, 1)}


def test_group_ranks_come_from_parallel_group_info(tmp_path):
    """profiler_metadata.json's parallel_group_info (the spelling torch_npu writes: group
    name -> group_name, group_rank, global_ranks) gives each collective group its global
    ranks; a group known only by an op name's field takes the hash ending with it."""
    import json

    from parastream.timeline.collectives import make_collectives
    from parastream.timeline.readers.ascend_comm import read_group_ranks, with_group_ranks

    (tmp_path / "profiler_metadata.json").write_text(json.dumps({"ENV_VARIABLES": {},
        "parallel_group_info": {
            "17522688603477080586": {"group_name": "dp", "group_rank": 1,
                                     "global_ranks": [0, 2, 4, 6]},
            "9123": {"group_name": "tp", "group_rank": 0, "global_ranks": [2, 3]},
            "odd": {"group_name": "x", "global_ranks": "0-3"}}}))
    members = read_group_ranks(tmp_path)
    assert members == {"17522688603477080586": (0, 2, 4, 6), "9123": (2, 3)}
    coll = make_collectives(["hcom_allReduce__586_0_1", "hcom_send__123_0_1", "x"],
                            ["586", "9123", ""], [0, 5, 9], [1, 6, 10])
    assert with_group_ranks(coll, members).group_ranks == {"586": (0, 2, 4, 6), "9123": (2, 3)}
    assert read_group_ranks(tmp_path / "nowhere") == {}
