"""What the Ascend sources say communication is, shared by the Ascend readers.

HCCL runs one collective (``hcom_allReduce__868_0_1``) as many small tasks on its own
hardware stream: ``Notify Wait``/``Notify Record`` (cross-rank flags), ``Write Value``,
``SDMA``/``Memcpy`` copies, ``Reduce Inline``, ``RDMA Send``. Their times overlap each
other (a ``Notify Wait`` spans the copies it waits for), so read as compute they look like
a busy, corrupt main stream. The readers recognise them by the source's own structure
(the collective they belong to, the HCCL thread or table that lists them, their task
type) and either fold them into the whole collective or, where the source has no whole
collective, merge each collective's tasks into one op with :func:`fold_groups`.
"""

from __future__ import annotations

import numpy as np

from ..collectives import Collectives, dtype_bytes, make_collectives
from ..model import KIND_COMM, Timeline

#: task types only HCCL issues (spaces, underscores and case ignored)
_HCCL_TASK_TYPES = frozenset({
    "NOTIFYWAIT", "NOTIFYRECORD", "WRITEVALUE", "REDUCEINLINE", "REDUCETBE", "RDMASEND",
    "RDMADBSEND", "INLINEREDUCE", "LOCALCOPY",
})

#: name and type of an op merged from several sub-tasks of one collective
GROUP_NAME = "HCCL collective"
GROUP_TYPE = "HCCL"


def _squash(text: str) -> str:
    return "".join(ch for ch in text.upper() if ch.isalnum())


def is_hccl_task_type(task_type: str) -> bool:
    """Whether a task type (``Notify Wait``, ``NOTIFY_WAIT_SQE``, ``HCCL``, ...) is one
    only communication issues."""
    t = _squash(task_type)
    if t.endswith("SQE"):
        t = t[:-3]
    return t in _HCCL_TASK_TYPES or "HCCL" in t or "COMMUNICATION" in t


def is_collective_name(name: str) -> bool:
    """A whole collective's op name: ``hcom_*`` (torch_npu) or ``hccl*``."""
    return name.strip().lower().startswith(("hcom_", "hccl"))


def collective_groups(lane: np.ndarray, start: np.ndarray, end: np.ndarray,
                      key: np.ndarray) -> np.ndarray:
    """Group number (0..G-1) of each HCCL sub-task.

    Per lane and in start order, a task joins the group before it when both carry the same
    ``key`` (the collective's connection or op id; -1 = unknown) or when it starts before
    that group has ended: the tasks of two different collectives on one hardware stream
    run one after the other, so overlapping tasks belong to one collective.
    """
    n = len(start)
    groups = np.zeros(n, np.int64)
    if n == 0:
        return groups
    order = np.lexsort((end, start, lane))
    g = -1
    cur_lane = cur_key = None
    cur_end = 0
    for i in order.tolist():
        ln, k, s, e = int(lane[i]), int(key[i]), int(start[i]), int(end[i])
        same = (g >= 0 and ln == cur_lane
                and ((k >= 0 and k == cur_key) or s < cur_end))
        if same:
            cur_end = max(cur_end, e)
        else:
            g += 1
            cur_lane, cur_key, cur_end = ln, k, e
        groups[i] = g
    return groups


