"""torch_npu ``trace_view.json`` reader (``ASCEND_PROFILER_OUTPUT/trace_view.json``).

The file is a Chrome trace as a top-level JSON *list* (a ``{"traceEvents": [...]}``
object is accepted too). Device work lives in the process named ``Ascend Hardware``: one
thread per stream (``tid`` = stream id, ``thread_name`` "Stream 2"), tasks are ``ph: "X"``
events whose ``args["Task Type"]`` says what ran (AI_CORE, AI_VECTOR_CORE, MIX_AIC,
MIX_AIV, AI_CPU, SDMA_SQE, EVENT_WAIT_SQE, EVENT_RECORD_SQE, ...). ``ts`` is a string of
epoch microseconds with nanosecond decimals (a number in some exports); it is parsed
exactly.

What becomes what:

* ``EVENT_WAIT*`` tasks are waits on their stream, not ops; ``EVENT_RECORD*``,
  ``NOTIFY_RECORD*`` and ``PLACE_HOLDER*`` tasks are markers and are dropped;
* communication is what the file's own structure says it is, never the busiest stream.
  The ``HCCL`` (or ``Communication``) process holds whole collectives (``hcom_*``) on
  threads whose name contains "Communication", and, from profiler level Level1 on, their
  small tasks on ``Plane`` threads, each naming the hardware ``stream id`` and ``task id``
  it ran as. A task of the ``Ascend Hardware`` process is one of HCCL's small tasks when
  its ``connection_id`` is a whole collective's (every level, Level0 included), when its
  (stream, ``Task Id``) is one a Plane task names, when its task type is one only HCCL
  issues (``Notify Wait``, ``Write Value``, ``Reduce Inline``, ``RDMA Send``, ...; see
  :mod:`.hccl`), or when it runs on an HCCL stream (one where such tasks are at least half
  of the work tasks; waits and markers there stay waits and markers). Thus the ``SDMA``
  copies and ``Notify Wait`` spans on the HCCL stream are communication, not compute;
* whole collectives go to the :data:`~parastream.timeline.model.COMM_LANE` lane as
  :data:`KIND_COMM`, like the ``N/A``-stream rows of ``kernel_details.csv`` and the
  ``COMMUNICATION_OP`` rows of the database; HCCL's small tasks (Plane threads and
  hardware tasks) are then folded into them (counted in ``meta["ascend_hccl_tasks_folded"]``)
  so communication is not counted twice. Without whole collectives, the Plane tasks are
  the communication (on the comm lane); without those either, the hardware small tasks of
  one collective (same ``connection_id``, or overlapping on one stream) are merged into
  one :data:`KIND_COMM` op spanning them on their own stream, because they overlap each
  other by design and are not corrupt compute;
* the whole collectives also fill ``Timeline.collectives`` (``key`` the op name,
  ``nbytes`` from their ``count`` and ``data_type`` args);
* CPU-side processes are ignored; ``Overlap Analysis`` slice totals (Computing,
  Communication, Communication(Not Overlapped), Free) are kept in
  ``meta["ascend_overlap_analysis"]`` (nanoseconds), and Ascend's comm/comp overlap they
  imply in the flat keys of :mod:`.step_trace` (``ascend_overlapped_pct``, ...), with a
  warning when parastream's figure differs by more than 2 points.
"""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import msgspec
import numpy as np
import pyarrow as pa

from ...errors import InputError
from ..model import (
    COMM_LANE, KIND_COMM, KIND_COMPUTE, KIND_MEMCPY, KIND_MEMSET, Interner, Timeline,
    core_code, make_timeline,
)
from ..nogc import gc_paused
from ..timeparse import us_column_to_ns
from . import read_all
from .hccl import (hccl_nbytes, is_collective_name, is_hccl_task_type, merge_collectives,
                   timeline_collectives)
from .step_trace import attach, from_overlap_analysis

FORMAT = "ascend_trace_view"

HARDWARE_PROCESS = "Ascend Hardware"
OVERLAP_PROCESS = "Overlap Analysis"
_COMM_PROCESSES = ("HCCL", "COMMUNICATION")
_MARKERS = ("EVENT_RECORD", "NOTIFY_RECORD", "PLACE_HOLDER")
# Task Type -> model.CORES name, where they differ
_CORE_ALIASES = {"AIV_SQE": "AI_VECTOR_CORE", "AIC_SQE": "AI_CORE", "AI_CORE_SQE": "AI_CORE",
                 "AI_CPU_SQE": "AI_CPU", "SDMA_SQE": "DMA", "PCIE_DMA_SQE": "DMA",
                 "SDMA": "DMA", "COMMUNICATION": "HCCL"}


