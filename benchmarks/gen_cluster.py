#!/usr/bin/env python3
"""Deterministic generator of a multi-rank capture with a planted straggler.

Every rank runs the same program: per step, ``--collectives`` collectives (allreduce,
allgather, reducescatter in a fixed order) and one point-to-point exchange with the ring
neighbours, each after a segment of compute. Collectives are in lockstep: a collective's
call on every rank ends at the same true time (the last arrival plus the transfer, with
a jitter under a microsecond) and starts when that rank arrives, so the ranks that
arrive early wait. A side stream of compute partly overlaps each call.

Planted causes:
  --slow-rank R --slow-factor F   rank R's compute takes F times as long, so the others
                                  wait for it at every collective;
  --slow-link A-B                 transfers over the link between ranks A and B take
                                  --link-factor times as long (point-to-point exchanges
                                  over it, and the per-link records of Ascend's
                                  communication_matrix.json).
  --clock-skew-us U               each rank's clock is offset by up to U us (rank 0 by 0).

Formats:
  kineto  OUT/rank-R.json[.gz]: PyTorch profiler traces (benchmarks/gen_kineto.py's
          layout) with distributedInfo rank/world_size and NCCL kernels carrying the
          profiler's comm args ("Collective name", "Process Group Name", "Process Group
          Ranks", "In msg nelems", "dtype", "Seq"; "Dst Rank"/"Src Rank" for send/recv).
  ascend  OUT/rankR_ascend_pt/: profiler_info_R.json, profiler_metadata.json and
          ASCEND_PROFILER_OUTPUT/ with kernel_details.csv (benchmarks/gen_kernel_details.py's
          columns; HCCL ops hcom_allReduce__<tag>_<idx>_1, the same name on every rank),
          communication.json and communication_matrix.json in torch_npu's layouts.

``--events`` is per rank: trace events for Kineto (about 5 per kernel), rows for Ascend.
:func:`plan` computes the whole schedule with numpy and is importable (tests build
collective tables from it without writing files).

Usage:
  python benchmarks/gen_cluster.py OUT --ranks 8 --events 50000 --slow-rank 3 --slow-factor 1.5
"""
from __future__ import annotations

import argparse
import gzip
import json
import os
import sys
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gen_kernel_details as gkd  # noqa: E402
import gen_kineto as gk  # noqa: E402

COLLECTIVE_OPS = ("allreduce", "allgather", "reducescatter")
RING = {"allreduce": lambda n: 2.0 * (n - 1) / n, "allgather": lambda n: (n - 1) / n,
        "reducescatter": lambda n: (n - 1) / n}
BASE_GBPS = 100.0  # bytes per ns of a healthy link
MIN_TRANSFER_NS = 20_000
LINK_GAP_NS = 1_500


@dataclass(frozen=True)
class Settings:
    """What the cluster looks like (the command's options)."""

    ranks: int = 8
    events: int = 20_000
    steps: int = 4
    collectives: int = 0  # per step; 0: about 2% of the kernels
    p2p: bool = True
    seed: int = 0
    slow_rank: int = -1
    slow_factor: float = 1.0
    slow_link: tuple[int, int] | None = None
    link_factor: float = 4.0
    clock_skew_us: float = 0.0
    fmt: str = "kineto"

    @property
    def kernels(self) -> int:
        """Device kernels per rank (5 trace events each in Kineto, one row in Ascend)."""
        return max(self.events // 5 if self.fmt == "kineto" else self.events, 16)

    @property
    def per_step(self) -> int:
        """Calls per step: the collectives, then the exchange."""
        return self.n_coll + (1 if self.p2p else 0)

    @property
    def n_coll(self) -> int:
        if self.collectives > 0:
            return self.collectives
        return max(1, int(round(0.02 * self.kernels / max(self.steps, 1))))

    @property
    def n_segments(self) -> int:
        return max(self.steps, 1) * self.per_step


@dataclass
class Plan:
    """The schedule on the true clock (ns from 0): per segment j and rank r the start of
    its compute (``ready``), its arrival at the call and the call's end; per segment its
    op, bytes and transfer time; per rank its clock offset. For the exchange segments,
    ``end`` is the later of the rank's send and receive and ``send_end``/``recv_end``
    hold each (a rank sends to r+1 and receives from r-1)."""

    s: Settings
    ready: np.ndarray
    arrival: np.ndarray
    end: np.ndarray
    send_end: np.ndarray
    recv_end: np.ndarray
    op: list
    nbytes: np.ndarray
    transfer: np.ndarray
    offset_ns: np.ndarray
    seq: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))

    def is_p2p(self, j: int) -> bool:
        return self.op[j] == "sendrecv"

    def step_of(self, j: int) -> int:
        return j // self.s.per_step


