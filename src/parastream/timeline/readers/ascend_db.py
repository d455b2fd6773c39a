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
be absent, and the file is opened read-only. The TASK query's rows are fetched in chunks,
each turned into numpy columns at once, so no Python tuple per task is kept.

``Timeline.collectives`` holds the whole collectives of ``COMMUNICATION_OP``: ``key`` the
op name (the same on every rank of the group), ``group`` the group's name (``groupName``),
``nbytes`` its ``count`` elements times the size of its ``dataType``
(``ENUM_HCCL_DATA_TYPE``).
"""

from __future__ import annotations

import os
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import numpy as np

from ...errors import InputError
from ..collectives import Collectives, dtype_bytes, make_collectives
from ..intervals import window_ids
from ..model import (
    COMM_LANE, KIND_COMM, KIND_COMPUTE, KIND_MEMCPY, KIND_MEMSET, DeviceInfo, Timeline,
    core_code, make_timeline, value_flags,
)
from ..nogc import gc_paused
from . import SQLITE_MAGIC
from .hccl import (is_hccl_task_type, is_memcpy_text, is_memset_text,
                   merge_collectives, timeline_collectives)

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
    query = _task_query(con, tables, task, path)
    cols = _fetch_columns(con.execute(query.sql), len(_TaskRows._fields))
    if not len(cols[0]):
        raise InputError(path, "no usable rows (the TASK table is empty)")
    rows = _TaskRows(*cols)
    warnings: list[str] = []
    meta: dict = {}
    keep, chosen = _one_device(_ints(rows.dev), warnings, meta)
    start, end = _ints(rows.start), _ints(rows.end)
    bad_time = keep & ((start < 0) | (end < 0))
    if bad_time.any():
        warnings.append(f"skipped {int(bad_time.sum())} task(s) without a start or end time")
        keep &= ~bad_time
    roles = _roles(rows, strings, keep)
    # whole collectives, when the database has them, replace their small tasks
    comm_rows = _comm_ops(con, tables, strings, chosen, query.t_gid, task)
    if comm_rows:
        if (keep & roles.comm_small).any():
            meta["ascend_hccl_tasks_folded"] = int((keep & roles.comm_small).sum())
        roles.comm_small = np.zeros(len(keep), bool)
    idx = np.flatnonzero(keep & (roles.compute | roles.comm_small | roles.dma))
    widx = np.flatnonzero(keep & roles.is_wait)
    if not len(idx) and not comm_rows:
        raise InputError(path, "no usable rows (no TASK row has compute or communication "
                               f"info; {len(widx)} wait(s) alone leave nothing to analyse)")
    ops, waits, labels, names, types = _op_columns(rows, strings, roles, (idx, widx),
                                                   (start, end), comm_rows)
    ops["step"] = _steps(con, tables, ops["start_ns"])
    shapes = None
    if query.has_shapes:
        sc, stxt = _codes(rows.ci_shapes, strings)
        per_op = np.array(stxt + [""], dtype=object)[np.where(roles.compute[idx], sc[idx],
                                                              len(stxt))]
        shapes = per_op.tolist() + [""] * len(comm_rows)
    if not comm_rows and (roles.src == 1).sum() > 1:
        ops, shapes = _merge_small_tasks(ops, shapes, rows, roles, idx, (names, types), meta)
    device = DeviceInfo(name=_npu_name(con, tables, chosen))
    tl = make_timeline(path, FORMAT, labels, names, types, ops, waits, shapes=shapes,
                       device=device, warnings=warnings, meta=meta)
    tl.collectives = _collectives(comm_rows) or timeline_collectives(tl)
    return tl


#: rows fetched from sqlite at a time; each chunk becomes numpy columns at once
_CHUNK_ROWS = 1 << 16


def _fetch_columns(cursor: sqlite3.Cursor, n_cols: int) -> list[np.ndarray]:
    """A query's result as one numpy array per column, fetched in chunks of
    :data:`_CHUNK_ROWS` rows, so no Python tuple per row outlives its chunk: int64 where
    a chunk's values are all integers, else an object array of the values."""
    parts: list[list[np.ndarray]] = [[] for _ in range(n_cols)]
    while True:
        chunk = cursor.fetchmany(_CHUNK_ROWS)
        if not chunk:
            break
        for i, col in enumerate(zip(*chunk)):
            parts[i].append(_chunk_array(col))
        del chunk
    return [np.concatenate(p) if p else np.zeros(0, np.int64) for p in parts]


