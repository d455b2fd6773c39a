"""Baseline triage: why a multi-stream capture is (not) faster than the single-stream one.

Strictly in this order: **3a** the side stream never ran;
**3b** false parallelism (ids split, overlap_pct <= 0.05 or parallelism <= 1.05x; find
the barrier); only then **3c** true overlap without a lower wall (core contention, long
tails of TransData/BroadcastTo/MemSet, any op > 5x its baseline, host-bound gaps, more
tasks). Every verdict comes with the numbers that support it.
"""

from __future__ import annotations

import statistics
from collections import Counter

from .analyze import TAIL_TYPES
from .contention import contention_text

#: multi-stream wall must drop by at least this much to count as faster
FASTER_BY = 0.02
FALSE_PARALLELISM = 1.05
TAIL_RATIO = 5.0


def warm_captures(doc: dict) -> list[dict]:
    """The captures an analysis document's summary is over: each rank's own first
    ``dropped_cold`` are cold (its captures lie together, in ``sources`` order), else the
    document's first ``summary.dropped_cold``; all of them when none would be left."""
    caps = doc["captures"]
    dropped = {r["source"]: r["dropped_cold"] for r in doc.get("ranks", [])}
    if dropped and doc.get("sources"):
        out: list[dict] = []
        i = 0
        for info in doc["sources"]:
            n = info["captures"]
            out.extend(caps[i + dropped.get(info["source"], 0):i + n])
            i += n
        return out or caps
    return caps[doc["summary"].get("dropped_cold", 0):] or caps


