"""The cuda and npu stream backends: torch's device streams and events behind the protocol.

One code path for both: the device module (``torch.cuda``, or ``torch.npu`` once
``torch_npu`` is imported) provides ``Stream``, ``Event``, ``stream(s)`` (the context that
makes ``s`` current), ``set_stream``, ``current_stream()`` and ``synchronize()``, and
tensors provide ``record_stream``. Only that one family of objects is used (torch's rule:
never mix the generic ``torch.Stream``/``torch.Event`` with device-specific ones).

``submit(fn)`` calls ``fn`` on the host with ``s`` current: the kernels it launches queue
on ``s`` and the result is available at once (``host_synchronous`` is false). Outside a
run that is ``with device.stream(s)``; inside the executor's run (``begin`` .. ``end``) the
issuing thread calls ``set_stream`` only when the stream changes, and ``end`` (or
``close`` after an error) makes the caller's stream current again. With
``record_timeline`` each submit is bracketed by two timing events on its stream;
:meth:`DeviceBackend.timeline` turns them into a Timeline (op names as submitted, stream
labels as named), the device-side counterpart of the cpu backend's own recording.
For kernel-level detail use the torch profiler (``parastream run --trace``).

``begin(streams)`` makes every stream wait for the caller's current stream (the inputs were
made there) and ``end(main)`` makes the current stream wait for ``main`` (the plan's end
join already brought every side stream back to ``main``): work the caller issues next is
ordered after the whole run, and capture would close cleanly.

Not run on a device in this project's CI (no GPU/NPU there): tested against a stand-in
module that records the calls (tests/runtime/test_cuda_standin.py).
"""

from __future__ import annotations

import threading
import time
from dataclasses import replace
from typing import Any, Callable

from ..timeline.model import Timeline
from .backend import STREAM_KINDS, BackendBase, Capabilities, StreamError

#: cycles per microsecond for ``delay``: about an H100/H200 or Ascend core clock; jitter's
#: delays are random anyway, so only their order of magnitude matters
SPIN_CYCLES_PER_US = 2000


def import_torch_npu() -> Any:
    """Import torch_npu (which registers ``torch.npu``); ImportError with advice if absent."""
    try:
        import torch_npu  # noqa: F401  (registers torch.npu)
    except ImportError as exc:
        raise ImportError("the npu backend needs torch_npu (Ascend's PyTorch adapter)") from exc
    import torch

    return torch.npu


def device_module(device_type: str) -> Any:
    """``torch.cuda`` or ``torch.npu``."""
    import torch

    if device_type == "cuda":
        return torch.cuda
    if device_type == "npu":
        return import_torch_npu()
    raise ValueError(f"device_type must be cuda or npu, not {device_type!r}")


def device_available(device_type: str) -> bool:
    try:
        return bool(device_module(device_type).is_available())
    except (ImportError, ValueError, RuntimeError, AttributeError):
        return False


def require_device(device_type: str) -> None:
    """InputError (one line, exit 2) unless torch has a ``device_type`` device here."""
    from ..errors import InputError

    if not device_available(device_type):
        raise InputError(None, f"--device {device_type}: no {device_type} device available "
                               "to torch here")


class DeviceWork:
    """The host-side result of a launch (the device work may still be queued)."""

    __slots__ = ("_value",)

    def __init__(self, value: Any) -> None:
        self._value = value

    def done(self) -> bool:
        return True

    def result(self) -> Any:
        return self._value


class DeviceEvent:
    def __init__(self, backend: "DeviceBackend", enable_timing: bool = False) -> None:
        self._backend = backend
        self.raw = backend.mod.Event(enable_timing=enable_timing)

    def record(self, stream: "DeviceStream | None" = None) -> None:
        raw = stream.raw if stream is not None else self._backend.mod.current_stream()
        self.raw.record(raw)

    def wait(self, stream: "DeviceStream | None" = None) -> None:
        raw = stream.raw if stream is not None else self._backend.mod.current_stream()
        self.raw.wait(raw)

    def synchronize(self) -> None:
        self.raw.synchronize()

    def query(self) -> bool:
        return bool(self.raw.query())

    def elapsed_time(self, end: "DeviceEvent") -> float:
        return float(self.raw.elapsed_time(end.raw))


