"""The stream backend protocol and its registry.

A *stream* is a FIFO of work; an *event* recorded on one stream and waited on by another
is the only ordering between two streams. The protocol follows
``torch.cuda.Stream`` / ``torch.cuda.Event`` method for method, so a CUDA or NPU backend
can wrap them thinly:

=====================  ==========================================================
``Stream``             ``submit(fn, *args, name=...)`` (enqueue work, FIFO),
                       ``record_event(event=None)``, ``wait_event(event)``,
                       ``synchronize()``, ``query()``
``Event``              ``record(stream=None)``, ``wait(stream=None)``,
                       ``synchronize()``, ``query()``, ``elapsed_time(end)`` (ms)
``Backend``            ``stream(name, kind)``, ``event()``, ``timeline()``,
                       ``close()``, ``synchronize()``, ``host_synchronous``,
                       ``capabilities``; and, where ``capabilities`` says so,
                       ``begin(streams)`` / ``end(main)``,
                       ``record_stream(value, stream)``, ``delay(us)``,
                       ``clear_records()``
=====================  ==========================================================

What a backend can do beyond the core is declared, not probed: its :class:`Capabilities`
(a class attribute, readable by name without making the backend:
:func:`backend_capabilities`). :class:`BackendBase` gives every optional method a default
that does nothing, so a caller may call them on any backend derived from it; a backend
that is not leaves ``capabilities`` out and is driven through the core protocol only.

``submit`` returns a :class:`Work` handle. On a host backend (cpu) the function runs on the
stream's worker thread (or on the caller's, for a held stream it runs itself:
``CpuStream.run_here``) and ``Work.result()`` blocks until it ran; on a device backend the
function is the host-side launch code, called under the stream (``torch.cuda.stream(s)``),
so ``result()`` is available at once while the device work it issued is still queued —
consumers order themselves after it with an event, exactly as with CUDA.

Backends are looked up by name (:func:`get_backend`); modules are imported lazily so that
``import parastream.runtime`` never imports torch.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable, Protocol, runtime_checkable

from ..plugin import load
from ..timeline.model import Timeline

#: stream kinds: host work, device compute, host<->device copies
STREAM_KINDS = ("host", "device", "copy")


class StreamError(RuntimeError):
    """Work on a stream raised; later work on that stream (and on streams waiting on its
    events) is skipped, like a sticky device error. ``stream`` and ``op`` name where."""

    def __init__(self, stream: str, op: str, cause: BaseException) -> None:
        self.stream, self.op, self.cause = stream, op, cause
        super().__init__(f"stream {stream!r}: op {op!r} raised {type(cause).__name__}: {cause}")


class ModelCallError(RuntimeError):
    """The module itself (eager, not its traced program) raised: ``cause``, the model's
    own error (a reference call of ``check``, a plain call while measured)."""

    def __init__(self, cause: BaseException) -> None:
        self.cause = cause
        super().__init__(f"the model raised {type(cause).__name__}: {cause}")


@runtime_checkable
class Work(Protocol):
    """Handle of one submitted function call."""

    def done(self) -> bool: ...

    def result(self) -> Any: ...


@runtime_checkable
class Event(Protocol):
    """A point in a stream's FIFO. An event that was never recorded counts as complete."""

    def record(self, stream: "Stream | None" = None) -> None: ...

    def wait(self, stream: "Stream | None" = None) -> None: ...

    def synchronize(self) -> None: ...

    def query(self) -> bool: ...

    def elapsed_time(self, end: "Event") -> float: ...


@runtime_checkable
class Stream(Protocol):
    """A FIFO of work; ``name`` labels its lane in the timeline, ``kind`` is in STREAM_KINDS."""

    name: str
    kind: str

    def submit(self, fn: Callable[..., Any], *args: Any, name: str | None = None,
               **kwargs: Any) -> Work: ...

    def record_event(self, event: Event | None = None) -> Event: ...

    def wait_event(self, event: Event) -> None: ...

    def synchronize(self) -> None: ...

    def query(self) -> bool: ...


@dataclass(frozen=True)
class Capabilities:
    """What a backend can do beyond the core protocol (all off by default).

    ``host_threads``: its streams are worker threads of this process: torch's intra-op
    thread count is set per worker, workers can be pinned to cores, and they share the
    host's OpenMP thread team with the caller. ``holds_streams``: its streams can hold
    what is issued and hand it over at once (``hold``/``release``), and the caller can run
    a held program itself (``run_here``). ``launch``: its streams have ``launch(fn, *args,
    name=)``, a ``submit`` without a result handle. ``own_records``: its streams record
    their op intervals themselves (``clear_records`` empties them before a run).
    ``run_brackets``: ``begin(streams)``/``end(main)`` join a run to the caller's current
    stream. ``record_stream``: tensors read on another stream must be told so.
    ``device_delay``: ``delay(us)`` holds back the stream's device work, not only the
    launch. ``timing_events``: a timeline costs two events per op, which the factory's
    ``record_timeline=False`` turns off. ``torch_device``: the torch device type its
    streams run on (``"cuda"``, ``"npu"``; None on the host): the module a timer
    synchronises and whose random generators a bitwise check saves and restores."""

    host_threads: bool = False
    holds_streams: bool = False
    launch: bool = False
    own_records: bool = False
    run_brackets: bool = False
    record_stream: bool = False
    device_delay: bool = False
    timing_events: bool = False
    torch_device: str | None = None


