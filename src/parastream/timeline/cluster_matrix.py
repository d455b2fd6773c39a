"""The communication matrix of a cluster: bytes and achieved bandwidth per rank pair.

Three sources, in order of preference for each (src, dst) pair:

- ``comm_matrix``: what the profiler recorded per link (Ascend's
  ``communication_matrix.json``), read from ``tl.meta["comm_matrix"]`` by
  :func:`link_rows`; ranks the source numbers within a group are mapped to global ranks
  where the group's ranks are known (:func:`to_global`); where both ends report a link,
  the sender's report is used;
- ``p2p``: matched point-to-point sends and receives: the sender's bytes over the time
  from the later arrival to the end of the call;
- ``ring``: collectives of known size on the ring model, each member sending to its
  successor in rank order: allreduce 2(n-1)/n x bytes, allgather and reducescatter
  (n-1)/n x bytes, over the same transfer time.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np

from .cluster_match import P2P, Arrivals, Instances

#: the ring model's share of the message each member sends, by op and group size n
RING_FACTORS = {"allreduce": lambda n: 2.0 * (n - 1) / n,
                "allgather": lambda n: (n - 1) / n,
                "reducescatter": lambda n: (n - 1) / n}
_SAMPLE = re.compile(r"-(top\d*|middle|bottom\d*)(@|$)", re.I)
_TOTAL = re.compile(r"-total(@|$)", re.I)


def _empty(dtype: object) -> np.ndarray:
    return np.zeros(0, dtype)


@dataclass(frozen=True)
class LinkRows:
    """Links one rank's profiler recorded, one row per (src, dst, transport, group) in that
    order: the sending and receiving rank as the source writes them (Ascend numbers them
    within the op's ``group``; "" when not said), bytes, transfer time in ns and transport
    type (``HCCS``, ``RDMA``, ...; "" unknown)."""

    src: np.ndarray = field(default_factory=lambda: _empty(np.int64))
    dst: np.ndarray = field(default_factory=lambda: _empty(np.int64))
    nbytes: np.ndarray = field(default_factory=lambda: _empty(np.float64))
    time_ns: np.ndarray = field(default_factory=lambda: _empty(np.float64))
    transport: np.ndarray = field(default_factory=lambda: _empty(object))
    group: np.ndarray = field(default_factory=lambda: _empty(object))

    def __len__(self) -> int:
        return int(self.src.shape[0])


_ALIASES = {
    "src": ("src_rank", "src", "Src Rank", "source_rank"),
    "dst": ("dst_rank", "dst", "Dst Rank", "dest_rank"),
    "nbytes": ("nbytes", "bytes", "transit_bytes"),
    "size_mb": ("transit_size_mb", "Transit Size(MB)", "size_mb"),
    "time_ns": ("time_ns", "transit_ns", "transit_time_ns"),
    "time_ms": ("transit_time_ms", "Transit Time(ms)", "time_ms"),
    "transport": ("transport", "transport_type", "Transport Type"),
    "link": ("link", "Link"),
    "group": ("group", "group_name"),
}


def _pick(row: dict, name: str, default: object = None) -> object:
    for k in _ALIASES[name]:
        if k in row and row[k] is not None:
            return row[k]
    return default


def _row_values(row: dict) -> tuple[int, int, float, float, str, str] | None:
    """(src, dst, bytes, ns, transport, group) of one row in any of the accepted
    spellings."""
    src, dst = _pick(row, "src"), _pick(row, "dst")
    link = _pick(row, "link")
    if (src is None or dst is None) and isinstance(link, str) and "-" in link:
        src, dst = link.split("-", 1)
    nbytes = _pick(row, "nbytes")
    if nbytes is None and _pick(row, "size_mb") is not None:
        nbytes = float(_pick(row, "size_mb")) * 1e6
    ns = _pick(row, "time_ns")
    if ns is None and _pick(row, "time_ms") is not None:
        ns = float(_pick(row, "time_ms")) * 1e6
    try:
        return int(src), int(dst), float(nbytes or 0.0), float(ns or 0.0), \
            str(_pick(row, "transport", "") or ""), str(_pick(row, "group", "") or "")
    except (TypeError, ValueError):
        return None


def _nested_rows(doc: dict) -> list[dict]:
    """Rows of a communication_matrix.json document (step -> collective|p2p -> op@group
    -> "src-dst" -> figures), each with its ``op``."""
    rows = []
    for step in doc.values():
        for kind in (step.values() if isinstance(step, dict) else ()):
            for name, links in (kind.items() if isinstance(kind, dict) else ()):
                if isinstance(links, dict):
                    group = name.split("@", 1)[1] if "@" in name else ""
                    rows += [dict(v, link=k, op=name, group=group) for k, v in links.items()
                             if isinstance(v, dict)]
    return rows


def _without_samples(rows: list[dict]) -> list[dict]:
    """The rows to sum: the per-kind ``-total`` aggregates where the source wrote them,
    else every op's rows but the ``-top1``/``-middle``/``-bottom`` samples (which repeat
    single ops)."""
    ops = [str(r.get("op", "")) for r in rows]
    if any(_TOTAL.search(o) for o in ops):
        return [r for r, o in zip(rows, ops) if _TOTAL.search(o)]
    return [r for r, o in zip(rows, ops) if not _SAMPLE.search(o)]


def _as_rows(value: object) -> list[dict]:
    """Row dicts from a list of dicts or named tuples, a dict of columns or a
    communication_matrix.json document."""
    if isinstance(value, dict) and any(k in value for k in _ALIASES["src"]):
        cols = {k: list(v) for k, v in value.items()}
        n = max((len(v) for v in cols.values()), default=0)
        return [{k: v[i] for k, v in cols.items() if i < len(v)} for i in range(n)]
    if isinstance(value, dict):
        return _nested_rows(value)
    rows = []
    for r in value if isinstance(value, (list, tuple)) else ():
        if hasattr(r, "_asdict"):
            r = r._asdict()
        if isinstance(r, dict):
            rows.append(r)
    return rows


def link_rows(value: object) -> LinkRows:
    """A rank's recorded links from ``tl.meta["comm_matrix"]``: a list of row dicts or
    named tuples, a dict of columns, or a communication_matrix.json document. Keys are
    read in snake case (``src_rank``, ``dst_rank``, ``nbytes`` or ``transit_size_mb``, ``time_ns`` or
    ``transit_time_ms``, ``transport``) or in the profiler's spelling (``"0-1"`` link
    keys, ``Transit Size(MB)``, ``Transit Time(ms)``, ``Transport Type``). Rows are summed
    per (src, dst, transport, group), so the summary stays small however many steps and
    ops the source recorded."""
    if not value:
        return LinkRows()
    rows = _without_samples(_as_rows(value))
    sums: dict[tuple[int, int, str, str], list[float]] = {}
    for v in map(_row_values, rows):
        if v is not None:
            cell = sums.setdefault((v[0], v[1], v[4], v[5]), [0.0, 0.0])
            cell[0] += v[2]
            cell[1] += v[3]
    if not sums:
        return LinkRows()
    src, dst, transport, group = zip(*sorted(sums))
    nbytes, ns = zip(*(sums[k] for k in sorted(sums)))
    return LinkRows(src=np.array(src, np.int64), dst=np.array(dst, np.int64),
                    nbytes=np.array(nbytes, np.float64), time_ns=np.array(ns, np.float64),
                    transport=np.array(transport, object), group=np.array(group, object))


@dataclass
class _Pairs:
    """Accumulated (src, dst) -> [bytes, ns, source, transport]."""

    table: dict = field(default_factory=dict)

    def add_new(self, src: np.ndarray, dst: np.ndarray, nbytes: np.ndarray, ns: np.ndarray,
                source: str, transport: np.ndarray | None = None) -> None:
        """Add the sums per pair of these rows, for the pairs no earlier source gave."""
        keep = (src >= 0) & (dst >= 0)
        if not keep.any():
            return
        src, dst, nbytes, ns = src[keep], dst[keep], nbytes[keep], ns[keep]
        tr = transport[keep] if transport is not None else None
        tr = tr if transport is not None else np.full(src.shape[0], "", object)
        width = int(max(src.max(), dst.max())) + 1
        code, first, inverse = np.unique(src * width + dst, return_index=True,
                                         return_inverse=True)
        inverse = inverse.reshape(-1)
        pair = np.stack([code // width, code % width], axis=1)
        b = np.bincount(inverse, weights=nbytes, minlength=len(pair))
        t = np.bincount(inverse, weights=ns, minlength=len(pair))
        for k, (s, d) in enumerate(pair.tolist()):
            if (s, d) not in self.table:
                self.table[(s, d)] = [float(b[k]), float(t[k]), source, str(tr[first[k]])]


def to_global(rows: LinkRows, group_ranks: dict) -> LinkRows:
    """The rows with ranks numbered within a known group replaced by the group's global
    ranks (rows of unknown groups keep theirs: a group of every rank numbers them alike)."""
    src, dst = rows.src.copy(), rows.dst.copy()
    for g in set(rows.group.tolist()):
        members = np.asarray(group_ranks.get(g) or (), np.int64)
        sel = (rows.group == g) & (rows.src < members.size) & (rows.dst < members.size)
        if members.size and sel.any():
            src[sel], dst[sel] = members[rows.src[sel]], members[rows.dst[sel]]
    return LinkRows(src=src, dst=dst, nbytes=rows.nbytes, time_ns=rows.time_ns,
                    transport=rows.transport, group=rows.group)


def _recorded(reports: list[tuple[int, LinkRows]], pairs: _Pairs, group_ranks: dict) -> None:
    """Pairs from the profilers' own link records, the sender's report first."""
    reports = [(r, to_global(rows, group_ranks)) for r, rows in reports if len(rows)]
    for own in (True, False):
        for reporter, rows in reports:
            pick = (rows.src == reporter) if own else np.ones(len(rows), bool)
            pairs.add_new(rows.src[pick], rows.dst[pick], rows.nbytes[pick],
                          rows.time_ns[pick], "comm_matrix", rows.transport[pick])


def _p2p(m: Instances, arr: Arrivals, pairs: _Pairs) -> None:
    """Pairs from matched sends and receives: the sender's bytes over the transfer."""
    if not len(m):
        return
    c = m.calls
    ops = np.array(c.ops + [""], object)[c.op]
    send = (ops == "send") & (m.kind[m.inst] == P2P) & (c.peer >= 0)
    rows = np.flatnonzero(send & (c.nbytes > 0))
    ranks = c.ranks[c.rank[rows]]
    pairs.add_new(ranks, c.peer[rows], c.nbytes[rows].astype(np.float64),
                  arr.transfer[m.inst[rows]].astype(np.float64), "p2p")


