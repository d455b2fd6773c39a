"""Many inputs at once: captures of one run, or one trace per rank of a distributed job.

Each input unit (a trace file, or one Ascend profiler output directory) is read and
analysed on its own, in worker processes when there are several, so memory is bounded by
one unit per worker. When the units carry distinct ranks (Kineto ``distributedInfo``),
the document gets a per-rank table and a cross-rank summary; otherwise all captures are
summarised together.
"""

from __future__ import annotations

import fnmatch
import os
import re
import statistics
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context

from ..errors import InputError
from .analyze import SCHEMA, Options, analyze_capture, captures_of, check_regex, summarize
from .model import Timeline
from .overlap import empty_counts
from .readers import read_path
from .readers.directory import CAPTURE_SUFFIXES, is_capture
from .readers.kineto import is_perfetto_view

_TRACE_FILES = ("*.json", "*.json.gz", "*.csv", "*.db", "*.pt.trace.json", "*.pt.trace.json.gz")


_PARASTREAM_SCHEMA = re.compile(rb'"schema"\s*:\s*"parastream\.')


def _parastream_document(path: str) -> bool:
    """Whether ``path`` is one of parastream's own JSON documents (a plan, a graph, a
    profile, an analysis's Perfetto view), not a trace: ``run --trace DIR`` writes its
    plan.json next to the traces."""
    if not path.endswith(".json"):
        return False
    try:
        with open(path, "rb") as f:
            head = f.read(4096)
    except OSError:
        return False
    return bool(_PARASTREAM_SCHEMA.search(head)) or is_perfetto_view(head)


def expand(path: str) -> list[str]:
    """The units a path stands for: itself for a file or an Ascend profiler directory;
    each capture child (``*_ascend_pt``, ``*_ascend_ms``) or each trace file for a folder
    of captures/ranks."""
    if not os.path.isdir(path):
        return [path]
    try:
        entries = sorted(os.listdir(path))
    except OSError as exc:
        raise InputError(path, f"cannot list the folder: {(exc.strerror or str(exc)).lower()}") from None
    if is_capture(path):
        return [path]
    if any(fnmatch.fnmatch(e, "PROF_*") for e in entries):  # an msprof output folder
        return [path]
    pt = [os.path.join(path, e) for e in entries
          if e.endswith(CAPTURE_SUFFIXES) and os.path.isdir(os.path.join(path, e))]
    if pt:
        return pt
    named = [os.path.join(path, e) for e in entries
             if os.path.isfile(os.path.join(path, e)) and not e.startswith(".")
             and any(fnmatch.fnmatch(e, m) for m in _TRACE_FILES)]
    files = [f for f in named if not _parastream_document(f)]
    if len(files) > 1 and not any(fnmatch.fnmatch(os.path.basename(f), m) for f in files
                                  for m in ("kernel_details.csv", "trace_view.json", "op_summary_*.csv")):
        return files
    if len(files) == 1 and len(named) > 1:
        return files  # one trace next to parastream's own documents: that trace alone
    return [path]


def _unit(path: str, opts: Options, keep: bool) -> tuple[list[dict], list[Timeline], dict]:
    timelines = read_path(path)
    caps = captures_of(timelines, opts.split_steps)
    results = [analyze_capture(tl, opts) for tl in caps]
    info = {"source": path, "format": timelines[0].format if timelines else None,
            "rank": next((t.meta.get("rank") for t in timelines
                          if t.meta.get("rank") is not None), None),
            "captures": len(results),
            "hta_comm_comp_overlap_pct": next((t.meta["hta_comm_comp_overlap_pct"]
                                               for t in timelines
                                               if t.meta.get("hta_comm_comp_overlap_pct") is not None),
                                              None)}
    return results, (caps if keep else []), info


def _unit_worker(path: str, opts: Options) -> tuple[list[dict], dict] | tuple[str, str, str | None, str]:
    try:
        results, _, info = _unit(path, opts, False)
        return results, info
    except InputError as exc:  # sent back as data: exceptions with extra fields pickle badly
        return ("error", str(exc), exc.path, exc.reason)


