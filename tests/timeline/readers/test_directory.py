"""Profiler output directory discovery."""

from __future__ import annotations

import json
import pathlib
import shutil
import sqlite3

import pytest

from parastream.errors import InputError
from parastream.timeline.readers import ascend_csv, ascend_db, trace_view
from parastream.timeline.readers.directory import read_dir

DATA = pathlib.Path(__file__).resolve().parents[2] / "data"
REAL_CSV = DATA / "ascend" / "kernel_details_block_dim.csv"
BASE_US = 1736413971550000


def write_trace_view(path: pathlib.Path) -> pathlib.Path:
    events = [{"ph": "M", "name": "process_name", "pid": 1, "tid": 0,
               "args": {"name": "Ascend Hardware"}},
              {"ph": "X", "name": "k", "ts": f"{BASE_US}.500", "dur": 2.0, "pid": 1, "tid": 2,
               "args": {"Task Type": "AI_CORE"}}]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(events))
    return path


def write_db(path: pathlib.Path, with_task: bool = True) -> pathlib.Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE STRING_IDS (id INTEGER PRIMARY KEY, value TEXT)")
    if with_task:
        con.execute("CREATE TABLE TASK (startNs INTEGER, endNs INTEGER, deviceId INTEGER, "
                    "globalTaskId INTEGER, taskType INTEGER, streamId INTEGER)")
        con.execute("CREATE TABLE COMPUTE_TASK_INFO (name INTEGER, globalTaskId INTEGER, "
                    "blockNum INTEGER, mixBlockNum INTEGER, taskType INTEGER, opType INTEGER)")
        con.executemany("INSERT INTO STRING_IDS VALUES (?, ?)",
                        [(1, "AI_CORE"), (2, "db_op"), (3, "Add")])
        con.execute("INSERT INTO TASK VALUES (?, ?, 1, 7, 1, 3)",
                    (BASE_US * 1000, BASE_US * 1000 + 500))
        con.execute("INSERT INTO COMPUTE_TASK_INFO VALUES (2, 7, 20, 0, 1, 3)")
    con.commit()
    con.close()
    return path


def write_info_json(prof: pathlib.Path, device: int, aic: int, aiv: int) -> None:
    d = prof / f"device_{device}"
    d.mkdir(parents=True, exist_ok=True)
    (d / f"info.json.{device}").write_text(json.dumps(
        {"DeviceInfo": [{"id": device, "ai_core_num": aic, "aiv_num": aiv,
                         "aic_frequency": "1850"}], "platform_version": "Ascend910B3"}))


def make_capture(root: pathlib.Path, name: str, *, csv=True, tv=True, db=False) -> pathlib.Path:
    cap = root / name
    out = cap / "ASCEND_PROFILER_OUTPUT"
    out.mkdir(parents=True)
    if csv:
        shutil.copy(REAL_CSV, out / "kernel_details.csv")
    if tv:
        write_trace_view(out / "trace_view.json")
    if db:
        write_db(out / "ascend_pytorch_profiler_0.db")
    prof = cap / "PROF_000001_20250109_abc"
    write_info_json(prof, 0, 24, 48)
    (cap / "profiler_info.json").write_text("{}")
    return cap


def test_capture_prefers_kernel_details_and_reads_core_counts(tmp_path):
    cap = make_capture(tmp_path, "host_123_20250109_ascend_pt")
    (tl,) = read_dir(cap)
    assert tl.format == ascend_csv.KERNEL_DETAILS
    assert len(tl) == 29
    assert (tl.device.ai_core_num, tl.device.vector_core_num) == (24, 48)
    assert tl.meta["capture_dir"] == str(cap)


def test_database_with_task_table_comes_first(tmp_path):
    cap = make_capture(tmp_path, "x_ascend_pt", db=True)
    (tl,) = read_dir(cap)
    assert tl.format == ascend_db.FORMAT
    assert [tl.op_name(i) for i in range(len(tl))] == ["db_op"]
    assert tl.device.ai_core_num == 24


