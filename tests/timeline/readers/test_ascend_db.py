"""Ascend profiler sqlite databases (ascend_pytorch_profiler_*.db, msprof_*.db)."""

from __future__ import annotations

import os
import pathlib
import sqlite3
import stat

import pytest

from parastream.errors import InputError
from parastream.timeline import model
from parastream.timeline.readers import ascend_db

T0 = 1736413971550000000  # epoch ns

# column lists as the msprof DB reference documents them
TASK_COLS = ("startNs INTEGER, endNs INTEGER, deviceId INTEGER, connectionId INTEGER, "
             "globalTaskId INTEGER, globalPid INTEGER, taskType INTEGER, contextId INTEGER, "
             "streamId INTEGER, taskId INTEGER, modelId INTEGER")
CTI_COLS = ("name INTEGER, globalTaskId INTEGER PRIMARY KEY, {block} INTEGER, {mix} INTEGER, "
            "taskType INTEGER, opType INTEGER, inputFormats INTEGER, inputDataTypes INTEGER, "
            "inputShapes INTEGER, outputFormats INTEGER, outputDataTypes INTEGER, "
            "outputShapes INTEGER, attrInfo INTEGER, opState INTEGER, hf32Eligible INTEGER")
COMM_TASK_COLS = ("name INTEGER, globalTaskId INTEGER, taskType INTEGER, planeId INTEGER, "
                  "groupName INTEGER, notifyId INTEGER, rdmaType INTEGER, srcRank INTEGER, "
                  "dstRank INTEGER, transportType INTEGER, size INTEGER, dataType INTEGER, "
                  "linkType INTEGER, opId INTEGER, isMaster INTEGER, bandwidth NUMERIC")
COMM_OP_COLS = ("opName INTEGER, startNs INTEGER, endNs INTEGER, connectionId INTEGER, "
                "groupName INTEGER, opId INTEGER PRIMARY KEY, relay INTEGER, retry INTEGER, "
                "dataType INTEGER, algType INTEGER, count NUMERIC, opType INTEGER")


class Db:
    """Builds a small profiler database the way msprof lays it out."""

    def __init__(self, path: pathlib.Path, block: str = "blockNum", mix: str = "mixBlockNum",
                 comm: bool = True) -> None:
        self.path = path
        self.con = sqlite3.connect(path)
        self.strings: dict[str, int] = {}
        self.gid = 0
        c = self.con
        c.execute("CREATE TABLE STRING_IDS (id INTEGER PRIMARY KEY, value TEXT)")
        c.execute(f"CREATE TABLE TASK ({TASK_COLS})")
        c.execute(f"CREATE TABLE COMPUTE_TASK_INFO ({CTI_COLS.format(block=block, mix=mix)})")
        if comm:
            c.execute(f"CREATE TABLE COMMUNICATION_TASK_INFO ({COMM_TASK_COLS})")
            c.execute(f"CREATE TABLE COMMUNICATION_OP ({COMM_OP_COLS})")

    def sid(self, text: str) -> int:
        return self.strings.setdefault(text, len(self.strings) + 100)

    def task(self, start_us: float, dur_us: float, stream: int, task_type: str,
             device: int = 0) -> int:
        self.gid += 1
        s = T0 + round(start_us * 1000)
        self.con.execute("INSERT INTO TASK VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                         (s, s + round(dur_us * 1000), device, self.gid, self.gid, 4242,
                          self.sid(task_type), 4294967295, stream, self.gid, 4294967295))
        return self.gid

    def op(self, name: str, op_type: str, core: str, start_us: float, dur_us: float,
           stream: int, block: int = 8, mix: int = 0, shapes: str = "1,8", device: int = 0):
        gid = self.task(start_us, dur_us, stream, core, device)
        self.con.execute("INSERT INTO COMPUTE_TASK_INFO VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                         (self.sid(name), gid, block, mix, self.sid(core), self.sid(op_type),
                          0, 0, self.sid(shapes), 0, 0, 0, 0, 0, 0))
        return gid

    def comm_task(self, op_id: int, name: str, small: str, start_us, dur_us, stream, device=0):
        gid = self.task(start_us, dur_us, stream, "SDMA_SQE" if small == "Memcpy" else
                        "NOTIFY_WAIT_SQE", device)
        self.con.execute("INSERT INTO COMMUNICATION_TASK_INFO (name, globalTaskId, taskType, "
                         "opId) VALUES (?,?,?,?)", (self.sid(name), gid, self.sid(small), op_id))

    def comm_op(self, op_id: int, name: str, op_type: str, start_us: float, dur_us: float):
        s = T0 + round(start_us * 1000)
        self.con.execute("INSERT INTO COMMUNICATION_OP (opName, startNs, endNs, opId, opType) "
                         "VALUES (?,?,?,?,?)",
                         (self.sid(name), s, s + round(dur_us * 1000), op_id, self.sid(op_type)))

    def close(self) -> pathlib.Path:
        self.con.executemany("INSERT INTO STRING_IDS VALUES (?,?)",
                             [(i, s) for s, i in self.strings.items()])
        self.con.commit()
        self.con.close()
        return self.path


