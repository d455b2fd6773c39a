"""The CPU stream backend's interpreter lock as a resource plugged into the simulator
(registered by name in :data:`parastream.sim.resource.RESOURCES`).

CPU streams are Python worker threads: each op's Python part (the executor's dispatch,
torch's argument parsing, folded views) runs under the interpreter lock, one at a time.
A task starts only when the lock is free, and holds it for its first ``host_us``; the
others wait for it. With ``wake_us`` a task also needs the lock when its kernel ends (to
hand over its result); one that finds it taken at its end or at its start goes on
``wake_us`` after the release (its worker sleeps on the lock and is woken by the OS). At
its start or its end it may find the lock taken again then and wait again (a woken thread
does not get the lock ahead of a running one that takes it first), and at its end it gives
its cores back while it sleeps. A task never waits for its own release of the lock.
"""

from __future__ import annotations

from functools import partial
from typing import Sequence

from ..sim.resource import Core, ResourceFactory
from ..sim.tasks import Device, Task


class HostLock:
    """One run's host lock over ``tasks`` (each needs it for its ``host_us``)."""

    __slots__ = ("host_of", "wake_us", "busy", "holder", "waiting", "done_waiting")

    def __init__(self, tasks: list[Task], wake_us: float = 0.0) -> None:
        self.host_of = [t.host_us for t in tasks]
        #: a worker that slept on the lock goes on this long after its release (0: at once,
        #: and a finished kernel never waits for the lock)
        self.wake_us = wake_us
        self.busy = False
        self.holder = -1  # the task holding it
        self.waiting: set[int] = set()  # queues whose head waits to start for the lock
        self.done_waiting: list[int] = []  # finished kernels waiting to hand over a result

    def blocks(self, task: int, queue: int) -> bool:
        """A task with a host part cannot start while the lock is held."""
        if self.host_of[task] and self.busy:
            self.waiting.add(queue)
            return True
        return False

    def take(self, core: Core, task: int, begin: float, dur: float) -> None:
        """The task holds the lock from ``begin`` for its host part (at most its duration)."""
        hu = self.host_of[task]
        if hu:
            self.busy = True
            self.holder = task
            core.signal_at(begin + min(hu, dur), task)

    def holds_completion(self, task: int) -> bool:
        """A finished kernel whose worker needs the lock another stream's task holds."""
        if self.busy and self.holder != task and self.wake_us and self.host_of[task]:
            self.done_waiting.append(task)
            return True
        return False

    def signal(self, core: Core, task: int, t: float) -> Sequence[int]:
        """``task`` released the lock at ``t``: the finished kernels waiting for it complete
        one wake-up later; the queues whose head waited to start are swept now, or one
        wake-up later when their workers sleep on the lock."""
        self.busy = False
        self.holder = -1
        for k in self.done_waiting:
            core.complete_at(t + self.wake_us, k)
        self.done_waiting.clear()
        qs = core.in_rr_order(self.waiting)
        self.waiting.clear()
        if self.wake_us and qs:
            for q in qs:
                core.retry_at(t + self.wake_us, q)
            return ()
        return qs


def host_lock_for(device: Device) -> ResourceFactory | None:
    """The host lock a device description asks for (``Device.host_lock``), woken
    ``Device.lock_wake_us`` after its release; None without one."""
    if not device.host_lock:
        return None
    return partial(HostLock, wake_us=device.lock_wake_us)
