"""Ascend's own time split (step_trace_time.csv, analysis.db, Overlap Analysis) in meta."""

from __future__ import annotations

import csv
import pathlib
import shutil
import sqlite3

import pytest

from parastream.timeline.comm import comm_comp_overlap_pct
from parastream.timeline.readers import step_trace
from parastream.timeline.readers.directory import read_dir

DATA = pathlib.Path(__file__).resolve().parents[2] / "data" / "ascend"
TEXT_L1 = DATA / "msinsight_level1_text" / "rank0_ascend_pt"
HEADER = ("Step,Computing,Communication(Not Overlapped),Overlapped,Communication,Free,"
          "Stage,Bubble,Communication(Not Overlapped and Exclude Receive),Preparing")


def write_csv(path: pathlib.Path, header: str, rows: list[str]) -> pathlib.Path:
    path.write_text("\n".join([header, *rows]) + "\n")
    return path


def test_steps_are_summed_and_the_overlap_is_overlapped_over_communication(tmp_path):
    p = write_csv(tmp_path / "step_trace_time.csv", HEADER,
                  ["3,10.0,6.0,4.0,10.0,1.0,20.0,0,6.0,0", "4,10.0,9.0,1.0,10.0,1.0,20.0,0,9.0,0"])
    st = step_trace.read_csv(str(p))
    assert set(st.steps) == {"3", "4"}
    assert st.totals()["communication"] == 20.0 and st.totals()["overlapped"] == 5.0
    assert st.overlapped_pct() == 25.0


def test_rows_of_other_devices_are_skipped(tmp_path):
    p = write_csv(tmp_path / "step_trace_time.csv", "Device_id," + HEADER,
                  ["0,3,10.0,6.0,4.0,10.0,1.0,20.0,0,6.0,0",
                   "1,3,10.0,10.0,0.0,10.0,1.0,20.0,0,10.0,0"])
    assert step_trace.read_csv(str(p), device_id=0).overlapped_pct() == 40.0
    assert step_trace.read_csv(str(p), device_id=1).overlapped_pct() == 0.0
    # device unknown: both, named apart
    assert set(step_trace.read_csv(str(p)).steps) == {"3 device 0", "3 device 1"}


@pytest.mark.parametrize("text", ["", "Step,Computing\n1,2.0\n", "not,a\ncsv"])
def test_a_file_without_the_figures_gives_none(tmp_path, text):
    p = tmp_path / "step_trace_time.csv"
    p.write_text(text)
    assert step_trace.read_csv(str(p)) is None


def test_analysis_db_without_the_table_gives_none(tmp_path):
    p = tmp_path / "analysis.db"
    con = sqlite3.connect(p)
    con.execute("CREATE TABLE other (a INTEGER)")
    con.commit()
    con.close()
    assert step_trace.read_analysis_db(str(p)) is None
    assert step_trace.read_analysis_db(str(tmp_path / "missing.db")) is None


def copy_capture(tmp_path: pathlib.Path) -> pathlib.Path:
    dst = tmp_path / "rank0_ascend_pt"
    shutil.copytree(TEXT_L1, dst)
    for p in dst.rglob("*"):
        p.chmod(0o755 if p.is_dir() else 0o644)
    return dst


def test_a_disagreement_past_two_points_is_a_warning(tmp_path):
    cap = copy_capture(tmp_path)
    f = cap / "ASCEND_PROFILER_OUTPUT" / "step_trace_time.csv"
    with open(f, newline="") as fh:
        rows = list(csv.DictReader(fh))
    # Ascend says half the communication was hidden; parastream measures about 4%
    for r in rows:
        r["Overlapped"] = str(float(r["Communication"]) / 2)
    with open(f, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    (tl,) = read_dir(cap)
    assert tl.meta["ascend_overlapped_pct"] == pytest.approx(50.0)
    ours = comm_comp_overlap_pct(tl)
    (warning,) = [w for w in tl.warnings if "Ascend's own figure" in w]
    assert f"{ours:.2f}%" in warning and "50.00%" in warning and "step_trace_time.csv" in warning


def test_attach_replaces_its_earlier_figures_and_warning(tmp_path):
    (tl,) = read_dir(copy_capture(tmp_path))
    far = step_trace.StepTrace("a.csv", {"1": {"communication": 10.0, "overlapped": 9.0}})
    step_trace.attach(tl, far)
    assert len([w for w in tl.warnings if "Ascend's own figure" in w]) == 1
    step_trace.attach(tl, far)
    assert len([w for w in tl.warnings if "Ascend's own figure" in w]) == 1
    near = step_trace.StepTrace("b.csv", {"1": {"communication": 10.0,
                                               "overlapped": comm_comp_overlap_pct(tl) / 10}})
    step_trace.attach(tl, near)
    assert not [w for w in tl.warnings if "Ascend's own figure" in w]
    assert tl.meta["ascend_step_trace_source"] == "b.csv"


def test_meta_values_the_analysis_copies_are_scalars():
    (tl,) = read_dir(TEXT_L1)
    flat = {k: v for k, v in tl.meta.items() if k.startswith("ascend_") and k != "ascend_step_trace"}
    assert {"ascend_overlapped_pct", "ascend_communication_us", "ascend_overlapped_us",
            "ascend_computing_us", "ascend_free_us", "ascend_step_trace_source"} <= set(flat)
    assert all(isinstance(v, (str, int, float)) for v in flat.values())


def test_overlap_analysis_of_trace_view():
    st = step_trace.from_overlap_analysis("t.json", {"Communication": 10_000,
                                                     "Communication(Not Overlapped)": 7_500,
                                                     "Computing": 3_000})
    assert st.overlapped_pct() == 25.0 and st.totals()["computing"] == 3.0
    assert step_trace.from_overlap_analysis("t.json", {"Computing": 1}) is None
