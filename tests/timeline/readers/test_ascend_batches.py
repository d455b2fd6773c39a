"""The big Ascend sources are read in pieces: ``kernel_details.csv`` / ``op_summary_*.csv``
block by block, the profiler database in chunks of rows. The result must not depend on the
piece size (a file split across many tiny pieces reads exactly as in one piece), and the
CSV reader's Arrow buffers stay bounded by the block size, not the file's size."""

from __future__ import annotations

import pathlib
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from parastream.errors import InputError
from parastream.timeline.readers import ascend_csv, ascend_db

ROOT = pathlib.Path(__file__).resolve().parents[3]
DATA = ROOT / "tests" / "data" / "ascend"
GEN = ROOT / "benchmarks" / "gen_kernel_details.py"
BIG_BLOCK = 1 << 30

COLUMNS = ("stream", "name", "type", "start_ns", "end_ns", "kind", "core", "block_dim",
           "mix_block_dim", "step", "wait_stream", "wait_on", "wait_start_ns", "wait_end_ns",
           "wait_name")


def assert_same(a, b) -> None:
    """Two timelines equal column by column (dtype and bytes), and in every fact."""
    for c in COLUMNS:
        x, y = getattr(a, c), getattr(b, c)
        assert x.dtype == y.dtype and np.array_equal(x, y), c
    assert (a.streams, a.names, a.types) == (b.streams, b.names, b.types)
    assert a.warnings == b.warnings and a.meta == b.meta and a.format == b.format
    if a.shapes is None or b.shapes is None:
        assert a.shapes is None and b.shapes is None
    else:
        assert a.shapes.tolist() == b.shapes.tolist()
    ca, cb = a.collectives, b.collectives
    assert (ca is None) == (cb is None)
    if ca is not None:
        for f in ("op", "group", "key", "nbytes", "start_ns", "end_ns"):
            assert getattr(ca, f).tolist() == getattr(cb, f).tolist(), f


def read_csv_in_blocks(monkeypatch, path, block: int):
    """The CSV read with ``block`` bytes per block; also how many blocks were read."""
    seen = []
    real = ascend_csv._batches

    def counting(*args):
        for batch in real(*args):
            seen.append(batch.num_rows)
            yield batch

    monkeypatch.setattr(ascend_csv, "_BLOCK_SIZE", block)
    monkeypatch.setattr(ascend_csv, "_batches", counting)
    try:
        return ascend_csv.read(path), len(seen)
    finally:
        monkeypatch.setattr(ascend_csv, "_batches", real)


@pytest.fixture(scope="module")
def generated_csv(tmp_path_factory) -> pathlib.Path:
    out = tmp_path_factory.mktemp("kd") / "kernel_details.csv"
    subprocess.run([sys.executable, str(GEN), str(out), "--rows", "4000", "--seed", "3"],
                   check=True, capture_output=True)
    return out


def test_generated_csv_in_many_tiny_blocks_equals_one_block(monkeypatch, generated_csv):
    whole, n_whole = read_csv_in_blocks(monkeypatch, generated_csv, BIG_BLOCK)
    split, n_split = read_csv_in_blocks(monkeypatch, generated_csv, 8 << 10)
    assert n_whole == 1 and n_split > 50
    assert len(whole) > 3000 and whole.collectives is not None and len(whole.collectives) > 50
    assert_same(whole, split)


@pytest.mark.parametrize("rel", [
    "kernel_details_block_dim.csv",
    "msinsight_level1_text/rank0_ascend_pt/ASCEND_PROFILER_OUTPUT/kernel_details.csv",
    "msinsight_level2_text/rank0_ascend_pt/ASCEND_PROFILER_OUTPUT/kernel_details.csv",
])
def test_real_csv_in_tiny_blocks_equals_one_block(monkeypatch, rel):
    whole, _ = read_csv_in_blocks(monkeypatch, DATA / rel, BIG_BLOCK)
    split, n = read_csv_in_blocks(monkeypatch, DATA / rel, 4 << 10)
    assert n > 3
    assert_same(whole, split)


HEADER = ("Device_id,Stream ID,Name,Type,Accelerator Core,Start Time(us),Duration(us),"
          "Block Dim,Mix Block Dim,Step Id,Input Shapes")
_ROW = st.tuples(
    st.sampled_from(["0", "1", "", "7"]),                       # device (none: kept)
    st.sampled_from(["2", "3", "N/A"]),                         # stream (N/A: HCCL lane)
    st.sampled_from(["MatMul", "Add", "hcom_allReduce__586_0_1", "hcom_send__1_2_1",
                     "Notify Wait"]),
    st.sampled_from(["MatMulV2", "Add", "HCCL", "MEMCPY", ""]),
    st.sampled_from(["AI_CORE", "AI_VECTOR_CORE", "HCCL", ""]),
    st.one_of(st.integers(0, 10**6).map(lambda v: f'"{1736408883700000 + v}.{v % 1000:03d}\t"'),
              st.sampled_from(["", "NaN", "junk"])),            # start (bad: skipped)
    st.one_of(st.integers(0, 5000).map(str), st.sampled_from(["-1", "", "2.5"])),
    st.sampled_from(["8", "N/A", "3.0", "12345678901"]),        # block dim
    st.sampled_from(["0", "40", ""]),
    st.sampled_from(["1", "2", "N/A"]),
    st.sampled_from(['"""1,4096"""', '"""8,8;8,8"""', ""]),
)


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rows=st.lists(_ROW, min_size=1, max_size=60), block=st.sampled_from([256, 700, 2048]))
def test_any_csv_reads_the_same_whatever_the_block_size(monkeypatch, tmp_path, rows, block):
    path = tmp_path / "kernel_details.csv"
    path.write_text(HEADER + "\n" + "\n".join(",".join(r) for r in rows) + "\n",
                    encoding="utf-8")
    try:
        whole, _ = read_csv_in_blocks(monkeypatch, path, BIG_BLOCK)
    except InputError as exc:
        with pytest.raises(InputError) as again:
            read_csv_in_blocks(monkeypatch, path, block)
        assert str(again.value) == str(exc)
        return
    split, _ = read_csv_in_blocks(monkeypatch, path, block)
    assert_same(whole, split)


def test_several_devices_and_bad_rows_split_across_blocks(monkeypatch, tmp_path):
    """The device kept, the skipped counts and the first-seen order of names are those of
    the whole file even when a block holds only other devices' rows."""
    lines = [HEADER]
    for i in range(300):
        dev = "1" if i < 100 else ("0" if i % 3 else "")
        start = "NaN" if i % 17 == 0 else f'"{1736408883700000 + 10 * i}.5\t"'
        lines.append(f"{dev},{2 + i % 2},op{i % 23},T{i % 5},AI_CORE,{start},3,8,0,1,")
    path = tmp_path / "kernel_details.csv"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    whole, _ = read_csv_in_blocks(monkeypatch, path, BIG_BLOCK)
    split, n = read_csv_in_blocks(monkeypatch, path, 512)
    assert n > 10
    assert whole.meta["device_id"] == 0
    assert any("kept device 0" in w for w in whole.warnings)
    assert any(w.startswith("skipped 12 row(s)") for w in whole.warnings)
    assert_same(whole, split)


_POOL_CHILD = """
import sys
import pyarrow as pa
from parastream.timeline.readers import ascend_csv
ascend_csv._BLOCK_SIZE = 1 << 16
tl = ascend_csv.read(sys.argv[1])
print(len(tl), pa.default_memory_pool().max_memory())
"""


def test_csv_arrow_buffers_are_bounded_by_the_block_not_the_file(tmp_path):
    """Arrow's buffers while reading a 20 MB file in 64 KiB blocks stay a few MB (the
    whole-file read held the kept text columns of every row: more than the file)."""
    path = tmp_path / "kernel_details.csv"
    subprocess.run([sys.executable, str(GEN), str(path), "--rows", "60000", "--seed", "1"],
                   check=True, capture_output=True)
    out = subprocess.run([sys.executable, "-c", _POOL_CHILD, str(path)], check=True,
                         capture_output=True, text=True).stdout.split()
    rows, pool_max = int(out[0]), int(out[1])
    assert rows > 50000
    assert pool_max < path.stat().st_size / 4, (pool_max, path.stat().st_size)


# ------------------------------------------------------------------------------ database
@pytest.mark.parametrize("level", (0, 1, 2))
def test_database_in_tiny_chunks_equals_one_chunk(monkeypatch, level):
    db = (DATA / f"msinsight_level{level}_db" / "rank0_ascend_pt" / "ASCEND_PROFILER_OUTPUT"
          / "ascend_pytorch_profiler_0.db")
    whole = ascend_db.read(db)
    fetched = []
    real = ascend_db._fetch_columns

    def counting(cursor, n_cols):
        orig = cursor.fetchmany

        class Spy:
            def fetchmany(self, size):
                rows = orig(size)
                fetched.append(len(rows))
                return rows

        return real(Spy(), n_cols)

    monkeypatch.setattr(ascend_db, "_CHUNK_ROWS", 7)
    monkeypatch.setattr(ascend_db, "_fetch_columns", counting)
    split = ascend_db.read(db)
    assert len(fetched) > 20 and max(fetched) == 7
    assert_same(whole, split)


def test_database_columns_mixing_numbers_and_text_across_chunks():
    """A chunk of integers and a later chunk holding text give one object column whose
    values are the database's own (as one whole fetch gives)."""

    class Cursor:
        def __init__(self, rows):
            self.rows = rows

        def fetchmany(self, size):
            out, self.rows = self.rows[:size], self.rows[size:]
            return out

    rows = [(1, 5), (2, 6), (3, "x"), (4, None)]
    for size in (1, 2, 4):
        old = ascend_db._CHUNK_ROWS
        ascend_db._CHUNK_ROWS = size
        try:
            a, b = ascend_db._fetch_columns(Cursor(list(rows)), 2)
        finally:
            ascend_db._CHUNK_ROWS = old
        assert a.dtype == np.int64 and a.tolist() == [1, 2, 3, 4]
        assert b.tolist() == [5, 6, "x", None]
        assert [type(v) for v in b.tolist()] == [int, int, str, type(None)]
