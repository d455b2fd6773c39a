"""The same collective found on every rank that ran it, the ranks' clocks aligned by it,
and who arrived last.

All ranks' :class:`~parastream.timeline.collectives.Collectives` rows are pooled in one
:class:`Calls` table; each row gets a match key (:func:`match_calls`):

- a point-to-point ``send``/``recv`` with a known peer: (sender, receiver, the call's
  order among that rank's calls to or from that peer);
- else a row with a sequence number: (group, op, seq);
- else a row with the source's own key (an HCCL op name): the key;
- else (group, op, the call's order within its group and op on that rank; within its
  step too, when every rank has steps, so that ranks whose captures start at different
  steps are not paired one step apart).

A point-to-point call (``send``, ``recv``, ``sendrecv``) pairs two ranks, not every rank
of a group: it is matched only by its peer or by the source's key. Without either (an
NCCL ``SendRecv`` kernel whose call records no ``Src Rank``/``Dst Rank``) it is not
matched at all: pairing the n-th such call of each rank would pair transfers to other
peers. Rows with equal keys form one *instance* of a collective; only instances with two
or more ranks are measured. Where a group's ranks are known, rows of other ranks are
dropped.

Clock offsets (:func:`clock_offsets`): a collective ends at about the same true time on
every rank it spans, so each rank's offset is the median over its instances of its end
minus the instance's mean aligned end, found by a few rounds of alternation (which also
aligns ranks that share no group with the reference through groups that overlap), and
reported relative to the lowest rank. Arrival (:func:`arrivals`) is measured on aligned
starts: the skew of an instance is the latest start minus the earliest; a rank's wait in
it is the last arrival minus its own arrival, at most its time in the call.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .collectives import Collectives

MATCH_KINDS = ("seq", "key", "order", "p2p")
#: codes of :data:`MATCH_KINDS`
SEQ, KEY, ORDER, P2P = range(4)
#: the calls that pair two ranks rather than span a group
POINT_TO_POINT = ("send", "recv", "sendrecv")


@dataclass(frozen=True)
class Calls:
    """Every rank's collective rows in one table (``rank`` is the index into the sorted
    rank list, ``ranks``); strings are coded into ``ops``/``groups``/``keys``. ``step``
    is the step whose span holds the call on its rank, -1 for none or unknown."""

    ranks: np.ndarray
    rank: np.ndarray
    op: np.ndarray
    group: np.ndarray
    seq: np.ndarray
    key: np.ndarray
    nbytes: np.ndarray
    peer: np.ndarray
    start: np.ndarray
    end: np.ndarray
    step: np.ndarray
    ops: list
    groups: list
    keys: list
    group_ranks: dict

    def __len__(self) -> int:
        return int(self.start.shape[0])

    def take(self, idx: np.ndarray) -> "Calls":
        cols = {c: getattr(self, c)[idx] for c in ("rank", "op", "group", "seq", "key",
                                                   "nbytes", "peer", "start", "end", "step")}
        return Calls(ranks=self.ranks, ops=self.ops, groups=self.groups, keys=self.keys,
                     group_ranks=self.group_ranks, **cols)


@dataclass(frozen=True)
class Instances:
    """Matched calls: ``inst`` per row (rows sorted by instance, then rank) and per
    instance its match kind, first row, member count and step. ``unmatched``: calls found
    on one rank only; ``dropped``: calls of ranks outside their known group;
    ``no_peer``: point-to-point calls with neither a peer nor a key (not matched)."""

    calls: Calls
    inst: np.ndarray
    kind: np.ndarray
    first: np.ndarray
    members: np.ndarray
    unmatched: int
    dropped: int
    no_peer: int

    def __len__(self) -> int:
        return int(self.first.shape[0])


def _codes(values: np.ndarray, table: dict) -> np.ndarray:
    """Dense integer codes of strings, shared across ranks through ``table`` (each
    distinct value is looked up once)."""
    if not len(values):
        return np.zeros(0, np.int64)
    distinct, inverse = np.unique(np.asarray(values).astype(str), return_inverse=True)
    codes = np.array([table.setdefault(v, len(table)) for v in distinct.tolist()], np.int64)
    return codes[inverse.reshape(-1)]


def latest_step(start: np.ndarray, step_start: np.ndarray) -> np.ndarray:
    """Per time in ``start``, the index of the latest step starting at or before it (ties:
    the later index), -1 before every step."""
    if not step_start.size:
        return np.full(start.shape[0], -1, np.int64)
    order = np.argsort(step_start, kind="stable")
    k = np.searchsorted(step_start[order], start, side="right") - 1
    return np.where(k >= 0, order[np.maximum(k, 0)], -1)


def call_steps(start: np.ndarray, step_id: np.ndarray, step_start: np.ndarray,
               step_end: np.ndarray) -> np.ndarray:
    """The step of each call start: the latest step starting at or before it, when the
    call starts before that step's end; -1 otherwise."""
    out = np.full(start.shape[0], -1, np.int64)
    k = latest_step(start, step_start)
    inside = k >= 0
    inside[inside] = start[inside] <= step_end[k[inside]]
    out[inside] = step_id[k[inside]]
    return out


