"""Many inputs at once: captures of one run, or one trace per rank of a distributed job.

Each input unit (a trace file, or one Ascend profiler output directory) is read and
analysed on its own. Several units are analysed as tasks on Dask distributed: by default
on a local cluster started for the command (one worker process per core, at most one per
unit, each with its share of the machine's memory), or on a running cluster named by its
scheduler's address (:class:`Engine`). A task receives a unit's path, never its bytes:
the trace is read where it lies, by the worker, and only the unit's small result tables
come back. A worker that dies mid-task has its task run again on another worker. One
unit alone, a pipe, or one local worker is analysed in this process, without a cluster.

When the units carry distinct ranks (Kineto ``distributedInfo``), the document gets a
per-rank table and a cross-rank summary; otherwise all captures are summarised together.
"""

from __future__ import annotations

import fnmatch
import logging
import os
import re
import statistics
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator

from ..errors import InputError
from .cluster import RankSummary, cross_rank, rank_summary
from .analyze import SCHEMA, Options, analyze_captures, captures_of, check_regex, summarize
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


@dataclass(frozen=True)
class Engine:
    """Where several units are analysed. ``jobs``: local worker processes (0 = one per
    core; 1 = in this process, one unit after the other); never more than the units.
    ``scheduler``: the address of a running Dask scheduler (``tcp://HOST:PORT``) whose
    workers read the units' paths (they must see them), instead of a local cluster;
    ``scheduler_timeout``: seconds to wait for it to answer and to have a worker.
    ``retries``: how many times a task that raised is run again (a task whose worker
    died is run again on another worker up to Dask's ``allowed-failures`` times)."""

    jobs: int = 0
    scheduler: str | None = None
    scheduler_timeout: float = 10.0
    retries: int = 1


@dataclass(frozen=True)
class UnitTask:
    """What each unit's analysis is asked for: the timeline ``opts``, whether to send the
    capture timelines back (``keep``, for the HTML and Perfetto renderers) and whether to
    reduce a rank's whole timeline to its :class:`~.cluster.RankSummary` (``ranks``: there
    are several units, so there may be ranks to compare)."""

    opts: Options
    keep: bool = False
    ranks: bool = False


@dataclass
class UnitResult:
    """What the analysis of one unit sends back: one result per capture, the unit's
    ``info`` (source, format, rank, captures, HTA's figure), the capture timelines when
    they were asked for (else empty) and the rank's summary when it has a rank and one
    was asked for (else None)."""

    results: list[dict]
    info: dict
    timelines: list[Timeline]
    summary: RankSummary | None = None


@dataclass(frozen=True)
class UnitFailure:
    """A unit that could not be read, as data (an exception with extra fields pickles
    badly across processes): the file named and the reason."""

    path: str | None
    reason: str

    def error(self, unit: str) -> InputError:
        """The :class:`InputError` this failure stands for."""
        return InputError(self.path or unit, self.reason)


def _unit(path: str, task: UnitTask) -> UnitResult:
    timelines = read_path(path)  # in a (daemonic) Dask worker the reader decodes in-process
    ranked = next((t for t in timelines if t.meta.get("rank") is not None), None)
    summary = (rank_summary(ranked, ranked.meta["rank"])
               if task.ranks and ranked is not None else None)
    caps = captures_of(timelines, task.opts.split_steps)
    results = analyze_captures(caps, task.opts)
    info = {"source": path, "format": timelines[0].format if timelines else None,
            "rank": ranked.meta["rank"] if ranked is not None else None,
            "captures": len(results),
            "hta_comm_comp_overlap_pct": next((t.meta["hta_comm_comp_overlap_pct"]
                                               for t in timelines
                                               if t.meta.get("hta_comm_comp_overlap_pct") is not None),
                                              None)}
    return UnitResult(results, info, caps if task.keep else [], summary)


def analyze_unit(path: str, task: UnitTask) -> UnitResult | UnitFailure:
    """Read and analyse one unit (the task a worker runs); a unit that cannot be read
    comes back as a :class:`UnitFailure`, any other error is raised."""
    try:
        return _unit(path, task)
    except InputError as exc:
        return UnitFailure(exc.path, exc.reason)


class _Ticker:
    """The progress display's task over the units (nothing when there is no display)."""

    def __init__(self, progress, total: int) -> None:
        self.progress = progress
        self.task = progress.add_task("analysing", total=total) if progress is not None else None

    def reading(self, unit: str) -> None:
        if self.task is not None:
            self.progress.update(self.task, description=f"reading {os.path.basename(unit.rstrip('/'))}")

    def done(self) -> None:
        if self.task is not None:
            self.progress.advance(self.task)


def _units_of(paths: list[str]) -> list[str]:
    units: list[str] = []
    for p in paths:
        try:
            os.stat(p)
        except OSError as exc:  # not only missing: a parent folder may refuse the lookup
            raise InputError(p, (exc.strerror or "cannot stat").lower()) from None
        units.extend(expand(p))
    return units


