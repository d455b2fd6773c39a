"""Ascend kernel_details.csv / msprof op_summary_*.csv reader."""

from __future__ import annotations

import csv
import pathlib

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from parastream.errors import InputError
from parastream.timeline import model, timeparse
from parastream.timeline.readers import ascend_csv

DATA = pathlib.Path(__file__).resolve().parents[2] / "data" / "ascend"
REAL = DATA / "kernel_details_block_dim.csv"
BASE_US = 1736413971550000

KD_HEADER = ["Step Id", "Device_id", "Model ID", "Task ID", "Stream ID", "Name", "Type",
             "OP State", "Accelerator Core", "Start Time(us)", "Duration(us)", "Wait Time(us)",
             "Block Dim", "Mix Block Dim", "Input Shapes"]


def write_csv(path: pathlib.Path, header: list[str], rows: list[dict]) -> pathlib.Path:
    """A CSV the way torch_npu writes it: TAB-suffixed quoted start, triple-quoted shapes."""
    lines = [",".join(header)]
    for r in rows:
        cells = []
        for h in header:
            v = r.get(h, "")
            if h in ("Start Time(us)", "Task Start Time(us)") and v not in ("", "N/A"):
                v = f'"{v}\t"'
            elif h == "Input Shapes" and v:
                v = f'"""{v}"""'
            cells.append(str(v))
        lines.append(",".join(cells))
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def kd_row(stream="2", name="aclnnAdd_AddAiCore_Add", typ="Add", core="AI_VECTOR_CORE",
           start="0.000", dur="10.000", block=40, mix=0, step=1, device=0, **extra) -> dict:
    whole, frac = start.split(".")
    row = {"Step Id": step, "Device_id": device, "Model ID": 4294967295, "Task ID": 1,
           "Stream ID": stream, "Name": name, "Type": typ, "OP State": "dynamic",
           "Accelerator Core": core, "Start Time(us)": f"{BASE_US + int(whole)}.{frac}",
           "Duration(us)": dur, "Wait Time(us)": "0.5", "Block Dim": block,
           "Mix Block Dim": mix, "Input Shapes": "1,4096"}
    row.update(extra)
    return row


def ns(rel_us: str) -> int:
    whole, frac = rel_us.split(".")
    return (BASE_US + int(whole)) * 1000 + int((frac + "000")[:3])


# ------------------------------------------------------------------ the real sample
def test_real_sample_exact_nanoseconds():
    tl = ascend_csv.read(REAL)
    assert tl.format == ascend_csv.KERNEL_DETAILS
    assert len(tl) == 29  # every row, duplicates kept (the file has no final newline)
    assert tl.streams == ["2"]
    i = int(np.flatnonzero(tl.start_ns == 1736413971558972912)[0])
    assert tl.end_ns[i] - tl.start_ns[i] == 185504
    assert tl.op_name(i) == "aclnnMatmul_MatMulCommon_MatMulV2"
    assert tl.types[tl.type[i]] == "MatMulV2"
    assert tl.streams[tl.stream[i]] == "2"
    assert (tl.block_dim[i], tl.mix_block_dim[i], tl.step[i]) == (16, 0, 19)
    assert model.CORES[tl.core[i]] == "AI_CORE" and tl.kind[i] == model.KIND_COMPUTE
    assert tl.shapes[i] == "81920,4096;8192,512"
    # a MIX_AIC flash attention row: block dims 20 / 40
    j = int(np.flatnonzero(tl.start_ns == 1736413971411629128)[0])
    assert tl.end_ns[j] == 1736413971411629128 + 410188
    assert model.CORES[tl.core[j]] == "MIX_AIC"
    assert (tl.block_dim[j], tl.mix_block_dim[j]) == (20, 40)
    assert tl.warnings == []