def pool_calls(tables: list[Collectives], ranks: list[int],
               steps: list[np.ndarray] | None = None) -> Calls:
    """One table of every rank's rows (``tables[i]`` belongs to ``ranks[i]``);
    ``steps[i]``, where given, is the step of each of ``tables[i]``'s rows
    (:func:`call_steps`)."""
    op_t: dict = {}
    group_t: dict = {}
    key_t: dict = {"": 0}
    group_ranks: dict = {}
    cols: dict[str, list] = {c: [] for c in ("rank", "op", "group", "seq", "key", "nbytes",
                                             "peer", "start", "end", "step")}
    for i, c in enumerate(tables):
        n = len(c)
        cols["rank"].append(np.full(n, i, np.int64))
        cols["step"].append(np.full(n, -1, np.int64) if steps is None
                            else np.asarray(steps[i], np.int64))
        cols["op"].append(_codes(c.op, op_t))
        cols["group"].append(_codes(c.group, group_t))
        cols["key"].append(_codes(c.key, key_t))
        for name, src in (("seq", c.seq), ("nbytes", c.nbytes), ("peer", c.peer),
                          ("start", c.start_ns), ("end", c.end_ns)):
            cols[name].append(np.asarray(src, np.int64))
        for g, members in c.group_ranks.items():
            group_ranks.setdefault(g, tuple(int(m) for m in members))
    arrays = {k: (np.concatenate(v) if v else np.zeros(0, np.int64)) for k, v in cols.items()}
    return Calls(ranks=np.asarray(ranks, np.int64), ops=list(op_t), groups=list(group_t),
                 keys=list(key_t), group_ranks=group_ranks, **arrays)


def _outside_groups(calls: Calls) -> np.ndarray:
    """Rows of ranks that a known group does not hold."""
    bad = np.zeros(len(calls), bool)
    for code, g in enumerate(calls.groups):
        members = calls.group_ranks.get(g)
        if not members:
            continue
        rows = calls.group == code
        bad |= rows & ~np.isin(calls.ranks[calls.rank], np.asarray(members, np.int64))
    return bad


def _peerless(calls: Calls) -> np.ndarray:
    """Point-to-point rows (:data:`POINT_TO_POINT`) that name neither a peer nor a key:
    nothing says which call on another rank is the other end of the transfer."""
    if not len(calls):
        return np.zeros(0, bool)
    p2p_code = np.array([op in POINT_TO_POINT for op in calls.ops])
    return p2p_code[calls.op] & (calls.peer < 0) & (calls.key == 0)


