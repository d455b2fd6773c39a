"""Find the best profiler source inside a directory and read it.

Accepted directories: a torch_npu capture (``*_ascend_pt``), its
``ASCEND_PROFILER_OUTPUT``, an msprof ``PROF_*`` folder, a parent of several captures
(one timeline each, sorted by path: this is how several ranks are passed), or a folder of
plain Kineto/Chrome traces (``*.json``, ``*.json.gz``; recognised by content; one timeline
per file).

Inside one capture the sources are tried best first: a profiler database with a ``TASK``
table (``ascend_pytorch_profiler_*.db``, then ``msprof_*.db``: integer ns, waits included),
``kernel_details.csv``, ``trace_view.json`` (waits included), ``op_summary_*.csv``. A
``kernel_details.csv`` without a ``Stream ID`` column (profiler level Level0) is passed over
with a warning and the next source is read. Each reader recognises communication by the
source's own structure (see their docstrings), so which source is read does not change
which streams are communication. When the source does not say how many cores the device
has, ``PROF_*/device_*/info.json.*`` (``DeviceInfo[0].ai_core_num``, ``aiv_num``) fills it
in.

Ascend's own time split of the capture (``step_trace_time.csv``, else the
``StepTraceTime`` table of ``analysis.db``; the one of the source's own export first) is
put into the timeline's ``meta`` by :func:`.step_trace.attach` (``ascend_overlapped_pct``
and friends), with a warning when parastream's comm/comp overlap differs from it by more
than 2 points.

What the capture measured about its communication (``communication.json``,
``communication_matrix.json``, else ``analysis.db``'s CommAnalyzer tables) goes into
``meta["comm_matrix"]`` and ``meta["hccl_wait_ns"]`` by :func:`.ascend_comm.attach`.

Entries that cannot be read as what they look like (a symbolic link that loops or points
nowhere) are skipped with a warning naming them; a capture whose every source is such an
entry is an :class:`InputError`.
"""

from __future__ import annotations

import errno
import fnmatch
import json
import os
import re

from ...errors import InputError
from ..model import Timeline
from . import ascend_comm, step_trace

CAPTURE_SUFFIXES = ("_ascend_pt", "_ascend_ms")
_OUTPUT_DIR = "ASCEND_PROFILER_OUTPUT"
_MAX_DEPTH = 5
# (label, filename pattern), best first
_SOURCES = (
    ("db", "ascend_pytorch_profiler*.db"),
    ("db", "msprof_*.db"),
    ("csv", "kernel_details*.csv"),
    ("trace_view", "trace_view.json"),
    ("trace_view", "trace_view.json.gz"),
    ("csv", "op_summary_*.csv"),
)
_LOOKED_FOR = ("*_ascend_pt/, ASCEND_PROFILER_OUTPUT/, PROF_*/, ascend_pytorch_profiler_*.db, "
               "msprof_*.db, kernel_details.csv, trace_view.json, op_summary_*.csv, "
               "*.json / *.json.gz Kineto traces")


def is_capture(path: str) -> bool:
    """Whether ``path`` is one profiler capture folder (``*_ascend_pt``/``*_ascend_ms``,
    ``PROF_*``, ``ASCEND_PROFILER_OUTPUT`` or a folder holding one)."""
    base = os.path.basename(os.path.normpath(path))
    return (base.endswith(CAPTURE_SUFFIXES) or base == _OUTPUT_DIR or base.startswith("PROF_")
            or os.path.isdir(os.path.join(path, _OUTPUT_DIR)))


def _subdirs(path: str) -> list[str]:
    try:
        return sorted(e.path for e in os.scandir(path) if e.is_dir(follow_symlinks=False))
    except OSError:
        return []


def _find_captures(path: str, depth: int = 0) -> list[str]:
    """Capture folders below ``path`` (not descending into a capture)."""
    out: list[str] = []
    for sub in _subdirs(path):
        if is_capture(sub):
            out.append(sub)
        elif depth + 1 < _MAX_DEPTH:
            out.extend(_find_captures(sub, depth + 1))
    return out


