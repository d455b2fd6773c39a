"""Generated clusters written to disk (benchmarks/gen_cluster.py) and read back through
``read_path``: the planted straggler, the clock offsets and the slow link are found from
the files as the readers see them, for Kineto traces (NCCL) and Ascend folders (HCCL)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from parastream.timeline.cluster import cross_rank, rank_summary
from parastream.timeline.readers import read_path

ROOT = Path(__file__).resolve().parents[2]
GEN = ROOT / "benchmarks" / "gen_cluster.py"
PLANTED = dict(ranks=8, slow_rank=6, skew_us=400, link=(2, 3))


def generate(out: Path, *args: str) -> None:
    cmd = [sys.executable, str(GEN), str(out), "--ranks", str(PLANTED["ranks"]),
           "--slow-rank", str(PLANTED["slow_rank"]), "--slow-factor", "1.6",
           "--clock-skew-us", str(PLANTED["skew_us"]), "--slow-link", "%d-%d" % PLANTED["link"],
           "--steps", "3", "--seed", "11", *args]
    subprocess.run(cmd, check=True, capture_output=True)


def planted_offsets(fmt: str, events: int) -> np.ndarray:
    sys.path.insert(0, str(GEN.parent))
    import gen_cluster as gc

    s = gc.Settings(ranks=PLANTED["ranks"], events=events, steps=3, seed=11,
                    slow_rank=PLANTED["slow_rank"], slow_factor=1.6,
                    slow_link=PLANTED["link"], clock_skew_us=PLANTED["skew_us"], fmt=fmt)
    return gc.plan(s).offset_ns


def analyse(path: Path) -> tuple[dict, list]:
    timelines = read_path(str(path))
    assert all(tl.collectives is not None and len(tl.collectives) for tl in timelines)
    summaries = [rank_summary(tl, int(tl.meta["rank"])) for tl in timelines]
    return cross_rank(summaries), timelines


def check_planted(doc: dict, offsets: np.ndarray, tolerance_ns: int) -> None:
    assert doc["ranking"][0]["rank"] == PLANTED["slow_rank"]
    assert doc["summary"]["n_ranks"] == PLANTED["ranks"]
    assert doc["summary"]["unmatched_calls"] == 0
    got = np.array([r["offset_ns"] for r in doc["ranks"]])
    assert np.abs(got - offsets).max() < tolerance_ns
    assert all(s["critical_rank"] == PLANTED["slow_rank"] for s in doc["steps"])


def test_kineto_cluster_end_to_end(tmp_path):
    generate(tmp_path, "--events", "8000", "--gzip")
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"rank-{r}.json.gz" for r in range(8)]
    doc, _ = analyse(tmp_path)
    check_planted(doc, planted_offsets("kineto", 8000), 2_000)
    assert {c["match"] for c in doc["collectives"]} == {"seq", "p2p"}
    link = doc["slowest_link"]
    assert (link["src"], link["dst"], link["source"]) == (2, 3, "p2p")


def test_ascend_cluster_end_to_end(tmp_path):
    generate(tmp_path, "--events", "3000", "--format", "ascend")
    doc, timelines = analyse(tmp_path)
    check_planted(doc, planted_offsets("ascend", 3000), 2_000)
    assert {c["match"] for c in doc["collectives"]} == {"key"}
    for r in doc["ranks"]:  # the generator's communication.json says what each rank waited
        assert r["comm_wait_ns"] == pytest.approx(r["recorded_wait_ns"], rel=1e-3)
    assert all(tl.meta.get("comm_matrix") for tl in timelines)
    link = doc["slowest_link"]
    assert (link["src"], link["dst"], link["source"]) == (2, 3, "comm_matrix")


REAL_2RANK = ROOT / "tests" / "data" / "ascend" / "msinsight_level1_text_2rank"


def test_real_two_rank_capture_agrees_with_the_profilers_own_wait():
    """Two ranks of a real torch_npu run: rank 0 reached the first all-reduce 5.6 ms before
    rank 1. The wait found from the aligned starts agrees with the Wait Time the profiler
    measured itself on rank 0 (communication.json), and rank 1 is ranked first."""
    doc, timelines = analyse(REAL_2RANK)
    assert doc["ranking"][0]["rank"] == 1
    first = next(c for c in doc["collectives"] if c["key"] == "hcom_allReduce__586_0_1")
    assert (first["members"], first["last_rank"]) == (2, 1)
    with open(REAL_2RANK / "rank0_ascend_pt" / "ASCEND_PROFILER_OUTPUT" / "communication.json") as f:
        ops = json.load(f)["step50"]["collective"]
    measured_ms = next(v for k, v in ops.items() if k.startswith("hcom_allReduce__586_0_1@"))[
        "Communication Time Info"]["Wait Time(ms)"]
    assert first["wait_ns"] / 1e6 == pytest.approx(measured_ms, rel=0.02)
    recorded = sum(op["Communication Time Info"]["Wait Time(ms)"] for k, op in ops.items()
                   if "@" in k)
    assert doc["ranks"][0]["recorded_wait_ns"] / 1e6 == pytest.approx(recorded, rel=1e-6)
    assert doc["matrix"] and {m["source"] for m in doc["matrix"]} == {"comm_matrix"}


REAL_SENDRECV = ROOT / "tests" / "data" / "kineto" / "hta_sampled_2rank"


def test_real_sendrecv_without_peers_is_not_paired_by_order():
    """Ranks 0 and 1 of a real 128-rank NCCL run: each holds 10 SendRecv kernels whose
    calls record no peer, group or sequence. Their ends show the order does not pair
    them (rank 0's second transfer ends with rank 1's first), so none is matched and no
    straggler, wait or clock offset is claimed."""
    timelines = read_path(str(REAL_SENDRECV))
    ends = {int(tl.meta["rank"]): tl.collectives.end_ns for tl in timelines}
    assert [len(e) for e in ends.values()] == [10, 10]
    assert ends[0][1] == ends[1][0] and not np.isin(ends[0][0], ends[1])
    doc = cross_rank([rank_summary(tl, int(tl.meta["rank"])) for tl in timelines])
    assert doc["summary"]["n_matched"] == 0 and doc["summary"]["peerless_p2p_calls"] == 20
    assert all(r["caused_wait_ns"] == 0 for r in doc["ranking"])
    assert not any(r["offset_measured"] for r in doc["ranks"])
    assert any("record no peer rank" in w for w in doc["warnings"])


def test_cli_says_the_straggler_is_unknown_when_nothing_matched():
    out = subprocess.run([sys.executable, "-m", "parastream", "analyze", str(REAL_SENDRECV),
                          "--summary"], capture_output=True, text=True, check=True).stdout
    assert "straggler: unknown: no collective was matched across ranks" in out
    assert "20 point-to-point call(s) (send, recv, sendrecv) record no peer rank" in out


@pytest.mark.parametrize("fmt", ["kineto", "ascend"])
def test_generated_files_are_the_same_for_the_same_seed(tmp_path, fmt):
    for name in ("a", "b"):
        subprocess.run([sys.executable, str(GEN), str(tmp_path / name), "--ranks", "2",
                        "--events", "1500", "--format", fmt, "--clock-skew-us", "30",
                        "--slow-rank", "1", "--seed", "5"], check=True, capture_output=True)
    files = sorted(p.relative_to(tmp_path / "a") for p in (tmp_path / "a").rglob("*") if p.is_file())
    assert files
    for f in files:
        assert (tmp_path / "a" / f).read_bytes() == (tmp_path / "b" / f).read_bytes(), f