def _radix(cols: tuple[np.ndarray, ...]) -> tuple[np.ndarray, ...]:
    """Sort keys equivalent to ``cols`` (the first most significant) for ``np.lexsort``'s
    reversed order: one int64 mixed-radix key when the ranges fit, else the columns."""
    key = np.zeros(cols[0].shape[0], np.int64)
    span = 1
    for c in cols:
        lo = int(c.min()) if c.size else 0
        width = (int(c.max()) - lo + 1) if c.size else 1
        span *= width
        if span >= 1 << 62:
            return tuple(reversed(cols))
        key = key * width + (c - lo)
    return (key,)


def _order_within(cols: tuple[np.ndarray, ...], start: np.ndarray) -> np.ndarray:
    """Each row's 0-based position, by start, among the rows equal in all ``cols``."""
    n = start.shape[0]
    if n == 0:
        return np.zeros(0, np.int64)
    order = np.lexsort((start,) + _radix(cols))
    same = np.ones(n, bool)
    same[0] = False
    for c in cols:
        s = c[order]
        same[1:] &= s[1:] == s[:-1]
    run_start = np.flatnonzero(~same)
    run_of = np.cumsum(~same) - 1
    pos = np.empty(n, np.int64)
    pos[order] = np.arange(n) - run_start[run_of]
    return pos


def _match_keys(calls: Calls) -> tuple[np.ndarray, ...]:
    """The (kind, a, b, c, step) match key of every row (see the module doc)."""
    n = len(calls)
    rank = calls.ranks[calls.rank] if n else np.zeros(0, np.int64)
    ops = np.array(calls.ops + [""], object)[calls.op] if n else np.zeros(0, object)
    send, recv = ops == "send", ops == "recv"
    p2p = (calls.peer >= 0) & (send | recv)
    kind = np.where(p2p, P2P, np.where(calls.seq >= 0, SEQ,
                                        np.where(calls.key > 0, KEY, ORDER)))
    src = np.where(send, rank, calls.peer)
    dst = np.where(send, calls.peer, rank)
    p2p_pos = _order_within((calls.rank, calls.peer, send.astype(np.int64), p2p), calls.start)
    step = np.where(kind == ORDER, calls.step, -1)
    pos = _order_within((calls.rank, calls.group, calls.op, kind, step), calls.start)
    a = np.select([kind == P2P, kind == KEY], [src, calls.key], calls.group)
    b = np.select([kind == P2P, kind == KEY], [dst, 0], calls.op)
    c = np.select([kind == P2P, kind == SEQ, kind == KEY], [p2p_pos, calls.seq, 0], pos)
    return kind, a, b, c, step


def match_calls(calls: Calls) -> Instances:
    """Group the rows into instances of one collective (see the module doc)."""
    outside = _outside_groups(calls)
    no_peer = _peerless(calls) & ~outside
    calls = calls.take(np.flatnonzero(~outside & ~no_peer))
    kind, a, b, c, step = _match_keys(calls)
    order = np.lexsort((calls.start,) + _radix((kind, a, b, step, c, calls.rank)))
    keys = [k[order] for k in (kind, a, b, step, c)]
    n = order.shape[0]
    new = np.ones(n, bool)
    if n:
        new[1:] = np.any([k[1:] != k[:-1] for k in keys], axis=0)
    inst = np.cumsum(new) - 1
    r = calls.rank[order]
    dup = np.zeros(n, bool)
    if n:
        dup[1:] = ~new[1:] & (r[1:] == r[:-1])  # one row per rank and instance
    order, inst, kinds = order[~dup], inst[~dup], keys[0][~dup]
    counts = np.bincount(inst, minlength=int(inst.max()) + 1 if n else 0)
    keep = counts[inst] >= 2
    order, inst, kinds = order[keep], inst[keep], kinds[keep]
    _, inst = np.unique(inst, return_inverse=True)
    first = np.flatnonzero(np.r_[True, inst[1:] != inst[:-1]]) if inst.size else inst
    members = np.diff(np.r_[first, inst.size]) if inst.size else inst
    return Instances(calls=calls.take(order), inst=inst.astype(np.int64), kind=kinds[first],
                     first=first, members=members, unmatched=int((~keep).sum()),
                     dropped=int(outside.sum()), no_peer=int(no_peer.sum()))


