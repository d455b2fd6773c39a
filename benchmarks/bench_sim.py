"""Simulator speed: 1M tasks, and side by side with the equivalent SimPy model.

    python benchmarks/bench_sim.py [--tasks 1000000] [--simpy-tasks 100000] [--reps 3]

The scenario: tasks on 6 streams over 4 hardware queues, random durations and block dims,
30% of tasks wait for one earlier task; cores plentiful enough that no two queues tie for
them (so both models give the same timeline, which is checked on the SimPy-sized run).
Each timed run starts after a full collection with the previous results dropped, so neither
tool pays for the other's garbage. The SimPy model runs with the garbage collector on, as
SimPy models do (``--simpy-gc-off`` turns it off for SimPy too); the engine switches it off
for its own run, as part of its design.
Reports medians of wall time and tasks per second, and the engine/SimPy ratio.
"""

from __future__ import annotations

import argparse
import gc
import random
import statistics
import time

from parastream.sim.engine import Device, Task, simulate


def scenario(n: int, seed: int = 0) -> list[Task]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        waits = [rng.randrange(max(0, i - 50), i)] if i and rng.random() < 0.3 else []
        out.append(Task(f"t{i}", rng.randrange(6), float(rng.randint(1, 40)),
                        rng.choice(("cube", "vector", "none")), rng.randint(1, 30), False, waits))
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tasks", type=int, default=1_000_000)
    ap.add_argument("--simpy-tasks", type=int, default=100_000)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--simpy-gc-off", action="store_true",
                    help="run the SimPy model with the garbage collector off too")
    a = ap.parse_args()
    dev = Device("bench", 10_000, 10_000, 4, launch_us=0.25, sweep_us=0.5)
    small = scenario(a.simpy_tasks, seed=1)
    from parastream.sim.oracle import simpy_simulate

    e_small, s_small = [], []
    mine = ref_run = None
    for _ in range(a.reps):
        # each timed run starts from a collected heap, with the other tool's results dropped
        mine = ref_run = None
        gc.collect()
        t = time.perf_counter()
        mine = simulate(small, dev)
        e_small.append(time.perf_counter() - t)
        gc.collect()
        if a.simpy_gc_off:
            gc.disable()
        t = time.perf_counter()
        ref_run = simpy_simulate(small, dev)
        s_small.append(time.perf_counter() - t)
        gc.enable()
    big = scenario(a.tasks)
    eng = []
    for _ in range(a.reps):
        gc.collect()
        t = time.perf_counter()
        simulate(big, dev)
        eng.append(time.perf_counter() - t)
    del big
    a_tl, b_tl = mine.timeline, ref_run.timeline
    same = (a_tl.names == b_tl.names and (a_tl.start_ns == b_tl.start_ns).all()
            and (a_tl.end_ns == b_tl.end_ns).all() and a_tl.n_waits == b_tl.n_waits
            and (a_tl.wait_start_ns == b_tl.wait_start_ns).all()
            and (a_tl.wait_end_ns == b_tl.wait_end_ns).all())
    m = statistics.median
    print("| scenario | tool | tasks | wall median (s) | tasks/s |")
    print("|---|---|---:|---:|---:|")
    print(f"| 1M | parastream engine | {a.tasks:,} | {m(eng):.2f} | {a.tasks / m(eng):,.0f} |")
    print(f"| side by side | parastream engine | {a.simpy_tasks:,} | {m(e_small):.2f} | {a.simpy_tasks / m(e_small):,.0f} |")
    print(f"| side by side | SimPy model (same Timeline output) | {a.simpy_tasks:,} | {m(s_small):.2f} | {a.simpy_tasks / m(s_small):,.0f} |")
    print(f"\nper run (s): engine side by side {[round(x, 2) for x in e_small]}, "
          f"SimPy {[round(x, 2) for x in s_small]}, engine 1M {[round(x, 2) for x in eng]}")
    print(f"\nengine / SimPy speed: {m(s_small) / m(e_small):.2f}x; identical timelines: {same}")


if __name__ == "__main__":
    main()
