"""``parastream analyze TRACE --plan plan.json``: did the run follow the plan?

Two checks (a profile verified twice over):

1. **Stream-ID placement**: every planned op found in the trace (by name) ran on the trace
   stream its logical stream maps to; logical streams map one-to-one onto trace streams.
   Side ops found on the main stream's trace id are the 3a case (the side stream never ran).
2. **overlap_pct per parallel point** from the plan's own windows: the side window is the
   envelope of the point's ops planned off stream 0, the dominator the op of the point
   planned on stream 0 that the side window overlaps most. Each point also carries
   ``busy_overlap_pct``, the share of its side ops' busy time that ops on the main stream
   cover, and its verdict takes the lower of the two: an envelope spanning the whole call
   covers any dominator, also when the side ops ran between main ops rather than beside
   them (host-bound cuda runs: overlap_pct 1.0, busy overlap 0.0, no two kernels at once).
"""

from __future__ import annotations

from collections import Counter

import numpy as np

from ..timeline import intervals as iv
from ..timeline.model import Timeline, value_flags
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
    """Placement and per-point overlap of one capture against one candidate of ``doc``:
    ``candidate``, else the one the capture names (``meta["trace_name"]``: a timeline
    'parastream run --trace' wrote names the candidate that ran in it, while the plan it
    sits beside recommends what the measurement chose, often single stream), else the
    plan's recommendation."""
    if candidate is None:
        own = tl.meta.get("trace_name")
        candidate = own if any(c.name == own for c in doc.candidates) else None
    plan: Plan = doc.candidate(candidate or doc.recommended)
    occ = _occurrences(tl)
    t0 = tl.t0_ns
    found = {n: occ[n] for n in plan.assignment if n in occ}
    missing = sorted(n for n in plan.assignment if n not in occ)
    seen: dict[int, Counter] = {}
    for n, idx in found.items():
        seen.setdefault(plan.assignment[n], Counter()).update(
            tl.streams[int(tl.stream[i])] for i in idx)
    mapping, shared = trace_stream_mapping(seen)
    misplaced = []
    for n, idx in found.items():
        want = mapping[plan.assignment[n]]
        for i in idx:
            got = tl.streams[int(tl.stream[i])]
            if got != want:
                misplaced.append({"op": n, "planned_stream": plan.assignment[n],
                                  "expected_trace_stream": want, "trace_stream": got})
                break
    # a side stream on main's trace stream is the 3a case, not a shared side stream
    verdict_3a = any(0 in g["plan_streams"] for g in shared)
    shared = [g for g in shared if 0 not in g["plan_streams"]]
    points = []
    # what main's own ops kept busy on its trace stream: side work hides behind any of
    # those, never behind side ops that ran there themselves (they would cover their own
    # time, and a side stream that never ran would read as hidden)
    side_op = value_flags(tl.names, lambda n: plan.assignment.get(n, 0) != 0)[tl.name]
    on_main = (tl.stream == tl.streams.index(mapping[0])) if 0 in mapping \
        else np.zeros(len(tl), bool)
    main_ops = on_main & ~side_op
    main_busy = iv.union(tl.start_ns[main_ops], tl.end_ns[main_ops])
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
        side_u = iv.union(tl.start_ns[side], tl.end_ns[side])
        side_busy = iv.length(side_u)
        busy_pct = (iv.intersection_length(side_u, main_busy) / side_busy) if side_busy else 0.0
        points.append({"parallel_point": p.get("name"), "found": True,
                       "side_window_us": [round((side_lo - t0) / 1000, 3), round((side_hi - t0) / 1000, 3)],
                       "dominator": {"name": tl.op_name(dom),
                                     "window_us": [round((int(tl.start_ns[dom]) - t0) / 1000, 3),
                                                   round((int(tl.end_ns[dom]) - t0) / 1000, 3)]},
                       "overlap_us": round(ov / 1000, 3), "overlap_pct": round(pct, 6),
                       "busy_overlap_pct": round(busy_pct, 6),
                       "verdict": verdict(min(pct, busy_pct))})
    return {"candidate": plan.name, "ops_planned": len(plan.assignment), "ops_found": len(found),
            "missing": missing[:20], "missing_count": len(missing),
            "stream_mapping": {str(k): v for k, v in sorted(mapping.items())},
            "misplaced": misplaced[:50], "misplaced_count": len(misplaced),
            "side_stream_never_ran": verdict_3a, "shared_trace_streams": shared,
            "parallel_points": points}


def plan_check_notes(pc: dict) -> list[str]:
    """The plain sentences a plan check's findings read as (3a, side streams that ran as
    one), for every report to escape and lay out its own way."""
    notes = []
    if pc.get("side_stream_never_ran"):
        notes.append("3a: a side stream ran on the main stream's id: the stream switch did "
                     "not take effect")
    for g in pc.get("shared_trace_streams") or []:
        notes.append(f"side streams {', '.join(map(str, g['plan_streams']))} all ran on "
                     f"trace stream {g['trace_stream']}: planned apart, they ran as one")
    return notes


def trace_stream_mapping(seen: dict[int, Counter]) -> tuple[dict[int, str], list[dict]]:
    """Which trace stream each logical stream ran on, one to one: the (logical, trace)
    pairs that hold the most ops are taken first, a trace stream named like the logical
    one first on a tie (the cpu and cuda backends keep the plan's ids), each side taken
    once. Half of a side stream's ops moved to the main stream, or to a new one, so no
    longer takes the stream the other half ran on where planned (the ops that stayed were
    named misplaced). A logical stream left without a trace stream of its own (its ops ran
    on streams others hold) maps to where most of them ran, and is listed with the streams
    it shares (two side streams that ran as one went unreported)."""
    pairs = sorted(((n, lab != str(s), s, lab) for s, c in seen.items() for lab, n in c.items()),
                   key=lambda p: (-p[0], p[1], p[2], p[3]))
    mapping: dict[int, str] = {}
    used: set[str] = set()
    for _, _, s, lab in pairs:
        if s not in mapping and lab not in used:
            mapping[s] = lab
            used.add(lab)
    by_trace: dict[str, list[int]] = {}
    for s, c in seen.items():
        if s not in mapping:
            mapping[s] = c.most_common(1)[0][0]
    for s, lab in mapping.items():
        by_trace.setdefault(lab, []).append(s)
    shared = [{"trace_stream": lab, "plan_streams": sorted(ss)}
              for lab, ss in sorted(by_trace.items()) if len(ss) > 1]
    return mapping, shared