def _chunk_array(values: tuple) -> np.ndarray:
    """One chunk of a column: int64 when every value converts (as ``np.asarray`` would
    convert the whole column), else the values as objects."""
    try:
        return np.asarray(values, dtype=np.int64).reshape(-1)
    except (TypeError, ValueError, OverflowError):
        arr = np.empty(len(values), object)
        arr[:] = values
        return arr


class _TaskRows(NamedTuple):
    """The TASK query's columns (one array each, a value per task): the task's own, then
    its compute info (``has_ci`` and ``ci_*``), then its communication info (``has_cm``,
    ``cm_*``); ``linked``: its connection id is a whole collective's."""

    start: tuple
    end: tuple
    stream: tuple
    dev: tuple
    ttype: tuple
    conn: tuple
    linked: tuple
    has_ci: tuple
    ci_name: tuple
    ci_optype: tuple
    ci_ttype: tuple
    ci_block: tuple
    ci_mix: tuple
    ci_shapes: tuple
    has_cm: tuple
    cm_name: tuple
    cm_ttype: tuple
    cm_opid: tuple


@dataclass
class _Query:
    """The TASK query, the TASK column that joins the info tables (None without one), and
    whether the compute info has input shapes."""

    sql: str
    t_gid: str | None
    has_shapes: bool


def _num(expr: str) -> str:
    return f"COALESCE({expr}, -1)"


def _task_query(con: sqlite3.Connection, tables: set[str], task: _Cols, path: str) -> _Query:
    """The one query over TASK, joined with its compute and communication info, whose
    columns are those of :class:`_TaskRows`; InputError when TASK lacks a time or stream."""
    t_start, t_end = task.pick("startNs", "start"), task.pick("endNs", "end")
    t_stream = task.pick("streamId", "stream")
    missing = [n for n, c in (("startNs", t_start), ("endNs", t_end), ("streamId", t_stream))
               if c is None]
    if missing:
        raise InputError(path, f"TASK table lacks column(s): {', '.join(missing)}")
    t_gid = task.pick("globalTaskId", "correlationId")
    t_conn = task.pick("connectionId")
    select = [_num(f't."{t_start}"'), _num(f't."{t_end}"'), _num(f't."{t_stream}"'),
              _num(task.expr("t", "deviceId", "deviceld")), _num(task.expr("t", "taskType")),
              _num(f't."{t_conn}"' if t_conn else "NULL")]
    co = _Cols(con, "COMMUNICATION_OP") if "COMMUNICATION_OP" in tables else None
    co_conn = co.pick("connectionId") if co else None
    if t_conn and co_conn:  # the collective that launched the task
        select.append(f't."{t_conn}" IN (SELECT "{co_conn}" FROM COMMUNICATION_OP '
                      f'WHERE "{co_conn}" IS NOT NULL)')
    else:
        select.append("0")
    joins: list[str] = []
    has_shapes = _join_compute_info(con, tables, t_gid, select, joins)
    _join_comm_info(con, tables, t_gid, select, joins)
    return _Query(f"SELECT {', '.join(select)} FROM TASK t {' '.join(joins)}", t_gid,
                  has_shapes)


def _join_compute_info(con: sqlite3.Connection, tables: set[str], t_gid: str | None,
                       select: list[str], joins: list[str]) -> bool:
    """Add COMPUTE_TASK_INFO's columns to the query (constants without the table);
    whether it has input shapes."""
    ci = _Cols(con, "COMPUTE_TASK_INFO") if "COMPUTE_TASK_INFO" in tables and t_gid else None
    ci_key = ci.pick("globalTaskId", "correlationId") if ci else None
    if not ci_key:
        select.extend(["0"] + ["-1"] * 6)
        return False
    joins.append(f'LEFT JOIN COMPUTE_TASK_INFO c ON c."{ci_key}" = t."{t_gid}"')
    select.extend([f'c."{ci_key}" IS NOT NULL', _num(ci.expr("c", "name", "opName")),
                   _num(ci.expr("c", "opType")), _num(ci.expr("c", "taskType")),
                   _num(ci.expr("c", "blockNum", "blockDim")),
                   _num(ci.expr("c", "mixBlockNum", "mixBlockDim")),
                   _num(ci.expr("c", "inputShapes"))])
    return ci.pick("inputShapes") is not None


