"""Core contention: what concurrent ops ask of the device against what it has.

Never judged by op type (a MatMul can run on one core). On Ascend the evidence is the sum
of the ``Block Dim`` of the ops running at the same time versus the AI-core count (vector
cores for vector ops): a block holds one core. On CUDA a grid block is not an SM: many
blocks of several kernels share one SM, as far as its warp slots, registers and shared
memory allow. So a CUDA kernel's demand is its share of the device's warp slots (the
profiler's estimated achieved occupancy, which already accounts for its blocks per SM,
registers and shared memory) expressed in SMs: ``share x SM count``. Kernels whose
trace records no occupancy are left out, and a trace with none is "not checked".
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import combinations

import numpy as np

from . import intervals as iv
from .model import CORES, KIND_COMPUTE, Timeline

_C = {name: i for i, name in enumerate(CORES)}
CUBE_CORES = (_C["AI_CORE"], _C["MIX_AIC"], _C[""])
CUDA = _C["CUDA"]
VECTOR_CORES = (_C["AI_VECTOR_CORE"], _C["MIX_AIV"])


@dataclass
class Contention:
    pool: str  # "cube" (AI cores), "vector" (vector cores) or "sm" (CUDA: SMs by occupancy)
    streams: tuple[str, str]
    oversubscribed_ns: int
    max_demand: int
    cores: int
    first_ns: int


def demand(tl: Timeline, pool: str, cores: int) -> np.ndarray:
    """Cores each op asks of ``pool``, capped at the pool size (more blocks run in waves).

    Pools: ``cube`` (AI cores, block dims), ``vector`` (vector cores), ``sm`` (CUDA kernels:
    occupancy share x SMs, rounded up; unknown occupancy asks nothing)."""
    bd, mix, core = tl.block_dim, tl.mix_block_dim, tl.core
    if pool == "sm":
        share = tl.sm_share if tl.sm_share is not None else np.full(len(tl), np.nan)
        known = (core == CUDA) & (tl.kind == KIND_COMPUTE) & np.isfinite(share)
        d = np.where(known, np.ceil(np.nan_to_num(share) * cores - 1e-9), -1).astype(np.int64)
    elif pool == "cube":
        d = np.where(np.isin(core, CUBE_CORES), bd, -1)
        d = np.where(core == _C["MIX_AIV"], mix, d)
    else:
        d = np.where(np.isin(core, VECTOR_CORES), bd, -1)
        d = np.where(core == _C["MIX_AIC"], mix, d)
    return np.clip(d, 0, cores)


def occupancy_known(tl: Timeline) -> tuple[int, int]:
    """(CUDA kernels, of which with a recorded occupancy); copies and memsets run on copy
    engines and hold no SM."""
    cuda = (tl.core == CUDA) & (tl.kind == KIND_COMPUTE)
    n = int(cuda.sum())
    if tl.sm_share is None or n == 0:
        return n, 0
    return n, int((cuda & np.isfinite(tl.sm_share)).sum())


def core_contention(tl: Timeline, stream_codes: list[int], pool: str, cores: int
                    ) -> list[Contention]:
    """Where, per stream pair, the summed demand of concurrent ops exceeded ``cores``."""
    dem = demand(tl, pool, cores)
    active = dem > 0
    if not active.any():
        return []
    seg_s, seg_e, level = iv.weighted_level(tl.start_ns[active], tl.end_ns[active], dem[active])
    over = level > cores
    if not over.any():
        return []
    over_u = iv.union(seg_s[over], seg_e[over])
    per_stream = {s: iv.union(tl.start_ns[active & (tl.stream == s)], tl.end_ns[active & (tl.stream == s)])
                  for s in stream_codes}
    out = []
    for a, b in combinations(stream_codes, 2):
        both = iv.intersect(per_stream[a], per_stream[b])
        hit = iv.intersect(both, over_u)
        t = iv.length(hit)
        if t <= 0:
            continue
        # the highest demand among the segments that touch this pair's oversubscribed time
        k = np.searchsorted(hit[0], seg_e, side="left") - 1
        inside = over & (k >= 0) & (hit[1][np.clip(k, 0, None)] > seg_s)
        out.append(Contention(pool, (tl.streams[a], tl.streams[b]), t,
                              int(level[inside].max()) if inside.any() else int(level[over].max()),
                              cores, int(hit[0][0])))
    out.sort(key=lambda c: -c.oversubscribed_ns)
    return out


def contention_text(c: dict) -> str:
    """One core-contention entry of an analysis document (``pool``, ``streams``,
    ``max_demand``, ``cores``, ``oversubscribed_us``) as a sentence."""
    unit = "SMs (by occupancy)" if c["pool"] == "sm" else "cores"
    return (f"core contention ({c['pool']}): streams {c['streams'][0]}+{c['streams'][1]} "
            f"asked for up to {c['max_demand']} of {c['cores']} {unit} for "
            f"{c['oversubscribed_us']:.3f} us")
