"""The stream backends: FIFO order, events across streams, sticky errors, no busy waiting,
the null backend's recorded program and replay, and the registry."""

from __future__ import annotations

import subprocess
import sys
import threading
import time

import numpy as np
import pytest

from parastream.cpu.backend import CpuBackend
from parastream.runtime import Event, Stream, StreamError, available_backends, get_backend
from parastream.runtime.host import _task_cpu_ns
from parastream.runtime.null import NullBackend
from parastream.timeline.analyze import analyze_capture


def test_registry_names_and_unknown_backend():
    assert {"cpu", "null"} <= set(available_backends())
    with pytest.raises(ValueError, match="unknown stream backend"):
        get_backend("tpu9000")
    with get_backend("cpu") as b:
        assert isinstance(b, CpuBackend)
        s = b.stream("x")
        assert isinstance(s, Stream) and isinstance(b.event(), Event)
    n = get_backend("null")
    assert isinstance(n.stream("y"), Stream) and isinstance(n.event(), Event)


def test_cpu_stream_runs_work_in_fifo_order_on_one_thread():
    seen: list[tuple[int, str]] = []
    with CpuBackend() as b:
        s = b.stream("s0")
        works = [s.submit(lambda i=i: seen.append((i, threading.current_thread().name)) or i * i,
                          name=f"op{i}") for i in range(50)]
        s.synchronize()
        assert [w.result() for w in works] == [i * i for i in range(50)]
        assert s.query()
    assert [i for i, _ in seen] == list(range(50))
    assert {name for _, name in seen} == {"parastream-stream-s0"}


def test_synchronize_on_an_idle_stream_returns_without_waking_its_worker(monkeypatch):
    """All issued work done and the worker asleep: synchronize returns at once, queueing
    nothing (a recording would wake the worker, then the caller); work still running or
    queued is waited for, and a stream's error is raised either way."""
    with CpuBackend() as b:
        s = b.stream("s0")
        s.submit(lambda: None, name="op").result()
        deadline = time.monotonic() + 5
        while not s.query() and time.monotonic() < deadline:  # the worker goes idle
            time.sleep(0.001)
        assert s.query()
        queued: list[tuple] = []
        real = s._enqueue
        monkeypatch.setattr(s, "_enqueue", lambda cmd: queued.append(cmd) or real(cmd))
        s.synchronize()
        assert queued == []
        gate = threading.Event()
        done: list[str] = []
        s.submit(lambda: gate.wait(5) and done.append("slow"), name="slow")
        threading.Timer(0.05, gate.set).start()
        s.synchronize()  # busy: must wait for the slow op
        assert done == ["slow"] and [c[0] for c in queued] == ["work", "record"]
        s.submit(lambda: 1 / 0, name="bad")
        with pytest.raises(StreamError):
            s.synchronize()
        while not s.query() and time.monotonic() < deadline:
            time.sleep(0.001)
        with pytest.raises(StreamError):  # sticky, also on the idle path
            s.synchronize()
    # a program run on the caller's thread (run_here) while the worker is still busy with
    # earlier work: synchronize waits for the worker, not only for the caller's program
    with CpuBackend() as b:
        s = b.stream("s1")
        gate, started = threading.Event(), threading.Event()
        slow = s.submit(lambda: (started.set(), gate.wait(5))[1] and "slow", name="slow")
        assert started.wait(5)  # the worker is inside the slow op
        s.hold()
        s.submit(lambda: "fast", name="fast")
        s.run_here()
        threading.Timer(0.05, gate.set).start()
        s.synchronize()
        assert slow.done() and slow.result() == "slow"


def test_held_stream_runs_nothing_until_released_and_keeps_fifo_and_event_semantics():
    seen: list[str] = []
    with CpuBackend() as b:
        a, c = b.stream("A"), b.stream("B")
        a.hold()
        c.hold()
        a.submit(seen.append, "a0")
        ev = a.record_event()
        c.wait_event(ev)  # captures the held recording, as issued
        c.submit(seen.append, "c0")
        a.submit(seen.append, "a1")
        time.sleep(0.05)
        assert seen == [] and not a.query() and not c.query() and not ev.query()
        c.release()  # B's wait must still block on A's held recording
        time.sleep(0.05)
        assert seen == []
        ev.synchronize()  # releases A: waiting on a held recording must not deadlock
        c.synchronize()
        a.synchronize()
        assert seen.index("a0") < seen.index("c0") and seen.index("a0") < seen.index("a1")
        assert a.query() and c.query()
        a.hold()
        a.submit(seen.append, "a2")
        a.synchronize()  # synchronize releases what is held
        assert seen[-1] == "a2"


