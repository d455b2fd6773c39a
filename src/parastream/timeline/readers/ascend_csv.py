"""Ascend ``kernel_details.csv`` (torch_npu) and msprof ``op_summary_*.csv`` reader.

Both files hold one row per device task with the same facts under different column
names; the header decides which one a file is. Reading is columnar end to end (pyarrow
CSV, only the needed columns, all as text; numpy for the rest): no Python work per
row. Epoch start times are parsed from their decimal text
into exact integer nanoseconds, never through a float64.

Communication is what the file says it is, never the busiest stream: a row is
communication when its ``Accelerator Core``/``Task Type`` or ``Type`` is HCCL's (``HCCL``,
``COMMUNICATION``, or a task type only HCCL issues such as ``Notify Wait``; see
:mod:`.hccl`), when its name is a collective's (``hcom_*``, ``hccl*``), or when its stream
id is ``N/A`` (how torch_npu writes whole collectives; they go to the
:data:`~parastream.timeline.model.COMM_LANE` lane). Rows of HCCL's small tasks on a real
stream (communication rows not named as a collective) are folded away when the file also
has whole collectives (counted in ``meta["ascend_hccl_tasks_folded"]``); otherwise each
collective's small tasks (overlapping on one stream) are merged into one communication op,
since they overlap each other by design and are not corrupt compute
(``meta["ascend_hccl_tasks_merged"]``). On a stream where communication rows are at least
half of the rows, every row is communication (HCCL owns that stream).

Quirks handled: ``Block Dim``/``Block Num`` spellings, absent ``Step Id``/``OP State``/
``Device_id``, start times quoted with a trailing TAB, several devices in one file (the
most common one is kept), and rows with a NaN, negative or unparseable time (skipped, with
a warning that counts them). profiler level Level0 writes no ``Stream ID`` column: such a
file is refused (a directory then falls back to ``trace_view.json``).
"""

from __future__ import annotations

import csv
import os

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

from ...errors import InputError
from ..timeparse import trim_text as _trim
from ..timeparse import us_column_to_ns
from .hccl import (is_collective_name, is_hccl_task_type, is_memcpy_text, is_memset_text,
                   merge_collectives)
from ..model import (
    COMM_LANE, KIND_COMM, KIND_COMPUTE, KIND_MEMCPY, KIND_MEMSET, DeviceInfo, Timeline,
    core_code, make_timeline, value_flags,
)

FORMAT = "ascend_csv"
KERNEL_DETAILS = "ascend_kernel_details"
OP_SUMMARY = "msprof_op_summary"

# logical column -> accepted header spellings, per format (first one is named in errors)
_SHARED_COLS = {
    "stream": ("Stream ID", "Stream Id"),
    "block": ("Block Dim", "Block Num"),
    "mix": ("Mix Block Dim", "Mix Block Num"),
    "step": ("Step Id", "Step ID"),
    "device": ("Device_id", "Device ID", "Device Id"),
    "shapes": ("Input Shapes",),
}
_KERNEL_DETAILS_COLS = {
    "name": ("Name",),
    "start": ("Start Time(us)", "Start Time"),
    "dur": ("Duration(us)", "Duration"),
    "type": ("Type", "OP Type"),
    "core": ("Accelerator Core", "Task Type"),
    **_SHARED_COLS,
}
_OP_SUMMARY_COLS = {
    "name": ("Op Name", "OP Name"),
    "start": ("Task Start Time(us)", "Task Start Time"),
    "dur": ("Task Duration(us)", "Task Duration"),
    "type": ("OP Type", "Op Type"),
    "core": ("Task Type", "Accelerator Core"),
    **_SHARED_COLS,
}
_REQUIRED = ("name", "stream", "start", "dur")
_NULLS = ["", "N/A", "n/a", "NA", "null", "NULL", "None"]
_HEADER_MAX = 1 << 20


# ------------------------------------------------------------------------- header
def _norm(name: str) -> str:
    return name.strip().strip('"').strip().lower()


