"""The cuda/npu backend's code path against a stand-in for ``torch.cuda`` that records
every call (no GPU here). Tensors stay on the CPU; launches run at once."""

from __future__ import annotations

import itertools
import sys

import pytest
import torch

from parastream.graph.torch_import import import_runnable
from parastream.zoo import ZOO
from parastream.plan.assign import assign
from parastream.runtime import Event, Stream
from parastream.runtime.cuda import DeviceBackend, device_available
from parastream.runtime.executor import MultiStreamExecutor


class FakeCuda:
    """Records (call, stream ids) like torch.cuda would see them."""

    def __init__(self):
        self.log: list[tuple] = []
        self.ids = itertools.count(1)
        self.clock = itertools.count()
        self._current = self.Stream(_id=0)
        self._stack: list = []

    def __getattr__(self, item):
        raise AttributeError(item)

    # classes bound to this fake
    def Stream(self, device=None, _id=None):  # noqa: N802 - mirrors torch.cuda.Stream
        fake = self

        class S:
            def __init__(s):
                s.id = next(fake.ids) if _id is None else _id

            def wait_event(s, ev):
                fake.log.append(("wait_event", s.id, ev.id))

            def synchronize(s):
                fake.log.append(("stream_sync", s.id))

            def query(s):
                return True

        return S()

    def Event(self, enable_timing=False):  # noqa: N802
        fake = self

        class E:
            def __init__(e):
                e.id = next(fake.ids)
                e.t = None

            def record(e, stream=None):
                e.t = next(fake.clock)
                fake.log.append(("record", (stream or fake._current).id, e.id))

            def wait(e, stream=None):
                fake.log.append(("wait_event", (stream or fake._current).id, e.id))

            def synchronize(e):
                pass

            def query(e):
                return True

            def elapsed_time(e, end):
                return float(end.t - e.t) * 1e-3  # 1 us per tick, in ms

        return E()

    def stream(self, s):
        fake = self

        class Ctx:
            def __enter__(c):
                fake._stack.append(fake._current)
                fake._current = s
                fake.log.append(("enter", s.id))

            def __exit__(c, *a):
                fake._current = fake._stack.pop()

        return Ctx()

    def current_stream(self):
        return self._current

    def set_stream(self, s):
        self._current = s
        self.log.append(("set", s.id))

    def synchronize(self):
        self.log.append(("device_sync",))

    def _sleep(self, cycles):  # torch.cuda._sleep: spin on the current stream
        self.log.append(("sleep", self._current.id, cycles))


@pytest.fixture
def fake():
    return FakeCuda()


def test_protocol_objects(fake):
    b = DeviceBackend("cuda", mod=fake)
    s = b.stream("x")
    assert isinstance(s, Stream) and isinstance(b.event(), Event)
    w = s.submit(lambda a: a + 1, 1, name="inc")
    assert w.done() and w.result() == 2
    assert ("enter", s.raw.id) in fake.log
    with pytest.raises(ValueError):
        b.stream("x")


