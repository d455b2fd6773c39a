"""Ascend's own per-step time split, as a reference for parastream's comm/comp overlap.

torch_npu writes, per step, how the device time divides: ``Computing``, ``Communication``
(the union of collectives), ``Overlapped`` (communication hidden under computing),
``Communication(Not Overlapped)``, ``Free``, ... (microseconds). Sources:

* ``ASCEND_PROFILER_OUTPUT/step_trace_time.csv`` (text export): header ``Step,Computing,
  Communication(Not Overlapped),Overlapped,Communication,Free,Stage,Bubble,...``; some
  versions add ``Device_id``;
* the ``StepTraceTime`` table of ``ASCEND_PROFILER_OUTPUT/analysis.db`` (database export),
  the same figures under snake_case names;
* the ``Overlap Analysis`` process of ``trace_view.json`` (slice totals per thread;
  Overlapped = Communication - Communication(Not Overlapped)).

:func:`attach` puts the figures into a timeline's ``meta``: the flat, JSON-scalar keys
``ascend_overlapped_pct`` (100 x Overlapped / Communication over the whole file, the
figure to set beside parastream's ``comm_comp_overlap_pct``), ``ascend_computing_us``,
``ascend_communication_us``, ``ascend_overlapped_us``, ``ascend_free_us``,
``ascend_step_trace_source``, and the nested ``ascend_step_trace`` (source, totals,
overlapped_pct, per-step figures). When parastream's figure differs from Ascend's by more
than :data:`TOLERANCE_POINTS`, a warning says so.
"""

from __future__ import annotations

import csv
import io
import math
import os
import sqlite3
from dataclasses import dataclass, field

from ..model import Timeline

#: parastream and Ascend may disagree by this many percentage points before a warning
TOLERANCE_POINTS = 2.0
FILE_NAME = "step_trace_time.csv"
DB_NAME = "analysis.db"

# canonical field -> spellings (CSV header, analysis.db column), matched case-insensitively
_FIELDS = {
    "computing": ("Computing",),
    "comm_not_overlapped": ("Communication(Not Overlapped)", "communication_not_overlapped"),
    "overlapped": ("Overlapped",),
    "communication": ("Communication",),
    "free": ("Free",),
}
_STEP = ("Step", "step")
_DEVICE = ("Device_id", "Device ID", "deviceId", "device_id")
_WARN_TAG = "Ascend's own figure"