class DeviceStream:
    def __init__(self, backend: "DeviceBackend", name: str, kind: str, raw: Any) -> None:
        if kind not in STREAM_KINDS:
            raise ValueError(f"stream kind must be one of {STREAM_KINDS}, not {kind!r}")
        self._backend = backend
        self.name = name
        self.kind = kind
        self.raw = raw

    def submit(self, fn: Callable[..., Any], *args: Any, name: str | None = None,
               **kwargs: Any) -> DeviceWork:
        b = self._backend
        # inside the executor's run, on the thread that began it (the current stream is a
        # thread's own): switch the current stream only on change, pooled timing events
        if b._run_thread == threading.get_ident():
            b._switch(self.raw)
            return DeviceWork(self._launch(fn, args, kwargs, name, pooled=True))
        with b.mod.stream(self.raw):
            return DeviceWork(self._launch(fn, args, kwargs, name, pooled=False))

    def _launch(self, fn: Callable[..., Any], args: tuple, kwargs: dict,
                name: str | None, pooled: bool) -> Any:
        """Call ``fn`` with this stream current, between two timing events when recording."""
        b = self._backend
        op = name or getattr(fn, "__name__", "op")
        event = b._timing_event if pooled else (lambda: b.mod.Event(enable_timing=True))
        if b.record_timeline:
            start = event()
            start.record(self.raw)
        try:
            value = fn(*args, **kwargs)
        except Exception as exc:  # a launch failed: report where, as the cpu backend does
            raise StreamError(self.name, op, exc) from exc
        if b.record_timeline:
            end = event()
            end.record(self.raw)
            b._marks.append((self.name, self.kind, op, start, end))
        return value

    def record_event(self, event: DeviceEvent | None = None) -> DeviceEvent:
        event = event or self._backend.event()
        event.record(self)
        return event

    def wait_event(self, event: DeviceEvent) -> None:
        self.raw.wait_event(event.raw)

    def synchronize(self) -> None:
        self.raw.synchronize()

    def query(self) -> bool:
        return bool(self.raw.query())


#: what a cuda or npu backend declares (its ``torch_device`` is its device type)
DEVICE_CAPABILITIES = Capabilities(run_brackets=True, record_stream=True, device_delay=True,
                                   timing_events=True)