def test_database_without_task_table_is_passed_over(tmp_path):
    cap = make_capture(tmp_path, "x_ascend_pt", csv=False)
    write_db(cap / "ASCEND_PROFILER_OUTPUT" / "ascend_pytorch_profiler_0.db", with_task=False)
    (tl,) = read_dir(cap)
    assert tl.format == trace_view.FORMAT
    assert any("without a TASK table" in w for w in tl.warnings)


def test_output_dir_given_directly_finds_info_json_next_to_it(tmp_path):
    cap = make_capture(tmp_path, "x_ascend_pt", csv=False)
    (tl,) = read_dir(cap / "ASCEND_PROFILER_OUTPUT")
    assert tl.format == trace_view.FORMAT
    assert tl.device.ai_core_num == 24 and tl.device.vector_core_num == 48


def test_info_json_of_the_captured_device(tmp_path):
    cap = make_capture(tmp_path, "x_ascend_pt", csv=False, tv=False, db=True)  # db: device 1
    write_info_json(cap / "PROF_000001_20250109_abc", 1, 20, 40)
    (tl,) = read_dir(cap)
    assert tl.meta["device_id"] == 1
    assert (tl.device.ai_core_num, tl.device.vector_core_num) == (20, 40)


def test_parent_of_several_captures_gives_one_timeline_each_sorted(tmp_path):
    make_capture(tmp_path / "rank1", "b_ascend_pt")
    make_capture(tmp_path / "rank0", "a_ascend_pt", csv=False)
    tls = read_dir(tmp_path)
    assert [pathlib.Path(t.meta["capture_dir"]).name for t in tls] == ["a_ascend_pt",
                                                                        "b_ascend_pt"]
    assert [t.format for t in tls] == [trace_view.FORMAT, ascend_csv.KERNEL_DETAILS]


def test_rank_from_profiler_info_file_name(tmp_path):
    cap = make_capture(tmp_path, "rank_1_ascend_pt", csv=False)
    (cap / "profiler_info.json").rename(cap / "profiler_info_1.json")
    (tl,) = read_dir(cap)
    assert tl.meta["rank"] == 1
    single = make_capture(tmp_path, "single_ascend_pt", csv=False)
    assert "rank" not in read_dir(single)[0].meta


def test_prof_dir_with_op_summary(tmp_path):
    prof = tmp_path / "PROF_000001_20250109_xyz"
    out = prof / "mindstudio_profiler_output"
    out.mkdir(parents=True)
    (out / "op_summary_20250109.csv").write_text(
        "Device_id,Op Name,OP Type,Task Type,Task Start Time(us),Task Duration(us),Stream ID,"
        "Block Dim\n"
        f'0,MatMul_1,MatMulV2,AI_CORE,"{BASE_US}.125\t",12.5,11,20\n')
    write_info_json(prof, 0, 8, 16)
    (tl,) = read_dir(prof)
    assert tl.format == ascend_csv.OP_SUMMARY
    assert tl.device.ai_core_num == 8


def test_loose_files_in_a_plain_folder(tmp_path):
    shutil.copy(REAL_CSV, tmp_path / "kernel_details.csv")
    (tl,) = read_dir(tmp_path)
    assert tl.format == ascend_csv.KERNEL_DETAILS and tl.device.ai_core_num is None


def test_folder_of_kineto_traces_gives_one_timeline_per_file(tmp_path):
    pytest.importorskip("parastream.timeline.readers.kineto")
    traces = [DATA / "kineto" / "alexnet.json.gz", DATA / "kineto" / "simple_add.json.gz"]
    for t in traces:
        shutil.copy(t, tmp_path / t.name)
    (tmp_path / "notes.json").write_text('{"not": "a trace"}')
    tls = read_dir(tmp_path)
    assert len(tls) == len(traces)
    assert [pathlib.Path(t.source).name for t in tls] == [t.name for t in traces]


def test_no_profiler_data(tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "readme.txt").write_text("hello")
    with pytest.raises(InputError) as err:
        read_dir(tmp_path)
    assert "no profiler data found (looked for" in err.value.reason
    assert err.value.path == str(tmp_path)


