#!/usr/bin/env python3
"""Deterministic generator of a big Ascend ``kernel_details.csv`` (torch_npu profiler).

Same 46 columns and quirks as tests/data/ascend/kernel_details_block_dim.csv: ``Step Id`` first,
``Block Dim`` / ``Mix Block Dim``, ``Start Time(us)`` as a quoted string with a trailing TAB and
ns decimals (``"1736413971558972.912\t"``), triple-quoted shapes, ``Model ID`` 4294967295,
PMU columns.  Compute rows are spread over several streams (main stream 2 plus side streams);
communication rows (``Accelerator Core`` = HCCL, ``hcom_*``) have ``N/A`` Task ID and Stream ID.
Rows on one stream (and the HCCL rows among themselves) never overlap.  Rows are sorted by start.

Usage:
  python benchmarks/gen_kernel_details.py OUT.csv --rows 1000000 --seed 0
"""
from __future__ import annotations

import argparse
import sys

import numpy as np

HEADER = (
    "Step Id,Model ID,Task ID,Stream ID,Name,Type,OP State,Accelerator Core,Start Time(us),"
    "Duration(us),Wait Time(us),Block Dim,Mix Block Dim,HF32 Eligible,Input Shapes,"
    "Input Data Types,Input Formats,Output Shapes,Output Data Types,Output Formats,Context ID,"
    "aicore_time(us),aic_total_cycles,aic_mac_time(us),aic_mac_ratio,aic_scalar_time(us),"
    "aic_scalar_ratio,aic_mte1_time(us),aic_mte1_ratio,aic_mte2_time(us),aic_mte2_ratio,"
    "aic_fixpipe_time(us),aic_fixpipe_ratio,aic_icache_miss_rate,aiv_time(us),aiv_total_cycles,"
    "aiv_vec_time(us),aiv_vec_ratio,aiv_scalar_time(us),aiv_scalar_ratio,aiv_mte2_time(us),"
    "aiv_mte2_ratio,aiv_mte3_time(us),aiv_mte3_ratio,aiv_icache_miss_rate,cube_utilization(%)"
)
assert HEADER.count(",") == 45