def test_event_orders_two_streams_and_the_wait_is_recorded():
    with CpuBackend() as b:
        a, c = b.stream("A"), b.stream("B")
        a.submit(time.sleep, 0.2, name="slow")
        ev = a.record_event()
        c.wait_event(ev)
        c.submit(lambda: None, name="after")
        c.synchronize()
        assert ev.query()
        tl = b.timeline()
    starts = dict(zip((tl.names[i] for i in tl.name), tl.start_ns))
    ends = dict(zip((tl.names[i] for i in tl.name), tl.end_ns))
    assert starts["after"] >= ends["slow"]
    # B was waiting on A when A's slow op ended, and the timeline says so
    assert tl.n_waits == 1
    assert tl.streams[tl.wait_stream[0]] == "B" and tl.streams[tl.wait_on[0]] == "A"
    assert tl.wait_start_ns[0] <= ends["slow"] <= tl.wait_end_ns[0]
    doc = analyze_capture(tl)
    assert {s["id"] for s in doc["streams"]} == {"A", "B"}


def test_event_semantics_query_synchronize_elapsed_and_rerecord():
    with CpuBackend() as b:
        s = b.stream("s")
        e0 = b.event()
        assert e0.query()  # never recorded counts as complete
        e0.synchronize()
        gate = threading.Event()
        s.submit(gate.wait, name="gate")
        e1 = s.record_event()
        assert not e1.query()
        s.submit(time.sleep, 0.02, name="sleep")
        e2 = b.event()
        e2.record(s)
        gate.set()
        e2.synchronize()
        assert e1.query() and e2.query()
        assert 15 <= e1.elapsed_time(e2) < 1000
        # a wait captures the recording current at call time (CUDA semantics)
        other = b.stream("o")
        gate2 = threading.Event()
        s.submit(gate2.wait, name="gate2")
        e1.record(s)  # re-record behind the gate
        other.wait_event(e1)
        w = other.submit(lambda: "ran")
        time.sleep(0.02)
        assert not w.done()
        gate2.set()
        assert w.result() == "ran"


def test_errors_are_sticky_and_propagate_through_events():
    with CpuBackend() as b:
        a, c = b.stream("a"), b.stream("c")
        bad = a.submit(lambda: 1 / 0, name="div")
        skipped = a.submit(lambda: "never", name="later")
        ev = a.record_event()
        c.wait_event(ev)
        downstream = c.submit(lambda: "never", name="consumer")
        with pytest.raises(StreamError, match="div"):
            bad.result()
        with pytest.raises(StreamError) as info:
            skipped.result()
        assert isinstance(info.value.cause, ZeroDivisionError)
        with pytest.raises(StreamError):
            downstream.result()
        with pytest.raises(StreamError):
            ev.synchronize()
        with pytest.raises(StreamError):
            a.synchronize()


def test_run_here_runs_the_held_program_on_the_calling_thread():
    with CpuBackend() as b:
        a, c = b.stream("a"), b.stream("c")
        a.hold()
        c.hold()
        c_ev = c.record_event()  # nothing before it on c: reached as soon as c runs
        a.wait_event(c_ev)
        first = a.submit(threading.get_ident, name="first")
        a_ev = a.record_event()
        c.wait_event(a_ev)       # c's second part waits for a's program, run here
        later = c.submit(threading.get_ident, name="later")
        c.release()
        a.run_here()
        assert first.result() == threading.get_ident()      # ran on this thread
        assert a_ev.query() and later.result() != threading.get_ident()
        assert a.error is None and [n for n, *_ in a.recorder.ops] == ["first"]
        # errors stay sticky when the program runs here, as on the worker
        a.hold()
        bad = a.submit(lambda: 1 / 0, name="div")
        skipped = a.submit(lambda: "never", name="after")
        a.run_here()
        assert isinstance(a.error, StreamError) and "div" in str(a.error)
        with pytest.raises(StreamError):
            bad.result()
        with pytest.raises(StreamError):
            skipped.result()


def test_launched_work_has_no_handle_but_records_and_keeps_errors_sticky():
    ran: list[str] = []
    with CpuBackend() as b:
        a = b.stream("a")
        assert a.launch(ran.append, "x", name="first") is None
        a.launch(lambda: 1 / 0, name="div")
        a.launch(ran.append, "never", name="after")
        with pytest.raises(StreamError, match="div"):
            a.synchronize()
        assert ran == ["x"] and isinstance(a.error.cause, ZeroDivisionError)
        assert [n for n, *_ in a.recorder.ops] == ["first", "div"]


