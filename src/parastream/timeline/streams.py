"""Per-stream facts: busy time, roles (main / side / comm), gaps and corrupt data."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import intervals as iv
from .model import COMM_LANE, KIND_COMM, Timeline


@dataclass
class StreamStats:
    """What one stream did in one capture (times in ns)."""

    code: int
    id: str
    role: str  # "main" | "side" | "comm"
    ops: int
    busy: iv.Union_
    busy_ns: int
    first_ns: int
    last_ns: int
    gap_count: int
    gap_idle_ns: int
    gap_wait_ns: int
    gap_host_ns: int
    corrupt_overlaps: int
    max_block_dim: int


def is_comm_stream(tl: Timeline, s: int, idx: np.ndarray) -> bool:
    """A stream is communication when it is the HCCL lane or most of its ops are collectives."""
    if tl.streams[s] == COMM_LANE:
        return True
    return idx.size > 0 and float((tl.kind[idx] == KIND_COMM).mean()) >= 0.5


def corrupt_overlap_count(starts: np.ndarray, ends: np.ndarray) -> int:
    """Ops (in start order) that begin before an earlier op on the same stream has ended.

    Kernels of one hardware stream run one after another, so any such pair means the
    trace is wrong (clock skew, merged streams); it is never counted as parallelism.
    """
    if starts.size < 2:
        return 0
    prev_end = np.maximum.accumulate(ends)[:-1]
    return int(((starts[1:] < prev_end) & (ends[1:] > starts[1:])).sum())


def stream_stats(tl: Timeline, main: str | None = None) -> list[StreamStats]:
    """Busy time, role and gap split of every stream that has ops.

    ``main`` names the main stream; by default it is the compute stream with the most
    busy time. Gaps are the idle stretches between a stream's first and last op, split
    into time covered by a wait on that stream, time before a late launch (host-bound:
    the op was launched only after the stream had gone idle) and plain idle time.
    """
    out: list[StreamStats] = []
    for s in range(len(tl.streams)):
        idx = tl.stream_ops(s)
        if idx.size == 0:
            continue
        st, en = tl.start_ns[idx], tl.end_ns[idx]
        busy = iv.union(st, en)
        first, last = int(st.min()), int(en.max())
        span = (np.array([first]), np.array([last])) if last > first else (busy[0][:0], busy[1][:0])
        gaps = iv.subtract(span, busy)
        wmask = tl.wait_stream == s
        waits = iv.union(tl.wait_start_ns[wmask], tl.wait_end_ns[wmask])
        gap_wait = iv.intersection_length(gaps, waits)
        gap_host = 0
        if tl.launch_ns is not None and gaps[0].size:
            gap_host = _host_bound_ns(gaps, st, tl.launch_ns[idx], waits)
        gap_total = iv.length(gaps)
        comm = is_comm_stream(tl, s, idx)
        bd = tl.block_dim[idx]
        out.append(StreamStats(
            code=s, id=tl.streams[s], role="comm" if comm else "side", ops=int(idx.size),
            busy=busy, busy_ns=iv.length(busy), first_ns=first, last_ns=last,
            gap_count=int(gaps[0].size), gap_idle_ns=gap_total - gap_wait - gap_host,
            gap_wait_ns=gap_wait, gap_host_ns=gap_host,
            corrupt_overlaps=0 if tl.streams[s] == COMM_LANE else corrupt_overlap_count(st, en),
            max_block_dim=int(bd.max()) if bd.size else -1))
    compute = [x for x in out if x.role != "comm"]
    chosen = None
    if main is not None:
        chosen = next((x for x in out if x.id == main), None)
    elif compute:
        chosen = max(compute, key=lambda x: (x.busy_ns, x.ops))
    elif out:
        chosen = max(out, key=lambda x: x.busy_ns)
    if chosen is not None:
        chosen.role = "main"
    return out


def _host_bound_ns(gaps: iv.Union_, starts: np.ndarray, launch: np.ndarray,
                   waits: iv.Union_) -> int:
    """Gap time before the op that ends the gap was even launched (not covered by a wait)."""
    # the op that ends gap k is the first op starting at or after the gap's end
    nxt = np.searchsorted(starts, gaps[1], side="left")
    nxt = np.clip(nxt, 0, starts.size - 1)
    lau = launch[nxt]
    known = lau >= 0
    lo = gaps[0][known]
    hi = np.minimum(np.maximum(lau[known], lo), gaps[1][known])
    host = iv.union(lo, hi)
    return iv.length(host) - iv.intersection_length(host, waits)
