"""What an Ascend rank measured about its own communication: ``communication.json``,
``communication_matrix.json`` and their ``analysis.db`` tables.

torch_npu (profiler level Level1 and above) writes, per rank, beside ``kernel_details.csv``:

* ``communication.json``: ``{step: {"collective"|"p2p": {"<op>@<group>": {"Communication
  Time Info": {"Start Timestamp(us)", "Elapse Time(ms)", "Transit Time(ms)", "Wait
  Time(ms)", "Synchronization Time(ms)", "Idle Time(ms)", ...}, "Communication Bandwidth
  Info": {transport: {"Transit Size(MB)", "Transit Time(ms)", "Bandwidth(GB/s)", "Size
  Distribution"}}}}}}``. ``<op>`` is the HCCL op name (``hcom_allReduce__586_0_1``), the
  same string on every rank of the group; ``<group>`` the group's hash. msprof-analyze's
  ``cluster_communication.json`` nests the same records one level deeper, per rank
  (``{"(0, 1)": {step: {"<op>@<group>": {rank: {...}}}}}``): both are read;
* ``communication_matrix.json``: ``{step: {"collective"|"p2p": {"<op>@<group>":
  {"<src>-<dst>": {"Transport Type", "Transit Size(MB)", "Transit Time(ms)",
  "Bandwidth(GB/s)", "Op Name"}}}}}``, where ``<op>`` is an aggregate such as
  ``allreduce-top1`` or ``allreduce-total`` or an op name;
* ``analysis.db`` (database export): the same facts in ``CommAnalyzerTime`` and
  ``CommAnalyzerMatrix``.

``profiler_metadata.json`` (newer torch_npu) holds ``parallel_group_info``: per HCCL
group name (the group of ``communication.json`` and of the database's ops), its
``group_name`` (``dp``, ``tp`` ...), this rank's ``group_rank`` and the group's
``global_ranks``; they become the collectives' ``group_ranks``, so that a matrix written in
group-local ranks maps to global ones.

"Wait Time" is the rank's own measurement of how long it waited for its peers; the
cross-rank analysis can check its estimate from the collectives' start times against it.
Sizes are decimal megabytes (10**6 bytes), times milliseconds, start times epoch
microseconds (parsed exactly, as text). Records without a start time (``Total Op Info``)
are not ops and are skipped.
"""

from __future__ import annotations

import json
import math
import os
import sqlite3
from dataclasses import replace
from typing import Any, Iterator, NamedTuple

from ...errors import InputError
from ..collectives import Collectives
from ..model import Timeline
from ..timeparse import us_text_to_ns

COMM_JSON = "communication.json"
MATRIX_JSON = "communication_matrix.json"
CLUSTER_COMM_JSON = "cluster_communication.json"
CLUSTER_MATRIX_JSON = "cluster_communication_matrix.json"
METADATA_JSON = "profiler_metadata.json"
ANALYSIS_DB = "analysis.db"
_TIME_INFO = "Communication Time Info"
_OUTPUT_DIR = "ASCEND_PROFILER_OUTPUT"
_KINDS = ("collective", "p2p")


class CommOp(NamedTuple):
    """One HCCL op as one rank measured it (times in integer ns; -1 where not recorded).
    ``rank`` is the rank the record is of where the file says (cluster files), else -1."""

    key: str
    group: str
    kind: str
    step: str
    rank: int
    start_ns: int
    elapse_ns: int
    transit_ns: int
    wait_ns: int
    sync_ns: int
    idle_ns: int


class MatrixRow(NamedTuple):
    """One link of the communication matrix: ``op`` as the source names it (an aggregate
    such as ``allreduce-top1`` or an op name), ``op_name`` the HCCL op it came from where
    recorded, bytes moved from ``src`` to ``dst`` over ``transport`` in ``time_ns``.
    ``src``/``dst`` are the ranks as the file writes them: ranks within ``group`` (equal
    to the global ranks only for a group of every rank)."""

    op: str
    src: int
    dst: int
    transport: str
    bytes: int
    time_ns: int
    bandwidth_gbps: float
    group: str
    step: str
    op_name: str


