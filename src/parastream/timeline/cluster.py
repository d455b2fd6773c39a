"""Cross-rank answers: which rank made the others wait, per collective, per step and per
rank, and the communication matrix.

Two steps, so that the per-rank work runs where each trace lies:

- :func:`rank_summary` reduces one rank's whole timeline to a small picklable
  :class:`RankSummary` (its collective calls, step spans and communication figures);
- :func:`cross_rank` matches the same collective across the summaries, aligns the ranks'
  clocks by the collectives' ends, measures who arrived last and how long the others
  waited, and returns one JSON-able document (deterministic for the same input):

``ranking``
    every rank, the one that made the others wait most first: ``rank``,
    ``caused_wait_ns`` (the others' wait in the collectives it arrived last at),
    ``times_last``, ``last_share_pct`` (of the matched collectives it took part in) and a
    one-line ``reason``.
``slowest_link``
    the rank pair of lowest achieved bandwidth (see :mod:`.cluster_matrix`), or None.
``ranks``
    per rank: ``rank``, ``offset_ns`` (its clock minus the reference rank's; subtract it
    to align), ``offset_measured``, ``collectives`` (calls recorded), ``matched``,
    ``wall_ns``, ``comm_busy_ns``, ``comm_exposed_ns``, ``overlap_pct``,
    ``comm_wait_ns`` (time inside collectives waiting for the last arrival),
    ``recorded_wait_ns`` (the wait the profiler measured itself, where it did; else None),
    ``wait_share_pct`` (of its wall), ``times_last``, ``caused_wait_ns``.
``steps``
    per step id (-1 when the sources have no steps): ``step``, ``critical_rank`` (the
    rank whose late arrivals the others waited for most; None when nobody waited),
    ``waited_ns`` (the others' wait for it), ``total_wait_ns``, ``max_skew_ns``,
    ``collectives``, ``wait_ns_by_rank`` (aligned with ``ranks``, for a rank x step heat
    map) and the ranks' own step figures ``comm_exposed_ns_by_rank`` and
    ``overlap_pct_by_rank``.
``collectives``
    per matched collective, by aligned first arrival: ``op``, ``group``, ``match`` (one
    of :data:`~.cluster_match.MATCH_KINDS`), ``seq``, ``key``, ``step``, ``members``,
    ``expected`` (the group's size where known), ``first_arrival_ns`` (aligned, from the
    earliest aligned arrival of all), ``skew_ns``, ``last_rank``, ``wait_ns`` (the
    others' summed wait), ``transfer_ns``, ``nbytes``.
``matrix``
    rows ``src``, ``dst``, ``bytes``, ``time_ns``, ``bandwidth_gbps``, ``source``
    (``comm_matrix``, ``p2p`` or ``ring``) and ``transport``.
``summary``
    ``n_ranks``, ``n_steps``, ``n_calls``, ``n_matched``, ``unmatched_calls``,
    ``outside_group_calls``, ``peerless_p2p_calls`` (point-to-point calls that name no
    peer: not matched), ``partial_collectives``, ``size_mismatched_collectives``,
    ``max_skew_ns``, ``median_skew_ns``, ``reference_rank``.
``warnings``
    one line each.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from . import intervals as iv
from .cluster_match import (MATCH_KINDS, Arrivals, Instances, arrivals, call_steps,
                            clock_offsets, latest_step, match_calls, pool_calls)
from .cluster_matrix import LinkRows, comm_matrix, link_rows, slowest_link
from .collectives import Collectives
from .model import KIND_COMM, KIND_COMPUTE, Timeline

#: the step id of a rank whose source has no steps (its whole span is one step)
NO_STEP = -1


@dataclass(frozen=True)
class RankSummary:
    """What :func:`cross_rank` needs of one rank: no per-op arrays but the collective
    calls. Step arrays are aligned (``step_id`` ascending); ``step_overlap_pct`` is NaN
    where a step has no communication; ``overlap_pct`` is None without communication."""

    rank: int
    source: str
    collectives: Collectives
    step_id: np.ndarray
    step_start_ns: np.ndarray
    step_end_ns: np.ndarray
    wall_start_ns: int
    wall_end_ns: int
    comm_busy_ns: int
    comm_exposed_ns: int
    overlap_pct: float | None
    step_comm_busy_ns: np.ndarray
    step_comm_exposed_ns: np.ndarray
    step_overlap_pct: np.ndarray
    links: LinkRows = field(default_factory=LinkRows)
    warnings: tuple[str, ...] = ()
    #: the wait the profiler measured itself inside the rank's collectives (Ascend's
    #: communication.json "Wait Time", ``tl.meta["hccl_wait_ns"]``), summed; None if absent
    recorded_wait_ns: int | None = None

    @property
    def wall_ns(self) -> int:
        return self.wall_end_ns - self.wall_start_ns


def _covered_before(u: iv.Union_, t: np.ndarray) -> np.ndarray:
    """Time the union covers before each time in ``t``."""
    s, e = u
    if not s.size:
        return np.zeros(t.shape[0], np.int64)
    before = np.r_[0, np.cumsum(e - s)]
    k = np.searchsorted(s, t, side="right")
    inside = np.clip(t - s[np.maximum(k - 1, 0)], 0, (e - s)[np.maximum(k - 1, 0)])
    return before[np.maximum(k - 1, 0)] + np.where(k > 0, inside, 0)


def covered_in(u: iv.Union_, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Time the union covers inside each window [lo, hi]."""
    return _covered_before(u, hi) - _covered_before(u, lo)