# ------------------------------------------------------------------------------- compute
@dataclass(frozen=True)
class Chain:
    """One rank's kernels of one kind (main or side stream), in order: template index,
    duration and the gap before it (ns), and the first kernel of each segment."""

    tmpl: np.ndarray
    dur: np.ndarray
    gap: np.ndarray
    cut: np.ndarray

    def lengths(self) -> np.ndarray:
        """Back-to-back length of each segment (gaps included)."""
        if not self.dur.size:
            return np.zeros(len(self.cut), np.int64)
        total = np.add.reduceat(self.dur + self.gap, self.cut)
        total[np.r_[self.cut[1:] == self.cut[:-1], False]] = 0
        return total


def _templates(fmt: str, side: bool) -> tuple[np.ndarray, np.ndarray]:
    """(mean duration ns, weight) of the compute templates of a format and stream."""
    if fmt == "ascend":
        t, w = (gkd.SIDE_TEMPLATES, gkd.SIDE_WEIGHTS) if side else (gkd.MAIN_TEMPLATES,
                                                                       gkd.MAIN_WEIGHTS)
        means = [x[4] for x in t]
    else:
        means, w = [k[2] for k in gk.COMPUTE_KERNELS], list(gk.COMPUTE_WEIGHTS)
    w = np.asarray(w, np.float64)
    return np.asarray(means, np.float64) * 1000.0, w / w.sum()


def chains(s: Settings, rank: int) -> tuple[Chain, Chain]:
    """The main and side compute chains of one rank (deterministic in seed and rank)."""
    rng = np.random.default_rng([s.seed, rank])
    n_comm = s.n_segments + (s.steps if s.p2p and s.fmt == "kineto" else 0)
    n_compute = max(s.kernels - n_comm, 2 * s.n_segments)
    n_side = n_compute // 5
    out = []
    for side, n in ((False, n_compute - n_side), (True, n_side)):
        means, w = _templates(s.fmt, side)
        tmpl = rng.choice(len(means), size=n, p=w)
        dur = np.maximum(means[tmpl] * rng.lognormal(0.0, 0.3, size=n), 3_250)
        if rank == s.slow_rank:
            dur = dur * s.slow_factor
        gap = rng.integers(300, 2_000, size=n)
        cut = np.linspace(0, n, s.n_segments + 1).astype(np.int64)[:-1]
        out.append(Chain(tmpl=tmpl, dur=dur.astype(np.int64), gap=gap.astype(np.int64),
                         cut=np.minimum(cut, max(n - 1, 0))))
    return out[0], out[1]


# -------------------------------------------------------------------------------- plan
def _segment_ops(s: Settings, rng: np.random.Generator) -> tuple[list, np.ndarray]:
    ops, nbytes = [], []
    for j in range(s.n_segments):
        k = j % s.per_step
        if s.p2p and k == s.per_step - 1:
            ops.append("sendrecv")
        else:
            ops.append(COLLECTIVE_OPS[k % len(COLLECTIVE_OPS)])
        nbytes.append(int(rng.integers(1, 64)) * (1 << 20))
    return ops, np.asarray(nbytes, np.int64)


def _link_factor(s: Settings, a: int, b: int) -> float:
    if s.slow_link and {a, b} == set(s.slow_link):
        return s.link_factor
    return 1.0


def _exchange(p: Plan, j: int, arrive: np.ndarray) -> None:
    """A ring exchange: rank r sends to r+1; each pair ends when the later of the two
    arrives plus the transfer over their link."""
    s = p.s
    n = s.ranks
    nxt = (np.arange(n) + 1) % n
    factor = np.array([_link_factor(s, r, int(nxt[r])) for r in range(n)])
    base = max(int(p.nbytes[j] / BASE_GBPS), MIN_TRANSFER_NS)
    pair_end = np.maximum(arrive, arrive[nxt]) + (base * factor).astype(np.int64)
    p.send_end[j] = pair_end
    p.recv_end[j] = pair_end[(np.arange(n) - 1) % n]
    p.transfer[j] = base
    p.end[j] = np.maximum(p.send_end[j], p.recv_end[j])