def test_executor_on_standin_joins_records_and_matches(fake, monkeypatch):
    module, inputs = ZOO["inception_block"].factory("tiny", "infer")
    rn = import_runnable(module, inputs)
    plan = assign(rn.graph, "matching", max_streams=2)
    backend = DeviceBackend("cuda", mod=fake)
    recorded: list[tuple[int, int]] = []  # (stream record_stream-ed on, current stream)
    monkeypatch.setattr(backend, "record_stream", lambda value, stream: recorded.append(
        (stream.raw.id, fake.current_stream().id)))
    ex = MultiStreamExecutor(module, inputs, plan, backend=backend, runnable=rn)
    assert not ex.host_streams
    c = ex.check(*inputs, runs=2)
    assert c.ok and not c.exact  # devices compare within tolerance
    ids = {int(k): s.raw.id for k, s in ex.streams.items()}
    log = fake.log
    # begin: every plan stream waits on an event recorded on the caller's stream (id 0)
    start_ev = next(e for op, s, e in (x for x in log if len(x) == 3) if op == "record" and s == 0)
    assert all(("wait_event", ids[k], start_ev) in log for k in ids)
    # every plan event is recorded on its producer's stream and waited on by the consumer's
    # (per event id of the last run: begin()'s waits alone would make any count of waits)
    a = plan.assignment
    assert plan.events
    for k, e in enumerate(plan.events):
        ev = ex._events[k].raw.id
        rec = ("record", ids[a[e.record_after]], ev)
        wait = ("wait_event", ids[a[e.wait_before]] if e.wait_before else ids[0], ev)
        assert rec in log and wait in log and log.index(rec) < log.index(wait)
    # end: the caller's stream waits on stream 0
    assert any(x[0] == "wait_event" and x[1] == 0 for x in log)
    # a tensor read across streams is record_stream-ed on the reader's stream
    # (the stream current when the reader is launched), and only readers' streams are
    readers = {ids[ex._op_info[n][1]] for n in ex.cross}
    assert recorded and all(sid == cur for sid, cur in recorded)
    assert {sid for sid, _ in recorded} == readers
    tl = ex.timeline()
    assert sorted(tl.op_name(i) for i in range(len(tl))) == sorted(plan.assignment)
    assert set(tl.streams) == {"0", "1"}  # both plan streams ran ops


def test_device_available_is_false_without_devices(monkeypatch):
    assert device_available("cuda") is torch.cuda.is_available()
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert device_available("cuda") is False
    monkeypatch.setitem(sys.modules, "torch_npu", None)  # no torch_npu: import fails
    assert device_available("npu") is False
    with pytest.raises(ValueError):
        DeviceBackend("tpu")


def test_jitter_delays_the_op_on_its_stream_not_the_host(fake, monkeypatch):
    # on a device a host sleep only delays the launch: the delay must be queued on the
    # op's own stream, inside the op's stream context, for a missing wait to show
    import time

    from parastream.runtime.cuda import SPIN_CYCLES_PER_US
    from parastream.runtime.executor import Jitter

    module, inputs = ZOO["inception_block"].factory("tiny", "infer")
    rn = import_runnable(module, inputs)
    plan = assign(rn.graph, "matching", max_streams=2)
    backend = DeviceBackend("cuda", mod=fake)
    monkeypatch.setattr(backend, "record_stream", lambda value, stream: None)  # cpu tensors
    monkeypatch.setattr(time, "sleep", lambda s: pytest.fail("host sleep under device jitter"))
    with MultiStreamExecutor(module, inputs, plan, backend=backend, runnable=rn,
                             jitter=Jitter(seed=1, prob=1.0, max_delay_us=50)) as ex:
        assert ex.check(*inputs, runs=1).ok
        stream_ids = {s.raw.id for s in ex.streams.values()}
    sleeps = [x for x in fake.log if x[0] == "sleep"]
    assert len(sleeps) >= len(plan.assignment)  # prob 1: every op of the jittered run
    assert {sid for _, sid, _ in sleeps} == stream_ids  # on the plan's streams, each of them
    assert all(1 <= c <= 50 * SPIN_CYCLES_PER_US for _, _, c in sleeps)


def test_a_run_switches_streams_only_on_change_and_restores_the_callers(fake, monkeypatch):
    module, inputs = ZOO["inception_block"].factory("tiny", "infer")
    rn = import_runnable(module, inputs)
    plan = assign(rn.graph, "matching", max_streams=2)
    backend = DeviceBackend("cuda", mod=fake)
    monkeypatch.setattr(backend, "record_stream", lambda value, stream: None)
    origin = fake.current_stream()
    with MultiStreamExecutor(module, inputs, plan, backend=backend, runnable=rn) as ex:
        ex(*inputs)
        assert fake.current_stream() is origin  # the caller's stream is current again
        sets = [x[1] for x in fake.log if x[0] == "set"]
        switches = sum(1 for a, b in zip(ex._issue_order(), ex._issue_order()[1:])
                       if a[1] != b[1])
        assert len(sets) == switches + 2  # into the first op's stream, each change, back
        assert not any(x[0] == "enter" for x in fake.log)  # no context per op in a run
        events = len(backend._pool)
        fake.log.clear()
        ex(*inputs)
        assert len(backend._pool) == events  # the timing events are reused, not made anew
        # an op that fails mid-run: the caller's stream is current again after it
        calls = {"n": 0}
        real = ex._call

        def failing(n, args, kwargs):
            calls["n"] += 1
            if calls["n"] == 5:
                raise RuntimeError("launch failed")
            return real(n, args, kwargs)

        monkeypatch.setattr(ex, "_call", failing)
        with pytest.raises(Exception, match="launch failed"):
            ex(*inputs)
        assert fake.current_stream() is origin


