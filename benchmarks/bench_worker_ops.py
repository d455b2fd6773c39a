"""Two costs of the cpu backend's worker threads (CPU only; see docs/benchmarks-run.md §9).

1. ``hold``: the executor handing each stream its whole program at once (streams held
   while the call is issued) against a hand-off per op: one executor per model, the two
   modes alternating call by call, medians of ``--calls`` calls each.
2. ``team``: an element-wise op (a 64Ki-element add) on a fresh worker thread with one and
   with two intra-op threads, back to back and with a busy gap before each call, in a
   process whose main thread has or has not run a multi-threaded op (created its OpenMP
   team). Each configuration runs in a process of its own.

    python benchmarks/bench_worker_ops.py [--calls 40] [--models two_chains/small/multi,...]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time

GAPS_US = (0, 10, 20, 50)


def hold_ab(specs: list[str], calls: int) -> None:
    from parastream.device.profile import load_profile
    from parastream.graph.torch_import import import_runnable
    from parastream.zoo import ZOO
    from parastream.workflow.plan import build
    from parastream.plan.model import Plan
    from parastream.cpu import backend as cpu
    from parastream.runtime.executor import MultiStreamExecutor

    profile = load_profile("cpu")
    hold = cpu.CpuStream.hold
    for spec in specs:
        name, scale, which = spec.split("/")
        module, inputs = ZOO[name].factory(scale, ZOO[name].phases[0])
        rn = import_runnable(module, inputs, name=name)
        if which == "single":
            plan = Plan.single(o.name for o in rn.graph.ops)
        else:
            doc = build(rn.graph, profile, algorithm=None, mapping=None, max_streams=None)
            plan = next(c for c in doc.candidates if c.stream_count() > 1)
        ex = MultiStreamExecutor(module, inputs, plan, backend="cpu", runnable=rn)
        try:
            for _ in range(5):
                ex(*inputs)
            walls: dict[str, list[float]] = {"held": [], "per-op": []}
            for _ in range(calls):
                for mode, w in walls.items():
                    cpu.CpuStream.hold = hold if mode == "held" else (lambda self: None)
                    t = time.perf_counter_ns()
                    ex(*inputs)
                    w.append((time.perf_counter_ns() - t) / 1e3)
        finally:
            cpu.CpuStream.hold = hold
            ex.close()
        a, b = (statistics.median(walls[k]) for k in ("held", "per-op"))
        print(f"hold  {spec:34s} held {a:8.0f} us  per-op {b:8.0f} us  ratio {a / b:.3f}",
              flush=True)


def team_child(main_team: bool) -> dict:
    import threading

    import torch

    torch.set_grad_enabled(False)
    if main_team:
        torch.randn(1 << 20) + 1  # a threaded op on the main thread creates its team
    a, b = torch.randn(1, 128, 512), torch.randn(1, 128, 512)
    out: dict[str, float] = {}

    def spin(us: float) -> None:
        end = time.perf_counter() + us / 1e6
        while time.perf_counter() < end:
            pass

    def worker(threads: int) -> None:
        torch.set_num_threads(threads)
        for gap in GAPS_US:
            ts = []
            for _ in range(300):
                if gap:
                    spin(gap)
                t = time.perf_counter_ns()
                torch.add(a, b)
                ts.append((time.perf_counter_ns() - t) / 1e3)
            out[f"{threads}t gap{gap}"] = round(statistics.median(ts[30:]), 1)

    for threads in (2, 1):
        th = threading.Thread(target=worker, args=(threads,))
        th.start()
        th.join()
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=40)
    ap.add_argument("--models", default="two_chains/small/multi,two_chains/tiny/multi,"
                    "kv_offload/small/multi,kv_offload/small/single,llama_layer/tiny/single,"
                    "medusa_heads/tiny/multi,attention_prolog/small/multi")
    ap.add_argument("--team-child", choices=("0", "1"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.team_child is not None:
        print(json.dumps(team_child(args.team_child == "1")))
        return
    print("CPU; medians in us", flush=True)
    for main_team in ("0", "1"):
        for _ in range(3):
            r = subprocess.run([sys.executable, __file__, "--team-child", main_team],
                               capture_output=True, text=True, check=True)
            res = json.loads(r.stdout)
            print(f"team  main thread team={main_team == '1'}:",
                  "  ".join(f"{k} {v:.0f}" for k, v in res.items()), flush=True)
    hold_ab([m for m in args.models.split(",") if m], args.calls)


if __name__ == "__main__":
    main()