# ----------------------------------------------------------------------------- numbers
def _millions(value: Any) -> int:
    """A figure in a unit a million times the one kept (milliseconds -> ns, decimal MB ->
    bytes), number or text, as an integer; -1 when not a finite number."""
    v = _float(value)
    return int(round(v * 1e6)) if math.isfinite(v) else -1


def _us_ns(value: Any) -> int:
    """Epoch microseconds (JSON number read as text, or a number) -> exact ns; -1 bad."""
    try:
        return us_text_to_ns(str(value))
    except (ValueError, OverflowError):
        return -1


def _float(value: Any) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return float("nan")


def _int(value: Any) -> int:
    try:
        return int(str(value).strip())
    except ValueError:
        return -1


def _split_op(text: str) -> tuple[str, str]:
    """``"hcom_allReduce__586_0_1@17522688603477080586"`` -> (op, group)."""
    op, _, group = str(text).partition("@")
    return op, group


# -------------------------------------------------------------------------------- json
def _load_json(path: str) -> Any:
    """A JSON file with its fractional numbers kept as text (exact start times)."""
    try:
        with open(path, "rb") as f:
            return json.load(f, parse_float=str)
    except OSError as exc:
        raise InputError(path, f"cannot read: {exc}") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise InputError(path, f"not valid JSON: {exc}") from None


def _records(node: Any, marker: str, path: tuple = ()) -> Iterator[tuple[tuple, dict]]:
    """Every dict below ``node`` holding the key ``marker``, with the keys leading to it."""
    if not isinstance(node, dict):
        return
    if marker in node:
        yield path, node
        return
    for k, v in node.items():
        yield from _records(v, marker, path + (str(k),))


def _place(path: tuple) -> tuple[str, str, str]:
    """(step, kind, op element) of a record's key path; the op element is the last key
    that is neither a rank number, a kind nor a step."""
    step = next((p for p in path if p.lower().startswith("step")), "")
    kind = next((p for p in path if p in _KINDS), "")
    rest = [p for p in path if p not in (step, kind) and not p.strip().isdigit()
            and not p.startswith("(")]
    return step, kind, (rest[-1] if rest else "")


def read_communication(path: str | os.PathLike[str]) -> list[CommOp]:
    """The ops of a ``communication.json`` (or ``cluster_communication.json``), in file
    order; InputError when the file cannot be read as JSON."""
    path = os.fspath(path)
    out = []
    for keys, rec in _records(_load_json(path), _TIME_INFO):
        info = rec.get(_TIME_INFO)
        if not isinstance(info, dict) or "Start Timestamp(us)" not in info:
            continue  # "Total Op Info": a sum, not an op
        step, kind, op_text = _place(keys)
        key, group = _split_op(op_text)
        rank = _int(keys[-1]) if keys and keys[-1].strip().isdigit() else -1
        out.append(CommOp(key, group, kind, step, rank, _us_ns(info.get("Start Timestamp(us)")),
                          _millions(info.get("Elapse Time(ms)")), _millions(info.get("Transit Time(ms)")),
                          _millions(info.get("Wait Time(ms)")),
                          _millions(info.get("Synchronization Time(ms)")),
                          _millions(info.get("Idle Time(ms)"))))
    return out


def _links(node: Any, path: tuple = ()) -> Iterator[tuple[tuple, str, dict]]:
    """Every ``"<src>-<dst>": {...}`` link below ``node``, with the keys leading to it."""
    if not isinstance(node, dict):
        return
    for k, v in node.items():
        if isinstance(v, dict) and "Transport Type" in v:
            yield path, str(k), v
        else:
            yield from _links(v, path + (str(k),))


def _matrix_row(op_text: str, link: str, v: dict, step: str) -> MatrixRow | None:
    src, _, dst = link.partition("-")
    op, group = _split_op(op_text)
    if _int(src) < 0 or _int(dst) < 0:
        return None
    return MatrixRow(op, _int(src), _int(dst), str(v.get("Transport Type", "")),
                     _millions(v.get("Transit Size(MB)")), _millions(v.get("Transit Time(ms)")),
                     _float(v.get("Bandwidth(GB/s)")), group, step, str(v.get("Op Name", "")))