def plan(s: Settings) -> Plan:
    """The lockstep schedule of the whole cluster (see :class:`Plan`)."""
    rng = np.random.default_rng([s.seed, 1_000_003])
    n, n_seg = s.ranks, s.n_segments
    main_len = np.stack([chains(s, r)[0].lengths() for r in range(n)], axis=1)
    ops, nbytes = _segment_ops(s, rng)
    z = np.zeros((n_seg, n), np.int64)
    p = Plan(s=s, ready=z.copy(), arrival=z.copy(), end=z.copy(), send_end=z.copy(),
             recv_end=z.copy(), op=ops, nbytes=nbytes, transfer=np.zeros(n_seg, np.int64),
             offset_ns=np.zeros(n, np.int64))
    ready = 1_000_000 + rng.integers(0, 20_000, size=n)
    for j in range(n_seg):
        p.ready[j] = ready
        arrive = ready + main_len[j] + LINK_GAP_NS
        p.arrival[j] = arrive
        if p.is_p2p(j):
            _exchange(p, j, arrive)
        else:
            slow = max((_link_factor(s, r, (r + 1) % n) for r in range(n)), default=1.0)
            base = RING[ops[j]](n) * nbytes[j] / BASE_GBPS
            p.transfer[j] = max(int(base * slow), MIN_TRANSFER_NS)
            p.end[j] = arrive.max() + p.transfer[j] + rng.integers(0, 800, size=n)
        ready = p.end[j] + LINK_GAP_NS
    if s.clock_skew_us > 0 and n > 1:
        skew = int(s.clock_skew_us * 1000)
        p.offset_ns[1:] = rng.integers(-skew, skew + 1, size=n - 1)
    seq = np.cumsum([op != "sendrecv" for op in ops]) - 1
    p.seq = np.asarray(seq, np.int64)
    return p


# ------------------------------------------------------------------- a rank's device ops
@dataclass
class RankOps:
    """One rank's device ops on the true clock: compute (stream 0 main, 1 side, with
    template index) and calls (op, peer, start, end, segment)."""

    c_stream: np.ndarray
    c_tmpl: np.ndarray
    c_start: np.ndarray
    c_end: np.ndarray
    op: list
    peer: np.ndarray
    start: np.ndarray
    end: np.ndarray
    seg: np.ndarray


def _place_main(p: Plan, rank: int, ch: Chain) -> np.ndarray:
    """Start of every main-chain kernel: back to back from its segment's ready time."""
    seg = np.searchsorted(ch.cut, np.arange(ch.dur.size), side="right") - 1
    step = ch.gap + ch.dur
    run = np.cumsum(step) - step  # time before each kernel since the chain began
    seg_base = run[ch.cut]
    return p.ready[seg, rank] + (run - seg_base[seg]) + ch.gap


def _place_side(p: Plan, rank: int, ch: Chain) -> tuple[np.ndarray, np.ndarray]:
    """Start and duration of every side-chain kernel: each segment's run ends a little
    after the arrival (inside the call), squeezed to fit between the segment's ready
    time and the call's end."""
    seg = np.searchsorted(ch.cut, np.arange(ch.dur.size), side="right") - 1
    rng = np.random.default_rng([p.s.seed, rank, 7])
    ready, arrive, end = p.ready[:, rank], p.arrival[:, rank], p.end[:, rank]
    length = ch.lengths()
    window = np.maximum(end - ready - 2 * LINK_GAP_NS, 1)
    scale = np.minimum(1.0, window / np.maximum(length, 1))
    dur = np.maximum((ch.dur * scale[seg]).astype(np.int64), 1)
    gap = np.maximum((ch.gap * scale[seg]).astype(np.int64), 0)
    length = np.zeros(len(ch.cut), np.int64)
    np.add.at(length, seg, dur + gap)
    target_end = arrive + (rng.random(len(ch.cut)) * 0.8 * (end - arrive)).astype(np.int64)
    first = np.clip(target_end - length, ready, end - LINK_GAP_NS - length)
    first = np.maximum(first, ready)
    step = gap + dur
    run = np.cumsum(step) - step
    return first[seg] + (run - run[ch.cut][seg]) + gap, dur


