"""Communication on real torch_npu captures (profiler levels Level0, Level1, Level2; text
and database exports; MindStudio Insight test data, see tests/data/README.md).

HCCL's small tasks (Notify Wait, Write Value, SDMA, ...) on the communication stream must
be read as communication, so the main stream is a compute stream and the text and
database exports of the same kind of run agree on comm/comp overlap.
"""

from __future__ import annotations

import csv
import gzip
import json
import pathlib
import shutil
import sqlite3

import pytest

from parastream.timeline.comm import comm_comp_overlap_pct
from parastream.timeline.model import KIND_COMM, KIND_COMPUTE
from parastream.timeline.readers import ascend_csv, ascend_db, trace_view
from parastream.timeline.readers.directory import read_dir
from parastream.timeline.streams import stream_stats

DATA = pathlib.Path(__file__).resolve().parents[2] / "data" / "ascend"
LEVELS = (0, 1, 2)
EXPORTS = ("text", "db")


def capture(level: int, export: str) -> pathlib.Path:
    return DATA / f"msinsight_level{level}_{export}" / "rank0_ascend_pt"


def output(level: int, export: str) -> pathlib.Path:
    return capture(level, export) / "ASCEND_PROFILER_OUTPUT"


def read_one(path: pathlib.Path):
    (tl,) = read_dir(path)
    return tl


def check_roles(tl) -> None:
    """The main stream computes, communication has a comm stream, nothing is corrupt."""
    stats = stream_stats(tl)
    main = next(s for s in stats if s.role == "main")
    main_kinds = tl.kind[tl.stream_ops(main.code)]
    assert (main_kinds != KIND_COMM).all()
    assert (main_kinds == KIND_COMPUTE).any()
    comm = [s for s in stats if s.role == "comm"]
    assert comm, "no communication stream"
    assert (tl.kind == KIND_COMM).any()
    # every communication op is on a comm stream, and no stream holds overlapping ops
    comm_codes = {s.code for s in comm}
    assert set(tl.stream[tl.kind == KIND_COMM].tolist()) <= comm_codes
    assert [s.corrupt_overlaps for s in stats] == [0] * len(stats)


@pytest.mark.parametrize("export", EXPORTS)
@pytest.mark.parametrize("level", LEVELS)
def test_main_stream_is_compute_and_hccl_is_comm(level, export):
    check_roles(read_one(capture(level, export)))


@pytest.mark.parametrize("level", LEVELS)
def test_trace_view_alone_gives_the_same_roles(level):
    check_roles(trace_view.read(output(level, "text") / "trace_view.json.gz"))


@pytest.mark.parametrize("level", LEVELS)
def test_text_and_db_exports_agree_on_comm_comp_overlap(level):
    text = comm_comp_overlap_pct(read_one(capture(level, "text")))
    db = comm_comp_overlap_pct(read_one(capture(level, "db")))
    assert text is not None and db is not None
    assert abs(text - db) <= 1.0, (text, db)


@pytest.mark.parametrize("level", (1, 2))  # Level0's kernel_details.csv has no Stream ID
def test_kernel_details_and_trace_view_of_one_run_agree(level):
    kd = ascend_csv.read(output(level, "text") / "kernel_details.csv")
    tv = trace_view.read(output(level, "text") / "trace_view.json.gz")
    a, b = comm_comp_overlap_pct(kd), comm_comp_overlap_pct(tv)
    assert abs(a - b) <= 1.0, (a, b)
    # both hold the same collectives (the CSV rounds each duration to the nanosecond)
    comm_ns = [int((t.dur_ns[t.kind == KIND_COMM]).sum()) for t in (kd, tv)]
    assert abs(comm_ns[0] - comm_ns[1]) <= int((kd.kind == KIND_COMM).sum())