def read_matrix(path: str | os.PathLike[str]) -> list[MatrixRow]:
    """The links of a ``communication_matrix.json`` (or msprof-analyze's cluster one), in
    file order; InputError when the file cannot be read as JSON."""
    path = os.fspath(path)
    out = []
    for keys, link, v in _links(_load_json(path)):
        step, _, op_text = _place(keys)
        row = _matrix_row(op_text, link, v, step)
        if row is not None:
            out.append(row)
    return out


# ------------------------------------------------------------------------------ sqlite
def _db_rows(path: str, table: str, columns: tuple[str, ...]) -> list[dict]:
    """Rows of an ``analysis.db`` table as dicts of the columns it has ([] without it)."""
    from .ascend_db import connect_ro

    con = connect_ro(path)
    try:
        have = {r[1].lower(): r[1] for r in con.execute(f'PRAGMA table_info("{table}")')}
        cols = [c for c in columns if c in have]
        if not cols:
            return []
        sql = "SELECT " + ", ".join(f'"{have[c]}"' for c in cols) + f' FROM "{table}"'
        return [dict(zip(cols, r)) for r in con.execute(sql)]
    except sqlite3.Error as exc:
        raise InputError(path, f"cannot query the database: {exc}") from None
    finally:
        con.close()


def read_matrix_db(path: str | os.PathLike[str]) -> list[MatrixRow]:
    """The links of ``analysis.db``'s ``CommAnalyzerMatrix`` table ([] without it)."""
    rows = _db_rows(os.fspath(path), "CommAnalyzerMatrix",
                    ("hccl_op_name", "group_name", "src_rank", "dst_rank", "transport_type",
                     "transit_size", "transit_time", "bandwidth", "step", "op_name"))
    out = []
    for r in rows:
        if _int(r.get("src_rank")) < 0 or _int(r.get("dst_rank")) < 0:
            continue
        out.append(MatrixRow(str(r.get("hccl_op_name") or ""), _int(r.get("src_rank")),
                             _int(r.get("dst_rank")), str(r.get("transport_type") or ""),
                             _millions(r.get("transit_size")), _millions(r.get("transit_time")),
                             _float(r.get("bandwidth")), str(r.get("group_name") or ""),
                             str(r.get("step") or ""), str(r.get("op_name") or "")))
    return out


def read_time_db(path: str | os.PathLike[str]) -> list[CommOp]:
    """The ops of ``analysis.db``'s ``CommAnalyzerTime`` table ([] without it). Its start
    times are stored as floating point, so they are exact only to about a microsecond."""
    rows = _db_rows(os.fspath(path), "CommAnalyzerTime",
                    ("hccl_op_name", "group_name", "start_timestamp", "elapse_time",
                     "transit_time", "wait_time", "synchronization_time", "idle_time", "step",
                     "type"))
    out = []
    for r in rows:
        if r.get("start_timestamp") is None:
            continue
        start = _float(r.get("start_timestamp"))
        out.append(CommOp(str(r.get("hccl_op_name") or ""), str(r.get("group_name") or ""),
                          str(r.get("type") or ""), str(r.get("step") or ""), -1,
                          int(round(start * 1000)) if start == start else -1,
                          _millions(r.get("elapse_time")), _millions(r.get("transit_time")),
                          _millions(r.get("wait_time")), _millions(r.get("synchronization_time")),
                          _millions(r.get("idle_time"))))
    return out


# ------------------------------------------------------------------------ capture level
def _find(capture_dir: str, name: str) -> str | None:
    """``name`` in the capture folder, its ``ASCEND_PROFILER_OUTPUT`` or its
    ``cluster_analysis_output``."""
    for sub in ("", _OUTPUT_DIR, "cluster_analysis_output"):
        p = os.path.join(capture_dir, sub, name)
        if os.path.isfile(p):
            return p
    return None


def read_comm_matrix(capture_dir: str | os.PathLike[str]) -> list[MatrixRow]:
    """The communication matrix a capture records: ``communication_matrix.json``, else
    ``analysis.db``'s ``CommAnalyzerMatrix``; [] when it records none."""
    d = os.fspath(capture_dir)
    for name, read in ((MATRIX_JSON, read_matrix), (CLUSTER_MATRIX_JSON, read_matrix),
                       (ANALYSIS_DB, read_matrix_db)):
        f = _find(d, name)
        if f:
            rows = read(f)
            if rows:
                return rows
    return []


