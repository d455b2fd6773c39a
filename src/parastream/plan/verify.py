"""``parastream analyze TRACE --plan plan.json``: did the run follow the plan?

Two checks from seed 002's "profile double verification":

1. **Stream-ID placement**: every planned op found in the trace (by name) ran on the trace
   stream its logical stream maps to; logical streams map one-to-one onto trace streams.
   Side ops found on the main stream's trace id are the 3a case (the side stream never ran).
2. **overlap_pct per parallel point** from the plan's own windows: the side window is the
   envelope of the point's ops planned off stream 0, the dominator the op of the point
   planned on stream 0 that the side window overlaps most.
"""

from __future__ import annotations

from collections import Counter

import numpy as np

from ..timeline.model import Timeline
from ..timeline.overlap import overlap_pct, verdict
from .io import PlanDoc
from .model import Plan


def _occurrences(tl: Timeline) -> dict[str, list[int]]:
    """Op indices per name (in start order)."""
    out: dict[str, list[int]] = {}
    for i, code in enumerate(tl.name.tolist()):
        out.setdefault(tl.names[code], []).append(i)
    return out


def verify(tl: Timeline, doc: PlanDoc, candidate: str | None = None) -> dict:
    """Placement and per-point overlap of one capture against one candidate of ``doc``."""
    plan: Plan = doc.candidate(candidate or doc.recommended)
    occ = _occurrences(tl)
    t0 = tl.t0_ns
    found = {n: occ[n] for n in plan.assignment if n in occ}
    missing = sorted(n for n in plan.assignment if n not in occ)
    # which trace stream each logical stream ran on (majority over its ops)
    seen: dict[int, Counter] = {}
    for n, idx in found.items():
        seen.setdefault(plan.assignment[n], Counter()).update(
            tl.streams[int(tl.stream[i])] for i in idx)
    mapping = {s: c.most_common(1)[0][0] for s, c in seen.items()}
    misplaced = []
    for n, idx in found.items():
        want = mapping[plan.assignment[n]]
        for i in idx:
            got = tl.streams[int(tl.stream[i])]
            if got != want:
                misplaced.append({"op": n, "planned_stream": plan.assignment[n],
                                  "expected_trace_stream": want, "trace_stream": got})
                break
    merged = [s for s, lab in mapping.items() if s != 0 and lab == mapping.get(0)]
    verdict_3a = bool(merged)
    points = []
    for p in doc.parallel_points:
        if p.get("name") != plan.parallel_point and plan.parallel_point is not None:
            continue
        members = [n for b in p.get("branches", []) for n in b]
        side = [i for n in members if plan.assignment.get(n, 0) != 0 for i in found.get(n, [])]
        main = [i for n in members if plan.assignment.get(n, 0) == 0 for i in found.get(n, [])]
        if not side or not main:
            points.append({"parallel_point": p.get("name"), "found": False,
                           "reason": "no side op or no main op of this point in the trace"})
            continue
        side_lo = int(np.min(tl.start_ns[side]))
        side_hi = int(np.max(tl.end_ns[side]))
        # the dominator: the planned main-stream op the side work overlaps most (the op it
        # hides behind), the longest one on a tie or when nothing overlaps
        def _ov(i: int) -> int:
            return max(0, min(side_hi, int(tl.end_ns[i])) - max(side_lo, int(tl.start_ns[i])))

        dom = max(main, key=lambda i: (_ov(i), int(tl.end_ns[i] - tl.start_ns[i])))
        ov, pct = overlap_pct((side_lo, side_hi), (int(tl.start_ns[dom]), int(tl.end_ns[dom])))
        points.append({"parallel_point": p.get("name"), "found": True,
                       "side_window_us": [round((side_lo - t0) / 1000, 3), round((side_hi - t0) / 1000, 3)],
                       "dominator": {"name": tl.op_name(dom),
                                     "window_us": [round((int(tl.start_ns[dom]) - t0) / 1000, 3),
                                                   round((int(tl.end_ns[dom]) - t0) / 1000, 3)]},
                       "overlap_us": round(ov / 1000, 3), "overlap_pct": round(pct, 6),
                       "verdict": verdict(pct)})
    return {"candidate": plan.name, "ops_planned": len(plan.assignment), "ops_found": len(found),
            "missing": missing[:20], "missing_count": len(missing),
            "stream_mapping": {str(k): v for k, v in sorted(mapping.items())},
            "misplaced": misplaced[:50], "misplaced_count": len(misplaced),
            "side_stream_never_ran": verdict_3a, "parallel_points": points}
