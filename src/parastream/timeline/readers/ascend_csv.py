"""Ascend ``kernel_details.csv`` (torch_npu) and msprof ``op_summary_*.csv`` reader.

Both files hold one row per device task with the same facts under different column
names; the header decides which one a file is. Reading is columnar end to end (pyarrow
CSV, only the needed columns, all as text; numpy for the rest): no Python work per
row. The file is read block by block, each block turned at once into compact columns
(text as codes, times as ns), so memory grows with the rows kept, not with the file's size
or width. Epoch start times are parsed from their decimal text into exact integer
nanoseconds, never through a float64.

``Timeline.collectives`` holds the whole collectives (``hcom_*`` rows): ``key`` the op
name, ``group`` its group field (see :func:`.hccl.hcom_group`).

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
                   merge_collectives, timeline_collectives)
from ..model import (
    COMM_LANE, KIND_COMM, KIND_COMPUTE, KIND_MEMCPY, KIND_MEMSET, DeviceInfo, Interner,
    Timeline, core_code, make_timeline, value_flags,
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
        good = pc.fill_null(pc.match_substring_regex(s, r"^[+-]?\d{1,18}$"), False)
        v = pc.cast(pc.if_else(good, s, None), pa.int64())
    out = pc.fill_null(v, -1).to_numpy(zero_copy_only=False)
    return np.clip(out, -1, np.iinfo(np.int32).max).astype(np.int32)


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
#: bytes of CSV text parsed at a time; each block becomes compact per-row columns at once.
#: Arrow's streaming reader reads up to 32 blocks ahead, so this also bounds its buffers.
_BLOCK_SIZE = 1 << 20


def _batches(path: str, include: list[str], newlines: bool):
    """The file's record batches of the ``include`` columns, all as text."""
    convert = pacsv.ConvertOptions(
        include_columns=include, column_types={c: pa.string() for c in include},
        strings_can_be_null=True, null_values=_NULLS)
    reader = pacsv.open_csv(
        path, read_options=pacsv.ReadOptions(block_size=_BLOCK_SIZE),
        parse_options=pacsv.ParseOptions(newlines_in_values=newlines),
        convert_options=convert)
    for batch in reader:
        yield batch


def _scan(path: str, cols: dict[str, str]) -> "_Rows":
    """Read the file block by block into :class:`_Rows` (text as codes, times as ns, rows
    without a usable time dropped as they come); a value spanning lines is retried with
    ``newlines_in_values``."""
    include = sorted(set(cols.values()))
    last: Exception | None = None
    for newlines in (False, True):
        rows = _Rows(cols)
        try:
            for batch in _batches(path, include, newlines):
                rows.add(batch)
            return rows
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


class _Codes:
    """A text column over all blocks: per-row codes into ``values`` (first seen, first
    coded), -1 for a missing value."""

    def __init__(self) -> None:
        self.interner = Interner()
        self.parts: list[np.ndarray] = []

    def add(self, col: pa.Array) -> None:
        enc = pc.dictionary_encode(col)
        remap = np.array([self.interner.code(str(v)) for v in enc.dictionary.to_pylist()]
                         + [-1], np.int32)
        idx = pc.fill_null(enc.indices, -1).to_numpy(zero_copy_only=False)
        self.parts.append(remap[idx])

    def take(self, keep: np.ndarray) -> tuple[np.ndarray, list[str]]:
        """The kept rows' codes renumbered in first-seen order among them, and the
        values they use (what a dictionary encoding of the kept rows alone gives)."""
        codes = _concat(self.parts, np.int32)
        self.parts = []
        if keep.all():  # codes were given in first-seen order, to values kept rows hold
            return codes, list(self.interner.values)
        codes = codes[keep]
        uniq, first = np.unique(codes, return_index=True)
        order = uniq[np.argsort(first, kind="stable")]
        lut = np.zeros(len(self.interner.values) + 1, np.int32)
        lut[order] = np.arange(len(order), dtype=np.int32)
        return lut[codes], [self.interner.values[c] for c in order.tolist()]


def _concat(parts: list[np.ndarray], dtype) -> np.ndarray:
    return np.concatenate(parts) if parts else np.zeros(0, dtype)