def _step_spans(tl: Timeline, wall: tuple[int, int]) -> tuple[np.ndarray, ...]:
    """(step id, first start, last end) of each step of the ops; one step
    :data:`NO_STEP` over the wall when the source has none."""
    has = tl.step >= 0
    if not has.any():
        return (np.array([NO_STEP], np.int64), np.array([wall[0]], np.int64),
                np.array([wall[1]], np.int64))
    step = tl.step[has].astype(np.int64)
    order = np.argsort(step, kind="stable")
    step = step[order]
    cut = np.flatnonzero(np.r_[True, step[1:] != step[:-1]])
    lo = np.minimum.reduceat(tl.start_ns[has][order], cut)
    hi = np.maximum.reduceat(tl.end_ns[has][order], cut)
    return step[cut], lo.astype(np.int64), hi.astype(np.int64)


def _wall(tl: Timeline, coll: Collectives) -> tuple[int, int]:
    lo = [int(a.min()) for a in (tl.start_ns, coll.start_ns) if a.size]
    hi = [int(a.max()) for a in (tl.end_ns, coll.end_ns) if a.size]
    return (min(lo), max(hi)) if lo else (0, 0)


def rank_summary(timeline: Timeline, rank: int) -> RankSummary:
    """One rank's summary, from its whole timeline (before steps are split)."""
    tl = timeline
    coll = tl.collectives if tl.collectives is not None else Collectives()
    wall = _wall(tl, coll)
    step_id, lo, hi = _step_spans(tl, wall)
    comm, comp = tl.kind == KIND_COMM, tl.kind == KIND_COMPUTE
    u_comm = iv.union(tl.start_ns[comm], tl.end_ns[comm])
    hidden = iv.intersect(u_comm, iv.union(tl.start_ns[comp], tl.end_ns[comp]))
    comm_ns, hidden_ns = iv.length(u_comm), iv.length(hidden)
    busy = covered_in(u_comm, lo, hi)
    step_hidden = covered_in(hidden, lo, hi)
    with np.errstate(invalid="ignore", divide="ignore"):
        step_pct = np.where(busy > 0, 100.0 * step_hidden / np.maximum(busy, 1), np.nan)
    warnings = ()
    if not len(coll):
        warnings = (f"rank {rank}: no collective calls recorded",)
    return RankSummary(
        rank=int(rank), source=str(tl.source), collectives=coll, step_id=step_id,
        step_start_ns=lo, step_end_ns=hi, wall_start_ns=wall[0], wall_end_ns=wall[1],
        comm_busy_ns=comm_ns, comm_exposed_ns=comm_ns - hidden_ns,
        overlap_pct=100.0 * hidden_ns / comm_ns if comm_ns else None,
        step_comm_busy_ns=busy.astype(np.int64),
        step_comm_exposed_ns=(busy - step_hidden).astype(np.int64),
        step_overlap_pct=step_pct, links=link_rows(tl.meta.get("comm_matrix")),
        warnings=warnings, recorded_wait_ns=_recorded_wait(tl.meta.get("hccl_wait_ns")))