class _Args(msgspec.Struct, gc=False):
    """The few ``args`` keys this reader uses; msgspec skips the rest while decoding."""

    name: Any = None
    task_type: Any = msgspec.field(default=None, name="Task Type")
    stream_id: Any = msgspec.field(default=None, name="Stream Id")
    block_dim: Any = msgspec.field(default=None, name="Block Dim")
    block_num: Any = msgspec.field(default=None, name="Block Num")
    mix_block_dim: Any = msgspec.field(default=None, name="Mix Block Dim")
    mix_block_num: Any = msgspec.field(default=None, name="Mix Block Num")
    op_type: Any = msgspec.field(default=None, name="Op Type")
    # links between a hardware task and the collective it belongs to
    connection_id: Any = None
    task_id: Any = msgspec.field(default=None, name="Task Id")
    plane_stream: Any = msgspec.field(default=None, name="stream id")
    plane_task: Any = msgspec.field(default=None, name="task id")
    # a whole collective's message: count elements of data_type
    data_type: Any = None
    count: Any = None


class _Event(msgspec.Struct, gc=False):
    ph: Any = None
    name: Any = ""
    # ids are numbers or names in Chrome traces; anything else (an object, a list) is
    # no process or thread id and is refused at decoding, not met later as a dict key
    pid: int | float | str | None = None
    tid: int | float | str | None = None
    ts: Any = None
    dur: Any = None
    args: _Args | None = None


class _Wrapped(msgspec.Struct):
    traceEvents: list[_Event] = []


class _LooseEvent(_Event):
    args: Any = None


class _LooseWrapped(msgspec.Struct):
    traceEvents: list[_LooseEvent] = []


# float literals (numeric ``ts``/``dur`` in some exports) arrive as their text, so
# epoch microseconds with ns decimals are parsed exactly, not through a float64
_DECODER = msgspec.json.Decoder(list[_Event] | _Wrapped, float_hook=str)
# for files whose args are not all objects (or hold odd types): decoded generically
_LOOSE = msgspec.json.Decoder(list[_LooseEvent] | _LooseWrapped, float_hook=str)
_NO_ARGS = _Args()


def sniff(head: bytes) -> bool:
    """A JSON list of Chrome trace events (the torch_npu trace_view shape)."""
    h = head.lstrip(b"\xef\xbb\xbf \t\r\n")
    return h[:1] == b"[" and b'"ph"' in h


def _decode(path: str, data: bytes) -> list:
    try:
        try:
            decoded = _DECODER.decode(data)
        except msgspec.ValidationError:
            decoded = _LOOSE.decode(data)
    except msgspec.ValidationError as exc:  # (a subclass of DecodeError)
        raise InputError(path, f"not a trace_view event list: {exc}") from None
    except msgspec.DecodeError as exc:
        raise InputError(path, f"invalid JSON: {exc}") from None
    return decoded.traceEvents if isinstance(decoded, (_Wrapped, _LooseWrapped)) else decoded


def _args(ev) -> _Args:
    a = ev.args
    if isinstance(a, _Args):
        return a
    if not isinstance(a, dict):
        return _NO_ARGS
    return _Args(name=a.get("name"), task_type=a.get("Task Type"),
                 stream_id=a.get("Stream Id", a.get("Stream ID")),
                 block_dim=a.get("Block Dim"), block_num=a.get("Block Num"),
                 mix_block_dim=a.get("Mix Block Dim"), mix_block_num=a.get("Mix Block Num"),
                 op_type=a.get("Op Type", a.get("OP Type")),
                 connection_id=a.get("connection_id"), task_id=a.get("Task Id"),
                 plane_stream=a.get("stream id"), plane_task=a.get("task id"),
                 data_type=a.get("data_type"), count=a.get("count"))


#: block dims are int32 columns; a larger one (a corrupt field) is clipped, as the CSV
#: and database readers do, instead of overflowing
_INT32_MAX = 2**31 - 1