def analyze_paths(paths: list[str], opts: Options, *, jobs: int = 0, keep_timelines: bool = False,
                  progress=None, strict: bool = False) -> tuple[dict, list[Timeline]]:
    """Read and analyse every input; returns the analysis document and, when asked, the
    capture timelines in document order (for the HTML and Perfetto renderers).

    A folder of several units (ranks, captures) with broken members analyses the good
    ones: each broken member is listed in ``doc["broken"]`` as ``{"source", "error"}`` and
    the summary says how many of the units were analysed (``units``, ``units_analysed``).
    With ``strict``, or when no unit can be read, the first broken member's error is
    raised instead.
    """
    check_regex(opts.side_regex, "--side")
    check_regex(opts.dominator_regex, "--dominator")
    units: list[str] = []
    for p in paths:
        try:
            os.stat(p)
        except OSError as exc:  # not only missing: a parent folder may refuse the lookup
            raise InputError(p, (exc.strerror or "cannot stat").lower()) from None
        units.extend(expand(p))
    jobs = jobs if jobs > 0 else (os.cpu_count() or 1)
    jobs = min(jobs, len(units))
    from .readers import is_pipe

    if any(is_pipe(u) for u in units):
        jobs = 1  # a pipe is this process's (<(zcat t.gz), /dev/stdin): a worker cannot open it
    task = progress.add_task("analysing", total=len(units)) if progress is not None else None
    per_unit: list[tuple[list[dict], dict]] = []
    broken: list[tuple[str, InputError]] = []
    timelines: list[Timeline] = []
    # one unit alone, or --strict: its error is the command's error (exit 2)
    tolerant = len(units) > 1 and not strict

    def failed(unit: str, exc: InputError) -> None:
        if not tolerant:
            raise exc
        broken.append((unit, exc))

    if jobs > 1 and not keep_timelines:
        # spawn: fresh workers that can be recycled, so one huge rank does not keep its memory
        with ProcessPoolExecutor(max_workers=jobs, mp_context=get_context("spawn"),
                                 max_tasks_per_child=4) as pool:
            futs = [pool.submit(_unit_worker, u, opts) for u in units]
            for u, f in zip(units, futs):
                r = f.result()
                if r[0] == "error":
                    failed(u, InputError(r[2], r[3]))
                else:
                    per_unit.append(r)  # type: ignore[arg-type]
                if task is not None:
                    progress.advance(task)
    else:
        for u in units:
            if task is not None:
                progress.update(task, description=f"reading {os.path.basename(u.rstrip('/'))}")
            try:
                results, caps, info = _unit(u, opts, keep_timelines)
            except InputError as exc:
                failed(u, exc)
            else:
                per_unit.append((results, info))
                timelines.extend(caps)
            if task is not None:
                progress.advance(task)
    if broken and not per_unit:  # nothing to analyse: the first member's error, as one line
        unit, exc = broken[0]
        raise InputError(exc.path or unit, f"{exc.reason} (and {len(broken) - 1} other "
                         f"member(s) of {len(units)} broken)" if len(broken) > 1 else exc.reason)
    doc = _document(per_unit, opts)
    if broken:
        doc["broken"] = [{"source": exc.path or u, "error": exc.reason} for u, exc in broken]
    doc["summary"]["units"] = len(units)
    doc["summary"]["units_analysed"] = len(per_unit)
    return doc, timelines


def _document(per_unit: list[tuple[list[dict], dict]], opts: Options) -> dict:
    """The analysis document of the units read: captures, sources and, when every unit is
    a distinct rank, per-rank rows and a cross-rank summary."""
    captures = [c for results, _ in per_unit for c in results]
    ranks = {info["rank"] for _, info in per_unit}
    doc = {"schema": SCHEMA, "captures": captures, "sources": [info for _, info in per_unit]}
    if len(per_unit) > 1 and None not in ranks and len(ranks) == len(per_unit):
        rows = []
        for results, info in sorted(per_unit, key=lambda x: x[1]["rank"]):
            s = summarize(results, opts.cold)
            rows.append({"rank": info["rank"], "source": info["source"], "captures": len(results),
                         "dropped_cold": s["dropped_cold"],
                         "median_wall_us": s["median_wall_us"],
                         "median_parallelism": s["median_parallelism"],
                         "median_comm_comp_overlap_pct": s["median_comm_comp_overlap_pct"],
                         "median_comm_exposed_us": s["median_comm_exposed_us"],
                         "median_overlap_pct": s["median_overlap_pct"],
                         "hta_comm_comp_overlap_pct": info["hta_comm_comp_overlap_pct"],
                         "verdict_counts": s["verdict_counts"]})
        doc["ranks"] = rows
        doc["summary"] = _cross_rank(rows)
    else:
        doc["summary"] = summarize(captures, opts.cold)
    hta = [i["hta_comm_comp_overlap_pct"] for _, i in per_unit if i["hta_comm_comp_overlap_pct"] is not None]
    doc["summary"]["hta_comm_comp_overlap_pct"] = (round(statistics.median(hta), 2) if hta else None)
    return doc


def _cross_rank(rows: list[dict]) -> dict:
    def med(key):
        v = [r[key] for r in rows if r[key] is not None]
        return round(statistics.median(v), 6) if v else None

    walls = [(r["median_wall_us"], r["rank"]) for r in rows if r["median_wall_us"] is not None]
    verdicts = empty_counts()
    for r in rows:
        for k, v in r["verdict_counts"].items():
            verdicts[k] = verdicts.get(k, 0) + v
    return {"ranks": len(rows), "captures": sum(r["captures"] for r in rows),
            "dropped_cold": sum(r["dropped_cold"] for r in rows),
            "median_wall_us": med("median_wall_us"),
            "median_parallelism": med("median_parallelism"),
            "median_comm_comp_overlap_pct": med("median_comm_comp_overlap_pct"),
            "median_comm_exposed_us": med("median_comm_exposed_us"),
            "median_overlap_pct": med("median_overlap_pct"),
            "slowest_rank": max(walls)[1] if walls else None,
            "fastest_rank": min(walls)[1] if walls else None,
            "wall_spread_pct": round(100.0 * (max(walls)[0] - min(walls)[0]) / min(walls)[0], 3)
            if walls and min(walls)[0] > 0 else None,
            "verdict_counts": verdicts, "median_hidden_frac": {}, "notes": []}
