"""The strength ladder of one candidate: C1 stream split -> C2 + core
limits -> C3 + sync points placed by hand.

- **C1** synchronises whole streams: an op that needs another stream's result waits for
  everything that stream has been handed so far (``wait_stream``; in GE graph mode the
  stream switch and ``npu_wait_tensor`` at the consumer). :func:`stream_sync_events` is
  that rung of a plan: each event's record moved to its stream's tail at the wait.
- **C2** adds core limits (``limit_core_num``), only on a device whose documentation
  lists them (:func:`core_limit_support`); never on CUDA or the CPU.
- **C3** places events by hand: a record right after the op that produces what the other
  stream needs (an *early record*, not the tail), waited on just before its first
  consumer. A plan needs C3 when its events differ from its C1 rung: the side stream (or
  main) has been handed more work by the time of the wait than the consumer needs.
"""

from __future__ import annotations

from ..graph.ir import Graph
from .hb import clocks, layout
from .model import Event, Plan
from .sync import _drop_implied, stream_clock_before

#: what a profile without a ``core_limit`` object is taken to allow
UNSUPPORTED = {"torchair": False, "npugraph_ex": False, "min_torch_npu": "",
               "source": "the device profile has no core_limit entry"}


def core_limit_support(profile) -> dict:
    """The device's core-limit facts: its profile's ``core_limit`` object (``{"torchair":
    bool, "npugraph_ex": bool, "min_torch_npu": str, "source": str}``); a profile
    without one supports no core limit (:data:`UNSUPPORTED`)."""
    spec = getattr(profile, "core_limit", None)
    if spec is None:
        return dict(UNSUPPORTED)
    if not isinstance(spec, dict):
        import msgspec

        spec = msgspec.to_builtins(spec)
    if not isinstance(spec, dict):
        return dict(UNSUPPORTED)
    return {"torchair": bool(spec.get("torchair")), "npugraph_ex": bool(spec.get("npugraph_ex")),
            "min_torch_npu": str(spec.get("min_torch_npu") or ""),
            "source": str(spec.get("source") or "")}


def supports_core_limits(spec: dict | None) -> bool:
    """Whether either Ascend path documents ``limit_core_num`` on the device."""
    return bool(spec) and bool(spec.get("torchair") or spec.get("npugraph_ex"))


#: why a device of a profile kind has no core-limit API at all (an npu's depends on its
#: profile's ``core_limit``)
NO_CORE_LIMIT_API = {
    "gpu": ("CUDA has no per-stream core limit API in torch (torch.cuda.Stream takes a "
            "priority only): streams share the SMs"),
    "cpu": ("no core limit API on the CPU (torch.cpu.Stream is a no-op; the cpu executor "
            "sizes each stream's intra-op threads instead)"),
}


def no_core_limit_reason(kind: str, spec: dict | None) -> str:
    """Why the C2 rung does not exist on a device of ``kind`` ("npu", "gpu", "cpu")."""
    if kind in NO_CORE_LIMIT_API:
        return NO_CORE_LIMIT_API[kind]
    src = (spec or {}).get("source") or UNSUPPORTED["source"]
    return f"the device profile does not list limit_core_num support ({src})"


def core_limit_apis(spec: dict | None) -> str:
    """The core-limit calls a C2 candidate may use on the device, with the versions."""
    spec = spec or {}
    apis = []
    if spec.get("torchair"):
        apis.append("torchair.scope.limit_core_num(aicore, vectorcore) per op (GE graph mode)")
    if spec.get("npugraph_ex"):
        apis.append("torch.npu.npugraph_ex.scope.limit_core_num(aicore, vectorcore) per stream "
                    "(npugraph_ex/aclgraph" + (f", torch_npu >= {spec['min_torch_npu']}"
                                                if spec.get("min_torch_npu") else "") + ")")
    return "; ".join(apis)


def stream_tails(graph: Graph, plan: Plan, order: list[str] | None = None) -> list[str]:
    """For each event of ``plan``, the last op its producer's stream has been handed by the
    time of the wait (the waiting op's issue; the stream's last op for a final join)."""
    lay = layout(graph, plan.assignment, order)
    by_stream: dict[int, list[str]] = {}
    for n in lay.order:
        by_stream.setdefault(lay.stream_of[n], []).append(n)
    out = []
    for e in plan.events:
        s = lay.stream_of[e.record_after]
        if e.wait_before is None:
            out.append(lay.last[s])
            continue
        ops = by_stream[s]
        at = lay.issue[e.wait_before]
        lo, hi = 0, len(ops)  # the last op of stream s issued before the waiting op
        while lo < hi:
            mid = (lo + hi) // 2
            if lay.issue[ops[mid]] < at:
                lo = mid + 1
            else:
                hi = mid
        out.append(ops[lo - 1])
    return out


def stream_sync_events(graph: Graph, plan: Plan, order: list[str] | None = None) -> list[Event]:
    """The C1 rung of ``plan``: every wait is for its producer's stream as issued so far
    (:func:`stream_tails`). Orders everything ``plan`` orders, and more."""
    out: list[Event] = []
    seen: set[tuple[str, str | None]] = set()
    for e, tail in zip(plan.events, stream_tails(graph, plan, order)):
        if (tail, e.wait_before) not in seen:
            seen.add((tail, e.wait_before))
            out.append(Event(record_after=tail, wait_before=e.wait_before))
    return without_implied(graph, plan, out, order)


def without_implied(graph: Graph, plan: Plan, events: list[Event],
                     order: list[str] | None) -> list[Event]:
    """Drop each wait that the other waits at the same op already imply (plan.sync)."""
    lay = layout(graph, plan.assignment, order)
    op_clock, _ = clocks(lay, events)
    at: dict[str | None, list[str]] = {}
    for e in events:
        at.setdefault(e.wait_before, []).append(e.record_after)
    _drop_implied(lay, op_clock, stream_clock_before(lay, op_clock), at)
    keep = {(p, n) for n, ps in at.items() for p in ps}
    return [e for e in events if (e.record_after, e.wait_before) in keep]


def placed_sync_points(graph: Graph, plan: Plan,
                       order: list[str] | None = None) -> list[tuple[Event, str]]:
    """The events of ``plan`` whose record sits right after a producer that is not its
    stream's tail at the wait (the C3 sync points), each with that tail (where C1 waits)."""
    return [(e, t) for e, t in zip(plan.events, stream_tails(graph, plan, order))
            if t != e.record_after]


def strength(plan: Plan, placed: list) -> str:
    """C3 with placed sync points, else C2 with core limits, else C1."""
    if placed:
        return "C3"
    return "C2" if plan.core_limits else "C1"
