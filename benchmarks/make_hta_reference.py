#!/usr/bin/env python3
"""(Re)generate tests/data/kineto/synthetic_comm_*.json.gz and tests/data/hta_reference.json.

Needs the HTA venv (bash benchmarks/setup_hta_env.sh).  Run from anywhere:
  python benchmarks/make_hta_reference.py            # regenerate traces + reference
  python benchmarks/make_hta_reference.py --check    # only verify the stored reference

For every trace, HTA 0.5.0 is run three ways through benchmarks/hta_overlap.py:
  default                          -> hta_comm_comp_overlap_pct / _ratio (the reference)
  --include-last-profiler-step     -> *_include_last_step (HTA's ProfilerStep filter relaxed)
  HTA_DISABLE_NS_ROUNDING=1        -> *_no_ns_rounding (HTA's ceil/floor of float ts disabled)
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HTA_PY = os.path.join(ROOT, "benchmarks", ".venv-hta", "bin", "python")
KDIR = os.path.join("tests", "data", "kineto")
REF = os.path.join("tests", "data", "hta_reference.json")

SYNTHETIC = {
    # name: generator args (see benchmarks/gen_kineto.py)
    "synthetic_comm_partial.json.gz": "--kernels 300 --streams 2 --comm-streams 1 --pattern partial "
                                      "--comm-frac 0.08 --steps 3 --cpu-gap-ns 70000 --seed 11",
    "synthetic_comm_full.json.gz": "--kernels 300 --streams 3 --comm-streams 1 --pattern full "
                                   "--comm-frac 0.05 --steps 0 --seed 12",
    "synthetic_comm_two_streams.json.gz": "--kernels 300 --streams 2 --comm-streams 2 --pattern partial "
                                          "--comm-frac 0.15 --steps 4 --cpu-gap-ns 40000 --seed 13",
}
REAL = ["cuda_event_sync_multi_stream.json.gz", "simple_add.json.gz", "alexnet.json.gz",
        "inductor_rank0.json.gz", "amd_mi250_rocm6_2.json.gz", "nccl_data.json.gz",
        "hta_sampled_2rank/sampled_rank-0.json.gz", "hta_sampled_2rank/sampled_rank-1.json.gz"]


def hta(path: str, *extra: str, env: dict | None = None) -> dict:
    cmd = [HTA_PY, "benchmarks/hta_overlap.py", path, "--details", *extra]
    e = dict(os.environ)
    e.update(env or {})
    out = subprocess.run(cmd, cwd=ROOT, env=e, check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def main(argv=None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--check", action="store_true")
    a = p.parse_args(argv)
    if not a.check:
        for name, args in SYNTHETIC.items():
            subprocess.run([sys.executable, "benchmarks/gen_kineto.py", os.path.join(KDIR, name),
                            *args.split()], cwd=ROOT, check=True)
    ref = {}
    for name in list(SYNTHETIC) + REAL:
        path = os.path.join(KDIR, name)
        base = hta(path)
        last = hta(path, "--include-last-profiler-step")
        noround = hta(path, env={"HTA_DISABLE_NS_ROUNDING": "1"})
        (rank, r), = base["ranks"].items()
        cmd = f"benchmarks/.venv-hta/bin/python benchmarks/hta_overlap.py {path}"
        if name in SYNTHETIC:
            gen = f"python benchmarks/gen_kineto.py {path} {SYNTHETIC[name]}"
        else:
            gen = "real trace (see tests/data/README.md)"
        ref[path] = {
            "rank": int(rank),
            "hta_comm_comp_overlap_pct": r["comp_comm_overlap_pctg"],
            "hta_comm_comp_overlap_ratio": r.get("comp_comm_overlap_ratio"),
            # what HTA's DataFrame holds: NaN (0/0) when there are no communication kernels
            "hta_says": "NaN" if r["comp_comm_overlap_pctg"] is None else r["comp_comm_overlap_pctg"],
            "comm_union_us": r["comm_union_us"],
            "comp_union_us": r["comp_union_us"],
            "overlap_us": r["overlap_us"],
            "events_by_kernel_type": r["events_by_kernel_type"],
            "profiler_step_filter_applied": r["profiler_step_filter_applied"],
            "nonpositive_duration_events": r["nonpositive_duration_events"],
            "hta_comm_comp_overlap_pct_include_last_step":
                last["ranks"][rank]["comp_comm_overlap_pctg"],
            "hta_comm_comp_overlap_pct_no_ns_rounding":
                noround["ranks"][rank]["comp_comm_overlap_pctg"],
            "command": cmd,
            "generated_by": gen,
            "hta_version": base["hta_version"],
        }
        chk = r.get("check_ratio")
        hr = r.get("comp_comm_overlap_ratio")
        if (chk is None) != (hr is None) or (chk is not None and abs(chk - hr) > 1e-12):
            print(f"WARNING {name}: HTA ratio {hr} != recomputed {chk} (tie-order dependent)", file=sys.stderr)
        print(f"{path}: {ref[path]['hta_comm_comp_overlap_pct']}", file=sys.stderr)
    if a.check:
        old = json.load(open(os.path.join(ROOT, REF)))
        bad = [k for k in ref if old.get(k) != ref[k]]
        print("reference OK" if not bad else f"reference differs: {bad}")
        return 1 if bad else 0
    with open(os.path.join(ROOT, REF), "w") as fh:
        json.dump(ref, fh, indent=2, allow_nan=False)
        fh.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