@dataclass
class StepTrace:
    """Ascend's time split of one capture: per step and summed, in microseconds."""

    source: str
    steps: dict[str, dict[str, float]] = field(default_factory=dict)

    def totals(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for figures in self.steps.values():
            for k, v in figures.items():
                out[k] = out.get(k, 0.0) + v
        return out

    def overlapped_pct(self) -> float | None:
        """100 x Overlapped / Communication over every step; None without communication."""
        t = self.totals()
        comm, over = t.get("communication"), t.get("overlapped")
        if comm is None or over is None or comm <= 0:
            return None
        return 100.0 * over / comm


def _number(text) -> float | None:
    try:
        v = float(str(text).strip().rstrip("\t"))
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


def _row_figures(row: dict[str, str]) -> dict[str, float]:
    by_norm = {str(k).strip().lower(): v for k, v in row.items() if k is not None}
    out = {}
    for key, spellings in _FIELDS.items():
        for s in spellings:
            v = _number(by_norm.get(s.lower()))
            if v is not None:
                out[key] = v
                break
    return out


def _pick(row: dict[str, str], spellings: tuple[str, ...]) -> str | None:
    by_norm = {str(k).strip().lower(): v for k, v in row.items() if k is not None}
    for s in spellings:
        if s.lower() in by_norm and by_norm[s.lower()] not in (None, ""):
            return str(by_norm[s.lower()]).strip()
    return None


def _from_rows(source: str, rows: list[dict], device_id=None) -> StepTrace | None:
    st = StepTrace(source)
    for n, row in enumerate(rows):
        dev = _pick(row, _DEVICE)
        if device_id is not None and dev is not None and dev != str(device_id):
            continue
        figures = _row_figures(row)
        if "communication" not in figures or "overlapped" not in figures:
            continue
        step = _pick(row, _STEP) or str(n)
        if dev is not None and device_id is None:
            step = f"{step} device {dev}"
        st.steps[step] = figures
    return st if st.steps else None


def read_csv(path: str, device_id=None) -> StepTrace | None:
    """``step_trace_time.csv``; None when it is unreadable or has no step with
    Communication and Overlapped figures. Rows of other devices than ``device_id``
    (when both are known) are skipped."""
    try:
        with open(path, "rb") as f:
            text = f.read(1 << 22).decode("utf-8-sig", errors="replace")
    except OSError:
        return None
    try:
        rows = list(csv.DictReader(io.StringIO(text)))
    except csv.Error:
        return None
    return _from_rows(path, rows, device_id)


def read_analysis_db(path: str, device_id=None) -> StepTrace | None:
    """The ``StepTraceTime`` table of a torch_npu ``analysis.db``; None without one."""
    from .ascend_db import connect_ro
    from ...errors import InputError

    try:
        con = connect_ro(path)
    except InputError:
        return None
    try:
        names = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        if "StepTraceTime" not in names:
            return None
        cur = con.execute('SELECT * FROM "StepTraceTime"')
        cols = [d[0] for d in cur.description]
        rows = [dict(zip(cols, r)) for r in cur.fetchall()]
    except sqlite3.Error:
        return None
    finally:
        con.close()
    return _from_rows(path, rows, device_id)


def from_overlap_analysis(source: str, totals_ns: dict[str, int]) -> StepTrace | None:
    """The ``Overlap Analysis`` slice totals of a trace_view.json (ns), as one step."""
    comm = totals_ns.get("Communication")
    not_over = totals_ns.get("Communication(Not Overlapped)")
    if comm is None or not_over is None:
        return None
    figures = {"communication": comm / 1000, "comm_not_overlapped": not_over / 1000,
               "overlapped": (comm - not_over) / 1000}
    for key, name in (("computing", "Computing"), ("free", "Free")):
        if name in totals_ns:
            figures[key] = totals_ns[name] / 1000
    return StepTrace(source, {"all": figures})


def attach(tl: Timeline, st: StepTrace) -> None:
    """Put Ascend's figures into ``tl.meta`` (replacing earlier ones) and warn when
    parastream's comm/comp overlap differs from Ascend's by more than the tolerance."""
    from ..comm import comm_comp_overlap_pct

    totals = st.totals()
    pct = st.overlapped_pct()
    tl.meta["ascend_step_trace"] = {
        "source": st.source, "totals_us": {k: round(v, 3) for k, v in totals.items()},
        "overlapped_pct": None if pct is None else round(pct, 4),
        "steps": {k: {f: round(v, 3) for f, v in fig.items()} for k, fig in st.steps.items()},
    }
    tl.meta["ascend_step_trace_source"] = st.source
    for key, name in (("computing", "computing"), ("communication", "communication"),
                      ("overlapped", "overlapped"), ("free", "free")):
        if key in totals:
            tl.meta[f"ascend_{name}_us"] = round(totals[key], 3)
    tl.warnings[:] = [w for w in tl.warnings if _WARN_TAG not in w]
    if pct is None:
        tl.meta.pop("ascend_overlapped_pct", None)
        return
    tl.meta["ascend_overlapped_pct"] = round(pct, 4)
    ours = comm_comp_overlap_pct(tl)
    if ours is None:
        tl.warnings.append(f"no communication op recognised, but {_WARN_TAG} "
                           f"({os.path.basename(st.source)}) has {totals['communication']:,.3f} "
                           f"us of communication")
    elif abs(ours - pct) > TOLERANCE_POINTS:
        tl.warnings.append(f"comm/comp overlap {ours:.2f}% differs from {_WARN_TAG} "
                           f"{pct:.2f}% (Overlapped / Communication in "
                           f"{os.path.basename(st.source)}) by {abs(ours - pct):.2f} points")
