"""The op-level forward's issue order: each stream's work as early as its inputs allow.

The nodes of one stream keep their program order (a FIFO queue per stream). The queues are
merged: at each step the forward issues a queue's head whose dependencies are all issued,
preferring side-stream heads over the origin stream's (so side work is launched before the
main path's dominator, not after it). A dependency is

* a data edge (the node reads another node's value),
* a plan event (its ``wait_before`` op follows its ``record_after`` op), or
* a storage order: two writers of one storage, or a reader and a writer of it, keep their
  program order (a view aliases its base's storage). Ordered effects between streams that
  touch no common tensor (random draws, collectives) are ordered by the plan's events,
  which the importer's edges give.

Every dependency points forward in program order (plan events included: each stream runs
its ops in program order), so the program-order-first node not yet issued is always ready
and the merge never stalls; a plan whose event points backwards is refused.

A *free* node (no stream of its own: a view of an input or weight) is issued right before
the first node that needs it, in that node's block; one nobody needs is issued at the end.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field


class OrderError(ValueError):
    """The dependencies cannot be met in any issue order (a plan event against program
    order)."""


@dataclass
class Unit:
    """One node of the forward to issue: its name, its stream (None: free) and the units
    it must follow."""

    name: str
    stream: int | None
    deps: set[str] = field(default_factory=set)


def storage_order(accesses: list[tuple[str, set[str], set[str]]]) -> dict[str, set[str]]:
    """For each unit of ``accesses`` (``(name, storages read, storages written)`` in program
    order), the units it must follow so that no two writers of a storage, and no reader and
    writer of it, swap: read after write, write after read, write after write."""
    last_writer: dict[str, str] = {}
    readers: dict[str, list[str]] = {}
    out: dict[str, set[str]] = {}
    for name, reads, writes in accesses:
        deps = out.setdefault(name, set())
        for r in reads - writes:
            if r in last_writer:
                deps.add(last_writer[r])
            readers.setdefault(r, []).append(name)
        for r in writes:
            deps.update(readers.get(r, []))
            if r in last_writer:
                deps.add(last_writer[r])
            last_writer[r] = name
            readers[r] = []
        deps.discard(name)
    return out


class _Merge:
    """The merge of the per-stream queues (see the module's docstring)."""

    def __init__(self, units: list[Unit]) -> None:
        self.units = {u.name: u for u in units}
        self.pos = {u.name: i for i, u in enumerate(units)}
        self.queues: dict[int, deque[str]] = {}
        for u in units:
            if u.stream is not None:
                self.queues.setdefault(u.stream, deque()).append(u.name)
        self.issued: set[str] = set()
        self.order: list[tuple[str, int]] = []

    def ready(self, name: str) -> bool:
        """Whether every unit ``name`` follows is issued, or free and ready itself."""
        for d in self.units[name].deps:
            dep = self.units.get(d)
            if dep is None or d in self.issued:
                continue
            if dep.stream is not None or not self.ready(d):
                return False
        return True

    def issue(self, name: str, block: int) -> None:
        """Issue ``name`` in stream ``block``'s block, its free dependencies first."""
        for d in sorted(self.units[name].deps, key=lambda x: self.pos.get(x, -1)):
            if d in self.units and d not in self.issued:
                self.issue(d, block)
        self.issued.add(name)
        self.order.append((name, block))

    def pick(self, current: int | None) -> int | None:
        """The stream whose head goes next: the open side stream's while it is ready, else
        the ready side head first in program order, else the origin stream's; None when no
        head is ready."""
        ready = {s: q[0] for s, q in self.queues.items() if q and self.ready(q[0])}
        side = [s for s in ready if s != 0]
        if current in side:
            return current
        if side:
            return min(side, key=lambda s: self.pos[ready[s]])
        return 0 if 0 in ready else None

    def run(self) -> list[tuple[str, int]]:
        current: int | None = None
        while any(self.queues.values()):
            s = self.pick(current)
            if s is None:
                heads = ", ".join(q[0] for q in self.queues.values() if q)
                raise OrderError(f"no stream can go on (heads {heads}): a plan event waits "
                                 "for an op that comes later in program order")
            self.issue(self.queues[s].popleft(), s)
            current = s
        for name in self.units:  # free nodes nothing issued needs (outputs, unused)
            if name not in self.issued:
                self.issue(name, 0)
        return self.order


def issue_order(units: list[Unit]) -> list[tuple[str, int]]:
    """``(name, block stream)`` of every unit (given in program order) in issue order: each
    stream's queue merged as early as dependencies allow, side streams first; a free unit
    in the block of the first unit that needs it. Raises :class:`OrderError` when a
    dependency points backwards and no order exists."""
    return _Merge(units).run()


__all__ = ["OrderError", "Unit", "issue_order", "storage_order"]
