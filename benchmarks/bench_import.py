#!/usr/bin/env python3
"""Benchmark: import a 32-layer Llama-style model at 7B-like shapes, then decompose it.

Each repetition runs in a fresh child process (so torch's one-time warm-up is counted
honestly in "cold" and nothing is cached between runs) and reports, in seconds:

  torch   - ``import torch``
  build   - constructing the 32-layer model on the meta device (no weights allocated)
  import  - ``parastream.graph.torch_import.import_module`` (torch.export + graph building)
  validate- ``ir.validate`` (topological order)
  decomp  - ``parastream.graph.decompose.decompose`` on the h100 profile, when installed
  rss_mb  - the child's peak resident memory

Usage (from the repository root):
  .venv/bin/python benchmarks/bench_import.py [--reps 3] [--layers 32] [--phase prefill]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys

CHILD = r"""
import json, resource, sys, time
t0 = time.perf_counter()
import torch
t1 = time.perf_counter()
from parastream.graph import ir, zoo
from parastream.graph.torch_import import import_module
module, inputs = zoo.llama_stack("7b", PHASE, layers=LAYERS)
t2 = time.perf_counter()
g = import_module(module, inputs, name="llama_stack")
t3 = time.perf_counter()
ir.validate(g)
t4 = time.perf_counter()
decomp = None
modules = None
try:
    from parastream.device.profile import load_profile
    from parastream.graph.decompose import decompose
except ImportError:
    pass
else:
    d = decompose(g, load_profile("h100"))
    decomp = time.perf_counter() - t4
    modules = len(d.modules)
print(json.dumps({"torch": t1 - t0, "build": t2 - t1, "import": t3 - t2, "validate": t4 - t3,
                  "decomp": decomp, "modules": modules, "ops": len(g.ops),
                  "edges": len(g.edges), "tflops": sum(o.flops for o in g.ops) / 1e12,
                  "params_gb": g.meta["params_bytes"] / 1e9,
                  "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--layers", type=int, default=32)
    ap.add_argument("--phase", choices=("prefill", "decode"), default="prefill")
    args = ap.parse_args()
    code = CHILD.replace("PHASE", repr(args.phase)).replace("LAYERS", str(args.layers))
    runs = []
    for i in range(args.reps):
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           timeout=600)
        if r.returncode != 0:
            print(r.stderr, file=sys.stderr)
            return 1
        runs.append(json.loads(r.stdout.strip().splitlines()[-1]))
        print(f"run {i + 1}: " + ", ".join(f"{k} {v:.3g}" if isinstance(v, float) else f"{k} {v}"
                                          for k, v in runs[-1].items()))
    med = {k: statistics.median(r[k] for r in runs) for k in runs[0]
           if all(isinstance(r[k], (int, float)) for r in runs)}
    print(f"\n{args.layers}-layer Llama-style, 7B-like shapes, {args.phase}, median of "
          f"{len(runs)} fresh processes:")
    print(f"  ops {med['ops']:.0f}, edges {med['edges']:.0f}, {med['tflops']:.1f} TFLOPs, "
          f"{med['params_gb']:.1f} GB of (meta, unallocated) bf16 weights")
    print(f"  import torch {med['torch']:.2f} s | build on meta {med['build']:.2f} s | "
          f"import_module {med['import']:.2f} s | validate {med['validate']:.3f} s"
          + (f" | decompose {med['decomp']:.2f} s ({med['modules']:.0f} modules)"
             if "decomp" in med else ""))
    print(f"  peak RSS {med['rss_mb']:.0f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
