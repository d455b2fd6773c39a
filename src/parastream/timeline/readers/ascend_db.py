"""Ascend profiler databases: ``ascend_pytorch_profiler_*.db`` and ``msprof_*.db`` (sqlite).

Schema (msprof "Profile Data File Reference (DB)"; times are integer ns, strings are ids
into ``STRING_IDS(id, value)``):

* ``TASK(startNs, endNs, deviceId, connectionId, globalTaskId, globalPid, taskType,
  contextId, streamId, taskId, modelId)``: every task the hardware ran, compute or not;
* ``COMPUTE_TASK_INFO(name, globalTaskId, blockNum|blockDim, mixBlockNum|mixBlockDim,
  taskType, opType, inputShapes, ...)``: one row per compute task;
* ``COMMUNICATION_OP(opName, startNs, endNs, groupName, opId, opType, ...)``: whole HCCL
  collectives; ``COMMUNICATION_TASK_INFO(name, globalTaskId, taskType, opId, ...)``: their
  small tasks on the HCCL streams.

What becomes what: a task with a ``COMPUTE_TASK_INFO`` row is an op; ``EVENT_WAIT`` tasks
are waits on their stream. Communication is what the database's structure says it is,
never the busiest stream: a task is one of HCCL's small tasks when it has a
``COMMUNICATION_TASK_INFO`` row, when its ``connectionId`` is a ``COMMUNICATION_OP``'s
(the collective that launched it), when its compute info or task type is one only HCCL
issues (``HCCL``, ``Notify Wait``, ``Write Value``, ...; see :mod:`.hccl`), or when it runs
on an HCCL stream (one where such tasks are at least half of the tasks that are neither
waits nor ``EVENT_RECORD``/``PLACE_HOLDER`` markers; the ``SDMA`` copies and the launch
task there belong to the collective). Whole collectives go to the
:data:`~parastream.timeline.model.COMM_LANE` lane (as the ``N/A``-stream rows of
``kernel_details.csv`` do) and their small tasks are then folded into them (counted in
``meta["ascend_hccl_tasks_folded"]``); without ``COMMUNICATION_OP`` each collective's small
tasks (same ``opId``, else same ``connectionId``, or overlapping on one stream) are merged
into one communication op on their own stream, since they overlap each other by design
and are not corrupt compute (``meta["ascend_hccl_tasks_merged"]`` counts those merged away).
Other SDMA/memcpy tasks are memcpy ops; other tasks without info are not ops.
Column names are matched loosely (``blockNum`` or ``blockDim``, ...), optional tables may
be absent, and the file is opened read-only.
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

import numpy as np

from ...errors import InputError
from ..intervals import window_ids
from ..model import (
    COMM_LANE, KIND_COMM, KIND_COMPUTE, KIND_MEMCPY, KIND_MEMSET, DeviceInfo, Timeline,
    core_code, make_timeline, value_flags,
)
from ..nogc import gc_paused
from . import SQLITE_MAGIC
from .hccl import is_hccl_task_type, merge_collectives

FORMAT = "ascend_db"
#: task types that mark a point in a stream, not work
_MARKERS = ("EVENT_RECORD", "PLACE_HOLDER")
_NSYS_HINTS = (b"CUPTI_ACTIVITY_KIND", b"TARGET_INFO_", b"NVTX_EVENTS")
_ASCEND_HINTS = (b"STRING_IDS", b"COMPUTE_TASK_INFO", b"TABLE TASK", b'TABLE "TASK"')


def sniff(head: bytes) -> bool:
    """An SQLite file, unless its head shows an Nsight Systems schema and no Ascend one."""
    if not head.startswith(SQLITE_MAGIC):
        return False
    if any(h in head for h in _NSYS_HINTS) and not any(h in head for h in _ASCEND_HINTS):
        return False
    return True


def connect_ro(path: str) -> sqlite3.Connection:
    """Open an sqlite file read-only (never creates or modifies it, nor files beside it).

    torch_npu writes some databases in WAL journal mode; opened merely read-only, sqlite
    would leave ``-shm``/``-wal`` files beside such a file (and cannot open it at all in
    a folder it may not write). Without a ``-wal`` file (or with an empty one) there is
    nothing outside the file to read, so it is opened as immutable: no locks, no side
    files."""
    resolved = Path(path).resolve()
    uri = resolved.as_uri() + "?mode=ro"
    try:
        pending = os.path.getsize(f"{resolved}-wal") > 0
    except OSError:
        pending = False
    if not pending:
        uri += "&immutable=1"
    try:
        con = sqlite3.connect(uri, uri=True)
        con.execute("SELECT count(*) FROM sqlite_master").fetchone()
    except sqlite3.Error as exc:
        raise InputError(path, f"cannot open sqlite database: {exc}") from None
    return con


def has_task_table(path: str) -> bool:
    """Whether ``path`` is an sqlite database with a ``TASK`` table (used by directory)."""
    try:
        con = connect_ro(path)
    except InputError:
        return False
    try:
        return "TASK" in _tables(con)
    except sqlite3.Error:
        return False
    finally:
        con.close()


def _tables(con: sqlite3.Connection) -> set[str]:
    rows = con.execute("SELECT name FROM sqlite_master WHERE type IN ('table', 'view')")
    return {r[0] for r in rows}


class _Cols:
    """Case-insensitive column lookup for one table."""

    def __init__(self, con: sqlite3.Connection, table: str) -> None:
        self.table = table
        self._by_lower = {r[1].lower(): r[1] for r in con.execute(f'PRAGMA table_info("{table}")')}

    def pick(self, *candidates: str) -> str | None:
        for c in candidates:
            if c.lower() in self._by_lower:
                return self._by_lower[c.lower()]
        return None

    def expr(self, alias: str, *candidates: str, default: str = "NULL") -> str:
        c = self.pick(*candidates)
        return f'{alias}."{c}"' if c else default


def _strings(con: sqlite3.Connection, tables: set[str]) -> dict:
    if "STRING_IDS" not in tables:
        return {}
    cols = _Cols(con, "STRING_IDS")
    cid, cval = cols.pick("id"), cols.pick("value")
    if not cid or not cval:
        return {}
    return dict(con.execute(f'SELECT "{cid}", "{cval}" FROM STRING_IDS'))


def _text(values: list, strings: dict) -> list[str]:
    """STRING_IDS ids (or text already) -> text; None -> ''."""
    out = []
    for v in values:
        if v is None or (isinstance(v, int) and v == -1):
            out.append("")
        elif isinstance(v, str):
            out.append(v)  # a TEXT column: already the string
        else:
            s = strings.get(v)
            out.append(str(v) if s is None else str(s))
    return out


def _intern(raw: list, strings: dict) -> tuple[np.ndarray, list[str]]:
    """Per-row STRING_IDS ids -> (int32 codes, distinct texts)."""
    uniq: dict = {}
    codes = np.fromiter((uniq.setdefault(v, len(uniq)) for v in raw), np.int32, len(raw))
    return codes, _text(list(uniq), strings)


def _ints(raw, default: int = -1) -> np.ndarray:
    """Integers (None -> ``default``) as int64."""
    try:
        return np.asarray(raw, dtype=np.int64).reshape(-1)
    except (TypeError, ValueError, OverflowError):
        return np.fromiter((_int_or(v, default) for v in raw), np.int64, len(raw))


def _int_or(v, default: int) -> int:
    try:
        return default if v is None else int(v)
    except (TypeError, ValueError, OverflowError):
        return default


def _most_common(values: np.ndarray) -> tuple[int, np.ndarray, np.ndarray]:
    uniq, counts = np.unique(values, return_counts=True)
    order = np.lexsort((uniq, -counts))
    return int(uniq[order[0]]), uniq[order], counts[order]


def read(path: str | os.PathLike[str]) -> Timeline:
    """Read an Ascend profiler sqlite database into a :class:`Timeline`."""
    path = os.fspath(path)
    con = connect_ro(path)
    try:
        with gc_paused():  # millions of row tuples
            return _read(con, path)
    except sqlite3.Error as exc:
        raise InputError(path, f"cannot query the database: {exc}") from None
    finally:
        con.close()


def _read(con: sqlite3.Connection, path: str) -> Timeline:
    tables = _tables(con)
    if "TASK" not in tables:
        raise InputError(path, "sqlite database without a TASK table (not an Ascend profiler "
                               "database; expected ascend_pytorch_profiler_*.db or msprof_*.db)")
    strings = _strings(con, tables)
    task = _Cols(con, "TASK")
    t_start, t_end = task.pick("startNs", "start"), task.pick("endNs", "end")
    t_stream = task.pick("streamId", "stream")
    missing = [n for n, c in (("startNs", t_start), ("endNs", t_end), ("streamId", t_stream))
               if c is None]
    if missing:
        raise InputError(path, f"TASK table lacks column(s): {', '.join(missing)}")
    t_gid = task.pick("globalTaskId", "correlationId")
    warnings: list[str] = []
    meta: dict = {}

    def num(expr: str) -> str:
        return f"COALESCE({expr}, -1)"

    t_conn = task.pick("connectionId")
    select = [num(f't."{t_start}"'), num(f't."{t_end}"'), num(f't."{t_stream}"'),
              num(task.expr("t", "deviceId", "deviceld")), num(task.expr("t", "taskType")),
              num(f't."{t_conn}"' if t_conn else "NULL")]
    co = _Cols(con, "COMMUNICATION_OP") if "COMMUNICATION_OP" in tables else None
    co_conn = co.pick("connectionId") if co else None
    if t_conn and co_conn:  # the collective that launched the task
        select.append(f't."{t_conn}" IN (SELECT "{co_conn}" FROM COMMUNICATION_OP '
                      f'WHERE "{co_conn}" IS NOT NULL)')
    else:
        select.append("0")
    joins = []
    ci = _Cols(con, "COMPUTE_TASK_INFO") if "COMPUTE_TASK_INFO" in tables and t_gid else None
    ci_key = ci.pick("globalTaskId", "correlationId") if ci else None
    if ci_key:
        joins.append(f'LEFT JOIN COMPUTE_TASK_INFO c ON c."{ci_key}" = t."{t_gid}"')
        select += [f'c."{ci_key}" IS NOT NULL', num(ci.expr("c", "name", "opName")),
                   num(ci.expr("c", "opType")), num(ci.expr("c", "taskType")),
                   num(ci.expr("c", "blockNum", "blockDim")),
                   num(ci.expr("c", "mixBlockNum", "mixBlockDim")),
                   num(ci.expr("c", "inputShapes"))]
        has_shapes = ci.pick("inputShapes") is not None
    else:
        select += ["0"] + ["-1"] * 6
        has_shapes = False
    cm = (_Cols(con, "COMMUNICATION_TASK_INFO")
          if "COMMUNICATION_TASK_INFO" in tables and t_gid else None)
    if cm is not None and cm.pick("globalTaskId"):
        joins.append('LEFT JOIN (SELECT "{k}" AS gid, MIN({n}) AS name, MIN({tt}) AS ttype, '
                     'MIN({op}) AS opid FROM COMMUNICATION_TASK_INFO GROUP BY "{k}") m '
                     'ON m.gid = t."{g}"'.format(
                         k=cm.pick("globalTaskId"), n=cm.expr("COMMUNICATION_TASK_INFO", "name"),
                         tt=cm.expr("COMMUNICATION_TASK_INFO", "taskType"),
                         op=cm.expr("COMMUNICATION_TASK_INFO", "opId"), g=t_gid))
        select += ["m.gid IS NOT NULL", num("m.name"), num("m.ttype"), num("m.opid")]
    else:
        select += ["0", "-1", "-1", "-1"]
    cur = con.execute(f"SELECT {', '.join(select)} FROM TASK t {' '.join(joins)}")
    cols = list(zip(*cur))
    if not cols:
        raise InputError(path, "no usable rows (the TASK table is empty)")
    (start_raw, end_raw, stream_raw, dev_raw, ttype_raw, conn_raw, linked_raw, has_ci_raw,
     ci_name, ci_optype, ci_ttype, ci_block, ci_mix, ci_shapes, has_cm_raw, cm_name, cm_ttype,
     cm_opid) = cols
    n = len(start_raw)

    # one capture is one device
    dev = _ints(dev_raw)
    keep = np.ones(n, bool)
    chosen = None
    if (dev >= 0).any():
        chosen, uniq, counts = _most_common(dev[dev >= 0])
        meta["device_id"] = chosen
        if len(uniq) > 1:
            others = ", ".join(f"{u} ({c} tasks)" for u, c in zip(uniq[1:], counts[1:]))
            warnings.append(f"the database holds several devices; kept device {chosen} "
                            f"({counts[0]} tasks), skipped device(s) {others}")
            keep &= (dev == chosen) | (dev < 0)

    start, end = _ints(start_raw), _ints(end_raw)
    bad_time = keep & ((start < 0) | (end < 0))
    if bad_time.any():
        warnings.append(f"skipped {int(bad_time.sum())} task(s) without a start or end time")
        keep &= ~bad_time

    # string columns: codes per row, flags per distinct value
    tt_codes, tt_txt = _codes(ttype_raw, strings)
    cit_codes, cit_txt = _codes(ci_ttype, strings)
    tt_up = [t.upper() for t in tt_txt]
    is_wait = value_flags(tt_up, lambda t: "EVENT_WAIT" in t)[tt_codes]
    is_dma = value_flags(tt_up, lambda t: "SDMA" in t or "MEMCPY" in t or "PCIE_DMA" in t)[tt_codes]
    is_marker = value_flags(tt_up, lambda t: t.startswith(_MARKERS))[tt_codes]
    has_ci = _ints(has_ci_raw) > 0
    has_cm = _ints(has_cm_raw) > 0
    ci_hccl = has_ci & value_flags(cit_txt, is_hccl_task_type)[cit_codes]
    tied = ((has_cm | ci_hccl | (_ints(linked_raw) > 0)
             | value_flags(tt_txt, is_hccl_task_type)[tt_codes]) & ~is_wait)
    stream = _ints(stream_raw)
    work = keep & ~is_wait & ~is_marker
    comm_small = tied | (work & _on_hccl_stream(stream, tied & keep,
                                                work & ~tied & (has_ci | is_dma)))
    compute = has_ci & ~comm_small & ~is_wait
    dma = is_dma & ~has_ci & ~comm_small & ~is_wait

    # whole collectives, when the database has them, replace their small tasks
    comm_rows = _comm_ops(con, tables, strings, chosen, t_gid, task)
    if comm_rows:
        if (keep & comm_small).any():
            meta["ascend_hccl_tasks_folded"] = int((keep & comm_small).sum())
        comm_small = np.zeros(n, bool)
    idx = np.flatnonzero(keep & (compute | comm_small | dma))
    widx = np.flatnonzero(keep & is_wait)
    if not len(idx) and not comm_rows:
        raise InputError(path, "no usable rows (no TASK row has compute or communication "
                               f"info; {len(widx)} wait(s) alone leave nothing to analyse)")

    # name / type / core per op: compute info, else communication info, else the task type
    src = np.where(compute[idx], 0, np.where(comm_small[idx], 1, 2))
    name_c, name_txt = _pick3(src, [_codes(ci_name, strings), _codes(cm_name, strings),
                                    (tt_codes, tt_txt)], idx, has_cm[idx], has_ci[idx])
    type_c, type_txt = _pick3(src, [_codes(ci_optype, strings), _codes(cm_ttype, strings),
                                    (tt_codes, tt_txt)], idx, has_cm[idx], has_ci[idx])
    core_ci = np.array([core_code(t) for t in cit_txt], np.int8)[cit_codes[idx]]
    core_tt = np.array([core_code(t) for t in tt_txt], np.int8)[tt_codes[idx]]
    core = np.where(core_ci > 0, core_ci, core_tt).astype(np.int8)
    core[src == 1] = core_code("HCCL")
    core[src == 2] = core_code("DMA")
    kind = np.full(len(idx), KIND_COMPUTE, np.int8)
    memset = (value_flags(name_txt, lambda t: "MEMSET" in t.upper())[name_c]
              | value_flags(type_txt, lambda t: "MEMSET" in t.upper())[type_c])
    memcpy = (value_flags(name_txt, lambda t: "MEMCPY" in t.upper() or "MEMCOPY" in t.upper())[name_c]
              | value_flags(type_txt, lambda t: "MEMCPY" in t.upper() or "MEMCOPY" in t.upper())[type_c])
    kind[memcpy] = KIND_MEMCPY
    kind[memset] = KIND_MEMSET
    kind[src == 2] = KIND_MEMCPY
    kind[src == 1] = KIND_COMM

    # lanes: stream ids as text, whole collectives on the comm lane
    used = np.unique(np.concatenate([stream[idx], stream[widx]]))
    labels = [str(int(v)) for v in used]
    op_lane = np.searchsorted(used, stream[idx]).astype(np.int32)
    wait_lane = np.searchsorted(used, stream[widx]).astype(np.int32)
    n_comm = len(comm_rows)
    if n_comm:
        labels.append(COMM_LANE)
        op_lane = np.concatenate([op_lane, np.full(n_comm, len(labels) - 1, np.int32)])

    # names: op names, whole-collective names, wait names, interned together
    wait_u, wait_c = np.unique(tt_codes[widx], return_inverse=True)
    wait_txt = [tt_txt[u] or "EVENT_WAIT" for u in wait_u.tolist()]
    names, (name_c, comm_name_c, wait_c) = _merge(
        [(name_c, name_txt), _intern([r[0] for r in comm_rows], {}), (wait_c, wait_txt)])
    types, (type_c, comm_type_c) = _merge(
        [(type_c, type_txt), _intern([r[1] for r in comm_rows], {})])
    # keep only the texts some op or wait uses
    all_names = np.concatenate([name_c, comm_name_c, wait_c]).astype(np.int32)
    all_names, names = _drop_unused(all_names, names)
    n_ops = len(name_c)
    name_c, comm_name_c, wait_c = (all_names[:n_ops], all_names[n_ops:n_ops + n_comm],
                                   all_names[n_ops + n_comm:])
    all_types, types = _drop_unused(np.concatenate([type_c, comm_type_c]).astype(np.int32), types)
    type_c, comm_type_c = all_types[:n_ops], all_types[n_ops:]

    ops = dict(
        stream=op_lane, name=np.concatenate([name_c, comm_name_c]),
        type=np.concatenate([type_c, comm_type_c]),
        start_ns=np.concatenate([start[idx], np.array([r[2] for r in comm_rows], np.int64)]),
        end_ns=np.concatenate([end[idx], np.array([r[3] for r in comm_rows], np.int64)]),
        kind=np.concatenate([kind, np.full(n_comm, KIND_COMM, np.int8)]),
        core=np.concatenate([core, np.full(n_comm, core_code("HCCL"), np.int8)]),
        block_dim=_dims(ci_block, idx, n_comm), mix_block_dim=_dims(ci_mix, idx, n_comm),
    )
    ops["step"] = _steps(con, tables, ops["start_ns"])
    waits = dict(wait_stream=wait_lane, wait_on=np.full(len(widx), -1, np.int32),
                 wait_start_ns=start[widx], wait_end_ns=end[widx], wait_name=wait_c)
    shapes = None
    if has_shapes:
        sc, stxt = _codes(ci_shapes, strings)
        per_op = np.array(stxt + [""], dtype=object)[np.where(compute[idx], sc[idx], len(stxt))]
        shapes = per_op.tolist() + [""] * n_comm
    if not n_comm and (src == 1).sum() > 1:
        # no whole collectives: each one's small tasks become one op
        opid, conn = _ints(cm_opid)[idx], _ints(conn_raw)[idx]
        key = np.where(opid >= 0, opid, np.where(conn >= 0, conn + (1 << 40), -1))
        ops, kept, merged = merge_collectives(ops, src == 1, key, names, types)
        if merged:
            meta["ascend_hccl_tasks_merged"] = merged
            if shapes is not None:
                shapes = [sh for sh, k in zip(shapes, kept) if k]
    device = DeviceInfo(name=_npu_name(con, tables, chosen))
    return make_timeline(path, FORMAT, labels, names, types, ops, waits, shapes=shapes,
                         device=device, warnings=warnings, meta=meta)


def _on_hccl_stream(stream: np.ndarray, tied: np.ndarray, other: np.ndarray) -> np.ndarray:
    """Per task: whether it runs on an HCCL stream, one where the tasks tied to
    communication are at least as many as the other work tasks (so a compute stream with
    an odd HCCL task is not one)."""
    if not tied.any():
        return np.zeros(len(stream), bool)
    uniq, inv = np.unique(stream, return_inverse=True)
    n_tied = np.bincount(inv, weights=tied, minlength=len(uniq))
    n_other = np.bincount(inv, weights=other, minlength=len(uniq))
    return ((n_tied > 0) & (n_tied >= n_other))[inv]


def _codes(raw, strings: dict) -> tuple[np.ndarray, list[str]]:
    """A column of STRING_IDS ids (-1 for none; text taken as is) -> (int32 codes, texts)."""
    try:
        arr = np.asarray(raw, dtype=np.int64)
    except (TypeError, ValueError, OverflowError):
        return _intern(list(raw), strings)
    arr = arr.reshape(-1)
    if len(arr) and arr.min() >= -1 and arr.max() < 4 * len(arr) + (1 << 20):
        # small non-negative ids (the usual case): a lookup table instead of a sort
        present = np.bincount(arr + 1) > 0
        uniq = np.flatnonzero(present) - 1
        lut = np.cumsum(present) - 1
        inv = lut[arr + 1]
    else:
        uniq, inv = np.unique(arr, return_inverse=True)
    texts = ["" if u == -1 else str(strings.get(int(u), u)) for u in uniq.tolist()]
    return inv.astype(np.int32).reshape(-1), texts


def _pick3(src: np.ndarray, sources: list, idx: np.ndarray, has_comm_info: np.ndarray,
           has_compute_info: np.ndarray) -> tuple[np.ndarray, list[str]]:
    """Per op, the code from source 0, 1 or 2 (compute info, comm info, task type).

    A communication task without a communication-info row takes its text from its
    compute info (task type HCCL) or, without that either, from its task type.
    """
    (c0, t0), (c1, t1), (c2, t2) = sources
    src = np.where((src == 1) & ~has_comm_info, np.where(has_compute_info, 0, 2), src)
    merged, (m0, m1, m2) = _merge([(c0[idx], t0), (c1[idx], t1), (c2[idx], t2)])
    return np.choose(src, [m0, m1, m2]).astype(np.int32), merged


def _merge(parts: list[tuple[np.ndarray, list[str]]]) -> tuple[list[str], list[np.ndarray]]:
    """Several (codes, texts) -> one text list and the codes remapped into it."""
    index: dict[str, int] = {}
    out = []
    for codes, texts in parts:
        remap = np.array([index.setdefault(t, len(index)) for t in texts] or [0], np.int32)
        out.append(remap[codes] if len(codes) else np.zeros(0, np.int32))
    return list(index), out




def _dims(raw, idx: np.ndarray, n_comm: int) -> np.ndarray:
    vals = _ints(raw)[idx] if len(idx) else np.zeros(0, np.int64)
    vals = np.clip(vals, -1, np.iinfo(np.int32).max)
    return np.concatenate([vals, np.full(n_comm, -1, np.int64)]).astype(np.int32)


def _comm_ops(con, tables, strings, device, t_gid, task) -> list[tuple[str, str, int, int]]:
    """Whole collectives from COMMUNICATION_OP: (name, type, start_ns, end_ns)."""
    if "COMMUNICATION_OP" not in tables:
        return []
    co = _Cols(con, "COMMUNICATION_OP")
    c_start, c_end = co.pick("startNs", "start"), co.pick("endNs", "end")
    if not c_start or not c_end:
        return []
    sql = (f'SELECT {co.expr("o", "opName", "name")}, {co.expr("o", "opType")}, '
           f'o."{c_start}", o."{c_end}" FROM COMMUNICATION_OP o')
    params: tuple = ()
    c_dev = co.pick("deviceId", "deviceld")
    c_opid = co.pick("opId")
    if device is not None:
        if c_dev:
            sql += f' WHERE o."{c_dev}" = ? OR o."{c_dev}" IS NULL'
            params = (device,)
        elif (c_opid and t_gid and "COMMUNICATION_TASK_INFO" in tables
              and _Cols(con, "COMMUNICATION_TASK_INFO").pick("opId")
              and task.pick("deviceId") and _several_devices(con, task)):
            sql += (f' WHERE o."{c_opid}" IN (SELECT m.opId FROM COMMUNICATION_TASK_INFO m '
                    f'JOIN TASK t ON t."{t_gid}" = m.globalTaskId '
                    f'WHERE t."{task.pick("deviceId")}" = ?)')
            params = (device,)
    out = []
    raw = con.execute(sql, params).fetchall()
    names = _text([r[0] for r in raw], strings)
    types = _text([r[1] for r in raw], strings)
    for (_, _, s, e), nm, ty in zip(raw, names, types):
        if s is None or e is None:
            continue
        out.append((nm, ty, int(s), int(e)))
    return out


def _several_devices(con, task: _Cols) -> bool:
    col = task.pick("deviceId")
    return con.execute(f'SELECT COUNT(DISTINCT "{col}") FROM TASK').fetchone()[0] > 1


def _steps(con, tables, start_ns: np.ndarray) -> np.ndarray:
    """Step ids from STEP_TIME(id, startNs, endNs) windows, -1 outside any step."""
    out = np.full(len(start_ns), -1, np.int32)
    if "STEP_TIME" not in tables or not len(start_ns):
        return out
    st = _Cols(con, "STEP_TIME")
    cid, cs, ce = st.pick("id", "step"), st.pick("startNs", "start"), st.pick("endNs", "end")
    if not (cid and cs and ce):
        return out
    rows = [r for r in con.execute(f'SELECT "{cid}", "{cs}", "{ce}" FROM STEP_TIME')
            if None not in r and str(r[0]).lstrip("-").isdigit()]
    sid = np.array([int(r[0]) for r in rows], np.int64)
    s0 = np.array([int(r[1]) for r in rows], np.int64)
    s1 = np.array([int(r[2]) for r in rows], np.int64)
    return window_ids(s0, s1, sid, start_ns)


def _npu_name(con, tables, device) -> str | None:
    if "NPU_INFO" not in tables:
        return None
    cols = _Cols(con, "NPU_INFO")
    cid, cname = cols.pick("id", "deviceId"), cols.pick("name")
    if not cid or not cname:
        return None
    rows = con.execute(f'SELECT "{cid}", "{cname}" FROM NPU_INFO').fetchall()
    for i, name in rows:
        if device is None or i == device:
            return str(name) if name else None
    return None


def _drop_unused(codes: np.ndarray, values: list[str]) -> tuple[np.ndarray, list[str]]:
    """Drop values no code refers to (after rows were skipped); codes renumbered, order kept."""
    if not len(codes):
        return codes.astype(np.int32), []
    used = np.bincount(codes, minlength=len(values)) > 0
    if used.all():
        return codes, list(values)
    lut = (np.cumsum(used) - 1).astype(np.int32)
    return lut[codes], [v for v, u in zip(values, used) if u]
