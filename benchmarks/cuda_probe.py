"""Where a multi-stream call's host time goes on a GPU (run on a machine with one).

On the H200 (docs/benchmarks-run.md sections 20 and 22) two streams ran the zoo models at
0.6x of the plain module while no two kernels overlapped: the host sets the wall. This
probe splits a call's time, each configuration alternating with the others in one
process, median of ``--runs`` calls after 3 warm-ups:

* per model (small scale): the plain module, the single-stream executor and each
  multi-stream candidate the planner ranks first, each with the backend's per-op timing
  events on (as ``run`` measures) and off; ``host`` is the time until the call returns
  (the issue), ``wall`` until a synchronize after it;
* per plan: ops, events, stream switches in issue order;
* chains of ``x + 1`` (16 floats) through the executor: on one stream, and alternating
  between two streams (every op waits on the one before it); the slope per op of each
  and per switch of the difference.

    python benchmarks/cuda_probe.py [--runs 30] [--out FILE.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

# this folder is on the path as the script's own: x + 1 chains, the planner's candidates
from bench_run import Chain, candidates_of


def _timed(calls: dict, runs: int) -> dict:
    """{key: {"host_us", "wall_us"}}: medians over ``runs`` rounds of every call in turn."""
    host: dict = {k: [] for k in calls}
    wall: dict = {k: [] for k in calls}
    with torch.no_grad():
        for r in range(runs + 3):
            for k, fn in calls.items():
                torch.cuda.synchronize()
                t0 = time.perf_counter_ns()
                fn()
                t1 = time.perf_counter_ns()
                torch.cuda.synchronize()
                t2 = time.perf_counter_ns()
                if r >= 3:
                    host[k].append((t1 - t0) / 1e3)
                    wall[k].append((t2 - t0) / 1e3)
    return {k: {"host_us": round(statistics.median(host[k]), 1),
                "wall_us": round(statistics.median(wall[k]), 1)} for k in calls}


def _switches(plan, order: list[str]) -> int:
    streams = [plan.assignment.get(n, 0) for n in order]
    return sum(a != b for a, b in zip(streams, streams[1:]))


def models(names: list[str], runs: int) -> list[dict]:
    from parastream.device.profile import load_profile
    from parastream.graph.ir import validate
    from parastream.zoo import ZOO
    from parastream.plan.model import Plan
    from parastream.workflow.run import to_device
    from parastream.runtime.cuda import CudaBackend
    from parastream.runtime.executor import MultiStreamExecutor

    profile = load_profile("h200")
    rows = []
    for name in names:
        m, x = to_device(*ZOO[name].factory("small", ZOO[name].phases[0]), "cuda")
        rn, _, multi = candidates_of(m.eval(), x, name, profile, top=2)
        order = validate(rn.graph)
        plans = [Plan.single(o.name for o in rn.graph.ops)] + multi
        calls, executors = {"plain": lambda: m(*x)}, []
        for plan in plans:
            for timing in (True, False):
                ex = MultiStreamExecutor(m, x, plan, runnable=rn,
                                         backend=CudaBackend(record_timeline=timing))
                executors.append(ex)
                calls[(plan.name, timing)] = (lambda e=ex: e(*x))
        res = _timed(calls, runs)
        for ex in executors:
            ex.close()
        row = {"model": name, "ops": len(order), "plain": res.pop("plain"), "plans": []}
        for plan in plans:
            row["plans"].append({"plan": plan.name, "streams": plan.stream_count(),
                                 "events": len(plan.events),
                                 "switches": _switches(plan, order),
                                 "timing_on": res[(plan.name, True)],
                                 "timing_off": res[(plan.name, False)]})
        rows.append(row)
        print(json.dumps(row), flush=True)
    return rows


def chains(runs: int, lengths: tuple[int, int] = (16, 64)) -> dict:
    from parastream.graph.torch_import import import_runnable
    from parastream.plan.assign import plan_from_assignment
    from parastream.plan.model import Plan
    from parastream.runtime.cuda import CudaBackend
    from parastream.runtime.executor import MultiStreamExecutor

    x = torch.randn(16, device="cuda")
    calls, executors = {}, []
    for n in lengths:
        m = Chain(n).eval()
        rn = import_runnable(m, (x,))
        names = [o.name for o in rn.graph.ops]
        alt = plan_from_assignment(rn.graph, {k: i % 2 for i, k in enumerate(names)},
                                   "manual", name="alternating")
        for plan in (Plan.single(names), alt):
            ex = MultiStreamExecutor(m, (x,), plan, runnable=rn, backend=CudaBackend())
            executors.append(ex)
            calls[(n, plan.name)] = (lambda e=ex: e(x))
    res = _timed(calls, runs)
    for ex in executors:
        ex.close()
    lo, hi = lengths
    out = {}
    for plan in ("single", "alternating"):
        for key in ("host_us", "wall_us"):
            out[f"{plan}_{key}_per_op"] = round(
                (res[(hi, plan)][key] - res[(lo, plan)][key]) / (hi - lo), 2)
    out["extra_wall_us_per_switch"] = round(out["alternating_wall_us_per_op"]
                                            - out["single_wall_us_per_op"], 2)
    out["raw"] = {f"{n} {p}": v for (n, p), v in res.items()}
    print(json.dumps(out), flush=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--models", default="medusa_heads,moe_layer,llama_layer")
    ap.add_argument("--out")
    args = ap.parse_args()
    print("torch", torch.__version__, torch.cuda.get_device_name(), flush=True)
    doc = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
           "chains": chains(args.runs), "models": models(args.models.split(","), args.runs)}
    if args.out:
        with open(args.out, "w") as f:
            json.dump(doc, f, indent=1)


if __name__ == "__main__":
    main()