def _int(value: Any) -> int:
    if value is None:
        return -1
    try:
        return max(-1, min(int(str(value).strip()), _INT32_MAX))
    except (TypeError, ValueError):
        return -1


def _stream_label(tid: Any, thread_name: str | None, args: _Args) -> str:
    if isinstance(tid, int):
        return str(tid)
    sid = args.stream_id
    if sid is not None and str(sid).strip().lstrip("-").isdigit():
        return str(sid).strip()
    text = str(thread_name if thread_name is not None else tid).strip()
    if text.lower().startswith("stream "):
        text = text[7:].strip()
    return text


def _kind_of(name: str, task_type: str, op_type: str) -> int:
    text = f"{name} {task_type} {op_type}".upper()
    if "MEMSET" in text:
        return KIND_MEMSET
    if "SDMA" in task_type or "PCIE_DMA" in task_type or "MEMCPY" in text or "MEMCOPY" in text:
        return KIND_MEMCPY
    return KIND_COMPUTE


def _classify(name: str, a: _Args, hccl: int, linked: bool = False) -> tuple:
    """(role, name, op type, kind, core) of a hardware task; role op/hw_comm/wait/marker.

    ``linked``: the file ties the task to a collective (connection id, Plane task)."""
    raw_type = str(a.task_type or "").strip()
    task_type = raw_type.upper()
    if "EVENT_WAIT" in task_type:
        return ("wait", name, "", 0, 0)
    op_type = str(a.op_type or "")
    core = core_code(_CORE_ALIASES.get(task_type, task_type))
    if linked or is_hccl_task_type(raw_type) or is_collective_name(name):
        return ("hw_comm", name, op_type or raw_type, KIND_COMM, core or hccl)
    if task_type.startswith(_MARKERS):
        return ("marker", name, "", 0, 0)
    return ("op", name, op_type, _kind_of(name, task_type, op_type), core)


def _key(value: Any) -> str | None:
    """An id as text (ints and their float or string spellings alike), None when absent."""
    if value is None or isinstance(value, bool):
        return None
    text = str(value).strip()
    if text.endswith(".0"):
        text = text[:-2]
    return text or None


def _comm_links(events: list, comm_pids: set, comm_op_threads: set
                ) -> tuple[set[str], set[tuple[str, str]]]:
    """What the HCCL process says about the hardware tasks of its collectives: the
    connection ids of the whole collectives, and the (stream id, task id) of every Plane
    task (the hardware task it ran as)."""
    conns: set[str] = set()
    planes: set[tuple[str, str]] = set()
    for ev in events:
        if ev.ph != "X" or ev.pid not in comm_pids:
            continue
        a = ev.args if type(ev.args) is _Args else _args(ev)
        if (ev.pid, ev.tid) in comm_op_threads:
            c = _key(a.connection_id)
            if c is not None:
                conns.add(c)
        else:
            s, t = _key(a.plane_stream), _key(a.plane_task)
            if s is not None and t is not None:
                planes.add((s, t))
    return conns, planes


def _text(v: Any) -> str | None:
    """A ts/dur value as decimal text (floats already are, thanks to float_hook)."""
    if v is None or isinstance(v, bool):
        return None
    return v if isinstance(v, str) else str(v)


def _intern(values: list[str]) -> tuple[np.ndarray, list[str]]:
    it = Interner()
    return it.codes(values), it.values


@gc_paused()  # millions of small objects
def read(path: str | os.PathLike[str]) -> Timeline:
    """Read a torch_npu ``trace_view.json`` (plain or gzip) into a :class:`Timeline`."""
    path = os.fspath(path)
    events = _decode(path, read_all(path))
    procs = _processes(events)
    rows = _collect_rows(events, procs)
    start, ok_s = us_column_to_ns(pa.array(rows.ts, pa.string()))
    length, ok_d = us_column_to_ns(pa.array(rows.dur, pa.string()))
    good = ok_s & ok_d & (length >= 0)
    warnings: list[str] = []
    meta: dict = {}
    keep_pid = _busiest_hardware(procs.hw, rows.x_count, warnings)
    _claim_hccl_streams(rows.rows, _HCCL)
    take = _take(rows.rows, good, length, keep_pid)
    _refuse_empty(path, take, procs.hw)
    if take.bad_times:
        warnings.append(f"skipped {take.bad_times} task(s) with an unparseable or negative time")
    if take.folded:
        meta["ascend_hccl_tasks_folded"] = take.folded
    if rows.markers:
        meta["ascend_marker_tasks"] = rows.markers
    if take.overlap:
        meta["ascend_overlap_analysis"] = take.overlap
    ops, waits, (streams, names, types) = _columns(rows.rows, take, start, length)
    ops = _merge_hw_comm(ops, rows.rows, take.op, names, types, meta)
    tl = make_timeline(path, FORMAT, streams, names, types, ops, waits, warnings=warnings,
                       meta=meta)
    tl.collectives = timeline_collectives(tl, rows.sizes)
    if take.overlap:
        st = from_overlap_analysis(path, take.overlap)
        if st is not None:
            attach(tl, st)
    return tl


