"""The collective calls one rank's capture holds, as a small column table.

Readers fill a :class:`Collectives` table beside the timeline's op columns (it is not cut
by :meth:`Timeline.select`: it always covers the whole source), so that the same
collective can be matched across ranks by ``(group, op, seq)``:

- ``op``: the collective's kind in one spelling (:func:`normalize_op`), whatever the
  source wrote (``ncclDevKernel_AllReduce_Sum_f32_RING_LL``, ``allreduce``,
  ``hcom_allReduce__606_0_1``);
- ``group``: the process group as the source names it (Kineto's ``Process Group Name``,
  the HCCL group of an Ascend op); "" when the source does not say;
- ``seq``: the call's sequence number within its group where the source records one
  (Kineto's ``Seq``); -1 otherwise, and then the call's order within its group and op
  stands in;
- ``key``: the source's own identity of the call across ranks when it has one (an HCCL
  op name such as ``hcom_allReduce__606_0_1`` is the same string on every rank of the
  group); "" otherwise;
- ``nbytes``: the message size in bytes (elements times the dtype's size; for a gather
  or a scatter the larger of the input and the output), -1 unknown;
- ``peer``: the other rank of a point-to-point send or receive as the source records it
  (Kineto's ``Src Rank``/``Dst Rank``: a global rank), -1 for collectives;
- ``start_ns``/``end_ns``: the call's device span on this rank.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np

#: normalised collective kinds; the order is the order of the tests in :func:`normalize_op`
#: (a longer spelling before the shorter one it contains)
OPS = ("allreduce", "reducescatter", "allgather", "alltoall", "broadcast", "barrier",
       "sendrecv", "send", "recv", "reduce", "gather", "scatter")
_SPELLINGS = (("allreduce", "allreduce"), ("reducescatter", "reducescatter"),
              ("allgather", "allgather"), ("alltoall", "alltoall"), ("broadcast", "broadcast"),
              ("barrier", "barrier"), ("sendrecv", "sendrecv"), ("receive", "recv"),
              ("recv", "recv"), ("send", "send"), ("reduce", "reduce"), ("gather", "gather"),
              ("scatter", "scatter"))
_NON_ALNUM = re.compile(r"[^a-z0-9]")
#: bytes per element of the dtype names profilers write (torch's and NCCL's spellings)
DTYPE_BYTES = {"float": 4, "float32": 4, "f32": 4, "float16": 2, "half": 2, "f16": 2,
               "bfloat16": 2, "bf16": 2, "float64": 8, "double": 8, "f64": 8,
               "int8": 1, "uint8": 1, "char": 1, "byte": 1, "bool": 1, "int32": 4, "int": 4,
               "uint32": 4, "int64": 8, "long": 8, "uint64": 8, "int16": 2, "short": 2,
               "float8_e4m3fn": 1, "float8_e5m2": 1, "fp8": 1,
               # HCCL's spellings (communication records and the profiler database)
               "fp16": 2, "fp32": 4, "fp64": 8, "bfp16": 2, "int128": 16}


def normalize_op(name: str) -> str:
    """The collective kind of a kernel or call name, one of :data:`OPS`, or "" when the
    name names none (only the part before any "(" of a kernel signature is read)."""
    text = _NON_ALNUM.sub("", name.split("(", 1)[0].lower())
    for spelling, op in _SPELLINGS:
        if spelling in text:
            return op
    return ""


def dtype_bytes(dtype: str) -> int:
    """Bytes per element of a dtype name (``c10::Half``, ``torch.float32``, ``Float``);
    -1 when unknown."""
    text = dtype.strip().lower().rsplit(".", 1)[-1].rsplit(":", 1)[-1]
    return DTYPE_BYTES.get(text, -1)


def _empty(dtype: object) -> np.ndarray:
    return np.zeros(0, dtype)


@dataclass(frozen=True)
class Collectives:
    """One row per collective call of one rank, in start order (see the module doc for the
    columns). ``group_ranks`` maps a group to the global ranks it holds, where recorded."""

    op: np.ndarray = field(default_factory=lambda: _empty(object))
    group: np.ndarray = field(default_factory=lambda: _empty(object))
    seq: np.ndarray = field(default_factory=lambda: _empty(np.int64))
    key: np.ndarray = field(default_factory=lambda: _empty(object))
    nbytes: np.ndarray = field(default_factory=lambda: _empty(np.int64))
    peer: np.ndarray = field(default_factory=lambda: _empty(np.int64))
    start_ns: np.ndarray = field(default_factory=lambda: _empty(np.int64))
    end_ns: np.ndarray = field(default_factory=lambda: _empty(np.int64))
    group_ranks: dict = field(default_factory=dict)

    def __len__(self) -> int:
        return int(self.start_ns.shape[0])


#: the optional columns of :func:`make_collectives`, with the value meaning "unknown"
_OPTIONAL = {"seq": (-1, np.int64), "key": ("", object), "nbytes": (-1, np.int64),
             "peer": (-1, np.int64)}


def make_collectives(op: list[str], group: list[str], start_ns: np.ndarray, end_ns: np.ndarray,
                     *, group_ranks: dict | None = None, **columns: list | None) -> Collectives:
    """A :class:`Collectives` table from per-call lists, sorted by (start, end).

    ``columns`` are the optional per-call lists ``seq``, ``key``, ``nbytes`` and ``peer``
    (absent or None: unknown, -1 or ""). ``op`` may hold raw names: each is normalised,
    and a call whose name names no collective is kept as the raw name's first word."""
    unknown = sorted(set(columns) - set(_OPTIONAL))
    if unknown:
        raise TypeError(f"make_collectives: no column named {', '.join(unknown)}")
    n = len(op)
    start = np.asarray(start_ns, np.int64)
    end = np.asarray(end_ns, np.int64)
    if not (len(group) == start.shape[0] == end.shape[0] == n):
        raise ValueError("collective columns of different lengths")
    ops = np.array([normalize_op(o) or str(o).split("(", 1)[0] for o in op], object)

    def col(values: list | None, fill: object, dtype: object) -> np.ndarray:
        if values is None:
            return np.full(n, fill, dtype)
        if len(values) != n:
            raise ValueError("collective columns of different lengths")
        return np.array(values, dtype) if n else _empty(dtype)

    order = np.lexsort((end, start))
    optional = {name: col(columns.get(name), fill, dtype)[order]
                for name, (fill, dtype) in _OPTIONAL.items()}
    return Collectives(op=ops[order], group=col(group, "", object)[order], start_ns=start[order],
                       end_ns=end[order], group_ranks=dict(group_ranks or {}), **optional)
