"""Find the best profiler source inside a directory and read it.

Accepted directories: a torch_npu capture (``*_ascend_pt``), its
``ASCEND_PROFILER_OUTPUT``, an msprof ``PROF_*`` folder, a parent of several captures
(one timeline each, sorted by path: this is how several ranks are passed), or a folder of
plain Kineto/Chrome traces (``*.json``, ``*.json.gz``; recognised by content; one timeline
per file).

Inside one capture the sources are tried best first: a profiler database with a ``TASK``
table (``ascend_pytorch_profiler_*.db``, then ``msprof_*.db``: integer ns, waits included),
``kernel_details.csv``, ``trace_view.json`` (waits included), ``op_summary_*.csv``. When the
source does not say how many cores the device has, ``PROF_*/device_*/info.json.*``
(``DeviceInfo[0].ai_core_num``, ``aiv_num``) fills it in.
"""

from __future__ import annotations

import fnmatch
import json
import os
import re

from ...errors import InputError
from ..model import Timeline

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


def _source_candidates(root: str) -> list[tuple[str, str]]:
    """(label, path) of the profiler files under a capture, best first.

    Within one kind, files under ``ASCEND_PROFILER_OUTPUT`` come first, then by path.
    """
    files = _walk_files(root)
    out: list[tuple[str, str]] = []
    for label, pattern in _SOURCES:
        hits = [f for f in files if fnmatch.fnmatch(os.path.basename(f), pattern)]
        hits.sort(key=lambda f: (_OUTPUT_DIR not in f.split(os.sep), f))
        out.extend((label, f) for f in hits)
    return out


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


def _read_capture(root: str) -> Timeline | None:
    """The best source under one capture folder, or None when it has none."""
    candidates = _source_candidates(root)
    if not candidates:
        return None
    errors: list[InputError] = []
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
    return tl


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


def _kineto_files(path: str) -> list[tuple]:
    """(reader module, path) of every trace file lying in ``path``, sniffed once."""
    from . import sniff_format

    out = []
    for e in sorted(os.scandir(path), key=lambda e: e.name):
        if not e.is_file() or not e.name.endswith((".json", ".json.gz")):
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
    tl = _read_capture(path)
    if tl is not None:
        return [tl]
    traces = _kineto_files(path)
    if traces:
        return [mod.read(f) for mod, f in traces]
    raise InputError(path, f"no profiler data found (looked for {_LOOKED_FOR})")