class DeviceBackend(BackendBase):
    """Streams of one cuda or npu device (``device_type``); ``mod`` may be given to test
    the code path with a stand-in for ``torch.cuda``."""

    host_synchronous = False
    capabilities = DEVICE_CAPABILITIES

    def __init__(self, device_type: str = "cuda", device: Any = None,
                 record_timeline: bool = True, mod: Any = None) -> None:
        self.name = device_type
        self.capabilities = replace(DEVICE_CAPABILITIES, torch_device=device_type)
        self.mod = mod if mod is not None else device_module(device_type)
        self.device = device
        self.record_timeline = record_timeline
        self._marks: list[tuple] = []
        self._streams: dict[str, DeviceStream] = {}
        self._origin = None  # the caller's current stream during a run
        # during a run (begin .. end) the issuing thread sets the current stream only when
        # it changes, instead of entering and leaving a stream context around every op;
        # the timing events are reused from run to run (begin clears the marks that read
        # them) instead of made anew for every op
        self._run_thread: int | None = None  # the thread in run mode; None outside a run
        self._set: Any = None
        self._pool: list[Any] = []
        self._pool_next = 0

    def stream(self, name: str | None = None, kind: str = "device") -> DeviceStream:
        name = name or f"stream{len(self._streams)}"
        if name in self._streams:
            raise ValueError(f"stream name {name!r} already used")
        raw = self.mod.Stream(device=self.device) if self.device is not None else self.mod.Stream()
        s = self._streams[name] = DeviceStream(self, name, kind, raw)
        return s

    def default_stream(self) -> DeviceStream:
        return DeviceStream(self, "current", "device", self.mod.current_stream())

    def event(self, enable_timing: bool = False) -> DeviceEvent:
        return DeviceEvent(self, enable_timing)

    # -- run brackets used by the executor
    def begin(self, streams: list[DeviceStream]) -> None:
        """Every stream waits for the caller's current stream (where the inputs were made)."""
        self._restore()  # a run that ended without end() (an error) left its stream set
        self._marks.clear()
        self._pool_next = 0
        self._origin = self._set = self.mod.current_stream()
        ev = self.mod.Event()
        ev.record(self._origin)
        for s in streams:
            if s.raw is not self._origin:
                s.raw.wait_event(ev)
        self._run_thread = threading.get_ident()  # last: a failure above leaves no run mode

    def end(self, main: DeviceStream) -> None:
        """The caller's current stream waits for ``main`` (already joined by the plan) and
        is current again."""
        self._restore()
        origin = self._origin if self._origin is not None else self.mod.current_stream()
        if main.raw is not origin:
            ev = self.mod.Event()
            ev.record(main.raw)
            origin.wait_event(ev)

    def _switch(self, raw: Any) -> None:
        if self._set is not raw:
            self.mod.set_stream(raw)
            self._set = raw

    def _restore(self) -> None:
        """Leave run mode with the caller's stream current again."""
        if self._run_thread is not None:
            self._run_thread = None
            if self._set is not self._origin:
                self.mod.set_stream(self._origin)
            self._set = None

    def _timing_event(self) -> Any:
        if self._pool_next == len(self._pool):
            self._pool.append(self.mod.Event(enable_timing=True))
        ev = self._pool[self._pool_next]
        self._pool_next += 1
        return ev

    def record_stream(self, value: Any, stream: DeviceStream) -> None:
        """Tell the caching allocator that ``value``'s tensors are used on ``stream``."""
        for t in _tensors(value):
            t.record_stream(stream.raw)

    def synchronize(self) -> None:
        self.mod.synchronize()

    def delay(self, us: float) -> None:
        """Queue about ``us`` microseconds of spinning on the current stream (jitter's
        delay: it must hold back the device work, not only its launch). Uses the device
        module's ``_sleep(cycles)`` at an assumed 2 GHz clock; a host sleep without it."""
        spin = getattr(self.mod, "_sleep", None)
        if spin is None:
            time.sleep(us * 1e-6)
        else:
            spin(max(1, int(us * SPIN_CYCLES_PER_US)))

    def timeline(self, source: str | None = None) -> Timeline:
        """The recorded launches of the last run, timed by their device events."""
        from .lanes import LaneRecorder, build_timeline

        self.synchronize()
        lanes: dict[str, LaneRecorder] = {n: LaneRecorder(n, s.kind)
                                          for n, s in self._streams.items()}
        if self._marks:
            base = self._marks[0][3]
            for stream, kind, op, start, end in self._marks:
                lane = lanes.setdefault(stream, LaneRecorder(stream, kind))
                s_ns = int(round(base.elapsed_time(start) * 1e6))
                e_ns = int(round(base.elapsed_time(end) * 1e6))
                lane.op(op, s_ns, max(e_ns, s_ns))
        try:
            device = str(self.mod.get_device_name())
        except Exception:  # a build or stand-in without it: the backend's name is enough
            device = self.name
        return build_timeline(lanes.values(), source or f"{self.name}-backend",
                              f"parastream-{self.name}", device=device)

    def close(self) -> None:
        try:
            self._restore()
            self.synchronize()
        finally:
            self._streams.clear()
            self._pool.clear()


class CudaBackend(DeviceBackend):
    capabilities = replace(DEVICE_CAPABILITIES, torch_device="cuda")

    def __init__(self, device: Any = None, record_timeline: bool = True, mod: Any = None) -> None:
        super().__init__("cuda", device, record_timeline, mod)


class NpuBackend(DeviceBackend):
    capabilities = replace(DEVICE_CAPABILITIES, torch_device="npu")

    def __init__(self, device: Any = None, record_timeline: bool = True, mod: Any = None) -> None:
        super().__init__("npu", device, record_timeline, mod)


def _tensors(v: Any) -> list:
    import torch

    if isinstance(v, torch.Tensor):
        return [v]
    if isinstance(v, (tuple, list)):
        return [t for x in v for t in _tensors(x)]
    if hasattr(v, "record_stream"):  # a stand-in tensor in tests
        return [v]
    return []


__all__ = ["CudaBackend", "DeviceBackend", "DeviceEvent", "DeviceStream", "NpuBackend",
           "device_available", "device_module", "import_torch_npu", "require_device"]