def test_run_mode_belongs_to_the_thread_that_began_it(fake, monkeypatch):
    import threading

    b = DeviceBackend("cuda", mod=fake)
    s0, s1 = b.stream("0"), b.stream("1")
    b.begin([s0, s1])
    origin = b._origin
    other = threading.Thread(target=lambda: s1.submit(lambda: None, name="elsewhere"))
    other.start()
    other.join()
    # another thread's submit (a pipeline worker's) keeps its own stream context and
    # leaves the run's notion of the current stream alone
    assert ("enter", s1.raw.id) in fake.log and b._set is origin
    s0.submit(lambda: None, name="mine")
    assert ("set", s0.raw.id) in fake.log  # the run's own thread switches
    b.end(s0)
    assert fake.current_stream() is origin and b._run_thread is None
    # a begin that fails part-way leaves no run mode behind
    monkeypatch.setattr(fake, "Event", lambda enable_timing=False: (_ for _ in ()).throw(
        RuntimeError("no events")))
    with pytest.raises(RuntimeError):
        b.begin([s0, s1])
    assert b._run_thread is None
    monkeypatch.undo()
    fake.log.clear()
    s1.submit(lambda: None, name="after")
    assert ("enter", s1.raw.id) in fake.log and fake.current_stream() is origin


def test_timed_device_runs_can_go_without_timing_events(fake, monkeypatch):
    """``measure(timelines=False)`` on a device backend (what ``run`` times on cuda): each
    executor gets its own backend with no per-op timing events, and no timeline is read
    back; the default keeps both, as the cpu path always does."""
    from parastream.plan.model import Plan
    from parastream.runtime import backend as registry
    from parastream.runtime.measure import measure

    made: list[DeviceBackend] = []

    def factory(**options):
        made.append(DeviceBackend("cuda", mod=fake, **options))
        return made[-1]

    monkeypatch.setitem(registry._REGISTRY, "cuda", factory)
    monkeypatch.setattr(DeviceBackend, "record_stream", lambda self, value, stream: None)
    module, inputs = ZOO["inception_block"].factory("tiny", "infer")
    rn = import_runnable(module, inputs)
    plan = assign(rn.graph, "matching", max_streams=2)
    assert plan.stream_count() == 2
    quiet = measure(module, inputs, plan, backend="cuda", runs=5, warmup=1, drop=2,
                    runnable=rn, timelines=False)
    assert len(made) == 2 and not any(b.record_timeline for b in made)
    assert len(quiet.multi_walls_us) == len(quiet.single_executor_walls_us) == 3
    assert quiet.multi_timelines == [] and quiet.single_timelines == []
    made.clear()
    timed = measure(module, inputs, plan, backend="cuda", runs=5, warmup=1, drop=2,
                    runnable=rn)
    assert len(made) == 2 and all(b.record_timeline for b in made)
    assert len(timed.multi_timelines) == 3
    tl = timed.multi_timelines[0]
    assert {tl.op_name(i) for i in range(len(tl))} >= set(plan.assignment)
    # the cpu backend keeps its own timeline whatever is asked
    cpu = measure(module, inputs, Plan.single(o.name for o in rn.graph.ops), runs=5,
                  warmup=1, drop=2, runnable=rn, timelines=False)
    assert len(cpu.multi_timelines) == 3