# (Name, Type, OP State, Accelerator Core, mean duration us, raw CSV tail from Block Dim on)
# The first seven are the op templates of tests/data/ascend/kernel_details_block_dim.csv.
MAIN_TEMPLATES = [
    ('aclnnMatmul_MatMulCommon_MatMulV2', 'MatMulV2', 'dynamic', 'AI_CORE', 185.504,
     '16,0,NO,"""81920,4096;8192,512""",DT_BF16;DT_BF16,ND;ND,"""4096,512""",DT_BF16,ND,N/A,183.87,5295467,151.425,0.824,88.03,0.479,119.148,0.648,177.314,0.964,5.736,0.031,0.001,0,0,0,0,0,0,0,0,0,0,0,79.295'),
    ('aclnnMatmul_MatMulV3Common_MatMulV3', 'MatMulV3', 'dynamic', 'AI_CORE', 501.17,
     '20,0,NO,"""81920,1536;8192,4096""",DT_BF16;DT_BF16,ND;ND,"""1536,4096""",DT_BF16,ND,N/A,478.701,17233251,356.349,0.744,118.087,0.247,296.009,0.618,452.112,0.944,35.833,0.075,0.001,0,0,0,0,0,0,0,0,0,0,0,95.517'),
    ('aclnnMatmul_MatMulV3Common_MatMulV5', 'MatMulV3', 'dynamic', 'AI_CORE', 521.31,
     '20,0,NO,"""8192,15365;8192,4096""",DT_BF16;DT_BF16,ND;ND,"""1536,4096""",DT_BF16,ND,N/A,499.234,17972434,356.364,0.714,117.639,0.236,295.58,0.592,471.784,0.945,35.825,0.072,0.001,0,0,0,0,0,0,0,0,0,0,0,95.765'),
    ('aclnnFlashAttentionScore_FlashAttentionScore_FlashAttentionScore', 'FlashAttentionScore', 'dynamic', 'MIX_AIC', 410.188,
     '20,40,NO,"""4096,2,512;4096,2,512;4096,2,512;;;;4096,4096;;;;;""",DT_BF16;DT_BF16;DT_BF16;DT_BF16;UINT8;DT_BF16;BOOL;INT64;INT64;INT64;INT64;INT64,NCL;NCL;NCL;ND;ND;ND;ND;ND;ND;ND;ND;ND,"""2,4,4096,8;2,4,4096,8;;4096,2,512""",FLOAT;FLOAT;DT_BF16;DT_BF16,ND;ND;ND;ND,0,366.147,13181275,129.055,0.352,352.275,0.962,108.364,0.296,172.86,0.872,216.141,0.59,0.003,365.782,26336326,228.687,0.625,137.979,0.377,118.603,0.324,71.448,0.195,0.013,89.263'),
    ('aclnnFlashAttentionScoreGrad_FlashAttentionScoreGrad_FlashAttentionScoreGrad', 'FlashAttentionScoreGrad', 'dynamic', 'MIX_AIC', 762.215,
     '20,40,NO,"""4096,2,512;4096,2,512;4096,2,512;4096,2,512;4096,4096;2,4,4096,8;2,4,4096,8;;4096,2,512;""",DT_BF16;DT_BF16;DT_BF16;DT_BF16;BOOL;FLOAT;FLOAT;DT_BF16;DT_BF16;INT64,NCL;NCL;NCL;NCL;ND;NCHW;NCHW;ND;NCL;ND,"""4096,2,512;4096,2,512;4096,2,512;""",DT_BF16;DT_BF16;DT_BF16;DT_BF16,ND;ND;ND;ND,0,755.664,27203907,344.023,0.455,592.472,0.784,266.388,0.353,397.091,0.525,589.726,0.525,0.004,755.04,54362915,318.452,0.422,184.623,0.245,206.78,0.274,152.973,0.203,0.006,99.141'),
    ('aclnnFlashAttentionScore_FlashAttentionScore_FlashAttentionScore_varlen', 'FlashAttentionScore', 'dynamic', 'MIX_AIC', 405.228,
     '20,40,NO,"""4096,2,511;4096,2,512;4096,2,512;;;;4096,4096;;;;;""",DT_BF16;DT_BF16;DT_BF16;DT_BF16;UINT8;DT_BF16;BOOL;INT64;INT64;INT64;INT64;INT64,NCL;NCL;NCL;ND;ND;ND;ND;ND;ND;ND;ND;ND,"""2,3,4096,8;2,4,4096,8;;4096,2,512""",FLOAT;FLOAT;DT_BF16;DT_BF16,ND;ND;ND;ND,0,359.793,12952532,128.923,0.358,345.768,0.961,108.411,0.301,167.379,0.465,208.79,0.58,0.003,359.294,25869164,228.691,0.637,138.411,0.385,107.868,0.3,70.163,0.195,0.013,88.788'),
    ('aclnnAdd_AddAiCore_Add', 'Add', 'dynamic', 'AI_VECTOR_CORE', 26.78,
     '40,0,NO,"""512,2,4096;512,2,4096""",DT_BF16;DT_BF16,NCL;NCL,"""512,2,4096""",DT_BF16,ND,N/A,0,0,0,0,0,0,0,0,0,0,0,0,0,24.19,1741674,5.986,0.247,1.352,0.056,20.363,0.842,3.195,0.132,0.027,0'),
]
MAIN_WEIGHTS = [0.22, 0.12, 0.04, 0.1, 0.06, 0.02, 0.44]