def _header_fields(head: bytes) -> list[str] | None:
    """The header cells of CSV text, or None when ``head`` has no complete first line."""
    if head.startswith(b"\xef\xbb\xbf"):
        head = head[3:]
    end = head.find(b"\n")
    line = head if end < 0 else head[:end]
    text = line.decode("utf-8", errors="replace").rstrip("\r")
    if not text or text.lstrip()[:1] in ("{", "["):
        return None
    try:
        return next(csv.reader([text]))
    except (csv.Error, StopIteration):
        return None


def _which(fields: list[str]) -> str | None:
    have = {_norm(f) for f in fields}

    def has(spellings: tuple[str, ...]) -> bool:
        return any(_norm(s) in have for s in spellings)

    if has(_OP_SUMMARY_COLS["name"]) and has(_OP_SUMMARY_COLS["start"]):
        return OP_SUMMARY
    if has(_KERNEL_DETAILS_COLS["name"]) and has(_KERNEL_DETAILS_COLS["start"]):
        return KERNEL_DETAILS
    return None


def sniff(head: bytes) -> bool:
    """A CSV whose header names a kernel/op name column and a start-time column."""
    fields = _header_fields(head)
    return bool(fields) and _which(fields) is not None


def _resolve(fields: list[str], spec: dict) -> dict[str, str]:
    """Logical column -> the header cell it is spelled as in this file."""
    by_norm: dict[str, str] = {}
    for f in fields:
        by_norm.setdefault(_norm(f), f)
    out = {}
    for key, spellings in spec.items():
        for s in spellings:
            if _norm(s) in by_norm:
                out[key] = by_norm[_norm(s)]
                break
    return out


# ------------------------------------------------------------------ column parsing
def _int_column(col: pa.ChunkedArray | pa.Array | None, n: int) -> np.ndarray:
    """Integer text -> int32, -1 where missing, ``N/A`` or not an integer."""
    if col is None:
        return np.full(n, -1, np.int32)
    s = _trim(col)
    try:
        v = pc.cast(s, pa.int64())
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        s = pc.replace_substring_regex(s, r"\.0*$", "")
        good = pc.fill_null(pc.match_substring_regex(s, r"^[+-]?\d{1,9}$"), False)
        v = pc.cast(pc.if_else(good, s, None), pa.int64())
    out = pc.fill_null(v, -1).to_numpy(zero_copy_only=False)
    return np.clip(out, -1, np.iinfo(np.int32).max).astype(np.int32)


def _encode(col: pa.Array) -> tuple[np.ndarray, list[str]]:
    """Dictionary-encode a string column: (int32 codes, values)."""
    enc = pc.dictionary_encode(col)
    enc = enc.combine_chunks() if isinstance(enc, pa.ChunkedArray) else enc
    codes = enc.indices.to_numpy(zero_copy_only=False).astype(np.int32, copy=False)
    return codes, [str(v) for v in enc.dictionary.to_pylist()]


def _is_comm_name(v: str) -> bool:
    return is_collective_name(v) or "hccl" in v.lower()


def _on_hccl_stream(stream_codes: np.ndarray, n_streams: int, comm: np.ndarray) -> np.ndarray:
    """Per row: whether its stream is HCCL's (communication rows are at least half of it)."""
    if not comm.any():
        return np.zeros(len(comm), bool)
    n_comm = np.bincount(stream_codes, weights=comm, minlength=n_streams)
    n_all = np.bincount(stream_codes, minlength=n_streams)
    return (2 * n_comm >= n_all)[stream_codes]


def _fold_small_tasks(ops: dict, shapes, small: np.ndarray, whole: np.ndarray,
                      names: list[str], types: list[str], meta: dict):
    """HCCL small-task rows: dropped when whole collectives are there, else merged per
    collective. Returns the new columns and shapes."""
    if whole.any():
        keep = ~small
        meta["ascend_hccl_tasks_folded"] = int(small.sum())
    else:
        ops, keep, merged = merge_collectives(ops, small, np.full(len(small), -1), names, types)
        if not merged:
            return ops, shapes
        meta["ascend_hccl_tasks_merged"] = merged
        return ops, (shapes[keep] if shapes is not None else None)
    return ({k: v[keep] for k, v in ops.items()},
            shapes[keep] if shapes is not None else None)