def read_comm_ops(capture_dir: str | os.PathLike[str]) -> list[CommOp]:
    """The HCCL ops a capture measured: ``communication.json``, else ``analysis.db``'s
    ``CommAnalyzerTime``; [] when it records none."""
    d = os.fspath(capture_dir)
    for name, read in ((COMM_JSON, read_communication), (CLUSTER_COMM_JSON, read_communication),
                       (ANALYSIS_DB, read_time_db)):
        f = _find(d, name)
        if f:
            ops = read(f)
            if ops:
                return ops
    return []


def _tolerant(tl: Timeline, read, capture_dir: str) -> list:
    """``read(capture_dir)``, or [] with a warning naming the file it could not read."""
    try:
        return read(capture_dir)
    except InputError as exc:
        tl.warnings.append(f"skipped {exc.path}: {exc.reason}")
        return []


def _full_groups(coll: Collectives, ops: list[CommOp]) -> Collectives:
    """The collectives with each group named as ``ops`` name it, where the reader had only
    the op name's group field (the last digits of the same group's hash)."""
    full = {op.key: op.group for op in ops if op.group}
    groups = coll.group.copy()
    for i, key in enumerate(coll.key.tolist()):
        g = full.get(key)
        if g and str(g).endswith(str(groups[i])):
            groups[i] = g
    return replace(coll, group=groups)


def attach(tl: Timeline, capture_dir: str | os.PathLike[str]) -> None:
    """Put what a capture measured about its communication into the timeline:
    ``tl.meta["comm_matrix"]`` (:func:`read_comm_matrix`'s rows as dicts of
    :class:`MatrixRow`'s fields), ``tl.meta["hccl_wait_ns"]`` (op key -> the rank's own
    "Wait Time" in ns, from :func:`read_comm_ops`; for a cluster file, the records of
    ``tl.meta["rank"]``), and the collectives' full group names. A file that cannot be
    read is skipped with a warning."""
    d = os.fspath(capture_dir)
    matrix = _tolerant(tl, read_comm_matrix, d)
    if matrix:
        tl.meta["comm_matrix"] = [row._asdict() for row in matrix]
    rank = tl.meta.get("rank")
    ops = [op for op in _tolerant(tl, read_comm_ops, d) if op.rank in (-1, rank)]
    waits = {op.key: op.wait_ns for op in ops if op.key and op.wait_ns >= 0}
    if waits:
        tl.meta["hccl_wait_ns"] = waits
    if tl.collectives is not None and len(tl.collectives) and ops:
        tl.collectives = _full_groups(tl.collectives, ops)
    members = _tolerant(tl, read_group_ranks, d)  # [] when unreadable
    if tl.collectives is not None and members:
        tl.collectives = with_group_ranks(tl.collectives, members)


def read_group_ranks(capture_dir: str | os.PathLike[str]) -> dict[str, tuple[int, ...]]:
    """HCCL group name -> the global ranks it holds, from ``profiler_metadata.json``'s
    ``parallel_group_info``; {} when the capture does not record it. InputError naming
    the file when it is not JSON."""
    f = _find(os.fspath(capture_dir), METADATA_JSON)
    if f is None:
        return {}
    try:
        with open(f, "rb") as fh:
            doc = json.loads(fh.read())
    except (OSError, ValueError) as exc:
        raise InputError(f, f"not readable JSON: {exc}") from None
    info = doc.get("parallel_group_info") if isinstance(doc, dict) else None
    if not isinstance(info, dict):
        return {}
    out = {}
    for group, rec in info.items():
        ranks = rec.get("global_ranks") if isinstance(rec, dict) else None
        if isinstance(ranks, list) and all(isinstance(r, int) for r in ranks):
            out[str(group)] = tuple(ranks)
    return out


def with_group_ranks(coll: Collectives, members: dict[str, tuple[int, ...]]) -> Collectives:
    """``coll`` with the ranks of each of its groups that ``members`` names; a group the
    reader knows only by the op name's field (the last digits of the group's hash) takes
    the one group whose name ends with them."""
    known = dict(coll.group_ranks)
    for g in set(coll.group.tolist()):
        if not g or g in known:
            continue
        ends = [k for k in members if k == g or (k.endswith(g) and g.isdigit())]
        if len(ends) == 1:
            known[g] = members[ends[0]]
    return replace(coll, group_ranks=known)
