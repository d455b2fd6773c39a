"""The cpu backend: each stream is one persistent worker thread with a FIFO.

Why this shape: streams of torch ops on one CPU overlap only when the worker threads
persist and torch's intra-op threads are set once, globally
(:func:`~parastream.runtime.host.set_intra_op_threads`); creating threads per call or
setting thread counts inside workers costs more than the overlap gains, and an op shorter
than the hand-off between threads under the interpreter lock loses on a second stream.
Events are completion flags (:class:`threading.Event`), so a waiting stream blocks in the
kernel instead of polling. A stream can be held (:meth:`CpuStream.hold`) while a call is
issued and then released at once: the issuing thread holds the interpreter lock
throughout, so per-op wake-ups buy nothing. Or the issuing thread runs a held stream's
program itself (:meth:`CpuStream.run_here`), as the executor does with stream 0.

Every stream records its own op intervals and the time it spent blocked in ``wait_event``
as wait intervals, in a :class:`~parastream.runtime.lanes.LaneRecorder` of its own;
:meth:`CpuBackend.timeline` merges them into one
:class:`~parastream.timeline.model.Timeline`.
"""

from __future__ import annotations

import itertools
import threading
from collections import deque
from typing import Any, Callable

from ..runtime.backend import STREAM_KINDS, BackendBase, Capabilities, StreamError
from ..runtime.host import cpu_name, set_intra_op_threads
from ..runtime.lanes import LaneRecorder, build_timeline, now_ns
from ..timeline.model import Timeline


class _Mark:
    """One recording of an event: set when the stream's FIFO reaches it."""

    __slots__ = ("stream", "flag", "t_ns", "error")

    def __init__(self, stream: "CpuStream") -> None:
        self.stream = stream
        self.flag = threading.Event()
        self.t_ns = -1
        self.error: BaseException | None = None


class CpuWork:
    """Result handle of one submitted call."""

    __slots__ = ("_flag", "_value", "_error")

    def __init__(self) -> None:
        self._flag = threading.Event()
        self._value: Any = None
        self._error: BaseException | None = None

    def done(self) -> bool:
        return self._flag.is_set()

    def result(self) -> Any:
        """Block until the call ran; return its value or raise its StreamError."""
        self._flag.wait()
        if self._error is not None:
            raise self._error
        return self._value


class CpuEvent:
    """A completion flag per recording. ``wait`` captures the latest recording at call time,
    as ``cudaStreamWaitEvent`` does; an event never recorded counts as complete."""

    def __init__(self, backend: "CpuBackend", enable_timing: bool = True) -> None:
        self._backend = backend
        self._mark: _Mark | None = None

    def record(self, stream: "CpuStream | None" = None) -> None:
        if stream is None:
            stream = self._backend.default_stream()
        mark = _Mark(stream)
        self._mark = mark
        stream._enqueue(("record", mark))

    def wait(self, stream: "CpuStream | None" = None) -> None:
        (stream or self._backend.default_stream()).wait_event(self)

    def query(self) -> bool:
        return self._mark is None or self._mark.flag.is_set()

    def synchronize(self) -> None:
        """Block the caller until the recording point is reached; raise the stream's error."""
        mark = self._mark
        if mark is None:
            return
        mark.stream.release()  # a held recording would never be reached
        mark.flag.wait()
        if mark.error is not None:
            raise mark.error

    def elapsed_time(self, end: "CpuEvent") -> float:
        """Milliseconds from this event's recording to ``end``'s (both must be recorded)."""
        if self._mark is None or end._mark is None:
            raise RuntimeError("elapsed_time needs both events recorded")
        self.synchronize()
        end.synchronize()
        return (end._mark.t_ns - self._mark.t_ns) / 1e6