def _recorded_wait(waits: object) -> int | None:
    """The sum of the per-op waits a source recorded (op key -> ns), None without."""
    if not isinstance(waits, dict) or not waits:
        return None
    return int(sum(int(v) for v in waits.values() if v is not None and v >= 0))


# --------------------------------------------------------------------------- cross-rank
@dataclass(frozen=True)
class _Cluster:
    """The pooled, matched and aligned collectives of all summaries."""

    summaries: list
    m: Instances
    arr: Arrivals
    offsets: np.ndarray
    measured: np.ndarray
    steps: np.ndarray
    inst_step: np.ndarray

    @property
    def n_ranks(self) -> int:
        return len(self.summaries)

    @cached_property
    def caused_wait(self) -> np.ndarray:
        """Per matched collective, the ns its members waited in it: what the last to
        arrive cost the others."""
        return np.bincount(self.m.inst, weights=self.arr.wait, minlength=len(self.m))

    @cached_property
    def expected(self) -> np.ndarray:
        """Per matched collective, its group's size where the group's ranks are known
        (2 for a send/receive pair), else -1."""
        calls = self.m.calls
        sizes = np.array([len(calls.group_ranks.get(g, ())) or -1 for g in calls.groups]
                         + [-1], np.int64)
        grp = calls.group[self.m.first]
        return np.where(self.m.kind == MATCH_KINDS.index("p2p"), 2, sizes[grp])


def _instance_steps(summaries: list[RankSummary], m: Instances) -> np.ndarray:
    """Step id of each instance: the step whose span holds the first member's start on
    that member's own clock (the latest step starting before it, else the first)."""
    out = np.full(len(m), NO_STEP, np.int64)
    if not len(m):
        return out
    rank = m.calls.rank[m.first]
    start = m.calls.start[m.first]
    for r in np.unique(rank).tolist():
        s = summaries[r]
        sel = rank == r
        k = latest_step(start[sel], s.step_start_ns)
        out[sel] = s.step_id[np.where(k >= 0, k, np.argmin(s.step_start_ns))]
    return out


def _prepare(summaries: list[RankSummary]) -> _Cluster:
    summaries = sorted(summaries, key=lambda s: s.rank)
    ranks = [s.rank for s in summaries]
    if len(set(ranks)) != len(ranks):
        dup = next(r for r in ranks if ranks.count(r) > 1)
        raise ValueError(f"rank {dup} is summarised more than once")
    stepped = all((s.step_id >= 0).any() for s in summaries)
    call_step = [call_steps(s.collectives.start_ns, s.step_id, s.step_start_ns, s.step_end_ns)
                 for s in summaries] if stepped else None
    m = match_calls(pool_calls([s.collectives for s in summaries], ranks, call_step))
    offsets, measured = clock_offsets(m)
    arr = arrivals(m, offsets)
    steps = np.unique(np.concatenate([s.step_id for s in summaries] or [np.zeros(0, np.int64)]))
    return _Cluster(summaries=summaries, m=m, arr=arr, offsets=offsets, measured=measured,
                    steps=steps, inst_step=_instance_steps(summaries, m))


def _per_rank_sums(c: _Cluster) -> dict[str, np.ndarray]:
    """Per rank index: wait inside collectives, matched calls, times last (of the
    collectives where someone waited) and the others' wait it caused."""
    n, m, arr = c.n_ranks, c.m, c.arr
    rank = m.calls.rank
    late = arr.skew > 0
    return {
        "wait": np.bincount(rank, weights=arr.wait, minlength=n),
        "matched": np.bincount(rank, minlength=n),
        "last": np.bincount(arr.last_rank[late], minlength=n),
        "caused": np.bincount(arr.last_rank, weights=c.caused_wait, minlength=n),
    }


def _pct(part: float, whole: float) -> float | None:
    return round(100.0 * part / whole, 3) if whole > 0 else None


