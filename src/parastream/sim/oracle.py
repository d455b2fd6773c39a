"""The simulator's semantics written as a SimPy model: a test and benchmark oracle only.

FIFO queues (streams folded onto hardware queues), core pools as containers, event waits;
no bandwidth sharing. On scenarios without ties between queues competing for cores it gives
the same timeline as :mod:`parastream.sim.engine`. Needs ``simpy`` (a test dependency).
"""

from __future__ import annotations

from .engine import Device, Task


def simpy_model(tasks: list[Task], dev: Device) -> dict[str, tuple[float, float]]:
    """The same scheduler in SimPy: FIFO queues, core containers, event waits. Used only as
    a test oracle on scenarios without ties between competing queues."""
    import simpy

    env = simpy.Environment()
    cores = {"cube": simpy.Container(env, dev.cube_cores, init=dev.cube_cores),
             "vector": simpy.Container(env, dev.vector_cores, init=dev.vector_cores)}
    done = [env.event() for _ in tasks]
    out: dict[str, tuple[float, float]] = {}
    queues: dict[int, list[int]] = {}
    for i, t in enumerate(tasks):
        queues.setdefault(t.stream % dev.hw_queues, []).append(i)

    def worker(q):
        for i in queues[q]:
            t = tasks[i]
            yield env.timeout(max(0.0, i * dev.launch_us - env.now))
            for w in t.waits:
                yield done[w]
            need = max(1, min(t.block_dim, cores[t.pool].capacity)) if t.pool != "none" else 0
            if need:
                yield cores[t.pool].get(need)
            start = env.now + dev.sweep_us
            yield env.timeout(dev.sweep_us + t.dur_us)
            if need:
                yield cores[t.pool].put(need)
            out[t.name] = (start, env.now)
            done[i].succeed()

    for q in queues:
        env.process(worker(q))
    env.run()
    return out