def _join_comm_info(con: sqlite3.Connection, tables: set[str], t_gid: str | None,
                    select: list[str], joins: list[str]) -> None:
    """Add COMMUNICATION_TASK_INFO's columns to the query (one row per task: the smallest
    name, task type and op id of its rows), constants without the table."""
    cm = (_Cols(con, "COMMUNICATION_TASK_INFO")
          if "COMMUNICATION_TASK_INFO" in tables and t_gid else None)
    if cm is None or not cm.pick("globalTaskId"):
        select.extend(["0", "-1", "-1", "-1"])
        return
    joins.append('LEFT JOIN (SELECT "{k}" AS gid, MIN({n}) AS name, MIN({tt}) AS ttype, '
                 'MIN({op}) AS opid FROM COMMUNICATION_TASK_INFO GROUP BY "{k}") m '
                 'ON m.gid = t."{g}"'.format(
                     k=cm.pick("globalTaskId"), n=cm.expr("COMMUNICATION_TASK_INFO", "name"),
                     tt=cm.expr("COMMUNICATION_TASK_INFO", "taskType"),
                     op=cm.expr("COMMUNICATION_TASK_INFO", "opId"), g=t_gid))
    select.extend(["m.gid IS NOT NULL", _num("m.name"), _num("m.ttype"), _num("m.opid")])


def _one_device(dev: np.ndarray, warnings: list[str], meta: dict
                ) -> tuple[np.ndarray, int | None]:
    """One capture is one device: per task whether it is kept (the most common device,
    and tasks without one), and that device (None when no task names one)."""
    keep = np.ones(len(dev), bool)
    if not (dev >= 0).any():
        return keep, None
    chosen, uniq, counts = _most_common(dev[dev >= 0])
    meta["device_id"] = chosen
    if len(uniq) > 1:
        others = ", ".join(f"{u} ({c} tasks)" for u, c in zip(uniq[1:], counts[1:]))
        warnings.append(f"the database holds several devices; kept device {chosen} "
                        f"({counts[0]} tasks), skipped device(s) {others}")
        keep &= (dev == chosen) | (dev < 0)
    return keep, chosen


@dataclass
class _Roles:
    """What each task is (bool per task): a wait, compute (it has compute info), one of
    HCCL's small tasks, or a copy; ``tt``/``cit`` are the task type and compute-info task
    type as (codes, texts); ``src``, set once the ops are chosen, is per op where its
    name comes from (0 compute info, 1 communication info, 2 task type)."""

    is_wait: np.ndarray
    has_ci: np.ndarray
    has_cm: np.ndarray
    compute: np.ndarray
    comm_small: np.ndarray
    dma: np.ndarray
    tt: tuple[np.ndarray, list[str]]
    cit: tuple[np.ndarray, list[str]]
    src: np.ndarray | None = None


def _roles(rows: _TaskRows, strings: dict, keep: np.ndarray) -> _Roles:
    """Classify the tasks (see the module's docstring): string columns as codes per task,
    their flags computed once per distinct value."""
    tt_codes, tt_txt = _codes(rows.ttype, strings)
    cit_codes, cit_txt = _codes(rows.ci_ttype, strings)
    tt_up = [t.upper() for t in tt_txt]
    is_wait = value_flags(tt_up, lambda t: "EVENT_WAIT" in t)[tt_codes]
    is_dma = value_flags(tt_up, lambda t: "SDMA" in t or "MEMCPY" in t or "PCIE_DMA" in t)[tt_codes]
    is_marker = value_flags(tt_up, lambda t: t.startswith(_MARKERS))[tt_codes]
    has_ci = _ints(rows.has_ci) > 0
    has_cm = _ints(rows.has_cm) > 0
    ci_hccl = has_ci & value_flags(cit_txt, is_hccl_task_type)[cit_codes]
    tied = ((has_cm | ci_hccl | (_ints(rows.linked) > 0)
             | value_flags(tt_txt, is_hccl_task_type)[tt_codes]) & ~is_wait)
    work = keep & ~is_wait & ~is_marker
    comm_small = tied | (work & _on_hccl_stream(_ints(rows.stream), tied & keep,
                                                work & ~tied & (has_ci | is_dma)))
    return _Roles(is_wait=is_wait, has_ci=has_ci, has_cm=has_cm,
                  compute=has_ci & ~comm_small & ~is_wait, comm_small=comm_small,
                  dma=is_dma & ~has_ci & ~comm_small & ~is_wait,
                  tt=(tt_codes, tt_txt), cit=(cit_codes, cit_txt))