def test_an_interrupt_while_running_here_is_raised_and_fails_the_recordings_ahead():
    """KeyboardInterrupt reaches the caller's thread, never a worker: raised as it is (not
    as an op's failure), and the recordings other streams wait on fail instead of never
    coming (close() would join a worker waiting on them for ever)."""
    def interrupted():
        raise KeyboardInterrupt

    with CpuBackend() as b:
        a, c = b.stream("a"), b.stream("c")
        a.hold()
        c.hold()
        a.launch(interrupted, name="op")
        ev = a.record_event()
        c.wait_event(ev)
        after = c.submit(lambda: "never", name="after")
        c.release()
        with pytest.raises(KeyboardInterrupt):
            a.run_here()
        assert isinstance(a.error, StreamError) and a.query()
        done = threading.Thread(target=lambda: pytest.raises(StreamError, after.result))
        done.start()
        done.join(5)
        assert not done.is_alive()  # c's wait ended: a's recording failed, did not hang
        with pytest.raises(StreamError):
            after.result()


def test_waiting_stream_does_not_burn_cpu():
    with CpuBackend() as b:
        a, c = b.stream("a"), b.stream("c")
        gate = threading.Event()
        a.submit(gate.wait, name="blocked")
        c.wait_event(a.record_event())
        c.submit(lambda: None)
        # the two workers' own CPU time: the process's would count an OpenMP team still
        # spinning after an earlier test's parallel op
        workers = [s._thread.native_id for s in (a, c)]
        try:  # the workers' own CPU time where it can be read (Linux)
            per_thread = len(_task_cpu_ns(workers)) == len(workers)
        except OSError:
            per_thread = False

        def cpu_s() -> float:
            return sum(_task_cpu_ns(workers).values()) / 1e9 if per_thread \
                else time.process_time()

        cpu0 = cpu_s()
        time.sleep(0.4)  # the test thread sleeps; any CPU used now is the waiters polling
        used = cpu_s() - cpu0
        gate.set()
        c.synchronize()
    assert used < 0.05, f"waiting streams used {used:.3f} s of CPU in 0.4 s"


def test_stream_names_must_be_unique_and_kinds_valid():
    with CpuBackend() as b:
        b.stream("x")
        with pytest.raises(ValueError):
            b.stream("x")
        with pytest.raises(ValueError):
            b.stream("y", kind="quantum")


def test_null_backend_records_program_and_replays_events():
    nb = NullBackend(op_cost_ns=1000)
    a, c = nb.stream("A", "device"), nb.stream("B", "copy")
    calls: list[int] = []
    a.submit(lambda: calls.append(1), name="k1", cost_ns=5000)
    ev = a.record_event()
    c.wait_event(ev)
    c.submit(lambda: calls.append(2), name="copy")
    assert calls == []  # null runs nothing
    assert [(cmd.op, cmd.stream) for cmd in nb.program] == [
        ("submit", "A"), ("record", "A"), ("wait", "B"), ("submit", "B")]
    assert nb.program[2].record_id == 1
    tl = nb.timeline()
    i_copy = tl.names.index("copy")
    row = int(np.flatnonzero(tl.name == i_copy)[0])
    assert tl.start_ns[row] == 5000 and tl.end_ns[row] == 6000
    assert tl.n_waits == 1 and tl.wait_end_ns[0] == 5000
    assert tl.kind[row] == 1  # copy streams are memcpy lanes
    analyze_capture(tl)


def test_unrecorded_event_wait_is_a_no_op_on_null():
    nb = NullBackend()
    s = nb.stream("s")
    s.wait_event(nb.event())
    assert nb.program == []


def test_importing_runtime_and_pipeline_does_not_import_torch():
    code = ("import sys; sys.modules['torch'] = None\n"
            "import parastream.runtime, parastream.cpu.backend, parastream.runtime.null\n"
            "import parastream.pipeline, parastream.cli.pipeline, parastream.pipeline.planner\n"
            "from parastream.pipeline import Pipeline, Stage\n"
            "with Pipeline([Stage('a', lambda x: x + 1)]) as p:\n"
            "    assert list(p.map(range(3))) == [1, 2, 3]\n"
            "print('ok')\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr
