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
                       ``close()``, ``host_synchronous``
=====================  ==========================================================

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

import importlib
from typing import Any, Callable, Protocol, runtime_checkable

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


@runtime_checkable
class Backend(Protocol):
    """Creates streams and events and reports what ran as a :class:`Timeline`.

    ``host_synchronous`` is true when submitted work runs on host threads (cpu): a caller
    that already owns a worker thread may then run a function inline instead of handing it
    to a stream thread, saving one thread hop (which costs more than a ~20 us op, DOMAIN §8).
    """

    name: str
    host_synchronous: bool

    def stream(self, name: str | None = None, kind: str = "device") -> Stream: ...

    def event(self, enable_timing: bool = True) -> Event: ...

    def timeline(self, source: str | None = None) -> Timeline: ...

    def close(self) -> None: ...


#: name -> "module:attribute" of a backend factory; imported on first use
_REGISTRY: dict[str, str | Callable[..., Backend]] = {
    "cpu": "parastream.runtime.cpu:CpuBackend",
    "null": "parastream.runtime.null:NullBackend",
    "cuda": "parastream.runtime.cuda:CudaBackend",
    "npu": "parastream.runtime.cuda:NpuBackend",
}


def register_backend(name: str, factory: str | Callable[..., Backend]) -> None:
    """Add (or replace) a backend: ``factory`` is a callable or a ``"module:attr"`` path."""
    _REGISTRY[name] = factory


def available_backends() -> list[str]:
    """Names that :func:`get_backend` accepts."""
    return sorted(_REGISTRY)


#: backends whose streams bracket each op with timing events when they record a timeline
TIMED_DEVICES = ("cuda", "npu")


def untimed(name: str) -> "Backend | str":
    """A new backend ``name`` without its per-op timing events where it has them (cuda,
    npu: two events a submit, a host cost of 6-11 us per op on an H200), else ``name``
    itself (the cpu backend's timeline is its own bookkeeping, not events on a device)."""
    return get_backend(name, record_timeline=False) if name in TIMED_DEVICES else name


def get_backend(name: str, **options: Any) -> Backend:
    """A new backend instance by name (``cpu``, ``null``, or one registered later)."""
    try:
        factory = _REGISTRY[name]
    except KeyError:
        raise ValueError(f"unknown stream backend {name!r} (known: "
                         f"{', '.join(available_backends())})") from None
    if isinstance(factory, str):
        module, _, attr = factory.partition(":")
        factory = getattr(importlib.import_module(module), attr)
    return factory(**options)