def rank_ops(p: Plan, rank: int) -> RankOps:
    """Every device op of one rank, on the true clock."""
    main, side = chains(p.s, rank)
    m_start = _place_main(p, rank, main)
    s_start, s_dur = _place_side(p, rank, side)
    n = p.s.ranks
    ops, peer, start, end, seg = [], [], [], [], []
    for j in range(p.s.n_segments):
        a = int(p.arrival[j, rank])
        if p.is_p2p(j):
            pairs = (("send", (rank + 1) % n, int(p.send_end[j, rank])),
                     ("recv", (rank - 1) % n, int(p.recv_end[j, rank])))
            for op, other, e in pairs:
                ops.append(op), peer.append(other), start.append(a), end.append(e)
                seg.append(j)
        else:
            ops.append(p.op[j]), peer.append(-1), start.append(a), end.append(int(p.end[j, rank]))
            seg.append(j)
    return RankOps(c_stream=np.r_[np.zeros(main.dur.size, np.int64), np.ones(side.dur.size, np.int64)],
                   c_tmpl=np.r_[main.tmpl, side.tmpl], c_start=np.r_[m_start, s_start],
                   c_end=np.r_[m_start + main.dur, s_start + s_dur], op=ops,
                   peer=np.asarray(peer, np.int64), start=np.asarray(start, np.int64),
                   end=np.asarray(end, np.int64), seg=np.asarray(seg, np.int64))


def collectives_args(p: Plan, rank: int) -> dict:
    """The arguments of ``parastream.timeline.collectives.make_collectives`` for one rank,
    on its own clock, as the Kineto reader should find them (group "0" of every rank,
    ``seq`` per collective, peers of the sends and receives)."""
    ro = rank_ops(p, rank)
    off = int(p.offset_ns[rank])
    seq = [int(p.seq[j]) if op not in ("send", "recv") else -1 for op, j in zip(ro.op, ro.seg)]
    return dict(op=list(ro.op), group=["0"] * len(ro.op), start_ns=ro.start + off,
                end_ns=ro.end + off, seq=seq, nbytes=[int(p.nbytes[j]) for j in ro.seg],
                peer=ro.peer.tolist(), group_ranks={"0": tuple(range(p.s.ranks))})


def hccl_name(p: Plan, j: int) -> str:
    """The HCCL op name of segment j's call: the same string on every rank."""
    kind = {"allreduce": "allReduce", "allgather": "allGather",
            "reducescatter": "reduceScatter", "sendrecv": "batchSendRecv"}[p.op[j]]
    return f"hcom_{kind}__{hccl_tag(p.s)}_{j}_1"


def hccl_tag(s: Settings) -> int:
    """The group field of an HCCL op name: the last three digits of the group's hash, as
    torch_npu writes it (``hcom_allReduce__586_0_1`` in group ``...080586``)."""
    return int(group_hash(s)[-3:])


def group_hash(s: Settings) -> str:
    """A communicator's name as Ascend writes it (a 19-digit hash)."""
    return str(1_000_000_000_000_000_000 + (s.seed * 7_919 + 12_345) % 10**17)


# --------------------------------------------------------------------------- Kineto
KINETO_STREAMS = (gk.COMPUTE_STREAMS[0], gk.COMPUTE_STREAMS[1])
NCCL = {"allreduce": ("nccl:all_reduce", gk.NCCL_KERNELS[0][1]),
        "allgather": ("nccl:all_gather", gk.NCCL_KERNELS[1][1]),
        "reducescatter": ("nccl:reduce_scatter", gk.NCCL_KERNELS[2][1]),
        "send": ("nccl:send", gk.NCCL_KERNELS[3][1]), "recv": ("nccl:recv", gk.NCCL_KERNELS[3][1])}
LEAD_NS = 40_000


