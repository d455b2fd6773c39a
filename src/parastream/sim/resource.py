"""What a resource plugged into the simulator is: something tasks need besides cores.

The engine (:mod:`parastream.sim.engine`) knows cores, event waits, memory bandwidth and
its queues; anything else a task must hold (the CPU stream backend's interpreter lock,
:mod:`parastream.cpu.hostlock`) is a :class:`Resource` the engine calls at four hooks:

- ``blocks(task, queue)`` when queue's head task has its events and its cores: True keeps
  it waiting (the resource must later return that queue from ``signal`` or make the engine
  look at it again with :meth:`Core.retry_at`);
- ``take(core, task, begin, dur)`` when the task starts at ``begin`` (before the engine
  schedules its completion);
- ``holds_completion(task)`` when the task's kernel ends: True defers its completion (its
  cores go back at once; the resource completes it later with :meth:`Core.complete_at`);
- ``signal(core, task, t)`` when an event the resource scheduled with
  :meth:`Core.signal_at` fires: returns the queues to sweep now.

A resource is built per run by a factory called with the run's tasks. The engine finds the
factory a device asks for by name in :data:`RESOURCES` (:func:`resource_for`), so the
backend that needs a resource keeps it in its own package.
"""

from __future__ import annotations

from typing import Callable, Protocol, Sequence

from ..plugin import load
from .tasks import Device, Task


class Core(Protocol):
    """The engine's side of the hooks: scheduling and the round-robin order."""

    def signal_at(self, t: float, task: int) -> None:
        """Fire the resource's ``signal`` for ``task`` at ``t``."""

    def complete_at(self, t: float, task: int) -> None:
        """Complete ``task`` (whose completion the resource held) at ``t``."""

    def retry_at(self, t: float, queue: int) -> None:
        """Look at ``queue``'s head task again at ``t``."""

    def in_rr_order(self, queues: set[int]) -> Sequence[int]:
        """``queues`` in the scheduler's round-robin order, as a copy."""


class Resource(Protocol):
    """A per-run resource the engine calls at its hooks (see the module docstring)."""

    def blocks(self, task: int, queue: int) -> bool: ...

    def take(self, core: Core, task: int, begin: float, dur: float) -> None: ...

    def holds_completion(self, task: int) -> bool: ...

    def signal(self, core: Core, task: int, t: float) -> Sequence[int]: ...


#: builds a run's resource from its tasks (in issue order)
ResourceFactory = Callable[[list[Task]], Resource]


#: resource name -> ``"module:attribute"`` of a function ``(Device) -> ResourceFactory | None``
#: (None: the device does not need it), imported on first use
RESOURCES: dict[str, str] = {"host_lock": "parastream.cpu.hostlock:host_lock_for"}


def resource_for(device: Device) -> ResourceFactory | None:
    """The factory of the resource ``device`` needs (its ``host_lock``: the ``host_lock``
    resource), or None."""
    if not device.host_lock:
        return None
    return load(RESOURCES["host_lock"])(device)
