"""The simulator: analytic cases, a SimPy twin on small scenarios, GE reorder."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from parastream.sim.engine import Device, Task, simulate

DEV = Device("test", cube_cores=20, vector_cores=40, hw_queues=4, launch_us=0.0, sweep_us=0.0)


def test_independent_ops_with_enough_cores_overlap_fully():
    r = simulate([Task("a", 0, 100, "cube", 10), Task("b", 1, 100, "cube", 10)], DEV)
    assert r.wall_us == 100


def test_block_dims_over_the_cores_serialise():
    r = simulate([Task("a", 0, 100, "cube", 15), Task("b", 1, 100, "cube", 15)], DEV)
    assert r.wall_us == 200


def test_five_streams_on_four_queues_behave_like_four():
    five = simulate([Task(f"t{i}", i, 100, "cube", 1) for i in range(5)], DEV).wall_us
    four_plus_one = simulate([Task(f"t{i}", i % 4, 100, "cube", 1) for i in range(5)], DEV).wall_us
    assert five == four_plus_one == 200


@pytest.mark.parametrize("ids", [(0, 4), (0, 8), (3, 7), (0, 10**12)])
def test_stream_ids_are_labels_not_queue_numbers(ids):
    # an emit audit: streams 0 and 4 on 4 queues shared queue 0 (s mod 4) and serialised
    r = simulate([Task("a", ids[0], 100, "cube", 1), Task("b", ids[1], 100, "cube", 1)], DEV)
    assert r.wall_us == 100
    assert sorted(r.timeline.streams) == sorted(str(i) for i in ids)


def test_memory_bound_tasks_share_bandwidth():
    r = simulate([Task("a", 0, 100, "none", 0, True), Task("b", 1, 100, "none", 0, True)], DEV)
    assert r.wall_us == pytest.approx(200)


def test_memory_streams_let_that_many_memory_bound_tasks_run_at_full_speed():
    from dataclasses import replace

    pair = [Task("a", 0, 100, "none", 0, True), Task("b", 1, 100, "none", 0, True)]
    assert simulate(pair, replace(DEV, memory_streams=2.0)).wall_us == pytest.approx(100)
    # 1.5 streams for two tasks: each runs at 0.75 of its speed
    assert simulate(pair, replace(DEV, memory_streams=1.5)).wall_us == pytest.approx(100 / 0.75)
    # a third task joins half way through: the shares change and are settled
    trio = pair + [Task("c", 2, 50, "none", 0, True)]
    r = simulate(trio, replace(DEV, memory_streams=2.0))
    # all three start at 0 with 2/3 speed each: c finishes at 75, a and b have 50 left
    # and finish 50 later at full speed
    assert r.wall_us == pytest.approx(125)


def test_the_host_lock_serialises_only_the_tasks_host_parts():
    from dataclasses import replace

    # two streams of 30 us tasks whose first 10 us hold the host lock
    tasks = [Task(f"t{i}", i % 2, 30, "cube", 1, host_us=10) for i in range(4)]
    free = simulate(tasks, DEV).wall_us
    locked = simulate(tasks, replace(DEV, host_lock=True))
    assert free == pytest.approx(60)
    # stream 1 starts 10 us late, and at 30 both streams' next tasks are ready: stream 0's
    # takes the lock, stream 1's starts at 40, its successor... ends at 70
    assert locked.wall_us == pytest.approx(70)
    starts = sorted(int(x) for x in locked.timeline.start_ns)
    assert starts == [0, 10_000, 30_000, 40_000]
    # tasks that are all host work run one at a time, whatever the streams
    host = [Task(f"h{i}", i % 2, 10, "cube", 1, host_us=10) for i in range(6)]
    assert simulate(host, replace(DEV, host_lock=True)).wall_us == pytest.approx(60)
    # without the lock (accelerators), host_us is ignored
    assert simulate(host, DEV).wall_us == pytest.approx(30)


def test_a_blocking_wait_costs_the_wake_up_and_a_satisfied_one_does_not():
    from dataclasses import replace

    dev = replace(DEV, wake_us=7.0)
    # b reaches its queue's head while a still runs: it sleeps and is woken 7 us after a
    r = simulate([Task("a", 0, 100, "cube", 1), Task("b", 1, 50, "cube", 1, waits=[0])], dev)
    assert r.wall_us == pytest.approx(157)
    # c's event was recorded before c reached the head of its queue: no wake-up
    r = simulate([Task("a", 0, 10, "cube", 1), Task("x", 1, 40, "cube", 1),
                  Task("c", 1, 50, "cube", 1, waits=[0])], dev)
    assert r.wall_us == pytest.approx(90)


def test_wait_is_recorded_as_event_wait():
    r = simulate([Task("a", 0, 100, "cube", 1), Task("b", 1, 50, "cube", 1, waits=[0])], DEV)
    assert r.wall_us == 150
    assert r.timeline.n_waits == 1 and int(r.timeline.wait_end_ns[0]) == 100_000


def random_tasks(rng: random.Random, n: int, streams: int) -> list[Task]:
    out = []
    for i in range(n):
        waits = [j for j in rng.sample(range(i), min(i, 2)) if rng.random() < 0.3] if i else []
        out.append(Task(f"t{i}", rng.randrange(streams), float(rng.randint(1, 40)),
                        rng.choice(["cube", "vector", "none"]), rng.randint(1, 30), False, waits))
    return out


@pytest.mark.parametrize("seed", range(30))
def test_chain_never_beats_its_critical_path_and_work_bound(seed):
    rng = random.Random(seed)
    tasks = random_tasks(rng, 60, 4)
    dev = Device("t", 24, 24, 4, launch_us=0.5, sweep_us=1.0)
    r = simulate(tasks, dev)
    # the critical path through waits and stream order
    end: dict[int, float] = {}
    last: dict[int, float] = {}
    for i, t in enumerate(tasks):
        s = max([end[w] for w in t.waits] + [last.get(t.stream % 4, 0.0)])
        end[i] = s + t.dur_us
        last[t.stream % 4] = end[i]
    assert r.wall_us >= max(end.values()) - 1e-9
    cube_work = sum(t.dur_us * min(t.block_dim, 24) for t in tasks if t.pool == "cube")
    assert r.wall_us >= cube_work / 24 - 1e-9


simpy = pytest.importorskip("simpy")
from parastream.sim.oracle import simpy_model  # noqa: E402


@pytest.mark.parametrize("seed", range(20))
def test_identical_to_a_simpy_model(seed):
    rng = random.Random(100 + seed)
    dev = Device("t", 1000, 1000, 3, launch_us=0.25, sweep_us=0.5)  # no core ties
    tasks = random_tasks(rng, 40, 5)
    mine = simulate(tasks, dev).timeline
    ref = simpy_model(tasks, dev)
    for i in range(len(mine)):
        n = mine.op_name(i)
        assert (int(mine.start_ns[i]), int(mine.end_ns[i])) == \
            (round(ref[n][0] * 1000), round(ref[n][1] * 1000)), n


@pytest.mark.parametrize("seed", range(10))
def test_same_timeline_including_waits_as_simpy(seed):
    from parastream.sim.oracle import simpy_simulate

    rng = random.Random(500 + seed)
    dev = Device("t", 1000, 1000, 3, launch_us=0.25, sweep_us=0.5)
    tasks = random_tasks(rng, 50, 4)
    a, b = simulate(tasks, dev).timeline, simpy_simulate(tasks, dev).timeline
    assert (a.start_ns == b.start_ns).all() and (a.end_ns == b.end_ns).all()
    assert a.n_waits == b.n_waits
    assert (a.wait_start_ns == b.wait_start_ns).all() and (a.wait_end_ns == b.wait_end_ns).all()
    assert (a.wait_on == b.wait_on).all()


@pytest.mark.parametrize("launch_us", [0.0, 8.0, 30.0])
@pytest.mark.parametrize("seed", range(6))
def test_host_bound_and_instant_issue_match_simpy(seed, launch_us):
    """Tasks issued after their queue drained (host slower than the device) start at their
    issue time, and a zero launch cost issues everything at once; both as in SimPy."""
    from parastream.sim.oracle import simpy_simulate

    rng = random.Random(900 + seed)
    dev = Device("t", 1000, 1000, 3, launch_us=launch_us, sweep_us=0.5)
    tasks = random_tasks(rng, 60, 5)
    a, b = simulate(tasks, dev).timeline, simpy_simulate(tasks, dev).timeline
    assert list(a.start_ns) == list(b.start_ns) and list(a.end_ns) == list(b.end_ns)
    assert list(a.wait_start_ns) == list(b.wait_start_ns) and list(a.wait_end_ns) == list(b.wait_end_ns)
    if launch_us == 30.0:  # host-bound: the wall is the last issue plus its task
        assert simulate(tasks, dev).wall_us >= (len(tasks) - 1) * launch_us


def test_a_wait_on_a_later_task_stalls_with_an_error():
    with pytest.raises(RuntimeError, match="stalled"):
        simulate([Task("a", 0, 10, "cube", 1, waits=[1]), Task("b", 0, 10, "cube", 1)], DEV)


def test_a_sleeping_worker_holds_neither_the_lock_nor_cores():
    from dataclasses import replace

    # b's worker sleeps until 10 + 50: c (stream 0) takes the lock and runs at 10
    dev = replace(DEV, host_lock=True, wake_us=50.0)
    r = simulate([Task("a", 0, 10, "cube", 1, host_us=1),
                  Task("b", 1, 10, "cube", 1, waits=[0], host_us=1),
                  Task("c", 0, 10, "cube", 1, host_us=1)], dev)
    start = {r.timeline.op_name(k): int(r.timeline.start_ns[k]) for k in range(len(r.timeline))}
    assert start == {"a": 0, "c": 10_000, "b": 60_000} and r.wall_us == pytest.approx(70)
    # the wake-up counts from the event, not from when cores came free: b's event is at 10,
    # the only core is busy until 100, so b starts at 100 (not 105)
    one = Device("one", cube_cores=1, vector_cores=1, hw_queues=8, launch_us=0.0, sweep_us=0.0,
                 wake_us=5.0)
    r = simulate([Task("a", 0, 10, "none", 0), Task("x", 1, 100, "cube", 1),
                  Task("b", 2, 10, "cube", 1, waits=[0])], one)
    start = {r.timeline.op_name(k): int(r.timeline.start_ns[k]) for k in range(len(r.timeline))}
    assert start["b"] == 100_000


def test_a_worker_sleeping_on_the_lock_goes_on_one_wake_up_after_its_release():
    """With ``lock_wake_us`` a task needs the host lock at its end too: a (20 us, 5 us of
    host) ends at 20 while b holds the lock, so it hands over its result at b's release
    plus the wake-up; b, blocked at its start by a, started one wake-up after a's release."""
    from dataclasses import replace

    tasks = [Task("a", 0, 20, "cube", 1, host_us=5), Task("b", 1, 40, "cube", 1, host_us=30)]

    def spans(dev):
        r = simulate(tasks, dev)
        tl = r.timeline
        return {tl.op_name(k): (int(tl.start_ns[k]) // 1000, int(tl.end_ns[k]) // 1000)
                for k in range(len(tl))}, r.wall_us

    # without the wake-up: b starts at a's release (5) and a ends when its kernel does
    assert spans(replace(DEV, host_lock=True)) == ({"a": (0, 20), "b": (5, 45)}, 45)
    # with it: b wakes at 5 + 10 and holds the lock 15-45; a waits for it: 45 + 10
    assert spans(replace(DEV, host_lock=True, lock_wake_us=10.0)) == (
        {"a": (0, 55), "b": (15, 55)}, 55)
    # nothing changes on a device without the host lock
    assert spans(replace(DEV, lock_wake_us=10.0)) == ({"a": (0, 20), "b": (0, 40)}, 40)


def test_a_worker_woken_for_the_lock_sleeps_again_when_it_was_taken_again():
    """A woken waiter does not get Python's lock ahead of a running thread that takes it
    first: a (kernel to 20) sleeps on b1's lock (15-40) until 50; by then b2, started
    by b1's own worker at 45, holds it (45-70), so a sleeps again and hands over its
    result at 70 + 10 (it went on at 50 before, as if the lock were free)."""
    from dataclasses import replace

    tasks = [Task("a", 0, 20, "cube", 1, host_us=5),
             Task("b1", 1, 30, "cube", 1, host_us=25), Task("b2", 1, 30, "cube", 1, host_us=25)]
    r = simulate(tasks, replace(DEV, host_lock=True, lock_wake_us=10.0))
    tl = r.timeline
    span = {tl.op_name(k): (tl.start_ns[k] / 1e3, tl.end_ns[k] / 1e3) for k in range(len(tl))}
    assert span == {"a": (0.0, 80.0), "b1": (15.0, 45.0), "b2": (45.0, 75.0)}
    assert r.wall_us == 80.0


def test_a_task_never_waits_for_its_own_release_of_the_lock():
    """A memory-bound task that is all host work releases the lock as it ends; with a
    sweep cost the two can land a rounding step apart, and the task must not sleep on its
    own lock (it did: 6 us for a 2 us op)."""
    from dataclasses import replace

    dev = replace(DEV, host_lock=True, lock_wake_us=4.0, sweep_us=0.1)
    # (1.1, 0.3) and (2.9, 0.2) each took 4 us more before the fix
    for first, dur in ((1.1, 0.3), (2.9, 0.2), (0.7, 2.0), (13.3, 7.7)):
        r = simulate([Task("x", 0, first, "vector", 1),
                      Task("m", 0, dur, "vector", 1, memory_bound=True, host_us=dur)], dev)
        assert r.wall_us == pytest.approx(first + dur + 0.2), (first, dur)


def test_a_task_sleeping_on_the_lock_gives_its_cores_back():
    """Two cores, four streams: b's kernel ends while c holds the lock, and d, which needs
    a core but not the lock, gets b's core then, not when b's worker has the lock back."""
    # issued 5 us apart: a at 0, b at 5, c at 10, d at 15
    two = Device("two", cube_cores=2, vector_cores=2, hw_queues=4, launch_us=5.0, sweep_us=0.0,
                 host_lock=True, lock_wake_us=10.0)
    tasks = [Task("a", 0, 100, "cube", 1, host_us=2),   # lock 0-2, a core to 100
             Task("b", 1, 20, "cube", 1, host_us=2),    # lock 5-7, the other core, kernel to 25
             Task("c", 2, 60, "none", 0, host_us=30),   # lock 10-40, no core
             Task("d", 3, 10, "cube", 1)]               # no host part: only needs a core
    r = simulate(tasks, two)
    tl = r.timeline
    span = {tl.op_name(k): (tl.start_ns[k] / 1e3, tl.end_ns[k] / 1e3) for k in range(len(tl))}
    assert span["b"] == (pytest.approx(5.0), pytest.approx(50.0))   # c's release + wake-up
    assert span["d"] == (pytest.approx(25.0), pytest.approx(35.0))  # b's core, as b slept


@settings(max_examples=150, deadline=None)
@given(seed=st.integers(0, 10**6), cube=st.integers(1, 6), vector=st.integers(1, 6),
       queues=st.integers(1, 5), sweep=st.sampled_from([0.0, 0.5]),
       host_lock=st.booleans())
def test_tasks_never_hold_more_cores_than_a_pool_has(seed, cube, vector, queues, sweep,
                                                     host_lock):
    """Under core contention (block dims up to twice a pool's cores, the case the SimPy
    oracle leaves out: its queues tie for cores in another order), the cores that running
    tasks hold never exceed their pool's at any start, and the wall never beats the
    pool's work over its cores."""
    from dataclasses import replace

    rng = random.Random(seed)
    tasks = random_tasks(rng, 40, 4)
    for t in tasks:
        t.block_dim = rng.randint(1, 2 * max(cube, vector))
        t.host_us = rng.choice([0.0, min(3.0, t.dur_us)])
    dev = replace(Device("t", cube, vector, queues, launch_us=0.25, sweep_us=sweep),
                  host_lock=host_lock, wake_us=2.0 if host_lock else 0.0)
    r = simulate(tasks, dev)
    tl = r.timeline
    start = {tl.op_name(k): int(tl.start_ns[k]) for k in range(len(tl))}
    end = {tl.op_name(k): int(tl.end_ns[k]) for k in range(len(tl))}
    for pool, cap in (("cube", cube), ("vector", vector)):
        mine = [t for t in tasks if t.pool == pool]
        for t in mine:
            held = sum(min(u.block_dim, cap) for u in mine
                       if start[u.name] <= start[t.name] < end[u.name])
            assert held <= cap, (pool, t.name, held, cap)
        work = sum(t.dur_us * min(t.block_dim, cap) for t in mine)
        assert r.wall_us >= work / cap - 1e-6
