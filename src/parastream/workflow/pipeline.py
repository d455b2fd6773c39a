"""The image-classification pipeline demo: a serial loop, a plan from its stage times, the
same items pipelined, and the comparison (:func:`pipeline` -> :class:`PipelineResult`).

Decode + resize deterministic JPEGs, normalise, copy, run a small CNN, copy back, softmax +
top-k: first as a serial loop, then with every stage on its own worker/stream and bounded
queues between them (replicas given, or planned from the serial run's stage times). The
pipelined outputs are compared with the serial ones.

Both runs follow one error policy (``on_error``: ``fail``, ``skip`` or ``retry:N``, see
:mod:`parastream.pipeline.policy`); a failure it stops on is a :class:`PipelineError`
naming the run, the stage and the item. The comparison says whether other tasks took the
cores while it measured (``busy``, :class:`~parastream.cpu.busy.BusyWatch`, as ``run``
does) and flags a speedup above what the pipeline can give (``implausible``: more than
its workers, or the cores, can share the work).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterable, Iterator, Mapping, Sequence

from ..errors import InputError
from .result import document, extra

if TYPE_CHECKING:
    from ..pipeline.policy import ErrorPolicy

#: replicas of one stage at most: each is a worker thread, and thousands exhaust the
#: process's threads (a traceback after the whole serial run) long before they pay
MAX_REPLICAS = 256
MAX_ITEMS = 100_000
MAX_BATCH = 4096
MAX_THREADS = 1024


@dataclass(frozen=True)
class PipelineResult:
    """Serial vs pipelined: the document ``parastream pipeline --format json`` writes
    (:meth:`to_dict`) and both runs' timelines (``serial_timeline``,
    ``pipelined_timeline``: one lane per stage replica).

    ``outputs_identical``: the same items completed in both runs with the same outputs.
    ``on_error``: the error policy both runs followed (each run's ``skipped`` and
    ``retried`` items are in ``serial`` and ``pipelined``). ``busy``: a warning when other
    tasks took half the cores for over a quarter of the measurement (``busy_share``: the
    share of samples they did). ``implausible``: a warning when ``speedup`` is above
    ``speedup_limit``, the most the pipeline's workers on this machine's cores can give."""

    device: str
    items: int
    images_per_item: int
    plan: dict
    replicas: dict[str, int]
    depth: int
    ordered: bool
    serial: dict
    pipelined: dict
    speedup: float | None
    efficiency: float
    bottleneck: str | None
    bottleneck_utilization: dict
    outputs_identical: bool
    in_order: bool | None
    on_error: str = "fail"
    busy: str | None = None
    busy_share: float = 0.0
    speedup_limit: int | None = None
    implausible: str | None = None
    serial_timeline: Any = extra(default=None)
    pipelined_timeline: Any = extra(default=None)

    def to_dict(self) -> dict:
        """The comparison as a JSON-ready dict (no timelines)."""
        return document(self)


def check_sizes(items: int, batch: int, threads: int, depth: int | None) -> None:
    """Refuse sizes outside the bounds (an :class:`InputError` naming the flag): the items
    are made up front and the threads are torch's, so past these a run is a MemoryError
    or an allocation failure of the OpenMP runtime, not a measurement."""
    for flag, v, most in (("--items", items, MAX_ITEMS), ("--batch", batch, MAX_BATCH),
                          ("--threads", threads, MAX_THREADS)):
        if not 1 <= v <= most:
            raise InputError(None, f"{flag} must be from 1 to {most}, got {v}")
    if depth is not None and depth < 1:
        raise InputError(None, "--depth must be >= 1")


@dataclass(frozen=True)
class PipelineSettings:
    """Everything :func:`compare_runs` takes (:func:`pipeline`'s arguments, and the items
    whose first image is corrupt: ``corrupt``, a fault to try ``on_error`` on)."""

    items: int = 48
    batch: int = 4
    replicas: Mapping[str, int] | None = None
    depth: int | None = None
    ordered: bool = True
    threads: int = 1
    progress: bool = False
    on_error: str = "fail"
    corrupt: Sequence[int] = ()


def check_settings(s: PipelineSettings) -> "ErrorPolicy":
    """The sizes (:func:`check_sizes`), the error policy and the corrupt items' ids,
    each an :class:`InputError` naming its flag; the parsed policy."""
    from ..pipeline.policy import ErrorPolicy

    check_sizes(s.items, s.batch, s.threads, s.depth)
    try:
        policy = ErrorPolicy.parse(s.on_error)
    except ValueError as exc:
        raise InputError(None, f"--on-error: {exc}") from None
    wrong = [i for i in s.corrupt if not 0 <= i < s.items]
    if wrong:
        raise InputError(None, f"--corrupt: item {wrong[0]} is not one of the {s.items} items "
                               f"(ids 0 to {s.items - 1})")
    return policy


def speedup_check(speedup: float | None, workers: int, cores: int) -> tuple[int, str | None]:
    """The most a pipeline of ``workers`` stage workers can speed up its serial loop on
    ``cores`` cores (the work shared at most that many ways), and a warning when the
    measured ``speedup`` is above it: the serial baseline was disturbed (a busy machine),
    not the pipeline that fast."""
    limit = max(1, min(workers, cores))
    if speedup is None or speedup <= limit * (1 + 1e-9):
        return limit, None
    return limit, (f"implausible speedup {speedup:.2f}x: above {limit}x, the most "
                   f"{workers} stage worker(s) on {cores} core(s) can give; the serial "
                   "baseline was disturbed, so measure again on a quiet machine")


def require_workload_packages() -> None:
    """The workload decodes JPEGs (pillow) and runs a CNN (torch): an :class:`InputError`
    saying how to install them when either is missing."""
    try:
        import torch  # noqa: F401
        import PIL  # noqa: F401
    except ImportError as exc:
        raise InputError(None, f"the pipeline demo needs torch and pillow "
                               f"(pip install 'parastream[torch]'): {exc}") from None


def _ticking(it: Iterable[Any], prog: Any, description: str, total: int) -> Iterator[Any]:
    if prog is None:
        yield from it
        return
    task = prog.add_task(description, total=total)
    for x in it:
        yield x
        prog.advance(task)
    prog.remove_task(task)


def pipeline(items: int = 48, batch: int = 4, replicas: dict[str, int] | None = None,
             depth: int | None = None, ordered: bool = True, threads: int = 1,
             progress: bool = False, on_error: str = "fail") -> PipelineResult:
    """Serial run, plan, pipelined run of ``items`` batches of ``batch`` images.

    ``replicas`` (stage name -> workers) defaults to the plan from the serial run's stage
    times; ``depth`` (queue depth) to the plan's, at least the largest replica count.
    ``threads``: torch intra-op threads, set once for both runs. ``on_error``: what a
    stage raising on an item does in both runs, ``"fail"`` (stop: a
    :class:`~parastream.pipeline.PipelineError`), ``"skip"`` (drop the item, go on) or
    ``"retry:N"`` (call the stage again up to N times, then drop the item and go on).
    Raises :class:`InputError` on sizes out of bounds, a bad policy or without torch and
    pillow. :func:`compare_runs` takes the same as one :class:`PipelineSettings`."""
    return compare_runs(PipelineSettings(items, batch, replicas, depth, ordered, threads,
                                         progress, on_error))


def compare_runs(s: PipelineSettings) -> PipelineResult:
    """:func:`pipeline` with its settings in one record (and ``corrupt`` items)."""
    policy = check_settings(s)
    require_workload_packages()
    from ..cpu.busy import BusyWatch
    from ..report.progress import progress as progress_display
    from ..runtime.host import cpu_count, set_intra_op_threads
    from ..pipeline.core import Pipeline
    from ..pipeline.planner import plan
    from ..pipeline.workload import (WorkloadConfig, corrupt_items, make_items, make_model,
                                     make_stages)
    from .run import MEASURE_BUSY_ADVICE

    set_intra_op_threads(s.threads)  # once, here, in the main thread — never in a worker
    cfg = WorkloadConfig(batch=s.batch)
    model = make_model(cfg.classes)
    data = corrupt_items(make_items(s.items, cfg), s.corrupt)
    with progress_display(s.progress) as prog, BusyWatch(cpu_count()) as watch:
        warm = make_stages(cfg, model=model)
        serial = _serial(warm, data, policy, prog)
        times = {st.name: st.mean_ns / 1e9 for st in serial[1].stages}
        suggestion = plan(times, cores=cpu_count())
        reps = dict(s.replicas) if s.replicas is not None else suggestion.replicas
        # at least the largest replica count (docs/pipeline.md), of the replicas used
        qdepth = s.depth if s.depth is not None else max(suggestion.depth, *reps.values())
        stages = make_stages(cfg, reps, model=model)
        with Pipeline(stages, depth=qdepth, ordered=s.ordered, name="pipelined",
                      on_error=policy) as pipe, _naming_run("pipelined"):
            results = list(_ticking(pipe.results(data), prog, "pipelined", s.items))
            stats = pipe.stats()
            pipe_tl = pipe.timeline()
    result = _compare(serial[1], stats, suggestion, stages,
                      runs=(serial[0], results, serial[2], pipe_tl),
                      shape=(s.items, s.batch, s.threads, qdepth, s.ordered))
    return _flag(result, watch.note("the measurement", MEASURE_BUSY_ADVICE),
                 watch.busy_share(), cpu_count())


def _serial(stages: list, data: list, policy: Any, prog: Any) -> tuple:
    """The serial loop over ``data`` after two untimed items (first calls allocate and
    pick kernels): (outputs, stats, timeline). A run in which no item completed ends
    here, as the failure of its first item: there is nothing to plan or compare."""
    from ..pipeline.core import PipelineError, run_serial

    with _naming_run("serial"):
        run_serial(stages, data[:2], on_error=policy)
        out = run_serial(stages, _ticking(data, prog, "serial", len(data)), name="serial",
                         on_error=policy)
    stats = out[1]
    if stats.completed == 0 and stats.errors.first_cause is not None:
        item, stage, cause = stats.errors.first_cause
        err = PipelineError(stage, item, cause, stats.counts, stats.submitted)
        err.run, err.note = "serial", f"no item completed under --on-error {policy}"
        raise err from cause
    return out


@contextlib.contextmanager
def _naming_run(run: str) -> Iterator[None]:
    """Give a :class:`PipelineError` raised inside the name of the run it stopped."""
    from ..pipeline.core import PipelineError

    try:
        yield
    except PipelineError as exc:
        if exc.run is None:
            exc.run = run
        raise


def _flag(result: PipelineResult, busy: str | None, busy_share: float,
          cores: int) -> PipelineResult:
    """``result`` with the measurement's warnings: a busy machine, an implausible speedup."""
    from dataclasses import replace

    workers = sum(result.replicas.values())
    limit, implausible = speedup_check(result.speedup, workers, cores)
    return replace(result, busy=busy, busy_share=round(busy_share, 3), speedup_limit=limit,
                   implausible=implausible)


