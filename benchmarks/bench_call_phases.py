"""Where a cpu-backend executor call spends its time (CPU; docs/benchmarks-run.md sections 11 and 12).

1. ``chain``: the executor's cost per op on calibrate's chain of varied tiny ops (views,
   ``cat``, ``linear``, norms, softmax) on one stream, against the same module run eagerly: the
   slope between two chain lengths, the lowest of 3 medians of 40 calls each.
2. ``phases MODEL SCALE``: one zoo model's single-stream plan, the plain module run
   between calls as ``measure`` does: the issue loop (call start to first op), the ops'
   busy time, the gaps between them, the end of the call; the sum of the profile's
   estimates for the same ops; and every folded view's own time, which runs inside the
   interval of the op that first reads it.
3. ``late MODEL SCALE``: the model's best multi-stream candidate, 40 calls, with nothing /
   the plain module / the plain module and an untimed call between two timed calls:
   how often stream 0's first op (on the calling thread) lasts over 300 us because another
   stream's worker took its core.
4. ``settle MODEL SCALE``: the best multi-stream candidate's calls for 40 ms after the
   plain module ran on all cores (when each starts, how long it takes), five times, and
   how long torch's OpenMP pool thread spins after a parallel op (``team_spin_s``).
5. ``isolate MODEL SCALE``: per op type of the single-stream plan, the profile's estimate
   of the ops' own time, the same ops timed alone with their real inputs, and inside the
   model; the folded views likewise.

    python benchmarks/bench_call_phases.py chain
    python benchmarks/bench_call_phases.py phases llama_layer tiny [--profile P.json]
    python benchmarks/bench_call_phases.py late two_chains small [--profile P.json]
    python benchmarks/bench_call_phases.py settle two_chains small [--profile P.json]
    python benchmarks/bench_call_phases.py isolate inference_pipeline tiny [--profile P.json]

Without ``--profile`` the profile is calibrated first (``parastream calibrate --quick``).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import warnings
from functools import partial
from pathlib import Path

import torch

warnings.filterwarnings("ignore")
KEEP = slice(5, None)  # calls kept of 40 (the first ones warm up)


def chain() -> None:
    from parastream.graph.torch_import import import_runnable
    from parastream.plan.model import Plan
    from parastream.runtime.executor import MultiStreamExecutor
    from parastream.runtime.measure import median_wall_us
    from parastream.calibrate.chains import varied_chain  # calibrate's chain, as it times it

    torch.set_num_threads(1)
    x = torch.randn(1, 16)
    walls = {}
    for n in (2, 16):
        m = varied_chain(n)
        rn = import_runnable(m, (x,))
        ops = len(rn.graph.ops)
        with MultiStreamExecutor(m, (x,), Plan.single(o.name for o in rn.graph.ops),
                                 runnable=rn, intra_op_threads=1) as ex, torch.no_grad():
            walls[n] = (ops, min(median_wall_us(lambda: ex(x), 40) for _ in range(3)),
                        min(median_wall_us(lambda: m(x), 40) for _ in range(3)))
    (o1, e1, p1), (o2, e2, p2) = walls[2], walls[16]
    print(f"varied chain, {o1} and {o2} ops: executor {(e2 - e1) / (o2 - o1):.2f} us per op, "
          f"eager {(p2 - p1) / (o2 - o1):.2f} us per op (CPU)")


def _model(name: str, scale: str):
    from parastream.graph.torch_import import import_runnable
    from parastream.zoo import ZOO

    module, inputs = ZOO[name].factory(scale, ZOO[name].phases[0])
    return module, inputs, import_runnable(module, inputs, name=name)


def phases(name: str, scale: str, profile) -> None:
    from parastream.device.cost import estimate
    from parastream.graph.ir import validate
    from parastream.plan.model import Plan
    from parastream.runtime.executor import MultiStreamExecutor
    from parastream.sim.run import tasks_for

    module, inputs, rn = _model(name, scale)
    order = validate(rn.graph)
    plan = Plan.single(order)
    ops = rn.graph.index()
    costs = {n: estimate(ops[n], profile) for n in order}
    est = sum(t.dur_us for t in tasks_for(rn.graph, plan, profile, costs=costs, order=order))
    own: dict[str, list[float]] = {}
    ex = MultiStreamExecutor(module, inputs, plan, runnable=rn)
    real = ex._call

    def timed_call(n, args, kwargs):  # every node's own time, views included
        t = time.perf_counter_ns()
        out = real(n, args, kwargs)
        own.setdefault(n.name, []).append((time.perf_counter_ns() - t) / 1e3)
        return out

    rows = []
    with torch.no_grad():
        for i in range(40):
            module(*inputs)  # the single-stream reference between calls, as measure does
            ex._call = timed_call if i % 2 else real  # odd calls: views timed, not kept
            t0 = time.perf_counter_ns()
            ex(*inputs)
            t1 = time.perf_counter_ns()
            if i % 2 == 0:
                rec = ex.streams[0].recorder.ops
                busy = sum(e - s for _, s, e in rec)
                rows.append(((rec[0][1] - t0) / 1e3, busy / 1e3,
                             (rec[-1][2] - rec[0][1] - busy) / 1e3, (t1 - rec[-1][2]) / 1e3,
                             (t1 - t0) / 1e3))
    ex.close()
    keep = rows[3:]
    print(f"{name} {scale}, single stream, {len(order)} ops, medians of {len(keep)} calls (CPU):")
    for k, label in enumerate(("issue loop", "ops busy", "gaps between ops",
                               "after the last op", "wall")):
        print(f"  {label:18s} {statistics.median(r[k] for r in keep):9.1f} us")
    print(f"  profile's estimates of the ops: {est:.1f} us (executor "
          f"{profile.launch_overhead_us} us per op and {profile.run_overhead_us} per call)")
    views = {n: statistics.median(ts[3:]) for n, ts in own.items() if n not in ops}
    if views:
        print(f"  {len(views)} folded views, {sum(views.values()):.1f} us per call: " +
              ", ".join(f"{n} {t:.1f}" for n, t in views.items()))


def _best_multi(name: str, scale: str, profile):
    """(module, inputs, runnable, [best multi-stream candidate]) of a zoo model, or None
    (said) when it has no multi-stream candidate."""
    sys.path.insert(0, str(Path(__file__).parent))
    from bench_run import candidates_of

    module, inputs, _ = _model(name, scale)
    rn, _, multi = candidates_of(module, inputs, name, profile, top=1)
    if not multi:
        print(f"{name} {scale}: no multi-stream candidate")
        return None
    return module, inputs, rn, multi


def late(name: str, scale: str, profile) -> None:
    from parastream.runtime.executor import MultiStreamExecutor

    found = _best_multi(name, scale, profile)
    if found is None:
        return
    module, inputs, rn, multi = found
    for mode in ("nothing", "plain module", "plain module + untimed call"):
        walls, first = [], []
        with MultiStreamExecutor(module, inputs, multi[0], runnable=rn) as ex, torch.no_grad():
            for _ in range(40):
                if mode != "nothing":
                    module(*inputs)
                if mode.endswith("call"):
                    ex(*inputs)
                t0 = time.perf_counter_ns()
                ex(*inputs)
                walls.append((time.perf_counter_ns() - t0) / 1e3)
                _, s, e = ex.streams[0].recorder.ops[0]
                first.append((e - s) / 1e3)
        kept = first[KEEP]
        print(f"{name} {scale} {multi[0].name[:40]}, between timed calls: {mode:28s} "
              f"wall {statistics.median(walls[KEEP]):8.0f} us, stream 0's first op over "
              f"300 us in {sum(f > 300 for f in kept)}/{len(kept)} calls (CPU)")


def settle(name: str, scale: str, profile) -> None:
    """After 5 plain-module calls on all cores: the model's best multi-stream candidate
    called for 40 ms, each call's start (ms after the plain calls) and wall (us), five
    times; then the pool thread's spin that ``measure`` now waits out."""
    from parastream.runtime.host import set_intra_op_threads, team_spin_s
    from parastream.runtime.executor import MultiStreamExecutor, _cores

    found = _best_multi(name, scale, profile)
    if found is None:
        return
    module, inputs, rn, multi = found
    print(f"{name} {scale} {multi[0].name[:50]}: start ms:wall us of each call (CPU)")
    with MultiStreamExecutor(module, inputs, multi[0], runnable=rn) as ex, torch.no_grad():
        for _ in range(5):
            set_intra_op_threads(_cores())
            for _ in range(5):
                module(*inputs)
            end, row = time.perf_counter(), []
            while time.perf_counter() - end < 0.04:
                t0 = time.perf_counter()
                ex(*inputs)
                row.append(f"{(t0 - end) * 1e3:.1f}:{(time.perf_counter() - t0) * 1e6:.0f}")
            print("  " + " ".join(row))
    print(f"team_spin_s({_cores()}) = {team_spin_s(_cores()) * 1e3:.1f} ms")