def sample(path: pathlib.Path, **kw) -> Db:
    db = Db(path, **kw)
    db.op("aclnnMatmul_MatMulV2", "MatMulV2", "AI_CORE", 10.0, 30.5, 2, block=24,
          shapes="8192,4096;4096,512")
    db.op("aclnnAdd_AddAiCore_Add", "Add", "AI_VECTOR_CORE", 41.0, 3.25, 2, block=40)
    db.op("aclnnFlashAttentionScore", "FlashAttentionScore", "MIX_AIC", 12.0, 20.0, 7,
          block=20, mix=40)
    db.task(33.0, 7.5, 7, "EVENT_WAIT_SQE")
    db.task(40.0, 0.02, 2, "EVENT_RECORD_SQE")
    db.task(50.0, 1.0, 7, "SDMA_SQE")
    return db


def test_ops_waits_and_strings(tmp_path):
    path = sample(tmp_path / "ascend_pytorch_profiler_0.db").close()
    assert ascend_db.sniff(path.read_bytes()[:65536])
    tl = ascend_db.read(path)
    assert tl.format == ascend_db.FORMAT
    names = [tl.op_name(i) for i in range(len(tl))]
    assert names == ["aclnnMatmul_MatMulV2", "aclnnFlashAttentionScore",
                     "aclnnAdd_AddAiCore_Add", "SDMA_SQE"]
    assert [tl.streams[s] for s in tl.stream] == ["2", "7", "2", "7"]
    assert tl.start_ns[0] == T0 + 10000 and tl.dur_ns[0] == 30500
    assert [tl.types[t] for t in tl.type] == ["MatMulV2", "FlashAttentionScore", "Add",
                                              "SDMA_SQE"]
    assert tl.block_dim.tolist() == [24, 20, 40, -1]
    assert tl.mix_block_dim.tolist() == [0, 40, 0, -1]
    assert [model.CORES[c] for c in tl.core] == ["AI_CORE", "MIX_AIC", "AI_VECTOR_CORE", "DMA"]
    assert tl.kind.tolist() == [model.KIND_COMPUTE] * 3 + [model.KIND_MEMCPY]
    assert tl.shapes[0] == "8192,4096;4096,512"
    # EVENT_WAIT is a wait on stream 7; EVENT_RECORD is not an op
    assert tl.n_waits == 1 and tl.streams[tl.wait_stream[0]] == "7"
    assert (tl.wait_start_ns[0], tl.wait_end_ns[0]) == (T0 + 33000, T0 + 40500)
    assert tl.names[tl.wait_name[0]] == "EVENT_WAIT_SQE"
    assert "EVENT_RECORD_SQE" not in names
    assert tl.meta["device_id"] == 0 and tl.warnings == []
    # only lanes and texts that something uses
    assert sorted(tl.streams) == ["2", "7"]
    assert sorted(tl.names) == sorted(names + ["EVENT_WAIT_SQE"])


