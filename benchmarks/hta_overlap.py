#!/usr/bin/env python3
"""Run Holistic Trace Analysis (HTA 0.5.0) comm/comp overlap on a trace file or directory.

Runs inside the HTA venv (benchmarks/setup_hta_env.sh):

  benchmarks/.venv-hta/bin/python benchmarks/hta_overlap.py TRACE.json.gz [--details]
  benchmarks/.venv-hta/bin/python benchmarks/hta_overlap.py TRACE_DIR/

Prints one JSON object on stdout:
  {"hta_version": "0.5.0", "input": ..., "load_s": ..., "overlap_s": ..., "peak_rss_mb": ...,
   "ranks": {"0": {"comp_comm_overlap_pctg": 47.03, "comp_comm_overlap_ratio": 0.47031...}}}

A single file is handed to HTA as ``trace_files={rank: path}``, the rank found with HTA's own
``create_rank_to_trace_dict`` (regex ``"rank":\\s+(\\d+)``, default 0).  A directory is handed
as ``trace_dir`` (HTA reads every *.json / *.gz in it, one rank per file).

``comp_comm_overlap_pctg`` is HTA's returned column (``round(100 * ratio, 2)``);
``comp_comm_overlap_ratio`` is the unrounded ratio, captured by wrapping ``round`` inside
``hta.analyzers.communication_analysis`` (HTA computes it but drops the column on return).

``--details`` adds, per rank, an independent recomputation on HTA's loaded (rounded,
filtered) DataFrame: union lengths of communication / computation kernels and of their
intersection (HTA's time unit: us, integers after HTA's ns rounding), the number of events per
kernel type, and whether HTA's ProfilerStep filter was active.  ``check_ratio`` =
overlap / comm_union must equal HTA's ratio; if it does not, HTA's result depends on the
unstable sort order of tied timestamps (zero-length intervals) and is not a good reference.
"""
from __future__ import annotations

import argparse
import builtins
import json
import logging
import os
import resource
import sys
import time


def _merge(iv):
    out = []
    for s, e in sorted(iv):
        if out and s <= out[-1][1]:
            if e > out[-1][1]:
                out[-1][1] = e
        else:
            out.append([s, e])
    return out


def _intersection_len(a, b):
    i = j = 0
    tot = 0
    while i < len(a) and j < len(b):
        lo = max(a[i][0], b[j][0])
        hi = min(a[i][1], b[j][1])
        if hi > lo:
            tot += hi - lo
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return tot


def details(t, rank):
    from hta.utils.utils import get_kernel_type

    df = t.traces[rank]
    sym = t.symbol_table.get_sym_table()
    g = df[df["stream"].ne(-1)]
    kinds = [get_kernel_type(sym[n]) for n in g["name"]]
    by = {}
    iv = {"COMMUNICATION": [], "COMPUTATION": []}
    for k, ts, dur in zip(kinds, g["ts"], g["dur"]):
        by[k] = by.get(k, 0) + 1
        if k in iv:
            iv[k].append((float(ts), float(ts) + float(dur)))
    comm = _merge(iv["COMMUNICATION"])
    comp = _merge(iv["COMPUTATION"])
    comm_len = sum(e - s for s, e in comm)
    comp_len = sum(e - s for s, e in comp)
    ov = _intersection_len(comm, comp)
    nonpos = sum(1 for k in ("COMMUNICATION", "COMPUTATION") for s, e in iv[k] if e <= s)
    sym_index = t.symbol_table.get_sym_id_map()
    steps = sorted(k for k in sym_index if "ProfilerStep" in k)
    return {
        "events_by_kernel_type": by,
        "comm_union_us": comm_len,
        "comp_union_us": comp_len,
        "overlap_us": ov,
        "check_ratio": (ov / comm_len) if comm_len else None,
        "nonpositive_duration_events": nonpos,
        "profiler_step_names": len(steps),
        "profiler_step_filter_applied": len(steps) >= 2,
    }


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description="HTA 0.5.0 comm/comp overlap")
    p.add_argument("trace", help="a trace .json/.json.gz, or a directory of per-rank traces")
    p.add_argument("--details", action="store_true", help="add an independent recomputation")
    p.add_argument("--include-last-profiler-step", action="store_true")
    p.add_argument("--verbose", action="store_true", help="keep HTA's log output")
    a = p.parse_args(argv)

    import importlib.metadata as md

    from hta.configs.config import logger as hta_logger

    if not a.verbose:
        hta_logger.setLevel(logging.ERROR)
    import warnings

    warnings.simplefilter("ignore")
    import hta.analyzers.communication_analysis as ca
    from hta.common.trace_file import create_rank_to_trace_dict
    from hta.trace_analysis import TraceAnalysis

    captured = []

    def _round(x, n=None):
        captured.append(x)
        return builtins.round(x, n)

    ca.round = _round  # shadows the builtin inside HTA's module only

    path = os.path.abspath(a.trace)
    t0 = time.perf_counter()
    if os.path.isdir(path):
        ta = TraceAnalysis(trace_dir=path, include_last_profiler_step=a.include_last_profiler_step)
    else:
        _, files = create_rank_to_trace_dict([path])
        ta = TraceAnalysis(trace_files=files, trace_dir=os.path.dirname(path),
                           include_last_profiler_step=a.include_last_profiler_step)
    t1 = time.perf_counter()
    res = ta.get_comm_comp_overlap(visualize=False)
    t2 = time.perf_counter()
    pct_unrounded = captured[-1] if captured else None

    ranks = {}
    for i, (rank, pct) in enumerate(zip(res["rank"], res["comp_comm_overlap_pctg"])):
        r = {"comp_comm_overlap_pctg": None if pct != pct else float(pct)}
        if pct_unrounded is not None:
            v = float(pct_unrounded.iloc[i]) / 100.0
            r["comp_comm_overlap_ratio"] = None if v != v else v
        if a.details:
            r.update(details(ta.t, int(rank)))
        ranks[str(int(rank))] = r
    out = {
        "hta_version": md.version("holistictraceanalysis"),
        "input": a.trace,
        "trace_files": {str(k): os.path.relpath(v) for k, v in ta.t.trace_files.items()},
        "load_s": round(t1 - t0, 3),
        "overlap_s": round(t2 - t1, 3),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0, 1),
        "ranks": ranks,
    }
    json.dump(out, sys.stdout, indent=1)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
