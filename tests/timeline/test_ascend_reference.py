"""Ascend's own comm/comp overlap beside parastream's, on real torch_npu captures."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from parastream.timeline.analyze import Options, analyze
from parastream.timeline.readers import read_path

DATA = Path(__file__).parent.parent / "data" / "ascend"


def _ascend_pct(folder: Path) -> float:
    """100 x Overlapped / Communication summed over the rows of step_trace_time.csv,
    read here independently of the reader."""
    (f,) = folder.rglob("step_trace_time.csv")
    rows = list(csv.DictReader(f.open(encoding="utf-8-sig")))
    over = sum(float(r["Overlapped"]) for r in rows)
    comm = sum(float(r["Communication"]) for r in rows)
    return 100 * over / comm


@pytest.mark.parametrize("level", ["level0", "level1", "level2"])
def test_text_capture_carries_ascend_figure_within_two_points(level):
    folder = DATA / f"msinsight_{level}_text"
    doc = analyze(read_path(str(folder)), Options(cold=0))
    (cap,) = doc["captures"]
    ref = cap["ascend_reference"]
    assert ref["scope"] == "file"
    assert ref["overlapped_pct"] == pytest.approx(_ascend_pct(folder), abs=1e-3)
    assert abs(cap["comm_comp_overlap_pct"] - ref["overlapped_pct"]) <= 2.0
    # the main stream is a compute stream, communication has its own role
    (main,) = [s for s in cap["streams"] if s["role"] == "main"]
    comm = [s for s in cap["streams"] if s["role"] == "comm"]
    assert comm and main["id"] not in {s["id"] for s in comm}
    assert main["busy_us"] < sum(s["busy_us"] for s in comm)  # not the busiest: compute


def test_a_step_capture_takes_its_own_step_figure():
    from parastream.timeline.analyze import ascend_reference
    from parastream.timeline.model import TimelineBuilder

    b = TimelineBuilder("s", "test")
    b.add_op("2", "mm", 0, 10, step=1)
    tl = b.build()
    tl.meta["ascend_step_trace"] = {"source": "x.csv", "overlapped_pct": 50.0,
                                    "steps": {"1": {"communication": 200.0, "overlapped": 20.0}}}
    assert ascend_reference(tl) == {"overlapped_pct": 50.0, "scope": "file", "source": "x.csv"}
    tl.meta["step"] = 1
    assert ascend_reference(tl)["overlapped_pct"] == 10.0
    tl.meta["step"] = 2
    assert ascend_reference(tl) is None  # that step is not in Ascend's table
