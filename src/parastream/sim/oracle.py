"""The simulator's semantics written as a SimPy model: a test and benchmark oracle only.

FIFO queues (streams folded onto hardware queues), host issue one launch overhead apart,
core pools as containers, event waits recorded as EVENT_WAIT intervals, and the same
Timeline output as :mod:`parastream.sim.engine`; no bandwidth sharing. On scenarios where
no two queues tie for cores both give the same timeline. Needs ``simpy`` (test dependency).
"""

from __future__ import annotations

import numpy as np

from .engine import POOL_CODE, Device, Result, Schedule, Task, build_timeline, busy_cores


def simpy_model(tasks: list[Task], dev: Device) -> dict[str, tuple[float, float]]:
    """Start/end (us) of every task by name."""
    res = simpy_simulate(tasks, dev)
    tl = res.timeline
    return {tl.op_name(i): (int(tl.start_ns[i]) / 1000, int(tl.end_ns[i]) / 1000)
            for i in range(len(tl))}


def simpy_simulate(tasks: list[Task], dev: Device, name: str = "simpy") -> Result:
    """The full oracle run, with the engine's Timeline as output."""
    import simpy

    env = simpy.Environment()
    cores = [None, simpy.Container(env, dev.cube_cores, init=dev.cube_cores),
             simpy.Container(env, dev.vector_cores, init=dev.vector_cores)]
    n = len(tasks)
    done = [env.event() for _ in tasks]
    done_at = [0.0] * n
    start_at = [0.0] * n
    pool_of = [POOL_CODE.get(t.pool, 0) for t in tasks]
    need = [max(1, min(t.block_dim, cores[p].capacity)) if p else 0
            for t, p in zip(tasks, pool_of)]
    wait_iv: list[tuple[int, float, float, int]] = []
    queues: dict[int, list[int]] = {}
    rank = {sid: k for k, sid in enumerate(sorted({t.stream for t in tasks}))}  # as the engine
    for i, t in enumerate(tasks):
        queues.setdefault(rank[t.stream] % dev.hw_queues, []).append(i)

    def worker(q):
        for i in queues[q]:
            t = tasks[i]
            yield env.timeout(max(0.0, i * dev.launch_us - env.now))
            began = env.now
            last = -1
            for w in t.waits:
                if not done[w].triggered:
                    yield done[w]
                if last < 0 or done_at[w] >= done_at[last]:
                    last = w
            if t.waits and env.now > began:
                wait_iv.append((i, began, env.now, last))
            if need[i]:
                yield cores[pool_of[i]].get(need[i])
            start_at[i] = env.now + dev.sweep_us
            yield env.timeout(dev.sweep_us + t.dur_us)
            if need[i]:
                yield cores[pool_of[i]].put(need[i])
            done_at[i] = env.now
            done[i].succeed()

    for q in queues:
        env.process(worker(q))
    env.run()
    pools = np.array(pool_of, np.int8)
    tl = build_timeline(tasks, Schedule(start_at, done_at, pools, need, wait_iv), dev, name)
    return Result(tl, max(done_at) if n else 0.0,
                  busy_cores(np.array(start_at), np.array(done_at), pools, need), n)