def _rank_rows(c: _Cluster, sums: dict[str, np.ndarray]) -> list[dict]:
    rows = []
    for i, s in enumerate(c.summaries):
        rows.append({
            "rank": s.rank, "offset_ns": int(c.offsets[i]),
            "offset_measured": bool(c.measured[i]), "collectives": len(s.collectives),
            "matched": int(sums["matched"][i]), "wall_ns": int(s.wall_ns),
            "comm_busy_ns": int(s.comm_busy_ns), "comm_exposed_ns": int(s.comm_exposed_ns),
            "overlap_pct": None if s.overlap_pct is None else round(float(s.overlap_pct), 3),
            "comm_wait_ns": int(round(sums["wait"][i])),
            "recorded_wait_ns": s.recorded_wait_ns,
            "wait_share_pct": _pct(float(sums["wait"][i]), float(s.wall_ns)),
            "times_last": int(sums["last"][i]), "caused_wait_ns": int(round(sums["caused"][i])),
        })
    return rows


def _reason(row: dict, n_steps: int) -> str:
    if not row["times_last"]:
        return "never arrived last"
    share = row["last_share_pct"] or 0.0
    per_step_ms = row["caused_wait_ns"] / max(n_steps, 1) / 1e6
    spec = ",.0f" if per_step_ms >= 10 else ".1f" if per_step_ms >= 1 else ".3f"
    return (f"arrived last at {share:.0f}% of collectives, others waited "
            f"{per_step_ms:{spec}} ms per step")


def _ranking(rank_rows: list[dict], n_steps: int) -> list[dict]:
    out = []
    for row in sorted(rank_rows, key=lambda r: (-r["caused_wait_ns"], -r["times_last"],
                                                 r["rank"])):
        entry = {"rank": row["rank"], "caused_wait_ns": row["caused_wait_ns"],
                 "times_last": row["times_last"],
                 "last_share_pct": _pct(row["times_last"], row["matched"])}
        entry["reason"] = _reason(entry, n_steps)
        out.append(entry)
    return out


def _step_figure(s: RankSummary, values: np.ndarray, step: int) -> float | int | None:
    """A rank's figure for one step (None where the rank has no such step or no value);
    whole numbers stay integers."""
    k = np.flatnonzero(s.step_id == step)
    if not k.size or not np.isfinite(values[k[0]]):
        return None
    v = values[k[0]]
    return int(v) if np.issubdtype(values.dtype, np.integer) else round(float(v), 3)


def _step_rows(c: _Cluster) -> list[dict]:
    """Per step: the critical rank, the others' wait for it and the wait heat map row."""
    n, m, arr = c.n_ranks, c.m, c.arr
    step_of = np.searchsorted(c.steps, c.inst_step)
    n_steps = len(c.steps)
    cell = step_of[m.inst] * n + m.calls.rank
    wait = np.bincount(cell, weights=arr.wait, minlength=n_steps * n).reshape(n_steps, n)
    caused = np.bincount(step_of * n + arr.last_rank, weights=c.caused_wait,
                         minlength=n_steps * n).reshape(n_steps, n)
    count = np.bincount(step_of, minlength=n_steps)
    skew = np.zeros(n_steps, np.int64)
    if len(m):
        np.maximum.at(skew, step_of, arr.skew)
    rows = []
    for k, step in enumerate(c.steps.tolist()):
        crit = int(np.argmax(caused[k])) if caused[k].max() > 0 else None
        rows.append({
            "step": int(step), "critical_rank": None if crit is None else c.summaries[crit].rank,
            "waited_ns": 0 if crit is None else int(round(caused[k, crit])),
            "total_wait_ns": int(round(wait[k].sum())), "max_skew_ns": int(skew[k]),
            "collectives": int(count[k]),
            "wait_ns_by_rank": [int(round(w)) for w in wait[k]],
            "comm_exposed_ns_by_rank": [_step_figure(s, s.step_comm_exposed_ns, step)
                                        for s in c.summaries],
            "overlap_pct_by_rank": [_step_figure(s, s.step_overlap_pct, step)
                                    for s in c.summaries],
        })
    return rows