def _walk_files(root: str, max_depth: int = _MAX_DEPTH) -> list[str]:
    files: list[str] = []
    base_depth = os.path.normpath(root).count(os.sep)
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        if os.path.normpath(dirpath).count(os.sep) - base_depth >= max_depth:
            dirnames[:] = []
        files.extend(os.path.join(dirpath, f) for f in sorted(filenames))
    return files


def _unreadable(path: str) -> str | None:
    """Why ``path`` (a name a folder lists) cannot be opened, or None when it can."""
    try:
        os.stat(path)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return "a symbolic link loop"
        if os.path.islink(path):
            return "a symbolic link to nothing"
        return f"cannot read: {exc.strerror or exc}"
    return None


def _by_preference(hits: list[str]) -> list[str]:
    """Files under ``ASCEND_PROFILER_OUTPUT`` first, then by path."""
    return sorted(hits, key=lambda f: (_OUTPUT_DIR not in f.split(os.sep), f))


def _source_candidates(root: str) -> tuple[list[tuple[str, str]], list[InputError]]:
    """(label, path) of the profiler files under a capture, best first, and an error for
    each one that cannot even be opened (a symbolic link loop, ...)."""
    files = _walk_files(root)
    out: list[tuple[str, str]] = []
    broken: list[InputError] = []
    for label, pattern in _SOURCES:
        for f in _by_preference([f for f in files
                                 if fnmatch.fnmatch(os.path.basename(f), pattern)]):
            why = _unreadable(f)
            if why:
                broken.append(InputError(f, why))
            else:
                out.append((label, f))
    return out, broken


def _read_source(label: str, path: str) -> Timeline:
    if label == "db":
        from . import ascend_db

        return ascend_db.read(path)  # a database without a TASK table is an InputError
    if label == "csv":
        from . import ascend_csv

        return ascend_csv.read(path)
    from . import trace_view

    return trace_view.read(path)


def _info_json_cores(root: str, device_id) -> tuple[int | None, int | None]:
    """(ai_core_num, aiv_num) from ``PROF_*/device_*/info.json*`` near ``root``."""
    search = [root]
    if os.path.basename(os.path.normpath(root)) == _OUTPUT_DIR:
        search.append(os.path.dirname(os.path.normpath(root)))
    found: list[tuple[int, str]] = []
    for base in search:
        for f in _walk_files(base, 4):
            parts = f.split(os.sep)
            if (len(parts) >= 2 and os.path.basename(f).startswith("info.json")
                    and re.fullmatch(r"device_\d+", parts[-2])):
                dev = int(parts[-2].split("_")[1])
                found.append((dev, f))
        if found:
            break
    found.sort(key=lambda t: (str(t[0]) != str(device_id), t[0], t[1]))
    for _, f in found:
        try:
            with open(f, "rb") as fh:
                info = json.loads(fh.read().decode("utf-8", errors="replace"))
            dev = info.get("DeviceInfo") or []
            d0 = dev[0] if isinstance(dev, list) and dev else {}
        except (OSError, ValueError, AttributeError):
            continue
        aic, aiv = _pos_int(d0.get("ai_core_num")), _pos_int(d0.get("aiv_num"))
        if aic or aiv:
            return aic, aiv
    return None, None


def _pos_int(v) -> int | None:
    try:
        i = int(v)
    except (TypeError, ValueError):
        return None
    return i if i > 0 else None


def _read_capture(root: str, skipped: list[InputError] | None = None) -> Timeline | None:
    """The best source under one capture folder, or None when it has none.

    When every source there is one that cannot be opened, that is an error, unless
    ``skipped`` is given: the errors are then added to it and None is returned."""
    candidates, broken = _source_candidates(root)
    if not candidates:
        if skipped is None and broken:
            raise broken[0]
        if skipped is not None:
            skipped.extend(broken)
        return None
    errors: list[InputError] = list(broken)
    tl = None
    for label, f in candidates:
        try:
            tl = _read_source(label, f)
            break
        except InputError as exc:
            errors.append(exc)
    if tl is None:
        raise errors[0]
    for exc in errors:
        tl.warnings.append(f"skipped {exc.path}: {exc.reason}")
    tl.meta.setdefault("capture_dir", root)
    rank = _rank_of(root, tl.source)
    if rank is not None:
        tl.meta.setdefault("rank", rank)
    if not tl.device.ai_core_num or not tl.device.vector_core_num:
        aic, aiv = _info_json_cores(root, tl.meta.get("device_id"))
        if aic and not tl.device.ai_core_num:
            tl.device.ai_core_num = aic
        if aiv and not tl.device.vector_core_num:
            tl.device.vector_core_num = aiv
    _attach_step_trace(tl, root)
    ascend_comm.attach(tl, root)
    return tl