def _compare(serial: Any, stats: Any, suggestion: Any, stages: list, runs: tuple,
             shape: tuple) -> PipelineResult:
    """The comparison of the serial run (``serial``) and the pipelined one (``stats``);
    ``runs``: (serial outputs, pipelined item results, serial timeline, pipelined
    timeline); ``shape``: (items, batch, threads, queue depth, ordered)."""
    from ..pipeline.workload import same_outputs
    from ..runtime.host import cpu_count

    serial_out, results, serial_tl, pipe_tl = runs
    items, batch, threads, qdepth, ordered = shape
    got = [r.value for r in sorted(results, key=lambda r: r.id)]
    ids = sorted(r.id for r in results)
    in_order = [r.id for r in results] == ids if ordered else None
    same_items = serial.errors.skipped_items() == stats.errors.skipped_items()
    b = stats.bottleneck
    serial_b = next(s for s in serial.stages if b is not None and s.name == b.name)
    return PipelineResult(
        device=f"cpu, {cpu_count()} cores, torch intra-op threads {threads}",
        items=items, images_per_item=batch,
        plan=suggestion.to_dict(), replicas={s.name: s.replicas for s in stages},
        depth=qdepth, ordered=ordered,
        serial=serial.to_dict(), pipelined=stats.to_dict(),
        speedup=round(stats.throughput / serial.throughput, 3) if serial.throughput else None,
        efficiency=round(stats.efficiency, 4),
        bottleneck=b.name if b else None,
        bottleneck_utilization={"serial": round(serial_b.utilization, 4),
                                "pipelined": round(b.utilization, 4) if b else None},
        outputs_identical=same_items and same_outputs(serial_out, got), in_order=in_order,
        on_error=str(stats.errors.policy),
        serial_timeline=serial_tl, pipelined_timeline=pipe_tl)


__all__ = ["MAX_BATCH", "MAX_ITEMS", "MAX_REPLICAS", "MAX_THREADS", "PipelineResult",
           "PipelineSettings", "check_settings", "check_sizes", "compare_runs", "pipeline",
           "speedup_check"]
