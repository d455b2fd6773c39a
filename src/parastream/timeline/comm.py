"""Communication/computation overlap, pooled over all streams (HTA-compatible).

Holistic Trace Analysis reports one number per rank: the share of communication time
during which some computation ran, ``|U(comp) ∩ U(comm)| / |U(comm)|``, with all
streams pooled and kernels classified by name (communication ``^nccl|^hccl|ncclKernel``,
memory ``Memcpy|Memset``, the rest computation). parastream computes the same figure so
results can be checked against HTA; on Ascend the HCCL lane is communication.
"""

from __future__ import annotations

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