class CpuStream:
    """A FIFO served by one persistent daemon thread (started at creation)."""

    def __init__(self, name: str, kind: str = "device") -> None:
        if kind not in STREAM_KINDS:
            raise ValueError(f"stream kind must be one of {STREAM_KINDS}, not {kind!r}")
        self.name = name
        self.kind = kind
        self.recorder = LaneRecorder(name, kind)
        self._queue: deque = deque()
        self._held: list | None = None  # commands issued while held (see :meth:`hold`)
        self._cond = threading.Condition()
        self._running = False  # the worker is carrying out a command
        self._here = False  # the issuing thread runs a program here (run_here)
        self._error: BaseException | None = None
        self._backend: CpuBackend | None = None
        self._thread = threading.Thread(target=self._loop, name=f"parastream-stream-{name}",
                                         daemon=True)
        self._thread.start()

    # ------------------------------------------------------------------ protocol
    def submit(self, fn: Callable[..., Any], *args: Any, name: str | None = None,
               **kwargs: Any) -> CpuWork:
        work = CpuWork()
        self._enqueue(("work", fn, args, kwargs, name or getattr(fn, "__name__", "op"), work))
        return work

    def launch(self, fn: Callable[..., Any], *args: Any, name: str = "op") -> None:
        """:meth:`submit` without a result handle, for callers that take results some
        other way (the executor's ops store their values themselves): no completion
        flag to make and set per op. An error still stops the stream (sticky) and
        reaches whoever synchronises with it."""
        self._enqueue(("work", fn, args, {}, name, None))

    def record_event(self, event: CpuEvent | None = None) -> CpuEvent:
        if event is None:
            event = CpuEvent(self._backend)  # type: ignore[arg-type]
        event.record(self)
        return event

    def wait_event(self, event: CpuEvent) -> None:
        mark = event._mark
        if mark is not None:  # capture the recording current *now* (CUDA semantics)
            self._enqueue(("wait", mark))

    def synchronize(self) -> None:
        """Block until everything issued to this stream ran; raise its sticky error.

        A worker already idle (its queue empty, nothing running) has run it all: the call
        returns at once instead of queueing a recording, which would wake the sleeping
        worker and then the caller, two OS wake-ups at the end of a multi-stream call
        whose side stream had finished long before."""
        self.release()
        with self._cond:
            idle = not self._queue and not self._running and not self._here
        if not idle:
            mark = _Mark(self)
            self._enqueue(("record", mark))
            mark.flag.wait()
        if self._error is not None:
            raise self._error

    def query(self) -> bool:
        with self._cond:
            return not self._held and not self._queue and not self._running and not self._here

    def hold(self) -> None:
        """Keep what is issued from now on from the worker until :meth:`release`.

        The issuing thread holds the GIL while it issues, so a worker it wakes cannot run
        before the issue ends anyway; waking it per op only adds a lock round and a futex
        wake to every issue (a 33-op plan: the second stream's first op started 180-290 us
        after it was issued, when the issue loop ended)."""
        if self._held is None:
            self._held = []

    def release(self) -> None:
        """Hand everything issued since :meth:`hold` to the worker at once."""
        held, self._held = self._held, None
        if held:
            with self._cond:
                self._queue.extend(held)
                self._cond.notify()

    def close(self) -> None:
        """Finish queued work, then stop the thread."""
        self.release()
        if self._thread.is_alive():
            self._enqueue(("stop",))
            self._thread.join()

    # ------------------------------------------------------------------ worker
    def _enqueue(self, cmd: tuple) -> None:
        held = self._held
        if held is not None:
            held.append(cmd)
            return
        with self._cond:
            self._queue.append(cmd)
            self._cond.notify()

    def _loop(self) -> None:
        while True:
            # one lock round per command: the next one is taken where the last one is finished
            with self._cond:
                while not self._queue:
                    self._running = False
                    self._cond.wait()
                cmd = self._queue.popleft()
                self._running = True
            if not self._do(cmd):
                with self._cond:
                    self._running = False
                return

    @property
    def error(self) -> BaseException | None:
        """The stream's sticky error (a :class:`StreamError`), None while it is healthy."""
        return self._error

    def run_here(self) -> None:
        """Run what was issued since :meth:`hold` on the calling thread, now, instead of
        handing it to the worker: the executor runs stream 0 on the thread that issues
        the call. Events, waits and the stream's recorder behave as on the worker."""
        cmds, self._held = self._held or [], None
        with self._cond:
            self._here = True  # query() says busy while it runs here
        try:
            for i in range(len(cmds)):
                self._do_here(cmds, i)
        finally:
            with self._cond:
                self._here = False  # (the worker's own flag is its own: it may be busy)

    def _do_here(self, cmds: list, i: int) -> None:
        """Command ``i`` of ``cmds`` on the calling thread. An interrupt there (Ctrl-C
        reaches only the caller's thread) becomes the stream's error, and the recordings
        still ahead fail rather than never come (they carry the stream's error): other
        streams' workers may wait on them, and close() joins those."""
        try:
            self._do(cmds[i], here=True)
        except BaseException as exc:
            if self._error is None:
                self._error = StreamError(self.name, "interrupted", exc)
            for rest in cmds[i:]:
                if rest[0] == "record":
                    self._do(rest)
            raise

    def _do(self, cmd: tuple, here: bool = False) -> bool:
        """Carry out one command on the calling thread; False for ``stop``. ``here`` (the
        caller's own thread, :meth:`run_here`): an op interrupted by a signal
        (KeyboardInterrupt, SystemExit) stops the stream and is raised as it is, not
        reported as the op's failure; a worker thread never gets those."""
        tag = cmd[0]
        if tag == "work":
            self._do_work(cmd, here)
        elif tag == "record":
            mark = cmd[1]
            mark.t_ns = now_ns()
            mark.error = self._error
            mark.flag.set()
        elif tag == "wait":
            self._do_wait(cmd[1])
        else:  # stop
            return False
        return True

    def _do_work(self, cmd: tuple, here: bool) -> None:
        """Run one submitted function and record its interval; skipped after the stream
        failed (sticky). Its handle (None when launched) gets the value or the error."""
        _, fn, args, kwargs, name, work = cmd
        try:
            if self._error is None:
                t0 = now_ns()
                self._call(fn, args, kwargs, name, work, here)
                self.recorder.op(name, t0, now_ns())
        finally:
            if work is not None:
                work._error = self._error
                work._flag.set()

    def _call(self, fn: Callable[..., Any], args: tuple, kwargs: dict, name: str,
              work: CpuWork | None, here: bool) -> None:
        try:
            value = fn(*args, **kwargs)
            if work is not None:
                work._value = value
        except BaseException as exc:  # noqa: BLE001 - reported via the stream
            self._error = StreamError(self.name, name, exc)
            if here and isinstance(exc, (KeyboardInterrupt, SystemExit)):
                raise

    def _do_wait(self, mark: _Mark) -> None:
        """Block until ``mark``'s recording is reached (drawn as a wait interval); a
        failed producer's error becomes this stream's: it does not compute on its data."""
        if not mark.flag.is_set():
            t0 = now_ns()
            mark.flag.wait()
            self.recorder.wait(t0, now_ns(), on=mark.stream.name)
        if mark.error is not None and self._error is None:
            self._error = mark.error