# ---------------------------------------------------------------------------- read
def _read_table(path: str, include: list[str]) -> pa.Table:
    convert = pacsv.ConvertOptions(
        include_columns=include, column_types={c: pa.string() for c in include},
        strings_can_be_null=True, null_values=_NULLS)
    last: Exception | None = None
    for newlines in (False, True):
        try:
            return pacsv.read_csv(
                path, read_options=pacsv.ReadOptions(block_size=8 << 20),
                parse_options=pacsv.ParseOptions(newlines_in_values=newlines),
                convert_options=convert)
        except pa.ArrowInvalid as exc:
            msg = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            if "utf8" in msg.lower() or "utf-8" in msg.lower():
                raise InputError(path, "not UTF-8 text: the CSV holds bytes that are not "
                                       "valid UTF-8 (re-export it as UTF-8)") from None
            last = InputError(path, f"cannot parse CSV: {msg}")
        except (OSError, pa.ArrowException) as exc:
            raise InputError(path, f"cannot read: {exc}") from None
    assert last is not None
    raise last


def read(path: str | os.PathLike[str]) -> Timeline:
    """Read a ``kernel_details.csv`` or ``op_summary_*.csv`` into a :class:`Timeline`."""
    path = os.fspath(path)
    fields = _header(path)
    fmt = _which(fields) or KERNEL_DETAILS
    cols = _columns(path, fields, fmt)
    table = _read_table(path, sorted(set(cols.values())))
    warnings: list[str] = []
    meta: dict = {}
    if table.num_rows == 0:
        raise InputError(path, "no usable rows (the file has a header and no data)")
    table = _one_device(table, cols, warnings, meta)
    table, start_ns, dur_ns = _timed_rows(path, table, cols, warnings)
    n = table.num_rows

    def col(key: str):
        return table[cols[key]] if key in cols else None

    stream_txt = _trim(col("stream"))
    no_stream = pc.fill_null(pc.equal(pc.utf8_upper(stream_txt), "N/A"), True)
    stream_codes, streams = _encode(pc.if_else(no_stream, COMM_LANE, stream_txt))
    no_stream = np.asarray(no_stream.to_numpy(zero_copy_only=False), bool)
    name_codes, names = _encode(pc.fill_null(_trim(col("name")), ""))
    type_codes, types = _encode_or_blank(col("type"), n)
    core_codes, cores = _encode_or_blank(col("core"), n)
    comm = (value_flags(cores, is_hccl_task_type)[core_codes]
            | value_flags(types, is_hccl_task_type)[type_codes]
            | value_flags(names, _is_comm_name)[name_codes] | no_stream)
    comm |= _on_hccl_stream(stream_codes, len(streams), comm)
    kind, core = _kind_and_core((type_codes, types), (core_codes, cores), comm)
    ops = dict(stream=stream_codes, name=name_codes, type=type_codes, start_ns=start_ns,
               end_ns=start_ns + dur_ns, kind=kind, core=core,
               block_dim=_int_column(col("block"), n), mix_block_dim=_int_column(col("mix"), n),
               step=_int_column(col("step"), n))
    shapes = None
    if "shapes" in cols:
        shapes = pc.fill_null(_trim(col("shapes")), "").to_numpy(zero_copy_only=False)
    small = comm & ~no_stream & ~value_flags(names, is_collective_name)[name_codes]
    if small.any():
        ops, shapes = _fold_small_tasks(ops, shapes, small, comm & ~small, names, types, meta)
    return make_timeline(path, fmt, streams, names, types, ops, shapes=shapes,
                         device=DeviceInfo(), warnings=warnings, meta=meta)


def _header(path: str) -> list[str]:
    """The header cells of the file; InputError when it is unreadable, not UTF-8 or has
    no header."""
    try:
        with open(path, "rb") as f:
            head = f.read(_HEADER_MAX)
    except OSError as exc:
        raise InputError(path, f"cannot read: {exc}") from None
    body = head[3:] if head.startswith(b"\xef\xbb\xbf") else head
    first = body.split(b"\n", 1)[0]
    try:
        first.decode("utf-8")
    except UnicodeDecodeError:
        raise InputError(path, "not UTF-8 text: the CSV header holds bytes that are not "
                               "valid UTF-8 (re-export it as UTF-8)") from None
    fields = _header_fields(head)
    if not fields:
        raise InputError(path, "empty file or no CSV header")
    return fields