def test_capture_whose_only_source_is_broken_raises_that_error(tmp_path):
    cap = tmp_path / "x_ascend_pt" / "ASCEND_PROFILER_OUTPUT"
    cap.mkdir(parents=True)
    (cap / "kernel_details.csv").write_text("Name,Stream ID\nadd,2\n")
    with pytest.raises(InputError, match="missing column"):
        read_dir(tmp_path / "x_ascend_pt")


def test_read_path_hands_directories_here(tmp_path):
    from parastream.timeline.readers import read_path

    cap = make_capture(tmp_path, "x_ascend_pt")
    (tl,) = read_path(cap)
    assert tl.format == ascend_csv.KERNEL_DETAILS and tl.device.ai_core_num == 24


def test_a_folder_of_rank_captures_is_one_unit_per_capture(tmp_path):
    """Both torch_npu capture spellings split a folder into one unit per rank (analysed in
    parallel, with a per-rank table); a capture folder itself is one unit."""
    from parastream.timeline.ranks import expand

    for name in ("r0_ascend_ms", "r1_ascend_ms", "r2_ascend_pt"):
        (tmp_path / name).mkdir()
    assert [p.rsplit("/", 1)[-1] for p in expand(str(tmp_path))] == [
        "r0_ascend_ms", "r1_ascend_ms", "r2_ascend_pt"]
    assert expand(str(tmp_path / "r0_ascend_ms")) == [str(tmp_path / "r0_ascend_ms")]


# --- symbolic links that loop or point nowhere --------------------------------------------
def test_a_looping_source_in_a_capture_is_skipped_with_a_warning(tmp_path):
    cap = make_capture(tmp_path, "x_ascend_pt", tv=False)
    loop = cap / "ASCEND_PROFILER_OUTPUT" / "trace_view.json"
    loop.symlink_to(loop.name)  # trace_view.json -> trace_view.json
    (cap / "ASCEND_PROFILER_OUTPUT" / "kernel_details.csv").unlink()
    (cap / "ASCEND_PROFILER_OUTPUT" / "kernel_details.csv").symlink_to("gone.csv")
    shutil.copy(REAL_CSV, cap / "op_summary_0_1.csv")
    (tl,) = read_dir(cap)
    assert tl.format == ascend_csv.KERNEL_DETAILS  # op_summary holds kernel_details columns
    assert any(str(loop) in w and "symbolic link loop" in w for w in tl.warnings)
    assert any("kernel_details.csv" in w and "symbolic link to nothing" in w
               for w in tl.warnings)


def test_a_capture_whose_only_source_loops_is_one_input_error(tmp_path):
    out = tmp_path / "x_ascend_pt" / "ASCEND_PROFILER_OUTPUT"
    out.mkdir(parents=True)
    (out / "kernel_details.csv").symlink_to("kernel_details.csv")
    with pytest.raises(InputError) as err:
        read_dir(tmp_path / "x_ascend_pt")
    assert err.value.path == str(out / "kernel_details.csv")
    assert err.value.reason == "a symbolic link loop"


def test_a_looping_trace_beside_kineto_traces_is_skipped_with_a_warning(tmp_path):
    pytest.importorskip("parastream.timeline.readers.kineto")
    shutil.copy(DATA / "kineto" / "simple_add.json.gz", tmp_path / "simple_add.json.gz")
    (tmp_path / "rank1.json").symlink_to("rank1.json")
    (tl,) = read_dir(tmp_path)
    assert pathlib.Path(tl.source).name == "simple_add.json.gz"
    assert any("rank1.json" in w and "symbolic link loop" in w for w in tl.warnings)


def test_a_folder_holding_only_a_looping_trace_is_one_input_error(tmp_path):
    (tmp_path / "a.json").symlink_to("b.json")
    (tmp_path / "b.json").symlink_to("a.json")
    with pytest.raises(InputError, match="symbolic link loop"):
        read_dir(tmp_path)