def _ring(m: Instances, arr: Arrivals, pairs: _Pairs) -> None:
    """Pairs from collectives of known size on the ring model (rows are sorted by
    instance, then rank, so a member's successor is the next row, wrapping round)."""
    if not len(m):
        return
    c = m.calls
    ops = np.array(c.ops + [""], object)[c.op]
    n = m.members[m.inst]
    factor = np.zeros(len(c))
    for op, f in RING_FACTORS.items():
        sel = ops == op
        factor[sel] = f(n[sel].astype(np.float64))
    idx = np.arange(len(c))
    last_of = np.r_[m.first[1:], len(c)] - 1
    succ = np.where(idx == last_of[m.inst], m.first[m.inst], idx + 1)
    rows = np.flatnonzero((factor > 0) & (c.nbytes > 0))
    ranks = c.ranks[c.rank]
    pairs.add_new(ranks[rows], ranks[succ[rows]], factor[rows] * c.nbytes[rows],
                  arr.transfer[m.inst[rows]].astype(np.float64), "ring")


def comm_matrix(reports: list[tuple[int, LinkRows]], m: Instances, arr: Arrivals) -> list[dict]:
    """The matrix as rows ``{src, dst, bytes, time_ns, bandwidth_gbps, source,
    transport}`` sorted by (src, dst); bandwidth is bytes per ns (GB/s), None when the
    time is unknown."""
    pairs = _Pairs()
    _recorded(reports, pairs, m.calls.group_ranks)
    _p2p(m, arr, pairs)
    _ring(m, arr, pairs)
    out = []
    for (s, d), (b, t, source, transport) in sorted(pairs.table.items()):
        out.append({"src": int(s), "dst": int(d), "bytes": int(round(b)),
                    "time_ns": int(round(t)),
                    "bandwidth_gbps": round(b / t, 6) if t > 0 else None,
                    "source": source, "transport": transport})
    return out


def slowest_link(pairs: list[dict]) -> dict | None:
    """The pair with the lowest achieved bandwidth, beside the median of the pairs of
    its source and transport; None without pairs of known bandwidth."""
    known = [p for p in pairs if p["bandwidth_gbps"] and p["src"] != p["dst"]]
    if not known:
        return None
    worst = min(known, key=lambda p: (p["bandwidth_gbps"], p["src"], p["dst"]))
    peers = [p["bandwidth_gbps"] for p in known
             if (p["source"], p["transport"]) == (worst["source"], worst["transport"])]
    median = float(np.median(peers))
    return {"src": worst["src"], "dst": worst["dst"], "bandwidth_gbps": worst["bandwidth_gbps"],
            "median_gbps": round(median, 6),
            "ratio_to_median": round(worst["bandwidth_gbps"] / median, 4) if median else None,
            "source": worst["source"], "transport": worst["transport"]}
