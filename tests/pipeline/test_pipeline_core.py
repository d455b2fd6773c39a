"""Pipeline correctness: ordered output equals the serial loop, unordered output has every
item once, memory stays bounded with a slow last stage, timeline and accounting."""

from __future__ import annotations

import random
from collections import Counter
import time

import numpy as np
import pytest

from parastream.pipeline import Pipeline, Stage, run_serial
from parastream.report.html import render_html
from parastream.runtime.null import NullBackend
from parastream.timeline.analyze import analyze_capture

from .helpers import live_pipeline_threads, within


def jittery(fn, seed: int, p: float = 0.03, max_s: float = 0.0004):
    """``fn`` with a deterministic random sleep on about ``p`` of the items."""

    def stage(x):
        r = random.Random(hash((seed, x[0] if isinstance(x, tuple) else x)))
        if r.random() < p:
            time.sleep(r.random() * max_s)
        return fn(x)

    return stage


def three_stages(replicas=(1, 3, 2)):
    return [
        Stage("expand", jittery(lambda x: (x, x * 7 + 1), 1), replicas=replicas[0]),
        Stage("mix", jittery(lambda t: (t[0], (t[1] * 2654435761) % 1000003), 2), kind="device",
              replicas=replicas[1]),
        Stage("finish", jittery(lambda t: (t[0], t[1] ^ 0x5A5A), 3), kind="copy",
              replicas=replicas[2]),
    ]


def test_ordered_output_equals_serial_loop_over_10000_jittered_items():
    expected, _, _ = run_serial(three_stages(), range(10_000))
    with Pipeline(three_stages(), depth=2, ordered=True) as p:
        got = within(50, lambda: [r for r in p.results(range(10_000))])
        stats = p.stats()
    assert [r.value for r in got] == expected
    assert [r.id for r in got] == list(range(10_000))
    assert stats.counts == {"completed": 10_000, "failed": 0, "cancelled": 0}
    assert stats.submitted == 10_000
    assert stats.admission.max_in_flight <= p.capacity
    assert live_pipeline_threads() == []


def test_unordered_returns_every_item_exactly_once():
    def slow_some(x):
        if x % 10 == 0:
            time.sleep(0.005)  # stragglers overtake: output order must differ from input
        return x * 3

    stages = [Stage("a", lambda x: x + 1), Stage("b", slow_some, replicas=4),
              Stage("c", lambda x: x - 1, replicas=2)]
    with Pipeline(stages, ordered=False, depth=3) as p:
        got = within(30, lambda: p.run(range(2_000)))
    ids = [r.id for r in got]
    assert sorted(ids) == list(range(2_000))
    assert ids != sorted(ids)
    assert all(r.value == (r.id + 1) * 3 - 1 for r in got)


def test_memory_stays_bounded_and_the_source_blocks_when_the_last_stage_is_slow():
    pulled = 0
    delivered = 0
    worst = 0

    def source():
        nonlocal pulled, worst
        for i in range(80):
            pulled += 1
            worst = max(worst, pulled - delivered)
            yield i

    stages = [Stage("fast1", lambda x: x), Stage("fast2", lambda x: x, replicas=2),
              Stage("slow", lambda x: (time.sleep(0.006), x)[1])]
    # 6 ms a slow item: hand-off delays of a loaded machine stay small beside it
    with Pipeline(stages, depth=2) as p:
        cap = p.capacity
        assert cap == 2 * 4 + 4

        def consume():
            nonlocal delivered
            for _ in p.map(source()):
                delivered += 1

        within(30, consume)
        st = p.stats()
    # pulled-but-not-delivered items never exceeded the queues plus workers ...
    assert worst <= cap
    assert st.admission.max_in_flight <= cap
    # ... because the source really blocked, many times, for most of the run
    assert st.admission.blocks > 50
    assert st.admission.blocked_ns > 0.5 * st.wall_ns
    slow = st.stages[-1]
    assert slow.utilization > 0.8