@runtime_checkable
class Backend(Protocol):
    """Creates streams and events and reports what ran as a :class:`Timeline`.

    ``host_synchronous`` is true when submitted work runs on host threads (cpu): a caller
    that already owns a worker thread may then run a function inline instead of handing it
    to a stream thread, saving one thread hop (which costs more than a small op).
    ``capabilities`` declares what it can do beyond that (:class:`Capabilities`).
    """

    name: str
    host_synchronous: bool
    capabilities: Capabilities

    def stream(self, name: str | None = None, kind: str = "device") -> Stream: ...

    def event(self, enable_timing: bool = True) -> Event: ...

    def timeline(self, source: str | None = None) -> Timeline: ...

    def synchronize(self) -> None: ...

    def close(self) -> None: ...


class BackendBase:
    """Defaults for the optional methods of :class:`Backend`: each does nothing (``delay``
    sleeps on the host), so callers may call them whatever the backend; a backend
    overrides those its :class:`Capabilities` declare."""

    capabilities = Capabilities()

    def synchronize(self) -> None:
        """Wait for everything issued so far."""
        return None

    def begin(self, streams: list[Any]) -> None:
        """Start a run on ``streams`` (``run_brackets``)."""
        return None

    def end(self, main: Any) -> None:
        """End a run joined on stream ``main`` (``run_brackets``)."""
        return None

    def record_stream(self, value: Any, stream: Any) -> None:
        """Tell the allocator ``value`` is used on ``stream`` (``record_stream``)."""
        return None

    def delay(self, us: float) -> None:
        """Hold the current stream back about ``us`` microseconds (a host sleep unless
        ``device_delay``)."""
        time.sleep(us * 1e-6)

    def clear_records(self) -> None:
        """Forget the op intervals the streams recorded (``own_records``)."""
        return None

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()  # type: ignore[attr-defined]


def capabilities_of(backend: Any) -> Capabilities:
    """What ``backend`` (an instance) declares; none for one that declares nothing."""
    caps = getattr(backend, "capabilities", None)
    return caps if isinstance(caps, Capabilities) else Capabilities()


#: name -> "module:attribute" of a backend factory; imported on first use
_SHIPPED: dict[str, str] = {
    "cpu": "parastream.cpu.backend:CpuBackend",
    "null": "parastream.runtime.null:NullBackend",
    "cuda": "parastream.runtime.cuda:CudaBackend",
    "npu": "parastream.runtime.cuda:NpuBackend",
}
_REGISTRY: dict[str, str | Callable[..., Backend]] = dict(_SHIPPED)


def register_backend(name: str, factory: str | Callable[..., Backend]) -> None:
    """Add (or replace) a backend: ``factory`` is a callable or a ``"module:attr"`` path."""
    _REGISTRY[name] = factory


def available_backends() -> list[str]:
    """Names that :func:`get_backend` accepts."""
    return sorted(_REGISTRY)


def _resolve(factory: str | Callable[..., Backend]) -> Callable[..., Backend]:
    return load(factory) if isinstance(factory, str) else factory


def _factory(name: str) -> Callable[..., Backend]:
    try:
        factory = _REGISTRY[name]
    except KeyError:
        raise ValueError(f"unknown stream backend {name!r} (known: "
                         f"{', '.join(available_backends())})") from None
    return _resolve(factory)


def backend_capabilities(name: str) -> Capabilities:
    """What backend ``name`` declares, read from its factory (its class attribute)
    without making one. A factory that declares nothing registered under a shipped
    backend's name stands in for that backend and declares what it does; any other
    declares nothing."""
    factory = _factory(name)
    if getattr(factory, "capabilities", None) is None and name in _SHIPPED:
        factory = _resolve(_SHIPPED[name])
    return capabilities_of(factory)


def declared_capabilities(name: str | None) -> Capabilities:
    """:func:`backend_capabilities` of ``name``, or none declared for None or a name no
    backend is registered under (a run's record read back after the registry changed)."""
    if name is None or name not in _REGISTRY:
        return Capabilities()
    return backend_capabilities(name)


def torch_device_name(name: str) -> str | None:
    """The name torch reports for the device backend ``name``'s streams run on
    (``torch.cuda.get_device_name()``); None for a backend on the host (no
    ``torch_device``). Imports torch (and torch_npu for npu)."""
    on = backend_capabilities(name).torch_device
    if on is None:
        return None
    from .cuda import device_module

    return str(device_module(on).get_device_name())


def untimed(name: str) -> "Backend | str":
    """A new backend ``name`` without its per-op timing events where it has them
    (``timing_events``: two events a submit, a host cost per op), else ``name`` itself
    (the cpu backend's timeline is its own bookkeeping, not events on a device)."""
    if backend_capabilities(name).timing_events:
        return get_backend(name, record_timeline=False)
    return name


def get_backend(name: str, **options: Any) -> Backend:
    """A new backend instance by name (``cpu``, ``null``, or one registered later)."""
    return _factory(name)(**options)
