"""Where a decode run's device work goes (:class:`Placement`): CPU threads, or a cuda
device with each worker thread issuing on its own stream.

On ``cuda`` (torch's cuda stream API, or a stand-in module with the same calls for
tests): every :class:`~parastream.decode.device.Worker` owns a ``Stream`` and runs each
call with it current (``with mod.stream(s)``), so the steps of different workers queue on
different streams and overlap on the device. Results cross threads in two ways only:
tokens, which the worker copies to the host (``tolist`` waits for its stream), and the
two micro-batches of a split step, ordered by events (:meth:`Placement.signal` records one
on the current stream, :meth:`Placement.follow` makes the current stream wait for it; the
second half's logits are kept for the first's stream, :meth:`Placement.keep`).
The KV pool is shared by the streams: a request's blocks are written only by the worker
running its steps, and blocks change hands only through the scheduler, after the host has
the tokens of the step that last wrote them (its stream had finished).

Span times: on the cpu the host clock when a step starts and ends; on cuda a timing
``Event`` recorded on the worker's stream at each end, turned into the run's clock
(nanoseconds) against a base event recorded when the run starts (:meth:`Placement.begin`,
after a device synchronize), once the run is over and the device synchronized.
"""

from __future__ import annotations

import contextlib
import time
from typing import Any, ContextManager

from ..errors import InputError

#: the devices a decode run may run on
DEVICES = ("cpu", "cuda")

now_ns = time.perf_counter_ns


class Placement:
    """The device of a run: ``cpu`` (threads), or ``cuda`` through ``mod`` (``torch.cuda``,
    or a stand-in that records the calls; tensors then stay where the model has them).
    ``torch_device``: the torch device type the tensors go to (None: they stay where they
    are); ``label``: the device's name on the timeline."""

    def __init__(self, device: str = "cpu", mod: Any = None, torch_device: str | None = None,
                 label: str = "CPU") -> None:
        self.device = device
        self.mod = mod
        self.torch_device = torch_device
        self.label = label
        self._base: Any = None
        self._base_ns = 0

    @property
    def streams(self) -> bool:
        """Whether workers issue on device streams."""
        return self.mod is not None

    def new_stream(self) -> Any:
        """A new device stream (None on the cpu)."""
        return self.mod.Stream() if self.mod is not None else None

    def enter(self, stream: Any) -> ContextManager:
        """The context that makes ``stream`` current on this thread."""
        if stream is None:
            return contextlib.nullcontext()
        return self.mod.stream(stream)

    def signal(self) -> Any:
        """An event recorded on this thread's current stream (None on the cpu)."""
        if self.mod is None:
            return None
        ev = self.mod.Event()
        ev.record(self.mod.current_stream())
        return ev

    def follow(self, event: Any) -> None:
        """This thread's current stream waits for ``event`` (nothing for None)."""
        if event is not None:
            self.mod.current_stream().wait_event(event)

    def keep(self, tensor: Any) -> None:
        """``tensor``, made on another stream, is used on this thread's current stream:
        the caching allocator must not reuse its memory before that stream is done."""
        if self.mod is not None and getattr(tensor, "is_cuda", False):
            tensor.record_stream(self.mod.current_stream())

    def begin(self) -> int:
        """The run starts: on cuda, synchronize (weights and pool made on the caller's
        stream are ready for every worker's stream) and record the clock's base event.
        Returns the run's start (ns), the base event's time on the run's clock."""
        if self.mod is not None:
            self.mod.synchronize()
            self._base = self.mod.Event(enable_timing=True)
            self._base.record(self.mod.current_stream())
        self._base_ns = now_ns()
        return self._base_ns

    def mark(self) -> Any:
        """A point in time on this thread's stream: host ns, or a timing event on cuda."""
        if self.mod is None:
            return now_ns()
        ev = self.mod.Event(enable_timing=True)
        ev.record(self.mod.current_stream())
        return ev

    def to_ns(self, mark: Any) -> int:
        """The run's clock (ns) of a :meth:`mark` (on cuda: after :meth:`synchronize`)."""
        if self.mod is None:
            return int(mark)
        return self._base_ns + int(round(self._base.elapsed_time(mark) * 1e6))

    def synchronize(self) -> None:
        """Wait for every stream's work (nothing on the cpu)."""
        if self.mod is not None:
            self.mod.synchronize()


def placement(device: str = "cpu", mod: Any = None) -> Placement:
    """The placement of ``device``: ``cpu``, or ``cuda`` (``torch.cuda`` unless ``mod``, a
    stand-in, is given). InputError when there is no cuda device or the name is unknown."""
    from ..runtime.backend import backend_capabilities

    if device not in DEVICES:
        raise InputError(None, f"--device: {device!r} is not one of {', '.join(DEVICES)}")
    on = backend_capabilities(device).torch_device
    if on is None:  # the host's threads
        return Placement()
    if mod is not None:  # a stand-in: the tensors stay where they are
        return Placement(device, mod, None, device)
    from ..runtime.cuda import device_module, require_device

    require_device(on)
    return Placement(device, device_module(on), on, device)


def place_model(model: Any, where: Placement) -> Any:
    """``model`` on the run's device: the built-in decoder moved (``to``) on a torch
    device; a decoder of the user's own (no ``to``), or a stand-in run, as it is."""
    if where.torch_device is not None and hasattr(model, "to"):
        return model.to(where.torch_device)
    return model


__all__ = ["DEVICES", "Placement", "place_model", "placement"]
