"""Freed memory kept (``--malloc keep``) against glibc's own settings (``--malloc system``),
CPU backend. Results go to docs/benchmarks-run.md (section 14).

Each zoo model at the given scale is measured in child processes, one per setting,
alternating keep / system (which goes first alternates too) for ``--rounds`` rounds (which calls page-fault depends on the
allocator's history, so every round starts from a fresh process). A child applies the
setting first, builds the model, and times after warm-up: the plain module (all cores), the
single-stream executor and a two-stream plan (matching) on the executor, ``--runs`` calls
each, alternating; it reports each one's median wall and median page faults per call.
Reported per model: the median over rounds of each figure, and system / keep wall ratios.
Usage:
    .venv/bin/python benchmarks/bench_malloc.py [--scale small] [--rounds 3] [--runs 15]
        [--models a,b]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys


def child(spec: dict) -> dict:
    from parastream.cpu import malloc

    malloc.apply(spec["malloc"])
    import time
    import warnings

    warnings.filterwarnings("ignore")
    import torch

    from parastream.graph.ir import validate
    from parastream.graph.torch_import import import_runnable
    from parastream.zoo import ZOO
    from parastream.plan.assign import assign
    from parastream.plan.model import Plan
    from parastream.runtime.executor import MultiStreamExecutor

    z = ZOO[spec["model"]]
    module, inputs = z.factory(spec["scale"], z.phases[0])
    rn = import_runnable(module, inputs, name=spec["model"])
    order = validate(rn.graph)
    runners = {"plain": lambda: module(*inputs)}
    single = MultiStreamExecutor(module, inputs, Plan.single(order), runnable=rn)
    runners["executor"] = lambda: single(*inputs)
    multi = MultiStreamExecutor(module, inputs, assign(rn.graph, "matching", max_streams=2),
                                runnable=rn)
    runners["two streams"] = lambda: multi(*inputs)
    walls: dict[str, list[float]] = {k: [] for k in runners}
    faults: dict[str, list[int]] = {k: [] for k in runners}
    try:
        with torch.no_grad():
            for _ in range(3):
                for fn in runners.values():
                    fn()
            for _ in range(spec["runs"]):
                for k, fn in runners.items():
                    f0 = malloc.page_faults() or 0
                    t0 = time.perf_counter_ns()
                    fn()
                    walls[k].append((time.perf_counter_ns() - t0) / 1e3)
                    faults[k].append((malloc.page_faults() or 0) - f0)
    finally:
        single.close()
        multi.close()
    return {k: {"wall_us": statistics.median(walls[k]), "faults": statistics.median(faults[k])}
            for k in runners}


def main() -> None:
    if len(sys.argv) == 3 and sys.argv[1] == "--child":
        print(json.dumps(child(json.loads(sys.argv[2]))))
        return
    ap = argparse.ArgumentParser()
    ap.add_argument("--scale", default="small")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--runs", type=int, default=15)
    ap.add_argument("--models", default="")
    args = ap.parse_args()
    from parastream.zoo import ZOO

    names = [n for n in (args.models.split(",") if args.models else ZOO) if n]
    print(f"CPU, 2 cores; scale {args.scale}; {args.rounds} rounds of fresh processes, "
          f"{args.runs} calls each; medians", flush=True)
    for name in names:
        got: dict[str, list[dict]] = {"keep": [], "system": []}
        for r in range(args.rounds):
            # which setting goes first alternates: a process started right after another
            # one ran slower at tiny scale (0.76-0.91x for whichever went first)
            for setting in (("keep", "system") if r % 2 == 0 else ("system", "keep")):
                spec = {"model": name, "scale": args.scale, "runs": args.runs, "malloc": setting}
                env = {k: v for k, v in os.environ.items()
                       if not k.startswith("MALLOC_")}
                r = subprocess.run([sys.executable, __file__, "--child", json.dumps(spec)],
                                   capture_output=True, text=True, env=env, timeout=900)
                if r.returncode != 0:
                    print(f"{name}: {setting} failed: {r.stderr.strip().splitlines()[-1:]}")
                    break
                got[setting].append(json.loads(r.stdout.strip().splitlines()[-1]))
        if not got["keep"] or not got["system"]:
            continue
        parts = []
        for k in got["keep"][0]:
            w = {s: statistics.median(g[k]["wall_us"] for g in got[s]) for s in got}
            f = {s: statistics.median(g[k]["faults"] for g in got[s]) for s in got}
            parts.append(f"{k}: keep {w['keep']:,.0f} us ({f['keep']:,.0f} faults), system "
                         f"{w['system']:,.0f} us ({f['system']:,.0f} faults), "
                         f"{w['system'] / w['keep']:.2f}x")
        print(f"{name}: " + "; ".join(parts), flush=True)


if __name__ == "__main__":
    main()
