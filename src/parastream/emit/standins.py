"""Recording stand-ins for the stream APIs that generated code uses, and checks on them.

Code from :mod:`parastream.emit.codegen` takes its stream API from an injectable object
(``MultiStreamForward(model, api=...)``). :func:`standin` returns one per target that offers
exactly the names the real API offers to that code, records every call in order and runs
nothing asynchronously (CPU tensors are used as they are), so the generated file runs on a
machine without the hardware and its outputs can be compared with the original model:

* ``standin("torchair")``: ``scope.npu_stream_switch(tag, stream_priority=0, ...)``,
  ``scope.npu_wait_tensor(self, dependency)`` (returns an alias of ``self`` — a new tensor
  object on the same memory — so a check can see that the waiting op reads the returned
  tensor, as TorchAir's graph needs), ``scope.limit_core_num(aicore, vectorcore)`` and the
  tagged-event ``ops``;
* ``standin("npugraph_ex")``: ``Stream()``, ``Event()`` (``record``/``wait``/``query``),
  ``stream(s)``, ``current_stream()``, ``npugraph_ex.scope.limit_core_num(aicore, vectorcore)``
  and ``record_stream(t, s)`` (CPU tensors have no ``Tensor.record_stream``);
* ``standin("cuda")``: the same without core limits.

Nothing is patched globally. :func:`record_ops` (a ``TorchFunctionMode``) adds every
``torch.ops`` call to the same record with the stream current at the time, which is what
:func:`check` needs: each planned op ran on its planned stream, every cross-stream
dependency of the graph is ordered by the recorded events (vector clocks over the recorded
issue order), side streams fork from and rejoin the origin stream, tensors crossing streams
were ``record_stream``-ed, TorchAir waits are one per plan event and are read by the op the
plan names, and core limits cover their stream's ops.
"""

from __future__ import annotations

import contextlib
import itertools
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any, Iterator

from .devices import has_core_limit_api

ORIGIN = 0            # the origin stream's id in a record (npugraph_ex / cuda)
ORIGIN_TAG = "default"  # the origin stream in a torchair record


@dataclass
class Call:
    """One recorded call: what it was, on which stream, and its details."""

    kind: str
    stream: Any
    info: dict = field(default_factory=dict)

    def __repr__(self) -> str:
        shown = {k: v for k, v in self.info.items() if k not in ("args", "result", "tensor",
                                                                  "waited", "returned", "dep")}
        return f"Call({self.kind}, stream={self.stream!r}, {shown})"


