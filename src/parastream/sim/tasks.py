"""The simulator's input: tasks in issue order and what the engine needs of a device."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..timeline.model import KIND_COMPUTE


@dataclass(slots=True)
class Task:
    """One op as the device sees it."""

    name: str
    stream: int
    dur_us: float
    pool: str = "cube"  # "cube" | "vector" | "none" (DMA, comm, host: no cores)
    block_dim: int = 1
    memory_bound: bool = False
    waits: list[int] = field(default_factory=list)  # task indices whose completion it waits for
    type: str = ""
    kind: int = KIND_COMPUTE
    #: microseconds at the task's start that need the host lock (``Device.host_lock``)
    host_us: float = 0.0


@dataclass
class Device:
    """What the engine needs of a device profile."""

    name: str
    cube_cores: int
    vector_cores: int
    hw_queues: int
    launch_us: float
    sweep_us: float
    #: memory-bound tasks that run at full speed at once (``DeviceProfile.memory_streams``)
    memory_streams: float = 1.0
    #: one lock that every task holds for its first ``host_us``: the Python interpreter
    #: lock of the CPU stream backend, whose worker threads run each op's Python part
    #: (the executor's dispatch, torch's argument parsing) one at a time; the engine
    #: plugs in :class:`parastream.cpu.hostlock.HostLock` for it
    host_lock: bool = False
    #: a task whose wait blocked starts this long after the event it waited for (a CPU
    #: stream's worker sleeps on the event and is woken by the OS)
    wake_us: float = 0.0
    #: with the host lock, a task needs it at its end too (a CPU worker takes Python's
    #: interpreter lock back to hand over the op's result): one that finds it taken, or
    #: that could not start for it, goes on this long after the lock's release (its worker
    #: sleeps on the lock). 0: no such wait, and a blocked start goes on at the release
    lock_wake_us: float = 0.0