def _columns(path: str, fields: list[str], fmt: str) -> dict[str, str]:
    """Logical column -> header cell for ``fmt``; InputError naming the required columns
    the header lacks."""
    spec = _OP_SUMMARY_COLS if fmt == OP_SUMMARY else _KERNEL_DETAILS_COLS
    cols = _resolve(fields, spec)
    missing = [spec[k][0] for k in _REQUIRED if k not in cols]
    if missing:
        hint = ("; torch_npu's profiler level Level0 writes no Stream ID: read its "
                "trace_view.json or the capture folder instead" if "stream" not in cols else "")
        raise InputError(path, f"missing column(s): {', '.join(missing)} "
                               f"(read as {fmt}; the header has {len(fields)} columns{hint})")
    return cols


def _one_device(table: pa.Table, cols: dict[str, str], warnings: list[str], meta: dict
                ) -> pa.Table:
    """One capture is one device: the rows of the most common ``Device_id`` (and those
    without one), with a warning naming the devices skipped."""
    if "device" not in cols:
        return table
    dev = _trim(table[cols["device"]])
    counts = pc.value_counts(pc.drop_null(dev)).to_pylist()
    if not counts:
        return table
    counts.sort(key=lambda c: (-c["counts"], str(c["values"])))
    keep = counts[0]["values"]
    meta["device_id"] = int(keep) if str(keep).lstrip("-").isdigit() else keep
    if len(counts) > 1:
        others = ", ".join(f"{c['values']} ({c['counts']} rows)" for c in counts[1:])
        warnings.append(f"the file holds several devices; kept device {keep} "
                        f"({counts[0]['counts']} rows), skipped device(s) {others}")
        table = table.filter(pc.fill_null(pc.equal(dev, keep), True))
    return table


def _timed_rows(path: str, table: pa.Table, cols: dict[str, str], warnings: list[str]
                ) -> tuple[pa.Table, np.ndarray, np.ndarray]:
    """The rows with a parseable start and a non-negative duration, and those times in
    ns; InputError when no row has them."""
    n = table.num_rows
    start_ns, ok_start = us_column_to_ns(table[cols["start"]])
    dur_ns, ok_dur = us_column_to_ns(table[cols["dur"]])
    ok = ok_start & ok_dur & (dur_ns >= 0)
    n_ok = int(ok.sum())
    if n_ok == 0:
        raise InputError(path, f"no usable rows (none of {n} row(s) has a parseable start time "
                               "and a non-negative duration)")
    if n_ok < n:
        warnings.append(f"skipped {n - n_ok} row(s) with a missing, NaN or negative duration "
                        "or an unparseable start time")
        # drop them before the text columns are encoded, so no table holds unused values
        table = table.filter(pa.array(ok))
        start_ns, dur_ns = start_ns[ok], dur_ns[ok]
    return table, start_ns, dur_ns


def _encode_or_blank(col, n: int) -> tuple[np.ndarray, list[str]]:
    """A text column dictionary-encoded, or every row "" when the file lacks it."""
    if col is None:
        return np.zeros(n, np.int32), [""]
    return _encode(pc.fill_null(_trim(col), ""))


def _kind_and_core(types: tuple[np.ndarray, list[str]], cores: tuple[np.ndarray, list[str]],
                   comm: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per row: op kind and core code, from the (few) distinct type and core values; a
    communication row without a known core runs on HCCL."""
    (type_codes, type_txt), (core_codes, core_txt) = types, cores
    core = np.array([core_code(c) for c in core_txt], np.int8)[core_codes]
    memset = (value_flags(type_txt, is_memset_text)[type_codes]
              | value_flags(core_txt, is_memset_text)[core_codes])
    memcpy = (value_flags(type_txt, is_memcpy_text)[type_codes]
              | value_flags(core_txt, is_memcpy_text)[core_codes])
    kind = np.full(len(comm), KIND_COMPUTE, np.int8)
    kind[memcpy] = KIND_MEMCPY
    kind[memset] = KIND_MEMSET
    kind[comm] = KIND_COMM
    core[comm & (core == 0)] = core_code("HCCL")
    return kind, core