def _local_workers(units: list[str], engine: Engine) -> int:
    """Local worker processes for ``units`` (``engine.jobs``, never more than the units)."""
    jobs = engine.jobs if engine.jobs > 0 else (os.cpu_count() or 1)
    return max(1, min(jobs, len(units)))


def _in_this_process(units: list[str], engine: Engine) -> bool:
    """Whether the units are read here, without a cluster: a pipe is this process's
    (``<(zcat t.gz)``, /dev/stdin: no worker can open it); else one local worker."""
    from .readers import is_pipe

    if any(is_pipe(u) for u in units):
        return True
    return engine.scheduler is None and _local_workers(units, engine) == 1


def _in_process(units: list[str], task: UnitTask,
                ticker: _Ticker) -> Iterator[UnitResult | UnitFailure]:
    for u in units:
        ticker.reading(u)
        yield analyze_unit(u, task)
        ticker.done()


def analyze_paths(paths: list[str], opts: Options, *, engine: Engine = Engine(),
                  keep_timelines: bool = False, progress=None,
                  strict: bool = False) -> tuple[dict, list[Timeline]]:
    """Read and analyse every input; returns the analysis document and, when asked, the
    capture timelines in document order (for the HTML and Perfetto renderers).

    Several units are analysed on the ``engine`` (a local Dask cluster, or the running
    one it names); the document does not depend on where they ran. A folder of several
    units (ranks, captures) with broken members analyses the good ones: each broken
    member is listed in ``doc["broken"]`` as ``{"source", "error"}`` and the summary
    says how many of the units were analysed (``units``, ``units_analysed``). With
    ``strict``, or when no unit can be read, the first broken member's error is raised
    instead.
    """
    check_regex(opts.side_regex, "--side")
    check_regex(opts.dominator_regex, "--dominator")
    if engine.scheduler is not None:
        check_address(engine.scheduler)
    units = _units_of(paths)
    ticker = _Ticker(progress, len(units))
    task = UnitTask(opts, keep_timelines, ranks=len(units) > 1)
    if _in_this_process(units, engine):
        outcomes: Iterable[UnitResult | UnitFailure] = _in_process(units, task, ticker)
    else:
        outcomes = on_cluster(units, task, engine, _local_workers(units, engine), ticker.done)
    # one unit alone, or --strict: its error is the command's error (exit 2)
    return _assemble(units, outcomes, opts, tolerant=len(units) > 1 and not strict)


def _assemble(units: list[str], outcomes: Iterable[UnitResult | UnitFailure], opts: Options,
              tolerant: bool) -> tuple[dict, list[Timeline]]:
    """The document of the units' outcomes (in unit order), broken members listed; a
    failure raises when not ``tolerant``, or when no unit could be read."""
    done: list[UnitResult] = []
    broken: list[tuple[str, InputError]] = []
    for unit, out in zip(units, outcomes):
        if isinstance(out, UnitFailure):
            if not tolerant:
                raise out.error(unit)
            broken.append((unit, out.error(unit)))
        else:
            done.append(out)
    if broken and not done:  # nothing to analyse: the first member's error, as one line
        unit, exc = broken[0]
        raise InputError(exc.path or unit, f"{exc.reason} (and {len(broken) - 1} other "
                         f"member(s) of {len(units)} broken)" if len(broken) > 1 else exc.reason)
    doc = _document(done, opts)
    if broken:
        doc["broken"] = [{"source": exc.path or u, "error": exc.reason} for u, exc in broken]
    doc["summary"]["units"] = len(units)
    doc["summary"]["units_analysed"] = len(done)
    return doc, [tl for d in done for tl in d.timelines]


# ------------------------------------------------------------------ the Dask engine
#: a scheduler address: tcp://HOST:PORT (the protocol may be left out: tcp)
_ADDRESS = re.compile(r"^(?:(?:tcp|tls|ws|wss)://)?(?:\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_.-]+):(\d{1,5})$")


def check_address(address: str) -> None:
    """Refuse a scheduler address that is not ``[tcp://]HOST:PORT`` (InputError)."""
    m = _ADDRESS.match(address)
    if m is None or not 0 < int(m.group(1)) < 65536:
        raise InputError(address, "not a Dask scheduler address: give tcp://HOST:PORT "
                                  "(for example tcp://127.0.0.1:8786)")


def _quiet_logs() -> None:
    """Dask's own loggers quiet: a worker lost and replaced, or a heartbeat cut short as the
    local cluster closes, is the engine's business; what fails a rank comes back with its
    result."""
    import logging

    for name in ("distributed", "dask"):
        logging.getLogger(name).setLevel(logging.CRITICAL)