class _Rows:
    """The file's rows with a usable time, column by column, as compact arrays; per device
    code (-1: none) how many rows it has and how many of those had no usable time."""

    _TEXT = ("stream", "name", "type", "core", "shapes")
    _INTS = ("block", "mix", "step")

    def __init__(self, cols: dict[str, str]) -> None:
        self.cols = cols
        self.n = 0
        self.text = {k: _Codes() for k in self._TEXT if k in cols or k in ("type", "core")}
        self.device = _Codes()
        # start, dur (int64 ns), no_stream (bool), block, mix, step (int32): per block
        self.nums: dict[str, list[np.ndarray]] = {
            k: [] for k in ("start", "dur", "no_stream") + self._INTS}
        self.dev_rows = np.zeros(1, np.int64)  # index: device code + 1
        self.dev_bad = np.zeros(1, np.int64)
        self.kept_device: int | None = None

    def add(self, batch: pa.RecordBatch) -> None:
        n = batch.num_rows
        if not n:
            return
        self.n += n
        cols = self.cols
        start_ns, ok_start = us_column_to_ns(batch.column(cols["start"]))
        dur_ns, ok_dur = us_column_to_ns(batch.column(cols["dur"]))
        ok = ok_start & ok_dur & (dur_ns >= 0)
        dev = self._device(batch, n)
        self._count_devices(dev, ok)
        good = pa.array(ok) if not ok.all() else None
        if good is not None:
            batch = batch.filter(good)
            start_ns, dur_ns, dev = start_ns[ok], dur_ns[ok], dev[ok]
        self.nums["start"].append(start_ns)
        self.nums["dur"].append(dur_ns)
        self.device.parts[-1] = dev
        self._add_text(batch)

    def _device(self, batch: pa.RecordBatch, n: int) -> np.ndarray:
        if "device" not in self.cols:
            self.device.parts.append(np.full(n, -1, np.int32))
        else:
            self.device.add(_trim(batch.column(self.cols["device"])))
        return self.device.parts[-1]

    def _count_devices(self, dev: np.ndarray, ok: np.ndarray) -> None:
        size = len(self.device.interner.values) + 1
        rows = np.bincount(dev + 1, minlength=size)
        bad = np.bincount(dev[~ok] + 1, minlength=size)
        self.dev_rows = np.pad(self.dev_rows, (0, size - len(self.dev_rows))) + rows
        self.dev_bad = np.pad(self.dev_bad, (0, size - len(self.dev_bad))) + bad

    def _add_text(self, batch: pa.RecordBatch) -> None:
        """The kept rows' stream, name, type, core, shapes and integer columns."""
        n, cols = batch.num_rows, self.cols
        stream_txt = _trim(batch.column(cols["stream"]))
        no_stream = pc.fill_null(pc.equal(pc.utf8_upper(stream_txt), "N/A"), True)
        self.text["stream"].add(pc.if_else(no_stream, COMM_LANE, stream_txt))
        self.nums["no_stream"].append(np.asarray(no_stream.to_numpy(zero_copy_only=False), bool))
        for key, codes in self.text.items():
            if key == "stream":
                continue
            if key in cols:
                codes.add(pc.fill_null(_trim(batch.column(cols[key])), ""))
            else:
                codes.add(pc.fill_null(pa.nulls(n, pa.string()), ""))
        for key in self._INTS:
            col = batch.column(cols[key]) if key in cols else None
            self.nums[key].append(_int_column(col, n))

    def pop(self, key: str, keep: np.ndarray) -> np.ndarray:
        """A numeric column's kept rows, its blocks released."""
        dtype = {"start": np.int64, "dur": np.int64, "no_stream": bool}.get(key, np.int32)
        col = _concat(self.nums.pop(key), dtype)
        return col if keep.all() else col[keep]