class Recorder:
    """The calls of one run, in issue order, and the stream / core limit current now."""

    def __init__(self, origin: Any = ORIGIN) -> None:
        self.calls: list[Call] = []
        self.origin = origin
        self._streams: list[Any] = [origin]
        self._limits: list[tuple[int, int]] = []

    @property
    def current(self) -> Any:
        return self._streams[-1]

    @property
    def limit(self) -> tuple[int, int] | None:
        return self._limits[-1] if self._limits else None

    def log(self, kind: str, stream: Any = None, **info: Any) -> Call:
        c = Call(kind, self.current if stream is None else stream, info)
        self.calls.append(c)
        return c

    def count(self, kind: str) -> int:
        return sum(1 for c in self.calls if c.kind == kind)

    @contextlib.contextmanager
    def limit_core_num(self, op_aicore_num: int, op_vectorcore_num: int) -> Iterator[None]:
        """Stands in for ``limit_core_num`` of both APIs: logged, and current inside the block."""
        self.log("limit_enter", aicore=op_aicore_num, vectorcore=op_vectorcore_num)
        self._limits.append((op_aicore_num, op_vectorcore_num))
        try:
            yield
        finally:
            self._limits.pop()
            self.log("limit_exit")

    def summary(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for c in self.calls:
            out[c.kind] = out.get(c.kind, 0) + 1
        return out


# ----------------------------------------------------------------------------- npu / cuda
class StandinStream:
    """A stream that only records: ``sid`` 0 is the origin (default) stream."""

    def __init__(self, recorder: Recorder, sid: int, priority: int = 0) -> None:
        self._rec = recorder
        self.sid = sid
        self.priority = priority

    def wait_event(self, event: "StandinEvent") -> None:
        event.wait(self)

    def wait_stream(self, stream: "StandinStream") -> None:
        self._rec.log("wait_stream", self.sid, other=stream.sid)

    def record_event(self, event: "StandinEvent | None" = None) -> "StandinEvent":
        event = event if event is not None else StandinEvent(self._rec)
        event.record(self)
        return event

    def query(self) -> bool:
        return True

    def synchronize(self) -> None:
        self._rec.log("stream_synchronize", self.sid)

    def __repr__(self) -> str:
        return f"StandinStream({self.sid})"


class StandinEvent:
    """An event that only records; ``wait`` before any ``record`` is recorded as such."""

    _ids = itertools.count()

    def __init__(self, recorder: Recorder, enable_timing: bool = False, **_: Any) -> None:
        self._rec = recorder
        self.eid = next(StandinEvent._ids)
        self.recorded = False
        recorder.log("event_create", event=self.eid)

    def _sid(self, stream: StandinStream | None) -> Any:
        return stream.sid if stream is not None else self._rec.current

    def record(self, stream: StandinStream | None = None) -> None:
        self.recorded = True
        self._rec.log("event_record", self._sid(stream), event=self.eid)

    def wait(self, stream: StandinStream | None = None) -> None:
        self._rec.log("event_wait", self._sid(stream), event=self.eid, recorded=self.recorded)

    def query(self) -> bool:
        return True

    def synchronize(self) -> None:
        self._rec.log("event_synchronize", event=self.eid)

    def elapsed_time(self, end: "StandinEvent") -> float:
        return 0.0

    def __repr__(self) -> str:
        return f"StandinEvent({self.eid})"


class _StreamApi:
    """``torch.npu`` / ``torch.cuda`` as far as generated code uses them."""

    PARASTREAM_STANDIN = True

    def __init__(self, target: str, recorder: Recorder | None = None) -> None:
        self.TARGET = target
        self.recorder = recorder if recorder is not None else Recorder(ORIGIN)
        self._default = StandinStream(self.recorder, ORIGIN)
        self._by_sid = {ORIGIN: self._default}
        self._next = itertools.count(1)
        if target == "npugraph_ex":
            self.npugraph_ex = SimpleNamespace(scope=SimpleNamespace(
                limit_core_num=self.recorder.limit_core_num))

    def Stream(self, device: Any = None, priority: int = 0,  # noqa: N802
               **_: Any) -> StandinStream:
        s = StandinStream(self.recorder, next(self._next), priority)
        self._by_sid[s.sid] = s
        self.recorder.log("stream_create", s.sid, priority=priority)
        return s

    def Event(self, enable_timing: bool = False, **kw: Any) -> StandinEvent:  # noqa: N802
        return StandinEvent(self.recorder, enable_timing, **kw)

    @contextlib.contextmanager
    def stream(self, s: StandinStream | None) -> Iterator[None]:
        if s is None:  # torch.cuda.stream(None) is a no-op
            yield
            return
        rec = self.recorder
        rec.log("stream_enter", s.sid)
        rec._streams.append(s.sid)
        try:
            yield
        finally:
            rec._streams.pop()
            rec.log("stream_exit", s.sid)

    def current_stream(self, device: Any = None) -> StandinStream:
        return self._by_sid[self.recorder.current]

    @contextlib.contextmanager
    def device(self, device: Any = None) -> Iterator[None]:
        """``torch.cuda.device(d)``: streams made inside belong to ``d`` (recorded)."""
        self.recorder.log("device_enter", device=str(device))
        yield

    def default_stream(self, device: Any = None) -> StandinStream:
        return self._default

    def synchronize(self, device: Any = None) -> None:
        self.recorder.log("device_synchronize")

    def record_stream(self, t: Any, s: StandinStream) -> None:
        """Stands in for ``t.record_stream(s)``."""
        self.recorder.log("record_stream", self.recorder.current, tensor=t, to=s.sid)


# ----------------------------------------------------------------------------- torchair
class _TorchairApi:
    """``torchair`` as far as multi-stream code in GE graph mode uses it."""

    PARASTREAM_STANDIN = True
    TARGET = "torchair"

    def __init__(self, recorder: Recorder | None = None) -> None:
        self.recorder = recorder if recorder is not None else Recorder(ORIGIN_TAG)
        self.scope = SimpleNamespace(npu_stream_switch=self._npu_stream_switch,
                                     npu_wait_tensor=self._npu_wait_tensor,
                                     limit_core_num=self.recorder.limit_core_num)
        self.ops = SimpleNamespace(npu_create_tagged_event=self._create_tagged_event,
                                   npu_tagged_event_record=self._tagged_event_record,
                                   npu_tagged_event_wait=self._tagged_event_wait,
                                   npu_record_tagged_stream=self._record_tagged_stream)

    @contextlib.contextmanager
    def _npu_stream_switch(self, stream_tag: str, stream_priority: int = 0,
                           enable_inner_parallel: bool = True) -> Iterator[None]:
        if not isinstance(stream_tag, str):
            raise TypeError(f"npu_stream_switch takes a string tag, not {stream_tag!r}")
        rec = self.recorder
        rec.log("switch_enter", stream_tag, priority=stream_priority)
        rec._streams.append(stream_tag)
        try:
            yield
        finally:
            rec._streams.pop()
            rec.log("switch_exit", stream_tag)

    def _npu_wait_tensor(self, self_: Any, dependency: Any) -> Any:
        import torch

        if not isinstance(self_, torch.Tensor) or not isinstance(dependency, torch.Tensor):
            raise TypeError("npu_wait_tensor(self, dependency) takes two tensors")
        returned = self_.view_as(self_)  # a new tensor object on the same memory
        self.recorder.log("wait_tensor", waited=self_, dep=dependency, returned=returned)
        return returned

    def _create_tagged_event(self, tag: str) -> str:
        self.recorder.log("tagged_event_create", tag=tag)
        return tag

    def _tagged_event_record(self, event: Any) -> None:
        self.recorder.log("tagged_event_record", event=event)

    def _tagged_event_wait(self, event: Any) -> None:
        self.recorder.log("tagged_event_wait", event=event)

    def _record_tagged_stream(self, input: Any, tagged_stream: str) -> None:  # noqa: A002
        self.recorder.log("record_tagged_stream", tensor=input, to=tagged_stream)


def standin(target: str, recorder: Recorder | None = None) -> Any:
    """A recording stand-in for ``target``'s stream API (see the module docstring)."""
    if target == "torchair":
        return _TorchairApi(recorder)
    if target in ("npugraph_ex", "cuda"):
        return _StreamApi(target, recorder)
    raise ValueError(f"unknown target {target!r} (expected torchair, npugraph_ex or cuda)")


# ----------------------------------------------------------------------------- op recording
@contextlib.contextmanager
def record_ops(recorder: Recorder) -> Iterator[None]:
    """Add every ``torch.ops`` call made inside to ``recorder`` with the current stream and
    core limit (a ``TorchFunctionMode``; nothing global is patched)."""
    import torch
    from torch.overrides import TorchFunctionMode

    class _Mode(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            result = func(*args, **(kwargs or {}))
            if isinstance(func, torch._ops.OpOverload):
                recorder.log("op", func=func, args=_tensors((args, kwargs)), result=result,
                             limit=recorder.limit)
            return result

    with _Mode():
        yield


def _tensors(x: Any) -> list[Any]:
    """The tensors inside ``x`` (tuples, lists and dict values), in order."""
    import torch

    from ..graph.tensors import flat_leaves

    return flat_leaves(x, lambda t: isinstance(t, torch.Tensor))


def _storage(t: Any) -> int | None:
    try:
        p = t.untyped_storage().data_ptr()
    except Exception:
        return None
    return p or None


# ----------------------------------------------------------------------------- run and check
@dataclass
class Run:
    """One forward of a generated module on a stand-in."""

    outputs: Any
    recorder: Recorder
    stream_ids: dict[int, Any]     # plan stream -> its id in the record
    long_lived: set[int]           # storages of inputs, weights and buffers


def run(gen: Any, model: Any, inputs: tuple, kwargs: dict | None = None) -> Run:
    """Run the generated class (``gen.CLASS_NAME``) once on the stand-in of ``gen.TARGET``,
    with the multi-stream path on, recording the stream calls and every op."""
    api = standin(gen.TARGET)
    cls = getattr(gen, gen.CLASS_NAME)
    wrapper = cls(model, api=api, enabled=True)
    long_lived = {s for t in list(model.parameters()) + list(model.buffers())
                  + _tensors((inputs, kwargs)) if (s := _storage(t)) is not None}
    with record_ops(api.recorder):
        out = wrapper(*inputs, **(kwargs or {}))
    if gen.TARGET == "torchair":
        ids = {0: ORIGIN_TAG, **{s: f"s{s}" for s in gen.SIDE_STREAMS}}
    else:
        made = [st for per_device in wrapper.streams.values() for st in per_device.items()]
        ids = {0: ORIGIN, **{s: st.sid for s, st in made}}
    return Run(out, api.recorder, ids, long_lived)


#: the calls a generated op-level module may make, per target
_KINDS = {
    "torchair": {"switch_enter", "switch_exit", "wait_tensor", "limit_enter", "limit_exit",
                 "op"},
    "npugraph_ex": {"stream_create", "device_enter", "stream_enter", "stream_exit",
                    "event_create", "event_record", "event_wait", "wait_stream",
                    "record_stream", "limit_enter", "limit_exit", "op"},
    "cuda": {"stream_create", "device_enter", "stream_enter", "stream_exit", "event_create",
             "event_record", "event_wait", "wait_stream", "record_stream", "op"},
}
#: the calls a module-level patch may make, per target (``host_enter``: the patched
#: forward began)
_PATCH_KINDS = {
    "torchair": {"switch_enter", "switch_exit", "wait_tensor", "limit_enter", "limit_exit",
                 "op", "host_enter"},
    "npugraph_ex": {"host_enter", "stream_create", "device_enter", "stream_enter",
                    "stream_exit", "event_create", "event_record", "event_wait",
                    "record_stream", "limit_enter", "limit_exit", "op"},
    "cuda": {"host_enter", "stream_create", "device_enter", "stream_enter", "stream_exit",
             "event_create", "event_record", "event_wait", "record_stream", "op"},
}


def check(r: Run, gen: Any, graph: Any = None) -> list[str]:
    """Problems with a recorded run of generated module ``gen`` (empty = none).

    ``graph`` (the :class:`~parastream.graph.ir.Graph` the plan was made from) adds the
    happens-before check of every cross-stream edge and the placement of stream-0 ops."""
    problems: list[str] = []
    rec = r.recorder
    target = gen.TARGET
    problems += _outside_api(rec, _KINDS[target], target)
    ops = [c for c in rec.calls if c.kind == "op"]
    calls = list(gen.CALLS)
    if len(ops) != len(calls) or any(str(c.info["func"]) != op
                                     for (_, op), c in zip(calls, ops)):
        problems.append(f"the recorded torch.ops calls ({len(ops)}) are not the {len(calls)} "
                        "the module issues")
        return problems
    entry = {name: c for (name, _), c in zip(calls, ops)}
    assignment = dict(gen.ASSIGNMENT)
    plan_ops = set(assignment)
    if graph is not None:
        plan_ops |= {o.name for o in graph.ops}
    sid_of = r.stream_ids
    plan_stream_of_sid = {v: k for k, v in sid_of.items()}
    for name in plan_ops:
        c = entry.get(name)
        if c is None:
            continue
        want = assignment.get(name, 0)
        got = plan_stream_of_sid.get(c.stream, c.stream)
        if got != want:
            problems.append(f"{name} ran on stream {got}, the plan says {want}")
    limits = {int(k): tuple(v) for k, v in dict(gen.CORE_LIMITS).items()}
    if has_core_limit_api(target):
        for name in plan_ops:
            c = entry.get(name)
            s = assignment.get(name, 0)
            if c is not None and s in limits and c.info.get("limit") != limits[s]:
                problems.append(f"{name} on stream {s} ran with core limit "
                                f"{c.info.get('limit')}, the plan says {limits[s]}")
    outputs = _tensors(r.outputs)
    if getattr(gen, "TRACE", "torch.export") != "torch.export":
        # an fx-traced module calls submodules, not torch.ops: only the stream calls are known
        if target == "torchair" and rec.count("wait_tensor") != len(gen.EVENTS):
            problems.append(f"{rec.count('wait_tensor')} npu_wait_tensor calls for "
                            f"{len(gen.EVENTS)} plan events")
        if target != "torchair":
            waits = rec.count("event_wait") - len(gen.SIDE_STREAMS)
            if waits != len(gen.EVENTS):
                problems.append(f"{waits} event waits for {len(gen.EVENTS)} plan events")
        return problems
    if target == "torchair":
        problems += _check_torchair(rec, gen, entry, outputs)
    else:
        real = plan_ops if graph is not None else set(entry)
        problems += _check_streams(r, gen, entry, graph, outputs, real)
    return problems


def _outputs_of(c: Call) -> list[Any]:
    return _tensors(c.info.get("result"))


def _check_torchair(rec: Recorder, gen: Any, entry: dict, outputs: list) -> list[str]:
    problems = []
    waits = [c for c in rec.calls if c.kind == "wait_tensor"]
    if len(waits) != len(gen.EVENTS):
        problems.append(f"{len(waits)} npu_wait_tensor calls for {len(gen.EVENTS)} plan events")
    used: set[int] = set()
    for a, b in gen.EVENTS:
        produced = _outputs_of(entry[a]) if a in entry else []
        if b is None:
            readers = outputs
        else:
            readers = entry[b].info["args"] if b in entry else []
        hit = None
        for i, w in enumerate(waits):
            if i in used:
                continue
            if any(w.info["dep"] is t for t in produced) and \
                    any(w.info["returned"] is t for t in readers):
                hit = i
                break
        if hit is None:
            problems.append(f"event {a} -> {b or 'join'}: no npu_wait_tensor whose dependency is "
                            f"an output of {a} and whose result {b or 'the forward'} reads")
        else:
            used.add(hit)
    return problems


class _Replay:
    """Vector clocks over a recorded run's issue order: each stream's clock, each op's and
    each recorded event's, each stream's first op, and the streams that waited on a fork
    before their first op. An event waited before it is recorded is noted in ``problems``."""

    def __init__(self, problems: list[str], fork_from: Any = None) -> None:
        self.problems = problems
        self.fork_from = fork_from   # the stream a fork event is recorded on; None: any
        self.clock: dict[Any, dict[Any, int]] = {}
        self.ev_clock: dict[int, dict[Any, int]] = {}
        self.ev_stream: dict[int, Any] = {}
        self.op_clock: dict[int, dict[Any, int]] = {}
        self.first_op: dict[Any, int] = {}
        self.forked: set[Any] = set()

    def step(self, pos: int, c: Call) -> dict[Any, int]:
        """Advance over call ``c`` at position ``pos``; returns its stream's clock."""
        s = c.stream
        clk = self.clock.setdefault(s, {})
        if c.kind == "op":
            clk[s] = clk.get(s, 0) + 1
            self.op_clock[id(c)] = dict(clk)
            self.first_op.setdefault(s, pos)
        elif c.kind == "event_record":
            self.ev_clock[c.info["event"]] = dict(clk)
            self.ev_stream[c.info["event"]] = s
        elif c.kind == "event_wait":
            e = c.info["event"]
            if not _join_event(clk, self.ev_clock, e, s, self.problems):
                return clk
            if self.fork_from in (None, self.ev_stream[e]) and s not in self.first_op:
                self.forked.add(s)
        return clk

    def unforked(self, s: Any) -> bool:
        """Whether side stream ``s`` ran ops without first waiting on the origin stream."""
        return s in self.first_op and s not in self.forked


def _check_streams(r: Run, gen: Any, entry: dict, graph: Any, outputs: list,
                   real: set[str]) -> list[str]:
    """npugraph_ex / cuda: forks, joins, every cross-stream edge ordered and
    record_stream-ed, no unordered read, returned side-stream tensors recorded to the
    origin stream, one wait per plan event."""
    problems: list[str] = []
    rec = r.recorder
    origin = r.stream_ids[0]
    sides = [r.stream_ids[s] for s in gen.SIDE_STREAMS]
    replay = _Replay(problems, fork_from=origin)
    rs_calls: list[tuple[int, int | None, Any]] = []   # (position, storage, to stream)
    is_real = {id(c) for name, c in entry.items() if name in real}
    last_real: dict[Any, int] = {}   # clock of each stream's last planned op (views are free)
    for pos, c in enumerate(rec.calls):
        clk = replay.step(pos, c)
        if c.kind == "op" and id(c) in is_real:
            last_real[c.stream] = clk[c.stream]
        elif c.kind == "wait_stream":
            _wait_stream(replay, clk, c, origin)
        elif c.kind == "record_stream":
            rs_calls.append((pos, _storage(c.info["tensor"]), c.info["to"]))
    for s in sides:
        if replay.unforked(s):
            problems.append(f"side stream {s} runs ops without first waiting on the origin "
                            "stream (no fork)")
        last = last_real.get(s, 0)
        if last and replay.clock.get(origin, {}).get(s, 0) < last:
            problems.append(f"side stream {s} is not joined into the origin stream at the end")
    if graph is not None:
        problems += _edge_problems(r, entry, graph, replay.op_clock, rs_calls)
    problems += _unordered_reads(rec, replay.op_clock, r.long_lived)
    problems += _returned_unrecorded(r, outputs, rs_calls, origin)
    # the plan's events: one record after each recorded op, one wait per event
    waits = rec.count("event_wait") - (len(sides) if sides else 0)
    if waits != len(gen.EVENTS):
        problems.append(f"{waits} event waits for {len(gen.EVENTS)} plan events")
    return problems


def _wait_stream(replay: _Replay, clk: dict, c: Call, origin: Any) -> None:
    """``wait_stream``: the waiting stream's clock takes the other's maxima (a fork when
    the other is the origin stream and the waiting one has run nothing yet)."""
    for k, v in replay.clock.setdefault(c.info["other"], {}).items():
        clk[k] = max(clk.get(k, 0), v)
    if c.info["other"] == origin and c.stream not in replay.first_op:
        replay.forked.add(c.stream)


def _edge_problems(r: Run, entry: dict, graph: Any, op_clock: dict[int, dict[Any, int]],
                   rs_calls: list[tuple[int, int | None, Any]]) -> list[str]:
    """Every cross-stream edge of the graph ordered by an event, and every tensor a data
    edge carries across streams record_stream-ed to the reader's stream before the read."""
    problems: list[str] = []
    pos_of = {id(c): i for i, c in enumerate(r.recorder.calls)}
    for e in graph.edges:
        cu, cv = entry.get(e.src), entry.get(e.dst)
        if cu is None or cv is None or cu.stream == cv.stream:
            continue
        need = op_clock[id(cu)][cu.stream]
        if op_clock[id(cv)].get(cu.stream, 0) < need:
            problems.append(f"{e.type} edge {e.src} -> {e.dst} crosses streams "
                            f"{cu.stream} -> {cv.stream} without an event ordering it")
        if e.type != "data":
            continue
        made = {_storage(t) for t in _outputs_of(cu)} - {None} - r.long_lived
        for st in {_storage(t) for t in cv.info["args"]} & made:
            if not any(p < pos_of[id(cv)] and sto == st and to == cv.stream
                       for p, sto, to in rs_calls):
                problems.append(f"{e.src} -> {e.dst}: a tensor made on stream {cu.stream} "
                                f"and read on stream {cv.stream} is not record_stream-ed")
    return problems


def _returned_unrecorded(r: Run, outputs: list, rs_calls: list[tuple[int, int | None, Any]],
                         origin: Any) -> list[str]:
    """A returned tensor a side stream allocated and nothing record_stream-ed onto the
    origin stream."""
    problems = []
    producers = _allocating_streams(r.recorder)
    for t in outputs:
        st = _storage(t)
        if st is None or st in r.long_lived:
            continue
        if producers.get(st, origin) != origin and not any(
                sto == st and to == origin for _, sto, to in rs_calls):
            problems.append("a returned tensor made on a side stream is not record_stream-ed "
                            "onto the origin stream")
    return problems


def _allocating_streams(rec: Recorder) -> dict[int, Any]:
    """Storage -> the stream whose op allocated it: an op's output on memory none of its
    inputs has (an in-place write or a view of an input is not an allocation). The
    caching allocator ties a block to its allocating stream, so that is the stream a
    tensor returned or read elsewhere must be ``record_stream``-ed against."""
    made: dict[int, Any] = {}
    for c in rec.calls:
        if c.kind != "op":
            continue
        ins = {_storage(t) for t in c.info["args"]} - {None}
        for t in _outputs_of(c):
            st = _storage(t)
            if st is not None and st not in ins:
                made[st] = c.stream
    return made


def _join_event(clk: dict, ev_clock: dict, event: Any, stream: Any, problems: list) -> bool:
    """A wait on ``event``: the waiting stream's vector clock takes the recorded one's
    maxima. False (with a problem noted) when the event was never recorded."""
    if event not in ev_clock:
        problems.append(f"stream {stream} waits on event {event} before it is recorded")
        return False
    for k, v in ev_clock[event].items():
        clk[k] = max(clk.get(k, 0), v)
    return True


def _unordered_reads(rec: Recorder, op_clock: dict[int, dict[Any, int]],
                     long_lived: set[int]) -> list[str]:
    """Every recorded op call, planned or not, that reads memory another stream's op
    wrote with no event ordering the two (vector clocks ``op_clock`` of the issue order).
    The graph's edges cover the plan's ops only; a node the importer folds can still launch
    a kernel (``lift_fresh_copy`` of a constant made in forward, issued inside an open
    side-stream block and read on stream 0, is caught here and by no edge).
    Views write nothing (their result aliases an input of a call not named ``*_``);
    inputs, weights and buffers (``long_lived``) were written before the call."""
    problems: list[str] = []
    writer: dict[int, tuple[Any, int, str]] = {}  # storage -> (stream, clock, op)
    for c in rec.calls:
        if c.kind != "op":
            continue
        s = c.stream
        clk = op_clock[id(c)]
        ins = {_storage(t) for t in c.info["args"]} - {None}  # logged flat by record_ops
        for st in ins - long_lived:
            if st in writer:
                ws, wclock, wname = writer[st]
                if ws != s and clk.get(ws, 0) < wclock:
                    problems.append(f"{c.info['func']} on stream {s} reads what {wname} wrote "
                                    f"on stream {ws} with no event after it")
        func = str(c.info["func"])
        # an op that writes an argument (in-place, out=, a mutable custom op) says so in its
        # schema (record_ops logs OpOverloads only, which all have one)
        in_place = c.info["func"]._schema.is_mutable
        for t in _outputs_of(c):
            st = _storage(t)
            if st is None or (st in ins and not in_place):
                continue
            writer[st] = (s, clk[s], func)
    return problems


# ----------------------------------------------------------------------------- module level
@contextlib.contextmanager
def record_dispatch(recorder: Recorder) -> Iterator[None]:
    """Add every aten op run inside to ``recorder`` with the current stream (a
    ``TorchDispatchMode``: a module-level patch runs the user's modules, whose ops only the
    dispatcher sees as ``OpOverload`` calls)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class _Mode(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            result = func(*args, **(kwargs or {}))
            recorder.log("op", func=func, args=_tensors((args, kwargs)), result=result,
                         limit=recorder.limit)
            return result

    with _Mode():
        yield


@dataclass
class PatchRun:
    """One forward of a module-level patch on a stand-in."""

    outputs: Any
    recorder: Recorder
    units: list[tuple[str, Any]]    # (submodule path, stream current when it was called)
    long_lived: set[int]


def run_patch(gen: Any, model: Any, inputs: tuple, kwargs: dict | None = None) -> PatchRun:
    """Patch ``model`` with module-level file ``gen`` (its ``patch(model, api)``) on the
    stand-in of ``gen.TARGET`` and run it once, recording stream calls, every aten op and
    the stream each submodule of the patched module was called on."""
    import torch

    api = standin(gen.TARGET)
    gen.patch(model, api)
    hosts = [m for m in model.modules() if getattr(m, "api", None) is api]
    units: list[tuple[str, Any]] = []
    hooks = []
    for host in hosts:
        def enter(_m: Any, _a: Any) -> None:  # a pre-hook's return value replaces the args
            api.recorder.log("host_enter")
        hooks.append(host.register_forward_pre_hook(enter))
        for name, sub in host.named_modules():
            if not name:
                continue

            def pre(_m: Any, _a: Any, name: str = name) -> None:
                units.append((name, api.recorder.current))
            hooks.append(sub.register_forward_pre_hook(pre))
    long_lived = {s for t in list(model.parameters()) + list(model.buffers())
                  + _tensors((inputs, kwargs)) if (s := _storage(t)) is not None}
    try:
        with torch.no_grad(), record_dispatch(api.recorder):
            out = model(*inputs, **(kwargs or {}))
    finally:
        for h in hooks:
            h.remove()
    return PatchRun(out, api.recorder, units, long_lived)


def check_patch(r: PatchRun, gen: Any, expected_streams: dict[str, int] | None = None
                ) -> list[str]:
    """Problems with a recorded run of module-level patch ``gen`` (empty = none): calls
    outside the target's API; a submodule called on another stream than
    ``expected_streams`` (``{child name: plan stream}``) says; for npugraph_ex / cuda, an op
    reading memory another stream's op wrote with no event between them (vector clocks
    over the recorded issue order), a tensor read on a stream other than the one that
    allocated it without ``record_stream`` to the reader first, a side stream without a
    fork or not joined back; a run in which no module was patched at all."""
    rec = r.recorder
    target = gen.TARGET
    problems = _outside_api(rec, _PATCH_KINDS[target], target)
    if not rec.count("host_enter"):
        problems.append("no module of the model ran the patched forward: patch(model) "
                        "found no instance of the patched class")
    problems += _unit_streams(r, gen, expected_streams or {})
    if target == "torchair":
        return problems
    replay = _Replay(problems)
    allocations = _Allocations(r.long_lived, problems)
    for pos, c in enumerate(rec.calls):
        replay.step(pos, c)
        allocations.step(c)
    problems += _unordered_reads(rec, replay.op_clock, r.long_lived)
    for s in [s for s in replay.clock if s != ORIGIN]:
        if replay.unforked(s):
            problems.append(f"side stream {s} runs ops without first waiting on the origin "
                            "stream (no fork)")
        if replay.clock.get(ORIGIN, {}).get(s, 0) < replay.clock[s].get(s, 0):
            problems.append(f"side stream {s} is not joined into the origin stream at the end")
    return problems


def _outside_api(rec: Recorder, allowed: set[str], target: str) -> list[str]:
    """A problem naming the recorded calls that are not among ``allowed``, if any."""
    odd = sorted({c.kind for c in rec.calls} - allowed)
    return [f"calls outside the {target} API: {', '.join(odd)}"] if odd else []


def _unit_streams(r: PatchRun, gen: Any, expected_streams: dict[str, int]) -> list[str]:
    """A submodule of the patched module called on another stream than the plan's."""
    target = gen.TARGET
    ids = {ORIGIN_TAG: 0} if target == "torchair" else {ORIGIN: 0}
    for k, s in enumerate(gen.SIDE_STREAMS):
        ids[f"s{s}" if target == "torchair" else k + 1] = s
    problems = []
    for name, where in r.units:
        want = expected_streams.get(name)
        if want is not None and ids.get(where, where) != want:
            problems.append(f"{name} ran on stream {ids.get(where, where)}, the plan says "
                            f"{want}")
    return problems


class _Allocations:
    """The stream that allocated each storage and the record_stream calls seen so far, over
    a recorded patch run: a read on another stream than the allocating one needs a
    record_stream to the reader first. The caller's tensors (made before the patched
    forward began) stay referenced until it returns, after its join: their memory is not
    reused before the side streams are done."""

    def __init__(self, long_lived: set[int], problems: list[str]) -> None:
        self.long_lived = long_lived
        self.problems = problems
        self.made: dict[int, Any] = {}      # storage -> allocating stream
        self.recorded: set[tuple[int, Any]] = set()
        self.callers: set[int] = set()
        self.entered = False

    def step(self, c: Call) -> None:
        """Take call ``c`` into account."""
        if c.kind == "host_enter" and not self.entered:
            self.entered = True
            self.callers = set(self.made)
        if c.kind == "op":
            self.op(c)
        elif c.kind == "record_stream":
            self.recorded.add((_storage(c.info["tensor"]), c.info["to"]))

    def op(self, c: Call) -> None:
        """An op's reads checked against their allocating streams; its new outputs noted."""
        st = c.stream
        ins = {_storage(t) for t in c.info["args"]} - {None}
        for x in ins - self.long_lived - self.callers:
            home = self.made.get(x, st)
            if home != st and (x, st) not in self.recorded:
                self.problems.append(f"{c.info['func']} on stream {st} reads a tensor "
                                     f"allocated on stream {home} that was not "
                                     "record_stream-ed to it")
                self.recorded.add((x, st))
        for t in _outputs_of(c):
            x = _storage(t)
            if x is not None and x not in ins:
                self.made[x] = st


# ----------------------------------------------------------------------------- torch.compile
def torchair_graph_standin() -> Any:
    """A stand-in for ``torchair`` whose scope API mirrors the real definitions closely
    enough for ``torch.compile(fullgraph=True)`` to trace it as TorchAir's does (see
    :mod:`parastream.emit.graph_standin`); it records nothing: the traced graph is the
    record."""
    from .graph_standin import make

    return make()


def outputs_equal(a: Any, b: Any) -> bool:
    """Bitwise equality of two (nested) outputs, NaN equal to NaN in the same place: the
    executor's own comparison."""
    from ..runtime.executor import compare

    return compare(a, b, exact=True).ok


def self_check(gen: Any) -> int:
    """``python generated.py``: rebuild the model, run the original forward and the generated
    one on the stand-ins, check the recorded calls against the plan and compare the outputs
    bitwise. Prints a report; returns 0 when all holds."""
    import copy

    from ..graph.torch_import import import_module, no_mha_fastpath

    module, inputs = gen.load_model()
    graph = import_module(module, inputs, name=str(gen.SOURCE.get("model", "model")))
    import torch

    # each forward gets its own copy of the model and of the inputs (a model may write
    # either in place), and runs without autograd as inference does (out= ops refuse it)
    with torch.no_grad():
        rng = torch.get_rng_state()  # both forwards draw the same random numbers
        with no_mha_fastpath():  # the generated forward's ops are the unfused ones
            expected = copy.deepcopy(module)(*copy.deepcopy(inputs))
        torch.set_rng_state(rng)
        r = run(gen, copy.deepcopy(module), copy.deepcopy(inputs))
    problems = check(r, gen, graph)
    # a model built on the meta device (the zoo at 7b) has shapes and no values: its calls
    # are checked, its outputs cannot be (comparing them raised NotImplementedError)
    meta = any(t.is_meta for t in _tensors((expected, r.outputs)))
    same = meta or outputs_equal(expected, r.outputs)
    print(f"{gen.TARGET} plan {gen.PLAN!r}: {len(gen.CALLS)} ops, streams "
          f"{(0,) + tuple(gen.SIDE_STREAMS)}, {len(gen.EVENTS)} events")
    counts = sorted(r.recorder.summary().items())
    print("recorded calls: " + ", ".join(f"{k} {v}" for k, v in counts))
    if meta:
        print("outputs: not compared (the model is on the meta device: shapes, no values; "
              "regenerate it at a smaller scale to compare them)")
    else:
        print("outputs: " + ("bitwise equal to the original forward" if same else
                             "DIFFER from the original forward"))
    for p in problems:
        print("problem: " + p)
    if not problems:
        print("stream calls: consistent with the plan" + (
            "; the meta device has no memory, so the checks by storage (record_stream, "
            "reads across streams) had nothing to compare" if meta and gen.TARGET != "torchair"
            else ""))
    return 0 if same and not problems else 1


__all__ = ["Call", "PatchRun", "Recorder", "Run", "StandinEvent", "StandinStream", "check",
           "check_patch", "outputs_equal", "record_dispatch", "record_ops", "run", "run_patch",
           "self_check", "standin", "torchair_graph_standin"]