def test_block_dim_spelling_and_no_comm_tables(tmp_path):
    path = sample(tmp_path / "msprof_1.db", block="blockDim", mix="mixBlockDim",
                  comm=False).close()
    tl = ascend_db.read(path)
    assert tl.block_dim.tolist() == [24, 20, 40, -1]
    assert tl.mix_block_dim.tolist() == [0, 40, 0, -1]


def test_whole_collectives_go_to_the_comm_lane(tmp_path):
    db = sample(tmp_path / "a.db")
    db.comm_op(1, "hcom_allReduce__123_0_1", "hcom_allReduce_", 60.0, 10.0)
    db.comm_task(1, "hcom_allReduce__123_0_1", "Notify_Wait", 60.5, 2.0, 9)
    db.comm_task(1, "hcom_allReduce__123_0_1", "Memcpy", 63.0, 5.0, 9)
    tl = ascend_db.read(db.close())
    comm = tl.kind == model.KIND_COMM
    assert [tl.streams[s] for s in tl.stream[comm]] == [model.COMM_LANE]
    i = int(comm.argmax())
    assert tl.op_name(i) == "hcom_allReduce__123_0_1"
    assert tl.types[tl.type[i]] == "hcom_allReduce_"
    assert (tl.start_ns[i], tl.end_ns[i]) == (T0 + 60000, T0 + 70000)
    assert model.CORES[tl.core[i]] == "HCCL"
    assert "9" not in tl.streams  # the small tasks are folded into the whole op
    assert tl.meta["ascend_hccl_tasks_folded"] == 2


def test_without_comm_op_table_the_small_tasks_stay_on_their_stream(tmp_path):
    db = sample(tmp_path / "a.db")
    db.con.execute("DROP TABLE COMMUNICATION_OP")
    db.comm_task(1, "hcom_allReduce__123_0_1", "Memcpy", 63.0, 5.0, 9)
    tl = ascend_db.read(db.close())
    comm = tl.kind == model.KIND_COMM
    assert [tl.streams[s] for s in tl.stream[comm]] == ["9"]
    assert [tl.types[t] for t in tl.type[comm]] == ["Memcpy"]


def test_several_devices_and_steps(tmp_path):
    db = sample(tmp_path / "a.db")
    db.op("other_device_op", "Add", "AI_CORE", 11.0, 1.0, 2, device=1)
    db.con.execute("CREATE TABLE STEP_TIME (id INTEGER, startNs INTEGER, endNs INTEGER)")
    db.con.execute("INSERT INTO STEP_TIME VALUES (5, ?, ?)", (T0, T0 + 20000))
    db.con.execute("INSERT INTO STEP_TIME VALUES (6, ?, ?)", (T0 + 20000, T0 + 60000))
    db.con.execute("CREATE TABLE NPU_INFO (id INTEGER, name TEXT)")
    db.con.execute("INSERT INTO NPU_INFO VALUES (0, 'Ascend910B3')")
    tl = ascend_db.read(db.close())
    assert "other_device_op" not in [tl.op_name(i) for i in range(len(tl))]
    assert any("kept device 0" in w and "1 (1 tasks)" in w for w in tl.warnings)
    assert tl.step.tolist() == [5, 5, 6, 6]
    assert tl.device.name == "Ascend910B3"


def test_no_task_table(tmp_path):
    path = tmp_path / "other.db"
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE foo (a INTEGER)")
    con.commit()
    con.close()
    assert ascend_db.sniff(path.read_bytes())
    with pytest.raises(InputError, match="sqlite database without a TASK table"):
        ascend_db.read(path)
    assert not ascend_db.has_task_table(str(path))