def _op_columns(rows: _TaskRows, strings: dict, roles: _Roles,
                picked: tuple[np.ndarray, np.ndarray], times: tuple[np.ndarray, np.ndarray],
                comm_rows: list["_CommOp"]):
    """The op and wait columns (steps aside) of the picked tasks (``picked``: op and wait
    task indices) followed by the whole collectives, and their lane, name and type texts.
    Lanes are stream ids as text, whole collectives on the comm lane."""
    idx, widx = picked
    start, end = times
    stream = _ints(rows.stream)
    (name_c, name_txt), (type_c, type_txt), kind, core = _op_labels(rows, strings, roles, idx)
    used = np.unique(np.concatenate([stream[idx], stream[widx]]))
    labels = [str(int(v)) for v in used]
    op_lane = np.searchsorted(used, stream[idx]).astype(np.int32)
    wait_lane = np.searchsorted(used, stream[widx]).astype(np.int32)
    n_comm = len(comm_rows)
    if n_comm:
        labels.append(COMM_LANE)
        op_lane = np.concatenate([op_lane, np.full(n_comm, len(labels) - 1, np.int32)])
    # names: op names, whole-collective names, wait names, interned together
    tt_codes, tt_txt = roles.tt
    wait_u, wait_c = np.unique(tt_codes[widx], return_inverse=True)
    wait_txt = [tt_txt[u] or "EVENT_WAIT" for u in wait_u.tolist()]
    names, (name_c, comm_name_c, wait_c) = _merge_used(
        [(name_c, name_txt), _intern([r[0] for r in comm_rows], {}), (wait_c, wait_txt)])
    types, (type_c, comm_type_c) = _merge_used(
        [(type_c, type_txt), _intern([r[1] for r in comm_rows], {})])
    ops = dict(
        stream=op_lane, name=np.concatenate([name_c, comm_name_c]),
        type=np.concatenate([type_c, comm_type_c]),
        start_ns=np.concatenate([start[idx], np.array([r[2] for r in comm_rows], np.int64)]),
        end_ns=np.concatenate([end[idx], np.array([r[3] for r in comm_rows], np.int64)]),
        kind=np.concatenate([kind, np.full(n_comm, KIND_COMM, np.int8)]),
        core=np.concatenate([core, np.full(n_comm, core_code("HCCL"), np.int8)]),
        block_dim=_dims(rows.ci_block, idx, n_comm), mix_block_dim=_dims(rows.ci_mix, idx, n_comm),
    )
    waits = dict(wait_stream=wait_lane, wait_on=np.full(len(widx), -1, np.int32),
                 wait_start_ns=start[widx], wait_end_ns=end[widx], wait_name=wait_c)
    return ops, waits, labels, names, types


def _op_labels(rows: _TaskRows, strings: dict, roles: _Roles, idx: np.ndarray):
    """Per op (task ``idx``): (name codes, texts), (type codes, texts), kind and core,
    from its compute info, else its communication info, else its task type. Sets
    ``roles.src``."""
    tt = roles.tt
    has_cm, has_ci = roles.has_cm[idx], roles.has_ci[idx]
    src = np.where(roles.compute[idx], 0, np.where(roles.comm_small[idx], 1, 2))
    roles.src = src
    name_c, name_txt = _pick3(src, [_codes(rows.ci_name, strings), _codes(rows.cm_name, strings),
                                    tt], idx, has_cm, has_ci)
    type_c, type_txt = _pick3(src, [_codes(rows.ci_optype, strings),
                                    _codes(rows.cm_ttype, strings), tt], idx, has_cm, has_ci)
    cit_codes, cit_txt = roles.cit
    core_ci = np.array([core_code(t) for t in cit_txt], np.int8)[cit_codes[idx]]
    core_tt = np.array([core_code(t) for t in tt[1]], np.int8)[tt[0][idx]]
    core = np.where(core_ci > 0, core_ci, core_tt).astype(np.int8)
    core[src == 1] = core_code("HCCL")
    core[src == 2] = core_code("DMA")
    kind = np.full(len(idx), KIND_COMPUTE, np.int8)
    memset = (value_flags(name_txt, is_memset_text)[name_c]
              | value_flags(type_txt, is_memset_text)[type_c])
    memcpy = (value_flags(name_txt, is_memcpy_text)[name_c]
              | value_flags(type_txt, is_memcpy_text)[type_c])
    kind[memcpy] = KIND_MEMCPY
    kind[memset] = KIND_MEMSET
    kind[src == 2] = KIND_MEMCPY
    kind[src == 1] = KIND_COMM
    return (name_c, name_txt), (type_c, type_txt), kind, core


