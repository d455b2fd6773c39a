"""The image-classification pipeline demo: a serial loop, a plan from its stage times, the
same items pipelined, and the comparison (:func:`pipeline` -> :class:`PipelineResult`).

Decode + resize deterministic JPEGs, normalise, copy, run a small CNN, copy back, softmax +
top-k: first as a serial loop, then with every stage on its own worker/stream and bounded
queues between them (replicas given, or planned from the serial run's stage times). The
pipelined outputs are compared with the serial ones.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Iterable, Iterator

from ..errors import InputError
from .result import document, extra

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
    ``pipelined_timeline``: one lane per stage replica)."""

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
             progress: bool = False) -> PipelineResult:
    """Serial run, plan, pipelined run of ``items`` batches of ``batch`` images.

    ``replicas`` (stage name -> workers) defaults to the plan from the serial run's stage
    times; ``depth`` (queue depth) to the plan's, at least the largest replica count.
    ``threads``: torch intra-op threads, set once for both runs. Raises
    :class:`InputError` on sizes out of bounds or without torch and pillow."""
    check_sizes(items, batch, threads, depth)
    require_workload_packages()
    from ..report.text import progress as progress_display
    from ..runtime.host import set_intra_op_threads
    from ..pipeline.core import Pipeline, run_serial
    from ..pipeline.planner import plan
    from ..pipeline.workload import WorkloadConfig, make_items, make_model, make_stages

    set_intra_op_threads(threads)  # once, here, in the main thread — never in a worker
    cfg = WorkloadConfig(batch=batch)
    model = make_model(cfg.classes)
    with progress_display(progress) as prog:
        data = make_items(items, cfg)
        warm = make_stages(cfg, model=model)
        run_serial(warm, data[:2])  # first calls allocate and pick kernels: not timed
        serial_out, serial, serial_tl = run_serial(
            warm, _ticking(data, prog, "serial", items), name="serial")
        times = {s.name: s.mean_ns / 1e9 for s in serial.stages}
        suggestion = plan(times, cores=os.cpu_count() or 1)
        reps = replicas if replicas is not None else suggestion.replicas
        # at least the largest replica count (docs/pipeline.md), of the replicas used
        qdepth = depth if depth is not None else max(suggestion.depth, *reps.values())
        stages = make_stages(cfg, reps, model=model)
        with Pipeline(stages, depth=qdepth, ordered=ordered, name="pipelined") as pipe:
            results = list(_ticking(pipe.results(data), prog, "pipelined", items))
            stats = pipe.stats()
            pipe_tl = pipe.timeline()
    return _compare(serial, stats, suggestion, stages,
                    runs=(serial_out, results, serial_tl, pipe_tl),
                    shape=(items, batch, threads, qdepth, ordered))


def _compare(serial: Any, stats: Any, suggestion: Any, stages: list, runs: tuple,
             shape: tuple) -> PipelineResult:
    """The comparison of the serial run (``serial``) and the pipelined one (``stats``);
    ``runs``: (serial outputs, pipelined item results, serial timeline, pipelined
    timeline); ``shape``: (items, batch, threads, queue depth, ordered)."""
    from ..pipeline.workload import same_outputs

    serial_out, results, serial_tl, pipe_tl = runs
    items, batch, threads, qdepth, ordered = shape
    got = [r.value for r in sorted(results, key=lambda r: r.id)]
    in_order = [r.id for r in results] == list(range(len(results))) if ordered else None
    b = stats.bottleneck
    serial_b = next(s for s in serial.stages if b is not None and s.name == b.name)
    return PipelineResult(
        device=f"cpu, {os.cpu_count()} cores, torch intra-op threads {threads}",
        items=items, images_per_item=batch,
        plan=suggestion.to_dict(), replicas={s.name: s.replicas for s in stages},
        depth=qdepth, ordered=ordered,
        serial=serial.to_dict(), pipelined=stats.to_dict(),
        speedup=round(stats.throughput / serial.throughput, 3) if serial.throughput else None,
        efficiency=round(stats.efficiency, 4),
        bottleneck=b.name if b else None,
        bottleneck_utilization={"serial": round(serial_b.utilization, 4),
                                "pipelined": round(b.utilization, 4) if b else None},
        outputs_identical=same_outputs(serial_out, got), in_order=in_order,
        serial_timeline=serial_tl, pipelined_timeline=pipe_tl)


__all__ = ["MAX_BATCH", "MAX_ITEMS", "MAX_REPLICAS", "MAX_THREADS", "PipelineResult",
           "check_sizes", "pipeline"]