class CpuBackend(BackendBase):
    """Streams as host worker threads; see the module docstring."""

    name = "cpu"
    host_synchronous = True
    capabilities = Capabilities(host_threads=True, holds_streams=True, launch=True,
                                own_records=True)

    def __init__(self, intra_op_threads: int | None = None) -> None:
        if intra_op_threads is not None:
            set_intra_op_threads(intra_op_threads)
        self._streams: list[CpuStream] = []
        self._default: CpuStream | None = None
        self._ids = itertools.count()
        self._lock = threading.Lock()

    def stream(self, name: str | None = None, kind: str = "device") -> CpuStream:
        with self._lock:
            if name is None:
                name = f"stream{next(self._ids)}"
            if any(s.name == name for s in self._streams):
                raise ValueError(f"stream name {name!r} already used")
            s = CpuStream(name, kind)
            s._backend = self
            self._streams.append(s)
            return s

    def default_stream(self) -> CpuStream:
        if self._default is None:
            self._default = self.stream("default")
        return self._default

    def event(self, enable_timing: bool = True) -> CpuEvent:
        return CpuEvent(self, enable_timing)

    def synchronize(self) -> None:
        """Wait for every stream; raise the first stream error."""
        for s in list(self._streams):
            s.synchronize()

    def timeline(self, source: str | None = None) -> Timeline:
        """What ran so far, one lane per stream (call after synchronize for a full picture)."""
        return build_timeline([s.recorder for s in self._streams], source or "cpu-backend",
                              "parastream-cpu", device=cpu_name())

    def clear_records(self) -> None:
        """Forget every stream's recorded op and wait intervals."""
        for s in self._streams:
            s.recorder.ops.clear()
            s.recorder.waits.clear()

    def close(self) -> None:
        for s in self._streams:
            s.close()
