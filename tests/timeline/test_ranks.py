"""Folders of ranks or captures: partial folders (broken members named, the rest
analysed), --strict, and the cross-rank figures, through the command line as typed."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest

DATA = Path(__file__).parent.parent / "data"


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "parastream", *args], capture_output=True,
                          text=True, timeout=120)


def _rank(dst: Path, rank: int, slow_us: int = 0) -> None:
    raw = json.loads(gzip.decompress((DATA / "kineto" / "synthetic_comm_partial.json.gz")
                                     .read_bytes()))
    raw["distributedInfo"] = {"backend": "nccl", "rank": rank, "world_size": 4}
    for e in raw["traceEvents"]:
        if e.get("cat") == "kernel" and slow_us:
            e["dur"] = e["dur"] + slow_us
    dst.write_bytes(gzip.compress(json.dumps(raw).encode()))


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    """Four ranks; rank 2 is slow, rank 3's file is cut off mid-stream."""
    for r in range(3):
        _rank(tmp_path / f"rank{r}.json.gz", r, 40 if r == 2 else 0)
    _rank(tmp_path / "rank3.json.gz", 3)
    whole = (tmp_path / "rank3.json.gz").read_bytes()
    (tmp_path / "rank3.json.gz").write_bytes(whole[: len(whole) // 2])
    return tmp_path


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_a_broken_rank_leaves_the_others_analysed(folder, jobs):
    r = run("analyze", str(folder), "--format", "json", "-j", jobs, "--no-progress")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert [row["rank"] for row in doc["ranks"]] == [0, 1, 2]
    assert doc["summary"]["slowest_rank"] == 2
    assert (doc["summary"]["units"], doc["summary"]["units_analysed"]) == (4, 3)
    (b,) = doc["broken"]
    assert b["source"].endswith("rank3.json.gz") and b["error"]
    lines = r.stderr.strip().splitlines()
    assert "Traceback" not in r.stderr
    assert any("rank3.json.gz" in ln and "skipped" in ln for ln in lines)
    assert any("3 of 4 analysed" in ln for ln in lines)


def test_strict_makes_a_broken_member_fail(folder):
    r = run("analyze", str(folder), "--strict", "--no-progress", "-j", "1")
    assert r.returncode == 2 and r.stdout == ""
    (line,) = r.stderr.strip().splitlines()
    assert line.startswith("parastream: ") and "rank3.json.gz" in line


def test_a_folder_of_only_broken_members_is_bad_input(tmp_path):
    for r in range(2):
        (tmp_path / f"rank{r}.json").write_text('{"traceEvents": [')
    r = run("analyze", str(tmp_path), "--no-progress")
    assert r.returncode == 2 and r.stdout == ""
    (line,) = r.stderr.strip().splitlines()
    assert "rank0.json" in line and "1 other member(s) of 2 broken" in line


def test_comm_exposed_time_per_rank(folder):
    doc = json.loads(run("analyze", str(folder), "--format", "json", "--no-progress").stdout)
    for row in doc["ranks"]:
        assert row["median_comm_exposed_us"] is not None and row["median_comm_exposed_us"] >= 0

    # exposed communication is the part of the communication union that no compute hides


def test_comm_exposed_ns_is_communication_not_hidden():
    from parastream.timeline.comm import comm_comp_overlap_pct, comm_exposed_ns
    from parastream.timeline.model import KIND_COMM, TimelineBuilder

    b = TimelineBuilder("c", "test")
    b.add_op("nccl", "ncclAllReduce", 0, 100, kind=KIND_COMM)
    b.add_op("nccl", "ncclAllGather", 150, 200, kind=KIND_COMM)
    b.add_op("main", "gemm", 20, 50)
    b.add_op("main", "gemm", 40, 60)
    b.add_op("main", "gemm", 190, 300)
    tl = b.build()
    # communication 150 ns; compute hides 20..60 and 190..200 = 50 ns
    assert comm_exposed_ns(tl) == 100
    assert comm_comp_overlap_pct(tl) == pytest.approx(100 * 50 / 150)
    b2 = TimelineBuilder("n", "test")
    b2.add_op("main", "gemm", 0, 10)
    assert comm_exposed_ns(b2.build()) is None