def _attach_step_trace(tl: Timeline, root: str) -> None:
    """Ascend's own time split of the capture into ``tl.meta`` (see :mod:`.step_trace`).

    The file of the source's own export is preferred: ``analysis.db`` beside a database,
    ``step_trace_time.csv`` beside a text export."""
    files = _walk_files(root)
    csvs = _by_preference([f for f in files if os.path.basename(f) == step_trace.FILE_NAME])
    dbs = _by_preference([f for f in files if os.path.basename(f) == step_trace.DB_NAME])
    near = os.path.dirname(tl.source)
    readers = [(f, step_trace.read_csv) for f in csvs] + [(f, step_trace.read_analysis_db)
                                                          for f in dbs]
    # same folder as the source first (the same export), then csv before db
    readers.sort(key=lambda r: os.path.dirname(r[0]) != near)
    for f, read in readers:
        if _unreadable(f):
            continue
        st = read(f, tl.meta.get("device_id"))
        if st is not None:
            step_trace.attach(tl, st)
            return


_RANKED = (re.compile(r"profiler_info_(\d+)\.json"),
           re.compile(r"ascend_pytorch_profiler_(\d+)\.db"))


def _rank_of(root: str, source: str) -> int | None:
    """The rank in a multi-rank capture's file names (``profiler_info_{rank}.json`` at the
    capture root, ``ascend_pytorch_profiler_{rank}.db``); single-rank captures have none."""
    names = [os.path.basename(source)]
    for d in (root, os.path.dirname(os.path.normpath(root))):
        try:
            names += sorted(os.listdir(d))
        except OSError:
            pass
        if os.path.basename(os.path.normpath(root)) != _OUTPUT_DIR:
            break
    for name in names:
        for pat in _RANKED:
            m = pat.fullmatch(name)
            if m:
                return int(m.group(1))
    return None


def _kineto_files(path: str, skipped: list[InputError]) -> list[tuple]:
    """(reader module, path) of every trace file lying in ``path``, sniffed once; the
    trace names that cannot be opened (a symbolic link loop, ...) go to ``skipped``."""
    from . import sniff_format

    out = []
    for e in sorted(os.scandir(path), key=lambda e: e.name):
        if not e.name.endswith((".json", ".json.gz")):
            continue
        why = _unreadable(e.path)
        if why:
            skipped.append(InputError(e.path, why))
            continue
        if not e.is_file():
            continue
        try:
            mod = sniff_format(e.path)
        except (InputError, ImportError):
            continue
        if mod.FORMAT in ("kineto", "ascend_trace_view"):
            out.append((mod, e.path))
    return out


def read_dir(path: str | os.PathLike[str]) -> list[Timeline]:
    """Timelines from a profiler output directory (one per capture or trace file)."""
    path = os.fspath(path)
    if not os.path.isdir(path):
        raise InputError(path, "not a directory")
    if is_capture(path):
        roots = [path]
    else:
        roots = _find_captures(path)
    timelines = []
    for root in roots:
        tl = _read_capture(root)
        if tl is not None:
            timelines.append(tl)
    if timelines:
        return timelines
    # profiler files lying loose in the folder, else plain Kineto traces (one per rank)
    skipped: list[InputError] = []
    tl = _read_capture(path, skipped)
    if tl is not None:
        return [tl]
    traces = _kineto_files(path, skipped)
    if traces:
        timelines = [mod.read(f) for mod, f in traces]
        timelines[0].warnings.extend(f"skipped {e.path}: {e.reason}" for e in skipped)
        return timelines
    if skipped:
        raise skipped[0]
    raise InputError(path, f"no profiler data found (looked for {_LOOKED_FOR})")