#: core code of HCCL's tasks
_HCCL = core_code("HCCL")


@dataclass
class _Processes:
    """What the metadata events say: each thread's name, which pids are the hardware,
    HCCL and overlap-analysis processes, HCCL's threads of whole collectives, and what
    the HCCL process says about the hardware tasks of its collectives (see
    :func:`_comm_links`)."""

    thread: dict[tuple[Any, Any], str]
    hw: set
    comm: set
    overlap: set
    comm_op_threads: set
    comm_with_op_threads: set
    conns: set[str]
    planes: set[tuple[str, str]]


def _processes(events: list) -> _Processes:
    """The process and thread names of the ``M`` events, and what they make of each pid."""
    proc: dict[Any, str] = {}
    thread: dict[tuple[Any, Any], str] = {}
    for ev in events:
        if ev.ph == "M" and ev.name in ("process_name", "thread_name"):
            label = _args(ev).name
            if label is None:
                continue
            if ev.name == "process_name":
                proc[ev.pid] = str(label)
            else:
                thread[(ev.pid, ev.tid)] = str(label)
    comm = {p for p, n in proc.items()
            if n.strip().upper() in _COMM_PROCESSES or "HCCL" in n.upper()}
    comm_op_threads = {key for key, n in thread.items()
                       if key[0] in comm and "communication" in n.lower()}
    conns, planes = _comm_links(events, comm, comm_op_threads)
    return _Processes(thread=thread,
                      hw={p for p, n in proc.items() if n.strip() == HARDWARE_PROCESS},
                      comm=comm,
                      overlap={p for p, n in proc.items() if n.strip() == OVERLAP_PROCESS},
                      comm_op_threads=comm_op_threads,
                      comm_with_op_threads={key[0] for key in comm_op_threads},
                      conns=conns, planes=planes)


@dataclass
class _Rows:
    """One row per kept event, (role, pid, lane, name, type, kind, core, block, mix, conn,
    task type), with its ts and dur still as text (one vectorised exact parse follows);
    ``x_count`` counts the task events of each hardware pid, ``markers`` those dropped as
    markers; ``sizes``: each whole collective's message size in bytes, by name."""

    rows: list[tuple]
    ts: list[str | None]
    dur: list[str | None]
    x_count: Counter
    markers: int
    sizes: dict = field(default_factory=dict)