def read(path: str | os.PathLike[str]) -> Timeline:
    """Read a ``kernel_details.csv`` or ``op_summary_*.csv`` into a :class:`Timeline`.

    The file is read block by block (:data:`_BLOCK_SIZE` bytes of text at a time), each
    block turned at once into compact per-row columns (codes, integer ns), so peak memory
    grows with the rows kept, not with the file's size or width; the result does not
    depend on the block size."""
    path = os.fspath(path)
    fields = _header(path)
    fmt = _which(fields) or KERNEL_DETAILS
    rows = _scan(path, _columns(path, fields, fmt))
    warnings: list[str] = []
    meta: dict = {}
    if rows.n == 0:
        raise InputError(path, "no usable rows (the file has a header and no data)")
    keep = _one_device(rows, warnings, meta)
    _check_timed(path, rows, keep, warnings)
    stream_codes, streams = rows.text["stream"].take(keep)
    no_stream = rows.pop("no_stream", keep)
    name_codes, names = rows.text["name"].take(keep)
    type_codes, types = rows.text["type"].take(keep)
    core_codes, cores = rows.text["core"].take(keep)
    comm = (value_flags(cores, is_hccl_task_type)[core_codes]
            | value_flags(types, is_hccl_task_type)[type_codes]
            | value_flags(names, _is_comm_name)[name_codes] | no_stream)
    comm |= _on_hccl_stream(stream_codes, len(streams), comm)
    kind, core = _kind_and_core((type_codes, types), (core_codes, cores), comm)
    start_ns = rows.pop("start", keep)
    ops = dict(stream=stream_codes, name=name_codes, type=type_codes, start_ns=start_ns,
               end_ns=start_ns + rows.pop("dur", keep), kind=kind, core=core,
               block_dim=rows.pop("block", keep), mix_block_dim=rows.pop("mix", keep),
               step=rows.pop("step", keep))
    shapes = None
    if "shapes" in rows.text:
        shape_codes, shape_txt = rows.text["shapes"].take(keep)
        shapes = np.array(shape_txt + [""], dtype=object)[shape_codes]
    small = comm & ~no_stream & ~value_flags(names, is_collective_name)[name_codes]
    if small.any():
        ops, shapes = _fold_small_tasks(ops, shapes, small, comm & ~small, names, types, meta)
    tl = make_timeline(path, fmt, streams, names, types, ops, shapes=shapes,
                       device=DeviceInfo(), warnings=warnings, meta=meta)
    tl.collectives = timeline_collectives(tl)
    return tl


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


def _one_device(rows: _Rows, warnings: list[str], meta: dict) -> np.ndarray:
    """One capture is one device: per row read whether it is of the most common
    ``Device_id`` (rows without one are kept), with a warning naming the devices skipped;
    sets ``rows.kept_device`` (its code, None when the file names no device)."""
    dev = _concat(rows.device.parts, np.int32)
    values = rows.device.interner.values
    counts = [(c, values[i]) for i, c in enumerate(rows.dev_rows[1:].tolist()) if c]
    if not counts:
        return np.ones(len(dev), bool)
    counts.sort(key=lambda c: (-c[0], str(c[1])))
    n_keep, keep = counts[0]
    meta["device_id"] = int(keep) if str(keep).lstrip("-").isdigit() else keep
    if len(counts) == 1:
        return np.ones(len(dev), bool)
    others = ", ".join(f"{v} ({c} rows)" for c, v in counts[1:])
    warnings.append(f"the file holds several devices; kept device {keep} "
                    f"({n_keep} rows), skipped device(s) {others}")
    rows.kept_device = values.index(keep)
    return (dev == rows.kept_device) | (dev < 0)


def _check_timed(path: str, rows: _Rows, keep: np.ndarray, warnings: list[str]) -> None:
    """Warn about the rows of the kept device (and those without one) skipped for their
    time (missing, NaN or negative duration, unparseable start); InputError when none of
    them has a usable time."""
    slots = (slice(None) if rows.kept_device is None else [0, rows.kept_device + 1])
    n = int(rows.dev_rows[slots].sum())
    n_bad = int(rows.dev_bad[slots].sum())
    if not keep.any():
        raise InputError(path, f"no usable rows (none of {n} row(s) has a parseable start time "
                               "and a non-negative duration)")
    if n_bad:
        warnings.append(f"skipped {n_bad} row(s) with a missing, NaN or negative duration "
                        "or an unparseable start time")


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