def _merge_used(parts: list[tuple[np.ndarray, list[str]]]
                ) -> tuple[list[str], list[np.ndarray]]:
    """:func:`_merge`, keeping only the texts some code uses (after rows were skipped)."""
    texts, codes = _merge(parts)
    sizes = np.cumsum([len(c) for c in codes])[:-1]
    used, texts = _drop_unused(np.concatenate(codes).astype(np.int32), texts)
    return texts, np.split(used, sizes)


def _merge_small_tasks(ops: dict, shapes: list[str] | None, rows: _TaskRows, roles: _Roles,
                       idx: np.ndarray, texts: tuple[list[str], list[str]], meta: dict):
    """No whole collectives: each one's small tasks (same op id, else connection id)
    become one op; returns the new columns and shapes."""
    opid, conn = _ints(rows.cm_opid)[idx], _ints(rows.conn)[idx]
    key = np.where(opid >= 0, opid, np.where(conn >= 0, conn + (1 << 40), -1))
    ops, kept, merged = merge_collectives(ops, roles.src == 1, key, *texts)
    if merged:
        meta["ascend_hccl_tasks_merged"] = merged
        if shapes is not None:
            shapes = [sh for sh, k in zip(shapes, kept) if k]
    return ops, shapes


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


class _CommOp(NamedTuple):
    """One whole collective of COMMUNICATION_OP: its name and type as text, its span, its
    group's name and its message size in bytes (-1 unknown)."""

    name: str
    type: str
    start: int
    end: int
    group: str
    nbytes: int


def _comm_ops(con, tables, strings, device, t_gid, task) -> list[_CommOp]:
    """Whole collectives from COMMUNICATION_OP."""
    if "COMMUNICATION_OP" not in tables:
        return []
    co = _Cols(con, "COMMUNICATION_OP")
    c_start, c_end = co.pick("startNs", "start"), co.pick("endNs", "end")
    if not c_start or not c_end:
        return []
    sql = (f'SELECT {co.expr("o", "opName", "name")}, {co.expr("o", "opType")}, '
           f'o."{c_start}", o."{c_end}", {co.expr("o", "groupName", "group")}, '
           f'{co.expr("o", "dataType")}, {co.expr("o", "count")} FROM COMMUNICATION_OP o')
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
    groups = _text([r[4] for r in raw], strings)
    sizes = _hccl_dtype_sizes(con, tables)
    for r, nm, ty, grp in zip(raw, names, types, groups):
        if r[2] is None or r[3] is None:
            continue
        width, count = sizes.get(_int_or(r[5], -1), -1), _int_or(r[6], -1)
        nbytes = width * count if width > 0 and count >= 0 else -1
        out.append(_CommOp(nm, ty, int(r[2]), int(r[3]), grp, nbytes))
    return out


def _hccl_dtype_sizes(con, tables) -> dict[int, int]:
    """ENUM_HCCL_DATA_TYPE id -> bytes per element (the known types only)."""
    if "ENUM_HCCL_DATA_TYPE" not in tables:
        return {}
    cols = _Cols(con, "ENUM_HCCL_DATA_TYPE")
    cid, cname = cols.pick("id"), cols.pick("name")
    if not cid or not cname:
        return {}
    out = {}
    for i, name in con.execute(f'SELECT "{cid}", "{cname}" FROM ENUM_HCCL_DATA_TYPE'):
        width = dtype_bytes(str(name))
        if width > 0:
            out[_int_or(i, -1)] = width
    return out


def _collectives(comm_rows: list[_CommOp]) -> Collectives | None:
    """The whole collectives as a :class:`Collectives` table: ``key`` the op name (the
    same on every rank of the group), ``group`` the group's name, ``nbytes`` elements
    times the data type's size."""
    if not comm_rows:
        return None
    names = [r.name for r in comm_rows]
    return make_collectives(names, [r.group for r in comm_rows],
                            np.array([r.start for r in comm_rows], np.int64),
                            np.array([r.end for r in comm_rows], np.int64), key=names,
                            nbytes=[r.nbytes for r in comm_rows])


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