SIDE_TEMPLATES = [
    ('aclnnCast_CastAiCore_Cast', 'Cast', 'dynamic', 'AI_VECTOR_CORE', 12.4,
     '40,0,NO,"""512,2,4096""",DT_BF16,NCL,"""512,2,4096""",FLOAT,ND,N/A,0,0,0,0,0,0,0,0,0,0,0,0,0,10.872,782784,2.012,0.185,0.944,0.087,8.113,0.746,2.951,0.271,0.031,0'),
    ('aclnnRmsNorm_RmsNorm_RmsNorm', 'RmsNorm', 'dynamic', 'AI_VECTOR_CORE', 31.2,
     '40,0,NO,"""4096,2,4096;4096""",DT_BF16;DT_BF16,ND;ND,"""4096,2,4096;4096,2,1""",DT_BF16;FLOAT,ND;ND,N/A,0,0,0,0,0,0,0,0,0,0,0,0,0,29.51,2124720,12.31,0.417,3.702,0.125,22.66,0.768,6.24,0.211,0.018,0'),
    ('aclnnGroupedMatmul_GroupedMatmul_GroupedMatmul', 'GroupedMatmul', 'dynamic', 'MIX_AIV', 96.3,
     '20,40,NO,"""2048,4096;8,4096,1536""",DT_BF16;DT_BF16,ND;ND,"""2048,1536""",DT_BF16,ND,0,92.416,3326976,70.114,0.759,19.33,0.209,55.81,0.604,84.02,0.909,8.1,0.088,0.002,91.7,6602400,20.47,0.223,15.36,0.168,40.12,0.437,18.9,0.206,0.009,84.652'),
    ('aclnnNonzero_NonzeroAiCpu_Nonzero', 'Nonzero', 'dynamic', 'AI_CPU', 48.0,
     '1,0,N/A,"""4096""",BOOL,ND,"""4096,1""",INT64,ND,N/A,N/A,N/A,N/A,N/A,N/A,N/A,N/A,N/A,N/A,N/A,N/A,N/A,N/A,N/A,N/A,N/A,N/A,N/A,N/A,N/A,N/A,N/A,N/A,N/A,N/A'),
]
SIDE_WEIGHTS = [0.45, 0.3, 0.2, 0.05]

_NA_TAIL = "0,0,N/A,N/A,N/A,N/A,N/A,N/A,N/A,N/A," + ",".join(["N/A"] * 25)
HCCL_TEMPLATES = [
    ('hcom_allReduce__{k}_0_1', 'hcom_allReduce_', 'N/A', 'HCCL', 820.0, _NA_TAIL),
    ('hcom_allGather__{k}_1_1', 'hcom_allGather_', 'N/A', 'HCCL', 450.0, _NA_TAIL),
    ('hcom_reduceScatter__{k}_2_1', 'hcom_reduceScatter_', 'N/A', 'HCCL', 500.0, _NA_TAIL),
    ('hcom_send__{k}_3_1', 'hcom_send_', 'N/A', 'HCCL', 120.0, _NA_TAIL),
]
HCCL_WEIGHTS = [0.4, 0.25, 0.25, 0.1]

BASE_NS = 1736413971411629_128


