"""The analysis behind ``parastream analyze``: profiler timelines read, per-stream busy time,
parallel points with overlap_pct and verdicts, barriers, gaps and core contention; with a
baseline, the 3a/3b/3c triage; with a plan, each op's planned stream checked.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from importlib import resources
from typing import Any, Callable, Sequence

from ..errors import InputError
from ..plan.io import PlanDoc, load_doc
from ..plan.verify import verify
from ..timeline.analyze import Options
from ..timeline.ranks import Engine, analyze_paths
from ..timeline.triage import triage
from .result import document, extra

#: the document keys only some analyses have (several ranks, broken members, a baseline)
_OPTIONAL = ("ranks", "cluster", "broken", "triage", "baseline")


def default_trace() -> str:
    """The real trace shipped with the package (3 CUDA streams, Stream Wait Events)."""
    return str(resources.files("parastream") / "data" / "cuda_event_sync_multi_stream.json.gz")


@dataclass(frozen=True)
class Analysis:
    """The ``parastream.analysis/1`` document as fields: ``captures`` (one analysis per
    capture, with its ``plan_check`` when a plan was given), ``sources``, ``summary``
    (medians over the warm captures, or across ranks), and when there are any: per-rank
    rows, the cross-rank answers (``cluster``: who made the others wait, per collective,
    step and rank, the communication matrix), broken folder members, the triage against a baseline and the baseline's
    summary. ``timelines`` (one per capture, when kept) and ``paths`` (what was read)
    are not in :meth:`to_dict`."""

    schema: str
    captures: list[dict]
    sources: list[dict]
    ranks: list[dict] | None = None  # the document has them before the summary
    summary: dict = dataclasses.field(default_factory=dict)
    cluster: dict | None = None
    broken: list[dict] | None = None
    triage: dict | None = None
    baseline: dict | None = None
    timelines: tuple = extra(default=())
    paths: tuple[str, ...] = extra(default=())

    def to_dict(self) -> dict:
        """The analysis document (``analyze --format json``)."""
        return document(self, optional=_OPTIONAL)


@dataclass
class AnalyzeOptions(Options):
    """The timeline :class:`~parastream.timeline.analyze.Options` (main stream, side and
    dominator regexes, window gap, cold captures, core counts, points listed, step split)
    and how to read: ``strict`` (a broken folder member fails), ``jobs`` (local worker
    processes for several units, 0 = one per core, 1 = in this process), ``scheduler``
    (the address of a running Dask scheduler whose workers analyse the units instead,
    ``tcp://HOST:PORT``) and ``scheduler_timeout`` (seconds it has to answer),
    ``timelines`` (keep them in the result, for the HTML and Perfetto renderers),
    ``progress`` (a transient progress display on stderr, when it is a terminal) and
    ``warn`` (called with one line per broken member skipped, or None)."""

    strict: bool = False
    jobs: int = 0
    scheduler: str | None = None
    scheduler_timeout: float = 10.0
    timelines: bool = False
    progress: bool = False
    warn: Callable[[str], None] | None = None

    def timeline_options(self) -> Options:
        """The timeline analysis options alone."""
        return Options(**{f.name: getattr(self, f.name) for f in dataclasses.fields(Options)})

    def engine(self) -> Engine:
        """Where several units are analysed (local workers, or the scheduler's)."""
        return Engine(jobs=self.jobs, scheduler=self.scheduler,
                      scheduler_timeout=self.scheduler_timeout)


def _check(paths: Sequence[str], baseline: str | None, opts: AnalyzeOptions,
           plan: str | None, candidate: str | None) -> None:
    """Refuse contradictory or out-of-range settings before any trace is read."""
    if baseline and any(os.path.realpath(baseline) == os.path.realpath(p) for p in paths):
        raise InputError(baseline, "--baseline is one of the traces analysed: compare "
                                   "against a single-stream capture of the same model")
    for flag, v in (("--cold", opts.cold), ("--max-points", opts.max_points),
                    ("-j/--jobs", opts.jobs)):
        if v < 0:
            raise InputError(None, f"{flag} must not be negative, got {v}")
    for flag, v in (("--cores", opts.cores), ("--vector-cores", opts.vector_cores)):
        if v is not None and v <= 0:
            raise InputError(None, f"{flag} must be positive")
    gap = opts.window_gap_us
    if gap is not None and not 0 <= gap < float("inf"):
        raise InputError(None, "--window-gap must be a finite, non-negative number of "
                               "microseconds")
    wait = opts.scheduler_timeout
    if not 0 < wait < float("inf"):
        raise InputError(None, f"--scheduler-timeout must be a positive number of seconds, "
                               f"got {wait:g}")
    if candidate and not plan:
        raise InputError(None, "--candidate picks the candidate of --plan FILE to check")


def _with_baseline(doc: dict, baseline: str, opts: AnalyzeOptions, prog: Any) -> None:
    """Add the triage against single-stream capture ``baseline`` and its summary."""
    # --main-stream names a stream of the traces analysed; the single-stream baseline's
    # stream ids are its own (its main is its busiest compute stream)
    base_opts = dataclasses.replace(opts.timeline_options(), main_stream=None)
    base_doc, _ = analyze_paths([baseline], base_opts, engine=Engine(jobs=1),
                               progress=prog)
    doc["triage"] = triage(base_doc, doc)
    doc["baseline"] = {"source": baseline, "summary": base_doc["summary"]}


def broken_warnings(doc: dict) -> list[str]:
    """One line per folder member that could not be read, then the count analysed."""
    broken = doc.get("broken") or []
    lines = [f"parastream: warning: {b['source']}: {b['error']} (skipped)" for b in broken]
    if broken:
        s = doc["summary"]
        lines.append(f"parastream: warning: {s['units_analysed']} of {s['units']} analysed "
                     "(--strict makes a broken member an error)")
    return lines


def _check_plan(doc: dict, timelines: list, plan_doc: PlanDoc, plan: str,
                candidate: str | None) -> None:
    """Each capture's ``plan_check`` against its candidate (:func:`verify`); an InputError
    when no capture holds any planned op (another model's plan)."""
    for cap, tl in zip(doc["captures"], timelines):  # each its own candidate (verify)
        cap["plan_check"] = verify(tl, plan_doc, candidate)
    checks = [c["plan_check"] for c in doc["captures"]]
    if checks and all(c["ops_found"] == 0 and c["ops_planned"] for c in checks):
        raise InputError(plan, f"none of the {checks[0]['ops_planned']} ops of candidate "
                               f"{checks[0]['candidate']!r} is in the trace: the plan is for "
                               "another model, or the trace names ops otherwise")


def analyze(paths: str | Sequence[str] | None = None, *, baseline: str | None = None,
            plan: str | None = None, candidate: str | None = None,
            **options: Any) -> Analysis:
    """Analyse profiler traces (files or profiler folders; several = several captures;
    default: the sample trace shipped with parastream). ``baseline`` is a single-stream
    capture to triage against; ``plan`` a plan file whose ``candidate`` (default: the one
    a trace names, else the recommended one) each capture is checked against; ``options``
    are the fields of :class:`AnalyzeOptions`. Bad input raises
    :class:`~parastream.errors.InputError`."""
    from ..report.progress import progress  # (rich, only on a terminal)

    opts = AnalyzeOptions(**options)
    paths = [paths] if isinstance(paths, (str, os.PathLike)) else list(paths or [])
    _check(paths, baseline, opts, plan, candidate)
    paths = [os.fspath(p) for p in paths] or [default_trace()]
    plan_doc = None
    if plan:
        plan_doc, _ = load_doc(plan, candidate)  # an unknown candidate fails now
    keep = bool(opts.timelines or plan_doc)
    with progress(opts.progress) as prog:
        doc, timelines = analyze_paths(paths, opts.timeline_options(), engine=opts.engine(),
                                       keep_timelines=keep, progress=prog, strict=opts.strict)
        if baseline:
            _with_baseline(doc, baseline, opts, prog)
    for line in broken_warnings(doc) if opts.warn else ():
        opts.warn(line)
    if plan_doc is not None:
        _check_plan(doc, timelines, plan_doc, plan, candidate)
    return Analysis(**doc, timelines=tuple(timelines), paths=tuple(paths))


__all__ = ["Analysis", "AnalyzeOptions", "analyze", "broken_warnings", "default_trace"]