def nccl_args(p: Plan, rank: int, j: int, op: str, peer: int) -> str:
    """The profiler's comm args of one NCCL call (a JSON object's members, comma-led)."""
    n = p.s.ranks
    nelems = int(p.nbytes[j]) // 4
    out = nelems * n if op == "allgather" else (nelems // n if op == "reducescatter" else nelems)
    ranks = "[" + ", ".join(str(r) for r in range(n)) + "]"
    parts = [f'"Collective name": "{op}"', f'"In msg nelems": {nelems}',
             f'"Out msg nelems": {out}', f'"Group size": {n}', '"dtype": "Float"',
             '"In split size": "[]"', '"Out split size": "[]"', '"Global rank start": 0',
             '"Global rank stride": 1', '"Process Group Name": "0"',
             '"Process Group Description": "default_pg"', f'"Process Group Ranks": "{ranks}"']
    if op == "send":
        parts += [f'"Rank": {peer}', f'"Dst Rank": {peer}']
    elif op == "recv":
        parts += [f'"Rank": {peer}', f'"Src Rank": {peer}']
    else:
        parts += [f'"Rank": {rank}', f'"Seq": {int(p.seq[j])}']
    return ", " + ", ".join(parts)


def _kineto_kernels(p: Plan, rank: int) -> list[tuple]:
    """(device start, end, stream, cpu op, kernel name, comm args or "", step) of every
    kernel of a rank on its own clock (epoch ns), by device start."""
    ro = rank_ops(p, rank)
    base = gk.BASE_TS_NS + 50_000_000 + int(p.offset_ns[rank])
    out = []
    names = gk.COMPUTE_KERNELS
    starts = np.argsort(ro.c_start, kind="stable")
    per_step = p.s.per_step
    for i in starts.tolist():
        op, kname, _ = names[int(ro.c_tmpl[i]) % len(names)]
        out.append((base + int(ro.c_start[i]), base + int(ro.c_end[i]),
                    KINETO_STREAMS[int(ro.c_stream[i])], op, kname, "", -1))
    for k, op in enumerate(ro.op):
        j = int(ro.seg[k])
        stream = gk.COMM_STREAMS[1] if op == "recv" else gk.COMM_STREAMS[0]
        out.append((base + int(ro.start[k]), base + int(ro.end[k]), stream, "record_param_comms",
                    NCCL[op][1], nccl_args(p, rank, j, op, int(ro.peer[k])), j // per_step))
    out.sort(key=lambda e: (e[0], e[2]))
    return out


def _launch_budget(dev_start: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(launch time, CPU time budget) of each kernel: launches LEAD_NS before the kernel,
    in device order; a launch's CPU ops fit before the next one's."""
    launch = dev_start - LEAD_NS
    nxt = np.r_[np.diff(launch), 10_000]
    prev = np.r_[10_000, np.diff(launch)]
    return launch, np.minimum(nxt, prev)


def write_kineto(p: Plan, rank: int, out: str, compresslevel: int = 6) -> int:
    """One rank's Kineto trace; returns its device event count."""
    a = argparse.Namespace(seed=p.s.seed, min_dur=0.001, streams=2, comm_streams=2,
                           cpu_gap_ns=8_000, rank=rank, world_size=p.s.ranks, devices=1,
                           first_step=1, pattern="partial", compresslevel=compresslevel)
    g = gk.Gen(a)
    kernels = _kineto_kernels(p, rank)
    launch, budget = _launch_budget(np.array([k[0] for k in kernels], np.int64))
    step_lo: dict[int, int] = {}
    step_hi: dict[int, int] = {}
    step = 0
    for k, (ts, end, stream, op, kname, args, kstep) in enumerate(kernels):
        step = kstep if kstep >= 0 else step
        pre, ldur, post = (max(int(budget[k]) // d, 0) for d in (8, 3, 8))
        pre, ldur, post = min(pre, 1_000), min(max(ldur, 1), 4_000), min(post, 800)
        corr = g.corr
        g.corr += 1
        lt = int(launch[k])
        g.cpu_op(op, lt - pre, pre + ldur + post, args)
        g.runtime("cudaLaunchKernel", lt, ldur, corr, 211)
        g.device("kernel", kname, stream, ts, end - ts, corr, (args[2:] + ", ") if args else "")
        g.flow(corr, lt, ts, stream)
        step_lo.setdefault(step, lt - pre - 500)
        step_hi[step] = lt + ldur + post + 500
    for s in sorted(step_lo):
        hi = step_lo.get(s + 1, step_hi[s] + 1_000) - 1
        g.step_annotation(s, step_lo[s], hi)
    g.write(out)
    return g.n_device


# --------------------------------------------------------------------------- Ascend
HCCL_TYPE = {"allreduce": "hcom_allReduce_", "allgather": "hcom_allGather_",
             "reducescatter": "hcom_reduceScatter_", "sendrecv": "hcom_batchSendRecv_"}
TRANSPORTS = ("RDMA", "HCCS", "PCIE", "SDMA", "SIO")
NODE_SIZE = 8


def _row(step: int, task_stream: str, op: str, abs_ns: int, dur: int, wait: int,
         tail: str) -> str:
    """One kernel_details.csv row (benchmarks/gen_kernel_details.py's quirks):
    ``task_stream`` is "Task ID,Stream ID", ``op`` "Name,Type,OP State,Accelerator Core"."""
    return (f'{step},4294967295,{task_stream},{op},"{abs_ns // 1000}.{abs_ns % 1000:03d}\t",'
            f"{gkd.num(dur)},{gkd.num(wait)},{tail}\n")


def _stream_waits(start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Each task's gap since the previous task's end on its stream (0 for the first)."""
    return np.maximum(np.r_[0, start[1:] - end[:-1]], 0)


def kernel_details_rows(p: Plan, rank: int) -> list[tuple[int, str]]:
    """(start, CSV row) of every task of a rank, unsorted."""
    s = p.s
    ro = rank_ops(p, rank)
    base = gkd.BASE_NS + int(p.offset_ns[rank])
    rows = []
    for k, (label, tmpls) in enumerate((("2", gkd.MAIN_TEMPLATES), ("3", gkd.SIDE_TEMPLATES))):
        sel = np.flatnonzero(ro.c_stream == k)
        sel = sel[np.argsort(ro.c_start[sel], kind="stable")]
        st, en = ro.c_start[sel], ro.c_end[sel]
        seg = np.searchsorted(p.ready[:, rank], st, side="right") - 1
        waits = _stream_waits(st, en)
        for i, t in enumerate(ro.c_tmpl[sel].tolist()):
            name, typ, state, core, _, tail = tmpls[t]
            rows.append((int(st[i]), _row(int(seg[i]) // s.per_step + 1,
                                          f"{60679 + 100000 * k + i},{label}",
                                          f"{name},{typ},{state},{core}", base + int(st[i]),
                                          int(en[i] - st[i]), int(waits[i]), tail)))
    st, en = p.arrival[:, rank], p.end[:, rank]
    waits = _stream_waits(st, en)
    for j in range(s.n_segments):
        rows.append((int(st[j]), _row(p.step_of(j) + 1, "N/A,N/A",
                                      f"{hccl_name(p, j)},{HCCL_TYPE[p.op[j]]},N/A,HCCL",
                                      base + int(st[j]), int(en[j] - st[j]), int(waits[j]),
                                      gkd._NA_TAIL)))
    return rows


def _link(p: Plan, rank: int, j: int) -> tuple[int, float, float, str]:
    """(successor, MB sent, transit ms, transport) of a rank's link in segment j."""
    n = p.s.ranks
    succ = (rank + 1) % n
    factor = _link_factor(p.s, rank, succ)
    if p.is_p2p(j):
        size = float(p.nbytes[j])
        ms = max(size / BASE_GBPS, MIN_TRANSFER_NS) * factor / 1e6
    else:
        size = RING[p.op[j]](n) * float(p.nbytes[j])
        ms = max(size / BASE_GBPS * factor, MIN_TRANSFER_NS) / 1e6
    transport = "HCCS" if rank // NODE_SIZE == succ // NODE_SIZE else "RDMA"
    return succ, size / 1e6, ms, transport


def _op_info(p: Plan, rank: int, j: int) -> dict:
    """A call's communication.json entry."""
    base = gkd.BASE_NS + int(p.offset_ns[rank])
    a, e = int(p.arrival[j, rank]), int(p.end[j, rank])
    elapse = (e - a) / 1e6
    wait = min(max(int(p.arrival[j].max()) - a, 0) / 1e6, elapse)
    _, mb, ms, transport = _link(p, rank, j)
    transit = min(ms, elapse - wait)
    bw = {t: {"Transit Size(MB)": 0, "Transit Time(ms)": 0, "Bandwidth(GB/s)": 0,
              "Large Packet Ratio": 0, "Size Distribution": {}} for t in TRANSPORTS}
    bw[transport] = {"Transit Size(MB)": round(mb, 6), "Transit Time(ms)": round(ms, 6),
                     "Bandwidth(GB/s)": round(mb / ms, 4) if ms else 0,
                     "Large Packet Ratio": 1.0, "Size Distribution": {f"{mb:g}": [1, round(ms, 6)]}}
    return {"Communication Time Info": {
        "Start Timestamp(us)": (base + a) / 1000, "Elapse Time(ms)": round(elapse, 6),
        "Transit Time(ms)": round(transit, 6), "Wait Time(ms)": round(wait, 6),
        "Synchronization Time(ms)": round(wait, 6),
        "Idle Time(ms)": round(max(elapse - transit - wait, 0.0), 6),
        "Wait Time Ratio": round(wait / (wait + transit), 4) if wait + transit else 0,
        "Synchronization Time Ratio": round(wait / (wait + transit), 4) if wait + transit else 0},
        "Communication Bandwidth Info": bw}


def _total_info(ops: list[dict]) -> dict:
    """The "Total Op Info" entry: times and sizes summed."""
    keys = ("Elapse Time(ms)", "Transit Time(ms)", "Wait Time(ms)", "Synchronization Time(ms)",
            "Idle Time(ms)")
    time = {k: round(sum(o["Communication Time Info"][k] for o in ops), 6) for k in keys}
    w, t = time["Wait Time(ms)"], time["Transit Time(ms)"]
    time["Wait Time Ratio"] = time["Synchronization Time Ratio"] = round(w / (w + t), 4) if w + t else 0
    bw = {}
    for tr in TRANSPORTS:
        mb = sum(o["Communication Bandwidth Info"][tr]["Transit Size(MB)"] for o in ops)
        ms = sum(o["Communication Bandwidth Info"][tr]["Transit Time(ms)"] for o in ops)
        bw[tr] = {"Transit Size(MB)": round(mb, 6), "Transit Time(ms)": round(ms, 6),
                  "Bandwidth(GB/s)": round(mb / ms, 4) if ms else 0,
                  "Large Packet Ratio": 1.0 if mb else 0, "Size Distribution": {}}
    return {"Communication Time Info": time, "Communication Bandwidth Info": bw}


def _matrix_entries(p: Plan, rank: int, segs: list[int], group: str) -> dict:
    """communication_matrix.json entries of one step and kind: per op type its top1,
    middle and bottom1 samples and the total, each {"src-dst": figures}."""
    out: dict = {}
    by_type: dict[str, list] = {}
    for j in segs:
        succ, mb, ms, transport = _link(p, rank, j)
        by_type.setdefault(p.op[j], []).append((ms, j, {
            f"{rank}-{succ}": {"Transport Type": transport, "Transit Size(MB)": round(mb, 6),
                               "Transit Time(ms)": round(ms, 6),
                               "Bandwidth(GB/s)": round(mb / ms, 4) if ms else 0,
                               "Op Name": hccl_name(p, j)}}))
    for op, items in sorted(by_type.items()):
        items.sort(key=lambda x: (-x[0], x[1]))
        for tag, item in (("top1", items[0]), ("middle", items[len(items) // 2]),
                          ("bottom1", items[-1])):
            out[f"{op}-{tag}@{group}"] = item[2]
        total = {}
        for _, _, links in items:
            for link, f in links.items():
                t = total.setdefault(link, {"Transport Type": f["Transport Type"],
                                            "Transit Size(MB)": 0.0, "Transit Time(ms)": 0.0})
                t["Transit Size(MB)"] = round(t["Transit Size(MB)"] + f["Transit Size(MB)"], 6)
                t["Transit Time(ms)"] = round(t["Transit Time(ms)"] + f["Transit Time(ms)"], 6)
        for t in total.values():
            t["Bandwidth(GB/s)"] = round(t["Transit Size(MB)"] / t["Transit Time(ms)"], 4)
        out[f"{op}-total@{group}"] = total
    return out


def comm_documents(p: Plan, rank: int) -> tuple[dict, dict]:
    """(communication.json, communication_matrix.json) of one rank."""
    group = group_hash(p.s)
    comm: dict = {}
    matrix: dict = {}
    for step in range(max(p.s.steps, 1)):
        segs = [j for j in range(p.s.n_segments) if p.step_of(j) == step]
        kinds = {"collective": [j for j in segs if not p.is_p2p(j)],
                 "p2p": [j for j in segs if p.is_p2p(j)]}
        comm[f"step{step + 1}"] = c = {}
        matrix[f"step{step + 1}"] = m = {}
        for kind, js in kinds.items():
            ops = {f"{hccl_name(p, j)}@{group}": _op_info(p, rank, j) for j in js}
            if ops:
                ops["Total Op Info"] = _total_info(list(ops.values()))
            c[kind] = ops
            m[kind] = _matrix_entries(p, rank, js, group)
    return comm, matrix


def _write_json(path: str, doc: object) -> None:
    with open(path, "w") as fh:
        json.dump(doc, fh, indent=4)


def write_ascend(p: Plan, rank: int, out_dir: str) -> int:
    """One rank's Ascend profiler folder under ``out_dir``; returns its row count."""
    root = os.path.join(out_dir, f"rank{rank}_ascend_pt")
    prof = os.path.join(root, "ASCEND_PROFILER_OUTPUT")
    os.makedirs(prof, exist_ok=True)
    rows = kernel_details_rows(p, rank)
    rows.sort(key=lambda r: r[0])
    with open(os.path.join(prof, "kernel_details.csv"), "w", newline="") as fh:
        fh.write(gkd.HEADER + "\n")
        fh.writelines(r[1] for r in rows)
    comm, matrix = comm_documents(p, rank)
    _write_json(os.path.join(prof, "communication.json"), comm)
    _write_json(os.path.join(prof, "communication_matrix.json"), matrix)
    info = {"config": {"common_config": {"activities": ["ProfilerActivity.CPU", "ProfilerActivity.NPU"]},
                       "experimental_config": {"_profiler_level": "Level1", "_export_type": "text"}},
            "rank_id": rank}
    _write_json(os.path.join(root, f"profiler_info_{rank}.json"), info)
    meta = {"ENV_VARIABLES": {}, "parallel_group_info": {group_hash(p.s): {
        "group_name": "default_pg", "group_rank": rank, "global_ranks": list(range(p.s.ranks))}}}
    _write_json(os.path.join(root, "profiler_metadata.json"), meta)
    return len(rows)


# ---------------------------------------------------------------------------- command
def _write_rank(job: tuple) -> str:
    p, rank, out, gz, level = job
    s = p.s
    if s.fmt == "ascend":
        n = write_ascend(p, rank, out)
        return f"rank {rank}: {n} rows"
    path = os.path.join(out, f"rank-{rank}.json" + (".gz" if gz else ""))
    n = write_kineto(p, rank, path, level)
    return f"{path}: {n} device events"


def _link_arg(text: str) -> tuple[int, int]:
    a, _, b = text.partition("-")
    return int(a), int(b)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", help="output folder")
    ap.add_argument("--format", choices=["kineto", "ascend"], default="kineto")
    ap.add_argument("--ranks", type=int, default=8)
    ap.add_argument("--events", type=int, default=20_000, help="per rank (default 20000)")
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--collectives", type=int, default=0, help="per step (0: about 2%% of kernels)")
    ap.add_argument("--no-p2p", action="store_true", help="no point-to-point exchanges")
    ap.add_argument("--slow-rank", type=int, default=-1)
    ap.add_argument("--slow-factor", type=float, default=1.5)
    ap.add_argument("--slow-link", type=_link_arg, default=None, metavar="A-B")
    ap.add_argument("--link-factor", type=float, default=4.0)
    ap.add_argument("--clock-skew-us", type=float, default=0.0)
    ap.add_argument("--gzip", action="store_true", help="write rank-R.json.gz")
    ap.add_argument("--compresslevel", type=int, default=6)
    ap.add_argument("--jobs", type=int, default=1, help="ranks written in parallel")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args(argv)
    s = Settings(ranks=a.ranks, events=a.events, steps=a.steps, collectives=a.collectives,
                 p2p=not a.no_p2p, seed=a.seed, slow_rank=a.slow_rank, slow_factor=a.slow_factor,
                 slow_link=a.slow_link, link_factor=a.link_factor, clock_skew_us=a.clock_skew_us,
                 fmt=a.format)
    os.makedirs(a.out, exist_ok=True)
    p = plan(s)
    jobs = [(p, r, a.out, a.gzip, a.compresslevel) for r in range(s.ranks)]
    if a.jobs > 1:
        with ProcessPoolExecutor(a.jobs) as pool:
            lines = list(pool.map(_write_rank, jobs))
    else:
        lines = [_write_rank(j) for j in jobs]
    print("\n".join(lines), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