def num(ns: int) -> str:
    """ns -> us with up to 3 decimals, trailing zeros stripped (``501.17``, ``2.2``, ``0``)."""
    s = f"{ns // 1000}.{ns % 1000:03d}".rstrip("0").rstrip(".")
    return s


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out")
    p.add_argument("--rows", type=int, default=1_000_000)
    p.add_argument("--side-streams", type=int, default=2, help="extra compute streams besides 2")
    p.add_argument("--hccl-frac", type=float, default=0.03)
    p.add_argument("--side-frac", type=float, default=0.25)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--first-step", type=int, default=1)
    p.add_argument("--busy", type=float, default=0.85, help="target busy fraction of the main stream")
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args(argv)
    rng = np.random.default_rng(a.seed)

    n = a.rows
    n_hccl = int(round(n * a.hccl_frac))
    n_side_total = int(round(n * a.side_frac))
    side_ids = [3 + i for i in range(a.side_streams)]
    n_side = [n_side_total // max(1, len(side_ids))] * len(side_ids)
    n_main = n - n_hccl - sum(n_side)

    seqs = []  # (stream label, task ids?, template list, template index array, dur ns array)

    def durations(templates, weights, count):
        idx = rng.choice(len(templates), size=count, p=np.array(weights) / np.sum(weights))
        means = np.array([t[4] for t in templates])[idx] * 1000.0
        d = np.maximum(1000, (means * rng.lognormal(0.0, 0.08, size=count)).astype(np.int64))
        return idx, d

    idx_m, d_m = durations(MAIN_TEMPLATES, MAIN_WEIGHTS, n_main)
    span = int(d_m.sum() / a.busy)

    def place(d, sp):
        """Start times (ns offsets) of back-to-back tasks with random gaps filling span sp."""
        free = max(sp - int(d.sum()), len(d) * 200)
        g = rng.exponential(1.0, size=len(d))
        g = (g / g.sum() * free).astype(np.int64) + 50
        ends = np.cumsum(g + d)
        return ends - d

    seqs.append(("2", MAIN_TEMPLATES, idx_m, d_m, place(d_m, span)))
    for sid, cnt in zip(side_ids, n_side):
        i_s, d_s = durations(SIDE_TEMPLATES, SIDE_WEIGHTS, cnt)
        seqs.append((str(sid), SIDE_TEMPLATES, i_s, d_s, place(d_s, span)))
    i_h, d_h = durations(HCCL_TEMPLATES, HCCL_WEIGHTS, n_hccl)
    seqs.append(("N/A", HCCL_TEMPLATES, i_h, d_h, place(d_h, span)))

    # merge, sort by start (stable: ties by sequence order)
    starts = np.concatenate([s[4] for s in seqs])
    order = np.argsort(starts, kind="stable")
    seq_of = np.concatenate([np.full(len(s[4]), k, dtype=np.int16) for k, s in enumerate(seqs)])
    pos_of = np.concatenate([np.arange(len(s[4])) for s in seqs])
    end_all = int(max(int(s[4][-1] + s[3][-1]) for s in seqs if len(s[4])))
    step_len = max(1, end_all // max(1, a.steps) + 1)

    task_base = [60679 + 100000 * k for k in range(len(seqs))]
    # pre-render template strings
    rendered = []
    for label, tmpls, _, _, _ in seqs:
        rendered.append([(t[0], f"{t[1]},{t[2]},{t[3]}", t[5]) for t in tmpls])

    with open(a.out, "w", newline="") as fh:
        fh.write(HEADER + "\n")
        buf = []
        hccl_k = 500
        for o in order.tolist():
            k = int(seq_of[o])
            i = int(pos_of[o])
            label, _, idx, d, st = seqs[k]
            t = int(idx[i])
            name, mid, tail = rendered[k][t]
            s_ns = int(st[i])
            dur = int(d[i])
            if i > 0:
                prev_end = int(st[i - 1] + d[i - 1])
                wait = min(s_ns - prev_end, 999_999)
                wait = int(rng.integers(300, 2_500)) if wait > 2_500 else wait
            else:
                wait = 0
            step = a.first_step + s_ns // step_len
            if label == "N/A":
                name = name.format(k=hccl_k)
                hccl_k += 1
                task = "N/A"
            else:
                task = str(task_base[k] + i)
            abs_ns = BASE_NS + s_ns
            buf.append(
                f'{step},4294967295,{task},{label},{name},{mid},"{abs_ns // 1000}.{abs_ns % 1000:03d}\t",'
                f"{num(dur)},{num(wait)},{tail}\n"
            )
            if len(buf) >= 20000:
                fh.write("".join(buf))
                buf.clear()
        fh.write("".join(buf))
    print(f"{a.out}: {n} rows (main {n_main}, side {sum(n_side)}, hccl {n_hccl})", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
