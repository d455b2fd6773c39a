"""Communication/computation overlap, pooled over all streams (HTA-compatible).

Holistic Trace Analysis reports one number per rank: the share of communication time
during which some computation ran, ``|U(comp) ∩ U(comm)| / |U(comm)|``, with all
streams pooled and kernels classified by name (communication ``^nccl|^hccl|ncclKernel``,
memory ``Memcpy|Memset``, the rest computation). parastream computes the same figure so
results can be checked against HTA; on Ascend the HCCL lane is communication.
"""

from __future__ import annotations

import re

import numpy as np

from . import intervals as iv
from .model import KIND_COMM, KIND_COMPUTE, Timeline


def comm_comp_overlap_pct(tl: Timeline) -> float | None:
    """Percent of communication time overlapped by computation; None without communication."""
    comm = tl.kind == KIND_COMM
    if not comm.any():
        return None
    comp = tl.kind == KIND_COMPUTE
    u_comm = iv.union(tl.start_ns[comm], tl.end_ns[comm])
    total = iv.length(u_comm)
    if total == 0:
        return None
    u_comp = iv.union(tl.start_ns[comp], tl.end_ns[comp])
    return 100.0 * iv.intersection_length(u_comm, u_comp) / total


def comm_exposed_ns(tl: Timeline) -> int | None:
    """Communication time with no computation beside it (Ascend's "Communication (Not
    Overlapped)"): the time a rank spends communicating, or waiting for its peers inside a
    collective, without hiding it. None without communication."""
    comm = tl.kind == KIND_COMM
    if not comm.any():
        return None
    comp = tl.kind == KIND_COMPUTE
    u_comm = iv.union(tl.start_ns[comm], tl.end_ns[comm])
    u_comp = iv.union(tl.start_ns[comp], tl.end_ns[comp])
    return iv.length(u_comm) - iv.intersection_length(u_comm, u_comp)


# --- Holistic Trace Analysis 0.5.0, reproduced exactly -----------------------------------
# HTA classifies with re.match (anchored at the start, case-sensitive); note that a
# "Stream Wait Event" counts as computation there and HCCL names are not communication.
_HTA_COMM = re.compile(r"^nccl.*Kernel")
_HTA_MEMORY = re.compile(r"(^Memcpy)|(^Memset)|(^dma)")
_HTA_NOT_COMP = re.compile(r"(^nccl.*Kernel)|(.*(Memcpy)|(Memset))|(.*Sync)")


def hta_kernel_type(name: str) -> str:
    """HTA's ``get_kernel_type``: "comm", "memory", "comp" or "other"."""
    if _HTA_COMM.match(name):
        return "comm"
    if _HTA_MEMORY.match(name):
        return "memory"
    if not _HTA_NOT_COMP.match(name):
        return "comp"
    return "other"


def hta_round(start_ns: np.ndarray, dur_ns: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """HTA's timestamp rounding of float traces: ts = ceil(ts), end = floor(ts + dur), in
    float64 microseconds as pandas holds them (so the 0.25 us grid of epoch doubles shows)."""
    whole, frac = np.divmod(start_ns, 1000)
    ts = whole.astype(np.float64) + frac / 1000.0  # the double nearest the decimal text
    dur = dur_ns / 1000.0
    return np.ceil(ts), np.floor(ts + dur)


def hta_comm_comp_overlap_pct(names: list[str], name: np.ndarray, start_ns: np.ndarray,
                              dur_ns: np.ndarray, rounding: bool) -> float | None:
    """HTA 0.5.0's ``get_comm_comp_overlap`` for one rank: 100 x |U(comp) ∩ U(comm)| /
    |U(comm)|, over every GPU event given (kernels, memcpy/memset, stream waits), rounded
    to 2 decimals; None where HTA says NaN (no communication)."""
    kinds = np.array([hta_kernel_type(n) for n in names], dtype=object)
    k = kinds[name] if name.size else np.zeros(0, dtype=object)
    if rounding:  # whole microseconds, held here as integer nanoseconds
        ts_us, end_us = hta_round(start_ns, dur_ns)
        ts, end = ts_us.astype(np.int64) * 1000, end_us.astype(np.int64) * 1000
    else:
        ts, end = start_ns, start_ns + dur_ns
    comm = iv.union(ts[k == "comm"], end[k == "comm"], keep_empty=True)
    total = int((comm[1] - comm[0]).sum())  # HTA sums its groups, inverted ones included
    if comm[0].size == 0 or total == 0:
        return None
    comp = iv.union(ts[k == "comp"], end[k == "comp"])
    overlap = iv.intersection_length(iv.union(*comm), comp)
    return float(np.round(100.0 * overlap / total, 2))