def _collect_rows(events: list, procs: _Processes) -> _Rows:
    """The rows of the hardware tasks, whole collectives and overlap-analysis slices, in
    file order; tasks are classified once per distinct (name, task type, op type, linked)."""
    out = _Rows([], [], [], Counter(), 0)
    rows, ts, dur, x_count = out.rows, out.ts, out.dur, out.x_count
    hw_pids, comm_pids, overlap_pids = procs.hw, procs.comm, procs.overlap
    comm_conns, plane_tasks, thread = procs.conns, procs.planes, procs.thread
    hccl = _HCCL
    lanes: dict[tuple, str] = {}
    classes: dict[tuple, tuple] = {}  # (name, task type, op type[, linked]) -> _classify(...)
    for ev in events:
        if ev.ph != "X":
            continue
        pid = ev.pid
        if pid in hw_pids:
            x_count[pid] += 1
            a = ev.args if type(ev.args) is _Args else _args(ev)
            key = (pid, ev.tid)
            lane = lanes.get(key)
            if lane is None:
                lane = lanes[key] = _stream_label(ev.tid, thread.get(key), a)
            nm = ev.name if type(ev.name) is str else str(ev.name)
            ck = (nm, a.task_type, a.op_type)
            conn = a.connection_id
            if ((comm_conns and _key(conn) in comm_conns)
                    or (plane_tasks and (lane, _key(a.task_id)) in plane_tasks)):
                ck = (nm, a.task_type, a.op_type, True)
            try:
                c = classes.get(ck)
            except TypeError:  # odd (unhashable) arg values
                ck = (nm, str(a.task_type), str(a.op_type)) + ck[3:]
                c = classes.get(ck)
            if c is None:
                c = classes[ck] = _classify(nm, a, hccl, linked=len(ck) > 3)
            if c[0] == "marker":
                out.markers += 1
                continue
            block = _int(a.block_dim if a.block_dim is not None else a.block_num)
            mix = _int(a.mix_block_dim if a.mix_block_dim is not None else a.mix_block_num)
            rows.append((c[0], pid, lane, c[1], c[2], c[3], c[4], block, mix, conn,
                         a.task_type))
        elif pid in comm_pids:
            if pid in procs.comm_with_op_threads and (pid, ev.tid) not in procs.comm_op_threads:
                continue  # a Plane thread: HCCL's small tasks inside the whole ops
            a = _args(ev)
            rows.append(("comm", pid, COMM_LANE, str(ev.name), str(a.op_type or ""),
                         KIND_COMM, hccl, -1, -1, None, None))
            if a.count is not None:
                out.sizes[str(ev.name)] = hccl_nbytes(a.data_type, a.count)
        elif pid in overlap_pids:
            rows.append(("overlap", pid, "", str(ev.name), "", 0, 0, -1, -1, None, None))
        else:
            continue
        t = ev.ts
        ts.append(t if type(t) is str else _text(t))
        d = ev.dur
        dur.append(d if type(d) is str else ("0" if d is None else _text(d)))
    return out


def _busiest_hardware(hw_pids: set, x_count: Counter, warnings: list[str]) -> Any:
    """A capture is one device: with several hardware processes, the pid with the most
    tasks (named in a warning); None when there is one."""
    if len(hw_pids) <= 1 or not x_count:
        return None
    keep_pid = max(x_count, key=lambda p: (x_count[p], str(p)))
    dropped = [f"pid {p}" for p in sorted(hw_pids, key=str) if p != keep_pid]
    warnings.append(f"several '{HARDWARE_PROCESS}' processes; kept pid {keep_pid}, "
                    f"skipped {', '.join(dropped)}")
    return keep_pid


@dataclass
class _Taken:
    """Which rows become ops and waits (row indices, file order), the overlap-analysis
    totals (ns per slice name), rows skipped for their times, and HCCL hardware tasks
    folded into whole collectives."""

    op: list[int] = field(default_factory=list)
    wait: list[int] = field(default_factory=list)
    overlap: dict[str, int] = field(default_factory=dict)
    bad_times: int = 0
    folded: int = 0


def _take(rows: list[tuple], good: np.ndarray, length: np.ndarray, keep_pid: Any) -> _Taken:
    """Sort the rows into ops, waits and overlap slices: only the kept hardware pid's
    tasks; HCCL's hardware tasks folded away when the file has whole collectives."""
    take = _Taken()
    has_comm_ops = any(r[0] == "comm" for r in rows)
    for i, r in enumerate(rows):
        role = r[0]
        if role == "overlap":
            if good[i]:
                take.overlap[r[3]] = take.overlap.get(r[3], 0) + int(length[i])
            continue
        if keep_pid is not None and role != "comm" and r[1] != keep_pid:
            continue
        if role == "hw_comm" and has_comm_ops:
            take.folded += 1
            continue
        if not good[i]:
            take.bad_times += 1
            continue
        (take.wait if role == "wait" else take.op).append(i)
    return take


def _refuse_empty(path: str, take: _Taken, hw_pids: set) -> None:
    """InputError when no row is an op: waits alone, or no hardware tasks at all."""
    if take.op:
        return
    if take.wait:
        # waits alone show no work to overlap (the Kineto and CSV readers refuse this too)
        raise InputError(path, f"only wait tasks ({len(take.wait)}), no compute, copy or "
                               f"communication task: nothing to analyse")
    where = (f"no task events in the '{HARDWARE_PROCESS}' process" if hw_pids
             else f"no '{HARDWARE_PROCESS}' process")
    raise InputError(path, f"no device tasks ({where}; is this a CPU-only trace?)")