def group_median(codes: np.ndarray, values: np.ndarray, n: int) -> np.ndarray:
    """Median of ``values`` (rounded to whole numbers) per code 0..n-1, NaN where a code
    has none."""
    out = np.full(n, np.nan)
    if not codes.size:
        return out
    v = np.rint(values).astype(np.int64)
    order = np.lexsort(_radix((codes, v)))
    v = v[order].astype(np.float64)
    counts = np.bincount(codes, minlength=n)
    starts = np.cumsum(counts) - counts
    has = counts > 0
    lo = starts[has] + (counts[has] - 1) // 2
    hi = starts[has] + counts[has] // 2
    out[has] = (v[lo] + v[hi]) / 2
    return out


def clock_offsets(m: Instances, rounds: int = 12) -> tuple[np.ndarray, np.ndarray]:
    """Each rank's clock offset in ns (to subtract from its times), relative to the lowest
    rank with matched collectives, and whether it was measured (see the module doc)."""
    n_ranks = len(m.calls.ranks)
    off = np.zeros(n_ranks)
    rank, end = m.calls.rank, m.calls.end.astype(np.float64)
    known = np.bincount(rank, minlength=n_ranks) > 0 if rank.size else np.zeros(n_ranks, bool)
    if not known.any():
        return np.zeros(n_ranks, np.int64), known
    ref = int(np.flatnonzero(known)[0])
    counts = np.maximum(m.members, 1)
    base = end.min()
    for _ in range(rounds):
        aligned = end - base - off[rank]
        mean_end = np.bincount(m.inst, weights=aligned, minlength=len(m)) / counts
        new = np.nan_to_num(group_median(rank, end - base - mean_end[m.inst], n_ranks))
        new -= new[ref]
        if np.allclose(new, off, atol=0.5):
            off = new
            break
        off = new
    return np.rint(off).astype(np.int64), known


@dataclass(frozen=True)
class Arrivals:
    """Per matched row its aligned start, end and wait; per instance the aligned
    earliest and latest arrival, the rank index that arrived last, and the transfer time
    (mean aligned end minus the last arrival)."""

    start: np.ndarray
    end: np.ndarray
    wait: np.ndarray
    first_arrival: np.ndarray
    last_arrival: np.ndarray
    last_rank: np.ndarray
    transfer: np.ndarray

    skew: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))


def arrivals(m: Instances, offsets: np.ndarray) -> Arrivals:
    """Arrival skew, the last rank and each rank's wait, on aligned clocks."""
    c = m.calls
    start = c.start - offsets[c.rank]
    end = c.end - offsets[c.rank]
    n = len(m)
    if not n:
        z = np.zeros(0, np.int64)
        return Arrivals(start, end, z, z, z, z, z, z)
    # last row of each instance in this order: the latest start, ties to the lowest rank
    order = np.lexsort((-c.rank, start, m.inst))
    last_row = order[np.r_[m.first[1:], len(order)] - 1]
    last = start[last_row]
    first = np.minimum.reduceat(start, m.first)
    wait = np.clip(last[m.inst] - start, 0, np.maximum(c.end - c.start, 0))
    mean_end = np.bincount(m.inst, weights=end.astype(np.float64), minlength=n) / m.members
    transfer = np.maximum(np.rint(mean_end).astype(np.int64) - last, 1)
    return Arrivals(start=start, end=end, wait=wait, first_arrival=first, last_arrival=last,
                    last_rank=c.rank[last_row], transfer=transfer, skew=last - first)