def test_level0_directory_reads_trace_view_and_says_why():
    tl = read_one(capture(0, "text"))
    assert tl.format == trace_view.FORMAT
    skipped = [w for w in tl.warnings if "kernel_details.csv" in w]
    assert skipped and "Stream ID" in skipped[0] and "Level0" in skipped[0]


def ascend_figures(level: int, export: str) -> tuple[float, float]:
    """(Overlapped, Communication) summed over the steps, read here independently."""
    if export == "text":
        with open(output(level, export) / "step_trace_time.csv", newline="") as f:
            rows = list(csv.DictReader(f))
        return (sum(float(r["Overlapped"]) for r in rows),
                sum(float(r["Communication"]) for r in rows))
    con = sqlite3.connect(output(level, export) / "analysis.db")
    try:
        return con.execute("SELECT SUM(overlapped), SUM(communication) "
                           "FROM StepTraceTime").fetchone()
    finally:
        con.close()


@pytest.mark.parametrize("export", EXPORTS)
@pytest.mark.parametrize("level", LEVELS)
def test_comm_comp_overlap_matches_ascends_step_trace(level, export):
    tl = read_one(capture(level, export))
    over, comm = ascend_figures(level, export)
    expected = 100.0 * over / comm
    assert tl.meta["ascend_overlapped_pct"] == pytest.approx(expected, abs=1e-4)
    assert tl.meta["ascend_communication_us"] == pytest.approx(comm, abs=1e-3)
    assert tl.meta["ascend_step_trace"]["overlapped_pct"] == pytest.approx(expected, abs=1e-4)
    assert abs(comm_comp_overlap_pct(tl) - expected) <= 2.0
    assert not [w for w in tl.warnings if "Ascend's own figure" in w]


# --- the same real data without the whole collectives: the small tasks alone -------------
def trace_view_events(level: int) -> list:
    with gzip.open(output(level, "text") / "trace_view.json.gz") as f:
        return json.load(f)


def hccl_pid(events: list):
    return next(e["pid"] for e in events if e.get("ph") == "M"
                and e.get("name") == "process_name" and e["args"]["name"] == "HCCL")


@pytest.mark.parametrize("level", LEVELS)
def test_without_the_hccl_process_each_collectives_tasks_become_one_op(tmp_path, level):
    events = trace_view_events(level)
    pid = hccl_pid(events)
    n_collectives = sum(1 for e in events if e.get("pid") == pid and e.get("ph") == "X"
                        and str(e.get("name", "")).startswith("hcom_"))
    path = tmp_path / "trace_view.json"
    path.write_text(json.dumps([e for e in events if e.get("pid") != pid]))
    tl = trace_view.read(path)
    check_roles(tl)
    assert int((tl.kind == KIND_COMM).sum()) == n_collectives
    assert tl.meta["ascend_hccl_tasks_merged"] > 0
    full = comm_comp_overlap_pct(trace_view.read(output(level, "text") / "trace_view.json.gz"))
    assert abs(comm_comp_overlap_pct(tl) - full) <= 1.0


@pytest.mark.parametrize("drop", [("COMMUNICATION_OP",),
                                  ("COMMUNICATION_OP", "COMMUNICATION_TASK_INFO")])
def test_database_without_whole_collectives(tmp_path, drop):
    db = tmp_path / "ascend_pytorch_profiler_0.db"
    shutil.copy(output(0, "db") / "ascend_pytorch_profiler_0.db", db)
    db.chmod(0o644)
    con = sqlite3.connect(db)
    n_collectives = con.execute("SELECT COUNT(*) FROM COMMUNICATION_OP").fetchone()[0]
    for table in drop:
        con.execute(f"DROP TABLE {table}")
    con.commit()
    con.close()
    tl = ascend_db.read(db)
    check_roles(tl)
    assert int((tl.kind == KIND_COMM).sum()) == n_collectives
    full = comm_comp_overlap_pct(read_one(capture(0, "db")))
    assert abs(comm_comp_overlap_pct(tl) - full) <= 1.0