def representative(doc: dict) -> dict:
    """The warm capture with the median wall (the one whose details are compared)."""
    caps = warm_captures(doc)
    walls = sorted(caps, key=lambda c: c["wall_us"])
    return walls[(len(walls) - 1) // 2]


def _compute_streams(cap: dict) -> list[dict]:
    return [s for s in cap["streams"] if s["role"] in ("main", "side")]


def triage(base: dict, multi: dict) -> dict:
    """Compare a multi-stream analysis with its single-stream baseline analysis."""
    b, m = representative(base), representative(multi)
    b_wall = base["summary"].get("median_wall_us") or b["wall_us"]
    m_wall = multi["summary"].get("median_wall_us") or m["wall_us"]
    change = 100.0 * (m_wall - b_wall) / b_wall if b_wall else 0.0
    faster = m_wall < b_wall * (1 - FASTER_BY)
    evidence: list[str] = []
    changes = op_type_changes(b, m)

    warm = warm_captures(multi)
    pcts = [c["overlap_pct_median"] for c in warm if c["overlap_pct_median"] is not None]
    med_pct = statistics.median(pcts) if pcts else 0.0
    n_points = sum(c["parallel_points_total"] for c in warm)
    streams = _compute_streams(m)
    base_streams = _compute_streams(b)
    par = m["parallelism"]

    if faster:
        verdict, summary = "faster", f"multi-stream wall is {-change:.1f}% lower than the baseline"
        evidence.append(f"median overlap_pct {med_pct:.3f} over {n_points} parallel point(s), "
                        f"parallelism {par:.3f}x")
    elif len(streams) <= 1:
        verdict = "3a"
        summary = "the side stream never ran: all compute is on one stream"
        evidence.append(f"multi capture has {len(streams)} compute stream(s) "
                        f"({', '.join(s['id'] for s in streams) or 'none'}); baseline has "
                        f"{len(base_streams)}")
        evidence.append("check that the stream switch is reached (enable switch, is_prefill "
                        "conditions, import fallbacks) and that the side ops' stream id is the "
                        "planned one")
    elif med_pct <= 0.05 or par <= FALSE_PARALLELISM or _envelope_only(warm):
        verdict = "3b"
        summary = "false parallelism: stream ids are split but the streams ran one after another"
        evidence.append(f"median overlap_pct {med_pct:.3f} (false <= 0.05), parallelism "
                        f"{par:.3f}x (false <= {FALSE_PARALLELISM}x)")
        if _envelope_only(warm):
            n_env = sum(c["verdict_counts"].get("envelope_only", 0) for c in warm)
            evidence.append(f"{n_env} point(s) are envelope-only: the side windows span their "
                            "dominators, but the side ops ran while the main stream was idle")
        barriers: Counter = Counter()
        for c in warm:
            barriers.update(c.get("barriers", {}))
        for name, n in barriers.most_common(3):
            evidence.append(f"barrier {name} started as the side window ended, while main was "
                            f"idle ({n} point(s)): pin it inside the side-stream block or change "
                            f"the partition")
        if not barriers:
            evidence.append("no barrier op found right after the side windows: look for a "
                            "dependency (event wait) that serialises the streams")
    elif med_pct < 0.5:
        verdict = "partial"
        summary = "partial overlap: the side work is only partly hidden behind the dominator"
        evidence.append(f"median overlap_pct {med_pct:.3f} (true needs >= 0.5)")
        evidence.append("enlarge the side set, pick another dominator, or move the join later")
    else:
        verdict = "3c"
        summary = "true overlap but the wall did not drop: look for contention and tails"
        evidence.append(f"median overlap_pct {med_pct:.3f}, parallelism {par:.3f}x")
    if not faster and verdict not in ("3a",):
        evidence.extend(_three_c(b, m, changes))
    shared = _shared_ops(b, m)
    doubts = []  # about the baseline itself: they come first
    if shared is not None and shared < SAME_MODEL_SHARE:
        doubts.append(f"the baseline and this capture share {shared:.0%} of their op time "
                      "by op type: are they the same model? The comparison assumes it")
    if len(base_streams) > 1:
        doubts.append(f"the baseline has {len(base_streams)} compute streams: is it a "
                      "single-stream capture?")
    doubts.extend(device_doubts(b, m))
    evidence[:0] = doubts
    return {"verdict": verdict, "summary": summary, "wall_change_pct": round(change, 3),
            "baseline_doubts": doubts,
            "baseline": {"wall_us": b_wall, "parallelism": b["parallelism"], "ops": b["ops"],
                         "source": b["source"]},
            "multi": {"wall_us": m_wall, "parallelism": par, "ops": m["ops"], "source": m["source"]},
            "median_overlap_pct": round(med_pct, 6), "evidence": evidence,
            "op_type_changes": changes}


def _envelope_only(warm: list[dict]) -> bool:
    """Whether every point that the envelope calls (partly) parallel is envelope-only: the
    side ops never ran beside main work, whatever overlap_pct says."""
    vc = [c.get("verdict_counts", {}) for c in warm]
    env = sum(v.get("envelope_only", 0) for v in vc)
    real = sum(v.get("true", 0) + v.get("partial", 0) for v in vc)
    return env > 0 and real == 0


def device_doubts(b: dict, m: dict) -> list[str]:
    """Why the baseline may come from another device: a different device name, or a
    different AI-core / vector-core / SM count, as each capture's source states them.
    Walls of two devices say nothing about streams, so these come first in the triage."""
    bd, md = b.get("device") or {}, m.get("device") or {}
    out = []
    if bd.get("name") and md.get("name") and bd["name"] != md["name"]:
        out.append(f"the baseline ran on {bd['name']}, this capture on {md['name']}: a wall "
                   "change between two devices says nothing about the streams")
    for key, what in (("sm_count", "SMs"), ("ai_core_num", "AI cores"),
                      ("vector_core_num", "vector cores")):
        x, y = bd.get(key), md.get(key)
        if x and y and x != y:
            out.append(f"the baseline's device has {x} {what}, this capture's {y}: not the same "
                       "kind of device")
    return out


#: below this share of shared op time, the baseline looks like another workload
SAME_MODEL_SHARE = 0.5


def _shared_ops(b: dict, m: dict) -> float | None:
    """The share of the two captures' op time (summed per op type or name, each side's
    largest groups) in groups both have: near 1 for the same model, near 0 for another."""
    bg, mg = b["op_stats"]["groups"], m["op_stats"]["groups"]
    if b["op_stats"]["by"] != m["op_stats"]["by"] or not bg or not mg:
        return None
    total = sum(g["total_us"] for g in bg.values()) + sum(g["total_us"] for g in mg.values())
    both = sum(bg[k]["total_us"] + mg[k]["total_us"] for k in bg.keys() & mg.keys())
    return both / total if total else None


def op_type_changes(b: dict, m: dict) -> list[dict]:
    """Per op type (or name) total time before and after, biggest change first."""
    bg, mg = b["op_stats"]["groups"], m["op_stats"]["groups"]
    rows = []
    for key in set(bg) | set(mg):
        x, y = bg.get(key), mg.get(key)
        bt = x["total_us"] if x else 0.0
        mt = y["total_us"] if y else 0.0
        ratio = (y["max_us"] / x["median_us"]) if x and y and x["median_us"] > 0 else None
        flag = None
        if ratio is not None and ratio > TAIL_RATIO:
            flag = f"max > {TAIL_RATIO:g}x baseline"
        elif any(t.lower() in key.lower() for t in TAIL_TYPES) and bt and mt > 1.2 * bt:
            flag = "long tail"
        rows.append({"type": key, "baseline_us": bt, "multi_us": mt,
                     "change_pct": round(100.0 * (mt - bt) / bt, 3) if bt else None,
                     "max_dur_ratio": round(ratio, 3) if ratio is not None else None, "flag": flag})
    rows.sort(key=lambda r: (r["flag"] is None, -abs(r["multi_us"] - r["baseline_us"]), r["type"]))
    return rows


def _three_c(b: dict, m: dict, changes: list[dict]) -> list[str]:
    out = [contention_text(c) for c in m["contention"]]
    for r in changes:
        if r["flag"]:
            out.append(f"{r['type']}: {r['baseline_us']:.3f} -> {r['multi_us']:.3f} us ({r['flag']})")
    host_b = sum(s["gaps"]["host_bound_us"] for s in b["streams"])
    host_m = sum(s["gaps"]["host_bound_us"] for s in m["streams"])
    if host_m > host_b * 1.2 and host_m > 0.05 * m["wall_us"]:
        out.append(f"host-bound gaps grew {host_b:.3f} -> {host_m:.3f} us: the host launches "
                   f"too slowly to feed both streams")
    wait_b = sum(s["gaps"]["wait_us"] for s in b["streams"] if s["role"] == "main")
    wait_m = sum(s["gaps"]["wait_us"] for s in m["streams"] if s["role"] == "main")
    if wait_m > wait_b + 0.02 * m["wall_us"]:
        out.append(f"main stream waits grew {wait_b:.3f} -> {wait_m:.3f} us (new EVENT_WAIT "
                   f"holes after the join)")
    if m["ops"] > b["ops"] * 1.05:
        out.append(f"more tasks: {b['ops']} -> {m['ops']} ops")
    return out