def test_no_usable_rows(tmp_path):
    db = Db(tmp_path / "a.db")
    db.task(1.0, 1.0, 2, "EVENT_RECORD_SQE")
    with pytest.raises(InputError, match="no usable rows"):
        ascend_db.read(db.close())
    waits = Db(tmp_path / "w.db")  # waits alone: nothing to overlap (was a "0 ops" capture)
    waits.task(1.0, 5.0, 2, "EVENT_WAIT_SQE")
    waits.task(9.0, 5.0, 7, "EVENT_WAIT_SQE")
    with pytest.raises(InputError, match=r"2 wait\(s\) alone"):
        ascend_db.read(waits.close())
    empty = Db(tmp_path / "b.db").close()
    with pytest.raises(InputError, match="TASK table is empty"):
        ascend_db.read(empty)


def test_opened_read_only(tmp_path):
    path = sample(tmp_path / "a.db").close()
    before = path.read_bytes()
    os.chmod(path, stat.S_IRUSR)
    try:
        tl = ascend_db.read(path)
    finally:
        os.chmod(path, stat.S_IRUSR | stat.S_IWUSR)
    assert len(tl) == 4
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.db"]  # no journal left behind


def test_not_a_database(tmp_path):
    path = tmp_path / "x.db"
    path.write_bytes(b"SQLite format 3\x00" + b"\x00" * 10)
    with pytest.raises(InputError):
        ascend_db.read(path)


def test_sniff():
    assert ascend_db.sniff(b"SQLite format 3\x00....CREATE TABLE TASK(")
    assert not ascend_db.sniff(b"Name,Start Time(us)\n")
    # an Nsight Systems export is left to its own reader
    assert not ascend_db.sniff(b"SQLite format 3\x00....CUPTI_ACTIVITY_KIND_KERNEL")


def test_text_columns_instead_of_string_ids(tmp_path):
    # tolerate exports that store the strings themselves (and no STRING_IDS table)
    path = tmp_path / "t.db"
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE TASK (startNs INTEGER, endNs INTEGER, deviceId INTEGER, "
                "globalTaskId INTEGER, taskType TEXT, streamId INTEGER)")
    con.execute("CREATE TABLE COMPUTE_TASK_INFO (name TEXT, globalTaskId INTEGER, "
                "blockDim INTEGER, taskType TEXT, opType TEXT)")
    con.executemany("INSERT INTO TASK VALUES (?,?,?,?,?,?)",
                    [(T0, T0 + 100, 0, 1, "AI_CORE", 4), (T0 + 200, T0 + 300, 0, 2,
                                                          "EVENT_WAIT_SQE", 5)])
    con.execute("INSERT INTO COMPUTE_TASK_INFO VALUES ('mm', 1, 8, 'AI_CORE', 'MatMul')")
    con.commit()
    con.close()
    tl = ascend_db.read(path)
    assert [tl.op_name(0), tl.types[tl.type[0]], tl.streams[tl.stream[0]]] == ["mm", "MatMul", "4"]
    assert tl.block_dim.tolist() == [8] and tl.mix_block_dim.tolist() == [-1]
    assert tl.n_waits == 1 and tl.streams[tl.wait_stream[0]] == "5"


def test_a_wal_mode_database_is_read_without_files_beside_it(tmp_path):
    # torch_npu wrote this real capture's database in WAL journal mode
    real = (pathlib.Path(__file__).resolve().parents[2] / "data" / "ascend" /
            "msinsight_level1_db" / "rank0_ascend_pt" / "ASCEND_PROFILER_OUTPUT" /
            "ascend_pytorch_profiler_0.db")
    path = tmp_path / real.name
    path.write_bytes(real.read_bytes())
    assert path.read_bytes()[18:20] == b"\x02\x02"  # WAL read and write versions
    tl = ascend_db.read(path)
    assert len(tl)
    assert sorted(p.name for p in tmp_path.iterdir()) == [real.name]