def test_caller_breaking_early_cancels_the_rest():
    with Pipeline([Stage("a", lambda x: x), Stage("b", lambda x: (time.sleep(0.001), x)[1])]) as p:
        def take_five():
            out = []
            for v in p.map(range(1_000)):
                out.append(v)
                if len(out) == 5:
                    break
            return out

        assert within(20, take_five) == [0, 1, 2, 3, 4]
        st = p.stats()
    assert st.counts["completed"] == 5
    assert sum(st.counts.values()) == st.submitted
    assert st.submitted <= 5 + p.capacity
    assert live_pipeline_threads() == []


def test_pipeline_can_run_again_and_validates_its_input():
    p = Pipeline([Stage("a", lambda x: -x)])
    assert list(p.map([1, 2])) == [-1, -2]
    assert list(p.map([])) == []
    assert list(p.map(iter([3]))) == [-3]
    p.close()
    with pytest.raises(RuntimeError):
        list(p.map([1]))
    with pytest.raises(ValueError):
        Pipeline([])
    with pytest.raises(ValueError):
        Pipeline([Stage("a", abs), Stage("a", abs)])
    with pytest.raises(ValueError):
        Pipeline([Stage("a", abs)], depth=0)
    with pytest.raises(ValueError):
        Stage("a", abs, replicas=0)
    with pytest.raises(ValueError):
        Stage("a", abs, kind="gpu")


def test_timeline_has_a_lane_per_replica_and_feeds_analysis_and_html():
    stages = [Stage("pre", lambda x: (time.sleep(0.003), x)[1], replicas=2),
              Stage("infer", lambda x: (time.sleep(0.006), x)[1], kind="device"),
              Stage("post", lambda x: x, kind="copy")]
    with Pipeline(stages, name="demo") as p:
        p.run(range(60))
        tl = p.timeline()
        st = p.stats()
    assert set(tl.streams) == {"pre#0", "pre#1", "infer", "post"}
    assert len(tl) == 60 * 3
    doc = analyze_capture(tl)
    by_id = {s["id"]: s for s in doc["streams"]}
    assert all(not s.get("corrupt_overlaps") for s in doc["streams"])
    assert doc["parallelism"] > 1.2  # stages really overlapped
    assert by_id["infer"]["role"] == "main"
    html = render_html([(tl, doc)], st.to_dict(), "pipeline test")
    assert "infer" in html
    # accounting agrees with the timeline
    infer = next(s for s in st.stages if s.name == "infer")
    lane = tl.streams.index("infer")
    assert infer.busy_ns == int((tl.end_ns - tl.start_ns)[tl.stream == lane].sum())
    assert 0.0 < infer.utilization <= 1.0
    assert st.bottleneck.name == "infer"
    assert 0.5 < st.efficiency <= 1.05
    assert st.latencies_ns.size == 60 and np.all(st.latencies_ns > 0)


def test_device_stages_on_an_async_backend_pass_events_between_streams():
    nb = NullBackend()
    stages = [Stage("pre", lambda x: x, kind="host"),
              Stage("h2d", lambda x: x, kind="copy"),
              Stage("infer", lambda x: x, kind="device", replicas=2),
              Stage("d2h", lambda x: x, kind="copy"),
              Stage("post", lambda x: ("post", x), kind="host")]
    with Pipeline(stages, backend=nb, name="p") as p:
        out = within(20, lambda: list(p.map(range(20))))
    # null ran nothing on its streams, so the host stage after them sees None
    assert out == [("post", None)] * 20
    prog = nb.program
    submits = [c for c in prog if c.op == "submit"]
    assert len(submits) == 20 * 3
    # each replica submits on a stream of its own; which replica takes an item is a race
    # on the shared queue (with null's instant submits one replica took all 20 once)
    per = Counter(c.stream for c in submits)
    assert set(per) <= {"p/h2d", "p/infer#0", "p/infer#1", "p/d2h"}
    assert per["p/h2d"] == per["p/d2h"] == per["p/infer#0"] + per["p/infer#1"] == 20
    # every device/copy stage after the first waits on the event its producer recorded
    waits = [c for c in prog if c.op == "wait"]
    assert len(waits) == 20 * 2
    producer = {"p/infer#0": "p/h2d", "p/infer#1": "p/h2d", "p/d2h": ("p/infer#0", "p/infer#1")}
    for w in waits:
        rec = prog[w.record_id]
        assert rec.op == "record" and rec.stream in producer[w.stream]
        assert w.record_id < prog.index(w)
    tl = nb.timeline()
    analyze_capture(tl)