def fold_groups(groups: np.ndarray, start: np.ndarray, end: np.ndarray
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per group: (index of its first task, start, end, task count), groups in number order."""
    if not len(groups):
        z = np.zeros(0, np.int64)
        return z, z, z, z
    order = np.lexsort((start, groups))
    g_sorted = groups[order]
    first = np.flatnonzero(np.r_[True, g_sorted[1:] != g_sorted[:-1]])
    g_start = np.minimum.reduceat(start[order], first)
    g_end = np.maximum.reduceat(end[order], first)
    count = np.diff(np.r_[first, len(order)])
    return order[first], g_start, g_end, count


def merge_collectives(ops: dict, hw: np.ndarray, key: np.ndarray, names: list[str],
                      types: list[str]) -> tuple[dict, np.ndarray, int]:
    """Merge each collective's small tasks into one op, for sources without whole
    collectives.

    ``ops`` holds per-op columns (``stream``, ``start_ns``, ``end_ns``, ``name``, ``type``
    and any others), ``hw`` marks the HCCL small tasks, ``key`` their collective's id (-1
    unknown; see :func:`collective_groups`). A merged op keeps its first task's columns,
    spans all its tasks, and is named after the collective when that task is (``hcom_*``),
    else :data:`GROUP_NAME`; ``names``/``types`` are extended in place. Returns the new
    columns, the mask of old ops kept, and how many tasks were merged away.
    """
    n = len(hw)
    idx = np.flatnonzero(hw)
    keep = np.ones(n, bool)
    if idx.size < 2:
        return ops, keep, 0
    starts, ends = ops["start_ns"][idx], ops["end_ns"][idx]
    groups = collective_groups(ops["stream"][idx], starts, ends, key[idx])
    first, g_start, g_end, count = fold_groups(groups, starts, ends)
    if not (count > 1).any():
        return ops, keep, 0
    keep[idx] = False
    rep = idx[first]
    keep[rep] = True
    ops = {k: v.copy() for k, v in ops.items()}
    ops["start_ns"][rep], ops["end_ns"][rep] = g_start, g_end
    many = rep[count > 1]
    if many.size:
        unnamed = many[[not is_collective_name(names[c]) for c in ops["name"][many]]]
        if unnamed.size:
            ops["name"][unnamed] = len(names)
            names.append(GROUP_NAME)
        ops["type"][many] = len(types)
        types.append(GROUP_TYPE)
    return {k: v[keep] for k, v in ops.items()}, keep, int((count - 1).sum())


def is_memcpy_text(v: str) -> bool:
    """An Ascend op name or task type that says it copies memory (MEMCPY / MEMCOPY)."""
    up = v.upper()
    return "MEMCPY" in up or "MEMCOPY" in up


def is_memset_text(v: str) -> bool:
    """An Ascend op name or task type that says it sets memory (MEMSET)."""
    return "MEMSET" in v.upper()


def hcom_group(name: str) -> str:
    """The group field of an HCCL op name: ``hcom_allReduce__586_0_1`` -> ``"586"`` (the
    last digits of the group's hash, which ``communication.json`` writes whole after
    ``@``); "" when the name has no such field."""
    _, sep, tail = name.strip().partition("__")
    fields = tail.split("_")
    return fields[0] if sep and len(fields) >= 2 and fields[0].isdigit() else ""


def hccl_nbytes(data_type: object, count: object) -> int:
    """A collective's message size: ``count`` elements of ``data_type``; -1 unknown."""
    try:
        n = int(str(count).strip())
    except ValueError:
        return -1
    width = dtype_bytes(str(data_type))  # HCCL's spellings (FP16, BFP16 ...) included
    return width * n if width > 0 and n >= 0 else -1


def named_collectives(names: list[str], name_codes: np.ndarray, comm: np.ndarray,
                      start_ns: np.ndarray, end_ns: np.ndarray,
                      sizes: dict[str, int] | None = None) -> Collectives | None:
    """The :class:`Collectives` of the communication ops (``comm``) named as a whole
    collective (``hcom_*``): ``key`` their name (the same string on every rank of the
    group), ``group`` its group field (:func:`hcom_group`), ``nbytes`` from ``sizes``
    (per name) where given; None when there is none."""
    named = np.zeros(len(names) + 1, bool)
    for c in np.unique(name_codes[comm]).tolist():
        named[c] = is_collective_name(names[c])
    idx = np.flatnonzero(comm & named[name_codes])
    if not idx.size:
        return None
    keys = [names[c] for c in name_codes[idx].tolist()]
    sizes = sizes or {}
    return make_collectives(keys, [hcom_group(k) for k in keys], start_ns[idx], end_ns[idx],
                            key=keys, nbytes=[sizes.get(k, -1) for k in keys])


def timeline_collectives(tl: Timeline, sizes: dict[str, int] | None = None
                         ) -> Collectives | None:
    """:func:`named_collectives` of a timeline's communication ops."""
    return named_collectives(tl.names, tl.name, tl.kind == KIND_COMM, tl.start_ns, tl.end_ns,
                             sizes)