def _columns(rows: list[tuple], take: _Taken, start: np.ndarray, length: np.ndarray
             ) -> tuple[dict, dict, tuple[list[str], list[str], list[str]]]:
    """The op and wait columns of the taken rows, and the stream, name and type texts
    their codes index (lanes and names of ops first, then of waits)."""
    take_op, take_wait = take.op, take.wait
    oi = np.array(take_op, np.int64)
    wi = np.array(take_wait, np.int64)
    lane_codes, streams = _intern([rows[i][2] for i in take_op] + [rows[i][2] for i in take_wait])
    name_codes, names = _intern([rows[i][3] for i in take_op] + [rows[i][3] for i in take_wait])
    type_codes, types = _intern([rows[i][4] for i in take_op])
    n_op = len(take_op)

    def col(k: int, dtype) -> np.ndarray:
        return np.fromiter((rows[i][k] for i in take_op), dtype, n_op)

    ops = dict(stream=lane_codes[:n_op], name=name_codes[:n_op], type=type_codes,
               start_ns=start[oi], end_ns=start[oi] + length[oi], kind=col(5, np.int8),
               core=col(6, np.int8), block_dim=col(7, np.int32), mix_block_dim=col(8, np.int32),
               step=np.full(n_op, -1, np.int32))
    waits = dict(wait_stream=lane_codes[n_op:], wait_on=np.full(len(wi), -1, np.int32),
                 wait_start_ns=start[wi], wait_end_ns=start[wi] + length[wi],
                 wait_name=name_codes[n_op:])
    return ops, waits, (streams, names, types)


def _merge_hw_comm(ops: dict, rows: list[tuple], take_op: list[int], names: list[str],
                   types: list[str], meta: dict) -> dict:
    """Without whole collectives, HCCL's hardware tasks of one collective (same
    connection id, else overlapping on one stream) merged into one op."""
    n_op = len(take_op)
    hw = np.fromiter((rows[i][0] == "hw_comm" for i in take_op), bool, n_op)
    if hw.sum() <= 1:
        return ops
    conn_codes, conn_txt = _intern([_key(rows[i][9]) or "" if hw[k] else ""
                                    for k, i in enumerate(take_op)])
    key = np.where(np.array([t == "" for t in conn_txt], bool)[conn_codes], -1, conn_codes)
    ops, _, merged = merge_collectives(ops, hw, key, names, types)
    if merged:
        meta["ascend_hccl_tasks_merged"] = merged
    return ops


def _claim_hccl_streams(rows: list[tuple], hccl: int) -> None:
    """Every task of an HCCL stream is communication (in place).

    A task that shares its ``connection_id`` (the launch it came from) with one of HCCL's
    tasks is one too. An HCCL stream is one where the tasks tied to a collective (by
    connection id or Plane task) or of a type only HCCL issues are at least half of the
    work tasks. HCCL owns
    such a stream, so its other tasks (``SDMA`` copies without a connection id, ...) are
    the collective's too; waits and markers on it stay what they are. (A compute stream
    with an odd HCCL task, such as a fused compute-and-communicate kernel's, keeps its
    compute tasks.)
    """
    launches = {(r[1], _key(r[9])) for r in rows if r[0] == "hw_comm" and r[9] is not None}
    launches.discard((None, None))
    tied: Counter = Counter()
    other: Counter = Counter()
    for r in rows:
        if r[0] == "hw_comm" or (r[0] == "op" and r[9] is not None
                                 and (r[1], _key(r[9])) in launches):
            tied[(r[1], r[2])] += 1
        elif r[0] == "op":
            other[(r[1], r[2])] += 1
    if not tied:
        return
    lanes = {lane for lane, n in tied.items() if n >= other[lane]}
    for i, r in enumerate(rows):
        if r[0] == "op" and ((r[1], r[2]) in lanes or (r[9] is not None
                                                      and (r[1], _key(r[9])) in launches)):
            task_type = str(r[10] or "").strip()
            rows[i] = ("hw_comm", r[1], r[2], r[3], r[4] or task_type, KIND_COMM,
                       r[6] or hccl) + r[7:]