def test_real_sample_matches_row_by_row_exact_parse():
    with open(REAL, newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    want = sorted((timeparse.us_text_to_ns(r["Start Time(us)"]),
                   timeparse.us_text_to_ns(r["Start Time(us)"])
                   + timeparse.us_text_to_ns(r["Duration(us)"]), int(r["Block Dim"]))
                  for r in rows)
    tl = ascend_csv.read(REAL)
    got = sorted(zip(tl.start_ns.tolist(), tl.end_ns.tolist(), tl.block_dim.tolist()))
    assert got == want
    assert np.all(np.diff(tl.start_ns) >= 0)  # sorted by start


def test_sniff_real_sample():
    assert ascend_csv.sniff(REAL.read_bytes()[:65536])


# ------------------------------------------------------------------- generated cases
def test_block_num_spelling_and_missing_optional_columns(tmp_path):
    header = ["Model ID", "Task ID", "Stream ID", "Name", "Type", "Accelerator Core",
              "Start Time(us)", "Duration(us)", "Wait Time(us)", "Block Num", "Mix Block Num"]
    rows = [dict(kd_row("7", "mm", "MatMulV3", "MIX_AIC", "5.250", "3.5"),
                 **{"Block Num": 24, "Mix Block Num": 48}),
            dict(kd_row("7", "add", start="9.000", dur="1"), **{"Block Num": "N/A",
                                                                 "Mix Block Num": "N/A"})]
    tl = ascend_csv.read(write_csv(tmp_path / "kernel_details.csv", header, rows))
    assert tl.format == ascend_csv.KERNEL_DETAILS
    assert tl.block_dim.tolist() == [24, -1]
    assert tl.mix_block_dim.tolist() == [48, -1]
    assert tl.step.tolist() == [-1, -1]
    assert tl.shapes is None
    assert tl.start_ns.tolist() == [ns("5.250"), ns("9.000")]
    assert tl.dur_ns.tolist() == [3500, 1000]
    assert "device_id" not in tl.meta


def test_hccl_rows_with_na_stream_go_to_the_comm_lane(tmp_path):
    rows = [kd_row("2", "aclnnMatmul", "MatMulV2", "AI_CORE", "0.000", "50"),
            kd_row("N/A", "hcom_allReduce__123_0_1", "hcom_allReduce_", "HCCL", "10.000",
                   "30", block="N/A", mix="N/A", **{"Task ID": "N/A"}),
            kd_row("N/A", "hcom_allGather__123_1_1", "hcom_allGather_", "HCCL", "60.000", "5",
                   block="N/A", mix="N/A", **{"Task ID": "N/A"})]
    tl = ascend_csv.read(write_csv(tmp_path / "k.csv", KD_HEADER, rows))
    assert len(tl) == 3
    comm = tl.stream == tl.streams.index(model.COMM_LANE)
    assert comm.sum() == 2
    assert set(tl.kind[comm].tolist()) == {model.KIND_COMM}
    assert {model.CORES[c] for c in tl.core[comm]} == {"HCCL"}
    assert tl.block_dim[comm].tolist() == [-1, -1]
    assert tl.kind[~comm].tolist() == [model.KIND_COMPUTE]
    assert sorted(tl.streams) == sorted(["2", model.COMM_LANE])


def test_memset_and_memcpy_kinds(tmp_path):
    rows = [kd_row(name="MemSet", typ="MemSet", core="AI_VECTOR_CORE", start="0.000"),
            kd_row(name="aclrtMemcpy", typ="MemCopy", core="AI_CPU", start="20.000"),
            kd_row(name="add", start="40.000")]
    tl = ascend_csv.read(write_csv(tmp_path / "k.csv", KD_HEADER, rows))
    assert tl.kind.tolist() == [model.KIND_MEMSET, model.KIND_MEMCPY, model.KIND_COMPUTE]


def test_op_summary_spelling(tmp_path):
    header = ["Device_id", "Model Name", "Model ID", "Task ID", "Stream ID", "Infer ID",
              "Op Name", "OP Type", "OP State", "Task Type", "Task Start Time(us)",
              "Task Duration(us)", "Task Wait Time(us)", "Block Dim", "Mix Block Dim",
              "Input Shapes"]
    base = {"Device_id": 3, "Model Name": "N/A", "Model ID": 4294967295, "Infer ID": "N/A",
            "OP State": "static"}
    rows = [dict(base, **{"Task ID": 5, "Stream ID": 11, "Op Name": "MatMul_1",
                          "OP Type": "MatMulV2", "Task Type": "AI_CORE",
                          "Task Start Time(us)": f"{BASE_US}.125", "Task Duration(us)": "12.5",
                          "Task Wait Time(us)": 0, "Block Dim": 20, "Mix Block Dim": "N/A",
                          "Input Shapes": "8,8;8,8"}),
            dict(base, **{"Task ID": 6, "Stream ID": 12, "Op Name": "Sigmoid_2",
                          "OP Type": "Sigmoid", "Task Type": "AI_VECTOR_CORE",
                          "Task Start Time(us)": f"{BASE_US + 1}.000", "Task Duration(us)": "2",
                          "Task Wait Time(us)": 0, "Block Dim": 8, "Mix Block Dim": 0})]
    path = write_csv(tmp_path / "op_summary_20250101.csv", header, rows)
    assert ascend_csv.sniff(path.read_bytes())
    tl = ascend_csv.read(path)
    assert tl.format == ascend_csv.OP_SUMMARY
    assert [tl.op_name(i) for i in range(len(tl))] == ["MatMul_1", "Sigmoid_2"]
    assert [tl.streams[s] for s in tl.stream] == ["11", "12"]
    assert [model.CORES[c] for c in tl.core] == ["AI_CORE", "AI_VECTOR_CORE"]
    assert tl.start_ns[0] == BASE_US * 1000 + 125 and tl.dur_ns[0] == 12500
    assert tl.block_dim.tolist() == [20, 8] and tl.mix_block_dim.tolist() == [-1, 0]
    assert list(tl.shapes) == ["8,8;8,8", ""]
    assert tl.meta["device_id"] == 3


def test_missing_columns_are_named(tmp_path):
    path = tmp_path / "kernel_details.csv"
    path.write_text("Name,Stream ID,Start Time(us)\nadd,2,1.0\n")
    with pytest.raises(InputError) as err:
        ascend_csv.read(path)
    assert "missing column(s): Duration(us)" in err.value.reason
    assert err.value.path == str(path)

    path.write_text("Op Name,Task Start Time(us)\nadd,1.0\n")
    with pytest.raises(InputError, match=r"missing column\(s\): Stream ID, Task Duration\(us\)"):
        ascend_csv.read(path)


def test_non_utf8_bytes_give_a_clear_error(tmp_path):
    good = write_csv(tmp_path / "a.csv", KD_HEADER, [kd_row()]).read_bytes()
    bad_body = tmp_path / "body.csv"
    bad_body.write_bytes(good.replace(b"aclnnAdd_AddAiCore_Add", b"aclnn\xff\xfeAdd"))
    with pytest.raises(InputError, match="not UTF-8"):
        ascend_csv.read(bad_body)
    bad_head = tmp_path / "head.csv"
    bad_head.write_bytes(good.replace(b"Name", "Näme".encode("latin-1"), 1))
    with pytest.raises(InputError, match="not UTF-8"):
        ascend_csv.read(bad_head)


def test_nan_negative_and_unparseable_rows_are_skipped_with_a_warning(tmp_path):
    rows = [kd_row(start="0.000", dur="10"),
            kd_row(start="20.000", dur="NaN"),
            kd_row(start="30.000", dur="-5.0"),
            kd_row(start="40.000", dur=""),
            dict(kd_row(start="50.000", dur="1"), **{"Start Time(us)": "garbage"}),
            kd_row(start="60.000", dur="1e-3"),
            kd_row("7", start="70.500", dur="2.25")]
    tl = ascend_csv.read(write_csv(tmp_path / "k.csv", KD_HEADER, rows))
    assert tl.start_ns.tolist() == [ns("0.000"), ns("60.000"), ns("70.500")]
    assert tl.dur_ns.tolist() == [10000, 1, 2250]
    assert any("skipped 4 row(s)" in w for w in tl.warnings), tl.warnings
    # codes stay dense after skipping
    assert sorted(tl.streams) == ["2", "7"] and len(tl.names) == 1


def test_no_usable_rows(tmp_path):
    rows = [kd_row(dur="nan"), kd_row(dur="-1")]
    with pytest.raises(InputError, match="no usable rows"):
        ascend_csv.read(write_csv(tmp_path / "k.csv", KD_HEADER, rows))
    empty = tmp_path / "empty.csv"
    empty.write_text(",".join(KD_HEADER) + "\n")
    with pytest.raises(InputError, match="no usable rows"):
        ascend_csv.read(empty)


def test_several_devices_keep_the_most_common(tmp_path):
    rows = [kd_row(device=0, start="0.000"), kd_row(device=1, start="1.000"),
            kd_row(device=1, start="2.000"), kd_row(device=2, start="3.000")]
    tl = ascend_csv.read(write_csv(tmp_path / "k.csv", KD_HEADER, rows))
    assert tl.start_ns.tolist() == [ns("1.000"), ns("2.000")]
    assert tl.meta["device_id"] == 1
    (w,) = [w for w in tl.warnings if "several devices" in w]
    assert "kept device 1" in w and "0 (1 rows)" in w and "2 (1 rows)" in w


def test_sniff_rejects_other_files():
    assert not ascend_csv.sniff(b'{"traceEvents": []}')
    assert not ascend_csv.sniff(b'[{"ph": "X"}]')
    assert not ascend_csv.sniff(b"a,b,c\n1,2,3\n")
    assert not ascend_csv.sniff(b"SQLite format 3\x00")
    assert ascend_csv.sniff(("\ufeff" + ",".join(KD_HEADER) + "\n").encode())


def test_read_path_dispatches_to_this_reader(tmp_path):
    pytest.importorskip("parastream.timeline.readers.kineto")
    from parastream.timeline.readers import read_path

    path = write_csv(tmp_path / "whatever.csv", KD_HEADER, [kd_row()])
    (tl,) = read_path(path)
    assert tl.format == ascend_csv.KERNEL_DETAILS


def test_200k_rows(tmp_path):
    n = 200_000
    rng = np.random.default_rng(7)
    gaps = rng.integers(1, 5000, n)
    start = BASE_US * 1000 + np.cumsum(gaps)
    dur = rng.integers(0, 3_000_000, n)
    streams = rng.choice(["2", "7", "N/A"], n, p=[0.6, 0.35, 0.05])
    blocks = rng.integers(1, 48, n)
    path = tmp_path / "kernel_details.csv"
    with open(path, "w", encoding="utf-8") as f:
        f.write(",".join(KD_HEADER) + "\n")
        for i in range(n):
            s, d = int(start[i]), int(dur[i])
            comm = streams[i] == "N/A"
            f.write(f'1,0,4294967295,{i},{streams[i]},{"hcom_x" if comm else f"op{i % 97}"},'
                    f'T{i % 13},dynamic,{"HCCL" if comm else "AI_CORE"},'
                    f'"{s // 1000}.{s % 1000:03d}\t",{d // 1000}.{d % 1000:03d},0,'
                    f'{"N/A" if comm else blocks[i]},0,"""1,2;3"""\n')
    tl = ascend_csv.read(path)
    assert len(tl) == n
    order = np.lexsort((start + dur, start))
    assert np.array_equal(tl.start_ns, start[order])
    assert np.array_equal(tl.end_ns, (start + dur)[order])
    lane = np.array(tl.streams)[tl.stream]
    want_lane = np.where(streams == "N/A", model.COMM_LANE, streams)[order]
    assert np.array_equal(lane, want_lane)
    assert np.array_equal(tl.block_dim, np.where(streams == "N/A", -1, blocks)[order])
    assert (tl.kind[lane == model.COMM_LANE] == model.KIND_COMM).all()
    assert len(tl.names) == 98 and tl.shapes[0] == "1,2;3"


# --------------------------------------------------------- the exact column parser
_decimal = st.builds(
    lambda sign, whole, frac: f"{sign}{whole}{'.' + frac if frac is not None else ''}",
    st.sampled_from(["", "-"]),
    st.integers(0, 8_999_999_999_999).map(str),
    st.none() | st.text("0123456789", min_size=0, max_size=7))


@settings(max_examples=200, deadline=None)
@given(st.lists(_decimal, min_size=1, max_size=30))
def test_column_parser_matches_the_row_parser(values):
    got, ok = ascend_csv.us_column_to_ns(pa.array([f' "{v}\t" ' for v in values]))
    assert ok.all()
    assert got.tolist() == [timeparse.us_text_to_ns(v) for v in values]


def test_column_parser_flags_junk_and_keeps_the_rest():
    vals = ["1736413971558972.912", "nan", None, "1.5e3", "inf", "-0.0004", "12.34567", "1.2.3"]
    got, ok = ascend_csv.us_column_to_ns(pa.chunked_array([vals[:3], vals[3:]]))
    assert ok.tolist() == [True, False, False, True, False, True, True, False]
    assert got[ok].tolist() == [1736413971558972912, 1500000, 0, 12346]


def _row_parse(v):
    try:
        return timeparse.us_text_to_ns(v)
    except ValueError:
        return None


@settings(max_examples=200, deadline=None)
@given(st.lists(_decimal | st.sampled_from(["nan", "N/A?", "+5", ".", "-.5", "1e3", "", "--1",
                                              "1.2.3", " 7 ", "inf"]), min_size=1, max_size=20))
def test_column_parser_with_junk_agrees_with_the_row_parser(values):
    got, ok = ascend_csv.us_column_to_ns(pa.array(values))
    want = [_row_parse(v) for v in values]
    assert ok.tolist() == [w is not None for w in want]
    assert [int(g) for g, k in zip(got, ok) if k] == [w for w in want if w is not None]


@pytest.mark.parametrize("bom,newline", [(True, "\n"), (False, "\r\n"), (True, "\r\n")])
def test_bom_and_crlf(tmp_path, bom, newline):
    hdr = "Step Id,Stream ID,Name,Type,Accelerator Core,Start Time(us),Duration(us),Block Dim"
    row = '1,2,add,Add,AI_CORE,"1736413971558972.912\t",1.5,8'
    text = ("\ufeff" if bom else "") + hdr + newline + row + newline
    path = tmp_path / "kernel_details.csv"
    path.write_bytes(text.encode())
    tl = ascend_csv.read(path)
    assert tl.names == ["add"] and tl.block_dim.tolist() == [8] and tl.step.tolist() == [1]
    assert tl.end_ns.tolist() == [1736413971558972912 + 1500]