def isolate(name: str, scale: str, profile) -> None:
    """Per op type of the model's single-stream plan: the profile's estimate of the ops'
    own time (without the executor's per-op cost and the folded views), the same ops timed
    alone with their real inputs (a burst of 200 each, median), and inside the model
    (each op's time in 35 executor calls with the plain module run between them, median);
    then the folded views alone and inside the model."""
    from parastream.device.cost import estimate
    from parastream.graph.ir import validate
    from parastream.plan.model import Plan
    from parastream.runtime.executor import MultiStreamExecutor
    from parastream.runtime.measure import median_wall_us

    module, inputs, rn = _model(name, scale)
    order = validate(rn.graph)
    ops = rn.graph.index()
    inside: dict[str, list[float]] = {}
    saved: dict[str, tuple] = {}
    with MultiStreamExecutor(module, inputs, Plan.single(order), runnable=rn) as ex, \
            torch.no_grad():
        real = ex._call

        def timed_call(n, args, kwargs):  # every node's own time, views included
            t = time.perf_counter_ns()
            out = real(n, args, kwargs)
            inside.setdefault(n.name, []).append((time.perf_counter_ns() - t) / 1e3)
            saved[n.name] = (n, args, kwargs)
            return out

        ex._call = timed_call
        for _ in range(40):
            module(*inputs)  # the single-stream reference between calls, as measure does
            ex(*inputs)
        ex._call = real
        alone = {n_name: median_wall_us(partial(real, n, args, kwargs), 200, warmup=20)
                 for n_name, (n, args, kwargs) in saved.items()}
    rows: dict[str, list[float]] = {}
    for n in order:
        c = estimate(ops[n], profile)
        row = rows.setdefault(ops[n].type, [0, 0.0, 0.0, 0.0])
        row[0] += 1
        row[1] += c.dur_us - profile.launch_overhead_us - c.views_us
        row[2] += alone[n]
        row[3] += statistics.median(inside[n][KEEP])
    total = [sum(r[k] for r in rows.values()) for k in (1, 2, 3)]
    print(f"{name} {scale}, single stream, {len(order)} ops (CPU): estimated {total[0]:.0f} us, "
          f"alone {total[1]:.0f} us, inside the model {total[2]:.0f} us")
    for ty, (n, est, al, ins) in sorted(rows.items(), key=lambda kv: -kv[1][3]):
        print(f"  {ty:30s} x{n:<3d} estimated {est:7.1f}  alone {al:7.1f}  inside {ins:7.1f}")
    views = [n for n in saved if n not in ops]
    if views:
        print(f"  {len(views)} folded views: alone {sum(alone[v] for v in views):.1f} us, inside "
              f"{sum(statistics.median(inside[v][KEEP]) for v in views):.1f} us "
              f"(profile: {profile.view_us} us each)")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("what", choices=("chain", "phases", "late", "settle", "isolate"))
    ap.add_argument("model", nargs="?", default="llama_layer")
    ap.add_argument("scale", nargs="?", default="tiny")
    ap.add_argument("--profile", default=None)
    args = ap.parse_args()
    if args.what == "chain":
        chain()
        return
    from parastream.device.profile import load_profile
    from parastream.cpu.overhead import calibrated_profile

    profile = (load_profile(args.profile) if args.profile else
               calibrated_profile(quick=True))
    {"phases": phases, "late": late, "settle": settle,
     "isolate": isolate}[args.what](args.model, args.scale, profile)


if __name__ == "__main__":
    main()