@contextmanager
def _client(engine: Engine, workers: int) -> Iterator[Any]:
    """A Dask client: of the running scheduler ``engine.scheduler`` (an InputError when
    it does not answer, or has no worker, within ``engine.scheduler_timeout``), else of
    a local cluster of ``workers`` processes on this machine's loopback, one thread
    each, with an equal share of its memory, no dashboard."""
    from distributed import Client, LocalCluster

    _quiet_logs()
    if engine.scheduler is None:
        with LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                          memory_limit="auto", host="127.0.0.1", dashboard_address=None,
                          # (its HTTP endpoints on the loopback too, on a free port)
                          scheduler_kwargs={"dashboard_address": "127.0.0.1:0"},
                          silence_logs=logging.CRITICAL) as cluster, \
                Client(cluster, set_as_default=False) as client:
            yield client
        return
    address, wait = engine.scheduler, engine.scheduler_timeout
    try:
        client = Client(address, timeout=wait, set_as_default=False)
    except (OSError, TimeoutError):
        raise InputError(address, f"no Dask scheduler answered within {wait:g} s "
                                  "(--scheduler-timeout)") from None
    with client:
        try:
            client.wait_for_workers(1, timeout=wait)
        except (OSError, TimeoutError):
            raise InputError(address, f"the Dask scheduler has no worker (none joined within "
                                      f"{wait:g} s)") from None
        yield client


def _renamed(out: UnitResult | UnitFailure, sent: str, unit: str) -> UnitResult | UnitFailure:
    """``out`` with the absolute path sent to the worker written back as the unit was
    given (the document names sources as the user typed them)."""
    if sent == unit:
        return out

    def name(path: str | None) -> str | None:
        return unit + path[len(sent):] if path is not None and path.startswith(sent) else path

    if isinstance(out, UnitFailure):
        return UnitFailure(name(out.path), out.reason)
    out.info["source"] = name(out.info["source"])
    for result in out.results:
        result["source"] = name(result.get("source"))
    for tl in out.timelines:
        tl.source = name(tl.source)
    return out


def on_cluster(units: list[str], task: UnitTask, engine: Engine, workers: int,
               done: Callable[[], None]) -> list[UnitResult | UnitFailure]:
    """Each unit analysed as one Dask task (:func:`analyze_unit`) on the engine's
    cluster (``workers`` local processes when it names no scheduler); outcomes in unit
    order. A unit whose task killed every worker it ran on comes back as a failure."""
    from distributed import as_completed
    from distributed.scheduler import KilledWorker

    sent = [os.path.abspath(u) for u in units]  # workers may run in another folder
    with _client(engine, workers) as client:
        futures = client.map(analyze_unit, sent, task=task, pure=False,
                             retries=engine.retries)
        for _ in as_completed(futures, loop=client.loop):
            done()
        outcomes: list[UnitResult | UnitFailure] = []
        for unit, path, future in zip(units, sent, futures):
            try:
                outcomes.append(_renamed(future.result(), path, unit))
            except KilledWorker:
                outcomes.append(UnitFailure(unit, "the workers analysing it died (out of "
                                                  "memory?)"))
    return outcomes


def _rank_row(unit: UnitResult, opts: Options) -> dict:
    """One rank's row: its captures' medians (:func:`summarize`)."""
    results, info = unit.results, unit.info
    s = summarize(results, opts.cold)
    return {"rank": info["rank"], "source": info["source"], "captures": len(results),
            "dropped_cold": s["dropped_cold"],
            "median_wall_us": s["median_wall_us"],
            "median_parallelism": s["median_parallelism"],
            "median_comm_comp_overlap_pct": s["median_comm_comp_overlap_pct"],
            "median_comm_exposed_us": s["median_comm_exposed_us"],
            "median_overlap_pct": s["median_overlap_pct"],
            "hta_comm_comp_overlap_pct": info["hta_comm_comp_overlap_pct"],
            "verdict_counts": s["verdict_counts"]}


def _document(units: list[UnitResult], opts: Options) -> dict:
    """The analysis document of the units read: captures, sources and, when every unit is
    a distinct rank, per-rank rows, a cross-rank summary and, from the ranks' summaries,
    the cross-rank answers (``cluster``: :func:`~.cluster.cross_rank`)."""
    captures = [c for u in units for c in u.results]
    ranks = {u.info["rank"] for u in units}
    doc = {"schema": SCHEMA, "captures": captures, "sources": [u.info for u in units]}
    if len(units) > 1 and None not in ranks and len(ranks) == len(units):
        by_rank = sorted(units, key=lambda u: u.info["rank"])
        doc["ranks"] = [_rank_row(u, opts) for u in by_rank]
        doc["summary"] = _cross_rank(doc["ranks"])
        if all(u.summary is not None for u in by_rank):
            doc["cluster"] = cross_rank([u.summary for u in by_rank])
    else:
        doc["summary"] = summarize(captures, opts.cold)
    hta = [u.info["hta_comm_comp_overlap_pct"] for u in units
           if u.info["hta_comm_comp_overlap_pct"] is not None]
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