def _collective_rows(c: _Cluster, limit: int | None) -> list[dict]:
    m, arr = c.m, c.arr
    if not len(m):
        return []
    calls = m.calls
    others, expected = c.caused_wait, c.expected
    nbytes = np.maximum.reduceat(calls.nbytes, m.first)
    order = np.lexsort((np.arange(len(m)), arr.first_arrival))
    if limit is not None and limit < len(m):
        top = np.lexsort((np.arange(len(m)), -arr.skew))[:limit]
        order = order[np.isin(order, top)]
    t0 = int(arr.first_arrival.min())
    ops, groups, keys = calls.ops, calls.groups, calls.keys
    rows = []
    for i in order.tolist():
        f = int(m.first[i])
        rows.append({
            "op": ops[calls.op[f]], "group": groups[calls.group[f]],
            "match": MATCH_KINDS[int(m.kind[i])], "seq": int(calls.seq[f]),
            "key": keys[calls.key[f]], "step": int(c.inst_step[i]),
            "members": int(m.members[i]), "expected": int(expected[i]),
            "first_arrival_ns": int(arr.first_arrival[i]) - t0, "skew_ns": int(arr.skew[i]),
            "last_rank": int(calls.ranks[arr.last_rank[i]]) if arr.skew[i] > 0 else None,
            "wait_ns": int(round(others[i])), "transfer_ns": int(arr.transfer[i]),
            "nbytes": int(nbytes[i]),
        })
    return rows


def _size_mismatches(m: Instances) -> int:
    """Matched collectives whose members recorded different message sizes."""
    if not len(m):
        return 0
    nbytes = m.calls.nbytes
    known = nbytes >= 0
    lo = np.minimum.reduceat(np.where(known, nbytes, np.iinfo(np.int64).max), m.first)
    hi = np.maximum.reduceat(np.where(known, nbytes, -1), m.first)
    return int(((hi >= 0) & (lo != hi)).sum())


def _summary(c: _Cluster) -> dict:
    m, arr = c.m, c.arr
    expected = c.expected
    ref = np.flatnonzero(c.measured)
    return {
        "n_ranks": c.n_ranks, "n_steps": len(c.steps),
        "n_calls": int(sum(len(s.collectives) for s in c.summaries)), "n_matched": len(m),
        "unmatched_calls": m.unmatched, "outside_group_calls": m.dropped,
        "peerless_p2p_calls": m.no_peer,
        "partial_collectives": int(((expected > 0) & (m.members < expected)).sum()),
        "size_mismatched_collectives": _size_mismatches(m),
        "max_skew_ns": int(arr.skew.max()) if len(m) else 0,
        "median_skew_ns": int(np.median(arr.skew)) if len(m) else 0,
        "reference_rank": c.summaries[int(ref[0])].rank if ref.size else None,
    }


def _warnings(c: _Cluster, summary: dict) -> list[str]:
    out = [w for s in c.summaries for w in s.warnings]
    if summary["unmatched_calls"]:
        out.append(f"{summary['unmatched_calls']} collective call(s) found on one rank only")
    if summary["outside_group_calls"]:
        out.append(f"{summary['outside_group_calls']} call(s) on ranks outside their group")
    if summary["peerless_p2p_calls"]:
        out.append(f"{summary['peerless_p2p_calls']} point-to-point call(s) (send, recv, "
                   f"sendrecv) record no peer rank: not matched across ranks")
    if summary["partial_collectives"]:
        out.append(f"{summary['partial_collectives']} collective(s) miss some of their "
                   f"group's ranks (a rank not given or not recorded)")
    if summary["size_mismatched_collectives"]:
        out.append(f"{summary['size_mismatched_collectives']} matched collective(s) have "
                   f"different message sizes on their ranks: the calls may be paired wrongly")
    if c.n_ranks > 1 and not summary["n_matched"]:
        out.append("no collective was found on two ranks or more: nothing to compare")
    unaligned = [s.rank for s, k in zip(c.summaries, c.measured) if not k]
    if unaligned and len(unaligned) < c.n_ranks:
        out.append(f"clock offset not measured for rank(s) {unaligned}: no matched collective")
    return out


def cross_rank(summaries: list[RankSummary], *, max_collectives: int | None = None) -> dict:
    """The cross-rank document (keys in the module doc). ``max_collectives`` keeps only
    that many of the per-collective rows, those of the largest skew."""
    c = _prepare(list(summaries))
    sums = _per_rank_sums(c)
    rank_rows = _rank_rows(c, sums)
    matrix = comm_matrix([(s.rank, s.links) for s in c.summaries], c.m, c.arr)
    summary = _summary(c)
    return {
        "ranking": _ranking(rank_rows, len(c.steps)),
        "slowest_link": slowest_link(matrix),
        "ranks": rank_rows,
        "steps": _step_rows(c),
        "collectives": _collective_rows(c, max_collectives),
        "matrix": matrix,
        "summary": summary,
        "warnings": _warnings(c, summary),
    }