def test_queue_wait_is_time_in_the_queue_not_the_producers_blocked_time():
    # fast -> slow through a queue of one: at most one item sits in it at any time, so its
    # summed wait is at most the run's wall; the producer's wait for room is its "blocked"
    # time (it was counted in the queue's wait too: 452 ms of queue wait in a 304 ms run)
    with Pipeline([Stage("fast", lambda x: x),
                   Stage("slow", lambda x: (time.sleep(0.02), x)[1])], depth=1) as p:
        assert list(p.map(range(8))) == list(range(8))
        stats = p.stats()
    slow = next(s for s in stats.stages if s.name == "slow")
    fast = next(s for s in stats.stages if s.name == "fast")
    assert slow.queue_wait_ns <= stats.wall_ns
    assert fast.blocked_ns > 0  # the producer did wait for room


def test_a_device_pipeline_runs_again_and_its_wall_covers_its_work():
    # stream names were the same every run, and a backend refuses a name in use; the wall
    # ended at the last item out, so an early break left busy over wall x replicas
    nb = NullBackend()
    p = Pipeline([Stage("pre", lambda x: x), Stage("infer", lambda x: x, kind="device")],
                 backend=nb)
    assert len(list(p.map(range(3)))) == 3 and len(list(p.map(range(3)))) == 3
    with Pipeline([Stage("a", lambda x: (time.sleep(0.01), x)[1], replicas=2),
                   Stage("b", lambda x: x)], depth=2) as q:
        for _ in q.map(range(10)):
            break
        stats = q.stats()
    a = next(s for s in stats.stages if s.name == "a")
    assert a.busy_ns <= stats.wall_ns * a.replicas


def test_run_serial_wraps_an_input_error_as_the_pipelined_run_does():
    from parastream.pipeline import PipelineError

    def items():
        yield 1
        raise KeyError("bad item")

    with pytest.raises(PipelineError, match="stage '<source>' failed on item 1"):
        run_serial([Stage("a", lambda x: x)], items())


def test_close_from_another_thread_while_the_caller_iterates(monkeypatch):
    # the caller saw the abort, joined the workers and counted the items in flight while
    # the closing thread was still cancelling them: "AssertionError: items lost"
    import threading

    from parastream.pipeline import core

    finish = core._Run.finish

    def slow_finish(self, seq, status):
        if threading.current_thread().name == "closer":
            time.sleep(0.002)  # widens the window the race needs
        return finish(self, seq, status)

    monkeypatch.setattr(core._Run, "finish", slow_finish)
    p = Pipeline([Stage("a", lambda x: x), Stage("b", lambda x: x)], depth=4, ordered=False)
    box, started = {}, threading.Event()

    def consume():
        try:
            for _ in p.map(range(100_000)):
                started.set()
                time.sleep(0.01)
        except BaseException as exc:  # noqa: BLE001 - what the caller would see
            box["error"] = exc

    t = threading.Thread(target=consume)
    t.start()
    assert started.wait(10)
    time.sleep(0.05)
    closer = threading.Thread(target=p.close, name="closer")
    closer.start()
    closer.join(30)
    t.join(30)
    assert "error" not in box, box
    counts = p.stats().counts
    assert counts["completed"] + counts["cancelled"] + counts["failed"] == p.stats().submitted


def test_a_thread_that_cannot_start_leaves_none_running(monkeypatch):
    import threading

    real_start = threading.Thread.start
    calls = {"n": 0}

    def start(self):
        calls["n"] += 1
        if calls["n"] == 3:
            raise RuntimeError("can't start new thread")
        return real_start(self)

    monkeypatch.setattr(threading.Thread, "start", start)
    p = Pipeline([Stage("a", lambda x: x), Stage("b", lambda x: x), Stage("c", lambda x: x)])
    with pytest.raises(RuntimeError, match="can't start new thread"):
        list(p.map(range(5)))
    monkeypatch.undo()
    assert not [t for t in threading.enumerate() if t.name.startswith("parastream-")]
